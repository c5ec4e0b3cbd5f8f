// decompose_activations: rewrites the piecewise-linear activations as elementwise primitives the
// fusion engine already knows, so no kernel needs a case for them.
//
// In:  HardSigmoid(X) {alpha = 0.2, beta = 0.5} and HardSwish(X) on floating-point X.
// Out: HardSigmoid: Clip(Add(Mul(X, alpha), beta), 0, 1)
//      HardSwish:   Mul(X, Clip(Add(Mul(X, 1/6), 0.5), 0, 1))   (HardSigmoid with alpha=1/6, beta=0.5)
//      All constants are scalars of X's dtype; Clip's min/max are inputs (opset-11+ form).
//
// Not handled here because nothing needs doing: opset 17 has no Gelu or SiLU op, so exporters
// already spell them in primitives — GELU as x * 0.5 * (1 + Erf(x / sqrt(2))) or its tanh
// approximation x * 0.5 * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3))), SiLU/Swish as
// Mul(x, Sigmoid(x)) — and the fusion engine re-fuses those chains as they are.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeActivations : public Pass {
 public:
  std::string name() const override { return "decompose_activations"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
