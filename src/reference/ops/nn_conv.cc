// Conv and ConvTranspose reference kernels (1-D, 2-D, 3-D and beyond; groups, dilations, strides,
// pads, auto_pad, optional bias).
//
// Conv is im2col + matrix product, per image and group:
//   cols[(c, k1..kn), (o1..on)] = x[c, o1*s1 + k1*d1 - p1, ...]   (0 where that lands in padding)
//   y[g*Mg + m, :] = W_g[m, :] x cols                              (matmul_strided, k ascending)
// A 1x1 kernel with unit stride and no padding uses the input itself as cols.
//
// ConvTranspose is the adjoint: cols = W_g^T x x_g, then col2im scatters each column entry into the
// output position i*s + k*d - pad_begin it contributes to (positions outside the output are
// dropped, which is also how explicit output_shape smaller than the full result crops it).
#include <algorithm>

#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"

namespace kiln::nn {

namespace {

const std::initializer_list<DType> kConvTypes = {DType::Float32, DType::Float64, DType::Float16};

// Advances a row-major multi-index `idx` within `dims` over its first `count` dims.
void advance(int64_t* idx, const Shape& dims, size_t count) {
  for (size_t d = count; d-- > 0;) {
    if (++idx[d] < dims[d]) return;
    idx[d] = 0;
  }
}

template <class T>
void im2col(const T* x, const WindowGeometry& g, int64_t channels, T* cols) {
  const size_t nd = size_t(g.rank()), last = nd - 1;
  const int64_t in_size = shape_numel(g.in), out_size = shape_numel(g.out), kernel_size = shape_numel(g.kernel);
  const int64_t out_last = g.out[last], in_last = g.in[last];
  std::vector<int64_t> scratch(2 * nd);
  int64_t* kidx = scratch.data();
  int64_t* oidx = kidx + nd;
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * in_size;
    std::fill(kidx, kidx + nd, 0);
    for (int64_t kf = 0; kf < kernel_size; ++kf, advance(kidx, g.kernel, nd)) {
      T* dst = cols + (c * kernel_size + kf) * out_size;
      const int64_t k_off = kidx[last] * g.dilation[last] - g.pad_begin[last];
      std::fill(oidx, oidx + nd, 0);
      for (int64_t o = 0; o < out_size / out_last; ++o, advance(oidx, g.out, last)) {
        T* seg = dst + o * out_last;
        // Row of the input this output row reads (all dims but the last), or none in padding.
        bool inside = true;
        int64_t row = 0;
        for (size_t d = 0; d < last; ++d) {
          const int64_t i = oidx[d] * g.stride[d] + kidx[d] * g.dilation[d] - g.pad_begin[d];
          inside = inside && i >= 0 && i < g.in[d];
          row = row * g.in[d] + i;
        }
        if (!inside) {
          std::fill(seg, seg + out_last, T(0));
          continue;
        }
        const T* xrow = xc + row * in_last;
        for (int64_t ol = 0; ol < out_last; ++ol) {
          const int64_t i = ol * g.stride[last] + k_off;
          seg[ol] = i >= 0 && i < in_last ? xrow[i] : T(0);
        }
      }
    }
  }
}

// Shared checks of Conv/ConvTranspose operands; returns the kernel's spatial shape.
Shape check_conv_operands(const Node& node, const std::vector<Tensor>& in, const char* op) {
  expect_inputs(in, 2, 3);
  expect_dtype_in(in[0], kConvTypes, "X");
  expect_same_dtype(in[0], in[1], op);
  if (in.size() > 2 && in[2].defined()) expect_same_dtype(in[0], in[2], op);
  spatial_dims(in[0], 3, "X");
  if (in[1].rank() != in[0].rank())
    user_error("weight W ", shape_str(in[1].shape()), " must have the rank of X ", shape_str(in[0].shape()));
  Shape kernel(in[1].shape().begin() + 2, in[1].shape().end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != kernel)
    user_error("kernel_shape ", shape_str(node.attr_ints("kernel_shape")), " does not match W ",
               shape_str(in[1].shape()));
  if (node.attr_int("group", 1) < 1) user_error("group must be >= 1, got ", node.attr_int("group", 1));
  return kernel;
}

void check_bias(const std::vector<Tensor>& in, int64_t out_channels) {
  if (in.size() > 2 && in[2].defined() && in[2].shape() != Shape{out_channels})
    user_error("bias B ", shape_str(in[2].shape()), " must have shape [", out_channels, "]");
}

template <class T>
void add_bias(T* y, const T* bias, int64_t channels, int64_t plane) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t p = 0; p < plane; ++p) y[c * plane + p] += bias[c];
}

