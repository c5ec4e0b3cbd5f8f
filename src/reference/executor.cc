#include "reference/executor.h"

#include <unordered_map>

#include "reference/op_registry.h"

namespace kiln {

std::vector<Tensor> run_node(const Node& node, const std::vector<Tensor>& inputs) {
  const OpInfo* info = node.domain().empty() ? OpRegistry::global().find(node.op_type()) : nullptr;
  if (!info) unsupported_error(node.describe(), ": unsupported op");
  std::vector<Tensor> outs;
  try {
    outs = info->kernel(node, inputs);
  } catch (const UserError& e) {
    throw UserError(node.describe() + ": " + e.what());
  }
  KILN_CHECK(outs.size() >= node.num_outputs(), node.describe(), " kernel returned ", outs.size(),
             " outputs for ", node.num_outputs());
  outs.resize(node.num_outputs());
  return outs;
}

void check_input_types(const Graph& g, const std::map<std::string, TensorType>& inputs) {
  for (Value* in : g.inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end()) user_error("missing input '", in->name(), "' (", in->type().str(), ")");
    const TensorType& t = it->second;
    if (t.dtype != in->dtype() || t.shape != in->shape())
      user_error("input '", in->name(), "' expects ", in->type().str(), ", got ", t.str());
  }
  for (const auto& [name, t] : inputs)
    if (!g.find_value(name) || !g.find_value(name)->is_graph_input()) user_error("model has no input named '", name, "'");
}

std::vector<const Tensor*> check_inputs(const Graph& g, const TensorMap& inputs) {
  std::map<std::string, TensorType> types;
  for (const auto& [name, t] : inputs) types[name] = TensorType{t.dtype(), t.shape()};
  check_input_types(g, types);
  std::vector<const Tensor*> r;
  for (Value* in : g.inputs()) r.push_back(&inputs.at(in->name()));
  return r;
}

namespace {

// Runs g; when keep_all is false, intermediates are freed after their last use.
std::unordered_map<const Value*, Tensor> execute(const Graph& g, const TensorMap& inputs, bool keep_all) {
  std::unordered_map<const Value*, Tensor> env;
  auto checked = check_inputs(g, inputs);
  for (size_t i = 0; i < checked.size(); ++i) env[g.inputs()[i]] = *checked[i];

  auto lookup = [&](const Value* v) -> Tensor {
    if (!v) return {};
    if (v->is_constant()) return v->constant();
    auto it = env.find(v);
    KILN_CHECK(it != env.end(), "value ", v->name(), " used before definition");
    return it->second;
  };

  // Free each intermediate after its last use so peak memory stays near the model's working set.
  std::unordered_map<const Value*, size_t> remaining;
  for (Node* n : g.nodes())
    for (Value* v : n->inputs())
      if (v) remaining[v]++;

  for (Node* n : g.nodes()) {
    std::vector<Tensor> ins;
    ins.reserve(n->num_inputs());
    for (Value* v : n->inputs()) ins.push_back(lookup(v));
    std::vector<Tensor> outs = run_node(*n, ins);
    for (size_t i = 0; i < outs.size(); ++i) {
      Value* o = n->output(i);
      const Tensor& t = outs[i];
      if (o->dtype() != DType::Undefined && (t.dtype() != o->dtype() || t.shape() != o->shape()))
        throw InternalError(cat(n->describe(), ": kernel produced ", TensorType{t.dtype(), t.shape()}.str(),
                                " for output '", o->name(), "' typed ", o->type().str()));
      env[o] = t;
    }
    if (!keep_all)
      for (Value* v : n->inputs())
        if (v && --remaining[v] == 0 && !g.is_graph_output(v)) env.erase(v);
  }
  for (Value* o : g.outputs())
    if (o->is_constant()) env[o] = o->constant();
  return env;
}

}  // namespace

TensorMap run_reference(const Graph& g, const TensorMap& inputs) {
  auto env = execute(g, inputs, /*keep_all=*/false);
  TensorMap result;
  for (Value* o : g.outputs()) result[o->name()] = env.at(o);
  return result;
}

std::unordered_map<const Value*, Tensor> run_reference_values(const Graph& g, const TensorMap& inputs) {
  return execute(g, inputs, /*keep_all=*/true);
}

}  // namespace kiln
