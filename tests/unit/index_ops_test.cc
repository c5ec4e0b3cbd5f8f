// Unit tests of the indexing and generator kernels: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND, OneHot, Trilu, EyeLike, Range, ConstantOfShape. Resize is in index_resize_test.cc.
// Expected values are the ONNX spec's examples or worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "op_test_util.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;
using testing::f32;
using testing::i64;
using testing::i32;


// ---------------------------------------------------------------- Gather

TEST(Gather, Axis0SpecExample) {
  auto data = f32({1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f}, {3, 2});
  auto out = run_op("Gather", {data, i64({0, 1, 1, 2}, {2, 2})})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f}));
}

TEST(Gather, Axis1SpecExampleWithInt32Indices) {
  auto data = f32({1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f}, {3, 3});
  auto out = run_op("Gather", {data, i32({0, 2}, {1, 2})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(out.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f}));
}

TEST(Gather, NegativeIndicesAndNegativeAxis) {
  auto data = i64({0, 1, 2, 3, 4, 5}, {2, 3});
  auto out = run_op("Gather", {data, i64({-1, 0, -3}, {3})}, {{"axis", int64_t(-1)}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{2, 0, 0, 5, 3, 3}));
}

TEST(Gather, ScalarIndexDropsTheAxis) {
  auto data = f32({1, 2, 3, 4, 5, 6}, {3, 2});
  auto out = run_op("Gather", {data, Tensor::scalar<int64_t>(2)})[0];
  EXPECT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{5, 6}));
}

TEST(Gather, CopiesBytesExactly) {
  const int64_t big = (int64_t(1) << 60) + 1;  // not representable as double
  auto out = run_op("Gather", {i64({7, big}, {2}), i64({1, 1, 0}, {3})})[0];
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{big, big, 7}));
  auto b = run_op("Gather", {Tensor::from_vector<bool>({true, false}, {2}), i64({1, 0}, {2})})[0];
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{false, true}));
}

TEST(Gather, EmptyIndices) {
  auto out = run_op("Gather", {f32({1, 2, 3, 4}, {2, 2}), i64({}, {0})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 0}));
}

TEST(Gather, Errors) {
  auto data = f32({1, 2, 3}, {3});
  EXPECT_THROW(run_op("Gather", {data, i64({3}, {1})}), UserError);
  EXPECT_THROW(run_op("Gather", {data, i64({-4}, {1})}), UserError);
  EXPECT_THROW(run_op("Gather", {data, f32({0}, {1})}), UserError);
  EXPECT_THROW(run_op("Gather", {data, i64({0}, {1})}, {{"axis", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("Gather", {Tensor::scalar<float>(1), i64({0}, {1})}), UserError);
}

// ---------------------------------------------------------------- GatherElements

TEST(GatherElements, SpecExamples) {
  auto out = run_op("GatherElements", {f32({1, 2, 3, 4}, {2, 2}), i64({0, 0, 1, 0}, {2, 2})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 1, 4, 3}));
  auto out2 = run_op("GatherElements", {f32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}), i32({1, 2, 0, 2, 0, 0}, {2, 3})})[0];
  EXPECT_EQ(out2.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out2), (std::vector<float>{4, 8, 3, 7, 2, 3}));
}

TEST(GatherElements, NegativeIndices) {
  // test_gather_elements_negative_indices: indices [[-1,-2,0],[-2,0,0]] on axis 0.
  auto out = run_op("GatherElements", {f32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}), i64({-1, -2, 0, -2, 0, 0}, {2, 3})})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{7, 5, 3, 4, 2, 3}));
}

TEST(GatherElements, ThreeDimsMiddleAxis) {
  // data[i][j][k] = 100i + 10j + k; out[i][j][k] = data[i][idx[i][j][k]][k].
  std::vector<int64_t> d;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) d.push_back(100 * i + 10 * j + k);
  auto out = run_op("GatherElements", {i64(d, {2, 3, 2}), i64({2, 0, 1, 1}, {2, 1, 2})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{20, 1, 110, 111}));
}

