// Tree utilities and the region analysis of the schedule transforms (loop_transforms_internal.h).
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "loop/loop_transforms_internal.h"

namespace kiln::loop::sched {

namespace {

void find_loops(const Stmt& s, const std::string& name, Path& path, std::vector<Path>& found) {
  path.push_back(s);
  if (s->kind == StmtKind::For && s->var == name) found.push_back(path);
  for (const auto* list : {&s->body, &s->else_body})
    for (const auto& c : *list) find_loops(c, name, path, found);
  path.pop_back();
}

}  // namespace

Path find_loop(const LoopKernel& k, const std::string& name) {
  std::vector<Path> found;
  Path path;
  if (k.body) find_loops(k.body, name, path, found);
  if (found.empty()) refuse("kernel ", k.name, " has no loop '", name, "'");
  if (found.size() > 1) refuse("loop name '", name, "' is not unique in kernel ", k.name, " (", found.size(), " loops)");
  return found[0];
}

Stmt replace_node(const Path& path, std::vector<Stmt> replacement) {
  KILN_CHECK(!path.empty(), "empty path");
  for (size_t i = path.size() - 1; i-- > 0;) {
    auto copy = std::make_shared<StmtNode>(*path[i]);
    const StmtNode* child = path[i + 1].get();
    bool spliced = false;
    for (auto* list : {&copy->body, &copy->else_body}) {
      auto it = std::find_if(list->begin(), list->end(), [&](const Stmt& c) { return c.get() == child; });
      if (it == list->end()) continue;
      it = list->erase(it);
      list->insert(it, replacement.begin(), replacement.end());
      spliced = true;
      break;
    }
    KILN_CHECK(spliced, "path does not lead to its last node");
    replacement = {copy};
  }
  return replacement.size() == 1 ? replacement[0] : block(std::move(replacement));
}

Stmt with_kind(const Stmt& s, ForKind kind) {
  auto copy = std::make_shared<StmtNode>(*s);
  copy->for_kind = kind;
  return copy;
}

namespace {

void expr_vars(const Expr& e, std::set<std::string>& out) {
  if (!e) return;
  if (e->kind == ExprKind::Var) out.insert(e->name);
  for (const auto& a : e->args) expr_vars(a, out);
}

Expr subst(const Expr& e, const std::map<std::string, Expr>& m, std::unordered_map<const ExprNode*, Expr>& memo) {
  if (!e) return e;
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  Expr r = e;
  if (e->kind == ExprKind::Var) {
    if (auto it = m.find(e->name); it != m.end()) r = it->second;
  } else if (!e->args.empty()) {
    r = map_args(e, [&](const Expr& a) { return subst(a, m, memo); });
  }
  memo[e.get()] = r;
  return r;
}

Stmt subst(const Stmt& s, const std::map<std::string, Expr>& m, std::unordered_map<const ExprNode*, Expr>& memo) {
  return map_stmt(
      s, [&](const Expr& e) { return subst(e, m, memo); }, [&](const Stmt& b) { return subst(b, m, memo); });
}

}  // namespace

Expr substitute(const Expr& e, const std::map<std::string, Expr>& m) {
  std::unordered_map<const ExprNode*, Expr> memo;
  return subst(e, m, memo);
}

Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& m) {
  std::unordered_map<const ExprNode*, Expr> memo;
  return subst(s, m, memo);
}

int64_t statement_count(const std::vector<Stmt>& body) {
  int64_t n = 0;
  for (const Stmt& s : body) n += 1 + statement_count(s->body) + statement_count(s->else_body);
  return n;
}

void bound_names(const Stmt& s, std::set<std::string>& out) {
  if (s->kind == StmtKind::For || s->kind == StmtKind::Let) out.insert(s->var);
  for (const auto* list : {&s->body, &s->else_body})
    for (const Stmt& c : *list) bound_names(c, out);
}

void assigned_names(const Stmt& s, std::set<std::string>& out) {
  if (s->kind == StmtKind::Assign) out.insert(s->var);
  for (const auto* list : {&s->body, &s->else_body})
    for (const Stmt& c : *list) assigned_names(c, out);
}

