// trim_conv_taps: drops the kernel taps of a Conv that read only padding, for every output
// position, and the padding they read.
//
// A dilated conv on a small input is the common case: DeepLabV3's ASPP branch with dilation 36
// and padding 36 on a 28 x 28 feature map reads, at every output, only its centre tap inside the
// input; the other eight taps multiply zeros. Trimmed, it is a 1x1 conv (K 960 instead of 8640),
// and the code generator no longer stages (28 + 72)^2 padded planes per channel (the branch took
// 109 ms of the model's 136, 1 thread).
//
// Per spatial axis (stride s, dilation d, pads b and e, kernel K, input n, output m): tap k reads
// x[o*s + k*d - b]; it is live when some o in [0, m) puts that inside [0, n). The live taps form
// one range [lo, hi]. The kernel keeps taps [lo', hi'] — the live range widened just enough that
// the new pads b' = b - lo'*d and e' = e - (K-1-hi')*d stay >= 0 (ONNX pads cannot crop) — so
// every output reads the same inputs at the same positions, and the output shape is unchanged.
// The sum loses only terms that were x*0 over padding.
//
// Rewritten: Conv with constant weights, explicit pads (auto_pad NOTSET), where some axis keeps
// fewer taps. Not rewritten: computed weights, auto_pad SAME_*/VALID, nothing to trim.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class TrimConvTaps : public Pass {
 public:
  std::string name() const override { return "trim_conv_taps"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
