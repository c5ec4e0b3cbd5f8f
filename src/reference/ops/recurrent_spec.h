// The ONNX recurrent ops (RNN, GRU, LSTM) as one description: which gates, which activation
// functions with their alpha/beta, direction, layout, clip and the shapes. Shared by the reference
// kernels (nn_recurrent.cc) and transforms/decompose_recurrent.cc, which spells the same
// equations as MatMuls and elementwise ops, so both read the attributes one way.
//
// The equations (ONNX operator docs; W/R/B rows in the gate order below, per direction):
//   RNN  (gates i):        H = f(X W_i^T + H' R_i^T + Wb_i + Rb_i)
//   GRU  (gates z, r, h):  z = f(X W_z^T + H' R_z^T + Wb_z + Rb_z), r likewise,
//                          h = g(X W_h^T + (r ⊙ H') R_h^T + Rb_h + Wb_h)          linear_before_reset = 0
//                          h = g(X W_h^T + r ⊙ (H' R_h^T + Rb_h) + Wb_h)          linear_before_reset ≠ 0
//                          H = (1 - z) ⊙ h + z ⊙ H'
//   LSTM (gates i, o, f, c; peepholes P in the order i, o, f):
//                          i = f(X W_i^T + H' R_i^T + P_i ⊙ C' + Wb_i + Rb_i)
//                          f = f(X W_f^T + H' R_f^T + P_f ⊙ C' + Wb_f + Rb_f)     (input_forget: f = 1 - i)
//                          c = g(X W_c^T + H' R_c^T + Wb_c + Rb_c)
//                          C = f ⊙ C' + i ⊙ c
//                          o = f(X W_o^T + H' R_o^T + P_o ⊙ C + Wb_o + Rb_o)
//                          H = o ⊙ h(C)
// `clip` bounds every gate's pre-activation to [-clip, clip] (as ONNX Runtime does). With
// sequence_lens, batch entry b runs its first len_b steps (a reverse direction from step len_b - 1
// down); Y is 0 past them and Y_h (Y_c) is the state after the last step run, 0 for an entry of
// length 0 (as ONNX Runtime does; the spec leaves it open).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

enum class RecurrentKind { Rnn, Gru, Lstm };

struct RecurrentActivation {
  std::string op;  // canonical ONNX name: Sigmoid, Tanh, Relu, Affine, LeakyRelu, ...
  float alpha = 0, beta = 0;
};

struct RecurrentSpec {
  RecurrentKind kind = RecurrentKind::Rnn;
  int64_t gates = 1;  // 1 (RNN), 3 (GRU: z, r, h), 4 (LSTM: i, o, f, c)
  int64_t hidden = 0, dirs = 1, seq = 0, batch = 0, input = 0;
  bool reverse = false;      // direction "reverse" (one direction, run backwards)
  bool batch_first = false;  // layout 1: X [batch, seq, input], Y [batch, seq, dirs, hidden]
  bool has_clip = false;
  float clip = 0;
  bool input_forget = false;         // LSTM
  bool linear_before_reset = false;  // GRU
  // Per direction: RNN {f}, GRU {f, g}, LSTM {f, g, h}.
  std::vector<std::vector<RecurrentActivation>> act;

  // Whether direction d runs backwards over the sequence.
  bool backwards(int64_t d) const { return reverse || d == 1; }
};

// The op's description from its attributes and input shapes (n.input(0) X, 1 W, 2 R); a UserError
// (without node context) when they are invalid or not supported.
RecurrentSpec recurrent_spec(const Node& n);

// a applied to x (in double).
double recurrent_activate(const RecurrentActivation& a, double x);

}  // namespace kiln
