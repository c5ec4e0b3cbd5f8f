// decompose_grid_sample: rewrites GridSample (opset 16) as elementwise coordinate arithmetic and
// GatherElements of the input's flattened planes, so that the fusion engine fuses it and the loop
// lowering generates it (GatherElements with computed indices is an injective gather) instead of
// running the reference kernel (RAFT's 48 samplings of its correlation pyramid, spatial
// transformers).
//
// In:  GridSample(X [N, C, H, W] f32, grid [N, Ho, Wo, 2] f32), any mode (bilinear, nearest,
//      bicubic), padding_mode (zeros, border, reflection) and align_corners.
// Out: with P = Ho · Wo and Xf = Reshape(X, [N, C, H · W]):
//        gx, gy = the grid's x and y as [N, 1, P] (Slice, Reshape)
//        ix, iy = the pixel coordinates (reference/ops/index_grid_sample.cc's formulas, op by op),
//                 bilinear and nearest: padded (border: Clip; reflection: the reflection formula
//                 with Abs, Mod (fmod), Floor, Equal and Where, then Clip)
//        a tap at (x, y): Where(inside, GatherElements(Xf, Expand(y · W + x as int64, [N, C, P]),
//                 axis 2), 0), the coordinate clamped into the input for the gather and `inside`
//                 its bounds test (zeros padding; the other modes are inside by construction)
//        bilinear: the four taps times their weights, summed in the reference's order; nearest:
//        the tap at Round (half to even); bicubic: 4 x 4 taps at coordinates padded one by one,
//        cubic weights (A = −0.75) along x per row, then along y
//        Y = Reshape(sum, [N, C, Ho, Wo])
//      Numerics: the reference kernel's float32 operations in its order; what the code generator
//      contracts (FMA) may differ by an ulp, and nearest's rounding can then pick the other
//      neighbour at an exact half.
// Not rewritten (the reference kernel runs): other dtypes or ranks (the reference rejects them), an
// empty input or output.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeGridSample : public Pass {
 public:
  std::string name() const override { return "decompose_grid_sample"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
