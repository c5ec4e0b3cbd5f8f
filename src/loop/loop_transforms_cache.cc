// cache_read and the default schedule policy (loop_transforms.h).
#include <algorithm>
#include <unordered_map>

#include "loop/loop_transforms.h"
#include "loop/partition_loops.h"
#include "loop/simplify_indices.h"
#include "loop/unswitch_selects.h"
#include "loop/loop_transforms_internal.h"

namespace kiln::loop {

using namespace sched;

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// One load of the cached buffer split over the buffer's dimensions: per dimension, the part in the
// region's loop variables (plus a constant) and the invariant part.
struct DimParts {
  std::vector<AffineForm> varying, invariant;
};

// Rewrites the loads whose nodes are keys of `m` (deep copy, sharing what does not change).
class LoadRewriter {
 public:
  explicit LoadRewriter(const std::unordered_map<const ExprNode*, Expr>& m) : m_(m) {}

  Expr expr(const Expr& e) {
    if (!e) return e;
    if (auto it = m_.find(e.get()); it != m_.end()) return it->second;
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    return memo_[e.get()] = map_args(e, [&](const Expr& a) { return expr(a); });
  }

  Stmt stmt(const Stmt& s) {
    return map_stmt(s, [&](const Expr& e) { return expr(e); }, [&](const Stmt& b) { return stmt(b); });
  }

 private:
  const std::unordered_map<const ExprNode*, Expr>& m_;
  std::unordered_map<const ExprNode*, Expr> memo_;
};

void add_term(AffineForm& f, const std::string& key, const Expr& atom, int64_t c) {
  if (c == 0) return;
  const int64_t sum = f.coef_of(key) + c;
  if (sum == 0) {
    f.coef.erase(key);
    f.atoms.erase(key);
  } else {
    f.coef[key] = sum;
    f.atoms[key] = atom;
  }
}

}  // namespace

