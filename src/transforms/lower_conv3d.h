// lower_conv3d: rewrites a 3-D Conv whose window spans depth and the plane (a 3x3x3 video conv,
// R3D's and C3D's) as a 2-D Conv over its output frames, so that it runs on the 2-D implicit conv
// (phase planes, the micro-kernel's segments; docs/codegen.md) instead of the generic tiled form
// (positions gathered per tile with bounds checks: 47 % of the probed peak on R3D-18's 64 -> 64
// convs, 80 % as 2-D convs).
//
// In:  Conv(X, W, B?) with X [N, C, T, H, W] floating-point, W [M, C, KT, KH, KW], one group,
//      KT > 1 and KH · KW > 1 (a window along depth only, or over the plane only, is already a
//      2-D conv to the loop lowering: planar_fold), default numerics.
// Out: the depth taps become input channels, the output frames the batch, and the frames are
//      split into runs that read the same depth taps (tap k of frame o reads input frame
//      o·st + k·dt − pad; a tap over depth padding is not computed: R3D-18's 3x3x3 convs over 8
//      frames compute 22 of 24 (frame, tap) pairs, over 1 frame 1 of 3). Per run [o0, o1) with
//      taps [k0, k1), F = o1 − o0, NK = k1 − k0:
//        S_k = Slice(X, T: o0·st + k·dt − pad .. + (F−1)·st + 1, step st)   [N, C, F, H, W]
//        X2  = Reshape(Transpose(Concat(Reshape(S_k) [N, C, 1, F, H, W], axis 2), (0, 3, 1, 2, 4, 5)),
//                      [N·F, C·NK, H, W])                        channel c·NK + k − k0 = tap k of c
//        Y2  = Conv(X2, W[:, :, k0:k1] as [M, C·NK, KH, KW], B) {the plane's kernel, strides, pads}
//      The runs' outputs are concatenated in frame order (batch 1: along the 2-D batch, so that
//      the convs write their slices in place; else along each image's frames) and
//        Y   = Transpose(Reshape(Y2s, [N, To, M, Ho, Wo]), (0, 2, 1, 3, 4))
//      The injective ops fuse into the Conv's staging (its input is staged once per call anyway)
//      and into its epilogue or its consumers' prologues.
//      Numerics: the reference's products, less the ones with a padded input (x = +0), whose
//      terms are +0 · w: the same sums when the weights are finite; with depth padding the
//      weights must be finite constants (0 · inf is NaN in the reference).
// Not rewritten under --strict-fp (the generic form keeps the reference's order exactly), nor
// groups > 1, integer X, attributes the reference rejects (it reports them), or an output frame
// whose window reads only depth padding.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class LowerConv3d : public Pass {
 public:
  std::string name() const override { return "lower_conv3d"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
