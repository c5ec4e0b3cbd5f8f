#include "transforms/transpose_to_reshape.h"

#include "transforms/node_rewriter.h"

namespace kiln {

std::string TransposeToReshape::refusal(const Node& n) {
  if (n.op_type() != "Transpose" || !n.domain().empty()) return "not a Transpose";
  const Value* x = n.input(0);
  if (!x || n.num_outputs() != 1) return "expects one input and one output";
  const Shape& in = x->shape();
  const int64_t rank = int64_t(in.size());
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm"))
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  if (int64_t(perm.size()) != rank) return "perm does not match X's rank";
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[size_t(p)]) return "perm is not a permutation";
    seen[size_t(p)] = true;
  }
  int64_t last = -1;  // input axis of the previous non-unit output dim
  for (int64_t p : perm) {
    if (in[size_t(p)] == 0) return "X has a 0-sized dim";
    if (in[size_t(p)] == 1) continue;
    if (p < last) return "perm reorders dims larger than 1, which moves data";
    last = p;
  }
  Shape out;
  for (int64_t p : perm) out.push_back(in[size_t(p)]);
  if (n.output(0)->type() != TensorType{x->dtype(), out}) return "Y is not typed as X transposed";
  return "";
}

bool TransposeToReshape::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); },
      [&](Node* n) {
        NodeRewriter rw(g, n);
        Value* y = rw.output(0);
        const Shape& s = y->shape();
        Value* shape = rw.constant("shape", Tensor::from_vector<int64_t>(s, {int64_t(s.size())}));
        rw.insert("Reshape", {rw.input(0), shape}, {y}, {}, rw.node_name());
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
