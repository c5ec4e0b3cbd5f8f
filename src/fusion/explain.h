// Renderings of a FusionPlan for `kiln explain`: text for people, JSON for tools, Graphviz DOT.
#pragma once
#include <string>

#include "fusion/fusion_plan.h"

namespace kiln {

std::string explain_text(const Graph& g, const FusionPlan& plan);
std::string explain_json(const Graph& g, const FusionPlan& plan);
std::string explain_dot(const Graph& g, const FusionPlan& plan);

}  // namespace kiln
