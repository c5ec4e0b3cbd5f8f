// decompose_resize: rewrites Resize as per-axis Gathers and weighted sums, so the fusion engine
// fuses it with its producer and consumer and the loop lowering generates it (Gather with constant
// indices is an injective remap) instead of running the reference kernel.
//
// In:  Resize(X, roi?, scales?, sizes?), any mode, coordinate_transformation_mode and nearest_mode;
//      linear and cubic on floating-point X, nearest on any dtype. scales/sizes decide the output
//      shape, fixed at import: `sizes` computed at run time is taken to be that shape, and so are
//      run-time `scales` where the sampling positions depend on lengths only (align_corners,
//      tf_crop_and_resize).
// Out: the axes resized, innermost first (the reference's order), each by
//        nearest:        X' = Gather(X, idx, axis)
//        linear/cubic:   X' = Gather(X, idx_0, axis) * w_0 + ... + Gather(X, idx_T-1, axis) * w_T-1
//      where idx_t (int64 [out_len]) and w_t ([out_len, 1, ...]: broadcast over the inner axes) are
//      the taps of plan_resize (reference/ops/resize_plan.h), the very plan the reference kernel
//      uses: T = 2 (linear) or 4 (cubic), a coordinate with fewer taps (exclude_outside, zero
//      weights) padded with weight 0. A coordinate outside the crop of tf_crop_and_resize becomes
//      Where(mask, X', extrapolation_value). Axes that keep their size and map x to x are skipped.
//      float16/bfloat16 interpolate in float32 (Cast in, Cast out), as the reference computes in
//      a wider type.
//      Numerics: the reference sums taps in float64; this sums them in X's type (float32), in the
//      same order: a few ulp. A padded zero-weight tap multiplies an input by 0, so an infinite or
//      NaN neighbour that the reference skips can turn that output into NaN.
// Not rewritten (the reference kernel runs): scales computed at run time under the other modes
// (the sampling positions depend on the value), a run-time roi under tf_crop_and_resize, linear or cubic
// on integer X (the reference rounds and saturates), an empty output, an invalid attribute.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeResize : public Pass {
 public:
  std::string name() const override { return "decompose_resize"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
