// Arithmetic with numpy broadcasting: Add Sub Mul Div Mod Pow PRelu and the variadic Min Max Sum
// Mean. Integer arithmetic wraps (two's complement) like the hardware kernels it checks; integer
// division and remainder by zero give 0 rather than a UserError, because the value is data, not a
// model mistake, and crashing (SIGFPE) or refusing would hide the rest of the model's results.
#include <cmath>
#include <type_traits>

#include "reference/ops/elementwise_internal.h"

namespace kiln::elementwise {
namespace {

struct AddOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_add(a, b);
    else return a + b;
  }
};
struct SubOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_sub(a, b);
    else return a - b;
  }
};
struct MulOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return wrap_mul(a, b);
    else return a * b;
  }
};
// Integer division truncates toward zero (C++ and the spec's (x / y).astype(int)). x / 0 is 0;
// INT_MIN / -1 wraps to INT_MIN instead of trapping.
struct DivOp {
  template <class C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      if (b == 0) return C(0);
      if constexpr (std::is_signed_v<C>)
        if (b == -1) return wrap_neg(a);
      return C(a / b);
    } else {
      return a / b;
    }
  }
};
struct MaxOp {
  template <class C>
  C operator()(C a, C b) const {
    return nan_max(a, b);
  }
};
struct MinOp {
  template <class C>
  C operator()(C a, C b) const {
    return nan_min(a, b);
  }
};

// Integer remainder. fmod=0: numpy.mod, the result takes the sign of the divisor (Python's %);
// fmod=1: C's %, the sign of the dividend. x mod 0 is 0; x mod -1 is 0 (INT_MIN % -1 traps in C).
template <class C>
C int_mod(C a, C b, bool c_fmod) {
  if (b == 0) return C(0);
  if constexpr (std::is_signed_v<C>) {
    if (b == -1) return C(0);
    C r = C(a % b);
    if (!c_fmod && r != 0 && ((r < 0) != (b < 0))) r = C(r + b);
    return r;
  } else {
    return C(a % b);
  }
}

// Registers a same-dtype binary op over the dtypes in Set.
template <TypeSet Set, class Op>
void add_binary(OpRegistry& r, const char* name, Op op) {
  add_op(r, name, [op](const Node&, const Inputs& in) {
    expect_inputs(in, 2, 2);
    expect_same_dtype(in[0], in[1], "A and B");
    Tensor out;
    dispatch_set<Set>(in[0].dtype(), "input 0", [&](auto tag) { out = arith2<decltype(tag)>(in[0], in[1], op); });
    return Inputs{out};
  });
}

// Min, Max, Sum, Mean: 1..N inputs broadcast together, folded left to right in the element type
// (as numpy's chained np.add / np.maximum do). Mean divides the sum by N at the end.
template <TypeSet Set, class Op>
void add_variadic(OpRegistry& r, const char* name, Op op, bool mean) {
  add_op(r, name, [op, mean](const Node&, const Inputs& in) {
    if (in.empty()) user_error("expects at least 1 input, got 0");
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined()) user_error("input ", i, " is missing");
      expect_same_dtype(in[0], in[i], "inputs");
    }
    Tensor acc;
    dispatch_set<Set>(in[0].dtype(), "input 0", [&](auto tag) {
      using T = decltype(tag);
      // A single input still produces a fresh tensor (broadcast against nothing).
      acc = in.size() == 1 ? in[0].clone() : arith2<T>(in[0], in[1], op);
      for (size_t i = 2; i < in.size(); ++i) acc = arith2<T>(acc, in[i], op);
      if (mean) {
        using C = compute_t<T>;
        const C n = C(in.size());
        T* p = acc.data<T>();
        for (int64_t i = 0, e = acc.numel(); i < e; ++i) p[i] = store<T>(load(p[i]) / n);
      }
    });
    return Inputs{acc};
  });
}

// Integer base raised to the integer power (negative ? -e : e), wrapping like repeated
// multiplication. A negative exponent (numpy refuses it) gives the truncated real result: 1 for
// base 1, ±1 for base -1, else 0.
template <class T>
T int_pow(T base, bool negative, uint64_t e) {
  if (negative) {
    if (base == T(1)) return T(1);
    if constexpr (std::is_signed_v<T>)
      if (base == T(-1)) return (e & 1) ? T(-1) : T(1);
    return T(0);
  }
  T result = T(1);
  for (; e > 0; e >>= 1) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
  }
  return result;
}

