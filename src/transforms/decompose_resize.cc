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

// The taps of one axis as graph values: for tap t, an int64 index per output coordinate ([len])
// and its weight ([len, 1, ...], broadcast over the inner axes; null when every weight is 1), and
// a bool mask of the coordinates inside the input (null when all are).
struct AxisTaps {
  std::vector<Value*> index, weight;
  Value* inside = nullptr;
};

// Taps from the compile-time plan: constants.
AxisTaps constant_taps(NodeRewriter& rw, const ResizeAxisPlan& ax, bool nearest, const Shape& wshape, DType ct,
                       const std::string& tag) {
  AxisTaps r;
  const int64_t len = int64_t(ax.taps.size());
  size_t taps = 1;
  bool any_empty = false;
  for (const auto& t : ax.taps) {
    taps = std::max(taps, t.size());
    any_empty = any_empty || t.empty();
  }
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
    const std::string suffix = tag + "_tap" + std::to_string(t);
    r.index.push_back(rw.constant(suffix + "_index", std::move(idx)));
    r.weight.push_back(nearest || all_one ? nullptr : rw.constant(suffix + "_weight", tensor_from_doubles(w, wshape, ct)));
  }
  if (any_empty) {
    Tensor mask(DType::Bool, wshape);
    for (int64_t x = 0; x < len; ++x) mask.data<bool>()[x] = !ax.taps[size_t(x)].empty();
    r.inside = rw.constant(tag + "_inside", std::move(mask));
  }
  return r;
}

// Taps computed at run time from the scale of axis d (scales computed at run time under
// half_pixel, pytorch_half_pixel, asymmetric or tf_half_pixel_for_nn): the reference's plan_axis
// spelled as elementwise ops on the [len] output coordinates, in float32 with its operation order
// (x_original exactly as the reference computes it; weights in float32 where it uses float64).
// The attributes run-time taps need (read before the NodeRewriter removes the node).
struct TapAttrs {
  std::string mode, coord, nearest;
  double cubic_a, extrapolation;
  bool exclude_outside;
  explicit TapAttrs(const Node& n)
      : mode(n.attr_string("mode", "nearest")),
        coord(n.attr_string("coordinate_transformation_mode", "half_pixel")),
        nearest(n.attr_string("nearest_mode", "round_prefer_floor")),
        cubic_a(n.attr_float("cubic_coeff_a", -0.75f)),
        extrapolation(n.attr_float("extrapolation_value", 0.0f)),
        exclude_outside(n.attr_int("exclude_outside", 0) != 0) {}
};

