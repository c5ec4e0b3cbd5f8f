#include "transforms/decompose_lrn.h"

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

constexpr int64_t kMaxSize = 32;

void decompose(Graph& g, Node* n) {
  const int64_t size = n->attr_int("size", 1);
  const double alpha = n->attr_float("alpha", 1e-4f), beta = n->attr_float("beta", 0.75f);
  const double bias = n->attr_float("bias", 1.0f);
  NodeRewriter rw(g, n);
  Value* y = rw.output(0);
  const DType dt = rw.input(0)->dtype();
  const bool widen = dt == DType::Float16 || dt == DType::BFloat16;
  const DType ct = widen ? DType::Float32 : dt;
  Value* x = rw.cast(rw.input(0), ct, "widened");
  const Shape& xs = x->shape();
  const int64_t rank = int64_t(xs.size()), channels = xs[1];
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Value* sq = rw.binary("Mul", x, x, "square");
  Value* padded = sq;
  if (size > 1) {
    std::vector<int64_t> pads(size_t(2 * rank), 0);
    pads[1] = before;
    pads[size_t(rank + 1)] = after;
    Shape ps = xs;
    ps[1] += size - 1;
    padded = rw.emit("Pad", {sq, rw.ints("pads", pads)}, {ct, ps}, "padded");
  }
  Value* sum = nullptr;
  Value* axis = size > 1 ? rw.ints("axis", {1}) : nullptr;
  for (int64_t j = 0; j < size; ++j) {
    Value* win = padded;
    if (size > 1) {
      const std::string tag = "window" + std::to_string(j);
      win = rw.emit("Slice", {padded, rw.ints(tag + "_start", {j}), rw.ints(tag + "_end", {j + channels}), axis},
                    {ct, xs}, tag);
    }
    sum = sum ? rw.binary("Add", sum, win, "sum" + std::to_string(j)) : win;
  }
  Value* scaled = rw.binary("Mul", sum, rw.scalar("alpha_over_size", alpha / double(size), ct), "scaled");
  Value* base = rw.binary("Add", scaled, rw.scalar("bias", bias, ct), "biased");
  Value* den = rw.binary("Pow", base, rw.scalar("beta", beta, ct), "denominator");
  Value* r = rw.binary("Div", x, den, "normalized", widen ? nullptr : y);
  if (widen) rw.cast(r, dt, "narrowed", y);
}

}  // namespace

std::string DecomposeLrn::refusal(const Node& n) {
  if (n.op_type() != "LRN" || !n.domain().empty()) return "not an LRN";
  const Value* x = n.input(0);
  if (!x || n.num_outputs() != 1 || !is_float(x->dtype())) return "X is not floating-point";
  if (x->shape().size() < 3) return "X must have rank >= 3";
  if (n.output(0)->type() != x->type()) return "Y's type differs from X's";
  if (!n.has_attr("size")) return "size is missing";
  const int64_t size = n.attr_int("size", 1);
  if (size < 1 || size > kMaxSize) return cat("size ", size, " is outside [1, ", kMaxSize, "]");
  return "";
}

bool DecomposeLrn::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { decompose(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
