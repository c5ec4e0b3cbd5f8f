// lower_conv_transpose: rewrites ConvTranspose as a Conv, so it is a contraction the loop lowering
// generates (tiled through the micro-kernel, with its epilogue fused) instead of a reference kernel.
//
// In:  ConvTranspose(X, W, B?) {strides, dilations, pads, output_padding, output_shape, auto_pad,
//      group} with X [N, C, D1..Dn] floating-point, W [C, M/group, K1..Kn].
// Out (2-D, one stride s > 1 on both axes, no dilation, one group, constant W: the sub-pixel
//      form, which computes no product with an inserted zero):
//        Y = Slice(DepthToSpace(Conv(X, W'') {pads, strides 1}, s, CRD)) + B
//      where W'' [M*s*s, C, ceil(Kh/s), ceil(Kw/s)] holds, for output phase (rh, rw) (row
//      (m*s + rh)*s + rw), the kernel taps rh, rh+s, ... and rw, rw+s, ... flipped (missing ones 0):
//      with o + pad_begin = s*q + r, y[o] = sum_t x[q - t] * w[r + s*t]. The Conv is padded by
//      T-1-floor(pad_begin/s) before and to the q range the output needs after (negative: a
//      cropping Pad first); the Slice starts at pad_begin - s*floor(pad_begin/s). Measured
//      (kiln bench --threads 1, 2026-12-01, 1x64x32x32 -> 1x32x64x64, k4 s2 p1): 0.43 ms, against
//      4.3-8.5 ms for the zero-inserted form below and 18-28 ms for the reference kernel.
// Out (otherwise): Y = Conv(Z, W', B) {dilations, group, pads, strides 1}, where
//      - ConvTranspose scatters x[i] * w[k] to y[i*s + k*dil - pad_begin]; that is a Conv with
//        stride 1 over Z, the input with s-1 zeros inserted after each element (along each dim
//        with stride s > 1), padded by dil*(K-1) - pad_begin before and so that the output has the
//        requested length after (dil*(K-1) - pad_end + output_padding in the plain case; from
//        output_shape or auto_pad otherwise, with the spec's split of the odd element);
//      - W' [M, C/group, K...] is W with input and output channels swapped within each group and
//        every spatial axis flipped: a new constant, computed at compile time; for W computed at
//        run time, Reshape -> Transpose -> Reshape -> Slice (step -1 on the spatial axes);
//      - the zero insertion is Reshape(X, [N, C, D1, 1, D2, 1, ...]) -> Pad(0 before, s-1 after
//        on the new unit axes) -> Reshape([N, C, D1*s1, D2*s2, ...]): injective ops the Conv reads
//        through its prologue (the one trailing run of s-1 zeros per dim this adds beyond the last
//        element is absorbed into the right padding);
//      - non-negative padding goes into the Conv's pads; negative padding (pads larger than the
//        kernel's reach) is a cropping Pad (negative pads) before the Conv.
//      Numerics: the same products summed in another order (a Conv's, over channels and taps).
// Not rewritten: integer X, invalid attributes (the reference reports them).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class LowerConvTranspose : public Pass {
 public:
  std::string name() const override { return "lower_conv_transpose"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