void forget_binding(std::map<std::string, Expr>& values, const std::string& name) {
  for (auto it = values.begin(); it != values.end();) {
    std::set<std::string> vars;
    expr_vars(it->second, vars);
    it = it->first == name || vars.count(name) ? values.erase(it) : std::next(it);
  }
}

std::vector<Stmt> substitute(const std::vector<Stmt>& body, const std::map<std::string, Expr>& m) {
  std::unordered_map<const ExprNode*, Expr> memo;
  std::vector<Stmt> r;
  for (const auto& s : body) r.push_back(subst(s, m, memo));
  return r;
}

namespace {

void expr_names(const Expr& e, std::set<std::string>& out) {
  if (!e) return;
  if (e->kind == ExprKind::Var) out.insert(e->name);
  if (e->buffer) out.insert(e->buffer->name);  // Load, Address
  for (const auto& a : e->args) expr_names(a, out);
}

void stmt_names(const Stmt& s, std::set<std::string>& out) {
  if (!s->var.empty()) out.insert(s->var);
  if (s->buffer) out.insert(s->buffer->name);
  for (const Expr* e : {&s->extent, &s->index, &s->value, &s->cond}) expr_names(*e, out);
  for (const auto& a : s->call_args) expr_names(a, out);
  for (const auto* list : {&s->body, &s->else_body})
    for (const auto& c : *list) stmt_names(c, out);
}

}  // namespace

std::set<std::string> names_in(const LoopKernel& k) {
  std::set<std::string> out;
  for (const auto* list : {&k.inputs, &k.outputs})
    for (const auto& b : *list) out.insert(b->name);
  if (k.body) stmt_names(k.body, out);
  return out;
}

std::string fresh_name(const std::string& base, std::set<std::string>& used) {
  std::string n = base;
  for (int i = 2; used.count(n); ++i) n = base + std::to_string(i);
  used.insert(n);
  return n;
}

bool mentions(const Expr& e, const std::set<std::string>& names) {
  if (!e) return false;
  if (e->kind == ExprKind::Var && names.count(e->name)) return true;
  return std::any_of(e->args.begin(), e->args.end(), [&](const Expr& a) { return mentions(a, names); });
}

int64_t const_extent(const StmtNode& loop) {
  return loop.extent->kind == ExprKind::IntImm ? loop.extent->int_value : -1;
}

// ---------------------------------------------------------------- region analysis

AffineScope Region::scope() const {
  AffineScope s;
  for (const auto* l : loops) s.varying.insert(l->var);
  s.varying.insert(lets.begin(), lets.end());
  s.written = written;
  return s;
}

namespace {

class RegionWalker {
 public:
  explicit RegionWalker(Region& r) : r_(r) {}

  void stmt(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::For:
        loads(s->extent);
        r_.loops.push_back(s.get());
        loops_.push_back(s.get());
        list(s->body);
        loops_.pop_back();
        break;
      case StmtKind::Store:
        loads(s->index);
        loads(s->value);
        r_.accesses.push_back({s->buffer, true, s->index, loops_, nullptr});
        r_.written.insert(s->buffer.get());
        break;
      case StmtKind::Let:
        loads(s->value);
        r_.lets.insert(s->var);
        scope_.push_back(s->var);
        break;
      case StmtKind::Assign:
        loads(s->value);
        if (std::find(scope_.begin(), scope_.end(), s->var) == scope_.end()) r_.outer_assigns.insert(s->var);
        break;
      case StmtKind::Block: list(s->body); break;
      case StmtKind::If:
        loads(s->cond);
        list(s->body);
        list(s->else_body);
        break;
      case StmtKind::Allocate:
        r_.allocated.insert(s->buffer.get());
        list(s->body);
        break;
      case StmtKind::Call:
        r_.has_call = true;
        for (const auto& a : s->call_args) loads(a);
        break;
      case StmtKind::Comment: break;
    }
  }

 private:
  // A Block's Lets stay visible after it in the C emitter; scoping them to it (as the interpreter
  // does) only makes more Assigns count as crossing iterations, which is the safe side.
  void list(const std::vector<Stmt>& body) {
    const size_t depth = scope_.size();
    for (const auto& c : body) stmt(c);
    scope_.resize(depth);
  }

