#include "loop/rebind_buffers.h"

#include <optional>
#include <set>
#include <unordered_map>

#include "loop/affine.h"
#include "support/error.h"

namespace kiln::loop {

namespace {

// index - t.base + t.offset.
Expr retarget(Expr index, const BufferTarget& t) {
  if (t.base && !(t.base->kind == ExprKind::IntImm && t.base->int_value == 0))
    index = index->kind == ExprKind::IntImm && t.base->kind == ExprKind::IntImm ? int_imm(index->int_value - t.base->int_value)
                                                                                 : binary(BinOp::Sub, index, t.base);
  return t.offset ? add(index, t.offset) : index;
}

}  // namespace

Expr BufferRebinder::expr(const Expr& e) {
  if (!e) return e;
  if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
  Expr r = e;
  auto copy = std::make_shared<ExprNode>(*e);
  bool changed = false;
  for (auto& a : copy->args) {
    Expr na = expr(a);
    changed = changed || na != a;
    a = na;
  }
  if (e->buffer) {  // Load, Address
    if (auto it = map_.find(e->buffer.get()); it != map_.end()) {
      copy->buffer = it->second.to;
      copy->args[0] = retarget(copy->args[0], it->second);
      // A Load's type is its buffer's dtype; micro-kernels read an address as that dtype.
      KILN_CHECK(copy->buffer->dtype == e->buffer->dtype, "rebinding ", e->buffer->name, " to ", copy->buffer->name,
                 " changes its dtype");
      changed = true;
      if (it->second.on_load) {
        if (e->kind != ExprKind::Load) {
          addressed_ = true;
        } else {
          r = it->second.on_load(copy, copy->args[0]);
          memo_[e.get()] = r;
          return r;
        }
      }
    }
  }
  if (changed) r = copy;
  memo_[e.get()] = r;
  return r;
}

Stmt BufferRebinder::stmt(const Stmt& s) {
  if (!s) return s;
  auto c = map_stmt(s, [&](const Expr& e) { return expr(e); }, [&](const Stmt& b) { return stmt(b); });
  if (s->buffer) {
    if (auto it = map_.find(s->buffer.get()); it != map_.end()) {
      KILN_CHECK(s->kind == StmtKind::Store, "cannot rebind the buffer an Allocate declares (", s->buffer->name, ")");
      KILN_CHECK(it->second.to->dtype == s->buffer->dtype, "rebinding ", s->buffer->name, " changes its dtype");
      c->buffer = it->second.to;
      c->index = retarget(c->index, it->second);
    }
  }
  return c;
}

Stmt rebind_buffers(const Stmt& s, BufferMap map) { return BufferRebinder(std::move(map)).stmt(s); }

namespace {

class DivModFolder {
 public:
  explicit DivModFolder(std::map<std::string, int64_t> extents) : extents_(std::move(extents)) {}

  Stmt stmt(const Stmt& s) {
    if (!s) return s;
    auto c = std::make_shared<StmtNode>(*s);
    c->extent = expr(s->extent);
    c->value = expr(s->value);
    c->cond = expr(s->cond);
    for (auto& a : c->call_args) a = expr(a);
    std::optional<int64_t> saved;
    const bool loop = s->kind == StmtKind::For;
    if (loop) {
      // Names may be reused by sibling loops with other extents: memoised results hold only
      // within one extents map.
      if (auto it = extents_.find(s->var); it != extents_.end()) saved = it->second;
      if (s->extent->kind == ExprKind::IntImm) extents_[s->var] = s->extent->int_value;
      else extents_.erase(s->var);
      memo_.clear();
    }
    c->index = s->index ? tidy(expr(s->index)) : nullptr;
    for (auto& b : c->body) b = stmt(b);
    for (auto& b : c->else_body) b = stmt(b);
    if (loop) {
      if (saved) extents_[s->var] = *saved;
      else extents_.erase(s->var);
      memo_.clear();
    }
    return c;
  }

  Expr expr(const Expr& e) {
    if (!e) return e;
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Expr r = e;
    auto copy = std::make_shared<ExprNode>(*e);
    bool changed = false;
    for (auto& a : copy->args) {
      Expr na = expr(a);
      changed = changed || na != a;
      a = na;
    }
    if (e->kind == ExprKind::Load || e->kind == ExprKind::Address) {
      Expr t = tidy(copy->args[0]);
      changed = changed || t != copy->args[0];
      copy->args[0] = t;
    }
    if (changed) r = copy;
    if (Expr f = fold(r)) r = f;
    memo_[e.get()] = r;
    return r;
  }

 private:
  std::optional<AffineForm> form(const Expr& e) const {
    AffineScope scope;
    for (const auto& [v, n] : extents_) scope.varying.insert(v);
    return affine_form(e, scope);
  }

