// Unit tests for the shape and data-movement reference kernels (tensor_ops.cc, tensor_layout_ops.cc,
// tensor_pad.cc). Expected values are worked out by hand or taken from the ONNX spec examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "op_test_util.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;
using I64 = std::vector<int64_t>;
using F32 = std::vector<float>;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// 0, 1, 2, ... as float in `shape`.
Tensor iota(Shape shape) {
  F32 v(size_t(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v, std::move(shape));
}
Tensor ints(I64 v) {
  int64_t n = int64_t(v.size());
  return Tensor::from_vector(v, {n});
}
Tensor floats(F32 v, Shape s) { return Tensor::from_vector(v, std::move(s)); }

// ---------------------------------------------------------------- Reshape / Flatten / (Un)Squeeze

TEST(Reshape, InfersMinusOneAndCopiesZero) {
  auto y = run_op("Reshape", {iota({2, 3, 4}), ints({0, -1})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_EQ(values<float>(y), values<float>(iota({24})));
  EXPECT_EQ(run_op("Reshape", {iota({2, 3, 4}), ints({4, 0, -1})})[0].shape(), (Shape{4, 3, 2}));
  EXPECT_THROW(run_op("Reshape", {iota({6}), ints({})}), UserError);  // [] holds only 1 element
}

TEST(Reshape, ScalarAndAllowZero) {
  EXPECT_EQ(run_op("Reshape", {iota({1, 1}), ints({})})[0].shape(), Shape{});
  // allowzero=1: a 0 is a literal zero-sized dim.
  auto y = run_op("Reshape", {Tensor(DType::Float32, {0, 3}), ints({3, 0})}, {{"allowzero", int64_t(1)}})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 0}));
  // allowzero=0: the same 0 copies the input's dim 1.
  EXPECT_THROW(run_op("Reshape", {Tensor(DType::Float32, {0, 3}), ints({3, 0})}), UserError);
}

