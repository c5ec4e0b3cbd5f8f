// Legality of a candidate fusion: can these nodes be one loop nest on this target? Pure checks, no
// costs (profitability lives in partitioner.cc, the rewrite in GroupGraph::merge). Every refusal is
// a FusionDecision with a reason `kiln explain` shows.
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

// The structural and resource checks shared by both: one loop nest, registers, kernel arguments.
FusionDecision check_loop_nest(const GroupGraph& gg, const Members& merged, const std::vector<int>& replacing,
                               const Target& t);

}  // namespace kiln
