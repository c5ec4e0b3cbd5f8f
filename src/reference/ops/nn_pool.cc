// Pooling reference kernels: MaxPool (with the optional Indices output), AveragePool,
// GlobalAveragePool and GlobalMaxPool, for any number of spatial dims.
//
// Each output element looks at the input positions of its window that lie inside the input;
// padding never supplies a value. For a window starting at `start` with dilation `dil`, the kernel
// offsets k whose position start + k*dil falls in [lo, hi) form one contiguous range, so the walk
// over a window is an odometer over per-dim ranges with no bounds test inside it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"

namespace kiln::nn {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return a / b + ((a % b != 0) && ((a < 0) == (b < 0))); }

// The window of one output element: start position and kernel-offset range [k_lo, k_hi) per dim.
struct Window {
  std::vector<int64_t> start, k_lo, k_hi;
  // The averaging divisor (see window_at).
  int64_t count = 0;
};

// Kernel offsets k in [0, K) with lo <= start + k*dil < hi.
std::pair<int64_t, int64_t> offset_range(int64_t start, int64_t dil, int64_t kernel, int64_t lo, int64_t hi) {
  return {std::max<int64_t>(0, ceil_div(lo - start, dil)), std::min<int64_t>(kernel, ceil_div(hi - start, dil))};
}

// Fills `w` for the output element at multi-index `oidx`. `count` is the number of window positions
// inside the input (padded = false) or inside the padded input (padded = true; AveragePool's
// count_include_pad, where a ceil_mode window hanging past the end padding is still clipped).
void window_at(const WindowGeometry& g, const std::vector<int64_t>& oidx, bool padded, Window& w) {
  const size_t nd = size_t(g.rank());
  w.start.resize(nd);
  w.k_lo.resize(nd);
  w.k_hi.resize(nd);
  w.count = 1;
  for (size_t d = 0; d < nd; ++d) {
    w.start[d] = oidx[d] * g.stride[d] - g.pad_begin[d];
    std::tie(w.k_lo[d], w.k_hi[d]) = offset_range(w.start[d], g.dilation[d], g.kernel[d], 0, g.in[d]);
    auto [lo, hi] = padded
                        ? offset_range(w.start[d], g.dilation[d], g.kernel[d], -g.pad_begin[d], g.in[d] + g.pad_end[d])
                        : std::pair{w.k_lo[d], w.k_hi[d]};
    w.count *= std::max<int64_t>(0, hi - lo);
  }
}

// Calls f(flat row-major spatial offset) for every in-input position of window w.
template <class F>
void for_each_position(const WindowGeometry& g, const Window& w, std::vector<int64_t>& k, F&& f) {
  const size_t nd = size_t(g.rank());
  for (size_t d = 0; d < nd; ++d)
    if (w.k_lo[d] >= w.k_hi[d]) return;
  k.assign(w.k_lo.begin(), w.k_lo.end());
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < nd; ++d) flat = flat * g.in[d] + w.start[d] + k[d] * g.dilation[d];
    f(flat);
    size_t d = nd;
    while (d-- > 0) {
      if (++k[d] < w.k_hi[d]) break;
      k[d] = w.k_lo[d];
    }
    if (d == size_t(-1)) return;
  }
}

// Calls f(plane, oidx, out_flat) for every output element, plane = n * C + c.
template <class F>
void for_each_output(const WindowGeometry& g, int64_t planes, F&& f) {
  const int64_t out_size = shape_numel(g.out);
  std::vector<int64_t> oidx(size_t(g.rank()), 0);
  for (int64_t p = 0; p < planes; ++p) {
    std::fill(oidx.begin(), oidx.end(), 0);
    for (int64_t o = 0; o < out_size; ++o) {
      f(p, oidx, p * out_size + o);
      for (size_t d = oidx.size(); d-- > 0;) {
        if (++oidx[d] < g.out[d]) break;
        oidx[d] = 0;
      }
    }
  }
}

Shape pooled_shape(const Tensor& x, const WindowGeometry& g) {
  Shape s{x.dim(0), x.dim(1)};
  s.insert(s.end(), g.out.begin(), g.out.end());
  return s;
}

Shape kernel_shape_attr(const Node& node, size_t nd) {
  node.require_attr("kernel_shape");
  Shape k = node.attr_ints("kernel_shape");
  if (k.size() != nd) user_error("kernel_shape has ", k.size(), " values, input has ", nd, " spatial dims");
  return k;
}

// Row-major spatial offset -> column-major one (MaxPool storage_order = 1).
int64_t column_major(int64_t flat, const Shape& dims) {
  int64_t out = 0, scale = 1;
  std::vector<int64_t> idx(dims.size());
  for (size_t d = dims.size(); d-- > 0;) {
    idx[d] = flat % dims[d];
    flat /= dims[d];
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    out += idx[d] * scale;
    scale *= dims[d];
  }
  return out;
}

