// Reduce* reference kernels: expected values from the ONNX spec examples or computed by hand, plus
// a brute-force cross-check of the axis-merging walk over every axis subset.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "reference/op_registry.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;

const float kInf = std::numeric_limits<float>::infinity();

Tensor axes(std::vector<int64_t> a) {
  int64_t n = int64_t(a.size());
  return Tensor::from_vector<int64_t>(a, {n});
}

// The spec's running example: [[[1,2],[3,4]],[[5,6],[7,8]],[[9,10],[11,12]]].
Tensor example() {
  return Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 2, 2});
}

Tensor reduce(const std::string& op, const Tensor& x, const Tensor& ax, AttributeMap attrs = {}) {
  return run_op(op, {x, ax}, std::move(attrs))[0];
}

TEST(ReduceSum, KeepDims) {
  Tensor y = reduce("ReduceSum", example(), axes({1}));
  EXPECT_EQ(y.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 6, 12, 14, 20, 22}));
}

TEST(ReduceSum, NoKeepDimsAndNegativeAxis) {
  Tensor y = reduce("ReduceSum", example(), axes({-2}), {{"keepdims", int64_t(0)}});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 6, 12, 14, 20, 22}));
}

TEST(ReduceSum, OuterAxisAndNonAdjacentAxes) {
  Tensor y0 = reduce("ReduceSum", example(), axes({0}), {{"keepdims", int64_t(0)}});
  EXPECT_EQ(y0.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y0), (std::vector<float>{15, 18, 21, 24}));
  Tensor y02 = reduce("ReduceSum", example(), axes({2, 0}), {{"keepdims", int64_t(0)}});
  EXPECT_EQ(y02.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(y02), (std::vector<float>{1 + 2 + 5 + 6 + 9 + 10, 3 + 4 + 7 + 8 + 11 + 12}));
}

TEST(ReduceSum, AbsentOrEmptyAxesReduceEverything) {
  for (const Tensor& ax : {Tensor{}, axes({})}) {
    Tensor y = reduce("ReduceSum", example(), ax);
    EXPECT_EQ(y.shape(), (Shape{1, 1, 1}));
    EXPECT_EQ(values<float>(y), (std::vector<float>{78}));
    Tensor s = reduce("ReduceSum", example(), ax, {{"keepdims", int64_t(0)}});
    EXPECT_EQ(s.shape(), Shape{});
    EXPECT_EQ(values<float>(s), (std::vector<float>{78}));
  }
}

TEST(ReduceSum, NoopWithEmptyAxesIsIdentity) {
  for (const Tensor& ax : {Tensor{}, axes({})}) {
    Tensor y = reduce("ReduceSum", example(), ax, {{"noop_with_empty_axes", int64_t(1)}, {"keepdims", int64_t(0)}});
    EXPECT_TRUE(y.bitwise_equal(example()));
  }
  // Non-empty axes still reduce.
  Tensor y = reduce("ReduceSum", example(), axes({1}), {{"noop_with_empty_axes", int64_t(1)}});
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 6, 12, 14, 20, 22}));
}

TEST(ReduceSum, IntegerHalfAndScalarInputs) {
  Tensor i = Tensor::from_vector<int32_t>({2000000000, 2000000000, -5, 7}, {2, 2});
  // Accumulated in 64 bits and wrapped back into int32 like int32 arithmetic would.
  EXPECT_EQ(values<int32_t>(reduce("ReduceSum", i, axes({1}), {{"keepdims", int64_t(0)}})),
            (std::vector<int32_t>{int32_t(4000000000LL - 4294967296LL), 2}));
  Tensor u = Tensor::from_vector<uint64_t>({1, 2, 3}, {3});
  EXPECT_EQ(values<uint64_t>(reduce("ReduceSum", u, Tensor{})), (std::vector<uint64_t>{6}));
  Tensor h = Tensor::from_vector<Half>({Half(0.5f), Half(1.5f), Half(2.0f)}, {3});
  Tensor yh = reduce("ReduceSum", h, Tensor{});
  EXPECT_EQ(yh.dtype(), DType::Float16);
  EXPECT_EQ(float(yh.data<Half>()[0]), 4.0f);
  Tensor b = Tensor::from_vector<BFloat16>({BFloat16(1.0f), BFloat16(3.0f)}, {2});
  EXPECT_EQ(float(reduce("ReduceMean", b, Tensor{}).data<BFloat16>()[0]), 2.0f);
  // A scalar reduces to itself; axis 0 / -1 are accepted for rank 0.
  Tensor s = Tensor::scalar<double>(2.5);
  for (const Tensor& ax : {Tensor{}, axes({0}), axes({-1})}) {
    Tensor y = reduce("ReduceSum", s, ax);
    EXPECT_EQ(y.shape(), Shape{});
    EXPECT_EQ(values<double>(y), (std::vector<double>{2.5}));
  }
}

