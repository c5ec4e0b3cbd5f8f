// lower_gemm: rewrites Gemm as MatMul plus elementwise ops, so the contraction is one op kind for
// the fusion engine and the bias/scaling can fuse into its epilogue like any elementwise op.
//
// In:  Gemm(A, B, C?) {alpha, beta, transA, transB} with A and B matrices: Y = alpha * A'B' + beta * C.
// Out: Y = Add(Mul(MatMul(A', B'), alpha), beta * C), where
//      - A' = A^T and B' = B^T when transA / transB: a new transposed constant when the operand is
//        constant (a weight is transposed once at compile time, never at run time), else a
//        Transpose node (perm [1, 0]);
//      - alpha != 1 is folded into a constant B' (new constant alpha * B'), else a Mul by a scalar;
//      - beta is folded into a constant C (new constant beta * C), else C is multiplied by a scalar;
//        beta = 0 drops C (it cannot contribute), as does an absent C;
//      - the last op defines Gemm's output value.
//      Constant arithmetic runs in float64 and rounds once. Integer Gemms never fold alpha or beta
//      into constants (the reference truncates alpha and beta to the integer type first; the
//      emitted scalar constants do the same, so results stay bit-exact).
//      Node names derive from the Gemm's: "<gemm>/matmul", "<gemm>/scaled" (alpha),
//      "<gemm>/scaled_c" (beta), "<gemm>/bias".
// A weight transposed or scaled for several Gemms becomes one new constant (cached per run).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class LowerGemm : public Pass {
 public:
  std::string name() const override { return "lower_gemm"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
