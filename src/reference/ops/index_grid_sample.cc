// GridSample (opset 16): X [N, C, H, W] sampled at the normalised (x, y) points of grid
// [N, Ho, Wo, 2] into Y [N, C, Ho, Wo], as PyTorch's grid_sample (which the spec follows):
//   - a grid coordinate g in [-1, 1] maps to the pixel coordinate ((g + 1) / 2) · (size − 1) with
//     align_corners, else ((g + 1) · size − 1) / 2 (pixel centres at −1 and 1 of the size's ends);
//   - mode bilinear: the four neighbours floor(x), floor(x) + 1 (and y) weighted by the distances,
//     summed in the order (x0, y0), (x1, y0), (x0, y1), (x1, y1); nearest: the neighbour at
//     round-half-to-even; bicubic: 4 x 4 neighbours, cubic convolution (A = −0.75) along x per row,
//     then along y;
//   - padding_mode zeros: a neighbour outside the input contributes nothing; border: the
//     coordinate is clamped to [0, size − 1]; reflection: reflected at the borders (at 0 and
//     size − 1 with align_corners, else at −0.5 and size − 0.5), then clamped. For bilinear and
//     nearest the padding applies to the coordinate before the neighbours are taken; for bicubic
//     to each neighbour's integer coordinate (as PyTorch does).
// Arithmetic in float32, in the order written above: transforms/decompose_grid_sample.cc spells
// bilinear and nearest with the same operations, so the compiled form differs only by what the
// code generator may contract (FMA).
#include <cmath>
#include <string>

#include "reference/ops/index_internal.h"
#include "support/error.h"

