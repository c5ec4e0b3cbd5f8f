// Unary elementwise ops: activations, math functions, rounding, and the float predicates
// (IsNaN, IsInf) plus Not. Each formula follows the ONNX spec's numpy reference in the element's
// compute type (float for float32/float16/bfloat16, double for float64), so float32 results match
// it to the last bit or two.
#include <cmath>

#include "reference/ops/elementwise_internal.h"

namespace kiln::elementwise {
namespace {

// Registers an op whose result has the input's dtype and shape. make(node) reads the attributes and
// returns a generic functor applied to each element in its compute type.
template <TypeSet Set, class Make>
void add_unary(OpRegistry& r, const char* name, Make make) {
  add_op(r, name, [make](const Node& node, const Inputs& in) {
    expect_inputs(in, 1, 1);
    auto f = make(node);
    Tensor out;
    dispatch_set<Set>(in[0].dtype(), "input 0", [&](auto tag) { out = map1<decltype(tag)>(in[0], f); });
    return Inputs{out};
  });
}

// Unary op without attributes.
template <TypeSet Set, class F>
void add_plain(OpRegistry& r, const char* name, F f) {
  add_unary<Set>(r, name, [f](const Node&) { return f; });
}

// A float-valued function that the spec also allows on integers (Erf): integers go through double
// and are converted back (truncating, as numpy's astype does).
template <class F>
auto via_double_for_ints(F f) {
  return [f](auto x) {
    using C = decltype(x);
    if constexpr (std::is_integral_v<C>) return saturate_int<C>(f(double(x)));
    else return f(x);
  };
}

template <TypeSet Set, class Pred>
void add_predicate(OpRegistry& r, const char* name, Pred make) {
  add_op(r, name, [make](const Node& node, const Inputs& in) {
    expect_inputs(in, 1, 1);
    auto pred = make(node);
    Tensor out(DType::Bool, in[0].shape());
    dispatch_set<Set>(in[0].dtype(), "input 0", [&](auto tag) {
      using T = decltype(tag);
      const T* px = in[0].data<T>();
      bool* po = out.data<bool>();
      for (int64_t i = 0, n = in[0].numel(); i < n; ++i) po[i] = pred(load(px[i]));
    });
    return Inputs{out};
  });
}

void register_math(OpRegistry& r) {
  add_plain<kFloats>(r, "Reciprocal", [](auto x) { return decltype(x)(1) / x; });
  add_plain<kFloats>(r, "Sqrt", [](auto x) { return std::sqrt(x); });
  add_plain<kFloats>(r, "Exp", [](auto x) { return std::exp(x); });
  add_plain<kFloats>(r, "Log", [](auto x) { return std::log(x); });
  add_plain<kNumeric>(r, "Erf", via_double_for_ints([](auto x) { return std::erf(x); }));
  add_plain<kFloats>(r, "Tanh", [](auto x) { return std::tanh(x); });
  add_plain<kFloats>(r, "Sin", [](auto x) { return std::sin(x); });
  add_plain<kFloats>(r, "Cos", [](auto x) { return std::cos(x); });
  add_plain<kFloats>(r, "Tan", [](auto x) { return std::tan(x); });
  add_plain<kFloats>(r, "Asin", [](auto x) { return std::asin(x); });
  add_plain<kFloats>(r, "Acos", [](auto x) { return std::acos(x); });
  add_plain<kFloats>(r, "Atan", [](auto x) { return std::atan(x); });
  add_plain<kFloats>(r, "Sinh", [](auto x) { return std::sinh(x); });
  add_plain<kFloats>(r, "Cosh", [](auto x) { return std::cosh(x); });
  add_plain<kFloats>(r, "Asinh", [](auto x) { return std::asinh(x); });
  add_plain<kFloats>(r, "Acosh", [](auto x) { return std::acosh(x); });
  add_plain<kFloats>(r, "Atanh", [](auto x) { return std::atanh(x); });
  add_plain<kFloats>(r, "Floor", [](auto x) { return std::floor(x); });
  add_plain<kFloats>(r, "Ceil", [](auto x) { return std::ceil(x); });
  // nearbyint rounds in the current rounding mode, which kiln never changes from the default
  // round-to-nearest-even: exactly the spec's "halves to even" (numpy.round).
  add_plain<kFloats>(r, "Round", [](auto x) { return std::nearbyint(x); });

  add_plain<kNumeric>(r, "Abs", [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_unsigned_v<C>) return x;
    else if constexpr (std::is_integral_v<C>) return x < 0 ? wrap_neg(x) : x;  // abs(INT_MIN) wraps
    else return std::abs(x);
  });
  add_plain<kFloats | kSignedInts>(r, "Neg", [](auto x) {
    if constexpr (std::is_integral_v<decltype(x)>) return wrap_neg(x);
    else return -x;
  });
  // numpy.sign: -1, 0 or 1, and NaN stays NaN.
  add_plain<kNumeric>(r, "Sign", [](auto x) {
    using C = decltype(x);
    if constexpr (std::is_floating_point_v<C>)
      if (std::isnan(x)) return x;
    return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
  });
}

void register_activations(OpRegistry& r) {
  // x < 0 is false for NaN, so these keep NaN as the spec's clip-based formulas do.
  add_plain<kFloats | kSignedInts>(r, "Relu", [](auto x) { return x < decltype(x)(0) ? decltype(x)(0) : x; });
  add_plain<kFloats>(r, "Sigmoid", [](auto x) {
    using C = decltype(x);
    return C(1) / (C(1) + std::exp(-x));
  });
  add_plain<kFloats>(r, "Softsign", [](auto x) { return x / (decltype(x)(1) + std::abs(x)); });
  // The spec's log(exp(x) + 1) overflows to inf for x > ~88 in float; this form is equal in exact
  // arithmetic and stays finite.
  add_plain<kFloats>(r, "Softplus", [](auto x) {
    using C = decltype(x);
    return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  });
  add_plain<kFloats>(r, "HardSwish", [](auto x) {
    using C = decltype(x);
    C v = C(1.0 / 6.0) * x + C(0.5);
    return x * nan_max(C(0), nan_min(C(1), v));
  });

  add_unary<kFloats>(r, "LeakyRelu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.01f);
    return [alpha](auto x) {
      using C = decltype(x);
      return x < C(0) ? C(alpha) * x : x;
    };
  });
  add_unary<kFloats>(r, "Elu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return [alpha](auto x) {
      using C = decltype(x);
      return x < C(0) ? (std::exp(x) - C(1)) * C(alpha) : x;
    };
  });
  add_unary<kFloats>(r, "Selu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.67326319217681884765625f);
    float gamma = n.attr_float("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto x) {
      using C = decltype(x);
      return x > C(0) ? x * C(gamma) : (std::exp(x) - C(1)) * C(alpha) * C(gamma);
    };
  });
  add_unary<kFloats>(r, "Celu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    if (alpha == 0.0f) user_error("Celu alpha must be nonzero");
    return [alpha](auto x) {
      using C = decltype(x);
      const C a = C(alpha);
      return nan_max(C(0), x) + nan_min(C(0), a * (std::exp(x / a) - C(1)));
    };
  });
  add_unary<kFloats>(r, "HardSigmoid", [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.2f), beta = n.attr_float("beta", 0.5f);
    return [alpha, beta](auto x) {
      using C = decltype(x);
      return nan_max(C(0), nan_min(C(1), C(alpha) * x + C(beta)));
    };
  });
  add_unary<kFloats>(r, "ThresholdedRelu", [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return [alpha](auto x) {
      using C = decltype(x);
      return x > C(alpha) ? x : C(0);
    };
  });
  // Shrink is defined on integers too: compare and offset in double, convert back.
  add_unary<kNumeric>(r, "Shrink", [](const Node& n) {
    float lambd = n.attr_float("lambd", 0.5f), bias = n.attr_float("bias", 0.0f);
    return via_double_for_ints([lambd, bias](auto x) {
      using C = decltype(x);
      return x < -C(lambd) ? x + C(bias) : (x > C(lambd) ? x - C(bias) : C(0));
    });
  });
}

void register_predicates(OpRegistry& r) {
  add_predicate<kFloats>(r, "IsNaN", [](const Node&) { return [](auto x) { return std::isnan(x); }; });
  add_predicate<kFloats>(r, "IsInf", [](const Node& n) {
    bool neg = n.attr_int("detect_negative", 1) != 0, pos = n.attr_int("detect_positive", 1) != 0;
    return [neg, pos](auto x) { return std::isinf(x) && (x > 0 ? pos : neg); };
  });
  add_predicate<kBool>(r, "Not", [](const Node&) { return [](bool x) { return !x; }; });
}

}  // namespace

void register_unary(OpRegistry& r) {
  register_math(r);
  register_activations(r);
  register_predicates(r);
}

}  // namespace kiln::elementwise
