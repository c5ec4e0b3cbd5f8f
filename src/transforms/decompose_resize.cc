#include "transforms/decompose_resize.h"

#include <algorithm>
#include <optional>

#include "reference/ops/resize_plan.h"
#include "support/error.h"
#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The node's inputs as tensors for plan_resize (undefined for an omitted input and for X, which
// planning never reads), or why the plan cannot be made at compile time. `sizes` computed at run
// time must equal the output shape fixed at import, so that shape stands in for it; so it does for
// run-time `scales` under align_corners and tf_crop_and_resize, whose coordinates depend on the
// lengths only (the scale value decides nothing but the output size). roi matters only to
// tf_crop_and_resize.
std::optional<std::vector<Tensor>> constant_inputs(const Node& n, std::string* why) {
  std::vector<Tensor> in(4);
  auto at = [&](size_t i) -> const Value* { return i < n.num_inputs() ? n.input(i) : nullptr; };
  auto present = [&](size_t i) { return at(i) && (!at(i)->is_constant() || at(i)->constant().numel() > 0); };
  const std::string coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
  const bool lengths_only = coord == "align_corners" || coord == "tf_crop_and_resize";
  const Shape& out = n.output(0)->shape();
  const Tensor out_sizes = Tensor::from_vector<int64_t>(out, {int64_t(out.size())});
  if (present(1) && coord == "tf_crop_and_resize") {
    if (!at(1)->is_constant()) {
      *why = "roi is computed at run time";
      return std::nullopt;
    }
    in[1] = at(1)->constant();
  }
  if (present(2)) {
    if (at(2)->is_constant()) {
      in[2] = at(2)->constant();
    } else if (lengths_only) {
      in[3] = out_sizes;
    } else {
      *why = "scales are computed at run time (and decide the sampling positions)";
      return std::nullopt;
    }
  }
  if (present(3)) in[3] = at(3)->is_constant() ? at(3)->constant() : out_sizes;
  return in;
}

std::optional<ResizePlan> plan_of(const Node& n, std::string* why) {
  auto in = constant_inputs(n, why);
  if (!in) return std::nullopt;
  try {
    return plan_resize(n, n.input(0)->shape(), *in);
  } catch (const UserError& e) {
    *why = e.what();
    return std::nullopt;
  }
}

void decompose(Graph& g, Node* n) {
  std::string why;
  const ResizePlan plan = *plan_of(*n, &why);
  NodeRewriter rw(g, n);
  Value* y = rw.output(0);
  Value* cur = rw.input(0);
  const DType dt = cur->dtype();
  const int64_t rank = int64_t(plan.out.size());
  int remaining = 0;
  for (const auto& a : plan.axes) remaining += !a.identity;
  if (remaining == 0) {
    rw.emit("Identity", {cur}, y->type(), "identity", {}, y);
    return;
  }
  const bool widen = !plan.nearest && (dt == DType::Float16 || dt == DType::BFloat16);
  const DType ct = widen ? DType::Float32 : dt;
  if (widen) cur = rw.cast(cur, ct, "widened");
  Shape shape = cur->shape();
  for (int64_t d = rank - 1; d >= 0; --d) {
    const ResizeAxisPlan& ax = plan.axes[size_t(d)];
    if (ax.identity) continue;
    const bool last_axis = --remaining == 0;
    const int64_t len = plan.out[size_t(d)];
    Shape next = shape;
    next[size_t(d)] = len;
    size_t taps = 0;
    bool any_empty = false;
    for (const auto& t : ax.taps) {
      taps = std::max(taps, t.size());
      any_empty = any_empty || t.empty();
    }
    taps = std::max<size_t>(taps, 1);
    // The value this axis ends in is the rewrite's output when it is the last step.
    auto into = [&](bool last_node) { return last_axis && last_node && !widen ? y : nullptr; };
    Shape wshape(size_t(rank - d), 1);  // [len, 1, ...]: broadcasts over the axes after d
    wshape[0] = len;
    const std::string tag = "axis" + std::to_string(d);
    Value* acc = nullptr;
    for (size_t t = 0; t < taps; ++t) {
      Tensor idx(DType::Int64, {len});
      std::vector<double> w(size_t(len), 0.0);
      bool all_one = true;
      for (int64_t x = 0; x < len; ++x) {
        const auto& tp = ax.taps[size_t(x)];
        idx.data<int64_t>()[x] = t < tp.size() ? tp[t].index : tp.empty() ? 0 : tp[0].index;
        w[size_t(x)] = t < tp.size() ? tp[t].weight : 0.0;
        all_one = all_one && w[size_t(x)] == 1.0;
      }
      const bool last_term = t + 1 == taps && !any_empty;
      const bool mul = !plan.nearest && !all_one;
      const std::string suffix = tag + "_tap" + std::to_string(t);
      Value* gathered = rw.emit("Gather", {cur, rw.constant(suffix + "_index", std::move(idx))}, {ct, next},
                                suffix, {{"axis", int64_t(d)}}, into(last_term && !mul && t == 0));
      Value* term = gathered;
      if (mul)
        term = rw.binary("Mul", gathered, rw.constant(suffix + "_weight", tensor_from_doubles(w, wshape, ct)),
                         suffix + "_weighted", into(last_term && t == 0));
      acc = acc ? rw.binary("Add", acc, term, suffix + "_sum", into(last_term)) : term;
    }
    if (any_empty) {
      Tensor mask(DType::Bool, wshape);
      for (int64_t x = 0; x < len; ++x) mask.data<bool>()[x] = !ax.taps[size_t(x)].empty();
      Value* fill = rw.scalar(tag + "_extrapolation", plan.extrapolation, ct);
      acc = rw.emit("Where", {rw.constant(tag + "_inside", std::move(mask)), acc, fill}, {ct, next}, tag + "_extrapolated",
                    {}, into(true));
    }
    cur = acc;
    shape = next;
  }
  if (widen) rw.cast(cur, dt, "narrowed", y);
}

}  // namespace

std::string DecomposeResize::refusal(const Node& n) {
  if (n.op_type() != "Resize" || !n.domain().empty()) return "not a Resize";
  if (!n.input(0) || n.num_outputs() != 1) return "expects input X and one output";
  const Value* x = n.input(0);
  std::string why;
  auto plan = plan_of(n, &why);
  if (!plan) return why;
  if (plan->out != n.output(0)->shape() || n.output(0)->dtype() != x->dtype()) return "Y's type does not match the plan";
  if (shape_numel(plan->out) == 0) return "the output is empty";
  if (!plan->nearest && !is_float(x->dtype()))
    return "linear and cubic on integers round and saturate (left to the reference kernel)";
  if (!is_float(x->dtype()) && plan->extrapolation != 0) {
    for (const auto& a : plan->axes)
      for (const auto& t : a.taps)
        if (t.empty()) return "a non-zero extrapolation_value on a non-float input";
  }
  return "";
}

bool DecomposeResize::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { decompose(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
