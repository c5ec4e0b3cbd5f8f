// Helpers shared by the nn_*.cc kernels: dtype checks, float16 widening, and the sliding-window
// geometry of Conv and the pools (see nn_internal.h).
#include <algorithm>

#include "reference/ops/nn_internal.h"

namespace kiln::nn {

bool is_half_like(DType dt) { return dt == DType::Float16 || dt == DType::BFloat16; }

Tensor widen_to_float(const Tensor& t) { return t.defined() && is_half_like(t.dtype()) ? t.cast(DType::Float32) : t; }

void expect_dtype_in(const Tensor& t, std::initializer_list<DType> allowed, const char* what) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end()) return;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : ", ") + std::string(dtype_name(d));
  user_error(what, " has unsupported type ", dtype_name(t.dtype()), " (expected one of ", names, ")");
}

Shape spatial_dims(const Tensor& x, int64_t min_rank, const char* what) {
  if (x.rank() < min_rank)
    user_error(what, " must have rank >= ", min_rank, " (N x C x spatial...), got shape ", shape_str(x.shape()));
  return Shape(x.shape().begin() + 2, x.shape().end());
}

std::vector<int64_t> per_dim_attr(const Node& node, const char* name, size_t count, int64_t dflt, int64_t min) {
  std::vector<int64_t> v = node.attr_ints(name);
  // Some exporters write an empty list for "use the default".
  if (v.empty()) v.assign(count, dflt);
  if (v.size() != count) user_error(name, " has ", v.size(), " values, expected ", count);
  for (int64_t x : v)
    if (x < min) user_error(name, " must be >= ", min, ", got ", x);
  return v;
}

WindowGeometry window_geometry(const Node& node, const Shape& in, const Shape& kernel, bool ceil_mode) {
  const size_t nd = in.size();
  KILN_CHECK(kernel.size() == nd, "kernel rank");
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  for (int64_t k : kernel)
    if (k < 1) user_error("kernel dims must be >= 1, got ", shape_str(kernel));
  g.stride = per_dim_attr(node, "strides", nd, 1, 1);
  g.dilation = per_dim_attr(node, "dilations", nd, 1, 1);
  g.pad_begin.assign(nd, 0);
  g.pad_end.assign(nd, 0);
  g.out.assign(nd, 0);

  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    std::vector<int64_t> pads = per_dim_attr(node, "pads", 2 * nd, 0, 0);
    for (size_t d = 0; d < nd; ++d) {
      g.pad_begin[d] = pads[d];
      g.pad_end[d] = pads[nd + d];
      int64_t room = in[d] + g.pad_begin[d] + g.pad_end[d] - g.span(d);
      if (room < 0)
        user_error("padded input ", shape_str(in), " is smaller than the dilated kernel ", shape_str(kernel));
      g.out[d] = (ceil_mode ? (room + g.stride[d] - 1) / g.stride[d] : room / g.stride[d]) + 1;
      // A window that starts past the input and the begin padding would cover only end padding.
      if (ceil_mode && (g.out[d] - 1) * g.stride[d] >= in[d] + g.pad_begin[d]) --g.out[d];
    }
  } else if (auto_pad == "VALID") {
    for (size_t d = 0; d < nd; ++d) {
      if (in[d] < g.span(d))
        user_error("input ", shape_str(in), " is smaller than the dilated kernel ", shape_str(kernel));
      g.out[d] = (in[d] - g.span(d)) / g.stride[d] + 1;
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // Output size ceil(in / stride); the padding it needs is split evenly, the odd element going
    // to the end (SAME_UPPER) or the beginning (SAME_LOWER).
    for (size_t d = 0; d < nd; ++d) {
      g.out[d] = (in[d] + g.stride[d] - 1) / g.stride[d];
      int64_t total = std::max<int64_t>(0, (g.out[d] - 1) * g.stride[d] + g.span(d) - in[d]);
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
    }
  } else {
    user_error("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", auto_pad, "'");
  }
  return g;
}

}  // namespace kiln::nn
