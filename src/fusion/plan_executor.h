// Executes a FusionPlan group by group with the reference kernels: each group sees only the
// tensors the plan says it reads from memory (graph inputs, constants, earlier groups' outputs),
// runs its nodes op by op, and publishes only the tensors the plan says it writes. A plan that
// reads a tensor before any group wrote it, or leaves a graph output unwritten, is an
// InternalError. Comparing the result with run_reference() checks that fusion kept the function
// (until code generation lands, this is the fused graph's correctness test).
#pragma once
#include <unordered_map>

#include "fusion/fusion_plan.h"
#include "reference/executor.h"

namespace kiln {

TensorMap run_plan_reference(const Graph& g, const FusionPlan& plan, const TensorMap& inputs);

// One group run by the reference kernels: its inputs read from `memory` (constants from the
// graph), its nodes run op by op; returns every value it read or computed. An input nothing wrote
// is an InternalError. Also the per-kernel oracle of `kiln run --check` (each kernel on the values
// the compiled kernels before it wrote).
std::unordered_map<const Value*, Tensor> run_group_reference(const FusionGroup& grp,
                                                             const std::unordered_map<const Value*, Tensor>& memory);

}  // namespace kiln
