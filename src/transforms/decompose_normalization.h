// decompose_normalization: rewrites the statistics-based normalizations as reductions and
// elementwise ops, which the fusion engine re-fuses (reduction + epilogue) with their neighbours.
//
// In:  LayerNormalization(X, Scale, B?) {axis, epsilon, stash_type} -> Y, Mean?, InvStdDev?
//      InstanceNormalization(X, scale, B) {epsilon}                 (X rank >= 3)
//      MeanVarianceNormalization(X) {axes}
//      BatchNormalization(X, scale, B, mean, var) {training_mode=1, epsilon, momentum}
//                                                 -> Y, running_mean?, running_var?
// Out: one pattern, over the normalized axes R (LayerNorm: axis..rank-1; InstanceNorm: the spatial
//      axes 2..rank-1; MVN: its `axes`; training BatchNorm: every axis but 1), every Reduce* with keepdims=1 and axes as input 1:
//        mean = ReduceMean(X, R);  d = Sub(X, mean);  var = ReduceMean(Mul(d, d), R)
//        LayerNorm/InstanceNorm:  Y = Div(d, Sqrt(Add(var, epsilon)))
//        MVN (spec: epsilon 1e-9 added to the deviation): Y = Div(d, Add(Sqrt(var), 1e-9))
//      then LayerNorm: Mul(Y, Scale), Add(Y, B) (if B); InstanceNorm: Mul by scale and Add B
//      reshaped to [C, 1, ..., 1] (new constants when constant, Reshape nodes otherwise);
//      training BatchNorm likewise with scale and B as [1, C, 1, ..., 1], and the running
//      statistics it is asked for = input * momentum + batch statistic * (1 - momentum).
//      The variance is two-pass (mean of squared deviations), which equals MVN's E[x^2] - E[x]^2
//      definition mathematically and cannot go negative.
//      LayerNorm statistics are computed in stash_type when it is wider than X (f16 X with the
//      default float stash: Cast to f32, normalize, Cast back before Scale), otherwise in X's type
//      (never narrower than X). Requested Mean / InvStdDev outputs are kept: Mean is the first
//      ReduceMean, InvStdDev = Reciprocal(Sqrt(var + epsilon)), both Cast to stash_type if needed.
// Left alone (with a reason from refusal()): non-float X, axes out of range or repeated, B/scale
// shapes that do not fit.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeNormalization : public Pass {
 public:
  std::string name() const override { return "decompose_normalization"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Graph& g, const Node& n);
};

}  // namespace kiln
