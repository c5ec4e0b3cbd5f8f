// expand_square: Pow(X, 2) → Mul(X, X) and Pow(X, 3) → Mul(Mul(X, X), X) for floating-point X.
//
// LayerNorm's variance is exported as Pow(x - mean, 2): a libm pow per element (the unfused
// encoder spent 0.8 ms of 17 in one such kernel). x * x is the correctly rounded square, which is
// what pow(x, 2) computes up to libm's last-bit error, and agrees on every special value (NaN, ±inf,
// ±0 → +0). The cube (the tanh form of GELU: 0.044715 · x³, as HuggingFace's NewGELU and GPT-2
// export it) rounds twice, so it is within 1.5 ulp of the correctly rounded cube, keeps the sign of
// ±0 and ±inf, and overflows exactly where x³ does; libm's powf there cost 1.6 ms of the unfused
// 3-block GPT decoder's 22 ms (kiln bench --kernels --no-fusion, one thread). The reference executor
// runs the rewritten graph too, so compiled and reference results stay bit-identical.
//
// Only when the exponent is a constant with one element equal to 2 or 3 and the output type is X's
// (the exponent does not broadcast X to a larger shape).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class ExpandSquare : public Pass {
 public:
  std::string name() const override { return "expand_square"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
