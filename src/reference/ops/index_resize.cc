// Resize (opset-13 form: X, roi, scales, sizes) on any number of dimensions.
//
// Every mode is separable: an output element is a weighted sum over a tensor product of per-axis
// taps. So the kernel first plans each axis on its own -- for every output coordinate x it maps x to
// a source coordinate x_original (coordinate_transformation_mode) and turns that into taps
// (input index, weight) -- and then applies the plans:
//   - nearest: one tap of weight 1 per axis, so the output is a pure gather, done on raw bytes
//     (exact for every dtype, including int64 beyond 2^53 and bool);
//   - linear / cubic: one resampling pass per axis, innermost axis first, on a float64 buffer.
//     This is the same order of evaluation as the ONNX numpy reference (interpolate_nd recurses into
//     the inner axes first and interpolates the outer axis over their results).
// Neighbours outside the input are clamped to the edge (the reference pads in 'edge' mode), unless
// exclude_outside drops them and renormalises the weights. Zero-weight taps are skipped, so an output
// depends only on inputs that actually contribute to it.
//
// Output size with `scales`: floor(in * scale), computed in float64 from the float32 scale, for
// every coordinate_transformation_mode: tf_crop_and_resize does not multiply by the roi's extent
// either, as ONNX shape inference (which typed the output at import) and ONNX Runtime do. The
// length_resized of align_corners, pytorch_half_pixel and tf_crop_and_resize is then that output
// size, an integer: the spec defines it as "the length of the resized tensor", and ONNX Runtime
// and PyTorch (F.interpolate with scale_factor, align_corners=True) use it, so 5 x 1.5 -> 7 maps
// x to x * 4 / 6. The ONNX 1.12 numpy reference (and the conformance data generated from it, e.g.
// resize_downsample_scales_linear_align_corners: 4 x 0.6 -> 2, x_original = x * 3 / 1.4) uses the
// unrounded product instead; kiln follows the spec and ONNX Runtime and fails those two tests.
// x_original is computed in float32, with ONNX Runtime's formulas and operation order: where it
// lands on a whole number in exact arithmetic (x = 1 of 4 -> 2 by scale 0.6 under half_pixel:
// 1.5 / 0.6 - 0.5 = 2), float32 and float64 round to either side of it, and nearest's floor/ceil
// (and linear's taps) follow ONNX Runtime's side. With `sizes` the scale is out / in in float32.
// pytorch_half_pixel with length_resized 1 samples x_original = 0 as the spec (and ONNX Runtime)
// say; the numpy reference uses -0.5, which differs for cubic only.
//
// The per-axis planning (plan_resize, resize_plan.h) is shared with transforms/decompose_resize,
// which spells a Resize as Gathers and weighted sums with exactly these taps.
//
// Integer outputs of linear/cubic are rounded to nearest (half away from zero) and saturated: the
// reference's plain cast would truncate and wrap cubic overshoot (255 -> 260 -> 4 for uint8).
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/kernel_util.h"
#include "reference/ops/index_internal.h"
#include "reference/ops/resize_plan.h"