TEST(GatherElements, Errors) {
  auto data = f32({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(run_op("GatherElements", {data, i64({2, 0}, {1, 2})}), UserError);
  EXPECT_THROW(run_op("GatherElements", {data, i64({-3, 0}, {1, 2})}), UserError);
  EXPECT_THROW(run_op("GatherElements", {data, i64({0, 0}, {2})}), UserError);           // rank mismatch
  EXPECT_THROW(run_op("GatherElements", {data, i64({0, 0, 0}, {1, 3})}), UserError);     // exceeds dim 1
  EXPECT_THROW(run_op("GatherElements", {data, i64({0}, {1, 1})}, {{"axis", int64_t(2)}}), UserError);
}

// ---------------------------------------------------------------- GatherND

TEST(GatherND, SpecExamples) {
  auto d2 = i32({0, 1, 2, 3}, {2, 2});
  auto o1 = run_op("GatherND", {d2, i64({0, 0, 1, 1}, {2, 2})})[0];
  EXPECT_EQ(o1.shape(), (Shape{2}));
  EXPECT_EQ(values<int32_t>(o1), (std::vector<int32_t>{0, 3}));
  auto o2 = run_op("GatherND", {d2, i64({1, 0}, {2, 1})})[0];
  EXPECT_EQ(o2.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>(o2), (std::vector<int32_t>{2, 3, 0, 1}));

  auto d3 = i32({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  auto o3 = run_op("GatherND", {d3, i64({0, 1, 1, 0}, {2, 2})})[0];
  EXPECT_EQ(o3.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>(o3), (std::vector<int32_t>{2, 3, 4, 5}));
  auto o4 = run_op("GatherND", {d3, i64({0, 1, 1, 0}, {2, 1, 2})})[0];
  EXPECT_EQ(o4.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(values<int32_t>(o4), (std::vector<int32_t>{2, 3, 4, 5}));
  auto o5 = run_op("GatherND", {d3, i64({1, 0}, {2, 1})}, {{"batch_dims", int64_t(1)}})[0];
  EXPECT_EQ(o5.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>(o5), (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(GatherND, NegativeIndicesAndFullTuplesWithBatch) {
  auto d3 = f32({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  // batch_dims=1, tuples of length 2 address single elements: batch 0 -> [-1,0] = (1,0) = 2;
  // batch 1 -> [0,-1] = (0,1) = 5.
  auto out = run_op("GatherND", {d3, i64({-1, 0, 0, -1}, {2, 2})}, {{"batch_dims", int64_t(1)}})[0];
  EXPECT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{2, 5}));
}

TEST(GatherND, Errors) {
  auto d = f32({0, 1, 2, 3}, {2, 2});
  EXPECT_THROW(run_op("GatherND", {d, i64({0, 0, 0}, {1, 3})}), UserError);                    // m > r
  EXPECT_THROW(run_op("GatherND", {d, i64({2, 0}, {1, 2})}), UserError);                       // out of range
  EXPECT_THROW(run_op("GatherND", {d, i64({-3, 0}, {1, 2})}), UserError);
  EXPECT_THROW(run_op("GatherND", {d, i64({0, 0, 0}, {3, 1})}, {{"batch_dims", int64_t(1)}}), UserError);
  EXPECT_THROW(run_op("GatherND", {d, i64({0, 0}, {2, 1})}, {{"batch_dims", int64_t(2)}}), UserError);
}

// ---------------------------------------------------------------- ScatterElements

TEST(ScatterElements, SpecExampleAxis0) {
  auto out = run_op("ScatterElements", {f32(std::vector<float>(9, 0.0f), {3, 3}), i64({1, 0, 2, 0, 2, 1}, {2, 3}),
                                        f32({1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}, {2, 3})})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f}));
}

TEST(ScatterElements, Axis1NegativeIndices) {
  auto data = f32({1, 2, 3, 4, 5}, {1, 5});
  auto out = run_op("ScatterElements", {data, i64({1, -3}, {1, 2}), f32({1.1f, 2.1f}, {1, 2})}, {{"axis", int64_t(1)}})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{1.0f, 1.1f, 2.1f, 4.0f, 5.0f}));
  // The input is not modified.
  EXPECT_EQ(values<float>(data), (std::vector<float>{1, 2, 3, 4, 5}));
}

TEST(ScatterElements, Reductions) {
  auto data = f32({1, 2, 3, 4, 5}, {1, 5});
  auto idx = i64({1, 1}, {1, 2});
  auto upd = f32({1.1f, 2.1f}, {1, 2});
  AttributeMap a{{"axis", int64_t(1)}};
  a["reduction"] = std::string("add");
  EXPECT_EQ(values<float>(run_op("ScatterElements", {data, idx, upd}, a)[0]),
            (std::vector<float>{1.0f, 2.0f + 1.1f + 2.1f, 3, 4, 5}));
  a["reduction"] = std::string("mul");
  EXPECT_EQ(values<float>(run_op("ScatterElements", {data, idx, upd}, a)[0]),
            (std::vector<float>{1.0f, 2.0f * 1.1f * 2.1f, 3, 4, 5}));
  a["reduction"] = std::string("max");
  EXPECT_EQ(values<float>(run_op("ScatterElements", {data, idx, upd}, a)[0]), (std::vector<float>{1, 2.1f, 3, 4, 5}));
  a["reduction"] = std::string("min");
  EXPECT_EQ(values<float>(run_op("ScatterElements", {data, idx, upd}, a)[0]), (std::vector<float>{1, 1.1f, 3, 4, 5}));
  a["reduction"] = std::string("sum");
  EXPECT_THROW(run_op("ScatterElements", {data, idx, upd}, a), UserError);
}

TEST(ScatterElements, IntegerAddWrapsAndBoolAddIsOr) {
  auto out = run_op("ScatterElements",
                    {Tensor::from_vector<int8_t>({127, 0}, {2}), i64({0, 0}, {2}), Tensor::from_vector<int8_t>({1, 1}, {2})},
                    {{"reduction", std::string("add")}})[0];
  EXPECT_EQ(values<int8_t>(out), (std::vector<int8_t>{-127, 0}));
  auto b = run_op("ScatterElements",
                  {Tensor::from_vector<bool>({false, true}, {2}), i64({0, 1}, {2}), Tensor::from_vector<bool>({true, false}, {2})},
                  {{"reduction", std::string("add")}})[0];
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, true}));
}

