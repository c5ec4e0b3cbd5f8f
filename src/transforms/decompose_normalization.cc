#include "transforms/decompose_normalization.h"

#include <algorithm>
#include <set>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

int precision(DType dt) {
  switch (dt) {
    case DType::Float64:
      return 3;
    case DType::Float32:
      return 2;
    default:
      return 1;  // f16, bf16
  }
}

// `axes` mapped into [0, rank), sorted; empty when one is out of range or repeated.
std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::set<int64_t> s;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return {};
    if (!s.insert(a < 0 ? a + rank : a).second) return {};
  }
  return {s.begin(), s.end()};
}

std::vector<int64_t> axis_range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t a = begin; a < end; ++a) r.push_back(a);
  return r;
}

std::vector<int64_t> reduced_axes(const Node& n) {
  const int64_t rank = int64_t(n.input(0)->shape().size());
  if (n.op_type() == "LayerNormalization") {
    int64_t axis = n.attr_int("axis", -1);
    if (axis < -rank || axis >= rank) return {};
    return axis_range(axis < 0 ? axis + rank : axis, rank);
  }
  if (n.op_type() == "InstanceNormalization") return axis_range(2, rank);
  return normalized_axes(n.attr_ints("axes", {0, 2, 3}), rank);
}

// The type LayerNormalization's Mean and InvStdDev have: stash_type, X's shape with R set to 1.
TensorType stat_type(const Value* x, const std::vector<int64_t>& axes, DType stash) {
  Shape s = x->shape();
  for (int64_t a : axes) s[size_t(a)] = 1;
  return {stash, s};
}

struct Stats {
  Value* mean;
  Value* centered;  // X - mean
  Value* var;
};

Stats statistics(NodeRewriter& rw, Value* x, const std::vector<int64_t>& axes, Value* mean_into) {
  Stats s;
  s.mean = rw.reduce("ReduceMean", x, axes, "mean", mean_into);
  s.centered = rw.binary("Sub", x, s.mean, "centered");
  s.var = rw.reduce("ReduceMean", rw.binary("Mul", s.centered, s.centered, "squared"), axes, "var");
  return s;
}

Value* used_output(const Graph& g, NodeRewriter& rw, size_t i) {
  return i < rw.num_outputs() && is_used(g, rw.output(i)) ? rw.output(i) : nullptr;
}

void layer_norm(Graph& g, Node* n, const std::vector<int64_t>& axes) {
  const double eps = n->attr_float("epsilon", 1e-5f);
  const DType stash = *dtype_from_onnx(n->attr_int("stash_type", 1));
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  Value* y = rw.output(0);
  const DType xdt = x->dtype(), cdt = precision(stash) > precision(xdt) ? stash : xdt;
  Value* mean_out = used_output(g, rw, 1);
  Value* inv_out = used_output(g, rw, 2);

  Value* xc = rw.cast(x, cdt, "cast");
  Stats s = statistics(rw, xc, axes, cdt == stash ? mean_out : nullptr);
  if (mean_out && cdt != stash) rw.cast(s.mean, stash, "mean_cast", mean_out);
  Value* std = rw.unary("Sqrt", rw.binary("Add", s.var, rw.scalar("epsilon", eps, cdt), "var_eps"), "std");
  if (inv_out) {
    Value* inv = rw.unary("Reciprocal", std, "inv_std", cdt == stash ? inv_out : nullptr);
    if (cdt != stash) rw.cast(inv, stash, "inv_std_cast", inv_out);
  }
  Value* normalized = rw.cast(rw.binary("Div", s.centered, std, "normalized"), xdt, "normalized_cast");
  Value* bias = rw.input(2);
  Value* scaled = rw.binary("Mul", normalized, rw.input(1), "scaled", bias ? nullptr : y);
  if (bias) rw.binary("Add", scaled, bias, "bias", y);
}

void instance_norm(Graph& g, Node* n, const std::vector<int64_t>& axes) {
  const double eps = n->attr_float("epsilon", 1e-5f);
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  Shape cshape(x->shape().size() - 1, 1);  // [C, 1, ..., 1] lines up with axis 1
  cshape[0] = x->shape()[1];
  Stats s = statistics(rw, x, axes, nullptr);
  Value* std = rw.unary("Sqrt", rw.binary("Add", s.var, rw.scalar("epsilon", eps, x->dtype()), "var_eps"), "std");
  Value* normalized = rw.binary("Div", s.centered, std, "normalized");
  Value* scaled = rw.binary("Mul", normalized, rw.reshape(rw.input(1), cshape, "scale"), "scaled");
  rw.binary("Add", scaled, rw.reshape(rw.input(2), cshape, "B"), "bias", rw.output(0));
}

void mean_variance_norm(Graph& g, Node* n, const std::vector<int64_t>& axes) {
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  Stats s = statistics(rw, x, axes, nullptr);
  Value* std = rw.unary("Sqrt", s.var, "std");
  Value* denom = rw.binary("Add", std, rw.scalar("epsilon", 1e-9, x->dtype()), "std_eps");
  rw.binary("Div", s.centered, denom, "normalized", rw.output(0));
}

