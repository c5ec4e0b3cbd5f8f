// Renderings of a FusionPlan for `kiln explain`: text for people, JSON for tools, Graphviz DOT.
#pragma once
#include <string>

#include "fusion/fusion_plan.h"

namespace kiln {

// Figures from later stages that explain also reports (memory planning).
struct ExplainExtras {
  int64_t arena_bytes = -1;          // peak arena after memory planning (-1: not computed)
  int64_t intermediate_sum_bytes = -1;  // all intermediates without reuse
  bool strict_fp = false;               // the numerics mode the plan is for (--strict-fp)
};

std::string explain_text(const Graph& g, const FusionPlan& plan, const ExplainExtras& extras = {});
std::string explain_json(const Graph& g, const FusionPlan& plan, const ExplainExtras& extras = {});
std::string explain_dot(const Graph& g, const FusionPlan& plan);
// The plan's structure only (groups, their nodes, refusals; no cost figures): the golden-test form.
//   kernel fused_conv_add_relu_0 [contraction]: conv, bias, relu
//   view view_1: flatten
//   rejected hardmax -> relu: Hardmax 'hardmax' has no generated code ...
std::string plan_structure(const FusionPlan& plan);

}  // namespace kiln
