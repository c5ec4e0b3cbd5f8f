#include "transforms/lower_conv3d.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "reference/ops/nn_internal.h"
#include "support/error.h"
#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// Output frames [o0, o1) whose windows read the same depth taps [k0, k1): the frames by the
// depth taps they read in the input, padding excluded.
struct FrameRun {
  int64_t o0, o1, k0, k1;
};

// The output frames in runs of equal live depth taps: tap k of frame o reads input frame
// o·st + k·dt − pad, live when it lies in [0, T). Empty when some frame reads only padding.
std::vector<FrameRun> frame_runs(const nn::WindowGeometry& geo, int64_t t, int64_t kt) {
  const int64_t st = geo.stride[0], dt = geo.dilation[0], pb = geo.pad_begin[0];
  std::vector<FrameRun> runs;
  for (int64_t o = 0; o < geo.out[0]; ++o) {
    int64_t k0 = 0;
    while (k0 < kt && o * st + k0 * dt - pb < 0) ++k0;
    int64_t k1 = k0;
    while (k1 < kt && o * st + k1 * dt - pb < t) ++k1;
    if (k1 == k0) return {};
    if (!runs.empty() && runs.back().k0 == k0 && runs.back().k1 == k1)
      runs.back().o1 = o + 1;
    else
      runs.push_back({o, o + 1, k0, k1});
  }
  return runs;
}

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
  if (geo.out[0] == 0) return fail("no output frames");
  const std::vector<FrameRun> runs = frame_runs(geo, xs[2], ws[2]);
  if (runs.empty()) return fail("an output frame's window reads only depth padding");
  if (runs.size() > 1 || runs[0].k0 > 0 || runs[0].k1 < ws[2]) {
    // A depth tap over padding is not computed; the reference adds its 0 · w, which is NaN where
    // w is not finite.
    if (!w->is_constant()) return fail("depth padding with computed weights (the reference's 0 · inf is NaN)");
    const Tensor& wt = w->constant();
    for (int64_t i = 0; i < wt.numel(); ++i)
      if (!std::isfinite(wt.as_double(i)))
        return fail("depth padding and a weight that is not finite (the reference's 0 · inf is NaN)");
  }
  return geo;
}

