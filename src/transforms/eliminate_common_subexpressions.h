// eliminate_common_subexpressions: computes each distinct expression once.
//
// In:  any graph.
// Out: 1. Constants: equal constants (same dtype, shape and bytes) are merged into the first one
//         created. Constants up to kMaxComparedElements are compared by value; larger ones only
//         when they share storage (exporters already merge tied weights, and hashing every large
//         weight would cost as much as loading the model).
//      2. Nodes, in topological order: a node with the same op, domain, attributes (compared
//         bitwise, so NaN equals NaN and 0.0 differs from -0.0), inputs and output types as an
//         earlier node is removed and its consumers read the earlier node's outputs. Because
//         consumers are visited after their producers, chains of duplicates merge in one run.
//      Nondeterministic ops (RandomNormal, training-mode Dropout, ...) and ops of unknown domains
//      are never merged. Graph output names never change: a duplicate that defines a graph output
//      is kept (its other consumers still move to the first copy).
#pragma once
#include <cstdint>

#include "transforms/pass.h"

namespace kiln {

class EliminateCommonSubexpressions : public Pass {
 public:
  static constexpr int64_t kMaxComparedElements = int64_t(1) << 16;
  std::string name() const override { return "eliminate_common_subexpressions"; }
  bool run(Graph& g) override;
};

}  // namespace kiln
