#include "transforms/lower_conv_transpose.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Per spatial dim: stride, dilation, kernel size, input and output length, and the amount the
// equivalent Conv pads the zero-inserted input before and after (negative: crops).
struct Geometry {
  std::vector<int64_t> stride, dilation, kernel, in, out, before, after, pad_begin;
  int64_t group = 1, m = 0;  // output channels
};

std::optional<Geometry> geometry(const Node& n, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return std::nullopt;
  };
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  if (xs.size() < 3 || ws.size() != xs.size()) return fail("X and W must have the same rank >= 3");
  const size_t nd = xs.size() - 2;
  Geometry g;
  g.group = n.attr_int("group", 1);
  if (g.group < 1 || xs[1] != ws[0] || xs[1] % g.group != 0) return fail("group does not match X and W");
  g.m = ws[1] * g.group;
  auto per_dim = [&](const char* name, size_t count, int64_t dflt, int64_t min) -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> v = n.attr_ints(name);
    if (v.empty()) v.assign(count, dflt);
    if (v.size() != count) return std::nullopt;
    for (int64_t e : v)
      if (e < min) return std::nullopt;
    return v;
  };
  auto stride = per_dim("strides", nd, 1, 1), dil = per_dim("dilations", nd, 1, 1);
  auto out_pad = per_dim("output_padding", nd, 0, 0);
  if (!stride || !dil || !out_pad) return fail("strides, dilations or output_padding is invalid");
  g.stride = *stride;
  g.dilation = *dil;
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return fail("auto_pad is invalid");
  std::vector<int64_t> out_shape = n.attr_ints("output_shape");
  if (out_shape.size() == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  if (!out_shape.empty() && out_shape.size() != nd) return fail("output_shape has the wrong length");
  std::vector<int64_t> pads(2 * nd, 0);
  if (out_shape.empty() && auto_pad == "NOTSET") {
    auto p = per_dim("pads", 2 * nd, 0, std::numeric_limits<int64_t>::min());
    if (!p) return fail("pads is invalid");
    pads = *p;
  }
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != Shape(ws.begin() + 2, ws.end()))
    return fail("kernel_shape does not match W");
  for (size_t d = 0; d < nd; ++d) {
    const int64_t k = ws[d + 2], in = xs[d + 2], s = g.stride[d], dl = g.dilation[d];
    if (k < 1 || in < 1) return fail("empty kernel or input");
    const int64_t span = dl * (k - 1) + 1;
    const int64_t full = s * (in - 1) + (*out_pad)[d] + span;
    int64_t pb, out;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = out_shape.empty() ? in * s : out_shape[d];
      const int64_t total = full - out;
      pb = auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
    } else if (auto_pad == "VALID") {
      out = full;
      pb = 0;
    } else {
      pb = pads[d];
      out = full - pads[d] - pads[nd + d];
    }
    if (out < 1) return fail("the output would be empty");
    // The zero-inserted input has in*s elements (a trailing run of s-1 zeros included); the Conv's
    // output is (before + in*s + after) - dil*(k-1) long.
    g.kernel.push_back(k);
    g.in.push_back(in);
    g.out.push_back(out);
    g.pad_begin.push_back(pb);
    g.before.push_back(dl * (k - 1) - pb);
    g.after.push_back(out + dl * (k - 1) - in * s - g.before.back());
  }
  return g;
}

// W [C, M/g, K...] -> W' [M, C/g, K...]: W'[gi*Mg + m, c, k'] = W[gi*Cg + c, m, K-1-k'].
Tensor transposed_flipped_weights(const Tensor& w, int64_t group) {
  const Shape& ws = w.shape();
  const int64_t c = ws[0], mg = ws[1], cg = c / group;
  const Shape kernel(ws.begin() + 2, ws.end());
  const int64_t ksize = shape_numel(kernel);
  Shape out_shape{mg * group, cg};
  out_shape.insert(out_shape.end(), kernel.begin(), kernel.end());
  Tensor r(w.dtype(), out_shape);
  const size_t es = dtype_size(w.dtype());
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(r.raw());
  // Flipping every spatial axis reverses the row-major order of the kernel's elements.
  for (int64_t gi = 0; gi < group; ++gi)
    for (int64_t ci = 0; ci < cg; ++ci)
      for (int64_t mi = 0; mi < mg; ++mi)
        for (int64_t k = 0; k < ksize; ++k) {
          const int64_t from = ((gi * cg + ci) * mg + mi) * ksize + k;
          const int64_t to = ((gi * mg + mi) * cg + ci) * ksize + (ksize - 1 - k);
          std::memcpy(dst + size_t(to) * es, src + size_t(from) * es, es);
        }
  return r;
}