TEST(ScatterElements, Errors) {
  auto data = f32({1, 2, 3}, {3});
  EXPECT_THROW(run_op("ScatterElements", {data, i64({3}, {1}), f32({0}, {1})}), UserError);
  EXPECT_THROW(run_op("ScatterElements", {data, i64({-4}, {1}), f32({0}, {1})}), UserError);
  EXPECT_THROW(run_op("ScatterElements", {data, i64({0, 1}, {2}), f32({0}, {1})}), UserError);  // shape mismatch
  EXPECT_THROW(run_op("ScatterElements", {data, i64({0}, {1}), i64({0}, {1})}), UserError);     // dtype mismatch
}

// ---------------------------------------------------------------- ScatterND

TEST(ScatterND, SpecExample1) {
  auto out = run_op("ScatterND", {f32({1, 2, 3, 4, 5, 6, 7, 8}, {8}), i64({4, 3, 1, 7}, {4, 1}), f32({9, 10, 11, 12}, {4})})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 11, 3, 10, 9, 6, 7, 12}));
}

TEST(ScatterND, SliceUpdatesNegativeIndex) {
  // data [3,2]; indices [[-1],[0]] replace rows 2 and 0.
  auto out = run_op("ScatterND", {f32({1, 2, 3, 4, 5, 6}, {3, 2}), i64({-1, 0}, {2, 1}), f32({50, 60, 10, 20}, {2, 2})})[0];
  EXPECT_EQ(values<float>(out), (std::vector<float>{10, 20, 3, 4, 50, 60}));
}