TEST(ReduceMean, FloatAndIntegerTruncation) {
  Tensor y = reduce("ReduceMean", example(), axes({1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{2, 3, 6, 7, 10, 11}));
  Tensor i = Tensor::from_vector<int64_t>({1, 2, -1, -2}, {2, 2});
  // 3/2 -> 1 and -3/2 -> -1 (toward zero, as numpy's mean cast back to int).
  EXPECT_EQ(values<int64_t>(reduce("ReduceMean", i, axes({1}), {{"keepdims", int64_t(0)}})),
            (std::vector<int64_t>{1, -1}));
  Tensor d = Tensor::from_vector<double>({1, 2, 4}, {3});
  EXPECT_DOUBLE_EQ(values<double>(reduce("ReduceMean", d, Tensor{}))[0], 7.0 / 3.0);
}

// Spec example for ReduceMax/ReduceMin: [[[5,1],[20,2]],[[30,1],[40,2]],[[55,1],[60,2]]].
TEST(ReduceMaxMin, SpecExampleAndSmallTypes) {
  Tensor x = Tensor::from_vector<float>({5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2}, {3, 2, 2});
  EXPECT_EQ(values<float>(reduce("ReduceMax", x, axes({1}), {{"keepdims", int64_t(0)}})),
            (std::vector<float>{20, 2, 40, 2, 60, 2}));
  EXPECT_EQ(values<float>(reduce("ReduceMin", x, axes({1}), {{"keepdims", int64_t(0)}})),
            (std::vector<float>{5, 1, 30, 1, 55, 1}));
  EXPECT_EQ(values<float>(reduce("ReduceMax", x, Tensor{})), (std::vector<float>{60}));
  Tensor i8 = Tensor::from_vector<int8_t>({-128, 5, 127, -3}, {2, 2});
  EXPECT_EQ(values<int8_t>(reduce("ReduceMax", i8, axes({0}))), (std::vector<int8_t>{127, 5}));
  EXPECT_EQ(values<int8_t>(reduce("ReduceMin", i8, axes({0}))), (std::vector<int8_t>{-128, -3}));
  Tensor u8 = Tensor::from_vector<uint8_t>({200, 7}, {2});
  EXPECT_EQ(values<uint8_t>(reduce("ReduceMin", u8, Tensor{})), (std::vector<uint8_t>{7}));
  Tensor b = Tensor::from_vector<bool>({false, true, false, false}, {2, 2});
  EXPECT_EQ(values<bool>(reduce("ReduceMax", b, axes({1}))), (std::vector<bool>{true, false}));
  EXPECT_EQ(values<bool>(reduce("ReduceMin", b, axes({0}))), (std::vector<bool>{false, false}));
}

TEST(ReduceMaxMin, NaNPropagates) {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({1, nan, 3, 2, 5, nan}, {2, 3});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    auto y = values<float>(reduce(op, x, axes({1})));
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1])) << op;
  }
}