namespace kiln {
namespace {

enum class Mode { Nearest, Linear, Cubic };
enum class CoordMode { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNN, TfCropAndResize };
enum class NearestMode { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct ResizeAttrs {
  Mode mode = Mode::Nearest;
  CoordMode coord = CoordMode::HalfPixel;
  NearestMode nearest = NearestMode::RoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
};

ResizeAttrs parse_attrs(const Node& node) {
  ResizeAttrs a;
  const std::string mode = node.attr_string("mode", "nearest");
  if (mode == "nearest") a.mode = Mode::Nearest;
  else if (mode == "linear") a.mode = Mode::Linear;
  else if (mode == "cubic") a.mode = Mode::Cubic;
  else user_error("unsupported mode '", mode, "' (expected nearest, linear or cubic)");

  const std::string coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel") a.coord = CoordMode::HalfPixel;
  else if (coord == "pytorch_half_pixel") a.coord = CoordMode::PytorchHalfPixel;
  else if (coord == "align_corners") a.coord = CoordMode::AlignCorners;
  else if (coord == "asymmetric") a.coord = CoordMode::Asymmetric;
  else if (coord == "tf_half_pixel_for_nn") a.coord = CoordMode::TfHalfPixelForNN;  // opset 11-12 models
  else if (coord == "tf_crop_and_resize") a.coord = CoordMode::TfCropAndResize;
  else user_error("unsupported coordinate_transformation_mode '", coord, "'");

  const std::string nearest = node.attr_string("nearest_mode", "round_prefer_floor");
  if (nearest == "round_prefer_floor") a.nearest = NearestMode::RoundPreferFloor;
  else if (nearest == "round_prefer_ceil") a.nearest = NearestMode::RoundPreferCeil;
  else if (nearest == "floor") a.nearest = NearestMode::Floor;
  else if (nearest == "ceil") a.nearest = NearestMode::Ceil;
  else user_error("unsupported nearest_mode '", nearest, "'");

  a.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  a.extrapolation = node.attr_float("extrapolation_value", 0.0f);
  return a;
}

// Output shape and the per-axis quantities the coordinate transforms need.
struct Geometry {
  Shape out;
  std::vector<double> scale;           // length_resized / length_original
  std::vector<double> length_resized;  // see the file comment: unrounded when `scales` is given
  std::vector<double> roi_start, roi_end;
};

// An omitted optional input may also arrive as an empty tensor (opset-11 models pass "" or a 0-size
// constant for roi/scales).
bool present(const std::vector<Tensor>& in, size_t i) { return in.size() > i && in[i].defined() && in[i].numel() > 0; }

Geometry compute_geometry(const ResizeAttrs& a, const Shape& x, const std::vector<Tensor>& in) {
  const int64_t rank = int64_t(x.size());
  const size_t r = size_t(rank);
  Geometry g;
  g.roi_start.assign(r, 0.0);
  g.roi_end.assign(r, 1.0);
  // roi only matters for tf_crop_and_resize; absent, it defaults to the whole input.
  if (a.coord == CoordMode::TfCropAndResize && present(in, 1)) {
    const Tensor& roi = in[1];
    if (roi.numel() != 2 * rank)
      user_error("roi has ", roi.numel(), " elements; expected 2 * rank = ", 2 * rank);
    for (size_t d = 0; d < r; ++d) {
      g.roi_start[d] = roi.as_double(int64_t(d));
      g.roi_end[d] = roi.as_double(int64_t(d + r));
      if (!std::isfinite(g.roi_start[d]) || !std::isfinite(g.roi_end[d])) user_error("roi values must be finite");
    }
  }
  const bool has_scales = present(in, 2), has_sizes = present(in, 3);
  if (has_scales == has_sizes) user_error("exactly one of scales and sizes must be given");
  g.out.resize(r);
  g.scale.resize(r);
  g.length_resized.resize(r);
  if (has_scales) {
    const Tensor& s = in[2];
    if (!is_float(s.dtype())) user_error("scales must be a float tensor, got ", dtype_name(s.dtype()));
    if (s.numel() != rank) user_error("scales has ", s.numel(), " elements; expected rank = ", rank);
    for (size_t d = 0; d < r; ++d) {
      const double sc = s.as_double(int64_t(d));
      if (!(sc > 0) || !std::isfinite(sc)) user_error("scales must be positive and finite, got ", sc);
      const double len = double(x[d]) * sc;
      if (!(len < double(int64_t(1) << 40))) user_error("scales ", sc, " make the output too large");
      g.out[d] = int64_t(std::max(0.0, std::floor(len)));
      g.scale[d] = sc;
      g.length_resized[d] = double(g.out[d]);
    }
  } else {
    const Tensor& s = in[3];
    if (!is_integer(s.dtype())) user_error("sizes must be an integer tensor, got ", dtype_name(s.dtype()));
    if (s.numel() != rank) user_error("sizes has ", s.numel(), " elements; expected rank = ", rank);
    for (size_t d = 0; d < r; ++d) {
      const int64_t o = s.as_int64(int64_t(d)), i = x[d];
      if (o < 0) user_error("sizes must be non-negative, got ", o);
      if (i == 0 && o != 0) user_error("cannot resize an empty dimension to size ", o);
      g.out[d] = o;
      g.scale[d] = i == 0 ? 1.0 : double(float(o) / float(i));
      g.length_resized[d] = double(o);
    }
  }
  return g;
}

// x_original for output coordinate x along one axis (formulas from the ONNX spec).
double source_coordinate(const ResizeAttrs& a, int64_t x, int64_t in_len, double scale_d, double len_resized_d,
                         double roi_start_d, double roi_end_d) {
  const float xr = float(x), lo = float(in_len), scale = float(scale_d), lr = float(len_resized_d);
  const float rs = float(roi_start_d), re = float(roi_end_d);
  switch (a.coord) {
    case CoordMode::HalfPixel: return (xr + 0.5f) / scale - 0.5f;
    case CoordMode::PytorchHalfPixel: return lr > 1 ? (xr + 0.5f) / scale - 0.5f : 0.0f;
    case CoordMode::AlignCorners: return lr == 1 ? 0.0f : xr * (lo - 1) / (lr - 1);
    case CoordMode::Asymmetric: return xr / scale;
    case CoordMode::TfHalfPixelForNN: return (xr + 0.5f) / scale;
    case CoordMode::TfCropAndResize:
      return lr > 1 ? rs * (lo - 1) + (xr * (re - rs) * (lo - 1)) / (lr - 1) : float(0.5 * (rs + re) * (lo - 1));
  }
  return 0.0;
}

using Tap = ResizeTap;
using AxisPlan = ResizeAxisPlan;

int64_t nearest_index(double xo, NearestMode m) {
  const double f = std::floor(xo), frac = xo - f;
  const int64_t i = int64_t(f);
  if (frac == 0) return i;
  switch (m) {
    case NearestMode::RoundPreferFloor: return frac <= 0.5 ? i : i + 1;
    case NearestMode::RoundPreferCeil: return frac < 0.5 ? i : i + 1;
    case NearestMode::Floor: return i;
    case NearestMode::Ceil: return i + 1;
  }
  return i;
}

// Keys' cubic convolution weights for the neighbours at offsets -1, 0, 1, 2 of floor(x_original),
// where t is the fractional part (Keys 1981, eq. 4, with a = cubic_coeff_a).
std::vector<double> cubic_weights(double t, double A) {
  auto near = [&](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };          // |d| <= 1
  auto far = [&](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };     // 1 < |d| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

AxisPlan plan_axis(const ResizeAttrs& a, int64_t in_len, int64_t out_len, double scale, double len_resized,
                   double roi_start, double roi_end) {
  AxisPlan p;
  p.taps.resize(size_t(out_len));
  p.identity = in_len == out_len;
  for (int64_t x = 0; x < out_len; ++x) {
    double xo = source_coordinate(a, x, in_len, scale, len_resized, roi_start, roi_end);
    std::vector<Tap>& taps = p.taps[size_t(x)];
    if (a.coord == CoordMode::TfCropAndResize && (xo < 0 || xo > double(in_len - 1))) {
      p.identity = false;
      continue;
    }
    // x_original lies in about [-0.5, in_len] for every mode here; the clamp only guards the int64
    // conversion below against a pathological scale.
    xo = std::clamp(xo, -4.0, double(in_len) + 4.0);
    if (a.mode == Mode::Nearest) {
      taps.push_back({nearest_index(xo, a.nearest), 1.0});
    } else {
      const double f = std::floor(xo), t = xo - f;
      const int64_t i0 = int64_t(f);
      if (a.mode == Mode::Linear) {
        taps = {{i0, 1 - t}, {i0 + 1, t}};
      } else {
        const auto w = cubic_weights(t, a.cubic_a);
        for (int64_t k = 0; k < 4; ++k) taps.push_back({i0 - 1 + k, w[size_t(k)]});
      }
      if (a.exclude_outside) {
        double sum = 0;
        for (Tap& tp : taps) {
          if (tp.index < 0 || tp.index >= in_len) tp.weight = 0;
          sum += tp.weight;
        }
        if (sum != 0)
          for (Tap& tp : taps) tp.weight /= sum;
      }
    }
    std::vector<Tap> kept;
    for (Tap tp : taps) {
      if (tp.weight == 0) continue;
      tp.index = std::clamp<int64_t>(tp.index, 0, in_len - 1);
      kept.push_back(tp);
    }
    taps = std::move(kept);
    if (!(taps.size() == 1 && taps[0].index == x && taps[0].weight == 1.0)) p.identity = false;
  }
  return p;
}

// Rounds and saturates a double into an integer type; NaN becomes 0.
template <class T>
T to_integer(double v) {
  if (!(v == v)) return T(0);
  v = std::round(v);
  if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return T(v);
}

// Stores an interpolated (or extrapolation) value into the output dtype.
template <class T>
T from_double(double v) {
  if constexpr (std::is_integral_v<T>) return to_integer<T>(v);  // bool never gets here
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return T(float(v));  // Half / BFloat16
}

// Nearest: every output element copies one input element (or the extrapolation value).
void resize_nearest(const Tensor& x, Tensor& out, const std::vector<AxisPlan>& plans, double extrap) {
  const Shape& out_shape = out.shape();
  const size_t rank = out_shape.size(), es = dtype_size(x.dtype());
  // Per axis and output coordinate: the element offset contributed in the input, or -1 when outside.
  const auto in_strides = shape_strides(x.shape());
  std::vector<std::vector<int64_t>> offs(rank);
  for (size_t d = 0; d < rank; ++d)
    for (const auto& taps : plans[d].taps) offs[d].push_back(taps.empty() ? -1 : taps[0].index * in_strides[d]);
  Tensor fill(x.dtype(), {});
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) fill.data<T>()[0] = extrap != 0;
    else fill.data<T>()[0] = from_double<T>(extrap);
  });
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  std::vector<int64_t> pos(rank, 0);
  for (int64_t e = 0; e < out.numel(); ++e) {
    int64_t off = 0;
    bool outside = false;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t o = offs[d][size_t(pos[d])];
      if (o < 0) outside = true;
      off += o;
    }
    std::memcpy(dst + size_t(e) * es, outside ? fill.raw() : src + size_t(off) * es, es);
    for (size_t d = rank; d-- > 0;) {
      if (++pos[d] < out_shape[d]) break;
      pos[d] = 0;
    }
  }
}

