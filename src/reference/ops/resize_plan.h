// The per-axis plan of a Resize, shared by the reference kernel (index_resize.cc) and the
// decomposition into Gathers and weighted sums (transforms/decompose_resize.cc), so that both
// compute the same taps: every mode of Resize is separable, each output coordinate x of an axis
// reads a few input indices of that axis with fixed weights.
#pragma once
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln {

struct ResizeTap {
  int64_t index;  // in [0, in_len): neighbours outside the input are clamped to the edge
  double weight;  // never 0 (zero-weight taps are dropped)
};

// Taps of every output coordinate of one axis. An empty tap list means x_original fell outside the
// input under tf_crop_and_resize: the output takes extrapolation_value.
struct ResizeAxisPlan {
  std::vector<std::vector<ResizeTap>> taps;
  bool identity = true;  // output coordinate x reads exactly input x: the axis needs no pass
};

struct ResizePlan {
  Shape out;
  bool nearest = true;                // nearest: one tap of weight 1 per coordinate (or none)
  std::vector<ResizeAxisPlan> axes;   // one per dim; empty when the output is empty
  double extrapolation = 0.0;
};

// Plans Resize `node` on an input of shape x. `in` are the node's inputs as tensors (in[0], X, is
// not read; roi, scales and sizes are, an undefined or empty tensor standing for an omitted one).
// Invalid attributes or inputs are a UserError, as in the kernel.
ResizePlan plan_resize(const Node& node, const Shape& x, const std::vector<Tensor>& in);

}  // namespace kiln
