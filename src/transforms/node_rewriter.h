// NodeRewriter: replaces one node by a chain of new nodes at the same place in the graph — the
// common mechanics of the lowering passes (fold_batchnorm, lower_gemm, decompose_*) — and
// rewrite_in_order(), the loop that drives it.
//
// Values cannot be renamed, and graph outputs must keep their names, so a decomposition has to end
// in the ORIGINAL output values. The rewriter therefore removes the node first (which frees its
// outputs to be defined again) and then adds the new nodes; any of them may define an original
// output (`into`), which is also how LayerNormalization's Mean output is produced by the
// ReduceMean inside the chain.
//
// Placement without quadratic cost: Graph::insert_node_before and remove_node search the node
// list linearly, so inserting each new node before the original's successor would make a pass over
// a graph with many composites quadratic (3000 LayerNorm+Softmax pairs took 12 s). Instead
// rewrite_in_order() rebuilds the list in one sweep: it keeps the unvisited nodes at the front and
// the visited ones at the back, so the node being visited is always first (found at once) and
// "append at the end" is exactly its original position. A NodeRewriter appends, and is therefore
// only used from inside rewrite_in_order().
//
// Names: new nodes are "<original node name>/<suffix>" (unnamed when the original was unnamed),
// new values and constants "<first original output>/<suffix>" (made unique), so a lowered graph
// still reads like the model it came from.
//
// Decide legality before constructing a rewriter: construction removes the node.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

// Visits every node of g in graph order. `wants(n)` says whether n is to be rewritten; if so
// `rewrite(n)` replaces it, using a NodeRewriter on n (it may also remove nodes visited earlier,
// e.g. the producer a BatchNormalization folds into). Nodes not rewritten keep their relative
// order and everything about them but their identity: they are re-created at the back, so Node
// pointers taken before the call dangle (Values, their uses and producers stay consistent).
// Returns whether anything was rewritten; when `wants` accepts no node the graph is not touched.
bool rewrite_in_order(Graph& g, const std::function<bool(const Node&)>& wants,
                      const std::function<void(Node*)>& rewrite);

class NodeRewriter {
 public:
  // n must be the first node of g's list (as inside rewrite_in_order); it is removed.
  NodeRewriter(Graph& g, Node* n);

  Graph& graph() { return g_; }
  // The original node's inputs (nullptr for omitted ones or past the end), outputs and attributes.
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return outputs_.at(i); }
  size_t num_outputs() const { return outputs_.size(); }
  const AttributeMap& attrs() const { return attrs_; }
  const std::string& node_name() const { return name_; }

  // Adds a raw node (all outputs given) at the original position.
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
  // Reduce* over `axes` (non-negative) with keepdims=1, axes as a constant input 1 (opset-18 form;
  // one "<orig output>/axes" constant per distinct axes list of this rewrite).
  Value* reduce(const std::string& op, Value* x, const std::vector<int64_t>& axes, const std::string& suffix,
                Value* into = nullptr);
  // Cast to dt (x itself when it already has that dtype and into is null).
  Value* cast(Value* x, DType dt, const std::string& suffix, Value* into = nullptr);
  // x viewed as `shape`: a new constant when x is constant (storage shared, nothing mutated),
  // otherwise a Reshape node with a constant shape input. x itself when the shape is unchanged.
  Value* reshape(Value* x, const Shape& shape, const std::string& suffix);

  // A new constant "<orig output>/<suffix>".
  Value* constant(const std::string& suffix, Tensor t);
  // A new 1-D int64 constant holding v (a Slice's starts, a Pad's pads, a Reshape's shape).
  Value* ints(const std::string& suffix, const std::vector<int64_t>& v);
  // A scalar constant of dtype dt holding v (rounded as a C++ conversion from double would).
  Value* scalar(const std::string& suffix, double v, DType dt);

 private:
  std::string node_name_for(const std::string& suffix) const;

  Graph& g_;
  std::string name_, base_;
  std::vector<Value*> inputs_, outputs_;
  AttributeMap attrs_;
  std::map<std::vector<int64_t>, Value*> axes_;
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