template <class T>
void conv_compute(const Tensor& x, const Tensor& w, const Tensor& b, const WindowGeometry& g, int64_t group,
                  Tensor& y) {
  const int64_t batch = x.dim(0), channels = x.dim(1), out_channels = w.dim(0);
  const int64_t cg = channels / group, mg = out_channels / group;
  const int64_t in_size = shape_numel(g.in), out_size = shape_numel(g.out);
  const int64_t rows = cg * shape_numel(g.kernel);
  bool pointwise = true;
  for (size_t d = 0; d < size_t(g.rank()); ++d)
    pointwise = pointwise && g.kernel[d] == 1 && g.stride[d] == 1 && g.pad_begin[d] == 0 && g.pad_end[d] == 0;
  std::vector<T> cols(pointwise ? 0 : size_t(rows * out_size));
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  T* yd = y.data<T>();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t gi = 0; gi < group; ++gi) {
      const T* xg = xd + (n * channels + gi * cg) * in_size;
      if (!pointwise) im2col(xg, g, cg, cols.data());
      T* yg = yd + (n * out_channels + gi * mg) * out_size;
      matmul_strided<T>(wd + gi * mg * rows, rows, 1, pointwise ? xg : cols.data(), out_size, 1, yg, mg, rows,
                        out_size);
      if (b.defined()) add_bias(yg, b.data<T>() + gi * mg, mg, out_size);
    }
}

std::vector<Tensor> conv_kernel(const Node& node, const std::vector<Tensor>& in) {
  const Shape kernel = check_conv_operands(node, in, "Conv");
  const int64_t group = node.attr_int("group", 1);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const int64_t channels = x.dim(1), out_channels = w.dim(0);
  if (w.dim(1) * group != channels)
    user_error("X has ", channels, " channels but W ", shape_str(w.shape()), " with group ", group, " expects ",
               w.dim(1) * group);
  if (out_channels % group != 0) user_error("W has ", out_channels, " output channels, not divisible by group ", group);
  check_bias(in, out_channels);
  const WindowGeometry g = window_geometry(node, spatial_dims(x, 3, "X"), kernel, false);

  Shape out_shape{x.dim(0), out_channels};
  out_shape.insert(out_shape.end(), g.out.begin(), g.out.end());
  const Tensor xf = widen_to_float(x), wf = widen_to_float(w);
  const Tensor bf = in.size() > 2 ? widen_to_float(in[2]) : Tensor{};
  Tensor y(xf.dtype(), out_shape);
  if (y.dtype() == DType::Float64)
    conv_compute<double>(xf, wf, bf, g, group, y);
  else
    conv_compute<float>(xf, wf, bf, g, group, y);
  return {y.dtype() == x.dtype() ? y : y.cast(x.dtype())};
}

// Python-style floor division: ConvTranspose padding totals can be negative (output_shape larger
// than the full result pads it with zeros).
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// ConvTranspose geometry (ONNX spec): the full result along dim d has
// stride*(in-1) + output_padding + span elements; pads remove elements from its ends. With
// output_shape or SAME_* auto_pad the pads are derived from the requested size, the odd element
// going to the end for SAME_UPPER and to the beginning otherwise (as the spec's formula states).
WindowGeometry conv_transpose_geometry(const Node& node, const Shape& in, const Shape& kernel) {
  const size_t nd = in.size();
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  g.stride = per_dim_attr(node, "strides", nd, 1, 1);
  g.dilation = per_dim_attr(node, "dilations", nd, 1, 1);
  const std::vector<int64_t> out_pad = per_dim_attr(node, "output_padding", nd, 0, 0);
  g.pad_begin.assign(nd, 0);
  g.pad_end.assign(nd, 0);
  g.out.assign(nd, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    user_error("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", auto_pad, "'");
  std::vector<int64_t> out_shape = node.attr_ints("output_shape");
  if (out_shape.size() == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);  // full N,C,... form
  if (!out_shape.empty() && out_shape.size() != nd)
    user_error("output_shape has ", out_shape.size(), " values, expected ", nd);
  const std::vector<int64_t> pads =
      out_shape.empty() && auto_pad == "NOTSET" ? per_dim_attr(node, "pads", 2 * nd, 0, 0) : std::vector<int64_t>{};

  for (size_t d = 0; d < nd; ++d) {
    const int64_t full = g.stride[d] * (in[d] - 1) + out_pad[d] + g.span(d);
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.out[d] = out_shape.empty() ? in[d] * g.stride[d] : out_shape[d];
      const int64_t total = full - g.out[d];
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      g.pad_end[d] = total - g.pad_begin[d];
    } else if (auto_pad == "VALID") {
      g.out[d] = full;
    } else {
      g.pad_begin[d] = pads[d];
      g.pad_end[d] = pads[nd + d];
      g.out[d] = full - g.pad_begin[d] - g.pad_end[d];
    }
    if (g.out[d] < 1) user_error("ConvTranspose output would be empty along spatial dim ", d);
  }
  return g;
}