// The same for weights computed at run time, as graph ops (a small kernel of its own before the
// Conv): Reshape [g, C/g, M/g, K...] -> Transpose [g, M/g, C/g, K...] -> Reshape [M, C/g, K...],
// then a Slice with step -1 on every spatial axis.
Value* transposed_flipped_weights(NodeRewriter& rw, Value* w, int64_t group) {
  const Shape& ws = w->shape();
  const int64_t c = ws[0], mg = ws[1], cg = c / group;
  const int64_t nd = int64_t(ws.size()) - 2;
  Shape grouped{group, cg, mg}, swapped{group, mg, cg}, out{mg * group, cg};
  std::vector<int64_t> perm{0, 2, 1};
  for (int64_t d = 0; d < nd; ++d) {
    grouped.push_back(ws[size_t(d + 2)]);
    swapped.push_back(ws[size_t(d + 2)]);
    out.push_back(ws[size_t(d + 2)]);
    perm.push_back(d + 3);
  }
  Value* g = rw.reshape(w, grouped, "weights_grouped");
  Value* t = rw.emit("Transpose", {g}, {w->dtype(), swapped}, "weights_swapped", {{"perm", perm}});
  Value* r = rw.reshape(t, out, "weights_transposed");
  std::vector<int64_t> starts(size_t(nd), -1), ends(size_t(nd), std::numeric_limits<int64_t>::min()), axes, steps(size_t(nd), -1);
  for (int64_t d = 0; d < nd; ++d) axes.push_back(d + 2);
  return rw.emit("Slice",
                 {r, rw.ints("flip_starts", starts), rw.ints("flip_ends", ends), rw.ints("flip_axes", axes),
                  rw.ints("flip_steps", steps)},
                 {w->dtype(), out}, "weights");
}

// The sub-pixel form applies to 2-D ConvTransposes with one stride s > 1 on both axes, no
// dilation, one group and constant weights: it computes only the products that are not zeros.
bool subpixel_applies(const Geometry& geo, const Value* w) {
  return geo.in.size() == 2 && geo.group == 1 && w->is_constant() && geo.stride[0] == geo.stride[1] &&
         geo.stride[0] > 1 && geo.dilation[0] == 1 && geo.dilation[1] == 1;
}

