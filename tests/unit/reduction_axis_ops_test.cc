// Single-axis reduction-family kernels: Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin, TopK, CumSum.
// Expected values are the ONNX spec examples or computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "reference/op_registry.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;
using testing::f32;
using testing::i64;


// softmax([1,2,3]) and log_softmax([1,2,3]).
const std::vector<float> kSoft123{0.09003057f, 0.24472847f, 0.66524096f};
const std::vector<float> kLogSoft123{-2.40760596f, -1.40760596f, -0.40760596f};

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(Softmax, LastAxisAndLargeNumbers) {
  Tensor y = run_op("Softmax", {f32({1, 2, 3, 1000, 1001, 1002}, {2, 3})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  auto v = values<float>(y);
  expect_near({v[0], v[1], v[2]}, kSoft123);
  expect_near({v[3], v[4], v[5]}, kSoft123);  // max subtraction keeps exp finite
  auto l = values<float>(run_op("LogSoftmax", {f32({1, 2, 3, 1000, 1001, 1002}, {2, 3})})[0]);
  expect_near({l[0], l[1], l[2]}, kLogSoft123, 1e-5f);
  expect_near({l[3], l[4], l[5]}, kLogSoft123, 1e-5f);
}

TEST(Softmax, MiddleAxisNormalisesThatAxisOnly) {
  // [2,3,2] with values along axis 1 being 1,2,3 for every (outer, inner) position.
  Tensor x = f32({1, 3, 2, 2, 3, 1, 3, 3, 2, 2, 1, 1}, {2, 3, 2});
  auto v = values<float>(run_op("Softmax", {x}, {{"axis", int64_t(1)}})[0]);
  const float a = kSoft123[0], b = kSoft123[1], c = kSoft123[2];
  expect_near(v, {a, c, b, b, c, a, c, c, b, b, a, a});
  auto n = values<float>(run_op("Softmax", {x}, {{"axis", int64_t(-2)}})[0]);
  expect_near(n, v, 0);
  // Opset 13: axis 0 of [2,3,2] normalises pairs, not the flattened tensor.
  auto z = values<float>(run_op("Softmax", {f32({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 3, 2})}, {{"axis", int64_t(0)}})[0]);
  for (float e : z) EXPECT_FLOAT_EQ(e, 0.5f);
}

TEST(Softmax, HalfDoubleAndScalar) {
  Tensor h = Tensor::from_vector<Half>({Half(1.0f), Half(2.0f), Half(3.0f)}, {3});
  Tensor yh = run_op("Softmax", {h})[0];
  EXPECT_EQ(yh.dtype(), DType::Float16);
  EXPECT_NEAR(float(yh.data<Half>()[2]), kSoft123[2], 1e-3f);
  Tensor d = Tensor::from_vector<double>({1, 2, 3}, {3});
  auto yd = values<double>(run_op("LogSoftmax", {d})[0]);
  EXPECT_NEAR(yd[0], -2.4076059644443806, 1e-14);
  EXPECT_EQ(values<float>(run_op("Softmax", {Tensor::scalar<float>(7)})[0]), (std::vector<float>{1}));
}

TEST(Softmax, Errors) {
  EXPECT_THROW(run_op("Softmax", {i64({1, 2}, {2})}), UserError);
  EXPECT_THROW(run_op("LogSoftmax", {f32({1, 2}, {2})}, {{"axis", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("Hardmax", {f32({1, 2}, {1, 2})}, {{"axis", int64_t(-3)}}), UserError);
}

TEST(Hardmax, SpecExampleAndTies) {
  Tensor x = f32({3, 0, 1, 2, 2, 5, 1, 0, 0, 1, 3, 2, 0, 1, 2, 3}, {4, 4});
  EXPECT_EQ(values<float>(run_op("Hardmax", {x})[0]),
            (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  // Ties: the first occurrence wins.
  EXPECT_EQ(values<float>(run_op("Hardmax", {f32({2, 2, 2, 1, 3, 3}, {2, 3})})[0]),
            (std::vector<float>{1, 0, 0, 0, 1, 0}));
  // axis 0 of [2,3]: column-wise.
  EXPECT_EQ(values<float>(run_op("Hardmax", {f32({1, 5, 3, 2, 5, 0}, {2, 3})}, {{"axis", int64_t(0)}})[0]),
            (std::vector<float>{0, 1, 1, 1, 0, 0}));
}

TEST(ArgMax, SpecExamples) {
  Tensor x = f32({2, 1, 3, 10}, {2, 2});
  Tensor y0 = run_op("ArgMax", {x})[0];  // default axis 0, keepdims 1
  EXPECT_EQ(y0.dtype(), DType::Int64);
  EXPECT_EQ(y0.shape(), (Shape{1, 2}));
  EXPECT_EQ(values<int64_t>(y0), (std::vector<int64_t>{1, 1}));
  Tensor y1 = run_op("ArgMax", {x}, {{"axis", int64_t(1)}, {"keepdims", int64_t(0)}})[0];
  EXPECT_EQ(y1.shape(), (Shape{2}));
  EXPECT_EQ(values<int64_t>(y1), (std::vector<int64_t>{0, 1}));
  Tensor yn = run_op("ArgMin", {x}, {{"axis", int64_t(-1)}})[0];
  EXPECT_EQ(yn.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(yn), (std::vector<int64_t>{1, 0}));
}

TEST(ArgMax, SelectLastIndexAndTypes) {
  Tensor x = f32({2, 2, 3, 10}, {2, 2});
  EXPECT_EQ(values<int64_t>(run_op("ArgMax", {x}, {{"axis", int64_t(1)}})[0]), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(values<int64_t>(run_op("ArgMax", {x}, {{"axis", int64_t(1)}, {"select_last_index", int64_t(1)}})[0]),
            (std::vector<int64_t>{1, 1}));
  Tensor m = Tensor::from_vector<int32_t>({4, 1, 1, 7, 4}, {5});
  EXPECT_EQ(values<int64_t>(run_op("ArgMin", {m})[0]), (std::vector<int64_t>{1}));
  EXPECT_EQ(values<int64_t>(run_op("ArgMin", {m}, {{"select_last_index", int64_t(1)}})[0]), (std::vector<int64_t>{2}));
  EXPECT_EQ(values<int64_t>(run_op("ArgMax", {m}, {{"select_last_index", int64_t(1)}})[0]), (std::vector<int64_t>{3}));
  Tensor u = Tensor::from_vector<uint8_t>({3, 250, 9}, {3});
  EXPECT_EQ(values<int64_t>(run_op("ArgMax", {u})[0]), (std::vector<int64_t>{1}));
  Tensor h = Tensor::from_vector<Half>({Half(-1.0f), Half(-3.0f)}, {2});
  EXPECT_EQ(values<int64_t>(run_op("ArgMin", {h})[0]), (std::vector<int64_t>{1}));
  float nan = std::numeric_limits<float>::quiet_NaN();
  // NaN counts as the maximum, as numpy's argmax.
  EXPECT_EQ(values<int64_t>(run_op("ArgMax", {f32({1, nan, 3}, {3})})[0]), (std::vector<int64_t>{1}));
}

TEST(ArgMax, Errors) {
  EXPECT_THROW(run_op("ArgMax", {f32({1, 2}, {2})}, {{"axis", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("ArgMax", {Tensor(DType::Float32, {0, 2})}), UserError);
  EXPECT_THROW(run_op("ArgMin", {Tensor::scalar<float>(1)}), UserError);
  EXPECT_THROW(run_op("ArgMin", {Tensor::from_vector<bool>({true}, {1})}), UserError);
  EXPECT_THROW(run_op("ArgMax", {f32({1, 2}, {2})}, {{"select_last_index", int64_t(2)}}), UserError);
}

std::vector<Tensor> topk(const Tensor& x, int64_t k, AttributeMap attrs = {}) {
  return run_op("TopK", {x, i64({k}, {1})}, std::move(attrs), 2);
}

TEST(TopK, SpecExamples) {
  Tensor x = f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  for (int64_t axis : {1, -1}) {
    auto r = topk(x, 3, {{"axis", axis}});
    EXPECT_EQ(r[0].shape(), (Shape{3, 3}));
    EXPECT_EQ(values<float>(r[0]), (std::vector<float>{3, 2, 1, 7, 6, 5, 11, 10, 9}));
    EXPECT_EQ(r[1].dtype(), DType::Int64);
    EXPECT_EQ(values<int64_t>(r[1]), (std::vector<int64_t>{3, 2, 1, 3, 2, 1, 3, 2, 1}));
  }
  Tensor s = f32({0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8}, {3, 4});
  auto r = topk(s, 3, {{"largest", int64_t(0)}, {"sorted", int64_t(1)}});
  EXPECT_EQ(values<float>(r[0]), (std::vector<float>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  EXPECT_EQ(values<int64_t>(r[1]), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 2, 1}));
}

TEST(TopK, TiesTakeLowerIndexFirst) {
  auto r = topk(f32({3, 1, 3, 2, 3}, {5}), 2);
  EXPECT_EQ(values<float>(r[0]), (std::vector<float>{3, 3}));
  EXPECT_EQ(values<int64_t>(r[1]), (std::vector<int64_t>{0, 2}));
  auto s = topk(Tensor::from_vector<int32_t>({5, 1, 4, 1}, {4}), 3, {{"largest", int64_t(0)}});
  EXPECT_EQ(values<int32_t>(s[0]), (std::vector<int32_t>{1, 1, 4}));
  EXPECT_EQ(values<int64_t>(s[1]), (std::vector<int64_t>{1, 3, 2}));
}

TEST(TopK, OuterAxisZeroKAndNaN) {
  // axis 0 of [3,2]: each column separately.
  auto r = topk(f32({1, 6, 5, 2, 3, 4}, {3, 2}), 2, {{"axis", int64_t(0)}});
  EXPECT_EQ(r[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(r[0]), (std::vector<float>{5, 6, 3, 4}));
  EXPECT_EQ(values<int64_t>(r[1]), (std::vector<int64_t>{1, 0, 2, 2}));
  auto z = topk(f32({1, 2}, {1, 2}), 0);
  EXPECT_EQ(z[0].shape(), (Shape{1, 0}));
  EXPECT_EQ(z[1].shape(), (Shape{1, 0}));
  float nan = std::numeric_limits<float>::quiet_NaN();
  auto n = topk(f32({1, nan, 3}, {3}), 2);
  EXPECT_TRUE(std::isnan(values<float>(n[0])[0]));
  EXPECT_EQ(values<int64_t>(n[1]), (std::vector<int64_t>{1, 2}));
  // k as a 0-D int32 tensor is accepted too.
  auto k0 = run_op("TopK", {f32({4, 9, 2}, {3}), Tensor::scalar<int32_t>(1)}, {}, 2);
  EXPECT_EQ(values<float>(k0[0]), (std::vector<float>{9}));
}

TEST(TopK, Errors) {
  Tensor x = f32({1, 2, 3}, {3});
  EXPECT_THROW(topk(x, 4), UserError);
  EXPECT_THROW(topk(x, -1), UserError);
  EXPECT_THROW(run_op("TopK", {x, i64({1, 2}, {2})}, {}, 2), UserError);
  EXPECT_THROW(run_op("TopK", {x, f32({1}, {1})}, {}, 2), UserError);
  EXPECT_THROW(run_op("TopK", {x}, {}, 2), UserError);
  EXPECT_THROW(topk(x, 1, {{"axis", int64_t(1)}}), UserError);
  EXPECT_THROW(topk(x, 1, {{"largest", int64_t(5)}}), UserError);
}

Tensor cumsum(const Tensor& x, int64_t axis, AttributeMap attrs = {}) {
  return run_op("CumSum", {x, Tensor::scalar<int32_t>(int32_t(axis))}, std::move(attrs))[0];
}

TEST(CumSum, SpecExamples) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5}, {5});
  EXPECT_EQ(values<double>(cumsum(x, 0)), (std::vector<double>{1, 3, 6, 10, 15}));
  EXPECT_EQ(values<double>(cumsum(x, 0, {{"exclusive", int64_t(1)}})), (std::vector<double>{0, 1, 3, 6, 10}));
  EXPECT_EQ(values<double>(cumsum(x, 0, {{"reverse", int64_t(1)}})), (std::vector<double>{15, 14, 12, 9, 5}));
  EXPECT_EQ(values<double>(cumsum(x, 0, {{"reverse", int64_t(1)}, {"exclusive", int64_t(1)}})),
            (std::vector<double>{14, 12, 9, 5, 0}));
  Tensor m = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(values<double>(cumsum(m, 0)), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(values<double>(cumsum(m, 1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values<double>(cumsum(m, -1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
}

TEST(CumSum, TypesAndAxisForms) {
  Tensor i = Tensor::from_vector<int32_t>({1, -2, 3, 4}, {2, 2});
  Tensor y = run_op("CumSum", {i, i64({0}, {1})}, {{"reverse", int64_t(1)}})[0];
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{4, 2, 3, 4}));
  Tensor f = f32({0.5f, 0.25f, 0.25f}, {3});
  EXPECT_EQ(values<float>(cumsum(f, 0)), (std::vector<float>{0.5f, 0.75f, 1.0f}));
  Tensor u = Tensor::from_vector<uint64_t>({1, 2}, {2});
  EXPECT_EQ(values<uint64_t>(cumsum(u, 0, {{"exclusive", int64_t(1)}})), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(cumsum(Tensor(DType::Float32, {0, 3}), 1).shape(), (Shape{0, 3}));
}

TEST(CumSum, Errors) {
  Tensor x = f32({1, 2}, {2});
  EXPECT_THROW(cumsum(x, 1), UserError);
  EXPECT_THROW(run_op("CumSum", {x, f32({0}, {1})}), UserError);
  EXPECT_THROW(run_op("CumSum", {x, i64({0, 0}, {2})}), UserError);
  EXPECT_THROW(run_op("CumSum", {x}), UserError);
  EXPECT_THROW(cumsum(Tensor::from_vector<int8_t>({1}, {1}), 0), UserError);
  EXPECT_THROW(cumsum(x, 0, {{"exclusive", int64_t(-1)}}), UserError);
}

}  // namespace
}  // namespace kiln