// BatchNormalization with training_mode=1 (fold_batchnorm takes the inference form): normalised
// with the batch's statistics over every axis but the channel axis, like the reference (population
// variance); the running statistics, when used, are blended with `momentum`.
void batch_norm_training(Graph& g, Node* n) {
  const double eps = n->attr_float("epsilon", 1e-5f), momentum = n->attr_float("momentum", 0.9f);
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  const DType dt = x->dtype();
  const int64_t rank = int64_t(x->shape().size()), channels = x->shape()[1];
  std::vector<int64_t> axes{0};
  for (int64_t a = 2; a < rank; ++a) axes.push_back(a);
  Shape cshape(size_t(rank), 1);  // [1, C, 1, ..., 1]
  cshape[1] = channels;
  Stats s = statistics(rw, x, axes, nullptr);
  Value* std = rw.unary("Sqrt", rw.binary("Add", s.var, rw.scalar("epsilon", eps, dt), "var_eps"), "std");
  Value* normalized = rw.binary("Div", s.centered, std, "normalized");
  Value* scaled = rw.binary("Mul", normalized, rw.reshape(rw.input(1), cshape, "scale"), "scaled");
  rw.binary("Add", scaled, rw.reshape(rw.input(2), cshape, "B"), "shifted", rw.output(0));
  Value* keep = rw.scalar("momentum", momentum, dt);
  Value* take = rw.scalar("one_minus_momentum", 1 - momentum, dt);
  for (size_t i = 1; i < 3; ++i) {
    Value* out = used_output(g, rw, i);
    if (!out) continue;
    const std::string tag = i == 1 ? "running_mean" : "running_var";
    Value* batch = rw.reshape(i == 1 ? s.mean : s.var, {channels}, tag + "_batch");
    Value* old = rw.binary("Mul", rw.input(i + 2), keep, tag + "_kept");
    rw.binary("Add", old, rw.binary("Mul", batch, take, tag + "_taken"), tag, out);
  }
}

std::string batch_norm_training_refusal(const Graph& g, const Node& n) {
  const Value* x = n.input(0);
  if (!x || !is_float(x->dtype()) || x->shape().size() < 2) return "X is not a floating-point tensor of rank >= 2";
  if (shape_numel(x->shape()) == 0) return "X is empty";
  for (size_t i = 1; i < 5; ++i) {
    const Value* p = n.input(i);
    if (!p || p->dtype() != x->dtype() || p->shape() != Shape{x->shape()[1]})
      return "the parameters are not vectors of X's dtype and channel count";
  }
  if (n.output(0)->type() != x->type()) return "Y's type differs from X's";
  for (size_t i = 1; i < n.num_outputs(); ++i) {
    if (!n.output(i) || !is_used(g, n.output(i))) continue;
    if (i > 2) return "the saved mean/variance outputs (before opset 14) are used";
    if (n.output(i)->type() != n.input(i + 2)->type()) return "a running statistic's type differs from its input's";
  }
  return "";
}

}  // namespace

std::string DecomposeNormalization::refusal(const Graph& g, const Node& n) {
  const std::string& op = n.op_type();
  if (op == "BatchNormalization" && n.domain().empty()) {
    if (n.attr_int("training_mode", 0) == 0) return "inference BatchNormalization (fold_batchnorm's)";
    return batch_norm_training_refusal(g, n);
  }
  if (!n.domain().empty() ||
      (op != "LayerNormalization" && op != "InstanceNormalization" && op != "MeanVarianceNormalization"))
    return "not a LayerNormalization, InstanceNormalization, MeanVarianceNormalization or training BatchNormalization";
  const Value* x = n.input(0);
  if (!x || !is_float(x->dtype())) return "X is not a floating-point tensor";
  if (n.output(0)->type() != x->type()) return "Y's type differs from X's";
  const int64_t rank = int64_t(x->shape().size());
  const std::vector<int64_t> axes = rank == 0 ? std::vector<int64_t>{} : reduced_axes(n);
  if (op == "MeanVarianceNormalization") return axes.empty() ? "axes are out of range or repeated" : "";

  if (op == "InstanceNormalization") {
    if (rank < 3) return "X has no spatial axes (rank < 3)";
    for (size_t i = 1; i < 3; ++i) {
      const Value* p = n.input(i);
      if (!p || p->dtype() != x->dtype() || p->shape() != Shape{x->shape()[1]})
        return std::string(i == 1 ? "scale" : "B") + " is not a vector of X's dtype and channel count";
    }
    return "";
  }

  if (axes.empty()) return "axis is out of range";
  std::optional<DType> stash = dtype_from_onnx(n.attr_int("stash_type", 1));
  if (!stash || !is_float(*stash)) return "stash_type is not a floating-point type";
  for (size_t i = 1; i < 3; ++i) {
    const Value* p = n.input(i);
    if (!p && i == 2) continue;
    if (!p || p->dtype() != x->dtype() || !broadcasts_to(p->shape(), x->shape()))
      return std::string(i == 1 ? "Scale" : "B") + " does not broadcast to X or differs in dtype";
  }
  const TensorType st = stat_type(x, axes, *stash);
  for (size_t i = 1; i < n.num_outputs(); ++i)
    if (n.output(i)->type() != st) return "the Mean/InvStdDev outputs are not typed " + st.str();
  return "";
}

bool DecomposeNormalization::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [&](const Node& n) { return refusal(g, n).empty(); },
      [&](Node* n) {
        if (n->op_type() == "BatchNormalization") return batch_norm_training(g, n);
        const std::vector<int64_t> axes = reduced_axes(*n);
        if (n->op_type() == "LayerNormalization") layer_norm(g, n, axes);
        else if (n->op_type() == "InstanceNormalization") instance_norm(g, n, axes);
        else mean_variance_norm(g, n, axes);
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