// Linear / cubic: one weighted-sum pass per axis (innermost first) on a float64 buffer.
void resize_interpolate(const Tensor& x, Tensor& out, const std::vector<AxisPlan>& plans, double extrap) {
  const Shape& out_shape = out.shape();
  Shape cur_shape = x.shape();
  const Tensor xd = x.cast(DType::Float64);
  std::vector<double> cur(xd.data<double>(), xd.data<double>() + xd.numel());
  for (int64_t d = int64_t(out_shape.size()) - 1; d >= 0; --d) {
    const AxisPlan& p = plans[size_t(d)];
    if (p.identity) continue;
    const int64_t in_len = cur_shape[size_t(d)], out_len = out_shape[size_t(d)];
    const int64_t outer = dims_product(cur_shape, 0, d), inner = dims_product(cur_shape, d + 1, int64_t(cur_shape.size()));
    cur_shape[size_t(d)] = out_len;
    std::vector<double> next(size_t(shape_numel(cur_shape)));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t xo = 0; xo < out_len; ++xo) {
        const auto& taps = p.taps[size_t(xo)];
        double* dst = next.data() + (o * out_len + xo) * inner;
        if (taps.empty()) {
          std::fill(dst, dst + inner, extrap);
          continue;
        }
        for (const Tap& t : taps) {
          const double* src = cur.data() + (o * in_len + t.index) * inner;
          for (int64_t j = 0; j < inner; ++j) dst[j] += t.weight * src[j];
        }
      }
    cur = std::move(next);
  }
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    if constexpr (!std::is_same_v<T, bool>)
      for (size_t i = 0; i < cur.size(); ++i) o[i] = from_double<T>(cur[i]);
  });
}

