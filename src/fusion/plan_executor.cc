#include "fusion/plan_executor.h"

#include <unordered_map>

namespace kiln {

std::unordered_map<const Value*, Tensor> run_group_reference(const FusionGroup& grp,
                                                             const std::unordered_map<const Value*, Tensor>& memory) {
  std::unordered_map<const Value*, Tensor> local;
  for (const Value* v : grp.inputs) {
    if (v->is_constant()) {
      local[v] = v->constant();
      continue;
    }
    auto it = memory.find(v);
    KILN_CHECK(it != memory.end(), "fusion plan: kernel ", grp.name, " reads '", v->name(), "' before any kernel wrote it");
    local[v] = it->second;
  }
  for (const Node* n : grp.nodes) {
    std::vector<Tensor> args;
    for (const Value* v : n->inputs()) {
      if (!v) {
        args.emplace_back();
        continue;
      }
      auto it = local.find(v);
      KILN_CHECK(it != local.end(), "fusion plan: kernel ", grp.name, " uses '", v->name(),
                 "', which it neither reads nor computes before ", n->describe());
      args.push_back(it->second);
    }
    auto outs = run_node(*n, args);
    for (size_t i = 0; i < outs.size(); ++i)
      if (n->output(i)) local[n->output(i)] = outs[i];
  }
  return local;
}

TensorMap run_plan_reference(const Graph& g, const FusionPlan& plan, const TensorMap& inputs) {
  std::unordered_map<const Value*, Tensor> memory;
  auto checked = check_inputs(g, inputs);
  for (size_t i = 0; i < checked.size(); ++i) memory[g.inputs()[i]] = *checked[i];
  for (const auto& grp : plan.groups) {
    std::unordered_map<const Value*, Tensor> local = run_group_reference(grp, memory);
    for (const Value* v : grp.outputs) {
      auto it = local.find(v);
      KILN_CHECK(it != local.end(), "fusion plan: kernel ", grp.name, " should write '", v->name(), "'");
      memory[v] = it->second;
    }
  }
  TensorMap result;
  for (Value* o : g.outputs()) {
    if (o->is_constant()) {
      result[o->name()] = o->constant();
      continue;
    }
    auto it = memory.find(o);
    KILN_CHECK(it != memory.end(), "fusion plan never writes graph output '", o->name(), "'");
    result[o->name()] = it->second;
  }
  return result;
}

}  // namespace kiln
