#include "transforms/decompose_activations.h"

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// Clip(X * alpha + beta, 0, 1) into `into` (a new value when null).
Value* hard_sigmoid(NodeRewriter& rw, Value* x, double alpha, double beta, Value* into) {
  const DType dt = x->dtype();
  Value* scaled = rw.binary("Mul", x, rw.scalar("alpha", alpha, dt), "scaled");
  Value* shifted = rw.binary("Add", scaled, rw.scalar("beta", beta, dt), "shifted");
  return rw.emit("Clip", {shifted, rw.scalar("zero", 0.0, dt), rw.scalar("one", 1.0, dt)}, x->type(), "clip", {}, into);
}

}  // namespace

std::string DecomposeActivations::refusal(const Node& n) {
  if ((n.op_type() != "HardSigmoid" && n.op_type() != "HardSwish") || !n.domain().empty())
    return "not a HardSigmoid or HardSwish";
  const Value* x = n.input(0);
  if (!x || !is_float(x->dtype())) return "X is not a floating-point tensor";
  if (n.num_outputs() != 1 || n.output(0)->type() != x->type()) return "Y's type differs from X's";
  return "";
}

bool DecomposeActivations::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); },
      [&](Node* n) {
        if (n->op_type() == "HardSigmoid") {
          const double alpha = n->attr_float("alpha", 0.2f), beta = n->attr_float("beta", 0.5f);
          NodeRewriter rw(g, n);
          hard_sigmoid(rw, rw.input(0), alpha, beta, rw.output(0));
          return;
        }
        NodeRewriter rw(g, n);
        Value* gate = hard_sigmoid(rw, rw.input(0), 1.0 / 6.0, 0.5, nullptr);
        rw.binary("Mul", rw.input(0), gate, "hard_swish", rw.output(0));
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