std::string cache_read(LoopKernel& k, const std::string& buffer, const std::string& at) {
  BufferPtr b;
  for (const auto* list : {&k.inputs, &k.outputs})
    for (const auto& x : *list)
      if (x->name == buffer) b = x;
  if (!b) refuse("kernel ", k.name, " has no global buffer '", buffer, "'");
  const Path p = find_loop(k, at);
  const Region r = analyze_region(p.back());
  if (r.written.count(b.get())) refuse("cannot cache ", buffer, " at loop ", at, ": the loop writes it");
  if (r.has_call) refuse("cannot cache ", buffer, " at loop ", at, ": it calls a micro-kernel whose accesses are unknown");
  std::vector<const Access*> loads;
  for (const auto& a : r.accesses)
    if (a.buffer == b) loads.push_back(&a);
  if (loads.empty()) refuse("loop ", at, " does not read ", buffer);

  // Row-major strides of the buffer (a scalar is one element).
  const Shape shape = b->shape.empty() ? Shape{1} : b->shape;
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) stride[d] = stride[d + 1] * std::max<int64_t>(shape[d + 1], 1);

  std::set<std::string> region_loops;
  for (const auto* l : r.loops) region_loops.insert(l->var);
  const AffineScope scope = r.scope();
  std::vector<DimParts> parts;
  std::vector<Interval> box(rank, Interval{INT64_MAX, INT64_MIN});
  for (const Access* a : loads) {
    std::string why;
    auto f = affine_form(a->index, scope, &why);
    if (!f) refuse("cannot cache ", buffer, " at loop ", at, ": ", why);
    DimParts dp{std::vector<AffineForm>(rank), std::vector<AffineForm>(rank)};
    std::map<std::string, int64_t> extents;
    for (const auto& [key, c] : f->coef) {
      if (r.lets.count(key))
        refuse("cannot cache ", buffer, " at loop ", at, ": index ", buffer, "[", print_expr(a->index),
               "] depends on scalar '", key, "' computed in the loop");
      // A term goes to the outermost dimension whose stride divides its coefficient: any such
      // factoring is exact (flat = Σ stride·part); this one makes the box tight for in-range parts.
      size_t d = 0;
      while (c % stride[d] != 0) ++d;
      const bool in_region = region_loops.count(key) != 0;
      add_term(in_region ? dp.varying[d] : dp.invariant[d], key, f->atoms.at(key), c / stride[d]);
      if (in_region) {
        const StmtNode* l = nullptr;
        for (const auto* x : a->loops)
          if (x->var == key) l = x;
        if (!l || const_extent(*l) < 1)
          refuse("cannot cache ", buffer, " at loop ", at, ": loop ", key, " has no constant extent");
        extents[key] = const_extent(*l);
      }
    }
    int64_t rem = f->constant;
    for (size_t d = 0; d < rank; ++d) {
      dp.varying[d].constant = floor_div(rem, stride[d]);
      rem -= dp.varying[d].constant * stride[d];
    }
    for (size_t d = 0; d < rank; ++d) {
      if (!parts.empty() && !(parts[0].invariant[d] == dp.invariant[d]))
        refuse("cannot cache ", buffer, " at loop ", at, ": loads ", buffer, "[", print_expr(loads[0]->index),
               "] and ", buffer, "[", print_expr(a->index), "] are at unrelated offsets");
      auto bd = affine_bounds(dp.varying[d], extents);
      if (!bd) refuse("cannot cache ", buffer, " at loop ", at, ": cannot bound ", buffer, "[", print_expr(a->index), "]");
      box[d].lo = std::min(box[d].lo, bd->lo);
      box[d].hi = std::max(box[d].hi, bd->hi);
    }
    parts.push_back(std::move(dp));
  }

  // The local tile: the box's dimensions wider than one element, row-major.
  std::vector<size_t> kept;
  Shape tile;
  int64_t tile_n = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t w = box[d].hi - box[d].lo + 1;
    if (w > 1) {
      kept.push_back(d);
      tile.push_back(w);
      if (__builtin_mul_overflow(tile_n, w, &tile_n)) tile_n = INT64_MAX;
    }
  }
  if (tile_n > b->numel())
    refuse("cannot cache ", buffer, " at loop ", at, ": its tile is larger than the buffer");
  if (tile.empty()) tile = {1};
  std::vector<int64_t> tstride(kept.size(), 1);
  for (size_t j = kept.size(); j-- > 1;) tstride[j - 1] = tstride[j] * tile[j];

  auto used = names_in(k);
  auto local = std::make_shared<Buffer>(Buffer{fresh_name(buffer + "_local", used), b->dtype, tile, Scope::Local});

  // The copy: local[c] = b[Σ stride_d·(invariant_d + lo_d + c_d)] over the tile.
  AffineForm src, dst;
  std::map<std::string, int64_t> src_extents;
  std::vector<std::string> cvars(rank);
  for (size_t d = 0; d < rank; ++d) {
    src.constant += stride[d] * box[d].lo;
    for (const auto& [key, c] : parts[0].invariant[d].coef) add_term(src, key, parts[0].invariant[d].atoms.at(key), c * stride[d]);
  }
  for (size_t j = 0; j < kept.size(); ++j) {
    const size_t d = kept[j];
    cvars[d] = fresh_name(buffer + "_c" + std::to_string(d), used);
    add_term(src, cvars[d], var(cvars[d]), stride[d]);
    add_term(dst, cvars[d], var(cvars[d]), tstride[j]);
    src_extents[cvars[d]] = tile[j];
  }
  // Invariant atoms with a known range are the variables of constant loops around `at`.
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i]->kind == StmtKind::For && const_extent(*p[i]) >= 1) src_extents[p[i]->var] = const_extent(*p[i]);
  const Expr src_e = src.to_expr();
  Stmt copy = store(local, dst.to_expr(), load(b, src_e));
  // The box may cover points no iteration reads (a guarded tail): copy only what is in bounds.
  const auto bounds = affine_bounds(src, src_extents);
  const bool low = !bounds || bounds->lo < 0, high = !bounds || bounds->hi >= b->numel();
  const Expr ge = binary(BinOp::Ge, src_e, int_imm(0)), lt = binary(BinOp::Lt, src_e, int_imm(b->numel()));
  if (low || high) copy = if_then(low && high ? binary(BinOp::And, ge, lt) : low ? ge : lt, {copy});
  for (size_t j = kept.size(); j-- > 0;) copy = for_loop(cvars[kept[j]], int_imm(tile[j]), {copy});

  // The loads, redirected: local[Σ tstride_j·(varying_d − lo_d)].
  std::unordered_map<const ExprNode*, Expr> redirect;
  for (size_t i = 0; i < loads.size(); ++i) {
    AffineForm idx;
    for (size_t j = 0; j < kept.size(); ++j) {
      const AffineForm& v = parts[i].varying[kept[j]];
      idx.constant += tstride[j] * (v.constant - box[kept[j]].lo);
      for (const auto& [key, c] : v.coef) add_term(idx, key, v.atoms.at(key), c * tstride[j]);
    }
    redirect[loads[i]->node.get()] = load(local, idx.to_expr());
  }
  Stmt rewritten = LoadRewriter(redirect).stmt(p.back());
  k.body = replace_node(p, {allocate(local, {copy, rewritten})});
  return local->name;
}

