#include "loop/lower_internal.h"

namespace kiln::loop::detail {

void SharedExprHoister::count(const Expr& e) {
  if (++refs_[e.get()] > 1) return;  // the subtree was counted on the first reference
  for (const auto& a : e->args) count(a);
}

bool SharedExprHoister::has_load(const Expr& e) {
  if (auto it = loads_.find(e.get()); it != loads_.end()) return it->second;
  bool r = e->kind == ExprKind::Load;
  for (const auto& a : e->args) r = has_load(a) || r;
  return loads_[e.get()] = r;
}

Expr SharedExprHoister::rewrite(const Expr& e, std::vector<Stmt>& lets) {
  if (auto it = done_.find(e.get()); it != done_.end()) return it->second;
  Expr r = e;
  if (!e->args.empty()) {
    r = map_args(e, [&](const Expr& a) { return rewrite(a, lets); });
  }
  const bool leaf = e->kind == ExprKind::IntImm || e->kind == ExprKind::FloatImm || e->kind == ExprKind::Var;
  const bool pure_index = e->type == DType::Int64 && !has_load(e);
  if (!leaf && !pure_index && refs_[e.get()] >= 2) {
    std::string name = "t" + std::to_string(next_++);
    lets.push_back(let(name, r));
    r = var(name, e->type);
  }
  done_[e.get()] = r;
  return r;
}

}  // namespace kiln::loop::detail