namespace kiln {
namespace {

enum class Mode { Bilinear, Nearest, Bicubic };
enum class Padding { Zeros, Border, Reflection };

// The pixel coordinate of grid coordinate g along an axis of `size` pixels.
float unnormalize(float g, int64_t size, bool align) {
  const float s = float(size);
  return align ? (g + 1.0f) * 0.5f * (s - 1.0f) : ((g + 1.0f) * s - 1.0f) * 0.5f;
}

// in reflected into [twice_low / 2, twice_high / 2] (PyTorch's reflect_coordinates).
float reflect(float in, float twice_low, float twice_high) {
  if (twice_low == twice_high) return 0.0f;
  const float lo = twice_low * 0.5f, span = (twice_high - twice_low) * 0.5f;
  const float a = std::fabs(in - lo);
  const float extra = std::fmod(a, span);
  const float flips = std::floor(a / span);
  return std::fmod(flips, 2.0f) == 0.0f ? extra + lo : span - extra + lo;
}

// The padding mode applied to a coordinate (border and reflection; zeros leaves it).
float pad_coordinate(float x, int64_t size, Padding p, bool align) {
  const float hi = float(size - 1);
  if (p == Padding::Border) return std::fmin(std::fmax(x, 0.0f), hi);
  if (p == Padding::Reflection) {
    const float r = align ? reflect(x, 0.0f, 2.0f * hi) : reflect(x, -1.0f, 2.0f * float(size) - 1.0f);
    return std::fmin(std::fmax(r, 0.0f), hi);
  }
  return x;
}

// The cubic convolution weights of the four taps at distance t from the second (A = −0.75).
void cubic_weights(float t, float w[4]) {
  const float a = -0.75f;
  const float x0 = t + 1.0f, x1 = t, x2 = 1.0f - t, x3 = 2.0f - t;
  w[0] = ((a * x0 - 5.0f * a) * x0 + 8.0f * a) * x0 - 4.0f * a;
  w[1] = ((a + 2.0f) * x1 - (a + 3.0f)) * x1 * x1 + 1.0f;
  w[2] = ((a + 2.0f) * x2 - (a + 3.0f)) * x2 * x2 + 1.0f;
  w[3] = ((a * x3 - 5.0f * a) * x3 + 8.0f * a) * x3 - 4.0f * a;
}

std::vector<Tensor> grid_sample(const Node& node, const std::vector<Tensor>& in) {
  const Tensor& x = in.at(0);
  const Tensor& grid = in.at(1);
  if (x.dtype() != DType::Float32 || grid.dtype() != DType::Float32)
    user_error("GridSample: X and grid must be float32, got ", dtype_name(x.dtype()), " and ", dtype_name(grid.dtype()));
  if (x.rank() != 4 || grid.rank() != 4 || grid.dim(3) != 2 || grid.dim(0) != x.dim(0))
    user_error("GridSample: X must be [N, C, H, W] and grid [N, Ho, Wo, 2], got ", shape_str(x.shape()), " and ",
               shape_str(grid.shape()));
  const std::string mode = node.attr_string("mode", "bilinear");
  const std::string padding = node.attr_string("padding_mode", "zeros");
  const bool align = node.attr_int("align_corners", 0) != 0;
  Mode m;
  if (mode == "bilinear") m = Mode::Bilinear;
  else if (mode == "nearest") m = Mode::Nearest;
  else if (mode == "bicubic") m = Mode::Bicubic;
  else user_error("GridSample: unsupported mode '", mode, "' (expected bilinear, nearest or bicubic)");
  Padding p;
  if (padding == "zeros") p = Padding::Zeros;
  else if (padding == "border") p = Padding::Border;
  else if (padding == "reflection") p = Padding::Reflection;
  else user_error("GridSample: unsupported padding_mode '", padding, "' (expected zeros, border or reflection)");

  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), ho = grid.dim(1), wo = grid.dim(2);
  Tensor y(DType::Float32, {n, c, ho, wo});
  const float* xd = x.data<float>();
  const float* gd = grid.data<float>();
  float* yd = y.data<float>();
  // Pixel (yy, xx) of plane `plane`, or 0 outside the input.
  auto at = [&](const float* plane, int64_t yy, int64_t xx) {
    return yy >= 0 && yy < h && xx >= 0 && xx < w ? plane[yy * w + xx] : 0.0f;
  };
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < ho * wo; ++i) {
      const float gx = gd[(b * ho * wo + i) * 2], gy = gd[(b * ho * wo + i) * 2 + 1];
      float ix = unnormalize(gx, w, align), iy = unnormalize(gy, h, align);
      if (m != Mode::Bicubic) {
        ix = pad_coordinate(ix, w, p, align);
        iy = pad_coordinate(iy, h, p, align);
      }
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* plane = xd + (b * c + ch) * h * w;
        float v = 0.0f;
        if (m == Mode::Nearest) {
          v = at(plane, int64_t(std::nearbyint(iy)), int64_t(std::nearbyint(ix)));
        } else if (m == Mode::Bilinear) {
          const float x0 = std::floor(ix), y0 = std::floor(iy), x1 = x0 + 1.0f, y1 = y0 + 1.0f;
          const int64_t xi = int64_t(x0), yi = int64_t(y0);
          v = at(plane, yi, xi) * ((x1 - ix) * (y1 - iy));
          v += at(plane, yi, xi + 1) * ((ix - x0) * (y1 - iy));
          v += at(plane, yi + 1, xi) * ((x1 - ix) * (iy - y0));
          v += at(plane, yi + 1, xi + 1) * ((ix - x0) * (iy - y0));
        } else {
          const float x0 = std::floor(ix), y0 = std::floor(iy);
          float wx[4], wy[4];
          cubic_weights(ix - x0, wx);
          cubic_weights(iy - y0, wy);
          for (int r = 0; r < 4; ++r) {
            const int64_t yy = int64_t(pad_coordinate(y0 - 1.0f + float(r), h, p, align));
            float row = 0.0f;
            for (int k = 0; k < 4; ++k) {
              const int64_t xx = int64_t(pad_coordinate(x0 - 1.0f + float(k), w, p, align));
              row += at(plane, yy, xx) * wx[k];
            }
            v += row * wy[r];
          }
        }
        yd[(b * c + ch) * ho * wo + i] = v;
      }
    }
  return {y};
}

}  // namespace

void register_grid_sample_ops(OpRegistry& r) { r.add({"GridSample", grid_sample, {}}); }

}  // namespace kiln
