// A graph pass: one rewrite of the graph IR, named for what it does. Passes are listed in order by
// simplification_pipeline() (transforms/pipeline.h), which also dumps, times and verifies them.
#pragma once
#include <string>

#include "ir/graph.h"

namespace kiln {

class Pass {
 public:
  virtual ~Pass();
  // snake_case name used by --dump-after / --disable-pass and golden tests ("fold_constants").
  virtual std::string name() const = 0;
  // Rewrites g in place; returns whether it changed the graph. Leaves the graph valid
  // (verify_graph) and never renames graph inputs or outputs.
  virtual bool run(Graph& g) = 0;
};

}  // namespace kiln
