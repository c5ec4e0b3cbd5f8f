// fold_constants: evaluates, at compile time, every node whose result does not depend on the
// graph inputs' values.
//
// In:  any graph. A node is foldable when it is deterministic, in the default ONNX domain, has a
//      reference kernel, and every input is a constant or omitted. Shape and Size fold whenever
//      their input exists, constant or not, because kiln shapes are static.
// Out: each folded node removed, its outputs turned into constants (Value::set_constant), and
//      constants nobody uses any more dropped. Nodes are visited in topological order, so whole
//      constant subgraphs fold in one run — including the Shape→Gather→Unsqueeze→Concat→Reshape
//      chains PyTorch exports for x.view(x.size(0), -1).
//
// Size rule: a node is NOT folded when its outputs hold more than kMaxExpandedElements (2^20)
// elements in total AND more elements than its constant inputs together. That keeps
// ConstantOfShape / Expand / Tile / Range / Pad / Resize of a small input from turning into a huge
// constant that bloats memory (the runtime regenerates it cheaply), while folding that does not
// grow the data (Transpose or Cast of a weight) always happens.
//
// A kernel error (UserError) on constant inputs propagates: a constant subgraph that cannot be
// evaluated is an error in the model, and it would fail at run time anyway.
#pragma once
#include <cstdint>
#include <optional>

#include "transforms/pass.h"

namespace kiln {

// The value of a Shape or Size node computed from its input's static type (nullopt for other ops
// or an untyped input). Shared with the frontend, which needs shape values before folding runs.
std::optional<Tensor> fold_shape_query(const Node& n);

class FoldConstants : public Pass {
 public:
  static constexpr int64_t kMaxExpandedElements = int64_t(1) << 20;
  std::string name() const override { return "fold_constants"; }
  bool run(Graph& g) override;
};

}  // namespace kiln