TEST(Reshape, Errors) {
  EXPECT_THROW(run_op("Reshape", {iota({2, 3}), ints({-1, -1})}), UserError);
  EXPECT_THROW(run_op("Reshape", {iota({2, 3}), ints({4, -1})}), UserError);
  EXPECT_THROW(run_op("Reshape", {iota({2, 3}), ints({5})}), UserError);
  EXPECT_THROW(run_op("Reshape", {iota({2, 3}), ints({2, -2})}), UserError);
  EXPECT_THROW(run_op("Reshape", {iota({6}), ints({1, 0})}), UserError);  // 0 beyond input rank
  EXPECT_THROW(run_op("Reshape", {iota({0, 3}), ints({0, -1})}, {{"allowzero", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("Reshape", {iota({6}), floats({6}, {1})}), UserError);
}

TEST(Flatten, Axes) {
  auto x = iota({2, 3, 4});
  EXPECT_EQ(run_op("Flatten", {x})[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", int64_t(0)}})[0].shape(), (Shape{1, 24}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", int64_t(3)}})[0].shape(), (Shape{24, 1}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", int64_t(-1)}})[0].shape(), (Shape{6, 4}));
  EXPECT_EQ(run_op("Flatten", {x}, {{"axis", int64_t(-3)}})[0].shape(), (Shape{1, 24}));
  EXPECT_EQ(values<float>(run_op("Flatten", {x})[0]), values<float>(x));
  EXPECT_THROW(run_op("Flatten", {x}, {{"axis", int64_t(4)}}), UserError);
  EXPECT_THROW(run_op("Flatten", {x}, {{"axis", int64_t(-4)}}), UserError);
}

TEST(Squeeze, AllOnesOrGivenAxes) {
  auto x = iota({1, 3, 1, 2});
  EXPECT_EQ(run_op("Squeeze", {x})[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(run_op("Squeeze", {x, ints({-2})})[0].shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run_op("Squeeze", {x, ints({2, 0})})[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(run_op("Squeeze", {x})[0]), values<float>(x));
  EXPECT_THROW(run_op("Squeeze", {x, ints({1})}), UserError);
  EXPECT_THROW(run_op("Squeeze", {x, ints({0, -4})}), UserError);
  EXPECT_THROW(run_op("Squeeze", {x, ints({4})}), UserError);
}

TEST(Unsqueeze, AxesIndexTheOutput) {
  auto x = iota({3, 4});
  EXPECT_EQ(run_op("Unsqueeze", {x, ints({0, 3})})[0].shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {x, ints({3, 0})})[0].shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {x, ints({-1})})[0].shape(), (Shape{3, 4, 1}));
  EXPECT_EQ(run_op("Unsqueeze", {x, ints({1, -2})})[0].shape(), (Shape{3, 1, 1, 4}));
  EXPECT_EQ(run_op("Unsqueeze", {Tensor::scalar<float>(2), ints({0})})[0].shape(), (Shape{1}));
  EXPECT_THROW(run_op("Unsqueeze", {x, ints({0, 0})}), UserError);
  EXPECT_THROW(run_op("Unsqueeze", {x, ints({3})}), UserError);
  EXPECT_THROW(run_op("Unsqueeze", {x}), UserError);  // axes are required
}

// ---------------------------------------------------------------- Transpose

TEST(Transpose, DefaultReversesAxes) {
  auto y = run_op("Transpose", {iota({2, 3})})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (F32{0, 3, 1, 4, 2, 5}));
}

// Every permutation of a 4-D tensor, for every element size, against direct index arithmetic
// (values 0..119 are exact in every dtype used).
TEST(Transpose, AllPermutationsAllElementSizes) {
  const Shape s{2, 3, 4, 5};
  const auto st = shape_strides(s);
  for (DType dt : {DType::Int8, DType::Float16, DType::Int32, DType::Float64}) {
    Tensor x = iota(s).cast(dt);
    I64 perm{0, 1, 2, 3};
    do {
      Tensor y = run_op("Transpose", {x}, {{"perm", perm}})[0];
      ASSERT_EQ(y.dtype(), dt);
      Shape ys;
      for (int64_t p : perm) ys.push_back(s[size_t(p)]);
      ASSERT_EQ(y.shape(), ys);
      int64_t i = 0;
      for (int64_t a = 0; a < ys[0]; ++a)
        for (int64_t b = 0; b < ys[1]; ++b)
          for (int64_t c = 0; c < ys[2]; ++c)
            for (int64_t d = 0; d < ys[3]; ++d, ++i) {
              int64_t idx[4] = {a, b, c, d}, src = 0;
              for (int k = 0; k < 4; ++k) src += idx[k] * st[size_t(perm[size_t(k)])];
              ASSERT_EQ(y.as_int64(i), src) << "perm " << shape_str(perm) << " at " << i;
            }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(Transpose, EmptyScalarAndErrors) {
  EXPECT_EQ(run_op("Transpose", {Tensor(DType::Bool, {0, 3})})[0].shape(), (Shape{3, 0}));
  EXPECT_EQ(values<float>(run_op("Transpose", {Tensor::scalar<float>(7)})[0]), F32{7});
  EXPECT_THROW(run_op("Transpose", {iota({2, 3})}, {{"perm", I64{0, 0}}}), UserError);
  EXPECT_THROW(run_op("Transpose", {iota({2, 3})}, {{"perm", I64{0}}}), UserError);
  EXPECT_THROW(run_op("Transpose", {iota({2, 3})}, {{"perm", I64{0, 2}}}), UserError);
}

// ---------------------------------------------------------------- Concat / Split

TEST(Concat, Axes) {
  auto a = Tensor::from_vector<int64_t>({1, 2}, {2, 1});
  auto b = Tensor::from_vector<int64_t>({3, 4, 5, 6}, {2, 2});
  auto y = run_op("Concat", {a, b}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y), (I64{1, 3, 4, 2, 5, 6}));
  y = run_op("Concat", {b, a.reshaped({1, 2})}, {{"axis", int64_t(-2)}})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int64_t>(y), (I64{3, 4, 5, 6, 1, 2}));
  // Zero-sized inputs contribute nothing.
  y = run_op("Concat", {Tensor(DType::Int64, {2, 0}), b, Tensor(DType::Int64, {2, 0})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(values<int64_t>(y), values<int64_t>(b));
  y = run_op("Concat", {a}, {{"axis", int64_t(0)}})[0];
  EXPECT_EQ(values<int64_t>(y), (I64{1, 2}));
}

TEST(Concat, Errors) {
  auto a = iota({2, 1}), b = iota({3, 2});
  EXPECT_THROW(run_op("Concat", {a, b}, {{"axis", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("Concat", {a, a}, {{"axis", int64_t(2)}}), UserError);
  EXPECT_THROW(run_op("Concat", {a, a}), UserError);  // axis is required
  EXPECT_THROW(run_op("Concat", {a, a.cast(DType::Int32)}, {{"axis", int64_t(0)}}), UserError);
  EXPECT_THROW(run_op("Concat", {a, iota({2})}, {{"axis", int64_t(0)}}), UserError);
  EXPECT_THROW(run_op("Concat", {Tensor::scalar<float>(1)}, {{"axis", int64_t(0)}}), UserError);
}

TEST(Split, EqualAndVariableParts) {
  auto outs = run_op("Split", {iota({6})}, {}, 3);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(values<float>(outs[0]), (F32{0, 1}));
  EXPECT_EQ(values<float>(outs[2]), (F32{4, 5}));
  outs = run_op("Split", {iota({2, 6}), ints({2, 4})}, {{"axis", int64_t(-1)}}, 2);
  EXPECT_EQ(outs[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(outs[0]), (F32{0, 1, 6, 7}));
  EXPECT_EQ(values<float>(outs[1]), (F32{2, 3, 4, 5, 8, 9, 10, 11}));
  outs = run_op("Split", {Tensor(DType::Float32, {0}), ints({0, 0, 0})}, {}, 3);
  for (auto& o : outs) EXPECT_EQ(o.shape(), (Shape{0}));
  outs = run_op("Split", {iota({3, 2}), ints({0, 3})}, {}, 2);
  EXPECT_EQ(outs[0].shape(), (Shape{0, 2}));
  EXPECT_EQ(values<float>(outs[1]), (F32{0, 1, 2, 3, 4, 5}));
}

TEST(Split, NumOutputsAttributeAllowsSmallerLastChunk) {
  auto outs = run_op("Split", {iota({5})}, {{"num_outputs", int64_t(3)}}, 3);
  EXPECT_EQ(values<float>(outs[0]), (F32{0, 1}));
  EXPECT_EQ(values<float>(outs[1]), (F32{2, 3}));
  EXPECT_EQ(values<float>(outs[2]), (F32{4}));
}

TEST(Split, Errors) {
  EXPECT_THROW(run_op("Split", {iota({5})}, {}, 2), UserError);  // not divisible without num_outputs
  EXPECT_THROW(run_op("Split", {iota({6}), ints({2, 3})}, {}, 2), UserError);
  EXPECT_THROW(run_op("Split", {iota({6}), ints({2, 4})}, {}, 3), UserError);
  EXPECT_THROW(run_op("Split", {iota({6}), ints({-1, 7})}, {}, 2), UserError);
  EXPECT_THROW(run_op("Split", {iota({6})}, {{"axis", int64_t(1)}}, 2), UserError);
  EXPECT_THROW(run_op("Split", {iota({5})}, {{"num_outputs", int64_t(4)}}, 4), UserError);  // 2+2+2 > 5
}

// ---------------------------------------------------------------- Slice

TEST(Slice, StepsAndClamping) {
  auto x = iota({10});
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({1}), ints({kMax}), ints({0}), ints({3})})[0]), (F32{1, 4, 7}));
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({-1}), ints({kMin}), ints({0}), ints({-2})})[0]),
            (F32{9, 7, 5, 3, 1}));
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({20}), ints({-20}), ints({0}), ints({-4})})[0]), (F32{9, 5, 1}));
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({-3}), ints({-1})})[0]), (F32{7, 8}));
  EXPECT_EQ(run_op("Slice", {x, ints({1000}), ints({1000})})[0].shape(), (Shape{0}));
  EXPECT_EQ(run_op("Slice", {x, ints({5}), ints({2})})[0].shape(), (Shape{0}));
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({2}), ints({5}), ints({0}), ints({kMax})})[0]), (F32{2}));
  EXPECT_EQ(values<float>(run_op("Slice", {x, ints({5}), ints({2}), ints({0}), ints({kMin})})[0]), (F32{5}));
}

