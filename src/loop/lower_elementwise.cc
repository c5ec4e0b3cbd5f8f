// Elementwise ops as expressions, following the reference kernels' numerics
// (src/reference/ops/elementwise_*.cc) formula by formula: the same compute type (float for
// float16/bfloat16, the element type otherwise), the same operation order, and rounding back to
// the element type after every op, so float32 results agree to the last bit or two and integer
// and bool results exactly.
#include <algorithm>
#include <map>

#include "fusion/op_kind.h"
#include "loop/lower_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

// ---------------------------------------------------------------- helpers

DType compute_type(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }

Expr to_compute(Expr e) {
  const DType c = compute_type(e->type);
  return cast(c, std::move(e));
}

Expr imm(double v, DType t) {
  if (is_float(t)) {
    if (t == DType::Float32 || t == DType::Float64) return float_imm(v, t);
    return cast(t, float_imm(double(float(v)), DType::Float32));
  }
  return int_imm(int64_t(v), t);
}

Expr tensor_imm(const Tensor& t, int64_t i) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> Expr {
    using T = decltype(tag);
    const T v = t.data<T>()[i];
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return cast(t.dtype(), float_imm(double(float(v)), DType::Float32));
    else if constexpr (std::is_floating_point_v<T>)
      return float_imm(double(v), t.dtype());
    else
      return int_imm(int64_t(v), t.dtype());
  });
}

Expr sub(Expr a, Expr b) {
  if (b->kind == ExprKind::IntImm && b->int_value == 0) return a;
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm) return int_imm(a->int_value - b->int_value);
  return binary(BinOp::Sub, std::move(a), std::move(b));
}

Expr clamp(Expr v, int64_t lo, int64_t hi) {
  if (v->kind == ExprKind::IntImm) return int_imm(std::clamp(v->int_value, lo, hi));
  return binary(BinOp::Max, binary(BinOp::Min, std::move(v), int_imm(hi)), int_imm(lo));
}

std::optional<std::vector<int64_t>> constant_ints(const Node& n, size_t input, const char* what) {
  const Value* v = n.input(input);
  if (!v) return std::nullopt;
  // An input of no elements has one possible value whether computed or not: the empty list.
  if (!v->is_constant() && shape_numel(v->shape()) == 0 && is_integer(v->dtype()) && v->shape().size() == 1)
    return std::vector<int64_t>{};
  if (!v->is_constant()) refuse(cat(n.op_type(), " ", what, " are computed at run time"));
  const Tensor& t = v->constant();
  if (!is_integer(t.dtype()) || t.rank() > 1) refuse(cat(n.op_type(), " ", what, " must be a 1-D integer tensor"));
  return t.to_int64_vector();
}

