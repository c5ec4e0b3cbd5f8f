// Graph IR: a DAG of Nodes connected by Values, kept in topological order.
//
// - A Value is one tensor: a name, a TensorType (dtype + static shape), and either a producer Node,
//   graph-input status, or constant data (ONNX initializers and folded constants).
// - A Node is one operator application: op type (+ domain), attributes, input and output Values.
//   An omitted optional input is a nullptr entry in inputs().
// - The Graph owns all Values and Nodes. nodes() is in topological order; passes that insert nodes
//   keep it so (insert_node_before) or call topo_sort().
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/attribute.h"
#include "ir/tensor.h"

namespace kiln {

class Node;
class Graph;

class Value {
 public:
  const std::string& name() const { return name_; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  void set_type(TensorType t) { type_ = std::move(t); }

  Node* producer() const { return producer_; }
  bool is_graph_input() const { return is_input_; }
  bool is_constant() const { return constant_.has_value(); }
  const Tensor& constant() const { return *constant_; }
  // Makes this value a constant (drops any producer link; the caller removes the producer node).
  void set_constant(Tensor t);

  // Consumers as (node, input index) pairs, in node order of insertion.
  const std::vector<std::pair<Node*, int>>& uses() const { return uses_; }

 private:
  friend class Graph;
  friend class Node;
  std::string name_;
  TensorType type_;
  Node* producer_ = nullptr;
  bool is_input_ = false;
  std::optional<Tensor> constant_;
  std::vector<std::pair<Node*, int>> uses_;
};

class Node {
 public:
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }  // "" for the default ONNX domain
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return outputs_.at(i); }
  size_t num_inputs() const { return inputs_.size(); }
  size_t num_outputs() const { return outputs_.size(); }
  // Rewires input i to v (v may be nullptr for an omitted optional input); i may be past the end,
  // which appends (omitted inputs in between).
  void set_input(size_t i, Value* v);
  // Renames the op (canonicalisation of legacy ops, e.g. Upsample → Resize).
  void set_op_type(std::string op) { op_type_ = std::move(op); }

  AttributeMap& attrs() { return attrs_; }
  const AttributeMap& attrs() const { return attrs_; }
  bool has_attr(const std::string& n) const { return attrs_.count(n) != 0; }
  // Typed accessors; a present attribute of the wrong kind is a UserError naming it.
  int64_t attr_int(const std::string& n, int64_t dflt) const;
  float attr_float(const std::string& n, float dflt) const;
  std::string attr_string(const std::string& n, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& n, const std::vector<int64_t>& dflt = {}) const;
  std::vector<float> attr_floats(const std::string& n, const std::vector<float>& dflt = {}) const;
  std::vector<std::string> attr_strings(const std::string& n) const;
  const Tensor* attr_tensor(const std::string& n) const;  // nullptr when absent
  // Throws UserError when required attribute n is absent.
  void require_attr(const std::string& n) const;

  // "node 'conv1' (Conv)" — the context prefix used in error messages.
  std::string describe() const;

 private:
  friend class Graph;
  std::string op_type_, domain_, name_;
  std::vector<Value*> inputs_, outputs_;
  AttributeMap attrs_;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Deep copy (values keep names; constants share storage).
  std::unique_ptr<Graph> clone() const;

  // --- construction ---
  // Names must be unique within the graph; a duplicate is a UserError.
  Value* add_input(const std::string& name, TensorType type);
  Value* add_constant(const std::string& name, Tensor t);
  // New value with no producer yet (to be used as a node output).
  Value* add_value(const std::string& name, TensorType type);
  // Appends a node; outputs must be fresh values from add_value.
  Node* add_node(const std::string& op_type, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                 AttributeMap attrs = {}, const std::string& name = "", const std::string& domain = "");
  // Inserts a node before `before` (keeps topological order when inputs are defined earlier).
  Node* insert_node_before(Node* before, const std::string& op_type, const std::vector<Value*>& inputs,
                           const std::vector<Value*>& outputs, AttributeMap attrs = {}, const std::string& name = "");
  void add_output(Value* v) { outputs_.push_back(v); }
  void set_outputs(std::vector<Value*> v) { outputs_ = std::move(v); }

  // --- mutation ---
  // Replaces every use of `from` (node inputs and graph outputs) by `to`.
  void replace_all_uses(Value* from, Value* to);
  // Removes a node; its outputs must be unused (or about to be removed).
  void remove_node(Node* n);
  // Removes values that are neither produced, used, graph inputs, constants in use, nor outputs.
  void remove_unused_values();
  // Restores topological order (stable for nodes already in order).
  void topo_sort();
  // A name not yet used in this graph, derived from `base`.
  std::string unique_name(const std::string& base);

  // --- queries ---
  const std::list<std::unique_ptr<Node>>& node_list() const { return nodes_; }
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*> values() const;  // every value, in creation order
  Value* find_value(const std::string& name) const;
  bool is_graph_output(const Value* v) const;

  // Opset of the default ONNX domain the graph was imported with (kiln canonicalises ops to the
  // newest form, but some attribute defaults depend on it).
  int64_t opset() const { return opset_; }
  void set_opset(int64_t o) { opset_ = o; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

 private:
  Value* new_value(const std::string& name);
  Node* make_node(const std::string& op_type, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                  AttributeMap attrs, const std::string& name, const std::string& domain);

  std::string name_ = "main";
  int64_t opset_ = 17;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_, outputs_;
  uint64_t name_counter_ = 0;
};

// Does `to` read `from`'s result, directly or through producers for which `inside` holds (a fusion
// group's members)? False for to == from. Fusion legality and the lowering's placements ask it.
bool depends_through(const Node* to, const Node* from, const std::function<bool(const Node*)>& inside);

}  // namespace kiln
