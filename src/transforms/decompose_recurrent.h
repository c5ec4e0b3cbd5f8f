// decompose_recurrent: rewrites RNN, GRU and LSTM (reference/ops/recurrent_spec.h has their
// equations) as MatMuls and elementwise ops unrolled over the sequence, which kiln compiles like
// any other graph, instead of the reference kernel.
//
// Per direction d (W_d, R_d, the biases and states sliced out of the op's inputs; weights that are
// constants are sliced and transposed here, at compile time):
//   XW = MatMul(X as [T, N, I], W_d^T) + (Wb_d + Rb_d)       every step's input part in one GEMM
//   per step, in the direction's order (t = s or T-1-s):
//     pre = Slice(XW, t) + MatMul(H', R_d^T)                 [1, N, G*H]; gates are column slices
//     the gate equations with the op's activations (ONNX ops: Sigmoid, Tanh, Relu, LeakyRelu, ...;
//     Affine and ScaledTanh spelled with Mul/Add/Tanh), Clip for `clip`
//     with sequence_lens as data: H = Where(t < len, H_new, H'), Y_t = Where(t < len, H_new, 0)
//     (and after the last step, Y_h = Where(0 < len, H, 0): a length-0 entry ends in zeros)
//   Y_d = Concat of the steps' H in time order
// Y = Concat over directions ([T, D, N, H]; layout 1 transposes X in and Y, Y_h, Y_c out).
// GRU's reset gate: linear_before_reset = 0 multiplies H' by r before its MatMul with R_h (its own
// MatMul per step); = 1 multiplies r into MatMul(H', R_h^T) + Rb_h (one MatMul for all gates).
// The sums differ from the reference kernel's (double, one dot product per gate) by rounding only.
//
// Not rewritten: an op the recurrent emitter builds whole (loop/lower_recurrent.cc: the layer as
// one kernel, its steps in a loop, as ONNX Runtime runs it; float32, constant weights, no
// sequence_lens shorter than the sequence) — unrolled, a layer of T steps was T kernels. The
// emitter's own refusal decides (loop::recurrent_kernel_refusal), so the two cannot disagree.
// Under --strict-fp (unroll_all) every op is unrolled: the recurrent op's reference kernel
// computes in double, the unrolled ops' reference kernels in the order their kernels keep.
// Also not rewritten (the op then runs as a library kernel, which explain and run name): dtypes other
// than float32/float64; a reverse or bidirectional op whose sequence_lens are data or shorter than
// the sequence (each entry would run backwards from its own length); more than kMaxSteps steps
// over all directions (the unrolled graph grows with the sequence).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeRecurrent : public Pass {
 public:
  // Steps (sequence length × directions) unrolled at most.
  static constexpr int64_t kMaxSteps = 1024;

  // unroll_all: unroll every op it can, those the recurrent emitter builds whole too (--strict-fp,
  // PipelineOptions::strict_fp; tests of the unrolled spelling).
  explicit DecomposeRecurrent(bool unroll_all = false) : unroll_all_(unroll_all) {}

  std::string name() const override { return "decompose_recurrent"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n, bool unroll_all = false);

 private:
  bool unroll_all_;
};

}  // namespace kiln
