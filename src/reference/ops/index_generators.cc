// Ops that generate tensors from a shape or a pattern: OneHot (11), Trilu (14), EyeLike (9),
// Range (11), ConstantOfShape (9).
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/kernel_util.h"
#include "reference/ops/index_internal.h"

namespace kiln {
namespace {

using index_detail::copy_elems;

// The number 1 in dtype dt, as one element's bytes.
std::vector<uint8_t> one_of(DType dt) {
  std::vector<uint8_t> bytes(dtype_size(dt));
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    T v = static_cast<T>(1.0f);
    std::memcpy(bytes.data(), &v, sizeof(T));
  });
  return bytes;
}

// Reads a one-element input as double (the scalar inputs of OneHot and Range may also be given as
// shape [1]).
double scalar_input(const Tensor& t, const char* what) {
  if (t.numel() != 1) user_error(what, " must have exactly one element, got shape ", shape_str(t.shape()));
  return t.as_double(0);
}

// output = indices.shape with `depth` inserted at `axis`, filled with values[0] (off) except
// output[..., indices[p], ...] = values[1] (on). Indices outside [-depth, depth) leave their row all
// off, as the spec says, so they are not an error here.
std::vector<Tensor> one_hot(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 3);
  const Tensor& indices = in[0];
  const Tensor& values = in[2];
  if (indices.dtype() == DType::Bool) user_error("indices must be numeric, got bool");
  const double depth_f = scalar_input(in[1], "depth");
  // Non-integer depth is cast to int64 (spec); reject what cannot be a dimension.
  if (!(depth_f >= 1) || depth_f > double(std::numeric_limits<int32_t>::max()))
    user_error("depth must be a positive number, got ", depth_f);
  const int64_t depth = int64_t(depth_f);
  if (values.numel() != 2) user_error("values must hold [off_value, on_value], got shape ", shape_str(values.shape()));
  const int64_t axis = normalize_axis(node.attr_int("axis", -1), indices.rank() + 1);

  Shape out_shape = indices.shape();
  out_shape.insert(out_shape.begin() + axis, depth);
  Tensor out(values.dtype(), out_shape);
  const size_t es = dtype_size(values.dtype());
  const auto* vals = static_cast<const uint8_t*>(values.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(dst + size_t(i) * es, vals, es);

  // Indices viewed as [outer, inner] around the inserted axis: output is [outer, depth, inner].
  const int64_t inner = dims_product(indices.shape(), axis, indices.rank());
  const bool is_int = is_integer(indices.dtype());
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t v;
    if (indices.dtype() == DType::UInt64) {
      const uint64_t u = indices.data<uint64_t>()[i];
      if (u >= uint64_t(depth)) continue;
      v = int64_t(u);
    } else if (is_int) {
      v = indices.as_int64(i);
    } else {
      double f = std::trunc(indices.as_double(i));  // float indices are cast to int (truncation)
      if (!(f >= -depth_f && f < depth_f)) continue;
      v = int64_t(f);
    }
    if (v < -depth || v >= depth) continue;
    if (v < 0) v += depth;
    const int64_t o = inner ? i / inner : 0, p = inner ? i % inner : 0;
    std::memcpy(dst + size_t((o * depth + v) * inner + p) * es, vals + es, es);
  }
  return {out};
}

// Keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims, zeroing the rest.
std::vector<Tensor> trilu(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 2);
  const Tensor& x = in[0];
  if (x.rank() < 2) user_error("input must have rank >= 2, got ", shape_str(x.shape()));
  int64_t k = 0;
  if (in.size() > 1 && in[1].defined()) {
    if (!is_integer(in[1].dtype())) user_error("k must be an integer scalar, got ", dtype_name(in[1].dtype()));
    if (in[1].numel() != 1) user_error("k must be a scalar, got shape ", shape_str(in[1].shape()));
    k = in[1].as_int64(0);
  }
  const bool upper = node.attr_int("upper", 1) != 0;
  const int64_t rows = x.dim(x.rank() - 2), cols = x.dim(x.rank() - 1);
  const int64_t mats = dims_product(x.shape(), 0, x.rank() - 2);

  Tensor out(x.dtype(), x.shape());  // zero-filled: dropped elements stay 0
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  // k may be any int64; clamping it to [-rows, cols] changes no result and keeps i + k from overflowing.
  const int64_t kc = std::clamp<int64_t>(k, -rows, cols);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      // The kept columns of row i form one run: [i+k, cols) for upper, [0, i+k] for lower.
      const int64_t lo = upper ? std::clamp<int64_t>(i + kc, 0, cols) : 0;
      const int64_t hi = upper ? cols : std::clamp<int64_t>(i + kc + 1, 0, cols);
      const int64_t row = (m * rows + i) * cols;
      copy_elems(dst + size_t(row + lo) * es, src + size_t(row + lo) * es, hi - lo, es);
    }
  return {out};
}