// Pow(X, Y): the result has X's type. Float32 (and float16) to a float32 power computes powf like
// numpy; other mixes compute in double (numpy promotes float32**int32 to float64) and convert back,
// so integer bases to float powers truncate, as the spec's np.power(x, y).astype(x.dtype) does.
template <class TA, class TB>
Tensor pow_kernel(const Tensor& x, const Tensor& y) {
  return map2<TA, TB, TA>(x, y, x.dtype(), [](TA a, TB b) -> TA {
    using CA = compute_t<TA>;
    using CB = compute_t<TB>;
    if constexpr (std::is_integral_v<CA> && std::is_integral_v<CB>) {
      bool negative = false;
      if constexpr (std::is_signed_v<CB>) negative = b < CB(0);
      const uint64_t magnitude = negative ? uint64_t(0) - uint64_t(b) : uint64_t(b);
      return int_pow<TA>(a, negative, magnitude);
    } else if constexpr (std::is_same_v<CA, float> && std::is_same_v<CB, float>) {
      return store<TA>(std::pow(load(a), load(b)));
    } else {
      return store<TA>(std::pow(double(load(a)), double(load(b))));
    }
  });
}

void register_arith(OpRegistry& r) {
  add_binary<kNumeric>(r, "Add", AddOp{});
  add_binary<kNumeric>(r, "Sub", SubOp{});
  add_binary<kNumeric>(r, "Mul", MulOp{});
  add_binary<kNumeric>(r, "Div", DivOp{});

  add_variadic<kNumeric>(r, "Max", MaxOp{}, false);
  add_variadic<kNumeric>(r, "Min", MinOp{}, false);
  add_variadic<kFloats>(r, "Sum", AddOp{}, false);
  add_variadic<kFloats>(r, "Mean", AddOp{}, true);

  add_op(r, "Mod", [](const Node& node, const Inputs& in) {
    expect_inputs(in, 2, 2);
    expect_same_dtype(in[0], in[1], "A and B");
    const int64_t fmod = node.attr_int("fmod", 0);
    if (fmod != 0 && fmod != 1) user_error("fmod must be 0 or 1, got ", fmod);
    // The spec defines only the C-style remainder for floats.
    if (is_float(in[0].dtype()) && fmod == 0) user_error("fmod must be 1 for floating-point inputs");
    Tensor out;
    dispatch_set<kNumeric>(in[0].dtype(), "input 0", [&](auto tag) {
      out = arith2<decltype(tag)>(in[0], in[1], [fmod](auto a, auto b) {
        if constexpr (std::is_integral_v<decltype(a)>) return int_mod(a, b, fmod == 1);
        else return std::fmod(a, b);
      });
    });
    return Inputs{out};
  });

  add_op(r, "Pow", [](const Node&, const Inputs& in) {
    expect_inputs(in, 2, 2);
    Tensor out;
    constexpr TypeSet kBase = kFloats | bit(DType::Int32) | bit(DType::Int64);
    dispatch_set<kBase>(in[0].dtype(), "input 0 (X)", [&](auto ta) {
      dispatch_set<kNumeric>(in[1].dtype(), "input 1 (Y)", [&](auto tb) {
        out = pow_kernel<decltype(ta), decltype(tb)>(in[0], in[1]);
      });
    });
    return Inputs{out};
  });

  // PRelu: slope broadcasts to X's shape (unidirectionally: the output is never larger than X).
  add_op(r, "PRelu", [](const Node&, const Inputs& in) {
    expect_inputs(in, 2, 2);
    expect_same_dtype(in[0], in[1], "X and slope");
    if (broadcast_shapes({in[0].shape(), in[1].shape()}) != in[0].shape())
      user_error("slope of shape ", shape_str(in[1].shape()), " does not broadcast to X of shape ",
                 shape_str(in[0].shape()));
    Tensor out;
    constexpr TypeSet kTypes =
        kFloats | bit(DType::Int32) | bit(DType::Int64) | bit(DType::UInt32) | bit(DType::UInt64);
    dispatch_set<kTypes>(in[0].dtype(), "input 0", [&](auto tag) {
      out = arith2<decltype(tag)>(in[0], in[1], [](auto x, auto slope) {
        using C = decltype(x);
        return x < C(0) ? MulOp{}(slope, x) : x;
      });
    });
    return Inputs{out};
  });
}

}  // namespace

void register_binary(OpRegistry& r) { register_arith(r); }

}  // namespace kiln::elementwise
