// NodeRewriter: replaces one node by a chain of new nodes at the same place in the graph — the
// common mechanics of the lowering passes (fold_batchnorm, lower_gemm, decompose_*).
//
// Values cannot be renamed, and graph outputs must keep their names, so a decomposition has to end
// in the ORIGINAL output values. The rewriter therefore removes the node first (which frees its
// outputs to be defined again) and then inserts each new node just before the node that followed
// the original, so graph order stays topological: the new nodes read only the original inputs,
// constants and each other. Any new node may define an original output (`into`), which is also how
// LayerNormalization's Mean output is produced by the ReduceMean inside the chain.
//
// Names: new nodes are "<original node name>/<suffix>" (unnamed when the original was unnamed),
// new values and constants "<first original output>/<suffix>" (made unique), so a lowered graph
// still reads like the model it came from.
//
// Decide legality before constructing a rewriter: construction removes the node.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

class NodeRewriter {
 public:
  NodeRewriter(Graph& g, Node* n);

  Graph& graph() { return g_; }
  // The original node's inputs (nullptr for omitted ones or past the end), outputs and attributes.
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return outputs_.at(i); }
  size_t num_outputs() const { return outputs_.size(); }
  const AttributeMap& attrs() const { return attrs_; }
  const std::string& node_name() const { return name_; }

  // Inserts a raw node (all outputs given) at the original position.
  Node* insert(const std::string& op, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
               AttributeMap attrs, const std::string& node_name);

  // A one-output node named "<orig>/<suffix>". Its output is `into` (an original output, whose
  // declared type must equal `type` — a mismatch is a bug in the lowering's shape logic) or, when
  // into is null, a new value "<orig output>/<suffix>" of `type`.
  Value* emit(const std::string& op, const std::vector<Value*>& inputs, const TensorType& type,
              const std::string& suffix, AttributeMap attrs = {}, Value* into = nullptr);

  // Conveniences that derive the output type.
  // Elementwise with one input: same type as x.
  Value* unary(const std::string& op, Value* x, const std::string& suffix, Value* into = nullptr);
  // Elementwise with numpy broadcasting; a's dtype.
  Value* binary(const std::string& op, Value* a, Value* b, const std::string& suffix, Value* into = nullptr);
  // Reduce* over `axes` (non-negative) with keepdims=1, axes as a constant input 1 (opset-18 form).
  Value* reduce(const std::string& op, Value* x, const std::vector<int64_t>& axes, const std::string& suffix,
                Value* into = nullptr);
  // Cast to dt (x itself when it already has that dtype and into is null).
  Value* cast(Value* x, DType dt, const std::string& suffix, Value* into = nullptr);
  // x viewed as `shape`: a new constant when x is constant (storage shared, nothing mutated),
  // otherwise a Reshape node with a constant shape input. x itself when the shape is unchanged.
  Value* reshape(Value* x, const Shape& shape, const std::string& suffix);

  // A new constant "<orig output>/<suffix>".
  Value* constant(const std::string& suffix, Tensor t);
  // A scalar constant of dtype dt holding v (rounded as a C++ conversion from double would).
  Value* scalar(const std::string& suffix, double v, DType dt);

 private:
  std::string node_name_for(const std::string& suffix) const;

  Graph& g_;
  Node* next_;  // the node the original was followed by; nullptr when it was last
  std::string name_, base_;
  std::vector<Value*> inputs_, outputs_;
  AttributeMap attrs_;
};

// Helpers shared by the lowering passes.
// The values of a float tensor as doubles (any float dtype).
std::vector<double> tensor_to_doubles(const Tensor& t);
// A tensor of dtype dt and the given shape from doubles (rounded once, from double).
Tensor tensor_from_doubles(const std::vector<double>& v, const Shape& shape, DType dt);
// Whether s broadcasts unidirectionally to out (right-aligned; each dim 1 or equal).
bool broadcasts_to(const Shape& s, const Shape& out);
// Whether v is an output that something reads (a node input or a graph output).
bool is_used(const Graph& g, const Value* v);

}  // namespace kiln
