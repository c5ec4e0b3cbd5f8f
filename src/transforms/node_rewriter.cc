#include "transforms/node_rewriter.h"

#include <algorithm>

#include "ir/printer.h"
#include "reference/kernel_util.h"

namespace kiln {

bool rewrite_in_order(Graph& g, const std::function<bool(const Node&)>& wants,
                      const std::function<void(Node*)>& rewrite) {
  const std::vector<Node*> order = g.nodes();
  if (std::none_of(order.begin(), order.end(), [&](const Node* n) { return wants(*n); })) return false;
  for (Node* n : order) {
    KILN_CHECK(g.node_list().front().get() == n, "rewrite_in_order: ", n->describe(), " is not first");
    if (wants(*n)) {
      rewrite(n);
      continue;
    }
    // Move n to the back: re-create it there (its outputs are redefined at once, so their uses stay).
    const std::string op = n->op_type(), name = n->name(), domain = n->domain();
    const std::vector<Value*> inputs = n->inputs(), outputs = n->outputs();
    AttributeMap attrs = n->attrs();
    g.remove_node(n);
    g.add_node(op, inputs, outputs, std::move(attrs), name, domain);
  }
  return true;
}

NodeRewriter::NodeRewriter(Graph& g, Node* n)
    : g_(g), name_(n->name()), inputs_(n->inputs()), outputs_(n->outputs()), attrs_(n->attrs()) {
  KILN_CHECK(!outputs_.empty(), "NodeRewriter: ", n->describe(), " has no outputs");
  KILN_CHECK(g.node_list().front().get() == n, "NodeRewriter: ", n->describe(), " is not the first node");
  base_ = outputs_[0]->name();
  g.remove_node(n);
}

Node* NodeRewriter::insert(const std::string& op, const std::vector<Value*>& inputs,
                           const std::vector<Value*>& outputs, AttributeMap attrs, const std::string& node_name) {
  return g_.add_node(op, inputs, outputs, std::move(attrs), node_name);
}

std::string NodeRewriter::node_name_for(const std::string& suffix) const {
  return name_.empty() ? std::string() : name_ + "/" + suffix;
}

Value* NodeRewriter::emit(const std::string& op, const std::vector<Value*>& inputs, const TensorType& type,
                          const std::string& suffix, AttributeMap attrs, Value* into) {
  Value* out = into;
  if (out) {
    KILN_CHECK(out->type() == type, "lowering of '", name_, "': ", op, " '", suffix, "' computes ", type.str(),
               " but the output ", print_value_ref(out), " is ", out->type().str());
  } else {
    out = g_.add_value(g_.unique_name(base_ + "/" + suffix), type);
  }
  insert(op, inputs, {out}, std::move(attrs), node_name_for(suffix));
  return out;
}

Value* NodeRewriter::unary(const std::string& op, Value* x, const std::string& suffix, Value* into) {
  return emit(op, {x}, x->type(), suffix, {}, into);
}

Value* NodeRewriter::binary(const std::string& op, Value* a, Value* b, const std::string& suffix, Value* into) {
  return emit(op, {a, b}, TensorType{a->dtype(), broadcast_shapes({a->shape(), b->shape()})}, suffix, {}, into);
}

Value* NodeRewriter::reduce(const std::string& op, Value* x, const std::vector<int64_t>& axes,
                            const std::string& suffix, Value* into) {
  Shape s = x->shape();
  for (int64_t a : axes) s.at(size_t(a)) = 1;
  Value*& axes_v = axes_[axes];
  if (!axes_v) axes_v = ints("axes", axes);
  return emit(op, {x, axes_v}, TensorType{x->dtype(), s}, suffix, {{"keepdims", int64_t(1)}}, into);
}

Value* NodeRewriter::cast(Value* x, DType dt, const std::string& suffix, Value* into) {
  if (x->dtype() == dt && !into) return x;
  return emit("Cast", {x}, TensorType{dt, x->shape()}, suffix, {{"to", int64_t(dtype_to_onnx(dt))}}, into);
}

Value* NodeRewriter::reshape(Value* x, const Shape& shape, const std::string& suffix) {
  if (x->shape() == shape) return x;
  if (x->is_constant()) return constant(suffix, x->constant().reshaped(shape));
  Value* s = ints(suffix + "_shape", shape);
  return emit("Reshape", {x, s}, TensorType{x->dtype(), shape}, suffix);
}

Value* NodeRewriter::constant(const std::string& suffix, Tensor t) {
  return g_.add_constant(g_.unique_name(base_ + "/" + suffix), std::move(t));
}

Value* NodeRewriter::ints(const std::string& suffix, const std::vector<int64_t>& v) {
  return constant(suffix, Tensor::from_vector<int64_t>(v, {int64_t(v.size())}));
}

Value* NodeRewriter::scalar(const std::string& suffix, double v, DType dt) {
  return constant(suffix, Tensor::scalar<double>(v).cast(dt));
}

std::vector<double> tensor_to_doubles(const Tensor& t) {
  const Tensor d = t.dtype() == DType::Float64 ? t : t.cast(DType::Float64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

Tensor tensor_from_doubles(const std::vector<double>& v, const Shape& shape, DType dt) {
  Tensor t = Tensor::from_vector<double>(v, shape);
  return dt == DType::Float64 ? t : t.cast(dt);
}

bool broadcasts_to(const Shape& s, const Shape& out) {
  if (s.size() > out.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t d = s[s.size() - 1 - i], o = out[out.size() - 1 - i];
    if (d != 1 && d != o) return false;
  }
  return true;
}

bool is_used(const Graph& g, const Value* v) { return !v->uses().empty() || g.is_graph_output(v); }

}  // namespace kiln
