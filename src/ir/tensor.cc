#include "ir/tensor.h"
#include "ir/tensor_size_limit.h"

#include <cstring>
#include <algorithm>
#include <limits>

namespace kiln {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) user_error("negative dimension in shape ", shape_str(s));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) user_error("shape ", shape_str(s), " is too large");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ",";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::vector<int64_t> shape_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = int64_t(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i + 1)] * s[size_t(i + 1)];
  return st;
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

namespace {
thread_local uint64_t t_size_limit = std::numeric_limits<uint64_t>::max();
}

TensorSizeLimit::TensorSizeLimit(uint64_t max_bytes) : saved_(t_size_limit) {
  t_size_limit = std::min(t_size_limit, max_bytes);
}
TensorSizeLimit::~TensorSizeLimit() { t_size_limit = saved_; }
uint64_t TensorSizeLimit::current() { return t_size_limit; }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  KILN_CHECK(dtype != DType::Undefined, "tensor with undefined dtype");
  numel_ = shape_numel(shape_);
  size_t es = dtype_size(dtype);
  if (numel_ > 0 && uint64_t(numel_) > (uint64_t(1) << 40) / es)
    user_error("tensor of shape ", shape_str(shape_), " (", dtype_name(dtype), ") is too large to allocate");
  if (uint64_t(numel_) * es > t_size_limit)
    user_error("a tensor of shape ", shape_str(shape_), " (", dtype_name(dtype), ", ", uint64_t(numel_) * es,
               " bytes) would be needed, more than the ", t_size_limit, " bytes allowed while typing the model");
  storage_ = std::make_shared<std::vector<uint8_t>>(size_t(numel_) * es);
}

Tensor Tensor::reshaped(Shape shape) const {
  Tensor t = *this;
  t.numel_ = shape_numel(shape);
  KILN_CHECK(t.numel_ == numel_, "reshape ", shape_str(shape_), " to ", shape_str(shape));
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

double Tensor::as_double(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_, "index out of range");
  return dispatch_dtype(dtype_, [&](auto tag) -> double {
    using T = decltype(tag);
    return double(static_cast<const T*>(raw())[i]);
  });
}

int64_t Tensor::as_int64(int64_t i) const {
  KILN_CHECK(i >= 0 && i < numel_, "index out of range");
  return dispatch_dtype(dtype_, [&](auto tag) -> int64_t {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return int64_t(float(static_cast<const T*>(raw())[i]));
    else
      return int64_t(static_cast<const T*>(raw())[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[size_t(i)] = as_int64(i);
  return v;
}

namespace {
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>)
      return float(v) != 0.0f;
    else
      return v != From(0);
  } else if constexpr ((std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) && std::is_integral_v<To>) {
    return convert<To, float>(float(v));
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return To(float(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(float(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    // Out-of-range float→int is undefined in C++; saturate NaN to 0 so the interpreter stays defined.
    if (!(v == v)) return To(0);
    if (v >= double(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    if (v <= double(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    return To(v);
  } else {
    return To(v);
  }
}
}  // namespace

Tensor Tensor::cast(DType to) const {
  Tensor out(to, shape_);
  dispatch_dtype(dtype_, [&](auto ftag) {
    using From = decltype(ftag);
    const From* src = static_cast<const From*>(raw());
    dispatch_dtype(to, [&](auto ttag) {
      using To = decltype(ttag);
      To* dst = static_cast<To*>(out.raw());
      for (int64_t i = 0; i < numel_; ++i) dst[i] = convert<To, From>(src[i]);
    });
  });
  return out;
}

bool Tensor::bitwise_equal(const Tensor& o) const {
  if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
  return nbytes() == 0 || std::memcmp(raw(), o.raw(), nbytes()) == 0;
}

}  // namespace kiln