// Adds cols[(m, k1..kn), (i1..in)] into y[m, i1*s1 + k1*d1 - p1, ...] where that is inside y.
template <class T>
void col2im(const T* cols, const WindowGeometry& g, int64_t channels, T* y) {
  const size_t nd = size_t(g.rank());
  const int64_t in_size = shape_numel(g.in), out_size = shape_numel(g.out), kernel_size = shape_numel(g.kernel);
  std::vector<int64_t> scratch(2 * nd);
  int64_t* kidx = scratch.data();
  int64_t* iidx = kidx + nd;
  for (int64_t c = 0; c < channels; ++c) {
    T* yc = y + c * out_size;
    std::fill(kidx, kidx + nd, 0);
    for (int64_t kf = 0; kf < kernel_size; ++kf, advance(kidx, g.kernel, nd)) {
      const T* src = cols + (c * kernel_size + kf) * in_size;
      std::fill(iidx, iidx + nd, 0);
      for (int64_t i = 0; i < in_size; ++i, advance(iidx, g.in, nd)) {
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d < nd; ++d) {
          const int64_t o = iidx[d] * g.stride[d] + kidx[d] * g.dilation[d] - g.pad_begin[d];
          inside = inside && o >= 0 && o < g.out[d];
          off = off * g.out[d] + o;
        }
        if (inside) yc[off] += src[i];
      }
    }
  }
}

template <class T>
void conv_transpose_compute(const Tensor& x, const Tensor& w, const Tensor& b, const WindowGeometry& g, int64_t group,
                            Tensor& y) {
  const int64_t batch = x.dim(0), channels = x.dim(1), mg = w.dim(1), out_channels = mg * group;
  const int64_t cg = channels / group;
  const int64_t in_size = shape_numel(g.in), out_size = shape_numel(g.out);
  const int64_t rows = mg * shape_numel(g.kernel);  // one W_g^T row per (output channel, kernel offset)
  std::vector<T> cols(size_t(rows * in_size));
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  T* yd = y.data<T>();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t gi = 0; gi < group; ++gi) {
      // W_g is stored [cg, rows]; its transpose is read with row stride 1 and column stride rows.
      matmul_strided<T>(wd + gi * cg * rows, 1, rows, xd + (n * channels + gi * cg) * in_size, in_size, 1, cols.data(),
                        rows, cg, in_size);
      T* yg = yd + (n * out_channels + gi * mg) * out_size;
      col2im(cols.data(), g, mg, yg);
      if (b.defined()) add_bias(yg, b.data<T>() + gi * mg, mg, out_size);
    }
}

std::vector<Tensor> conv_transpose_kernel(const Node& node, const std::vector<Tensor>& in) {
  const Shape kernel = check_conv_operands(node, in, "ConvTranspose");
  const int64_t group = node.attr_int("group", 1);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  if (w.dim(0) != x.dim(1))
    user_error("X has ", x.dim(1), " channels but W ", shape_str(w.shape()), " expects ", w.dim(0));
  if (x.dim(1) % group != 0) user_error("X has ", x.dim(1), " channels, not divisible by group ", group);
  const int64_t out_channels = w.dim(1) * group;
  check_bias(in, out_channels);
  const WindowGeometry g = conv_transpose_geometry(node, spatial_dims(x, 3, "X"), kernel);

  Shape out_shape{x.dim(0), out_channels};
  out_shape.insert(out_shape.end(), g.out.begin(), g.out.end());
  const Tensor xf = widen_to_float(x), wf = widen_to_float(w);
  const Tensor bf = in.size() > 2 ? widen_to_float(in[2]) : Tensor{};
  Tensor y(xf.dtype(), out_shape);
  if (y.dtype() == DType::Float64)
    conv_transpose_compute<double>(xf, wf, bf, g, group, y);
  else
    conv_transpose_compute<float>(xf, wf, bf, g, group, y);
  return {y.dtype() == x.dtype() ? y : y.cast(x.dtype())};
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  r.add({"Conv", conv_kernel, {}});
  r.add({"ConvTranspose", conv_transpose_kernel, {}});
}

}  // namespace kiln::nn
