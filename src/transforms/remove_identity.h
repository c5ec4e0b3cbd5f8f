// remove_identity: deletes ops that pass their input through unchanged.
//
// In:  any graph. Identity nodes, and Dropout nodes in inference mode (training_mode absent or a
//      constant false) whose mask output is unused, and Reduce* with noop_with_empty_axes=1 and no
//      axes (absent, or an input of no elements), which return their input.
// Out: the same graph with those nodes removed and their consumers reading the input directly.
//
// Graph output names never change. When the removed node's output is a graph output, the producer
// of its input is rebuilt to define the output value directly ("rename by rewiring"); the node is
// kept when that is impossible: its input is a graph input, a constant, or itself a graph output.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class RemoveIdentity : public Pass {
 public:
  std::string name() const override { return "remove_identity"; }
  bool run(Graph& g) override;
};

}  // namespace kiln
