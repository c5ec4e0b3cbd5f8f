#include "transforms/trim_conv_taps.h"

#include <cstring>
#include <optional>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The kept tap range [lo, hi] per spatial axis; nullopt when n is not a Conv this pass reads.
struct Trim {
  std::vector<int64_t> lo, hi, pads;
  bool changes = false;
};

std::optional<Trim> plan(const Node& n, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return std::optional<Trim>();
  };
  if (n.op_type() != "Conv" || !n.domain().empty()) return fail("not a Conv");
  const Value *x = n.input(0), *w = n.num_inputs() > 1 ? n.input(1) : nullptr;
  if (!x || !w || n.num_outputs() != 1 || !n.output(0)) return fail("Conv has an unexpected signature");
  if (!w->is_constant()) return fail("the weights are computed");
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET") return fail("auto_pad " + auto_pad + " decides the padding");
  const Shape &xs = x->shape(), &ws = w->shape(), &ys = n.output(0)->shape();
  if (xs.size() < 3 || ws.size() != xs.size() || ys.size() != xs.size()) return fail("X, W and Y ranks differ");
  const size_t nd = xs.size() - 2;
  std::vector<int64_t> s = n.attr_ints("strides"), d = n.attr_ints("dilations"), p = n.attr_ints("pads");
  if (s.empty()) s.assign(nd, 1);
  if (d.empty()) d.assign(nd, 1);
  if (p.empty()) p.assign(2 * nd, 0);
  if (s.size() != nd || d.size() != nd || p.size() != 2 * nd) return fail("strides, dilations or pads have the wrong length");
  Trim t;
  t.pads = p;
  for (size_t i = 0; i < nd; ++i) {
    const int64_t K = ws[i + 2], in = xs[i + 2], out = ys[i + 2], b = p[i], e = p[i + nd];
    if (s[i] < 1 || d[i] < 1 || b < 0 || e < 0 || K < 1) return fail("invalid strides, dilations or pads");
    int64_t lo = -1, hi = -1;
    for (int64_t k = 0; k < K; ++k) {
      // Outputs o in [0, out) read x[o*s + k*d - b]: the first and last such index.
      const int64_t first = k * d[i] - b, last = (out - 1) * s[i] + k * d[i] - b;
      bool live = false;
      if (out > 0 && last >= 0 && first < in) {
        // Some o*s lands in [b - k*d, b - k*d + in): the smallest o with o*s >= b - k*d.
        const int64_t need = b - k * d[i];
        const int64_t o = need <= 0 ? 0 : (need + s[i] - 1) / s[i];
        live = o < out && o * s[i] + k * d[i] - b < in;
      }
      if (live) {
        if (lo < 0) lo = k;
        hi = k;
      }
    }
    if (lo < 0) return fail("an axis has no tap inside the input (the conv reads only padding)");
    lo = std::min(lo, b / d[i]);                    // b' = b - lo*d >= 0
    hi = std::max(hi, K - 1 - e / d[i]);            // e' = e - (K-1-hi)*d >= 0
    t.lo.push_back(lo);
    t.hi.push_back(hi);
    t.pads[i] = b - lo * d[i];
    t.pads[i + nd] = e - (K - 1 - hi) * d[i];
    t.changes = t.changes || lo > 0 || hi < K - 1;
  }
  if (!t.changes) return fail("every tap reads the input somewhere");
  return t;
}

// W[:, :, lo0..hi0, lo1..hi1, ...] as a new tensor (row-major, any dtype: bytes are copied).
Tensor slice_taps(const Tensor& w, const Trim& t) {
  const Shape& ws = w.shape();
  Shape out = {ws[0], ws[1]};
  for (size_t i = 0; i < t.lo.size(); ++i) out.push_back(t.hi[i] - t.lo[i] + 1);
  Tensor r(w.dtype(), out);
  const size_t es = dtype_size(w.dtype());
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(r.raw());
  std::vector<int64_t> idx(out.size(), 0);
  for (int64_t f = 0; f < r.numel(); ++f) {
    int64_t off = 0;
    for (size_t k = 0; k < out.size(); ++k) off = off * ws[k] + idx[k] + (k >= 2 ? t.lo[k - 2] : 0);
    std::memcpy(dst + size_t(f) * es, src + size_t(off) * es, es);
    for (size_t k = out.size(); k-- > 0;) {
      if (++idx[k] < out[k]) break;
      idx[k] = 0;
    }
  }
  return r;
}

}  // namespace

std::string TrimConvTaps::refusal(const Node& n) {
  std::string why;
  return plan(n, &why) ? "" : why;
}

bool TrimConvTaps::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); },
      [&](Node* n) {
        std::string why;
        const Trim t = *plan(*n, &why);
        const Tensor w = slice_taps(n->input(1)->constant(), t);
        NodeRewriter rw(g, n);
        AttributeMap attrs = rw.attrs();
        attrs["pads"] = t.pads;
        if (attrs.count("kernel_shape")) attrs["kernel_shape"] = std::vector<int64_t>(w.shape().begin() + 2, w.shape().end());
        std::vector<Value*> ins = {rw.input(0), rw.constant("trimmed_weights", w)};
        if (rw.input(2)) ins.push_back(rw.input(2));
        rw.emit("Conv", ins, rw.output(0)->type(), "trimmed", attrs, rw.output(0));
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
