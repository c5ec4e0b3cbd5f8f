#include "transforms/decompose_softmax.h"

#include "transforms/node_rewriter.h"

namespace kiln {

std::string DecomposeSoftmax::refusal(const Node& n) {
  const std::string& op = n.op_type();
  if ((op != "Softmax" && op != "LogSoftmax" && op != "Hardmax") || !n.domain().empty())
    return "not a Softmax, LogSoftmax or Hardmax";
  const Value* x = n.input(0);
  if (!x || !is_float(x->dtype())) return "X is not a floating-point tensor";
  if (n.num_outputs() != 1 || n.output(0)->type() != x->type()) return "Y's type differs from X's";
  const int64_t rank = int64_t(x->shape().size()), axis = n.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) return "axis is out of range";
  if (n.op_type() == "Hardmax" && shape_numel(x->shape()) == 0) return "X is empty (ArgMax has no row to rank)";
  return "";
}

namespace {

// Hardmax: 1 where the row's first maximum is (ArgMax's tie and NaN rules are the reference
// Hardmax's: a NaN counts as the maximum, the first index wins), 0 elsewhere.
void hardmax(NodeRewriter& rw, Value* x, int64_t axis) {
  Shape one = x->shape();
  one[size_t(axis)] = 1;
  AttributeMap attrs{{"axis", axis}, {"keepdims", int64_t(1)}, {"select_last_index", int64_t(0)}};
  Value* first = rw.emit("ArgMax", {x}, {DType::Int64, one}, "argmax", attrs);
  const int64_t len = x->shape()[size_t(axis)];
  std::vector<int64_t> positions(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) positions[size_t(i)] = i;
  Shape along(x->shape().size(), 1);
  along[size_t(axis)] = len;
  Value* iota = rw.constant("positions", Tensor::from_vector<int64_t>(positions, along));
  Value* hit = rw.emit("Equal", {first, iota}, {DType::Bool, x->shape()}, "is_first_max");
  rw.cast(hit, x->dtype(), "hardmax", rw.output(0));
}

// (X - max) keeps Exp from overflowing; Softmax = e / sum, LogSoftmax = (X - max) - Log(sum).
void decompose(Graph& g, Node* n) {
  const bool log = n->op_type() == "LogSoftmax", hard = n->op_type() == "Hardmax";
  const int64_t rank = int64_t(n->input(0)->shape().size());
  int64_t axis = n->attr_int("axis", -1);
  if (axis < 0) axis += rank;
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  if (hard) {
    hardmax(rw, x, axis);
    return;
  }
  Value* d = rw.binary("Sub", x, rw.reduce("ReduceMax", x, {axis}, "max"), "shifted");
  Value* e = rw.unary("Exp", d, "exp");
  Value* s = rw.reduce("ReduceSum", e, {axis}, "sum");
  if (log) rw.binary("Sub", d, rw.unary("Log", s, "log_sum"), "log_softmax", rw.output(0));
  else rw.binary("Div", e, s, "softmax", rw.output(0));
}

}  // namespace

bool DecomposeSoftmax::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { decompose(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