namespace {

// ---------------------------------------------------------------- dtype sets (as the reference)

using TypeSet = uint32_t;
constexpr TypeSet bit(DType d) { return TypeSet(1) << unsigned(d); }
constexpr TypeSet kFloats = bit(DType::Float32) | bit(DType::Float64) | bit(DType::Float16) | bit(DType::BFloat16);
constexpr TypeSet kSignedInts = bit(DType::Int8) | bit(DType::Int16) | bit(DType::Int32) | bit(DType::Int64);
constexpr TypeSet kUnsignedInts = bit(DType::UInt8) | bit(DType::UInt16) | bit(DType::UInt32) | bit(DType::UInt64);
constexpr TypeSet kNumeric = kFloats | kSignedInts | kUnsignedInts;
constexpr TypeSet kBool = bit(DType::Bool);
constexpr TypeSet kAll = kNumeric | kBool;

// Types of input 0 each elementwise op accepts (the reference kernel's set).
const std::map<std::string, TypeSet>& elementwise_types() {
  static const std::map<std::string, TypeSet> m = [] {
    std::map<std::string, TypeSet> t;
    for (const char* op : {"Reciprocal", "Sqrt", "Exp", "Log", "Tanh", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan",
                           "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sigmoid", "Softsign",
                           "Softplus", "HardSwish", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
                           "ThresholdedRelu", "IsNaN", "IsInf", "Sum", "Mean"})
      t[op] = kFloats;
    for (const char* op : {"Erf", "Abs", "Sign", "Shrink", "Add", "Sub", "Mul", "Div", "Max", "Min", "Mod", "Clip",
                           "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
      t[op] = kNumeric;
    t["Neg"] = kFloats | kSignedInts;
    t["Relu"] = kFloats | kSignedInts;
    t["Not"] = kBool;
    t["And"] = t["Or"] = t["Xor"] = kBool;
    t["Equal"] = kAll;
    t["Where"] = kBool;  // the condition; X and Y may be anything
    t["Cast"] = t["CastLike"] = kAll;
    t["Pow"] = kFloats | bit(DType::Int32) | bit(DType::Int64);
    t["PRelu"] = kFloats | bit(DType::Int32) | bit(DType::Int64) | bit(DType::UInt32) | bit(DType::UInt64);
    return t;
  }();
  return m;
}

bool is_unsigned(DType t) { return (bit(t) & kUnsignedInts) != 0; }

// Binary arithmetic in the compute type of a and b (same dtype T), rounded back to T.
Expr arith(BinOp op, const Expr& a, const Expr& b) {
  const DType t = a->type;
  return cast(t, binary(op, to_compute(a), to_compute(b)));
}

// Integer a / b as the reference: x / 0 = 0, INT_MIN / -1 wraps (= -a); the divisor used is never
// 0 or -1, so the expression cannot trap.
Expr int_div(const Expr& a, const Expr& b) {
  const DType t = a->type;
  Expr zero = int_imm(0, t), one = int_imm(1, t);
  if (is_unsigned(t)) {
    Expr is0 = binary(BinOp::Eq, b, zero);
    return select(is0, zero, binary(BinOp::Div, a, select(is0, one, b)));
  }
  Expr is0 = binary(BinOp::Eq, b, zero), ism1 = binary(BinOp::Eq, b, int_imm(-1, t));
  Expr q = binary(BinOp::Div, a, select(binary(BinOp::Or, is0, ism1), one, b));
  return select(is0, zero, select(ism1, unary(UnOp::Neg, a), q));
}

// Integer remainder as the reference's int_mod: fmod=0 takes the divisor's sign (Python), fmod=1
// the dividend's (C); x mod 0 and x mod -1 are 0.
Expr int_mod(const Expr& a, const Expr& b, bool c_fmod) {
  const DType t = a->type;
  Expr zero = int_imm(0, t), one = int_imm(1, t);
  if (is_unsigned(t)) {
    Expr is0 = binary(BinOp::Eq, b, zero);
    return select(is0, zero, binary(BinOp::Mod, a, select(is0, one, b)));
  }
  Expr bad = binary(BinOp::Or, binary(BinOp::Eq, b, zero), binary(BinOp::Eq, b, int_imm(-1, t)));
  Expr r = binary(BinOp::Mod, a, select(bad, one, b));
  if (!c_fmod) {
    Expr sign_differs = binary(BinOp::Xor, binary(BinOp::Lt, r, zero), binary(BinOp::Lt, b, zero));
    r = select(binary(BinOp::And, binary(BinOp::Ne, r, zero), sign_differs), binary(BinOp::Add, r, b), r);
  }
  return select(bad, zero, r);
}

// Pow(X, Y) with the reference's type rules: float/half ** float/half in float (powf), every other
// mix in double, converted back to X's type (integers saturate, halves via float).
Expr pow_expr(const Expr& x, const Expr& y) {
  const DType tx = x->type, ty = y->type;
  // Integer to an integer power: exact repeated squaring, wrapping like the reference's repeated
  // multiplication (the emitters' kiln_pow_S/kiln_powu_S; the exponent keeps its own type).
  if (is_integer(tx) && is_integer(ty)) return binary(BinOp::Pow, x, y);
  const bool fx = compute_type(tx) == DType::Float32, fy = compute_type(ty) == DType::Float32;
  if (fx && fy) return cast(tx, binary(BinOp::Pow, to_compute(x), cast(DType::Float32, y)));
  Expr r = binary(BinOp::Pow, cast(DType::Float64, x), cast(DType::Float64, y));
  if (tx == DType::Float16 || tx == DType::BFloat16) return cast(tx, cast(DType::Float32, r));
  return cast(tx, r);
}

// Unary float math in the compute type, rounded back.
Expr unary_c(UnOp op, const Expr& x) { return cast(x->type, unary(op, to_compute(x))); }

}  // namespace

std::string unsupported_reason(const Node& n) {
  if (!n.domain().empty()) return cat("op ", n.domain(), "::", n.op_type(), " is not lowered to loops");
  auto kind = op_kind_of_type(n.op_type());
  if (!kind) return cat(n.op_type(), " is not lowered to loops");
  if (*kind == OpKind::Injective) return unsupported_injective(n);
  if (*kind != OpKind::ElementWise) return cat(n.op_type(), " is not elementwise: no elementwise nest fuses it");
  auto it = elementwise_types().find(n.op_type());
  if (it == elementwise_types().end()) return cat(n.op_type(), " has no loop form");
  for (size_t i = 0; i < n.num_inputs(); ++i)
    if (n.input(i) && n.input(i)->dtype() == DType::Undefined) return cat(n.op_type(), " has an untyped input");
  if (n.num_inputs() == 0 || !n.input(0)) return cat(n.op_type(), " has no input 0");
  const DType t = n.input(0)->dtype();
  if ((it->second & bit(t)) == 0) return cat(n.op_type(), " does not accept ", dtype_name(t));
  const std::string& op = n.op_type();
  if ((op == "Pow" || op == "CastLike") && (n.num_inputs() != 2 || !n.input(1))) return cat(op, " needs two inputs");
  if (op == "Where" && (n.num_inputs() != 3 || !n.input(1) || !n.input(2))) return "Where needs three inputs";
  if (op == "Pow" && !(bit(n.input(1)->dtype()) & kNumeric)) return "Pow exponent must be numeric";
  if (op == "Mod") {
    int64_t f = n.attr_int("fmod", 0);
    if (f != 0 && f != 1) return "Mod fmod must be 0 or 1";
    if (is_float(t) && f == 0) return "Mod on floats needs fmod=1";
  }
  if (op == "Celu" && n.attr_float("alpha", 1.0f) == 0.0f) return "Celu alpha must be nonzero";
  if (op == "Cast" && (!n.has_attr("to") || !dtype_from_onnx(n.attr_int("to", 0))))
    return "Cast has no supported 'to' type";
  // Same-dtype operands, as the reference requires (it would report the mismatch).
  static const std::set<std::string> same = {"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Sum", "Mean",
                                              "PRelu", "Equal", "Less", "LessOrEqual", "Greater",
                                              "GreaterOrEqual", "And", "Or", "Xor", "Clip"};
  if (same.count(op))
    for (size_t i = 1; i < n.num_inputs(); ++i)
      if (n.input(i) && n.input(i)->dtype() != t) return cat(op, " operands have different types");
  if (op == "Where" && n.num_inputs() == 3 && n.input(1) && n.input(2) && n.input(1)->dtype() != n.input(2)->dtype())
    return "Where X and Y have different types";
  if (op == "Clip")
    for (size_t i = 1; i < n.num_inputs(); ++i)
      if (n.input(i) && shape_numel(n.input(i)->shape()) != 1) return "Clip bounds must be scalars";
  return "";
}

// ---------------------------------------------------------------- the ops

Expr Lowerer::lower_elementwise(const Node& n, Index& idx) {
  const std::string& op = n.op_type();
  auto in = [&](size_t k) { return operand(n, k, idx); };
  const DType t = n.input(0)->dtype();
  const DType c = compute_type(t);
  auto K = [&](double v) { return imm(v, c); };

  // ---- arithmetic
  static const std::map<std::string, BinOp> arith_ops = {
      {"Add", BinOp::Add}, {"Sub", BinOp::Sub}, {"Mul", BinOp::Mul}, {"Max", BinOp::Max}, {"Min", BinOp::Min},
      {"Sum", BinOp::Add}, {"Mean", BinOp::Add}};
  if (auto it = arith_ops.find(op); it != arith_ops.end()) {
    // Variadic forms fold left to right, rounding to T after each step (as the reference does).
    Expr acc = in(0);
    for (size_t k = 1; k < n.num_inputs(); ++k) acc = arith(it->second, acc, in(k));
    if (op == "Mean") acc = cast(t, binary(BinOp::Div, to_compute(acc), K(double(n.num_inputs()))));
    return acc;
  }
  if (op == "Div") return is_integer(t) ? int_div(in(0), in(1)) : arith(BinOp::Div, in(0), in(1));
  if (op == "Mod") {
    const bool c_fmod = n.attr_int("fmod", 0) == 1;
    return is_integer(t) ? int_mod(in(0), in(1), c_fmod) : arith(BinOp::Mod, in(0), in(1));
  }
  if (op == "Pow") return pow_expr(in(0), in(1));
  if (op == "PRelu") {
    Expr x = to_compute(in(0)), s = to_compute(in(1));
    return cast(t, select(binary(BinOp::Lt, x, K(0)), binary(BinOp::Mul, s, x), x));
  }

  // ---- comparisons, logic, selection, conversion
  static const std::map<std::string, BinOp> cmp_ops = {
      {"Equal", BinOp::Eq}, {"Less", BinOp::Lt}, {"LessOrEqual", BinOp::Le}, {"Greater", BinOp::Gt},
      {"GreaterOrEqual", BinOp::Ge}, {"And", BinOp::And}, {"Or", BinOp::Or}, {"Xor", BinOp::Xor}};
  if (auto it = cmp_ops.find(op); it != cmp_ops.end())
    return binary(it->second, to_compute(in(0)), to_compute(in(1)));
  if (op == "Not") return unary(UnOp::Not, in(0));
  if (op == "Where") return select(in(0), in(1), in(2));
  if (op == "Cast") return cast(*dtype_from_onnx(n.attr_int("to", 0)), in(0));
  if (op == "CastLike") return cast(n.input(1)->dtype(), in(0));
  if (op == "Clip") {
    // Clamp to min first, then to max (min > max gives max); NaN compares false and stays.
    Expr v = in(0);
    if (n.input(1)) {
      Expr lo = in(1);
      v = select(binary(BinOp::Lt, to_compute(v), to_compute(lo)), lo, v);
    }
    if (n.input(2)) {
      Expr hi = in(2);
      v = select(binary(BinOp::Gt, to_compute(v), to_compute(hi)), hi, v);
    }
    return v;
  }
  if (op == "IsNaN") return unary(UnOp::IsNaN, to_compute(in(0)));
  if (op == "IsInf") {
    const bool neg = n.attr_int("detect_negative", 1) != 0, pos = n.attr_int("detect_positive", 1) != 0;
    Expr x = to_compute(in(0));
    Expr inf = unary(UnOp::IsInf, x);
    if (pos && neg) return inf;
    if (!pos && !neg) return int_imm(0, DType::Bool);
    return binary(BinOp::And, inf, binary(pos ? BinOp::Gt : BinOp::Lt, x, K(0)));
  }

  // ---- unary math
  static const std::map<std::string, UnOp> math = {
      {"Sqrt", UnOp::Sqrt}, {"Exp", UnOp::Exp},     {"Log", UnOp::Log},     {"Tanh", UnOp::Tanh},
      {"Sin", UnOp::Sin},   {"Cos", UnOp::Cos},     {"Tan", UnOp::Tan},     {"Asin", UnOp::Asin},
      {"Acos", UnOp::Acos}, {"Atan", UnOp::Atan},   {"Sinh", UnOp::Sinh},   {"Cosh", UnOp::Cosh},
      {"Asinh", UnOp::Asinh}, {"Acosh", UnOp::Acosh}, {"Atanh", UnOp::Atanh}, {"Floor", UnOp::Floor},
      {"Ceil", UnOp::Ceil}, {"Round", UnOp::Round}};
  if (auto it = math.find(op); it != math.end()) return unary_c(it->second, in(0));
  if (op == "Neg") return unary_c(UnOp::Neg, in(0));
  if (op == "Abs") return is_unsigned(t) ? in(0) : unary_c(UnOp::Abs, in(0));
  if (op == "Reciprocal") return cast(t, binary(BinOp::Div, K(1), to_compute(in(0))));
  if (op == "Erf" && is_integer(t)) return cast(t, unary(UnOp::Erf, cast(DType::Float64, in(0))));
  if (op == "Erf") return unary_c(UnOp::Erf, in(0));

  Expr x = to_compute(in(0));
  auto done = [&](Expr e) { return cast(t, std::move(e)); };
  auto lt = [](Expr a, Expr b) { return binary(BinOp::Lt, std::move(a), std::move(b)); };
  auto gt = [](Expr a, Expr b) { return binary(BinOp::Gt, std::move(a), std::move(b)); };
  auto bin = [](BinOp o, Expr a, Expr b) { return binary(o, std::move(a), std::move(b)); };
  auto expm1 = [&](Expr e) { return bin(BinOp::Sub, unary(UnOp::Exp, std::move(e)), K(1)); };
  if (op == "Sign") {
    Expr s = select(gt(x, K(0)), K(1), select(lt(x, K(0)), K(-1), K(0)));
    if (is_float(t)) s = select(unary(UnOp::IsNaN, x), x, s);
    return done(s);
  }
  // x < 0 is false for NaN, so Relu keeps NaN (the reference's form).
  if (op == "Relu") return done(select(lt(x, K(0)), K(0), x));
  if (op == "Sigmoid") return done(unary(UnOp::Sigmoid, x));
  if (op == "Softsign") return done(bin(BinOp::Div, x, bin(BinOp::Add, K(1), unary(UnOp::Abs, x))));
  if (op == "Softplus") {
    auto log1p = [&](Expr e) { return call("log1p", c, {std::move(e)}); };
    return done(select(gt(x, K(0)), bin(BinOp::Add, x, log1p(unary(UnOp::Exp, unary(UnOp::Neg, x)))),
                       log1p(unary(UnOp::Exp, x))));
  }
  if (op == "HardSwish") {
    Expr v = bin(BinOp::Add, bin(BinOp::Mul, K(1.0 / 6.0), x), K(0.5));
    return done(bin(BinOp::Mul, x, bin(BinOp::Max, K(0), bin(BinOp::Min, K(1), v))));
  }
  if (op == "LeakyRelu") {
    const double alpha = n.attr_float("alpha", 0.01f);
    return done(select(lt(x, K(0)), bin(BinOp::Mul, K(alpha), x), x));
  }
  if (op == "Elu") {
    const double alpha = n.attr_float("alpha", 1.0f);
    return done(select(lt(x, K(0)), bin(BinOp::Mul, expm1(x), K(alpha)), x));
  }
  if (op == "Selu") {
    const double alpha = n.attr_float("alpha", 1.67326319217681884765625f);
    const double gamma = n.attr_float("gamma", 1.05070102214813232421875f);
    return done(select(gt(x, K(0)), bin(BinOp::Mul, x, K(gamma)),
                       bin(BinOp::Mul, bin(BinOp::Mul, expm1(x), K(alpha)), K(gamma))));
  }
  if (op == "Celu") {
    Expr a = K(n.attr_float("alpha", 1.0f));
    return done(bin(BinOp::Add, bin(BinOp::Max, K(0), x),
                    bin(BinOp::Min, K(0), bin(BinOp::Mul, a, expm1(bin(BinOp::Div, x, a))))));
  }
  if (op == "HardSigmoid") {
    Expr v = bin(BinOp::Add, bin(BinOp::Mul, K(n.attr_float("alpha", 0.2f)), x), K(n.attr_float("beta", 0.5f)));
    return done(bin(BinOp::Max, K(0), bin(BinOp::Min, K(1), v)));
  }
  if (op == "ThresholdedRelu") return done(select(gt(x, K(n.attr_float("alpha", 1.0f))), x, K(0)));
  if (op == "Shrink") {
    const double lambd = n.attr_float("lambd", 0.5f), bias = n.attr_float("bias", 0.0f);
    // Integers compare and offset in double and convert back (saturating), as the reference.
    const DType sc = is_integer(t) ? DType::Float64 : c;
    Expr xs = cast(sc, x);
    auto S = [&](double v) { return imm(v, sc); };
    Expr r = select(lt(xs, unary(UnOp::Neg, S(lambd))), bin(BinOp::Add, xs, S(bias)),
                    select(gt(xs, S(lambd)), bin(BinOp::Sub, xs, S(bias)), S(0)));
    return cast(t, r);
  }
  KILN_CHECK(false, "elementwise op ", op, " passed the support check but has no lowering");
}

}  // namespace kiln::loop::detail