TEST(ScatterND, AddAndMulWithDuplicates) {
  auto data = i32({1, 2, 3, 4}, {2, 2});
  auto idx = i64({0, 1, 0, 1, 1, 0}, {3, 2});  // (0,1) twice, (1,0) once
  auto upd = i32({10, 20, 5}, {3});
  auto add = run_op("ScatterND", {data, idx, upd}, {{"reduction", std::string("add")}})[0];
  EXPECT_EQ(values<int32_t>(add), (std::vector<int32_t>{1, 32, 8, 4}));
  auto mul = run_op("ScatterND", {data, idx, upd}, {{"reduction", std::string("mul")}})[0];
  EXPECT_EQ(values<int32_t>(mul), (std::vector<int32_t>{1, 400, 15, 4}));
}

TEST(ScatterND, Errors) {
  auto data = f32({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(run_op("ScatterND", {data, i64({2}, {1, 1}), f32({0, 0}, {1, 2})}), UserError);     // out of range
  EXPECT_THROW(run_op("ScatterND", {data, i64({0}, {1, 1}), f32({0, 0, 0}, {1, 3})}), UserError);  // updates shape
  EXPECT_THROW(run_op("ScatterND", {data, i64({0, 0, 0}, {1, 3}), f32({0}, {1})}), UserError);     // k > rank
}

// ---------------------------------------------------------------- OneHot

TEST(OneHot, LastAxisNegativeAndOutOfRange) {
  // Index 5 is outside [-3, 3): its row stays all off (spec), -1 wraps to 2.
  auto out = run_op("OneHot", {i64({0, 2, -1, 5}, {4}), Tensor::scalar<int64_t>(3), f32({0, 1}, {2})})[0];
  EXPECT_EQ(out.shape(), (Shape{4, 3}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0}));
}

TEST(OneHot, Axis0AndOffOnValues) {
  // indices [[1,0],[2,1]], depth 3, axis 0: out[v, i, j] = on where indices[i,j] == v.
  auto out = run_op("OneHot", {i32({1, 0, 2, 1}, {2, 2}), f32({3}, {1}), i64({-5, 7}, {2})}, {{"axis", int64_t(0)}})[0];
  EXPECT_EQ(out.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(values<int64_t>(out), (std::vector<int64_t>{-5, 7, -5, -5, 7, -5, -5, 7, -5, -5, 7, -5}));
}

TEST(OneHot, MiddleAxisFloatIndices) {
  // Float indices truncate (1.7 -> 1, -0.5 -> 0); axis -2 of a rank-3 output is axis 1.
  auto out = run_op("OneHot", {f32({1.7f, -0.5f}, {2, 1}), Tensor::scalar<float>(2.0f), f32({0, 1}, {2})},
                    {{"axis", int64_t(-2)}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, 1, 1, 0}));
}

TEST(OneHot, Errors) {
  auto idx = i64({0}, {1});
  EXPECT_THROW(run_op("OneHot", {idx, Tensor::scalar<int64_t>(0), f32({0, 1}, {2})}), UserError);
  EXPECT_THROW(run_op("OneHot", {idx, Tensor::scalar<int64_t>(2), f32({0, 1, 2}, {3})}), UserError);
  EXPECT_THROW(run_op("OneHot", {idx, Tensor::scalar<int64_t>(2), f32({0, 1}, {2})}, {{"axis", int64_t(2)}}), UserError);
}

// ---------------------------------------------------------------- Trilu

const std::vector<float> kM34 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // [3,4]

TEST(Trilu, UpperWithK) {
  auto x = f32(kM34, {3, 4});
  EXPECT_EQ(values<float>(run_op("Trilu", {x})[0]), (std::vector<float>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(1)})[0]),
            (std::vector<float>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(-1)})[0]),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(5)})[0]), std::vector<float>(12, 0.0f));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(std::numeric_limits<int64_t>::min())})[0]), kM34);
}