TEST(Slice, MultiAxisNegativeAxesAndInt32Indices) {
  auto x = iota({3, 4});
  // rows 2..0 backwards, columns 1 and 3.
  auto y = run_op("Slice", {x, ints({-1, 1}), ints({kMin, 4}), ints({0, -1}), ints({-1, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(y), (F32{9, 11, 5, 7, 1, 3}));
  auto s32 = Tensor::from_vector<int32_t>({1}, {1}), e32 = Tensor::from_vector<int32_t>({2147483647}, {1});
  y = run_op("Slice", {x, s32, e32, Tensor::from_vector<int32_t>({1}, {1})})[0];
  EXPECT_EQ(values<float>(y), (F32{1, 2, 3, 5, 6, 7, 9, 10, 11}));
  // Omitted axes with explicit steps (axes input left undefined).
  y = run_op("Slice", {x, ints({0, 0}), ints({3, 4}), Tensor{}, ints({2, 3})})[0];
  EXPECT_EQ(values<float>(y), (F32{0, 3, 8, 11}));
}

TEST(Slice, Errors) {
  auto x = iota({3, 4});
  EXPECT_THROW(run_op("Slice", {x, ints({0}), ints({1}), ints({0}), ints({0})}), UserError);
  EXPECT_THROW(run_op("Slice", {x, ints({0, 0}), ints({1})}), UserError);
  EXPECT_THROW(run_op("Slice", {x, ints({0, 0}), ints({1, 1}), ints({1, -1})}), UserError);
  EXPECT_THROW(run_op("Slice", {x, ints({0}), ints({1}), ints({2})}), UserError);
  EXPECT_THROW(run_op("Slice", {x, ints({0}), ints({1}), ints({0}), ints({1, 1})}), UserError);
  EXPECT_THROW(run_op("Slice", {x, floats({0}, {1}), ints({1})}), UserError);
}

// ---------------------------------------------------------------- Expand / Tile

TEST(Expand, BroadcastsBothWays) {
  auto x = floats({1, 2, 3}, {3, 1});
  auto y = run_op("Expand", {x, ints({2, 1, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values<float>(y), (F32{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  // A target smaller than the input keeps the input's dims.
  y = run_op("Expand", {x, ints({1})})[0];
  EXPECT_EQ(y.shape(), (Shape{3, 1}));
  EXPECT_EQ(run_op("Expand", {x, ints({3, 0})})[0].shape(), (Shape{3, 0}));
  EXPECT_EQ(values<bool>(run_op("Expand", {Tensor::scalar<bool>(true), ints({2})})[0]), (std::vector<bool>{true, true}));
  EXPECT_THROW(run_op("Expand", {x, ints({2, 2})}), UserError);
  EXPECT_THROW(run_op("Expand", {x, ints({-1, 1})}), UserError);
}

TEST(Tile, Repeats) {
  auto x = Tensor::from_vector<int16_t>({1, 2, 3, 4}, {2, 2});
  auto y = run_op("Tile", {x, ints({2, 3})})[0];
  EXPECT_EQ(y.shape(), (Shape{4, 6}));
  EXPECT_EQ(values<int16_t>(y), (std::vector<int16_t>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4,  //
                                                      1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_EQ(run_op("Tile", {x, ints({0, 1})})[0].shape(), (Shape{0, 2}));
  EXPECT_THROW(run_op("Tile", {x, ints({2})}), UserError);
  EXPECT_THROW(run_op("Tile", {x, ints({-1, 1})}), UserError);
}

// ---------------------------------------------------------------- Pad

Tensor pad1d(const std::string& mode, I64 pads, float value = 0) {
  auto x = floats({1, 2, 3}, {3});
  return run_op("Pad", {x, ints(pads), Tensor::scalar<float>(value)}, {{"mode", mode}})[0];
}

TEST(Pad, Modes) {
  EXPECT_EQ(values<float>(pad1d("constant", {2, 1}, 9)), (F32{9, 9, 1, 2, 3, 9}));
  EXPECT_EQ(values<float>(pad1d("reflect", {2, 2})), (F32{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(values<float>(pad1d("edge", {2, 2})), (F32{1, 1, 1, 2, 3, 3, 3}));
  EXPECT_EQ(values<float>(pad1d("wrap", {2, 2})), (F32{2, 3, 1, 2, 3, 1, 2}));
  // Pads longer than the axis repeat the pattern (numpy semantics).
  EXPECT_EQ(values<float>(pad1d("reflect", {4, 4})), (F32{1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3}));
  // Negative pads crop first; the remaining pads read the cropped axis.
  EXPECT_EQ(values<float>(pad1d("constant", {-1, 1})), (F32{2, 3, 0}));
  EXPECT_EQ(values<float>(pad1d("edge", {-2, 2})), (F32{3, 3, 3}));
  EXPECT_EQ(values<float>(pad1d("constant", {-1, -2})), F32{});
}

TEST(Pad, TwoDimsDefaultsAndAxes) {
  auto x = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {2, 2});
  auto y = run_op("Pad", {x, ints({1, 0, 0, 1})})[0];  // no constant_value: zero
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{0, 0, 0, 1, 2, 0, 3, 4, 0}));
  y = run_op("Pad", {x, ints({1, 1, 1, 1}), Tensor{}}, {{"mode", std::string("reflect")}})[0];
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{4, 3, 4, 3, 2, 1, 2, 1, 4, 3, 4, 3, 2, 1, 2, 1}));
  // Opset-18 axes input: pad only the last axis.
  y = run_op("Pad", {x, ints({0, 2}), Tensor::scalar<int32_t>(7), ints({-1})})[0];
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{1, 2, 7, 7, 3, 4, 7, 7}));
}

TEST(Pad, Errors) {
  auto x = floats({1, 2, 3}, {3});
  EXPECT_THROW(run_op("Pad", {x, ints({1})}), UserError);
  EXPECT_THROW(run_op("Pad", {x, ints({-2, -2})}), UserError);
  EXPECT_THROW(run_op("Pad", {x, ints({1, 1})}, {{"mode", std::string("mirror")}}), UserError);
  EXPECT_THROW(run_op("Pad", {Tensor(DType::Float32, {0}), ints({1, 1})}, {{"mode", std::string("edge")}}), UserError);
  EXPECT_THROW(run_op("Pad", {x, ints({1, 1}), floats({1, 2}, {2})}), UserError);
  EXPECT_THROW(run_op("Pad", {x, ints({kMin, 0})}), UserError);
  EXPECT_THROW(run_op("Pad", {x, ints({kMax, 1})}), UserError);
}

// ---------------------------------------------------------------- Shape / Size / Identity

TEST(ShapeOp, StartEnd) {
  auto x = iota({2, 3, 4});
  auto shape = [&](AttributeMap a) { return values<int64_t>(run_op("Shape", {x}, std::move(a))[0]); };
  EXPECT_EQ(run_op("Shape", {x})[0].dtype(), DType::Int64);
  EXPECT_EQ(shape({}), (I64{2, 3, 4}));
  EXPECT_EQ(shape({{"start", int64_t(1)}}), (I64{3, 4}));
  EXPECT_EQ(shape({{"end", int64_t(-1)}}), (I64{2, 3}));
  EXPECT_EQ(shape({{"start", int64_t(-10)}, {"end", int64_t(10)}}), (I64{2, 3, 4}));
  EXPECT_EQ(shape({{"start", int64_t(2)}, {"end", int64_t(1)}}), I64{});
  EXPECT_EQ(run_op("Shape", {Tensor::scalar<float>(1)})[0].shape(), (Shape{0}));
}

TEST(SizeOp, ScalarInt64) {
  auto y = run_op("Size", {iota({2, 3})})[0];
  EXPECT_EQ(y.shape(), Shape{});
  EXPECT_EQ(values<int64_t>(y), I64{6});
  EXPECT_EQ(values<int64_t>(run_op("Size", {Tensor(DType::Bool, {4, 0})})[0]), I64{0});
}

TEST(Identity, PassesThrough) {
  auto x = Tensor::from_vector<uint64_t>({5, 6}, {2});
  EXPECT_TRUE(run_op("Identity", {x})[0].bitwise_equal(x));
}

// ---------------------------------------------------------------- Dropout

TEST(Dropout, InferenceIsIdentityWithTrueMask) {
  auto x = iota({2, 2});
  auto outs = run_op("Dropout", {x, Tensor::scalar<float>(0.75f)}, {}, 2);
  EXPECT_TRUE(outs[0].bitwise_equal(x));
  EXPECT_EQ(outs[1].dtype(), DType::Bool);
  EXPECT_EQ(values<bool>(outs[1]), (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(run_op("Dropout", {x})[0].shape(), (Shape{2, 2}));
  outs = run_op("Dropout", {x, Tensor::scalar<float>(0.5f), Tensor::scalar<bool>(false)}, {}, 1);
  EXPECT_TRUE(outs[0].bitwise_equal(x));
}

TEST(Dropout, TrainingOnlyWithZeroRatio) {
  auto x = iota({3});
  auto outs = run_op("Dropout", {x, Tensor::scalar<float>(0), Tensor::scalar<bool>(true)}, {}, 2);
  EXPECT_TRUE(outs[0].bitwise_equal(x));
  EXPECT_EQ(values<bool>(outs[1]), (std::vector<bool>{true, true, true}));
  EXPECT_THROW(run_op("Dropout", {x, Tensor{}, Tensor::scalar<bool>(true)}), UserError);  // default ratio 0.5
  EXPECT_THROW(run_op("Dropout", {x, Tensor::scalar<float>(0.1f), Tensor::scalar<bool>(true)}), UserError);
  try {
    run_op("Dropout", {x, Tensor::scalar<float>(0.1f), Tensor::scalar<bool>(true)});
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("training-mode Dropout is not supported"), std::string::npos);
  }
}

// ---------------------------------------------------------------- Constant

TEST(Constant, ValueAttributes) {
  auto t = Tensor::from_vector<int8_t>({1, -2}, {2});
  EXPECT_TRUE(run_op("Constant", {}, {{"value", t}})[0].bitwise_equal(t));
  auto f = run_op("Constant", {}, {{"value_float", 1.5f}})[0];
  EXPECT_EQ(f.shape(), Shape{});
  EXPECT_EQ(values<float>(f), F32{1.5f});
  auto fs = run_op("Constant", {}, {{"value_floats", F32{1, 2}}})[0];
  EXPECT_EQ(fs.shape(), Shape{2});
  EXPECT_EQ(values<float>(fs), (F32{1, 2}));
  auto i = run_op("Constant", {}, {{"value_int", int64_t(-3)}})[0];
  EXPECT_EQ(i.shape(), Shape{});
  EXPECT_EQ(values<int64_t>(i), I64{-3});
  EXPECT_EQ(values<int64_t>(run_op("Constant", {}, {{"value_ints", I64{4, 5, 6}}})[0]), (I64{4, 5, 6}));
}

TEST(Constant, Errors) {
  EXPECT_THROW(run_op("Constant", {}, {{"value_string", std::string("a")}}), UserError);
  EXPECT_THROW(run_op("Constant", {}, {{"value_strings", std::vector<std::string>{"a"}}}), UserError);
  EXPECT_THROW(run_op("Constant", {}, {}), UserError);
  EXPECT_THROW(run_op("Constant", {}, {{"value_int", int64_t(1)}, {"value_float", 1.0f}}), UserError);
}

// ---------------------------------------------------------------- DepthToSpace / SpaceToDepth

// The spec's (1, 8, 2, 3) example input: channel c holds 9c + {0..5}.
Tensor d2s_input() {
  F32 v;
  for (int c = 0; c < 8; ++c)
    for (int i = 0; i < 6; ++i) v.push_back(float(9 * c + i));
  return floats(v, {1, 8, 2, 3});
}

TEST(DepthToSpace, DcrSpecExample) {
  auto y = run_op("DepthToSpace", {d2s_input()}, {{"blocksize", int64_t(2)}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 4, 6}));
  EXPECT_EQ(values<float>(y), (F32{0,  18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56, 3,  21, 4,  22,
                                   5,  23, 39, 57, 40, 58, 41, 59, 9,  27, 10, 28, 11, 29, 45, 63,
                                   46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68}));
}

TEST(DepthToSpace, CrdSpecExample) {
  auto y = run_op("DepthToSpace", {d2s_input()}, {{"blocksize", int64_t(2)}, {"mode", std::string("CRD")}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 4, 6}));
  EXPECT_EQ(values<float>(y), (F32{0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13,
                                   5,  14, 21, 30, 22, 31, 23, 32, 36, 45, 37, 46, 38, 47, 54, 63,
                                   55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68}));
}

TEST(DepthToSpace, Errors) {
  EXPECT_THROW(run_op("DepthToSpace", {iota({1, 6, 2, 2})}, {{"blocksize", int64_t(2)}}), UserError);
  EXPECT_THROW(run_op("DepthToSpace", {iota({1, 4, 2})}, {{"blocksize", int64_t(2)}}), UserError);
  EXPECT_THROW(run_op("DepthToSpace", {iota({1, 4, 2, 2})}), UserError);
  EXPECT_THROW(run_op("DepthToSpace", {iota({1, 4, 2, 2})}, {{"blocksize", int64_t(0)}}), UserError);
  EXPECT_THROW(run_op("DepthToSpace", {iota({1, 4, 2, 2})}, {{"blocksize", int64_t(2)}, {"mode", std::string("X")}}),
               UserError);
}

TEST(SpaceToDepth, SpecExampleAndInverseOfDcr) {
  auto x = floats({0, 6, 1, 7, 2, 8, 12, 18, 13, 19, 14, 20, 3, 9, 4, 10, 5, 11, 15, 21, 16, 22, 17, 23}, {1, 1, 4, 6});
  auto y = run_op("SpaceToDepth", {x}, {{"blocksize", int64_t(2)}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 4, 2, 3}));
  EXPECT_EQ(values<float>(y), values<float>(iota({24})));
  auto d = run_op("DepthToSpace", {d2s_input()}, {{"blocksize", int64_t(2)}})[0];
  EXPECT_EQ(values<float>(run_op("SpaceToDepth", {d}, {{"blocksize", int64_t(2)}})[0]), values<float>(d2s_input()));
  EXPECT_THROW(run_op("SpaceToDepth", {iota({1, 1, 3, 4})}, {{"blocksize", int64_t(2)}}), UserError);
}

}  // namespace
}  // namespace kiln