AxisTaps runtime_taps(NodeRewriter& rw, const TapAttrs& n, Value* scales, Value* roi, int64_t d, int64_t rank,
                      int64_t in_len, int64_t len, const Shape& wshape, DType ct, const std::string& tag) {
  const DType f = DType::Float32;
  auto k = [&](double v, const std::string& name) { return rw.scalar(tag + "_" + name, v, f); };
  auto bin = [&](const char* op, Value* a, Value* b, const std::string& name) { return rw.binary(op, a, b, tag + "_" + name); };
  // Element i of a run-time vector as a float32 scalar.
  auto element = [&](Value* v, int64_t i, const std::string& name) {
    Value* e = rw.emit("Gather", {v, rw.constant(tag + "_" + name + "_at", Tensor::scalar<int64_t>(i))}, {v->dtype(), {}},
                       tag + "_" + name, {{"axis", int64_t(0)}});
    return rw.cast(e, f, tag + "_" + name + "_f32");
  };
  std::vector<float> p(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) p[size_t(i)] = float(i);
  Value* pos = rw.constant(tag + "_position", Tensor::from_vector<float>(p, {len}));
  const std::string& coord = n.coord;
  Value* s = coord == "tf_crop_and_resize" ? nullptr : element(scales, d, "scale");
  Value* xo;
  AxisTaps r;
  if (coord == "tf_crop_and_resize") {
    // roi_start * (in - 1) + x * (roi_end - roi_start) * (in - 1) / (out - 1); one output samples
    // the middle of the crop. Positions outside [0, in - 1] take extrapolation_value.
    Value* rs = element(roi, d, "roi_start");
    Value* re = element(roi, rank + d, "roi_end");
    Value* span = k(double(in_len - 1), "span");
    if (len > 1) {
      Value* q = bin("Div", bin("Mul", bin("Mul", pos, bin("Sub", re, rs, "extent"), "stretched"), span, "spanned"),
                     k(double(len - 1), "steps"), "stepped");
      xo = bin("Add", bin("Mul", rs, span, "offset"), q, "source");
    } else {
      xo = bin("Add", pos, bin("Mul", bin("Mul", bin("Add", rs, re, "ends"), k(0.5, "half"), "middle"), span, "centre"),
               "source");
    }
    Value* lo_ok = rw.emit("GreaterOrEqual", {xo, k(0.0, "origin")}, {DType::Bool, {len}}, tag + "_after_start");
    Value* hi_ok = rw.emit("LessOrEqual", {xo, span}, {DType::Bool, {len}}, tag + "_before_end");
    r.inside = rw.reshape(rw.emit("And", {lo_ok, hi_ok}, {DType::Bool, {len}}, tag + "_inside_flat"), wshape, tag + "_inside");
  } else if (coord == "asymmetric") {
    xo = bin("Div", pos, s, "source");
  } else if (coord == "tf_half_pixel_for_nn") {
    xo = bin("Div", bin("Add", pos, k(0.5, "half"), "centre"), s, "source");
  } else if (coord == "pytorch_half_pixel" && len <= 1) {
    xo = rw.constant(tag + "_source", Tensor::from_vector<float>(std::vector<float>(size_t(len), 0.0f), {len}));
  } else {
    xo = bin("Sub", bin("Div", bin("Add", pos, k(0.5, "half"), "centre"), s, "scaled"), k(0.5, "half"), "source");
  }
  // The reference clamps x_original to [-4, in + 4] (a guard against absurd scales).
  xo = rw.emit("Clip", {xo, k(-4.0, "lowest"), k(double(in_len) + 4.0, "highest")}, {f, {len}}, tag + "_source_clamped");
  Value* fl = rw.unary("Floor", xo, tag + "_floor");
  Value* frac = bin("Sub", xo, fl, "fraction");
  Value* one = k(1.0, "one");
  auto index_of = [&](Value* v, const std::string& name) {
    Value* c = rw.emit("Clip", {v, k(0.0, "first"), k(double(in_len - 1), "last")}, {f, {len}}, tag + "_" + name + "_clamped");
    return rw.cast(c, DType::Int64, tag + "_" + name);
  };
  auto weight_of = [&](Value* w, const std::string& name) { return rw.reshape(rw.cast(w, ct, tag + "_" + name + "_typed"), wshape, tag + "_" + name); };
  const std::string& mode = n.mode;
  if (mode == "nearest") {
    const std::string& nm = n.nearest;
    Value* up = bin("Add", fl, one, "floor_plus_one");
    Value* pick = fl;
    auto cmp = [&](const char* op, double v) {
      return rw.emit(op, {frac, k(v, op)}, {DType::Bool, {len}}, tag + "_" + op);
    };
    if (nm == "round_prefer_floor") pick = rw.emit("Where", {cmp("LessOrEqual", 0.5), fl, up}, {f, {len}}, tag + "_rounded");
    else if (nm == "round_prefer_ceil") pick = rw.emit("Where", {cmp("Less", 0.5), fl, up}, {f, {len}}, tag + "_rounded");
    else if (nm == "ceil") pick = rw.emit("Where", {cmp("Equal", 0.0), fl, up}, {f, {len}}, tag + "_rounded");
    r.index.push_back(index_of(pick, "tap0_index"));
    r.weight.push_back(nullptr);
    return r;
  }
  std::vector<Value*> idx, w;
  if (mode == "linear") {
    idx = {fl, bin("Add", fl, one, "next")};
    w = {bin("Sub", one, frac, "weight_left"), frac};
  } else {
    // Keys' cubic weights of the neighbours at -1, 0, 1, 2 (the reference's cubic_weights).
    const double a = n.cubic_a;
    auto poly = [&](Value* t, std::vector<double> c, const std::string& name) {  // Horner: ((c0 t + c1) t + c2) t + c3
      Value* acc = bin("Mul", t, k(c[0], name + "_c0"), name + "_h0");
      for (size_t i = 1; i < c.size(); ++i) {
        acc = bin("Add", acc, k(c[i], name + "_c" + std::to_string(i)), name + "_a" + std::to_string(i));
        if (i + 1 < c.size()) acc = bin("Mul", acc, t, name + "_h" + std::to_string(i));
      }
      return acc;
    };
    // near(d) = ((a+2) d - (a+3)) d^2 + 1 = (((a+2) d - (a+3)) d + 0) d + 1; far(d) = ((a d - 5a) d + 8a) d - 4a.
    auto near = [&](Value* t, const std::string& name) { return poly(t, {a + 2, -(a + 3), 0.0, 1.0}, name); };
    auto far = [&](Value* t, const std::string& name) { return poly(t, {a, -5 * a, 8 * a, -4 * a}, name); };
    Value* two = k(2.0, "two");
    w = {far(bin("Add", frac, one, "d0"), "w0"), near(frac, "w1"), near(bin("Sub", one, frac, "d2"), "w2"),
         far(bin("Sub", two, frac, "d3"), "w3")};
    for (int j = 0; j < 4; ++j) idx.push_back(bin("Add", fl, k(double(j - 1), "offset" + std::to_string(j)), "i" + std::to_string(j)));
  }
  if (n.exclude_outside) {
    Value* sum = nullptr;
    for (size_t j = 0; j < w.size(); ++j) {
      const std::string nm = "t" + std::to_string(j);
      Value* in_lo = rw.emit("GreaterOrEqual", {idx[j], k(0.0, "zero")}, {DType::Bool, {len}}, tag + "_" + nm + "_lo");
      Value* in_hi = rw.emit("LessOrEqual", {idx[j], k(double(in_len - 1), "last_index")}, {DType::Bool, {len}}, tag + "_" + nm + "_hi");
      Value* ok = rw.emit("And", {in_lo, in_hi}, {DType::Bool, {len}}, tag + "_" + nm + "_inside");
      w[j] = rw.emit("Where", {ok, w[j], k(0.0, "zero")}, {f, {len}}, tag + "_" + nm + "_kept");
      sum = sum ? bin("Add", sum, w[j], nm + "_sum") : w[j];
    }
    Value* nz = rw.emit("Not", {rw.emit("Equal", {sum, k(0.0, "zero")}, {DType::Bool, {len}}, tag + "_sum_zero")},
                        {DType::Bool, {len}}, tag + "_sum_nonzero");
    for (size_t j = 0; j < w.size(); ++j)
      w[j] = rw.emit("Where", {nz, bin("Div", w[j], sum, "t" + std::to_string(j) + "_normalized"), w[j]}, {f, {len}},
                     tag + "_t" + std::to_string(j) + "_renormalized");
  }
  for (size_t j = 0; j < w.size(); ++j) {
    r.index.push_back(index_of(idx[j], "tap" + std::to_string(j) + "_index"));
    r.weight.push_back(weight_of(w[j], "tap" + std::to_string(j) + "_weight"));
  }
  return r;
}