std::vector<Tensor> resize(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 4);
  const Tensor& x = in[0];
  const ResizePlan plan = plan_resize(node, x.shape(), in);
  if (!plan.nearest && x.dtype() == DType::Bool) user_error("linear and cubic modes need a numeric input, got bool");
  Tensor out(x.dtype(), plan.out);
  if (out.numel() == 0) return {out};
  if (plan.nearest) resize_nearest(x, out, plan.axes, plan.extrapolation);
  else resize_interpolate(x, out, plan.axes, plan.extrapolation);
  return {out};
}

}  // namespace

ResizePlan plan_resize(const Node& node, const Shape& x, const std::vector<Tensor>& in) {
  const ResizeAttrs a = parse_attrs(node);
  const Geometry g = compute_geometry(a, x, in);
  ResizePlan p;
  p.out = g.out;
  p.nearest = a.mode == Mode::Nearest;
  p.extrapolation = a.extrapolation;
  // The output size is checked (overflow, absurd sizes) before the per-coordinate tables are built.
  const int64_t numel = shape_numel(g.out);
  if (numel > (int64_t(1) << 40)) user_error("the output of shape ", shape_str(g.out), " is too large to allocate");
  if (numel == 0) return p;
  for (size_t d = 0; d < x.size(); ++d)
    p.axes.push_back(plan_axis(a, x[d], g.out[d], g.scale[d], g.length_resized[d], g.roi_start[d], g.roi_end[d]));
  return p;
}

void register_resize_ops(OpRegistry& r) { r.add({"Resize", resize, {1, 2, 3}}); }

}  // namespace kiln
