// Elementwise reference kernels: expected values are from the ONNX spec's examples or worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "op_test_util.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;

template <class T>
Tensor vec(std::vector<T> v) {
  Shape s{int64_t(v.size())};
  return Tensor::from_vector<T>(v, s);
}

Tensor run1(const std::string& op, const std::vector<Tensor>& in, AttributeMap attrs = {}) {
  return run_op(op, in, std::move(attrs)).at(0);
}

std::vector<float> fvals(const Tensor& t) { return values<float>(t); }

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- unary ----

TEST(ElementwiseUnary, ReluKeepsNaNAndSupportsInts) {
  auto y = fvals(run1("Relu", {vec<float>({-1, 0, 2, kNaN})}));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(values<int32_t>(run1("Relu", {vec<int32_t>({-5, 7})})), (std::vector<int32_t>{0, 7}));
  EXPECT_THROW(run1("Relu", {vec<uint8_t>({1})}), UserError);
}

TEST(ElementwiseUnary, AbsNegSign) {
  EXPECT_EQ(values<int8_t>(run1("Abs", {vec<int8_t>({-128, -3, 5})})), (std::vector<int8_t>{-128, 3, 5}));
  EXPECT_EQ(fvals(run1("Abs", {vec<float>({-1.5f, 2})})), (std::vector<float>{1.5f, 2}));
  EXPECT_EQ(values<int32_t>(run1("Neg", {vec<int32_t>({INT32_MIN, 4})})), (std::vector<int32_t>{INT32_MIN, -4}));
  EXPECT_THROW(run1("Neg", {vec<uint8_t>({1})}), UserError);  // the spec has no unsigned Neg
  EXPECT_EQ(values<int32_t>(run1("Sign", {vec<int32_t>({-5, 0, 7})})), (std::vector<int32_t>{-1, 0, 1}));
  auto s = fvals(run1("Sign", {vec<float>({-0.5f, 0, 3, kNaN})}));
  EXPECT_EQ(s[0], -1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_TRUE(std::isnan(s[3]));
}

TEST(ElementwiseUnary, MathFunctionsComputeInFloat) {
  EXPECT_EQ(fvals(run1("Sqrt", {vec<float>({4, 0.25f})})), (std::vector<float>{2, 0.5f}));
  EXPECT_EQ(fvals(run1("Reciprocal", {vec<float>({2, 0.5f, 0})})), (std::vector<float>{0.5f, 2, kInf}));
  EXPECT_EQ(fvals(run1("Exp", {vec<float>({0, 1.5f})})), (std::vector<float>{1, std::exp(1.5f)}));
  EXPECT_EQ(fvals(run1("Log", {vec<float>({1, 0})})), (std::vector<float>{0, -kInf}));
  EXPECT_EQ(fvals(run1("Atan", {vec<float>({1})}))[0], std::atan(1.0f));
  EXPECT_EQ(fvals(run1("Cos", {vec<float>({0})}))[0], 1.0f);
  EXPECT_EQ(fvals(run1("Tanh", {vec<float>({0})}))[0], 0.0f);
  EXPECT_EQ(fvals(run1("Sigmoid", {vec<float>({0, -200})})), (std::vector<float>{0.5f, 0.0f}));
  EXPECT_EQ(values<double>(run1("Exp", {vec<double>({1.0})}))[0], std::exp(1.0));
  EXPECT_TRUE(std::isnan(fvals(run1("Acosh", {vec<float>({0.5f})}))[0]));
  EXPECT_THROW(run1("Sqrt", {vec<int32_t>({4})}), UserError);
}

TEST(ElementwiseUnary, Float16ComputesInFloatAndRoundsBack) {
  Tensor x = Tensor::from_vector<Half>({Half(1.0f), Half(-2.0f)}, {2});
  Tensor y = run1("Exp", {x});
  ASSERT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(y.data<Half>()[0].bits, Half(std::exp(1.0f)).bits);
  EXPECT_EQ(y.data<Half>()[1].bits, Half(std::exp(-2.0f)).bits);
}

TEST(ElementwiseUnary, ErfOnIntegersTruncates) {
  EXPECT_EQ(fvals(run1("Erf", {vec<float>({0})}))[0], 0.0f);
  EXPECT_EQ(values<int32_t>(run1("Erf", {vec<int32_t>({0, 3, -3})})), (std::vector<int32_t>{0, 0, 0}));
}

TEST(ElementwiseUnary, RoundHalvesToEvenFloorCeil) {
  auto r = fvals(run1("Round", {vec<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, 2.6f, -2.6f})}));
  EXPECT_EQ(r, (std::vector<float>{0, 2, 2, -0.0f, -2, 2, 3, -3}));
  EXPECT_TRUE(std::signbit(r[3]));
  EXPECT_EQ(fvals(run1("Floor", {vec<float>({-1.5f, 1.2f})})), (std::vector<float>{-2, 1}));
  EXPECT_EQ(fvals(run1("Ceil", {vec<float>({-1.5f, 1.2f})})), (std::vector<float>{-1, 2}));
}