// Indices are flat offsets into the whole input tensor: (n * C + c) * spatial_size + the spatial
// offset, row-major or (storage_order = 1) column-major within the spatial dims.
template <class T>
void max_pool(const Tensor& x, const WindowGeometry& g, bool col_major, Tensor& y, Tensor* indices) {
  const T* xd = x.data<T>();
  T* yd = y.data<T>();
  int64_t* id = indices ? indices->data<int64_t>() : nullptr;
  const int64_t in_size = shape_numel(g.in);
  Window w;
  std::vector<int64_t> k;
  for_each_output(g, x.dim(0) * x.dim(1), [&](int64_t plane, const std::vector<int64_t>& oidx, int64_t o) {
    window_at(g, oidx, false, w);
    const T* xp = xd + plane * in_size;
    int64_t best = -1;
    // Strict > keeps the first maximum in window order, as ONNX Runtime and PyTorch do.
    for_each_position(g, w, k, [&](int64_t off) {
      if (best < 0 || xp[off] > xp[best]) best = off;
    });
    if (best < 0) {  // window entirely in padding: nothing to take the maximum of
      yd[o] =
          std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
      if (id) id[o] = -1;
      return;
    }
    yd[o] = xp[best];
    if (id) id[o] = plane * in_size + (col_major ? column_major(best, g.in) : best);
  });
}

std::vector<Tensor> max_pool_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16, DType::Int8, DType::UInt8}, "X");
  const Shape spatial = spatial_dims(x, 3, "X");
  const int64_t storage_order = node.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1) user_error("storage_order must be 0 or 1, got ", storage_order);
  const WindowGeometry g =
      window_geometry(node, spatial, kernel_shape_attr(node, spatial.size()), node.attr_int("ceil_mode", 0) != 0);
  const Tensor xf = widen_to_float(x);
  Tensor y(xf.dtype(), pooled_shape(x, g));
  const bool want_indices = node.num_outputs() > 1;
  Tensor indices = want_indices ? Tensor(DType::Int64, y.shape()) : Tensor{};
  Tensor* ip = want_indices ? &indices : nullptr;
  switch (xf.dtype()) {
    case DType::Float32:
      max_pool<float>(xf, g, storage_order == 1, y, ip);
      break;
    case DType::Float64:
      max_pool<double>(xf, g, storage_order == 1, y, ip);
      break;
    case DType::Int8:
      max_pool<int8_t>(xf, g, storage_order == 1, y, ip);
      break;
    default:
      max_pool<uint8_t>(xf, g, storage_order == 1, y, ip);
      break;
  }
  std::vector<Tensor> out{y.dtype() == x.dtype() ? y : y.cast(x.dtype())};
  if (want_indices) out.push_back(indices);
  return out;
}

template <class T>
void average_pool(const Tensor& x, const WindowGeometry& g, bool count_include_pad, Tensor& y) {
  const T* xd = x.data<T>();
  T* yd = y.data<T>();
  const int64_t in_size = shape_numel(g.in);
  Window w;
  std::vector<int64_t> k;
  for_each_output(g, x.dim(0) * x.dim(1), [&](int64_t plane, const std::vector<int64_t>& oidx, int64_t o) {
    window_at(g, oidx, count_include_pad, w);
    const T* xp = xd + plane * in_size;
    double sum = 0;
    for_each_position(g, w, k, [&](int64_t off) { sum += double(xp[off]); });
    yd[o] = T(sum / double(w.count));
  });
}

std::vector<Tensor> average_pool_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16}, "X");
  const Shape spatial = spatial_dims(x, 3, "X");
  const WindowGeometry g =
      window_geometry(node, spatial, kernel_shape_attr(node, spatial.size()), node.attr_int("ceil_mode", 0) != 0);
  const bool include_pad = node.attr_int("count_include_pad", 0) != 0;
  const Tensor xf = widen_to_float(x);
  Tensor y(xf.dtype(), pooled_shape(x, g));
  if (xf.dtype() == DType::Float64)
    average_pool<double>(xf, g, include_pad, y);
  else
    average_pool<float>(xf, g, include_pad, y);
  return {y.dtype() == x.dtype() ? y : y.cast(x.dtype())};
}

// GlobalAveragePool / GlobalMaxPool: one value per (n, c) plane, spatial dims kept as 1.
template <bool kMax>
std::vector<Tensor> global_pool_kernel(const Node&, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16}, "X");
  const Shape spatial = spatial_dims(x, 3, "X");
  const int64_t plane = shape_numel(spatial), planes = x.dim(0) * x.dim(1);
  if (plane == 0) user_error("X ", shape_str(x.shape()), " has an empty spatial extent");
  Shape out_shape(size_t(x.rank()), 1);
  out_shape[0] = x.dim(0);
  out_shape[1] = x.dim(1);
  const Tensor xf = widen_to_float(x);
  Tensor y(xf.dtype(), out_shape);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* xd = xf.data<T>();
    T* yd = y.data<T>();
    for (int64_t p = 0; p < planes; ++p) {
      const T* xp = xd + p * plane;
      if constexpr (kMax) {
        T best = xp[0];
        for (int64_t i = 1; i < plane; ++i) best = xp[i] > best ? xp[i] : best;
        yd[p] = best;
      } else {
        double sum = 0;
        for (int64_t i = 0; i < plane; ++i) sum += double(xp[i]);
        yd[p] = T(sum / double(plane));
      }
    }
  };
  if (xf.dtype() == DType::Float64)
    run(double{});
  else
    run(float{});
  return {y.dtype() == x.dtype() ? y : y.cast(x.dtype())};
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  r.add({"MaxPool", max_pool_kernel, {}});
  r.add({"AveragePool", average_pool_kernel, {}});
  r.add({"GlobalAveragePool", global_pool_kernel<false>, {}});
  r.add({"GlobalMaxPool", global_pool_kernel<true>, {}});
}

}  // namespace kiln::nn
