#include "loop/partition_loops.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/rebind_buffers.h"
#include "loop/simplify_indices.h"

namespace kiln::loop {

namespace {

using Extents = std::map<std::string, int64_t>;
// The values of the Int64 Lets in scope that nothing reassigns: a condition on `t3` where
// `t3 = kiln_xt` (the lowerings name shared index parts) is a condition on kiln_xt.
// Bool Lets too: the shared-expression hoisting names a Concat's part tests (`bool t0 = (i1 <
// 384)`) and the selects read `t0`.
using Defs = std::map<std::string, Expr>;
bool bound_value(const Stmt& let) { return let->value->type == DType::Int64 || let->value->type == DType::Bool; }

// `e` with the variables of `defs` replaced by their values (which may name earlier Lets).
Expr inline_lets(const Expr& e, const Defs& defs, int depth = 0) {
  if (e->kind == ExprKind::Var && depth < 16) {
    auto it = defs.find(e->name);
    return it == defs.end() ? e : inline_lets(it->second, defs, depth + 1);
  }
  return map_args(e, [&](const Expr& a) { return inline_lets(a, defs, depth); });
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

bool calls(const std::vector<Stmt>& body) {
  for (const Stmt& s : body)
    if (s->kind == StmtKind::Call || calls(s->body) || calls(s->else_body)) return true;
  return false;
}

// The size of statements: each statement and each node of its expressions. The budget counts
// this rather than statements: a piece of a Concat's loop keeps one part's load of a select chain
// over all parts, so splitting a 25-part Concat into 25 pieces adds little code.
int64_t expr_size(const Expr& e) {
  if (!e) return 0;
  int64_t n = 1;
  for (const Expr& a : e->args) n += expr_size(a);
  return n;
}
int64_t node_count(const std::vector<Stmt>& body) {
  int64_t n = 0;
  for (const Stmt& s : body)
    n += 1 + expr_size(s->extent) + expr_size(s->index) + expr_size(s->value) + expr_size(s->cond) +
         node_count(s->body) + node_count(s->else_body);
  return n;
}

std::optional<int64_t> const_of(const Expr& e) {
  if (e && e->kind == ExprKind::IntImm) return e->int_value;
  return std::nullopt;
}

// The points in (0, n) where a comparison of `cond` changes its value as `v` goes 0 .. n-1, for
// every value the other loop variables (extents `ext`) take.
void split_points(const Expr& cond, const std::string& v, int64_t n, const Extents& ext, const Defs& defs,
                  std::set<int64_t>& out) {
  if (cond->kind == ExprKind::Var) {
    auto it = defs.find(cond->name);
    if (it != defs.end() && it->second->type == DType::Bool) split_points(it->second, v, n, ext, defs, out);
    return;
  }
  if (cond->kind == ExprKind::Unary && cond->un == UnOp::Not) return split_points(cond->args[0], v, n, ext, defs, out);
  if (cond->kind != ExprKind::Binary) return;
  const BinOp op = cond->bin;
  if (op == BinOp::And || op == BinOp::Or) {
    split_points(cond->args[0], v, n, ext, defs, out);
    split_points(cond->args[1], v, n, ext, defs, out);
    return;
  }
  if (op != BinOp::Lt && op != BinOp::Le && op != BinOp::Gt && op != BinOp::Ge) return;
  const Expr& a = cond->args[0];
  const Expr& b = cond->args[1];
  if (a->type != DType::Int64 || b->type != DType::Int64) return;
  // Normalised to h < 0: a < b is a - b < 0, a <= b is a - b - 1 < 0, a > b is b - a < 0,
  // a >= b is b - a - 1 < 0.
  const bool flip = op == BinOp::Gt || op == BinOp::Ge;
  Expr h = binary(BinOp::Sub, flip ? b : a, flip ? a : b);
  if (op == BinOp::Le || op == BinOp::Ge) h = binary(BinOp::Sub, h, int_imm(1));
  auto f = affine_form(inline_lets(h, defs), AffineScope{});
  if (!f) return;
  const int64_t c = f->coef_of(v);
  if (c == 0) return;
  AffineForm rest = f->filtered([&](const std::string& k) { return k != v; });
  auto r = affine_bounds(rest, ext);
  if (!r) return;
  // h = c·v + k + r, r ∈ [lo, hi].
  const int64_t lo = r->lo + f->constant, hi = r->hi + f->constant;
  std::vector<int64_t> pts;
  if (c > 0) {
    // True for every r while c·v + hi < 0; false for every r from c·v + lo >= 0.
    pts = {floor_div(-hi - 1, c) + 1, -floor_div(lo, c)};
  } else {
    // -c·v > r: false for every r while -c·v <= lo; true for every r from -c·v > hi.
    pts = {floor_div(lo, -c) + 1, floor_div(hi, -c) + 1};
  }
  for (int64_t p : pts)
    if (p > 0 && p < n) out.insert(p);
}

// Every select condition in `body`, with the extents of the loops around it and the Lets before it.
struct Scope {
  Extents ext;
  Defs defs;
};

void collect_expr(const Expr& e, const std::string& v, int64_t n, const Scope& sc, std::set<int64_t>& out) {
  if (!e) return;
  if (e->kind == ExprKind::Select) split_points(e->args[0], v, n, sc.ext, sc.defs, out);
  for (const Expr& a : e->args) collect_expr(a, v, n, sc, out);
}

void collect(const std::vector<Stmt>& body, const std::string& v, int64_t n, Scope sc, const std::set<std::string>& assigned,
             std::set<int64_t>& out) {
  for (const Stmt& s : body) {
    for (const Expr* e : {&s->extent, &s->index, &s->value, &s->cond}) collect_expr(*e, v, n, sc, out);
    Scope inner = sc;
    if (s->kind == StmtKind::For) {
      if (s->var == v) continue;  // shadowed
      if (auto m = const_of(s->extent); m && *m >= 1) inner.ext[s->var] = *m;
      else inner.ext.erase(s->var);
      sched::forget_binding(inner.defs, s->var);
    }
    if (s->kind == StmtKind::Let || s->kind == StmtKind::Assign) {
      if (s->var == v) return;  // v shadowed from here on
      sc.ext.erase(s->var);
      sched::forget_binding(sc.defs, s->var);
      if (s->kind == StmtKind::Let && bound_value(s) && !assigned.count(s->var)) sc.defs[s->var] = s->value;
      inner = sc;
    }
    collect(s->body, v, n, inner, assigned, out);
    collect(s->else_body, v, n, sc, assigned, out);
  }
}



class Partitioner {
 public:
  Partitioner(int max_pieces, int64_t budget, std::set<std::string> taken, std::set<std::string> assigned)
      : max_pieces_(max_pieces), budget_(budget), taken_(std::move(taken)), assigned_(std::move(assigned)) {}

  std::vector<Stmt> list(const std::vector<Stmt>& body, const Extents& ext) {
    const Defs saved = defs_;
    std::vector<Stmt> out;
    for (const Stmt& s : body) {
      for (Stmt& p : stmt(s, ext)) out.push_back(std::move(p));
      if (s->kind == StmtKind::Let || s->kind == StmtKind::Assign) {
        sched::forget_binding(defs_, s->var);
        if (s->kind == StmtKind::Let && bound_value(s) && !assigned_.count(s->var)) defs_[s->var] = s->value;
      }
    }
    defs_ = saved;
    return out;
  }

 private:
  std::vector<Stmt> stmt(const Stmt& s, const Extents& ext) {
    Extents inner = ext;
    const auto n = s->kind == StmtKind::For ? const_of(s->extent) : std::nullopt;
    const Defs saved = defs_;
    if (s->kind == StmtKind::For) {
      if (n && *n >= 1) inner[s->var] = *n;
      else inner.erase(s->var);
      sched::forget_binding(defs_, s->var);
    }
    struct Restore {
      Defs& d;
      Defs saved;
      ~Restore() { d = std::move(saved); }
    } restore{defs_, saved};
    if (n && *n > 1 && s->for_kind != ForKind::Unrolled && !calls(s->body)) {
      std::set<int64_t> pts;
      collect(s->body, s->var, *n, Scope{inner, defs_}, assigned_, pts);
      if (!pts.empty() && int64_t(pts.size()) < max_pieces_) {
        pts.insert(*n);
        // The piece [start, end): the loop over end - start iterations whose body reads the
        // variable as var + start.
        auto piece_body = [&](int64_t start) {
          return start ? sched::substitute(s->body, {{s->var, add(var(s->var), int_imm(start))}}) : s->body;
        };
        // Profitability: the code the pieces add once their decided selects fold (what
        // simplify_indices makes of each piece alone, its variable's range known), within the
        // kernel's budget. Splits inside the pieces are charged when they are made.
        int64_t size = 0, start = 0;
        for (int64_t end : pts) {
          LoopKernel folded;
          folded.body = for_loop(s->var, int_imm(end - start), piece_body(start), s->for_kind);
          simplify_indices(folded);
          size += node_count({folded.body});
          start = end;
        }
        const int64_t growth = size - node_count({s});
        if (growth <= budget_) {
          budget_ -= std::max<int64_t>(growth, 0);
          split_ = true;
          // The pieces' own splits draw on the budget longest piece first: the budget goes
          // where the iterations are (a strided depthwise conv's interior rows, not its first
          // row, whose splits had used it up).
          const std::vector<int64_t> ends(pts.begin(), pts.end());
          std::vector<int64_t> starts(ends.size(), 0);
          for (size_t i = 1; i < ends.size(); ++i) starts[i] = ends[i - 1];
          std::vector<size_t> order(ends.size());
          for (size_t i = 0; i < order.size(); ++i) order[i] = i;
          std::stable_sort(order.begin(), order.end(),
                           [&](size_t a, size_t b) { return ends[a] - starts[a] > ends[b] - starts[b]; });
          std::vector<std::vector<Stmt>> bodies(ends.size());
          for (size_t i : order) {
            Extents piece = ext;
            piece[s->var] = ends[i] - starts[i];
            bodies[i] = list(piece_body(starts[i]), piece);
          }
          std::vector<Stmt> pieces;
          for (size_t i = 0; i < ends.size(); ++i) {
            Stmt loop = for_loop(s->var, int_imm(ends[i] - starts[i]), std::move(bodies[i]), s->for_kind);
            if (starts[i]) {
              // Every later piece binds names of its own, so that loop names stay unique in the
              // kernel (the schedule transforms find loops by name).
              loop = rename_bound_vars({loop}, taken_)[0];
              sched::bound_names(loop, taken_);
            }
            pieces.push_back(loop);
          }
          return pieces;
        }
      }
    }
    auto c = std::make_shared<StmtNode>(*s);
    c->body = list(s->body, inner);
    c->else_body = list(s->else_body, ext);
    return {c};
  }

  int max_pieces_;
  int64_t budget_;
  std::set<std::string> taken_;
  std::set<std::string> assigned_;
  Defs defs_;  // the Lets around the statement being partitioned (Partitioner::list)

 public:
  bool split_ = false;
};

}  // namespace

bool partition_loops(LoopKernel& k, int max_pieces) {
  if (!k.body) return false;
  // The pieces may add up to twice the kernel's size (node_count) once their selects fold.
  std::set<std::string> taken, assigned;
  sched::bound_names(k.body, taken);
  sched::assigned_names(k.body, assigned);
  Partitioner p(max_pieces, 2 * node_count({k.body}), std::move(taken), std::move(assigned));
  std::vector<Stmt> out = p.list({k.body}, Extents{});
  k.body = out.size() == 1 ? out[0] : block(std::move(out));
  return p.split_;
}

}  // namespace kiln::loop
