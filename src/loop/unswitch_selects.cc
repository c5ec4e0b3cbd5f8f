#include "loop/unswitch_selects.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/rebind_buffers.h"

namespace kiln::loop {

namespace {

bool has_loop(const std::vector<Stmt>& body) {
  for (const Stmt& s : body)
    if (s->kind == StmtKind::For || has_loop(s->body) || has_loop(s->else_body)) return true;
  return false;
}

bool reads_memory(const Expr& e) {
  if (e->kind == ExprKind::Load || e->kind == ExprKind::Call || e->kind == ExprKind::Address) return true;
  for (const Expr& a : e->args)
    if (reads_memory(a)) return true;
  return false;
}

// Variables bound or assigned in `body`.
void defined(const std::vector<Stmt>& body, std::set<std::string>& out) {
  for (const Stmt& s : body) {
    if (s->kind == StmtKind::For || s->kind == StmtKind::Let || s->kind == StmtKind::Assign) out.insert(s->var);
    defined(s->body, out);
    defined(s->else_body, out);
  }
}

// The select conditions in `e` that are invariant (read none of `varying`, no memory), by key.
void invariant_conditions(const Expr& e, const std::set<std::string>& varying, std::map<std::string, Expr>& out) {
  if (e->kind == ExprKind::Select) {
    const Expr& c = e->args[0];
    std::set<std::string> vars;
    collect_vars(c, vars);
    bool ok = c->kind != ExprKind::IntImm && !reads_memory(c);
    for (const auto& v : vars) ok = ok && !varying.count(v);
    if (ok) out.emplace(position_key(c), c);
  }
  for (const Expr& a : e->args) invariant_conditions(a, varying, out);
}

void invariant_conditions(const std::vector<Stmt>& body, const std::set<std::string>& varying,
                          std::map<std::string, Expr>& out) {
  for (const Stmt& s : body) {
    for (const Expr* e : {&s->extent, &s->index, &s->value, &s->cond})
      if (*e) invariant_conditions(*e, varying, out);
    for (const Expr& a : s->call_args) invariant_conditions(a, varying, out);
    invariant_conditions(s->body, varying, out);
    invariant_conditions(s->else_body, varying, out);
  }
}

// `e` with every select on condition `key` replaced by its branch for `value`.
Expr decided(const Expr& e, const std::string& key, bool value) {
  Expr r = map_args(e, [&](const Expr& a) { return decided(a, key, value); });
  if (r->kind == ExprKind::Select && position_key(r->args[0]) == key) return value ? r->args[1] : r->args[2];
  return r;
}

// ... and every If on it replaced by its branch for `value` (a tile's stores after the last K
// block's call, under the same condition as that call's epilogue flags).
Stmt decided(const Stmt& s, const std::string& key, bool value) {
  Stmt r = map_stmt(
      s, [&](const Expr& e) { return decided(e, key, value); }, [&](const Stmt& c) { return decided(c, key, value); });
  if (r->kind == StmtKind::If && r->cond && position_key(r->cond) == key) return block(value ? r->body : r->else_body);
  return r;
}

class Unswitcher {
 public:
  Unswitcher(int max_conditions, int64_t budget, std::set<std::string> taken)
      : max_(max_conditions), budget_(budget), taken_(std::move(taken)) {}

  std::vector<Stmt> list(const std::vector<Stmt>& body) {
    std::vector<Stmt> out;
    for (const Stmt& s : body) out.push_back(stmt(s));
    return out;
  }

 private:
  Stmt stmt(const Stmt& s) {
    if (s->kind == StmtKind::For && !has_loop(s->body)) {
      std::set<std::string> varying = {s->var};
      defined(s->body, varying);
      std::map<std::string, Expr> conds;
      invariant_conditions(s->body, varying, conds);
      const int64_t copies = int64_t(1) << std::min<size_t>(conds.size(), size_t(max_));
      const int64_t cost = (copies - 1) * (1 + sched::statement_count(s->body));
      if (!conds.empty() && cost <= budget_) {
        budget_ -= cost;
        std::vector<std::pair<std::string, Expr>> use(conds.begin(), conds.end());
        use.resize(std::min<size_t>(use.size(), size_t(max_)));
        bool first = true;
        return unswitch(s, use, 0, first);
      }
    }
    auto c = std::make_shared<StmtNode>(*s);
    c->body = list(s->body);
    c->else_body = list(s->else_body);
    return c;
  }

  // `loop` specialised on conditions use[i..]: nested Ifs, one copy of the loop per outcome.
  Stmt unswitch(const Stmt& loop, const std::vector<std::pair<std::string, Expr>>& use, size_t i, bool& first) {
    if (i == use.size()) {
      if (first) {
        first = false;
        return loop;
      }
      // Copies after the first bind names of their own (loops are found by name).
      Stmt r = rename_bound_vars({loop}, taken_)[0];
      sched::bound_names(r, taken_);
      return r;
    }
    Stmt yes = unswitch(decided(loop, use[i].first, true), use, i + 1, first);
    Stmt no = unswitch(decided(loop, use[i].first, false), use, i + 1, first);
    return if_then(use[i].second, {yes}, {no});
  }

  int max_;
  int64_t budget_;
  std::set<std::string> taken_;
};

}  // namespace

void unswitch_selects(LoopKernel& k, int max_conditions) {
  if (!k.body) return;
  std::set<std::string> taken;
  sched::bound_names(k.body, taken);
  // The copies may add up to three times the kernel's statements.
  Unswitcher u(max_conditions, 3 * sched::statement_count({k.body}), std::move(taken));
  k.body = u.list({k.body})[0];
}

}  // namespace kiln::loop
