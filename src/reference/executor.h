// The reference executor: interprets a Graph node by node with the registry's plain kernels. No
// fusion, no tricks — it is the oracle every compiled kernel is checked against.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace kiln {

using TensorMap = std::map<std::string, Tensor>;

// Runs one node (outputs in node order). Errors are UserErrors prefixed with the node's description.
std::vector<Tensor> run_node(const Node& node, const std::vector<Tensor>& inputs);

// Checks that `inputs` holds exactly the graph's inputs with their declared dtypes and shapes
// (UserError naming the input otherwise) and returns them in graph-input order.
std::vector<const Tensor*> check_inputs(const Graph& g, const TensorMap& inputs);
// The same check on types alone (the same messages), for callers whose inputs are buffers that
// are not Tensors: the public API binds numpy arrays in place (include/kiln/model.h, Model::bind).
void check_input_types(const Graph& g, const std::map<std::string, TensorType>& inputs);

// Runs the whole graph. `inputs` maps graph-input names to tensors; each must match the declared
// dtype and shape (a mismatch is a UserError naming the input). Returns graph outputs by name.
TensorMap run_reference(const Graph& g, const TensorMap& inputs);

// Like run_reference, but keeps and returns every value the graph computes (for --check, which
// compares each compiled kernel's outputs with the reference).
std::unordered_map<const Value*, Tensor> run_reference_values(const Graph& g, const TensorMap& inputs);

}  // namespace kiln
