// Shared machinery of the elementwise reference kernels (elementwise_*.cc): dtype sets checked at
// run time and dispatched at compile time, the compute type of each element type, and loops over
// numpy-broadcast operands that do no per-element allocation.
#pragma once
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "reference/kernel_util.h"
#include "reference/op_registry.h"

namespace kiln::elementwise {

// ---- dtype sets --------------------------------------------------------------------------------

// A set of dtypes as a bitmask indexed by DType, so each op can state exactly what the ONNX spec
// allows and the compiler only instantiates kernels for those types.
using TypeSet = uint32_t;
constexpr TypeSet bit(DType d) { return TypeSet(1) << unsigned(d); }
constexpr TypeSet kFloats = bit(DType::Float32) | bit(DType::Float64) | bit(DType::Float16) | bit(DType::BFloat16);
constexpr TypeSet kSignedInts = bit(DType::Int8) | bit(DType::Int16) | bit(DType::Int32) | bit(DType::Int64);
constexpr TypeSet kUnsignedInts = bit(DType::UInt8) | bit(DType::UInt16) | bit(DType::UInt32) | bit(DType::UInt64);
constexpr TypeSet kInts = kSignedInts | kUnsignedInts;
constexpr TypeSet kNumeric = kFloats | kInts;
constexpr TypeSet kBool = bit(DType::Bool);
constexpr TypeSet kAll = kNumeric | kBool;

template <class T>
constexpr bool in_set(TypeSet s) {
  return (s & bit(dtype_of<T>())) != 0;
}

// Calls f(T{}) for dt when dt is in Set; otherwise a UserError naming `what` (e.g. "input 0").
// f returns void (kernels write their result into a captured Tensor) so that the branches for
// types outside Set need not produce a value.
template <TypeSet Set, class F>
void dispatch_set(DType dt, const char* what, F&& f) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (in_set<T>(Set)) f(tag);
    else user_error(what, " has unsupported type ", dtype_name(dt));
  });
}

// ---- compute types -----------------------------------------------------------------------------

template <class T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type arithmetic happens in: float16/bfloat16 compute in float and round back on store (what
// numpy does for float16); every other type computes in itself, so float32 math stays float32.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
compute_t<T> load(T v) {
  return compute_t<T>(v);
}

// double → integer T with saturation and NaN → 0 (plain conversion is undefined out of range).
template <class T>
T saturate_int(double v) {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    if (std::isnan(v)) return T(0);
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    return T(v);
  }
}

// Stores a value computed in float/double into element type T (integers saturate).
template <class T, class C>
T store(C v) {
  if constexpr (std::is_integral_v<T> && std::is_floating_point_v<C>) return saturate_int<T>(double(v));
  else if constexpr (is_half_v<T>) return T(float(v));
  else return T(v);
}

// double → float rounded to odd: truncate toward zero, then set the lowest mantissa bit if that
// lost anything. Rounding that float to float16/bfloat16 (>= 2 fewer mantissa bits) then gives the
// correctly rounded result; going through a round-to-nearest float could round twice and land one
// ulp off (numpy converts float64 → float16 directly).
inline float round_to_odd_float(double d) {
  float f = float(d);
  if (!std::isfinite(d) || double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

// NaN-propagating max/min (numpy's maximum/minimum; std::max would drop a NaN in one position).
template <class C>
C nan_max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return a < b ? b : a;
}
template <class C>
C nan_min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}

// ---- broadcast loops ---------------------------------------------------------------------------

