// eliminate_dead_code: deletes computation whose result can never be observed.
//
// In:  any graph.
// Out: only nodes with at least one output that reaches a graph output (directly or through
//      other live nodes); then every value that is no longer produced, used or a graph output is
//      dropped, including unused constants. Graph inputs are kept even when unused: they are the
//      model's signature.
//
// ONNX inference ops have no side effects, so "unobservable" is exactly "does not reach an output".
#pragma once
#include "transforms/pass.h"

namespace kiln {

class EliminateDeadCode : public Pass {
 public:
  std::string name() const override { return "eliminate_dead_code"; }
  bool run(Graph& g) override;
};

}  // namespace kiln
