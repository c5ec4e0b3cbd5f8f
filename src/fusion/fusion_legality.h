// Legality of a candidate fusion, the cheap part: no cycle between groups, and the target's limits
// hold (live vector registers, kernel arguments, recomputation the cost model does not price).
// Whether the nodes can be one loop nest at all is not described here: the partitioner asks the
// code generator itself (codegen_analysis.h), after these checks and the benefit estimate.
// Pure checks, no costs (profitability lives in partitioner.cc, the rewrite in GroupGraph::merge).
// Every refusal is a FusionDecision with a reason `kiln explain` shows.
#pragma once
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/group_graph.h"

namespace kiln {

// Producer group p → consumer group c, fused into `merged` (= p ∪ c), replacing `replacing`.
FusionDecision can_fuse(const GroupGraph& gg, int p, int c, const Members& merged, const std::vector<int>& replacing,
                        const Target& t);

// Two independent groups that read the same tensor (siblings), fused into one multi-output kernel.
FusionDecision can_fuse_siblings(const GroupGraph& gg, int a, int b, const Members& merged, const Target& t);

// The resource checks shared by both: registers, kernel arguments, unpriced recomputation.
FusionDecision check_limits(const GroupGraph& gg, const Members& merged, const std::vector<int>& replacing,
                               const Target& t);

}  // namespace kiln