  void loads(const Expr& e) {
    if (!e) return;
    if (e->kind == ExprKind::Load) r_.accesses.push_back({e->buffer, false, e->args[0], loops_, e});
    for (const auto& a : e->args) loads(a);
  }

  Region& r_;
  std::vector<const StmtNode*> loops_;
  std::vector<std::string> scope_;
};

const StmtNode* enclosing(const Access& a, const std::string& var) {
  for (auto it = a.loops.rbegin(); it != a.loops.rend(); ++it)
    if ((*it)->var == var) return *it;
  return nullptr;
}

}  // namespace

Region analyze_region(const Stmt& root) {
  Region r;
  RegionWalker(r).stmt(root);
  return r;
}

std::string independence_violation(const Region& r, const std::vector<const StmtNode*>& loops) {
  std::map<std::string, int64_t> extent;  // the loops concerned (INT64_MAX: not a constant)
  for (const auto* l : loops) extent[l->var] = const_extent(*l) < 0 ? INT64_MAX : const_extent(*l);
  std::set<std::string> region_loops;
  for (const auto* l : r.loops) region_loops.insert(l->var);
  const AffineScope scope = r.scope();

  // Per written buffer: the coefficients on the loops concerned and the invariant part must agree
  // across its accesses; the rest (constant + inner loops) spans an interval.
  struct Shape {
    std::map<std::string, int64_t> outer, invariant;
  };
  std::map<const Buffer*, std::vector<const Access*>> by_buffer;
  for (const auto& a : r.accesses)
    if (r.written.count(a.buffer.get()) && !r.allocated.count(a.buffer.get())) by_buffer[a.buffer.get()].push_back(&a);
  for (const auto& [buf, list] : by_buffer) {
    std::optional<Shape> first;
    Interval all{INT64_MAX, INT64_MIN};
    for (const Access* a : list) {
      std::string why;
      auto f = affine_form(a->index, scope, &why);
      if (!f) return cat("cannot analyse the accesses to ", buf->name, ": ", why);
      Shape sh;
      std::map<std::string, int64_t> inner_extent;
      AffineForm inner;
      inner.constant = f->constant;
      for (const auto& [key, c] : f->coef) {
        if (extent.count(key)) {
          sh.outer[key] = c;
        } else if (region_loops.count(key)) {
          const StmtNode* l = enclosing(*a, key);
          if (!l || const_extent(*l) < 0)
            return cat("loop ", key, " has no constant extent at ", buf->name, "[", print_expr(a->index), "]");
          inner.coef[key] = c;
          inner.atoms[key] = f->atoms.at(key);
          inner_extent[key] = const_extent(*l);
        } else if (r.lets.count(key)) {
          return cat("index ", buf->name, "[", print_expr(a->index), "] depends on scalar '", key,
                     "' computed in the loop");
        } else {
          sh.invariant[key] = c;
        }
      }
      auto b = affine_bounds(inner, inner_extent);
      if (!b) return cat("cannot bound ", buf->name, "[", print_expr(a->index), "]");
      if (!first) {
        first = sh;
      } else if (first->outer != sh.outer || first->invariant != sh.invariant) {
        return cat(buf->name, " is accessed at unrelated offsets (", buf->name, "[", print_expr(list[0]->index),
                   "] and ", buf->name, "[", print_expr(a->index), "])");
      }
      all.lo = std::min(all.lo, b->lo);
      all.hi = std::max(all.hi, b->hi);
    }
    std::map<std::string, std::pair<int64_t, int64_t>> ce;
    for (const auto& [v, n] : extent) ce[v] = {first->outer.count(v) ? first->outer.at(v) : 0, n};
    int64_t span;
    if (__builtin_sub_overflow(all.hi, all.lo, &span) || !separates(ce, span)) {
      std::string names;
      for (const auto* l : loops) names += (names.empty() ? "" : ", ") + l->var;
      return cat("different iterations of ", names, " may touch the same element of ", buf->name, " (",
                 buf->name, "[", print_expr(list[0]->index), "]", list.size() > 1 ? " and others" : "", ")");
    }
  }
  return "";
}

}  // namespace kiln::loop::sched
