#include "transforms/lower_conv3d.h"

#include <cmath>
#include <optional>

#include "reference/ops/nn_internal.h"
#include "support/error.h"
#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The conv's geometry, or nullopt and why it is not rewritten.
std::optional<nn::WindowGeometry> plan(const Node& n, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return std::optional<nn::WindowGeometry>();
  };
  if (n.op_type() != "Conv" || !n.domain().empty()) return fail("not a Conv");
  const Value* x = n.input(0);
  const Value* w = n.num_inputs() > 1 ? n.input(1) : nullptr;
  if (!x || !w || n.num_outputs() != 1) return fail("Conv has an unexpected signature");
  if (x->shape().size() != 5 || w->shape().size() != 5) return fail("not a 3-D conv");
  if (!is_float(x->dtype()) || w->dtype() != x->dtype()) return fail("X is not floating-point or W has another type");
  if (n.attr_int("group", 1) != 1) return fail("a grouped conv");
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  if (ws[1] != xs[1]) return fail("W's input channels are not X's");
  if (ws[2] < 2 || ws[3] * ws[4] < 2) return fail("the window does not span both depth and the plane");
  nn::WindowGeometry geo;
  try {
    geo = nn::window_geometry(n, {xs[2], xs[3], xs[4]}, {ws[2], ws[3], ws[4]}, false);
  } catch (const UserError& e) {
    return fail(std::string("the reference rejects its attributes: ") + e.what());
  }
  const Value* y = n.output(0);
  if (y->type() != TensorType{x->dtype(), {xs[0], ws[0], geo.out[0], geo.out[1], geo.out[2]}})
    return fail("Y's type does not match the geometry");
  if (const Value* b = n.num_inputs() > 2 ? n.input(2) : nullptr)
    if (b->type() != TensorType{x->dtype(), {ws[0]}}) return fail("B must have shape [M] and X's type");
  if (geo.pad_begin[0] < 0 || geo.pad_end[0] < 0) return fail("negative depth padding");
  if (geo.pad_begin[0] > 0 || geo.pad_end[0] > 0) {
    // A padded depth tap becomes a product with a +0 input: the same sum unless a weight is not
    // finite (0 · inf is NaN where the reference skips the tap).
    if (!w->is_constant()) return fail("depth padding with computed weights (0 · inf would be NaN)");
    const Tensor& wt = w->constant();
    for (int64_t i = 0; i < wt.numel(); ++i)
      if (!std::isfinite(wt.as_double(i))) return fail("depth padding and a weight that is not finite (0 · inf is NaN)");
  }
  return geo;
}


void lower(Graph& g, Node* n) {
  std::string why;
  const nn::WindowGeometry geo = *plan(*n, &why);
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  Value* w = rw.input(1);
  Value* b = rw.input(2);
  Value* y = rw.output(0);
  const DType dt = x->dtype();
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  const int64_t batch = xs[0], c = xs[1], h = xs[3], wd = xs[4], m = ws[0], kt = ws[2];
  const int64_t to = geo.out[0], st = geo.stride[0], dtp = geo.dilation[0];

  // Depth padding, then one strided Slice per depth tap: frame o of tap k is padded frame
  // o·st + k·dt.
  Value* padded = x;
  if (geo.pad_begin[0] > 0 || geo.pad_end[0] > 0) {
    Shape ps = xs;
    ps[2] += geo.pad_begin[0] + geo.pad_end[0];
    padded = rw.emit("Pad", {x, rw.ints("depth_pads", {0, 0, geo.pad_begin[0], 0, 0, 0, 0, geo.pad_end[0], 0, 0})},
                     {dt, ps}, "depth_padded");
  }
  std::vector<Value*> taps;
  for (int64_t k = 0; k < kt; ++k) {
    const std::string tag = "tap" + std::to_string(k);
    Value* s = rw.emit("Slice",
                       {padded, rw.ints(tag + "_start", {k * dtp}), rw.ints(tag + "_end", {k * dtp + (to - 1) * st + 1}),
                        rw.ints(tag + "_axis", {2}), rw.ints(tag + "_step", {st})},
                       {dt, {batch, c, to, h, wd}}, tag);
    taps.push_back(rw.reshape(s, {batch, c, 1, to, h, wd}, tag + "_unit"));
  }
  Value* stacked = taps.size() == 1 ? taps[0]
                                    : rw.emit("Concat", taps, {dt, {batch, c, kt, to, h, wd}}, "taps", {{"axis", int64_t{2}}});
  Value* frames = rw.emit("Transpose", {stacked}, {dt, {batch, to, c, kt, h, wd}}, "frames",
                          {{"perm", std::vector<int64_t>{0, 3, 1, 2, 4, 5}}});
  Value* x2 = rw.reshape(frames, {batch * to, c * kt, h, wd}, "frames_2d");
  Value* w2 = rw.reshape(w, {m, c * kt, ws[3], ws[4]}, "weights_2d");
  std::vector<Value*> ins{x2, w2};
  if (b) ins.push_back(b);
  AttributeMap attrs{{"dilations", std::vector<int64_t>{geo.dilation[1], geo.dilation[2]}},
                     {"group", int64_t{1}},
                     {"kernel_shape", std::vector<int64_t>{ws[3], ws[4]}},
                     {"pads", std::vector<int64_t>{geo.pad_begin[1], geo.pad_begin[2], geo.pad_end[1], geo.pad_end[2]}},
                     {"strides", std::vector<int64_t>{geo.stride[1], geo.stride[2]}}};
  Value* y2 = rw.emit("Conv", ins, {dt, {batch * to, m, geo.out[1], geo.out[2]}}, "conv_2d", std::move(attrs));
  Value* y5 = rw.reshape(y2, {batch, to, m, geo.out[1], geo.out[2]}, "frames_out");
  rw.emit("Transpose", {y5}, y->type(), "channels_first", {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}}, y);
}

}  // namespace

std::string LowerConv3d::refusal(const Node& n) {
  std::string why;
  return plan(n, &why) ? "" : why;
}

bool LowerConv3d::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { lower(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
