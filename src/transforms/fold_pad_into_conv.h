// fold_pad_into_conv: a constant-mode Pad of zeros that only pads the spatial axes, read by a
// Conv, becomes part of that Conv's own pads.
//
// Exporters that spell padding as its own op produce this everywhere: Hugging Face's MobileNetV2
// (TensorFlow "SAME" padding, tf_padding=True) puts a Pad before every convolution, a zero-width
// one before each 1x1; tf2onnx and Keras exports do the same for SAME convs. As a separate op the
// Pad made each conv's input a computed value, staged into a padded copy per call (the 16 -> 96
// expansion over 112x112 spent 0.64 ms, ONNX Runtime's conv 0.49) where a conv with pads reads
// its input in place and pads while staging only where its form needs it.
//
// Exact: the padded elements are zeros either way and the conv multiplies the same taps in the
// same order; the one difference would be 0 · inf (NaN through the Pad, skipped padding through a
// conv that skips it), so the weights must be constant and finite. Not rewritten: other modes
// (reflect, edge, wrap), a nonzero pad value, padding of the batch or channel axes, negative pads
// (cropping), computed pads or weights, auto_pad other than NOTSET. The Pad itself stays while
// anything else reads it (dead code elimination removes it otherwise).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class FoldPadIntoConv : public Pass {
 public:
  std::string name() const override { return "fold_pad_into_conv"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites the Conv n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