// Walks `out` (the broadcast shape of `ins`) one innermost row at a time:
// body(out_offset, n, off, step) must handle elements out_offset .. out_offset+n-1, whose input k
// elements are at off[k] + i*step[k] (step 0 when input k is broadcast along the last dim). Inputs
// of the output's shape take a single call over all elements.
template <size_t K, class Body>
void broadcast_rows(const Shape& out, const std::array<Shape, K>& ins, Body&& body) {
  const int64_t numel = shape_numel(out);
  if (numel == 0) return;
  std::array<int64_t, K> off{}, step{}, row_size{};
  bool all_same = true;
  for (size_t k = 0; k < K; ++k) all_same = all_same && ins[k] == out;
  if (all_same) {
    step.fill(1);
    body(int64_t(0), numel, off, step);
    return;
  }
  const int64_t inner = out.empty() ? 1 : out.back();
  std::vector<Shape> outer_ins(K);
  for (size_t k = 0; k < K; ++k) {
    const Shape& s = ins[k];
    row_size[k] = s.empty() ? 1 : s.back();
    step[k] = row_size[k] == inner ? 1 : 0;
    if (!s.empty()) outer_ins[k].assign(s.begin(), s.end() - 1);
  }
  // The outer iterator counts rows; input k's rows are row_size[k] elements long.
  const Shape outer = out.empty() ? out : Shape(out.begin(), out.end() - 1);
  for (BroadcastIter it(outer, outer_ins); !it.done(); it.next()) {
    for (size_t k = 0; k < K; ++k) off[k] = it.offset(k) * row_size[k];
    body(it.index() * inner, inner, off, step);
  }
}

// out[i] = f(a[i'], b[i'']) under numpy broadcasting; f maps raw element types (TA, TB) → TO.
template <class TA, class TB, class TO, class F>
Tensor map2(const Tensor& a, const Tensor& b, DType out_dtype, F f) {
  Shape shape = broadcast_shapes({a.shape(), b.shape()});
  Tensor out(out_dtype, shape);
  const TA* pa = a.data<TA>();
  const TB* pb = b.data<TB>();
  TO* po = out.data<TO>();
  broadcast_rows<2>(shape, {a.shape(), b.shape()}, [&](int64_t o, int64_t n, const auto& off, const auto& st) {
    const TA* ra = pa + off[0];
    const TB* rb = pb + off[1];
    TO* ro = po + o;
    // The common cases get loops the compiler can vectorise.
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) ro[i] = f(ra[i], rb[i]);
    } else if (st[0] == 1) {
      const TB vb = rb[0];
      for (int64_t i = 0; i < n; ++i) ro[i] = f(ra[i], vb);
    } else if (st[1] == 1) {
      const TA va = ra[0];
      for (int64_t i = 0; i < n; ++i) ro[i] = f(va, rb[i]);
    } else {
      const TO v = f(ra[0], rb[0]);
      for (int64_t i = 0; i < n; ++i) ro[i] = v;
    }
  });
  return out;
}

// Same dtype in and out: out = op(a, b) computed in compute_t<T>.
template <class T, class Op>
Tensor arith2(const Tensor& a, const Tensor& b, Op op) {
  return map2<T, T, T>(a, b, a.dtype(), [op](T x, T y) { return store<T>(op(load(x), load(y))); });
}

// out[i] = f(x[i]) where f maps compute_t<T> → compute_t<T>; same dtype and shape.
template <class T, class F>
Tensor map1(const Tensor& x, F f) {
  Tensor out(x.dtype(), x.shape());
  const T* px = x.data<T>();
  T* po = out.data<T>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = store<T>(f(load(px[i])));
  return out;
}

// ---- wrapping integer arithmetic ---------------------------------------------------------------

// Signed overflow is undefined in C++, but ONNX integer arithmetic wraps like the hardware does; so
// compute in the unsigned type of at least int width (uint16*uint16 would promote to signed int).
template <class T>
using wide_unsigned_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
T wrap_add(T a, T b) {
  using U = wide_unsigned_t<T>;
  return T(U(a) + U(b));
}
template <class T>
T wrap_sub(T a, T b) {
  using U = wide_unsigned_t<T>;
  return T(U(a) - U(b));
}
template <class T>
T wrap_mul(T a, T b) {
  using U = wide_unsigned_t<T>;
  return T(U(a) * U(b));
}
template <class T>
T wrap_neg(T a) {
  using U = wide_unsigned_t<T>;
  return T(U(0) - U(a));
}

// ---- registration ------------------------------------------------------------------------------

using Inputs = std::vector<Tensor>;

inline void add_op(OpRegistry& r, const char* name, KernelFn fn) {
  OpInfo info;
  info.name = name;
  info.kernel = std::move(fn);
  r.add(std::move(info));
}

void register_unary(OpRegistry& r);    // elementwise_unary.cc
void register_binary(OpRegistry& r);   // elementwise_binary.cc
void register_compare(OpRegistry& r);  // elementwise_compare.cc

}  // namespace kiln::elementwise
