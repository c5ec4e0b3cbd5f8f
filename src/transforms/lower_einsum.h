// lower_einsum: rewrites the common forms of Einsum as Transpose / Reshape / MatMul / ReduceSum,
// so they become contractions and injective ops the loop lowering generates (and fuses), instead
// of the reference kernel.
//
// In:  Einsum(A) or Einsum(A, B) {equation} on floating-point inputs, explicit ("bij,bjk->bik") or
//      implicit ("ij,jk": the labels used once, in ASCII order) output.
// Out: an ellipsis becomes fresh letters for the dims it covers (right-aligned across operands); a
//      label repeated within one term is taken down to its diagonal first (the two dims moved
//      last by a Transpose, merged by a Reshape and read with step n+1 by a Slice: "ii->i",
//      "...ii->...i", and with a ReduceSum a trace). Then the labels of two operands fall in five
//      classes: batch (in A, B and the output), contracted (in A and B only), kept-A (A and
//      output), kept-B (B and output) and summed-alone (one input only), and
//        A' = ReduceSum(A, summed-alone-A) -> Transpose to [batch, kept-A, contracted]
//             -> Reshape [batch, M, K];   B' likewise [batch, K, N]
//        Y  = MatMul(A', B') -> Reshape [batch, kept-A, kept-B] -> Transpose to the output order
//      with the kept labels ordered as in the output and the operands swapped when the output
//      lists B's kept labels first, so that the MatMul writes the output directly unless the
//      output interleaves the classes (an outer product is K = 1; identity Transposes and
//      Reshapes are not emitted). One operand: Transpose to (output labels, summed labels), then
//      ReduceSum over the trailing ones. Contracted labels are flattened in ASCII order, the
//      order in which the reference kernel sums them.
// Not rewritten (the reference kernel runs, `kiln explain` shows it as a library kernel): an
// ellipsis whose dims broadcast (1 against n), three or more operands, integer inputs.
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