// A 2-D tensor shaped like the input with ones on diagonal k (output[i, i+k] = 1).
std::vector<Tensor> eye_like(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  if (x.rank() != 2) user_error("input must have rank 2, got ", shape_str(x.shape()));
  DType dt = x.dtype();
  if (node.has_attr("dtype")) {
    int64_t code = node.attr_int("dtype", 0);
    auto d = dtype_from_onnx(code);
    if (!d) user_error("unsupported dtype code ", code);
    dt = *d;
  }
  const int64_t k = node.attr_int("k", 0);
  Tensor out(dt, x.shape());
  const auto one = one_of(dt);
  auto* dst = static_cast<uint8_t*>(out.raw());
  const int64_t rows = x.dim(0), cols = x.dim(1);
  // Rows whose column i + k is inside [0, cols); the guard keeps i + k from overflowing for huge |k|.
  if (k < cols && k > -rows)
    for (int64_t i = std::max<int64_t>(0, -k); i < std::min(rows, cols - k); ++i)
      std::memcpy(dst + size_t(i * cols + i + k) * one.size(), one.data(), one.size());
  return {out};
}

// [start, start + delta, ...) up to limit (exclusive): n = max(ceil((limit - start) / delta), 0).
std::vector<Tensor> range(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 3);
  const DType dt = in[0].dtype();
  expect_same_dtype(in[0], in[1], "start and limit");
  expect_same_dtype(in[0], in[2], "start and delta");
  if (dt == DType::Bool) user_error("Range does not support bool");
  for (int i = 0; i < 3; ++i)
    if (in[size_t(i)].numel() != 1)
      user_error(i == 0 ? "start" : i == 1 ? "limit" : "delta", " must be a scalar, got shape ",
                 shape_str(in[size_t(i)].shape()));
  // A bound on the element count so a huge n is a clear error, not an allocation failure.
  constexpr int64_t kMaxElems = int64_t(1) << 36;
  int64_t n;
  if (is_integer(dt)) {
    // Exact integer arithmetic; 128 bits so limit - start cannot overflow for 64-bit types.
    __int128 s, l, d;
    if (dt == DType::UInt64) {
      s = in[0].data<uint64_t>()[0], l = in[1].data<uint64_t>()[0], d = in[2].data<uint64_t>()[0];
    } else {
      s = in[0].as_int64(0), l = in[1].as_int64(0), d = in[2].as_int64(0);
    }
    if (d == 0) user_error("delta must not be zero");
    __int128 diff = l - s;
    __int128 cnt = (diff == 0 || (diff > 0) != (d > 0)) ? 0 : (diff > 0 ? (diff + d - 1) / d : (diff + d + 1) / d);
    if (cnt > kMaxElems) user_error("Range would produce too many elements");
    n = int64_t(cnt);
    Tensor out(dt, {n});
    dispatch_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) o[i] = T(s + __int128(i) * d);
      }
    });
    return {out};
  }
  const double s = in[0].as_double(0), l = in[1].as_double(0), d = in[2].as_double(0);
  if (d == 0) user_error("delta must not be zero");
  const double cnt = std::ceil((l - s) / d);
  if (!(cnt == cnt) || std::isinf(s) || std::isinf(d)) user_error("Range bounds must be finite");
  if (cnt > double(kMaxElems)) user_error("Range would produce too many elements");
  n = cnt > 0 ? int64_t(cnt) : 0;
  Tensor out(dt, {n});
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_integral_v<T>) {
      // start + i * delta in double, rounded once to T (not accumulated, so no drift).
      T* o = out.data<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(s + double(i) * d);
    }
  });
  return {out};
}

// A tensor of shape input[0] filled with the single element of the `value` attribute (float32 0 when
// absent); the output dtype is value's dtype.
std::vector<Tensor> constant_of_shape(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& shape_t = in[0];
  if (shape_t.dtype() != DType::Int64) user_error("shape must be int64, got ", dtype_name(shape_t.dtype()));
  if (shape_t.rank() != 1) user_error("shape must be a 1-D tensor, got shape ", shape_str(shape_t.shape()));
  Shape shape = shape_t.to_int64_vector();
  for (int64_t d : shape)
    if (d < 0) user_error("shape ", shape_str(shape), " has a negative dimension");
  const Tensor* value = node.attr_tensor("value");
  Tensor v = value ? *value : Tensor::scalar<float>(0.0f);
  if (v.numel() != 1) user_error("value must have exactly one element, got shape ", shape_str(v.shape()));
  Tensor out(v.dtype(), shape);
  const size_t es = dtype_size(v.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(dst + size_t(i) * es, v.raw(), es);
  return {out};
}

}  // namespace

void register_generator_ops(OpRegistry& r) {
  r.add({"OneHot", one_hot, {1}});
  r.add({"Trilu", trilu, {}});
  r.add({"EyeLike", eye_like, {}});
  r.add({"Range", range, {0, 1, 2}});
  r.add({"ConstantOfShape", constant_of_shape, {0}});
}

}  // namespace kiln