// Scales computed at run time under a mode whose positions depend on them: every axis resampled
// with run-time taps (an axis of unchanged length may still move its samples: floor(4 * 1.2) = 4).
// Also a roi computed at run time under tf_crop_and_resize.
bool runtime_scales(const Node& n) {
  auto runtime = [&](size_t i) {
    const Value* v = i < n.num_inputs() ? n.input(i) : nullptr;
    return v && !v->is_constant() && shape_numel(v->shape()) > 0;
  };
  const std::string coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "tf_crop_and_resize") return runtime(1);
  return runtime(2) && coord != "align_corners";
}

void decompose(Graph& g, Node* n) {
  const bool runtime = runtime_scales(*n);
  std::string why;
  std::optional<ResizePlan> plan = runtime ? std::nullopt : plan_of(*n, &why);
  const TapAttrs attrs(*n);  // n is removed by the rewriter; its attributes are read here
  NodeRewriter rw(g, n);
  Value* y = rw.output(0);
  Value* cur = rw.input(0);
  Value* scales = runtime ? rw.input(2) : nullptr;
  Value* roi = runtime ? rw.input(1) : nullptr;
  const DType dt = cur->dtype();
  const Shape& in_shape = cur->shape();
  const Shape out = y->shape();
  const int64_t rank = int64_t(out.size());
  const bool nearest = runtime ? attrs.mode == "nearest" : plan->nearest;
  std::vector<bool> skip(size_t(rank), false);
  int remaining = 0;
  for (int64_t d = 0; d < rank; ++d) {
    skip[size_t(d)] = runtime ? false : plan->axes[size_t(d)].identity;
    remaining += !skip[size_t(d)];
  }
  if (remaining == 0) {
    rw.emit("Identity", {cur}, y->type(), "identity", {}, y);
    return;
  }
  const bool widen = !nearest && (dt == DType::Float16 || dt == DType::BFloat16);
  const DType ct = widen ? DType::Float32 : dt;
  if (widen) cur = rw.cast(cur, ct, "widened");
  Shape shape = cur->shape();
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (skip[size_t(d)]) continue;
    const bool last_axis = --remaining == 0;
    const int64_t len = out[size_t(d)];
    Shape next = shape;
    next[size_t(d)] = len;
    Shape wshape(size_t(rank - d), 1);  // [len, 1, ...]: broadcasts over the axes after d
    wshape[0] = len;
    const std::string tag = "axis" + std::to_string(d);
    const AxisTaps taps = runtime ? runtime_taps(rw, attrs, scales, roi, d, rank, in_shape[size_t(d)], len, wshape, ct, tag)
                                  : constant_taps(rw, plan->axes[size_t(d)], nearest, wshape, ct, tag);
    // The value this axis ends in is the rewrite's output when it is the last step.
    auto into = [&](bool last_node) { return last_axis && last_node && !widen ? y : nullptr; };
    Value* acc = nullptr;
    const size_t count = taps.index.size();
    for (size_t t = 0; t < count; ++t) {
      const bool last_term = t + 1 == count && !taps.inside;
      Value* w = taps.weight[t];
      const std::string suffix = tag + "_tap" + std::to_string(t);
      Value* gathered = rw.emit("Gather", {cur, taps.index[t]}, {ct, next}, suffix, {{"axis", int64_t(d)}},
                                into(last_term && !w && t == 0));
      Value* term = w ? rw.binary("Mul", gathered, w, suffix + "_weighted", into(last_term && t == 0)) : gathered;
      acc = acc ? rw.binary("Add", acc, term, suffix + "_sum", into(last_term)) : term;
    }
    if (taps.inside) {
      Value* fill = rw.scalar(tag + "_extrapolation", runtime ? attrs.extrapolation : plan->extrapolation, ct);
      acc = rw.emit("Where", {taps.inside, acc, fill}, {ct, next}, tag + "_extrapolated", {}, into(true));
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
  if (runtime_scales(n)) {
    // Validate the attributes as the reference would (with the output shape standing in for the
    // scales' result), then check what the run-time taps need.
    ResizePlan check;
    try {
      const Shape& out = n.output(0)->shape();
      check = plan_resize(n, x->shape(), {Tensor(), Tensor(), Tensor(), Tensor::from_vector<int64_t>(out, {int64_t(out.size())})});
    } catch (const UserError& e) {
      return e.what();
    }
    const int64_t rank = int64_t(x->shape().size());
    if (n.attr_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize") {
      const Value* roi = n.input(1);
      if (!is_float(roi->dtype()) || roi->shape() != Shape{2 * rank}) return "roi must be a float vector of 2 * rank elements";
      if (!is_float(x->dtype()) && n.attr_float("extrapolation_value", 0.0f) != 0)
        return "a non-zero extrapolation_value on a non-float input";
    } else {
      const Value* sc = n.input(2);
      if (!is_float(sc->dtype()) || sc->shape() != Shape{rank}) return "scales must be a float vector of rank elements";
    }
    if (n.attr_string("coordinate_transformation_mode", "half_pixel") != "tf_crop_and_resize" && n.num_inputs() > 3 &&
        n.input(3))
      return "both scales and sizes are given";
    if (!check.nearest && !is_float(x->dtype())) return "linear and cubic on integers round and saturate (left to the reference kernel)";
    if (n.output(0)->dtype() != x->dtype() || shape_numel(n.output(0)->shape()) == 0) return "Y's type does not match";
    for (int64_t d : x->shape())
      if (d == 0) return "an empty input axis";
    return "";
  }
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