// ---------------------------------------------------------------- default policy

namespace {

int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

// Statements executed, counting a loop of unknown extent once.
int64_t work(const std::vector<Stmt>& body) {
  int64_t w = 0;
  for (const auto& s : body) {
    switch (s->kind) {
      case StmtKind::For: w = sat_add(w, sat_mul(std::max<int64_t>(const_extent(*s), 1), std::max<int64_t>(work(s->body), 1))); break;
      case StmtKind::If: w = sat_add(w, std::max(work(s->body), work(s->else_body))); break;
      case StmtKind::Block:
      case StmtKind::Allocate: w = sat_add(w, work(s->body)); break;
      case StmtKind::Comment: break;
      default: w = sat_add(w, 1); break;
    }
  }
  return w;
}

bool has_loop(const std::vector<Stmt>& body) {
  for (const auto& s : body)
    if (s->kind == StmtKind::For || has_loop(s->body) || has_loop(s->else_body)) return true;
  return false;
}

void innermost_serial(const Stmt& s, std::vector<std::string>& out) {
  if (s->kind == StmtKind::For && s->for_kind == ForKind::Serial && !has_loop(s->body)) out.push_back(s->var);
  for (const auto* list : {&s->body, &s->else_body})
    for (const auto& c : *list) innermost_serial(c, out);
}

void outermost_loops(const Stmt& s, std::vector<Stmt>& out) {
  if (s->kind == StmtKind::For) {
    out.push_back(s);
    return;
  }
  for (const auto* list : {&s->body, &s->else_body})
    for (const auto& c : *list) outermost_loops(c, out);
}

}  // namespace

void apply_default_schedule(LoopKernel& k, const Schedule& s) {
  if (!k.body) return;
  // First: indices without the divisions, clamps and selects the loop ranges prove redundant, so
  // that the affine analysis below can prove more loops independent and the C compiler vectorises
  // them; loops split where a select's condition changes (partition_loops.h), and simplified
  // again, which folds those selects.
  simplify_indices(k);
  if (partition_loops(k)) simplify_indices(k);
  // Then innermost loops specialised on the select conditions they do not change
  // (unswitch_selects.h), before the innermost loops are vectorised.
  unswitch_selects(k);
  std::vector<std::string> inner;
  innermost_serial(k.body, inner);
  for (const auto& name : inner) {
    try {
      const int64_t n = const_extent(*find_loop(k, name).back());
      if (n >= 0 && n <= s.unroll) {
        if (n > 1) unroll(k, name, s.unroll);
      } else if (s.vector_width >= 2) {
        vectorize(k, name, s.vector_width);
      }
    } catch (const ScheduleError&) {
      // Not provably legal: the loop stays serial.
    }
  }
  // The strip-mined variables (i = i_o·w + i_i) bring their own ranges: an unravel of the
  // position by the vector width, `(i_o·w + i_i) / w`, is i_o, a lane-invariant value.
  simplify_indices(k);
  std::vector<Stmt> outer;
  outermost_loops(k.body, outer);
  std::vector<std::string> candidates;
  for (const auto& l : outer)
    if (l->for_kind == ForKind::Serial && work({l}) >= s.parallel_min_work)
      candidates.push_back(l->var);
  for (const auto& name : candidates) {
    try {
      parallelize(k, name);
    } catch (const ScheduleError&) {
    }
  }
  hoist_uniform_loads(k);
  if (s.reciprocal_divisors) reciprocal_divisors(k);
}

}  // namespace kiln::loop
