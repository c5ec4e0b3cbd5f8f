// decompose_softmax: rewrites Softmax, LogSoftmax and Hardmax as reductions and elementwise ops, so the
// fusion engine can fuse them with their producer and consumer (e.g. attention's scale and mask
// before, the MatMul after) instead of treating them as opaque kernels.
//
// In:  Softmax(X), LogSoftmax(X) and Hardmax(X) {axis} — opset-13 semantics (one axis, default -1),
//      which the frontend produces for every opset — on floating-point X.
// Out: with every Reduce* using keepdims=1 and axes [axis] as input 1:
//        m = ReduceMax(X);  d = Sub(X, m);  e = Exp(d);  s = ReduceSum(e)
//        Softmax:    Y = Div(e, s)
//        LogSoftmax: Y = Sub(d, Log(s))
//        Hardmax:    Y = Cast(Equal(ArgMax(X) {keepdims=1}, [0, 1, ..., n-1] along axis), X's dtype)
//      Subtracting the maximum keeps Exp from overflowing, exactly as a hand-written kernel would.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeSoftmax : public Pass {
 public:
  std::string name() const override { return "decompose_softmax"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