TEST(Trilu, LowerWithK) {
  auto x = f32(kM34, {3, 4});
  AttributeMap lower{{"upper", int64_t(0)}};
  EXPECT_EQ(values<float>(run_op("Trilu", {x}, lower)[0]), (std::vector<float>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(-1)}, lower)[0]),
            (std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(2)}, lower)[0]),
            (std::vector<float>{1, 2, 3, 0, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(std::numeric_limits<int64_t>::max())}, lower)[0]),
            kM34);
  EXPECT_EQ(values<float>(run_op("Trilu", {x, Tensor::scalar<int64_t>(-3)}, lower)[0]), std::vector<float>(12, 0.0f));
}

TEST(Trilu, BatchedIntegers) {
  auto x = i64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  EXPECT_EQ(values<int64_t>(run_op("Trilu", {x})[0]), (std::vector<int64_t>{1, 2, 0, 4, 5, 6, 0, 8}));
}

TEST(Trilu, Errors) {
  EXPECT_THROW(run_op("Trilu", {f32({1, 2}, {2})}), UserError);
  EXPECT_THROW(run_op("Trilu", {f32(kM34, {3, 4}), Tensor::scalar<float>(1)}), UserError);
}

// ---------------------------------------------------------------- EyeLike

TEST(EyeLike, OffDiagonalAndDtype) {
  auto x = f32(std::vector<float>(12, 7.0f), {3, 4});
  EXPECT_EQ(values<float>(run_op("EyeLike", {x}, {{"k", int64_t(1)}})[0]),
            (std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  auto o = run_op("EyeLike", {x}, {{"k", int64_t(-1)}, {"dtype", int64_t(6)}})[0];  // 6 = INT32
  EXPECT_EQ(o.dtype(), DType::Int32);
  EXPECT_EQ(values<int32_t>(o), (std::vector<int32_t>{0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  auto b = run_op("EyeLike", {i64({0, 0, 0, 0}, {2, 2})}, {{"dtype", int64_t(9)}})[0];  // 9 = BOOL
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(values<float>(run_op("EyeLike", {x}, {{"k", int64_t(4)}})[0]), std::vector<float>(12, 0.0f));
  EXPECT_EQ(values<float>(run_op("EyeLike", {x}, {{"k", int64_t(-3)}})[0]), std::vector<float>(12, 0.0f));
  EXPECT_EQ(values<float>(run_op("EyeLike", {x}, {{"k", std::numeric_limits<int64_t>::min()}})[0]),
            std::vector<float>(12, 0.0f));
}

TEST(EyeLike, Errors) {
  EXPECT_THROW(run_op("EyeLike", {f32({1, 2}, {2})}), UserError);
  EXPECT_THROW(run_op("EyeLike", {f32({1, 2, 3, 4}, {2, 2})}, {{"dtype", int64_t(8)}}), UserError);  // STRING
}

// ---------------------------------------------------------------- Range

TEST(Range, SpecExamples) {
  auto a = run_op("Range", {Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(9), Tensor::scalar<int32_t>(3)})[0];
  EXPECT_EQ(values<int32_t>(a), (std::vector<int32_t>{3, 6}));
  auto b = run_op("Range", {Tensor::scalar<int64_t>(10), Tensor::scalar<int64_t>(4), Tensor::scalar<int64_t>(-2)})[0];
  EXPECT_EQ(values<int64_t>(b), (std::vector<int64_t>{10, 8, 6}));
  auto c = run_op("Range", {Tensor::scalar<int16_t>(10), Tensor::scalar<int16_t>(3), Tensor::scalar<int16_t>(-2)})[0];
  EXPECT_EQ(values<int16_t>(c), (std::vector<int16_t>{10, 8, 6, 4}));
}

TEST(Range, FloatsAndEmpty) {
  // ceil((2.1 - 1) / 0.3) = 4 elements, each start + i * delta.
  auto a = run_op("Range", {Tensor::scalar<float>(1.0f), Tensor::scalar<float>(2.1f), Tensor::scalar<float>(0.3f)})[0];
  ASSERT_EQ(a.shape(), (Shape{4}));
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(a.data<float>()[i], 1.0f + float(i) * 0.3f);
  auto e = run_op("Range", {Tensor::scalar<double>(5), Tensor::scalar<double>(1), Tensor::scalar<double>(1)})[0];
  EXPECT_EQ(e.shape(), (Shape{0}));
  EXPECT_EQ(e.dtype(), DType::Float64);
}

TEST(Range, Int64ExtremesAreExact) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  auto a = run_op("Range", {Tensor::scalar<int64_t>(hi - 2), Tensor::scalar<int64_t>(hi), Tensor::scalar<int64_t>(1)})[0];
  EXPECT_EQ(values<int64_t>(a), (std::vector<int64_t>{hi - 2, hi - 1}));
  // limit - start overflows int64 here; the count ceil((2^64 - 1) / 2^63) = 2 is still exact.
  auto b = run_op("Range", {Tensor::scalar<int64_t>(hi), Tensor::scalar<int64_t>(lo),
                            Tensor::scalar<int64_t>(lo)})[0];
  EXPECT_EQ(values<int64_t>(b), (std::vector<int64_t>{hi, -1}));
}

TEST(Range, Errors) {
  EXPECT_THROW(run_op("Range", {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(5), Tensor::scalar<int32_t>(0)}),
               UserError);
  EXPECT_THROW(run_op("Range", {Tensor::scalar<int32_t>(0), Tensor::scalar<int64_t>(5), Tensor::scalar<int32_t>(1)}),
               UserError);
  EXPECT_THROW(run_op("Range", {Tensor::scalar<float>(0), Tensor::scalar<float>(1e30f), Tensor::scalar<float>(1e-30f)}),
               UserError);
  EXPECT_THROW(run_op("Range", {i64({0, 1}, {2}), Tensor::scalar<int64_t>(5), Tensor::scalar<int64_t>(1)}), UserError);
}

// ---------------------------------------------------------------- ConstantOfShape

TEST(ConstantOfShape, ValueAndDefault) {
  auto a = run_op("ConstantOfShape", {i64({2, 3}, {2})}, {{"value", Tensor::from_vector<int32_t>({7}, {1})}})[0];
  EXPECT_EQ(a.dtype(), DType::Int32);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int32_t>(a), std::vector<int32_t>(6, 7));
  auto b = run_op("ConstantOfShape", {i64({4}, {1})})[0];
  EXPECT_EQ(b.dtype(), DType::Float32);
  EXPECT_EQ(values<float>(b), std::vector<float>(4, 0.0f));
  auto c = run_op("ConstantOfShape", {i64({}, {0})}, {{"value", Tensor::from_vector<float>({1.5f}, {1})}})[0];
  EXPECT_EQ(c.shape(), Shape{});
  EXPECT_EQ(values<float>(c), std::vector<float>{1.5f});
  auto d = run_op("ConstantOfShape", {i64({2, 0}, {2})})[0];
  EXPECT_EQ(d.shape(), (Shape{2, 0}));
}

TEST(ConstantOfShape, Errors) {
  EXPECT_THROW(run_op("ConstantOfShape", {i64({2, -1}, {2})}), UserError);
  EXPECT_THROW(run_op("ConstantOfShape", {i64({2}, {1})}, {{"value", f32({1, 2}, {2})}}), UserError);
  EXPECT_THROW(run_op("ConstantOfShape", {i32({2}, {1})}), UserError);
}

}  // namespace
}  // namespace kiln
