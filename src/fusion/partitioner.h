// partition(): groups a primitive graph's nodes into fusion groups (future kernels).
// The algorithm note is at the top of partitioner.cc.
#pragma once
#include "fusion/fusion_plan.h"
#include "ir/graph.h"

namespace kiln {

FusionPlan partition(const Graph& g, const FusionOptions& opts = {});

}  // namespace kiln
