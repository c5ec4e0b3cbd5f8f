// Private helpers shared by the reduction-family reference kernels (reduction_*.cc): accumulator
// types, dtype families with their checks, and the outer/axis/inner view of a tensor.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "ir/dtype.h"
#include "ir/tensor.h"
#include "reference/op_registry.h"

namespace kiln::reduction {

template <class T>
constexpr bool is_half_like = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type a kernel computes in: float for f32/f16/bf16 (16-bit floats are widened only to float,
// and float32 stays float32 so the oracle matches what a float32 kernel would do), double for f64,
// and 64-bit integers for every integer type so sums of small integers are exact.
template <class T>
struct AccumOf {
  using type = std::conditional_t<std::is_floating_point_v<T>, T,
                                  std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
};
template <>
struct AccumOf<Half> {
  using type = float;
};
template <>
struct AccumOf<BFloat16> {
  using type = float;
};
template <class T>
using Accum = typename AccumOf<T>::type;

// A floating type for ops whose result is inherently real (exp, log, sqrt) even on integers.
template <class T>
using RealOf = std::conditional_t<std::is_floating_point_v<Accum<T>>, Accum<T>, double>;

// Type used to compare elements (ArgMax, TopK): 16-bit floats compare as float, others natively.
template <class T>
using Key = std::conditional_t<is_half_like<T>, float, T>;

template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

// Integer accumulation wraps modulo 2^64 (defined behaviour) instead of overflowing, which after
// narrowing gives the same result as wrapping arithmetic in the element type.
template <class A>
A add_wrap(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) + std::make_unsigned_t<A>(b));
  else return a + b;
}
template <class A>
A mul_wrap(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(std::make_unsigned_t<A>(a) * std::make_unsigned_t<A>(b));
  else return a * b;
}

// Converts a computed value back to the element type. Real results stored into integer tensors
// (e.g. ReduceL2 on int32) truncate toward zero; NaN and out-of-range values saturate rather than
// invoking undefined behaviour.
template <class T, class A>
T narrow(A a) {
  if constexpr (is_half_like<T>) {
    return T(float(a));
  } else if constexpr (std::is_integral_v<T> && std::is_floating_point_v<A>) {
    if (std::isnan(a)) return T(0);
    if (a <= A(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (a >= A(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(a);
  } else {
    return static_cast<T>(a);
  }
}

// dtype families named by the ONNX type constraints of the ops in this family.
enum class TypeSet {
  Float,         // f32 f64 f16 bf16 (Softmax, LogSoftmax, Hardmax)
  Reduce,        // Float + i32 i64 u32 u64 (Reduce*, CumSum)
  ReduceMinMax,  // Reduce + i8 u8 bool (ReduceMax, ReduceMin; bool from opset 20)
  Numeric,       // every type but bool (ArgMax, ArgMin, TopK)
};

template <class T>
constexpr bool in_set(TypeSet s) {
  constexpr bool flt = std::is_floating_point_v<T> || is_half_like<T>;
  constexpr bool wide_int = std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                            std::is_same_v<T, uint32_t> || std::is_same_v<T, uint64_t>;
  constexpr bool byte_or_bool = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>;
  switch (s) {
    case TypeSet::Float: return flt;
    case TypeSet::Reduce: return flt || wide_int;
    case TypeSet::ReduceMinMax: return flt || wide_int || byte_or_bool;
    case TypeSet::Numeric: return !std::is_same_v<T, bool>;
  }
  return false;
}

bool dtype_in_set(DType dt, TypeSet s);
// UserError naming the op's input and the accepted types when t's dtype is not in s.
void expect_type_set(const Tensor& t, TypeSet s, const char* what);

// Like dispatch_dtype, but instantiates f only for the element types of S (keeps compile time and
// code size down) after checking t's dtype with a UserError.
template <TypeSet S, class F>
auto dispatch_set(const Tensor& t, const char* what, F&& f) -> decltype(f(float{})) {
  expect_type_set(t, S, what);
  return dispatch_dtype(t.dtype(), [&](auto tag) -> decltype(f(float{})) {
    using T = decltype(tag);
    if constexpr (in_set<T>(S)) return f(tag);
    else throw InternalError("dispatch_set: unchecked dtype");
  });
}

// A tensor viewed as [outer, n, inner] around one axis (row-major), the layout of every
// single-axis op here. A rank-0 tensor is [1, 1, 1].
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisView axis_view(const Shape& s, int64_t axis);

// normalize_axis, except that a rank-0 tensor accepts axis 0 and -1 (both mean "the element"),
// which kernel_util's normalize_axis intends but rejects for -1.
int64_t axis_in_rank(int64_t axis, int64_t rank);

// Reads a scalar-valued integer input (TopK's k, CumSum's axis): 0-D, or 1-D with one element.
int64_t scalar_int_input(const Tensor& t, const char* what);

void register_reduce_ops(OpRegistry& r);   // ReduceSum ... ReduceSumSquare (reduction_ops.cc)
void register_softmax_ops(OpRegistry& r);  // Softmax LogSoftmax Hardmax (reduction_softmax.cc)
void register_select_ops(OpRegistry& r);   // ArgMax ArgMin TopK (reduction_select.cc)
void register_cumsum_op(OpRegistry& r);    // CumSum (reduction_cumsum.cc)

}  // namespace kiln::reduction
