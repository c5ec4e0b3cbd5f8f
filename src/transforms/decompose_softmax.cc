#include "transforms/decompose_softmax.h"

#include "transforms/node_rewriter.h"

namespace kiln {

std::string DecomposeSoftmax::refusal(const Node& n) {
  if ((n.op_type() != "Softmax" && n.op_type() != "LogSoftmax") || !n.domain().empty())
    return "not a Softmax or LogSoftmax";
  const Value* x = n.input(0);
  if (!x || !is_float(x->dtype())) return "X is not a floating-point tensor";
  if (n.num_outputs() != 1 || n.output(0)->type() != x->type()) return "Y's type differs from X's";
  const int64_t rank = int64_t(x->shape().size()), axis = n.attr_int("axis", -1);
  if (axis < -rank || axis >= rank) return "axis is out of range";
  return "";
}

namespace {

// (X - max) keeps Exp from overflowing; Softmax = e / sum, LogSoftmax = (X - max) - Log(sum).
void decompose(Graph& g, Node* n) {
  const bool log = n->op_type() == "LogSoftmax";
  const int64_t rank = int64_t(n->input(0)->shape().size());
  int64_t axis = n->attr_int("axis", -1);
  if (axis < 0) axis += rank;
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
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
