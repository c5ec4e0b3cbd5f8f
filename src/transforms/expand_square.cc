#include "transforms/expand_square.h"

#include "transforms/node_rewriter.h"

namespace kiln {

std::string ExpandSquare::refusal(const Node& n) {
  if (n.op_type() != "Pow" || !n.domain().empty()) return "not a Pow";
  const Value* x = n.input(0);
  const Value* y = n.num_inputs() > 1 ? n.input(1) : nullptr;
  if (!x || !is_float(x->dtype())) return "X is not a floating-point tensor";
  if (!y || !y->is_constant() || y->constant().numel() != 1) return "the exponent is not a one-element constant";
  const double e = y->constant().as_double(0);
  if (e != 2.0 && e != 3.0) return "the exponent is not 2 or 3";
  if (n.num_outputs() != 1 || n.output(0)->type() != x->type()) return "Z's type differs from X's";
  return "";
}

bool ExpandSquare::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); },
      [&](Node* n) {
        const bool square = n->input(1)->constant().as_double(0) == 2.0;  // before the rewriter takes n
        NodeRewriter rw(g, n);
        if (square) {
          rw.binary("Mul", rw.input(0), rw.input(0), "square", rw.output(0));
        } else {
          Value* sq = rw.binary("Mul", rw.input(0), rw.input(0), "square");
          rw.binary("Mul", sq, rw.input(0), "cube", rw.output(0));
        }
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
