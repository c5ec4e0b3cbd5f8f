// lower_conv3d: rewrites a 3-D Conv whose window spans depth and the plane (a 3x3x3 video conv,
// R3D's and C3D's) as a 2-D Conv over its output frames, so that it runs on the 2-D implicit conv
// (phase planes, the micro-kernel's segments; docs/codegen.md) instead of the generic tiled form
// (positions gathered per tile with bounds checks: 47 % of the probed peak on R3D-18's 64 -> 64
// convs, 80 % as 2-D convs).
//
// In:  Conv(X, W, B?) with X [N, C, T, H, W] floating-point, W [M, C, KT, KH, KW], one group,
//      KT > 1 and KH · KW > 1 (a window along depth only, or over the plane only, is already a
//      2-D conv to the loop lowering: planar_fold), default numerics.
// Out: the depth taps become input channels, the output frames the batch:
//        Xp = Pad(X) along T by the conv's depth pads (when any)
//        S_kt = Slice(Xp, T: kt·dt .. kt·dt + (To−1)·st + 1, step st)     [N, C, To, H, W], kt < KT
//        X2 = Reshape(Transpose(Concat(Reshape(S_kt) [N, C, 1, To, H, W], axis 2), (0, 3, 1, 2, 4, 5)),
//                     [N·To, C·KT, H, W])                          channel c·KT + kt = frame kt of c
//        Y2 = Conv(X2, Reshape(W, [M, C·KT, KH, KW]), B) {the plane's kernel, strides, dilations, pads}
//        Y  = Transpose(Reshape(Y2, [N, To, M, Ho, Wo]), (0, 2, 1, 3, 4))
//      The injective ops fuse into the Conv's staging (its input is staged once per call anyway)
//      and into its epilogue or its consumers' prologues.
//      Numerics: the same products; a padded depth tap adds x·w with x = +0 where the reference
//      skips it, so with depth padding the weights must be finite (0 · inf is NaN) and constant.
// Not rewritten under --strict-fp (the generic form keeps the reference's order exactly), nor
// groups > 1, integer X, or attributes the reference rejects (it reports them).
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