TEST(ElementwiseUnary, ActivationsWithAttributes) {
  EXPECT_EQ(fvals(run1("LeakyRelu", {vec<float>({-1, 2})})), (std::vector<float>{-0.01f, 2}));
  EXPECT_EQ(fvals(run1("LeakyRelu", {vec<float>({-1, 2})}, {{"alpha", 0.5f}})), (std::vector<float>{-0.5f, 2}));
  // Spec examples: Elu alpha=2 on [-1,0,1]; Selu alpha=2, gamma=3.
  auto elu = fvals(run1("Elu", {vec<float>({-1, 0, 1})}, {{"alpha", 2.0f}}));
  EXPECT_FLOAT_EQ(elu[0], -1.2642411f);
  EXPECT_EQ(elu[1], 0.0f);
  EXPECT_EQ(elu[2], 1.0f);
  auto selu = fvals(run1("Selu", {vec<float>({-1, 0, 1})}, {{"alpha", 2.0f}, {"gamma", 3.0f}}));
  EXPECT_FLOAT_EQ(selu[0], -3.7927232f);
  EXPECT_EQ(selu[1], 0.0f);
  EXPECT_EQ(selu[2], 3.0f);
  auto selu_default = fvals(run1("Selu", {vec<float>({1})}));
  EXPECT_FLOAT_EQ(selu_default[0], 1.0507010f);
  auto celu = fvals(run1("Celu", {vec<float>({-2, 3})}, {{"alpha", 2.0f}}));
  EXPECT_FLOAT_EQ(celu[0], 2.0f * (std::exp(-1.0f) - 1.0f));
  EXPECT_EQ(celu[1], 3.0f);
  EXPECT_THROW(run1("Celu", {vec<float>({1})}, {{"alpha", 0.0f}}), UserError);
  auto hs = fvals(run1("HardSigmoid", {vec<float>({-1, 0, 1})}, {{"alpha", 0.5f}, {"beta", 0.6f}}));
  EXPECT_FLOAT_EQ(hs[0], 0.1f);
  EXPECT_FLOAT_EQ(hs[1], 0.6f);
  EXPECT_EQ(hs[2], 1.0f);
  EXPECT_EQ(fvals(run1("HardSigmoid", {vec<float>({-10, 0, 10})})), (std::vector<float>{0, 0.5f, 1}));
  auto hw = fvals(run1("HardSwish", {vec<float>({-4, 0, 1, 3, 4})}));
  EXPECT_EQ(hw[0], 0.0f);
  EXPECT_EQ(hw[1], 0.0f);
  EXPECT_FLOAT_EQ(hw[2], 2.0f / 3.0f);
  EXPECT_EQ(hw[3], 3.0f);
  EXPECT_EQ(hw[4], 4.0f);
  EXPECT_EQ(fvals(run1("ThresholdedRelu", {vec<float>({-1, 0, 1.5f, 2, 2.5f})}, {{"alpha", 2.0f}})),
            (std::vector<float>{0, 0, 0, 0, 2.5f}));
  EXPECT_EQ(fvals(run1("ThresholdedRelu", {vec<float>({1, 1.5f})})), (std::vector<float>{0, 1.5f}));
}

TEST(ElementwiseUnary, SoftplusSoftsign) {
  auto sp = fvals(run1("Softplus", {vec<float>({-1, 0, 1, 100})}));
  EXPECT_FLOAT_EQ(sp[0], 0.31326166f);
  EXPECT_FLOAT_EQ(sp[1], 0.69314718f);
  EXPECT_FLOAT_EQ(sp[2], 1.31326163f);
  EXPECT_EQ(sp[3], 100.0f);  // log(exp(100) + 1) would overflow float
  EXPECT_EQ(fvals(run1("Softsign", {vec<float>({-1, 0, 3})})), (std::vector<float>{-0.5f, 0, 0.75f}));
}

