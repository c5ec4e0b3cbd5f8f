// The one epilogue builder of the anchored emitters (contraction, contraction + rows, stencil,
// chain stages): placeholder substitution and the stores of a loop point (lower_internal.h).
#include <algorithm>

#include "loop/affine.h"
#include "loop/lower_internal.h"

namespace kiln::loop::detail {

Expr substitute_placeholders(const Expr& e, const PlaceholderLookup& lookup, std::unordered_map<const ExprNode*, Expr>& memo) {
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  Expr r = e;
  std::optional<PlaceholderValue> p;
  if (e->kind == ExprKind::Load) p = lookup(e->buffer.get());
  if (p) {
    if (!same_position(e->args[0], p->flat))
      refuse(cat("an epilogue op reads ", p->what, " at another position (no emitter fuses this; its members stay separate kernels)"));
    r = p->value;
  } else if (!e->args.empty()) {
    r = map_args(e, [&](const Expr& a) { return substitute_placeholders(a, lookup, memo); });
  }
  memo[e.get()] = r;
  return r;
}

Index transposed_position(Lowerer& L, const Node& n, Index in) {
  const size_t rank = in.shape.size();
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(rank - 1 - i);
  if (n.has_attr("perm")) perm = n.attr_ints("perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < rank; ++i)
    if (sorted.size() != rank || sorted[i] != int64_t(i)) refuse("Transpose perm is not a permutation of the input's axes");
  const std::vector<Expr> d = L.dims(in);
  std::vector<Expr> od(rank);
  for (size_t i = 0; i < rank; ++i) od[i] = d[size_t(perm[i])];
  return Index::from_dims(n.output(0)->shape(), std::move(od));
}

void append_stores(std::vector<Stmt>& body, const std::vector<BufferPtr>& bufs,
                   std::vector<std::pair<Expr, Expr>> stores, int& next_let) {
  if (stores.size() > 1)
    for (auto& [index, value] : stores)
      if (value->kind != ExprKind::Var && value->kind != ExprKind::IntImm && value->kind != ExprKind::FloatImm) {
        std::string name = "t" + std::to_string(next_let++);
        body.push_back(let(name, value));
        value = var(name, value->type);
      }
  for (size_t i = 0; i < stores.size(); ++i) body.push_back(store(bufs[i], stores[i].first, stores[i].second));
}

void append_hoisted_stores(std::vector<Stmt>& body, const std::vector<BufferPtr>& bufs,
                           std::vector<std::pair<Expr, Expr>> stores, int& next_let) {
  SharedExprHoister h(next_let);
  for (auto& [index, value] : stores) {
    h.count(value);
    h.count(index);
  }
  if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
  for (auto& [index, value] : stores) {
    value = h.rewrite(value, body);
    index = h.rewrite(index, body);
  }
  append_stores(body, bufs, std::move(stores), next_let);
}

}  // namespace kiln::loop::detail
