// lower_einsum: rewrites the common forms of Einsum as Transpose / Reshape / MatMul / ReduceSum,
// so they become contractions and injective ops the loop lowering generates (and fuses), instead
// of the reference kernel.
//
// In:  Einsum(A) or Einsum(A, B) {equation} on floating-point inputs, explicit ("bij,bjk->bik") or
//      implicit ("ij,jk": the labels used once, in ASCII order) output, without an ellipsis and
//      without a label repeated within one term.
// Out: the labels of two operands fall in five classes: batch (in A, B and the output), contracted
//      (in A and B only), kept-A (A and output), kept-B (B and output) and summed-alone (one input
//      only). Then
//        A' = ReduceSum(A, summed-alone-A) -> Transpose to [batch, kept-A, contracted]
//             -> Reshape [batch, M, K];   B' likewise [batch, K, N]
//        Y  = MatMul(A', B') -> Reshape [batch, kept-A, kept-B] -> Transpose to the output order
//      (an outer product is K = 1; identity Transposes and Reshapes are not emitted). One operand:
//      ReduceSum over the labels not in the output, then a Transpose. Contracted labels are
//      flattened in ASCII order, the order in which the reference kernel sums them.
// Not rewritten (the reference kernel runs, `kiln explain` shows it as a library kernel): an
// ellipsis, repeated labels (diagonals, traces), three or more operands, integer inputs.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class LowerEinsum : public Pass {
 public:
  std::string name() const override { return "lower_einsum"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