TEST(ElementwiseUnary, Shrink) {
  auto x = vec<float>({-2, -1, 0, 1, 2});
  EXPECT_EQ(fvals(run1("Shrink", {x}, {{"lambd", 1.5f}})), (std::vector<float>{-2, 0, 0, 0, 2}));
  EXPECT_EQ(fvals(run1("Shrink", {x}, {{"lambd", 1.5f}, {"bias", 1.5f}})),
            (std::vector<float>{-0.5f, 0, 0, 0, 0.5f}));
  EXPECT_EQ(values<int8_t>(run1("Shrink", {vec<int8_t>({-5, 0, 5})}, {{"lambd", 1.0f}, {"bias", 2.0f}})),
            (std::vector<int8_t>{-3, 0, 3}));
}

TEST(ElementwiseUnary, PredicatesAndNot) {
  auto x = vec<float>({1, kNaN, kInf, -kInf});
  EXPECT_EQ(values<bool>(run1("IsNaN", {x})), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values<bool>(run1("IsInf", {x})), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<bool>(run1("IsInf", {x}, {{"detect_negative", int64_t(0)}})),
            (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(values<bool>(run1("IsInf", {x}, {{"detect_positive", int64_t(0)}})),
            (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(values<bool>(run1("Not", {vec<bool>({true, false})})), (std::vector<bool>{false, true}));
  EXPECT_THROW(run1("Not", {vec<float>({1})}), UserError);
  EXPECT_THROW(run1("IsNaN", {vec<int32_t>({1})}), UserError);
}

// ---- binary arithmetic ----

TEST(ElementwiseBinary, AddBroadcasts) {
  auto a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = run1("Add", {a, vec<float>({10, 20, 30})});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(fvals(y), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor outer = run1("Add", {Tensor::from_vector<float>({1, 2}, {2, 1}), Tensor::from_vector<float>({10, 20, 30}, {1, 3})});
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  EXPECT_EQ(fvals(outer), (std::vector<float>{11, 21, 31, 12, 22, 32}));
  Tensor scalar = run1("Add", {Tensor::scalar<float>(1), a});
  EXPECT_EQ(fvals(scalar), (std::vector<float>{2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(run1("Add", {Tensor::scalar<float>(1), Tensor::scalar<float>(2)}).shape(), Shape{});
  EXPECT_EQ(run1("Add", {Tensor(DType::Float32, {0, 3}), vec<float>({1, 2, 3})}).shape(), (Shape{0, 3}));
  EXPECT_THROW(run1("Add", {a, vec<float>({1, 2})}), UserError);
  EXPECT_THROW(run1("Add", {a, vec<int32_t>({1, 2, 3})}), UserError);
  EXPECT_THROW(run1("Add", {vec<bool>({true}), vec<bool>({true})}), UserError);
  EXPECT_THROW(run1("Add", {a}), UserError);
}

// Every broadcast pattern the row walker distinguishes, against index arithmetic.
TEST(ElementwiseBinary, BroadcastMatchesIndexMath) {
  std::vector<float> av(24), bv(3);
  for (int i = 0; i < 24; ++i) av[size_t(i)] = float(i);
  for (int i = 0; i < 3; ++i) bv[size_t(i)] = float(100 * (i + 1));
  Tensor a = Tensor::from_vector<float>(av, {2, 3, 4});
  auto y = fvals(run1("Sub", {a, Tensor::from_vector<float>(bv, {3, 1})}));
  auto z = fvals(run1("Sub", {Tensor::from_vector<float>(bv, {3, 1}), a}));
  Tensor c = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 4});
  auto w = fvals(run1("Mul", {Tensor::from_vector<float>(bv, {1, 3, 1}), c}));  // -> [1,3,4]
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        size_t idx = size_t((i * 3 + j) * 4 + k);
        EXPECT_EQ(y[idx], av[idx] - bv[size_t(j)]);
        EXPECT_EQ(z[idx], bv[size_t(j)] - av[idx]);
        if (i == 0) {
          EXPECT_EQ(w[size_t(j * 4 + k)], bv[size_t(j)] * float(k + 1));
        }
      }
}

TEST(ElementwiseBinary, IntegerArithmeticWraps) {
  EXPECT_EQ(values<int32_t>(run1("Add", {vec<int32_t>({INT32_MAX}), vec<int32_t>({1})})),
            (std::vector<int32_t>{INT32_MIN}));
  EXPECT_EQ(values<uint8_t>(run1("Add", {vec<uint8_t>({250}), vec<uint8_t>({10})})), (std::vector<uint8_t>{4}));
  EXPECT_EQ(values<uint8_t>(run1("Sub", {vec<uint8_t>({1}), vec<uint8_t>({2})})), (std::vector<uint8_t>{255}));
  EXPECT_EQ(values<uint16_t>(run1("Mul", {vec<uint16_t>({65535}), vec<uint16_t>({65535})})),
            (std::vector<uint16_t>{1}));
  EXPECT_EQ(values<int64_t>(run1("Mul", {vec<int64_t>({-3, INT64_MAX}), vec<int64_t>({4, 2})})),
            (std::vector<int64_t>{-12, -2}));
}

TEST(ElementwiseBinary, DivTruncatesAndDividesByZeroToZero) {
  EXPECT_EQ(values<int32_t>(run1("Div", {vec<int32_t>({7, -7, 7, -7, 5, INT32_MIN}), vec<int32_t>({2, 2, -2, -2, 0, -1})})),
            (std::vector<int32_t>{3, -3, -3, 3, 0, INT32_MIN}));
  EXPECT_EQ(values<uint8_t>(run1("Div", {vec<uint8_t>({7, 9}), vec<uint8_t>({2, 0})})), (std::vector<uint8_t>{3, 0}));
  EXPECT_EQ(fvals(run1("Div", {vec<float>({1, -1, 3}), vec<float>({0, 0, 4})})), (std::vector<float>{kInf, -kInf, 0.75f}));
}

TEST(ElementwiseBinary, Mod) {
  auto x = vec<int64_t>({-4, 7, 5, 4, -7, 8}), y = vec<int64_t>({2, -3, 8, -2, 3, 5});
  EXPECT_EQ(values<int64_t>(run1("Mod", {x, y})), (std::vector<int64_t>{0, -2, 5, 0, 2, 3}));  // numpy.mod
  EXPECT_EQ(values<int64_t>(run1("Mod", {x, y}, {{"fmod", int64_t(1)}})), (std::vector<int64_t>{0, 1, 5, 0, -1, 3}));
  EXPECT_EQ(values<int32_t>(run1("Mod", {vec<int32_t>({5, INT32_MIN}), vec<int32_t>({0, -1})})),
            (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(values<uint8_t>(run1("Mod", {vec<uint8_t>({4, 7, 5}), vec<uint8_t>({2, 3, 8})})),
            (std::vector<uint8_t>{0, 1, 5}));
  auto fx = vec<float>({-4.3f, 7.2f}), fy = vec<float>({2.1f, -3.4f});
  EXPECT_EQ(fvals(run1("Mod", {fx, fy}, {{"fmod", int64_t(1)}})),
            (std::vector<float>{std::fmod(-4.3f, 2.1f), std::fmod(7.2f, -3.4f)}));
  EXPECT_THROW(run1("Mod", {fx, fy}), UserError);  // floats need fmod=1
  EXPECT_THROW(run1("Mod", {x, y}, {{"fmod", int64_t(2)}}), UserError);
}

TEST(ElementwiseBinary, PowMixedTypes) {
  EXPECT_EQ(fvals(run1("Pow", {vec<float>({1, 2, 3}), vec<float>({4, 5, 6})})), (std::vector<float>{1, 32, 729}));
  EXPECT_EQ(fvals(run1("Pow", {vec<float>({1, 2, 3}), Tensor::scalar<float>(2)})), (std::vector<float>{1, 4, 9}));
  EXPECT_EQ(fvals(run1("Pow", {vec<float>({2, 4}), vec<int64_t>({-1, 3})})), (std::vector<float>{0.5f, 64}));
  EXPECT_EQ(values<int64_t>(run1("Pow", {vec<int64_t>({1, 2, 3}), vec<float>({4, 5, 6})})),
            (std::vector<int64_t>{1, 32, 729}));
  EXPECT_EQ(values<int32_t>(run1("Pow", {vec<int32_t>({2, 3}), vec<float>({0.5f, 2.5f})})),
            (std::vector<int32_t>{1, 15}));  // truncated
  EXPECT_EQ(values<int32_t>(run1("Pow", {vec<int32_t>({2, -3, 2, -1, 1}), vec<int32_t>({10, 3, -1, -3, -5})})),
            (std::vector<int32_t>{1024, -27, 0, -1, 1}));
  EXPECT_EQ(values<int64_t>(run1("Pow", {vec<int64_t>({2}), vec<uint64_t>({62})})), (std::vector<int64_t>{int64_t(1) << 62}));
  Tensor p = run1("Pow", {vec<float>({2}), vec<uint8_t>({3})});
  EXPECT_EQ(p.dtype(), DType::Float32);
  EXPECT_THROW(run1("Pow", {vec<int8_t>({2}), vec<int8_t>({2})}), UserError);
}

TEST(ElementwiseBinary, VariadicSpecExamples) {
  auto d0 = vec<float>({3, 0, 2}), d1 = vec<float>({1, 3, 4}), d2 = vec<float>({2, 6, 6});
  EXPECT_EQ(fvals(run1("Sum", {d0, d1, d2})), (std::vector<float>{6, 9, 12}));
  EXPECT_EQ(fvals(run1("Mean", {d0, d1, d2})), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(fvals(run1("Max", {d0, d1, d2})), (std::vector<float>{3, 6, 6}));
  EXPECT_EQ(fvals(run1("Min", {d0, d1, d2})), (std::vector<float>{1, 0, 2}));
  EXPECT_EQ(fvals(run1("Sum", {d0})), (std::vector<float>{3, 0, 2}));
  EXPECT_EQ(fvals(run1("Mean", {d0, d1})), (std::vector<float>{2, 1.5f, 3}));
  Tensor b = run1("Max", {Tensor::scalar<float>(2.5f), d0, Tensor::from_vector<float>({0, 10}, {2, 1})});
  EXPECT_EQ(b.shape(), (Shape{2, 3}));
  EXPECT_EQ(fvals(b), (std::vector<float>{3, 2.5f, 2.5f, 10, 10, 10}));
  EXPECT_EQ(values<int8_t>(run1("Min", {vec<int8_t>({-5, 5}), vec<int8_t>({3, 3})})), (std::vector<int8_t>{-5, 3}));
  EXPECT_EQ(values<uint64_t>(run1("Max", {vec<uint64_t>({UINT64_MAX, 1}), vec<uint64_t>({3, 3})})),
            (std::vector<uint64_t>{UINT64_MAX, 3}));
  EXPECT_TRUE(std::isnan(fvals(run1("Max", {vec<float>({1}), vec<float>({kNaN})}))[0]));
  EXPECT_TRUE(std::isnan(fvals(run1("Min", {vec<float>({kNaN}), vec<float>({1})}))[0]));
  EXPECT_THROW(run1("Sum", {vec<int32_t>({1}), vec<int32_t>({1})}), UserError);
  EXPECT_THROW(run1("Max", {}), UserError);
  EXPECT_THROW(run1("Max", {d0, vec<double>({1, 2, 3})}), UserError);
}

TEST(ElementwiseBinary, PRelu) {
  auto x = Tensor::from_vector<float>({-1, 2, -3, 4, -5, 6}, {2, 3});
  EXPECT_EQ(fvals(run1("PRelu", {x, vec<float>({0.5f, 1, 2})})), (std::vector<float>{-0.5f, 2, -6, 4, -5, 6}));
  EXPECT_EQ(fvals(run1("PRelu", {x, Tensor::scalar<float>(0.25f)})), (std::vector<float>{-0.25f, 2, -0.75f, 4, -1.25f, 6}));
  EXPECT_EQ(values<int64_t>(run1("PRelu", {vec<int64_t>({-2, 3}), vec<int64_t>({3})})), (std::vector<int64_t>{-6, 3}));
  EXPECT_THROW(run1("PRelu", {vec<float>({1, 2, 3}), x}), UserError);  // slope larger than X
  EXPECT_THROW(run1("PRelu", {vec<int8_t>({1}), vec<int8_t>({1})}), UserError);
}

// ---- comparisons, logic, Where ----

TEST(ElementwiseCompare, ComparisonsBroadcastToBool) {
  auto a = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  auto b = vec<int32_t>({2, 3});
  EXPECT_EQ(values<bool>(run1("Equal", {a, b})), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(values<bool>(run1("Less", {a, b})), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(values<bool>(run1("LessOrEqual", {a, b})), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(values<bool>(run1("Greater", {a, b})), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<bool>(run1("GreaterOrEqual", {a, vec<int32_t>({3})})), (std::vector<bool>{false, false, true, true}));
  Tensor eq = run1("Equal", {vec<float>({1, kNaN}), vec<float>({1, kNaN})});
  EXPECT_EQ(eq.dtype(), DType::Bool);
  EXPECT_EQ(values<bool>(eq), (std::vector<bool>{true, false}));
  EXPECT_EQ(values<bool>(run1("Equal", {vec<bool>({true, false}), vec<bool>({true, true})})),
            (std::vector<bool>{true, false}));
  Tensor h = Tensor::from_vector<Half>({Half(1.5f), Half(-2.0f)}, {2});
  EXPECT_EQ(values<bool>(run1("Greater", {h, Tensor::scalar<Half>(Half(0.0f))})), (std::vector<bool>{true, false}));
  EXPECT_THROW(run1("Less", {vec<bool>({true}), vec<bool>({false})}), UserError);
  EXPECT_THROW(run1("Less", {vec<float>({1}), vec<double>({1})}), UserError);
}

TEST(ElementwiseCompare, LogicalOps) {
  auto a = vec<bool>({false, false, true, true}), b = vec<bool>({false, true, false, true});
  EXPECT_EQ(values<bool>(run1("And", {a, b})), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(values<bool>(run1("Or", {a, b})), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(values<bool>(run1("Xor", {a, b})), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(run1("And", {Tensor::from_vector<bool>({true, false}, {2, 1}), b}).shape(), (Shape{2, 4}));
  EXPECT_THROW(run1("And", {vec<int32_t>({1}), vec<int32_t>({1})}), UserError);
}

TEST(ElementwiseCompare, WhereBroadcastsAllThree) {
  auto cond = Tensor::from_vector<bool>({true, false}, {2, 1});
  auto x = Tensor::from_vector<int64_t>({1, 2, 3}, {1, 3});
  Tensor y = run1("Where", {cond, x, Tensor::scalar<int64_t>(-1)});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{1, 2, 3, -1, -1, -1}));
  // Spec example.
  auto c2 = Tensor::from_vector<bool>({true, false, true, true}, {2, 2});
  auto x2 = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}), y2 = Tensor::from_vector<float>({9, 8, 7, 6}, {2, 2});
  EXPECT_EQ(fvals(run1("Where", {c2, x2, y2})), (std::vector<float>{1, 8, 3, 4}));
  EXPECT_EQ(values<bool>(run1("Where", {vec<bool>({false}), vec<bool>({true}), vec<bool>({false})})),
            (std::vector<bool>{false}));
  EXPECT_THROW(run1("Where", {vec<int32_t>({1}), x2, y2}), UserError);
  EXPECT_THROW(run1("Where", {c2, x2, vec<double>({1})}), UserError);
  EXPECT_THROW(run1("Where", {c2, x2, vec<float>({1, 2, 3})}), UserError);
}

// ---- Clip ----

TEST(ElementwiseClip, OptionalBounds) {
  auto x = vec<float>({-6, -1, 0, 1, 6, kNaN, -kInf});
  auto y = fvals(run1("Clip", {x, Tensor::scalar<float>(-5), Tensor::scalar<float>(5)}));
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 5), (std::vector<float>{-5, -1, 0, 1, 5}));
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_EQ(y[6], -5.0f);
  auto none = fvals(run1("Clip", {x}));
  EXPECT_EQ(none[6], -kInf);  // no bound means no clamping, not ±FLT_MAX
  EXPECT_EQ(fvals(run1("Clip", {vec<float>({-1, 2}), Tensor::scalar<float>(0)})), (std::vector<float>{0, 2}));
  EXPECT_EQ(fvals(run1("Clip", {vec<float>({-1, 2}), Tensor{}, Tensor::scalar<float>(0)})), (std::vector<float>{-1, 0}));
  // min > max: everything becomes max.
  EXPECT_EQ(fvals(run1("Clip", {vec<float>({-1, 0, 9}), Tensor::scalar<float>(2), Tensor::scalar<float>(1)})),
            (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(values<int8_t>(run1("Clip", {vec<int8_t>({-128, 0, 127}), Tensor::scalar<int8_t>(-1), Tensor::scalar<int8_t>(1)})),
            (std::vector<int8_t>{-1, 0, 1}));
  EXPECT_EQ(values<int8_t>(run1("Clip", {vec<int8_t>({-128, 0, 127}), Tensor{}, Tensor::scalar<int8_t>(0)})),
            (std::vector<int8_t>{-128, 0, 0}));
  EXPECT_THROW(run1("Clip", {vec<float>({1}), vec<float>({0, 1})}), UserError);
  EXPECT_THROW(run1("Clip", {vec<float>({1}), Tensor::scalar<double>(0)}), UserError);
  EXPECT_THROW(run1("Clip", {vec<bool>({true})}), UserError);
}

// ---- Cast / CastLike ----

TEST(ElementwiseCast, NumericConversions) {
  auto x = vec<float>({1.7f, -1.7f, 0, kNaN});
  EXPECT_EQ(values<int32_t>(run1("Cast", {x}, {{"to", int64_t(6)}})), (std::vector<int32_t>{1, -1, 0, 0}));
  EXPECT_EQ(values<bool>(run1("Cast", {x}, {{"to", int64_t(9)}})), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(values<double>(run1("Cast", {x}, {{"to", int64_t(11)}}))[0], double(1.7f));
  EXPECT_EQ(fvals(run1("Cast", {vec<bool>({true, false})}, {{"to", int64_t(1)}})), (std::vector<float>{1, 0}));
  EXPECT_EQ(values<uint8_t>(run1("Cast", {vec<int32_t>({256, 300})}, {{"to", int64_t(2)}})),
            (std::vector<uint8_t>{0, 44}));  // integer narrowing wraps
  Tensor h = run1("Cast", {vec<float>({1.0f + 1.0f / 4096})}, {{"to", int64_t(10)}});
  ASSERT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(float(h.data<Half>()[0]), 1.0f);  // ties to even
  Tensor b = run1("Cast", {vec<float>({3.0f})}, {{"to", int64_t(16)}});
  ASSERT_EQ(b.dtype(), DType::BFloat16);
  EXPECT_EQ(float(b.data<BFloat16>()[0]), 3.0f);
  // float16 300 saturates into int8 instead of overflowing.
  Tensor hi = Tensor::from_vector<Half>({Half(300.0f), Half(-2.5f)}, {2});
  EXPECT_EQ(values<int8_t>(run1("Cast", {hi}, {{"to", int64_t(3)}})), (std::vector<int8_t>{127, -2}));
}

TEST(ElementwiseCast, DoubleToHalfRoundsOnce) {
  // 1 + 2^-11 + 2^-40 is just above the halfway point between float16 1 and 1 + 2^-10; rounding
  // to float first would drop the 2^-40 and then tie to even (1.0).
  double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor h = run1("Cast", {vec<double>({d, -d, 1e10, 1e-30})}, {{"to", int64_t(10)}});
  EXPECT_EQ(float(h.data<Half>()[0]), 1.0f + 1.0f / 1024);
  EXPECT_EQ(float(h.data<Half>()[1]), -(1.0f + 1.0f / 1024));
  EXPECT_EQ(float(h.data<Half>()[2]), kInf);
  EXPECT_EQ(float(h.data<Half>()[3]), 0.0f);
}

TEST(ElementwiseCast, ErrorsAndCastLike) {
  auto x = vec<float>({1.5f});
  EXPECT_THROW(run1("Cast", {x}), UserError);                          // `to` is required
  EXPECT_THROW(run1("Cast", {x}, {{"to", int64_t(8)}}), UserError);    // STRING
  EXPECT_EQ(run1("Cast", {x}, {{"to", int64_t(1)}}).dtype(), DType::Float32);
  Tensor y = run1("CastLike", {vec<int32_t>({3, -4}), vec<double>({0})});
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_EQ(values<double>(y), (std::vector<double>{3, -4}));
}

}  // namespace
}  // namespace kiln