// W[:, :, k0:k1] as [M, C·(k1 − k0), KH, KW] (channel c·(k1 − k0) + k − k0): a constant for
// constant weights, else a Slice.
Value* depth_tap_weights(NodeRewriter& rw, Value* w, int64_t k0, int64_t k1, const std::string& tag) {
  const Shape& ws = w->shape();
  const int64_t m = ws[0], c = ws[1], kt = ws[2], plane = ws[3] * ws[4], nk = k1 - k0;
  const Shape shape2{m, c * nk, ws[3], ws[4]};
  if (k0 == 0 && k1 == kt) return rw.reshape(w, shape2, tag);
  if (w->is_constant()) {
    const Tensor& wt = w->constant();
    Tensor out(w->dtype(), shape2);
    const size_t es = dtype_size(w->dtype());
    const auto* src = static_cast<const uint8_t*>(wt.raw());
    auto* dst = static_cast<uint8_t*>(out.raw());
    // Row (co, ci) of W holds its KT · plane elements; taps k0 .. k1 are one run of them.
    for (int64_t r = 0; r < m * c; ++r)
      std::memcpy(dst + size_t(r * nk * plane) * es, src + size_t((r * kt + k0) * plane) * es, size_t(nk * plane) * es);
    return rw.constant(tag, std::move(out));
  }
  Value* s = rw.emit("Slice",
                     {w, rw.ints(tag + "_start", {k0}), rw.ints(tag + "_end", {k1}), rw.ints(tag + "_axis", {2})},
                     {w->dtype(), {m, c, nk, ws[3], ws[4]}}, tag + "_taps");
  return rw.reshape(s, shape2, tag);
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
  const int64_t to = geo.out[0], st = geo.stride[0], dtp = geo.dilation[0], pb = geo.pad_begin[0];
  AttributeMap attrs{{"dilations", std::vector<int64_t>{geo.dilation[1], geo.dilation[2]}},
                     {"group", int64_t{1}},
                     {"kernel_shape", std::vector<int64_t>{ws[3], ws[4]}},
                     {"pads", std::vector<int64_t>{geo.pad_begin[1], geo.pad_begin[2], geo.pad_end[1], geo.pad_end[2]}},
                     {"strides", std::vector<int64_t>{geo.stride[1], geo.stride[2]}}};
  const std::vector<FrameRun> runs = frame_runs(geo, xs[2], kt);
  // One 2-D conv per run of frames: tap k of output frame o0 + j is input frame
  // (o0 + j)·st + k·dt − pad, a strided Slice per tap; the taps are its input channels.
  std::vector<Value*> parts;
  for (size_t r = 0; r < runs.size(); ++r) {
    const FrameRun& run = runs[r];
    const std::string pre = runs.size() == 1 ? "" : "run" + std::to_string(r) + "_";
    const int64_t f = run.o1 - run.o0, nk = run.k1 - run.k0;
    std::vector<Value*> taps;
    for (int64_t k = run.k0; k < run.k1; ++k) {
      const std::string tag = pre + "tap" + std::to_string(k);
      const int64_t from = run.o0 * st + k * dtp - pb;
      Value* s = rw.emit("Slice",
                         {x, rw.ints(tag + "_start", {from}), rw.ints(tag + "_end", {from + (f - 1) * st + 1}),
                          rw.ints(tag + "_axis", {2}), rw.ints(tag + "_step", {st})},
                         {dt, {batch, c, f, h, wd}}, tag);
      taps.push_back(rw.reshape(s, {batch, c, 1, f, h, wd}, tag + "_unit"));
    }
    Value* stacked = taps.size() == 1 ? taps[0]
                                      : rw.emit("Concat", taps, {dt, {batch, c, nk, f, h, wd}}, pre + "taps", {{"axis", int64_t{2}}});
    Value* frames = rw.emit("Transpose", {stacked}, {dt, {batch, f, c, nk, h, wd}}, pre + "frames",
                            {{"perm", std::vector<int64_t>{0, 3, 1, 2, 4, 5}}});
    Value* x2 = rw.reshape(frames, {batch * f, c * nk, h, wd}, pre + "frames_2d");
    std::vector<Value*> ins{x2, depth_tap_weights(rw, w, run.k0, run.k1, pre + "weights_2d")};
    if (b) ins.push_back(b);
    parts.push_back(rw.emit("Conv", ins, {dt, {batch * f, m, geo.out[1], geo.out[2]}}, pre + "conv_2d", attrs));
  }
  // The runs' outputs in frame order: at batch 1 one Concat of the 2-D outputs along their batch
  // (contiguous slices: built in place by the convs, fusion/concat_in_place.h), else along the
  // frames of each image.
  Value* frames_out = nullptr;
  if (parts.size() == 1) {
    frames_out = rw.reshape(parts[0], {batch, to, m, geo.out[1], geo.out[2]}, "frames_out");
  } else if (batch == 1) {
    Value* all = rw.emit("Concat", parts, {dt, {to, m, geo.out[1], geo.out[2]}}, "frames_concat", {{"axis", int64_t{0}}});
    frames_out = rw.reshape(all, {batch, to, m, geo.out[1], geo.out[2]}, "frames_out");
  } else {
    std::vector<Value*> per_image;
    for (size_t r = 0; r < parts.size(); ++r)
      per_image.push_back(rw.reshape(parts[r], {batch, runs[r].o1 - runs[r].o0, m, geo.out[1], geo.out[2]},
                                     "run" + std::to_string(r) + "_frames_out"));
    frames_out = rw.emit("Concat", per_image, {dt, {batch, to, m, geo.out[1], geo.out[2]}}, "frames_out", {{"axis", int64_t{1}}});
  }
  rw.emit("Transpose", {frames_out}, y->type(), "channels_first", {{"perm", std::vector<int64_t>{0, 2, 1, 3, 4}}}, y);
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
