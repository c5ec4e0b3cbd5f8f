// Renderings of a FusionPlan for `kiln explain`: text for people, JSON for tools, Graphviz DOT.
#pragma once
#include <string>

#include "fusion/fusion_plan.h"

namespace kiln {

std::string explain_text(const Graph& g, const FusionPlan& plan);
std::string explain_json(const Graph& g, const FusionPlan& plan);
std::string explain_dot(const Graph& g, const FusionPlan& plan);
// The plan's structure only (groups, their nodes, refusals; no cost figures): the golden-test form.
//   kernel fused_conv_add_relu_0 [contraction]: conv, bias, relu
//   view view_1: flatten
//   rejected topk -> relu: TopK 'topk' is opaque: ...
std::string plan_structure(const FusionPlan& plan);

}  // namespace kiln