  // n / d or n % d with n = d*q + r, r within [0, d) and q >= 0 (so C's truncation is floor).
  Expr fold(const Expr& e) const {
    if (e->kind != ExprKind::Binary || (e->bin != BinOp::Div && e->bin != BinOp::Mod) || e->type != DType::Int64)
      return nullptr;
    const Expr& dv = e->args[1];
    if (dv->kind != ExprKind::IntImm || dv->int_value < 1) return nullptr;
    const int64_t d = dv->int_value;
    auto f = form(e->args[0]);
    if (!f) return nullptr;
    AffineForm q, r;
    for (const auto& [k, c] : f->coef) {
      AffineForm& to = c % d == 0 ? q : r;
      to.coef[k] = c % d == 0 ? c / d : c;
      to.atoms[k] = f->atoms.at(k);
    }
    q.constant = f->constant / d - (f->constant % d < 0 ? 1 : 0);
    r.constant = f->constant - q.constant * d;
    auto qb = affine_bounds(q, extents_), rb = affine_bounds(r, extents_);
    if (!qb || !rb || qb->lo < 0 || rb->lo < 0 || rb->hi >= d) return nullptr;
    return e->bin == BinOp::Div ? q.to_expr() : r.to_expr();
  }

  // An affine index in expanded form (atoms all variables with known ranges, so nothing that
  // was shared through a Let is expanded back).
  Expr tidy(const Expr& e) const {
    auto f = form(e);
    if (!f) return e;
    for (const auto& [k, c] : f->coef)
      if (!extents_.count(k)) return e;
    return f->to_expr();
  }

  std::map<std::string, int64_t> extents_;
  std::unordered_map<const ExprNode*, Expr> memo_;
};

}  // namespace

Stmt fold_index_divmod(const Stmt& s, const std::map<std::string, int64_t>& extents) {
  return DivModFolder(extents).stmt(s);
}

Expr fold_index_divmod(const Expr& e, const std::map<std::string, int64_t>& extents) {
  return DivModFolder(extents).expr(e);
}

void collect_vars(const Expr& e, std::set<std::string>& out) {
  if (!e) return;
  if (e->kind == ExprKind::Var) out.insert(e->name);
  for (const auto& a : e->args) collect_vars(a, out);
}

namespace {

void all_names(const Stmt& s, std::set<std::string>& out) {
  if (!s->var.empty()) out.insert(s->var);
  for (const Expr* e : {&s->extent, &s->index, &s->value, &s->cond}) collect_vars(*e, out);
  for (const auto& a : s->call_args) collect_vars(a, out);
  for (const auto* list : {&s->body, &s->else_body})
    for (const auto& c : *list) all_names(c, out);
}

// Scoped renaming: a For's variable is bound in its body, a Let's in the rest of its statement
// list (and what that list's statements contain), as in the C the emitter writes.
class BoundVarRenamer {
 public:
  BoundVarRenamer(const std::set<std::string>& avoid, std::set<std::string> used) : avoid_(avoid), used_(std::move(used)) {
    used_.insert(avoid.begin(), avoid.end());
  }

  std::vector<Stmt> list(const std::vector<Stmt>& body) {
    const auto saved = env_;
    std::vector<Stmt> r;
    for (const auto& s : body) r.push_back(stmt(s));
    restore(saved);
    return r;
  }

 private:
  Stmt stmt(const Stmt& s) {
    if (s->kind == StmtKind::For) {
      auto c = std::make_shared<StmtNode>(*s);
      c->extent = expr(s->extent);
      const auto saved = env_;
      c->var = bind(s->var);
      c->body = list(s->body);
      restore(saved);
      return c;
    }
    auto c = std::make_shared<StmtNode>(*s);
    for (Expr* e : {&c->extent, &c->index, &c->value, &c->cond}) *e = expr(*e);
    for (auto& a : c->call_args) a = expr(a);
    if (s->kind == StmtKind::Block) {  // a plain sequence: its Lets stay visible after it
      for (auto& b : c->body) b = stmt(b);
    } else {
      c->body = list(s->body);
      c->else_body = list(s->else_body);
    }
    if (s->kind == StmtKind::Assign) c->var = name(s->var);
    if (s->kind == StmtKind::Let) c->var = bind(s->var);  // visible to the statements after it
    return c;
  }

  std::string name(const std::string& v) const {
    auto it = env_.find(v);
    return it == env_.end() ? v : it->second;
  }

  std::string bind(const std::string& v) {
    if (!avoid_.count(v)) {
      if (env_.erase(v)) memo_.clear();  // an unrenamed binding hides an outer renamed one
      return v;
    }
    std::string fresh;
    for (int i = 0; fresh.empty() || used_.count(fresh); ++i) fresh = v + "_s" + std::to_string(i);
    used_.insert(fresh);
    env_[v] = fresh;
    memo_.clear();
    return fresh;
  }

  void restore(const std::map<std::string, std::string>& saved) {
    if (saved != env_) memo_.clear();
    env_ = saved;
  }

  Expr expr(const Expr& e) {
    if (!e || env_.empty()) return e;
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Expr r;
    if (e->kind == ExprKind::Var && env_.count(e->name)) r = var(env_.at(e->name), e->type);
    else r = map_args(e, [&](const Expr& a) { return expr(a); });
    memo_[e.get()] = r;
    return r;
  }

  const std::set<std::string>& avoid_;
  std::set<std::string> used_;
  std::map<std::string, std::string> env_;
  std::unordered_map<const ExprNode*, Expr> memo_;
};

}  // namespace

std::vector<Stmt> rename_bound_vars(const std::vector<Stmt>& body, const std::set<std::string>& avoid) {
  std::set<std::string> used;
  for (const auto& s : body) all_names(s, used);
  return BoundVarRenamer(avoid, std::move(used)).list(body);
}

Stmt scoped(std::vector<Stmt> body) { return if_then(int_imm(1, DType::Bool), std::move(body)); }

}  // namespace kiln::loop