// Sub-pixel ConvTranspose: with o + pad_begin = s*q + r (0 <= r < s), y[o] = sum over t of
// x[q - t] * w[r + s*t], so every output phase r is a stride-1 correlation of x with the taps
// r, r+s, ... of the kernel (T = ceil(K/s) of them, the missing ones 0). All s*s phases are one
// Conv with M*s*s output channels (phase-minor, as DepthToSpace CRD reads them) over x padded by
// T-1-q0 before (q0 = floor(pad_begin / s), the first q needed); DepthToSpace interleaves the
// phases and a Slice from pad_begin - s*q0 cuts the output. Against the zero-inserted input this
// skips the (s*s - 1) / (s*s) of the products that multiply inserted zeros.
void lower_subpixel(NodeRewriter& rw, const Geometry& geo) {
  Value* x = rw.input(0);
  Value* b = rw.input(2);
  Value* y = rw.output(0);
  const DType dt = x->dtype();
  const Tensor& w = rw.input(1)->constant();
  const int64_t s = geo.stride[0], c = w.shape()[0], m = w.shape()[1];
  int64_t taps[2], q0[2], lq[2], pads[4];
  for (int d = 0; d < 2; ++d) {
    const int64_t k = geo.kernel[size_t(d)], pb = geo.pad_begin[size_t(d)];
    taps[d] = (k + s - 1) / s;
    q0[d] = floor_div(pb, s);
    lq[d] = floor_div(geo.out[size_t(d)] - 1 + pb, s) - q0[d] + 1;
    pads[d] = taps[d] - 1 - q0[d];
    pads[d + 2] = lq[d] - geo.in[size_t(d)] - pads[d] + taps[d] - 1;
  }
  // W'' [M*s*s, C, T_h, T_w]: W''[(m*s + rh)*s + rw, c, jh, jw] = W[c, m, rh + s*(T_h-1-jh), rw + s*(T_w-1-jw)].
  Tensor wp(dt, {m * s * s, c, taps[0], taps[1]});
  const size_t es = dtype_size(dt);
  const int64_t kh = geo.kernel[0], kw = geo.kernel[1];
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(wp.raw());
  for (int64_t mi = 0; mi < m; ++mi)
    for (int64_t rh = 0; rh < s; ++rh)
      for (int64_t rw_ = 0; rw_ < s; ++rw_)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t jh = 0; jh < taps[0]; ++jh)
            for (int64_t jw = 0; jw < taps[1]; ++jw) {
              const int64_t ih = rh + s * (taps[0] - 1 - jh), iw = rw_ + s * (taps[1] - 1 - jw);
              if (ih >= kh || iw >= kw) continue;  // a missing tap stays 0
              const int64_t to = ((((mi * s + rh) * s + rw_) * c + ci) * taps[0] + jh) * taps[1] + jw;
              const int64_t from = ((ci * m + mi) * kh + ih) * kw + iw;
              std::memcpy(dst + size_t(to) * es, src + size_t(from) * es, es);
            }
  Value* z = x;
  const int64_t batch = x->shape()[0];
  // Negative padding crops x first; the rest is the Conv's own padding.
  std::vector<int64_t> conv_pads(4), crop(8, 0);
  Shape cropped = x->shape();
  bool crops = false;
  for (int d = 0; d < 2; ++d) {
    conv_pads[size_t(d)] = std::max<int64_t>(0, pads[d]);
    conv_pads[size_t(d + 2)] = std::max<int64_t>(0, pads[d + 2]);
    crop[size_t(d + 2)] = std::min<int64_t>(0, pads[d]);
    crop[size_t(d + 6)] = std::min<int64_t>(0, pads[d + 2]);
    crops = crops || pads[d] < 0 || pads[d + 2] < 0;
    cropped[size_t(d + 2)] += crop[size_t(d + 2)] + crop[size_t(d + 6)];
  }
  if (crops) z = rw.emit("Pad", {z, rw.ints("crop_pads", crop)}, {dt, cropped}, "cropped");
  AttributeMap attrs{{"dilations", std::vector<int64_t>{1, 1}},
                     {"group", int64_t(1)},
                     {"kernel_shape", std::vector<int64_t>{taps[0], taps[1]}},
                     {"pads", conv_pads},
                     {"strides", std::vector<int64_t>{1, 1}}};
  Value* phases = rw.emit("Conv", {z, rw.constant("phase_weights", std::move(wp))}, {dt, {batch, m * s * s, lq[0], lq[1]}},
                          "phases", std::move(attrs));
  Value* full = rw.emit("DepthToSpace", {phases}, {dt, {batch, m, s * lq[0], s * lq[1]}}, "interleaved",
                        {{"blocksize", s}, {"mode", std::string("CRD")}});
  const int64_t sh = geo.pad_begin[0] - s * q0[0], sw = geo.pad_begin[1] - s * q0[1];
  Value* cut = rw.emit("Slice",
                       {full, rw.ints("cut_starts", {sh, sw}),
                        rw.ints("cut_ends", {sh + geo.out[0], sw + geo.out[1]}), rw.ints("cut_axes", {2, 3})},
                       y->type(), "cut", {}, b ? nullptr : y);
  if (b) rw.binary("Add", cut, rw.reshape(b, {m, 1, 1}, "bias_channels"), "biased", y);
}

