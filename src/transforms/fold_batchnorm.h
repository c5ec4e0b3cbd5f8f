// fold_batchnorm: removes inference-mode BatchNormalization, folding it into the weights of the
// contraction before it when possible, and otherwise lowering it to a per-channel affine.
//
// In:  BatchNormalization (opset-15 form) with training_mode = 0 and only output Y in use. With
//      s = scale / sqrt(var + epsilon), BN(y) = s * y + (B - s * mean), per channel (axis 1).
//      Other BatchNormalization nodes (training mode, or the running-statistics outputs in use) are
//      left alone.
// Out, in order of preference:
//  1. Folded into the producer of X when scale, B, mean and var are constants and X comes from
//     - Conv with a constant weight (and constant bias, or none): one Conv with weight W * s (per
//       output channel) and bias (b - mean) * s + B;
//     - MatMul of a rank-2 input with a constant rank-2 weight [K, N] (so axis 1 is the output
//       feature axis): MatMul with weight W * s (per column) + Add of the bias [N];
//     - Gemm with a constant B and a constant C (or none): one Gemm with B scaled per output
//       column, beta = 1 and C' = s * beta * C + (B - s * mean);
//     and that producer's output is read by nothing else. The folded node keeps the producer's name
//     and defines BN's output value. New constants are computed in float64 and rounded once to the
//     weight's dtype; the original constants are never modified (their storage may be shared).
//  2. Constant parameters otherwise: Mul(X, s') then Add(shift'), with s' and shift' constants of
//     X's dtype shaped [C, 1, ..., 1] so they broadcast along axis 1.
//  3. Some parameter not constant: the arithmetic as nodes,
//     (X - mean) / Sqrt(var + epsilon) * scale + B, each parameter Reshape'd to [C, 1, ..., 1]
//     (and Cast to X's dtype when it differs).
// Runs before lower_gemm so that Gemm, not the MatMul + Add it becomes, is seen as the producer.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class FoldBatchNorm : public Pass {
 public:
  std::string name() const override { return "fold_batchnorm"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n (fold or lower), otherwise why not (e.g. "training_mode=1").
  static std::string refusal(const Graph& g, const Node& n);
  // "" when n (a BatchNormalization the pass rewrites) folds into the producer of its input,
  // otherwise why it is lowered to an affine instead.
  static std::string fold_refusal(const Graph& g, const Node& n);
};

}  // namespace kiln