TEST(ReduceProd, SpecExample) {
  Tensor y = reduce("ReduceProd", example(), axes({1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{3, 8, 35, 48, 99, 120}));
  Tensor i = Tensor::from_vector<int32_t>({-2, 3, 4}, {3});
  EXPECT_EQ(values<int32_t>(reduce("ReduceProd", i, Tensor{})), (std::vector<int32_t>{-24}));
}

TEST(ReduceNorms, L1L2SumSquare) {
  Tensor y1 = reduce("ReduceL1", example(), axes({2}));
  EXPECT_EQ(y1.shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(values<float>(y1), (std::vector<float>{3, 7, 11, 15, 19, 23}));
  Tensor neg = Tensor::from_vector<float>({-1, 2, -3, 4}, {2, 2});
  EXPECT_EQ(values<float>(reduce("ReduceL1", neg, axes({1}))), (std::vector<float>{3, 7}));
  EXPECT_EQ(values<float>(reduce("ReduceSumSquare", example(), axes({2}))),
            (std::vector<float>{5, 25, 61, 113, 181, 265}));
  auto l2 = values<float>(reduce("ReduceL2", example(), axes({2})));
  std::vector<float> ss{5, 25, 61, 113, 181, 265};
  for (size_t k = 0; k < ss.size(); ++k) EXPECT_FLOAT_EQ(l2[k], std::sqrt(ss[k]));
  Tensor i = Tensor::from_vector<int32_t>({-3, 4, -7}, {3});
  EXPECT_EQ(values<int32_t>(reduce("ReduceL1", i, Tensor{})), (std::vector<int32_t>{14}));
  EXPECT_EQ(values<int32_t>(reduce("ReduceSumSquare", i, Tensor{})), (std::vector<int32_t>{74}));
  EXPECT_EQ(values<int32_t>(reduce("ReduceL2", i, axes({0}))), (std::vector<int32_t>{8}));  // sqrt(74) = 8.6
}

TEST(ReduceLog, LogSumAndStableLogSumExp) {
  auto ls = values<float>(reduce("ReduceLogSum", example(), axes({1, 2})));
  EXPECT_FLOAT_EQ(ls[0], std::log(10.0f));
  EXPECT_FLOAT_EQ(ls[1], std::log(26.0f));
  EXPECT_FLOAT_EQ(ls[2], std::log(42.0f));
  Tensor x = Tensor::from_vector<float>({1000, 1000, -1000, -1000, 0, std::log(3.0f), -kInf, -kInf}, {4, 2});
  auto lse = values<float>(reduce("ReduceLogSumExp", x, axes({1}), {{"keepdims", int64_t(0)}}));
  EXPECT_FLOAT_EQ(lse[0], 1000 + std::log(2.0f));  // exp(1000) would overflow
  EXPECT_FLOAT_EQ(lse[1], -1000 + std::log(2.0f));
  EXPECT_FLOAT_EQ(lse[2], std::log(4.0f));
  EXPECT_EQ(lse[3], -kInf);
  Tensor d = Tensor::from_vector<double>({1, 2, 3}, {3});
  EXPECT_DOUBLE_EQ(values<double>(reduce("ReduceLogSumExp", d, Tensor{}))[0],
                   std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
}

TEST(Reduce, EmptySetGivesIdentityElement) {
  Tensor x(DType::Float32, {2, 0, 3});
  auto one = [&](const char* op) {
    Tensor y = reduce(op, x, axes({1}));
    EXPECT_EQ(y.shape(), (Shape{2, 1, 3})) << op;
    auto v = values<float>(y);
    EXPECT_EQ(v.size(), 6u);
    return v[0];
  };
  EXPECT_EQ(one("ReduceSum"), 0.0f);
  EXPECT_EQ(one("ReduceProd"), 1.0f);
  EXPECT_EQ(one("ReduceMax"), -kInf);
  EXPECT_EQ(one("ReduceMin"), kInf);
  EXPECT_EQ(one("ReduceL1"), 0.0f);
  EXPECT_EQ(one("ReduceL2"), 0.0f);
  EXPECT_EQ(one("ReduceSumSquare"), 0.0f);
  EXPECT_EQ(one("ReduceLogSum"), -kInf);
  EXPECT_EQ(one("ReduceLogSumExp"), -kInf);
  EXPECT_TRUE(std::isnan(one("ReduceMean")));
  Tensor xi(DType::Int32, {0, 2});
  EXPECT_EQ(values<int32_t>(reduce("ReduceMax", xi, axes({0}))), (std::vector<int32_t>{INT32_MIN, INT32_MIN}));
  EXPECT_EQ(values<int32_t>(reduce("ReduceMin", xi, axes({0}))), (std::vector<int32_t>{INT32_MAX, INT32_MAX}));
  EXPECT_EQ(values<int32_t>(reduce("ReduceMean", xi, axes({0}))), (std::vector<int32_t>{0, 0}));
  // Reducing a non-empty axis of an empty tensor gives an empty result.
  EXPECT_EQ(reduce("ReduceSum", x, axes({2})).shape(), (Shape{2, 0, 1}));
}

// Brute force: every subset of axes of a [2,3,1,4,5] tensor, both keepdims, checked against a
// direct per-element accumulation (integer data, so float sums are exact).
TEST(Reduce, AllAxisSubsetsMatchBruteForce) {
  Shape s{2, 3, 1, 4, 5};
  int64_t n = 2 * 3 * 4 * 5;
  std::vector<float> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[size_t(i)] = float((i * 37) % 23) - 11;
  Tensor x = Tensor::from_vector<float>(data, s);
  for (int mask = 1; mask < 32; ++mask) {
    std::vector<int64_t> ax;
    for (int d = 0; d < 5; ++d)
      if (mask & (1 << d)) ax.push_back(d);
    // Expected: output index = input index with reduced dims zeroed, in the keepdims shape.
    Shape ks = s;
    for (int64_t d : ax) ks[size_t(d)] = 1;
    std::vector<float> sum(size_t(shape_numel(ks)), 0.0f), mx(sum.size(), -kInf);
    std::vector<int64_t> idx(5, 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t o = 0;
      for (int d = 0; d < 5; ++d) o = o * ks[size_t(d)] + (ks[size_t(d)] == 1 ? 0 : idx[size_t(d)]);
      sum[size_t(o)] += data[size_t(i)];
      mx[size_t(o)] = std::max(mx[size_t(o)], data[size_t(i)]);
      for (int d = 4; d >= 0 && ++idx[size_t(d)] == s[size_t(d)]; --d) idx[size_t(d)] = 0;
    }
    Tensor ys = reduce("ReduceSum", x, axes(ax));
    EXPECT_EQ(ys.shape(), ks) << "mask " << mask;
    EXPECT_EQ(values<float>(ys), sum) << "mask " << mask;
    Tensor ym = reduce("ReduceMax", x, axes(ax), {{"keepdims", int64_t(0)}});
    EXPECT_EQ(ym.rank(), 5 - int64_t(ax.size())) << "mask " << mask;
    EXPECT_EQ(values<float>(ym), mx) << "mask " << mask;
  }
}

TEST(Reduce, Errors) {
  EXPECT_THROW(reduce("ReduceSum", example(), axes({1, -2})), UserError);  // duplicate
  EXPECT_THROW(reduce("ReduceSum", example(), axes({3})), UserError);
  EXPECT_THROW(reduce("ReduceMean", example(), axes({-4})), UserError);
  EXPECT_THROW(reduce("ReduceSum", Tensor::scalar<float>(1), axes({1})), UserError);
  EXPECT_THROW(reduce("ReduceSum", example(), Tensor::from_vector<float>({1}, {1})), UserError);
  EXPECT_THROW(reduce("ReduceSum", example(), axes({1}), {{"keepdims", int64_t(2)}}), UserError);
  EXPECT_THROW(reduce("ReduceSum", example(), axes({}), {{"noop_with_empty_axes", int64_t(3)}}), UserError);
  // Type constraints: no 8/16-bit integers for sums, no bool except for max/min.
  EXPECT_THROW(reduce("ReduceSum", Tensor::from_vector<int8_t>({1}, {1}), Tensor{}), UserError);
  EXPECT_THROW(reduce("ReduceMean", Tensor::from_vector<bool>({true}, {1}), Tensor{}), UserError);
  EXPECT_THROW(reduce("ReduceMax", Tensor::from_vector<int16_t>({1}, {1}), Tensor{}), UserError);
  EXPECT_THROW(run_op("ReduceSum", {}), UserError);
}

TEST(Reduce, AxesAreShapeInputs) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "TopK"}) {
    const OpInfo* info = OpRegistry::global().find(op);
    ASSERT_NE(info, nullptr) << op;
    EXPECT_EQ(info->shape_inputs, std::vector<int>{1}) << op;
  }
}

}  // namespace
}  // namespace kiln