void lower(Graph& g, Node* n) {
  std::string why;
  const Geometry geo = *geometry(*n, &why);
  if (subpixel_applies(geo, n->input(1))) {
    NodeRewriter rw(g, n);
    lower_subpixel(rw, geo);
    return;
  }
  const size_t nd = geo.in.size();
  NodeRewriter rw(g, n);
  Value* x = rw.input(0);
  Value* b = rw.input(2);
  Value* y = rw.output(0);
  const DType dt = x->dtype();
  const int64_t batch = x->shape()[0], channels = x->shape()[1];
  Value* w = rw.input(1)->is_constant()
                 ? rw.constant("weights", transposed_flipped_weights(rw.input(1)->constant(), geo.group))
                 : transposed_flipped_weights(rw, rw.input(1), geo.group);

  Value* z = x;
  bool strided = false;
  for (int64_t s : geo.stride) strided = strided || s > 1;
  Shape zshape = x->shape();
  if (strided) {
    Shape split{batch, channels}, padded{batch, channels};
    std::vector<int64_t> before, after;
    for (int k = 0; k < 2; ++k) before.push_back(0), after.push_back(0);
    for (size_t d = 0; d < nd; ++d) {
      split.insert(split.end(), {geo.in[d], 1});
      padded.insert(padded.end(), {geo.in[d], geo.stride[d]});
      before.insert(before.end(), {0, 0});
      after.insert(after.end(), {0, geo.stride[d] - 1});
      zshape[d + 2] = geo.in[d] * geo.stride[d];
    }
    std::vector<int64_t> pads = before;
    pads.insert(pads.end(), after.begin(), after.end());
    Value* r = rw.reshape(x, split, "split");
    Value* p = rw.emit("Pad", {r, rw.ints("zeros_pads", pads)}, {dt, padded}, "zeros");
    z = rw.reshape(p, zshape, "strided");
  }
  // Negative padding crops before the Conv; the rest is the Conv's own padding.
  std::vector<int64_t> conv_pads(2 * nd), crop(2 * (nd + 2), 0);
  bool crops = false;
  Shape cropped = zshape;
  for (size_t d = 0; d < nd; ++d) {
    conv_pads[d] = std::max<int64_t>(0, geo.before[d]);
    conv_pads[nd + d] = std::max<int64_t>(0, geo.after[d]);
    crop[d + 2] = std::min<int64_t>(0, geo.before[d]);
    crop[nd + 2 + d + 2] = std::min<int64_t>(0, geo.after[d]);
    crops = crops || crop[d + 2] < 0 || crop[nd + 2 + d + 2] < 0;
    cropped[d + 2] += crop[d + 2] + crop[nd + 2 + d + 2];
  }
  if (crops) z = rw.emit("Pad", {z, rw.ints("crop_pads", crop)}, {dt, cropped}, "cropped");
  std::vector<Value*> ins{z, w};
  if (b) ins.push_back(b);
  AttributeMap attrs{{"dilations", geo.dilation},
                     {"group", geo.group},
                     {"kernel_shape", geo.kernel},
                     {"pads", conv_pads},
                     {"strides", std::vector<int64_t>(nd, 1)}};
  rw.emit("Conv", ins, y->type(), "conv", std::move(attrs), y);
}

}  // namespace

std::string LowerConvTranspose::refusal(const Node& n) {
  if (n.op_type() != "ConvTranspose" || !n.domain().empty()) return "not a ConvTranspose";
  if (!n.input(0) || !n.input(1) || n.num_outputs() != 1) return "expects X and W and one output";
  const Value* x = n.input(0);
  const Value* w = n.input(1);
  if (!is_float(x->dtype()) || w->dtype() != x->dtype()) return "X is not floating-point or W has another type";
  std::string why;
  auto geo = geometry(n, &why);
  if (!geo) return why;
  if (const Value* b = n.input(2))
    if (b->dtype() != x->dtype() || b->shape() != Shape{geo->m}) return "B must have shape [M] and X's type";
  Shape out{x->shape()[0], geo->m};
  out.insert(out.end(), geo->out.begin(), geo->out.end());
  if (n.output(0)->type() != TensorType{x->dtype(), out}) return "Y's type does not match the geometry";
  return "";
}

bool LowerConvTranspose::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { lower(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
