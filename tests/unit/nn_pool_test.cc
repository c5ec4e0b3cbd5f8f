// Pooling reference kernels. Expected values are the ONNX spec examples (maxpool.py,
// averagepool.py) or worked by hand.
#include <limits>

#include "nn_test_util.h"

namespace kiln::nn_test {
namespace {

using Ints = std::vector<int64_t>;

TEST(NNMaxPool, SpecPrecomputedPadsWithIndices) {
  auto out =
      run_op("MaxPool", {iota_f32({1, 1, 5, 5}, 1)}, {{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}}, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25,
                                                       25, 25, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25}));
  EXPECT_EQ(out[1].dtype(), DType::Int64);
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{12, 13, 14, 14, 14, 17, 18, 19, 19, 19, 22, 23, 24,
                                                           24, 24, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24}));
}

TEST(NNMaxPool, StorageOrderColumnMajorIndices) {
  AttributeMap attrs{{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"storage_order", int64_t(1)}};
  auto out = run_op("MaxPool", {iota_f32({1, 1, 5, 5}, 1)}, attrs, 2);
  EXPECT_EQ(values<float>(out[0]), (std::vector<float>{7, 9, 17, 19}));
  EXPECT_EQ(values<int64_t>(out[1]), (std::vector<int64_t>{6, 16, 8, 18}));
  // Indices count the batch and channel planes before the window's own plane.
  auto two = run_op("MaxPool", {f32({1, 5, 3, 2, 0, 4, 7, 6}, {2, 2, 1, 2})}, {{"kernel_shape", Ints{1, 2}}}, 2);
  EXPECT_EQ(values<float>(two[0]), (std::vector<float>{5, 3, 4, 7}));
  EXPECT_EQ(values<int64_t>(two[1]), (std::vector<int64_t>{1, 2, 5, 6}));
}

TEST(NNMaxPool, AutoPadCeilDilations) {
  auto x5 = iota_f32({1, 1, 5, 5}, 1);
  auto same =
      run_op("MaxPool", {x5},
             {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}})[0];
  EXPECT_EQ(values<float>(same), (std::vector<float>{7, 9, 10, 17, 19, 20, 22, 24, 25}));
  auto x4 = iota_f32({1, 1, 4, 4}, 1);
  auto ceil =
      run_op("MaxPool", {x4}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t(1)}})[0];
  EXPECT_EQ(ceil.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(values<float>(ceil), (std::vector<float>{11, 12, 15, 16}));
  auto floor = run_op("MaxPool", {x4}, {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}})[0];
  EXPECT_EQ(values<float>(floor), (std::vector<float>{11}));
  auto dil = run_op("MaxPool", {x4}, {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}})[0];
  EXPECT_EQ(values<float>(dil), (std::vector<float>{11, 12, 15, 16}));
  // SAME_LOWER puts the odd padding first: windows [pad, 1], [2, 3], [4, 5].
  auto lower = run_op("MaxPool", {f32({5, 1, 2, 7, 3}, {1, 1, 5})},
                      {{"kernel_shape", Ints{2}}, {"strides", Ints{2}}, {"auto_pad", std::string("SAME_LOWER")}})[0];
  EXPECT_EQ(values<float>(lower), (std::vector<float>{5, 2, 7}));
}

// With ceil_mode a last window that would start inside the end padding is dropped (as PyTorch and
// ONNX Runtime do): length 3, kernel 1, stride 2, end pad 1 gives windows at 0 and 2 only.
TEST(NNMaxPool, CeilModeDropsWindowStartingInPadding) {
  auto y =
      run_op("MaxPool", {f32({1, 2, 3}, {1, 1, 3})},
             {{"kernel_shape", Ints{1}}, {"strides", Ints{2}}, {"pads", Ints{0, 1}}, {"ceil_mode", int64_t(1)}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 3}));
}

TEST(NNMaxPool, IntegerTypesAndThreeD) {
  auto u8 = run_op("MaxPool", {Tensor::from_vector<uint8_t>({1, 200, 3, 4}, {1, 1, 2, 2})},
                   {{"kernel_shape", Ints{2, 2}}})[0];
  EXPECT_EQ(u8.dtype(), DType::UInt8);
  EXPECT_EQ(values<uint8_t>(u8), (std::vector<uint8_t>{200}));
  auto i8 = run_op("MaxPool", {Tensor::from_vector<int8_t>({-5, -3, -9}, {1, 1, 3})},
                   {{"kernel_shape", Ints{2}}, {"pads", Ints{1, 1}}})[0];
  EXPECT_EQ(values<int8_t>(i8), (std::vector<int8_t>{-5, -3, -3, -9}));  // padding never wins
  auto d3 = run_op("MaxPool", {iota_f32({1, 1, 2, 2, 2})}, {{"kernel_shape", Ints{2, 2, 1}}})[0];
  EXPECT_EQ(d3.shape(), (Shape{1, 1, 1, 1, 2}));
  EXPECT_EQ(values<float>(d3), (std::vector<float>{6, 7}));
}

TEST(NNMaxPool, Errors) {
  auto x = iota_f32({1, 1, 4, 4});
  EXPECT_THROW(run_op("MaxPool", {x}), UserError);  // kernel_shape is required
  EXPECT_THROW(run_op("MaxPool", {x}, {{"kernel_shape", Ints{2}}}), UserError);
  EXPECT_THROW(run_op("MaxPool", {x}, {{"kernel_shape", Ints{2, 2}}, {"storage_order", int64_t(2)}}), UserError);
  EXPECT_THROW(run_op("MaxPool", {x}, {{"kernel_shape", Ints{5, 5}}}), UserError);
  EXPECT_THROW(run_op("MaxPool", {x}, {{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 1}}}), UserError);
  EXPECT_THROW(run_op("MaxPool", {x}, {{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{0, 1}}}), UserError);
  EXPECT_THROW(run_op("MaxPool", {Tensor::from_vector<int32_t>({1, 2}, {1, 1, 2})}, {{"kernel_shape", Ints{2}}}),
               UserError);
  EXPECT_THROW(run_op("MaxPool", {iota_f32({4, 4})}, {{"kernel_shape", Ints{2}}}), UserError);
}

TEST(NNAveragePool, SpecPrecomputedPads) {
  auto x = iota_f32({1, 1, 5, 5}, 1);
  AttributeMap attrs{{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}};
  auto y = run_op("AveragePool", {x}, attrs)[0];
  expect_near_all(y, {7,    7.5, 8,    8.5, 9,    9.5, 10,   10.5, 11,   11.5, 12,   12.5, 13,
                      13.5, 14,  14.5, 15,  15.5, 16,  16.5, 17,   17.5, 18,   18.5, 19});
  attrs["count_include_pad"] = int64_t(1);
  auto inc = run_op("AveragePool", {x}, attrs)[0];
  expect_near_all(inc, {2.52, 3.6, 4.8,  4.08, 3.24, 4.56,  6.4,  8.4,  7.04, 5.52, 7.2,  10,  13,
                        10.8, 8.4, 6.96, 9.6,  12.4, 10.24, 7.92, 6.12, 8.4,  10.8, 8.88, 6.84});
}

TEST(NNAveragePool, SameUpperStridesCeil) {
  auto x5 = iota_f32({1, 1, 5, 5}, 1);
  auto same =
      run_op("AveragePool", {x5},
             {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}})[0];
  expect_near_all(same, {4, 5.5, 7, 11.5, 13, 14.5, 19, 20.5, 22});
  auto strided = run_op("AveragePool", {x5}, {{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})[0];
  expect_near_all(strided, {4, 6, 14, 16});
  auto ceil = run_op("AveragePool", {iota_f32({1, 1, 4, 4}, 1)},
                     {{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t(1)}})[0];
  expect_near_all(ceil, {6, 7.5, 12, 13.5});
}

// count_include_pad divides by the window's size within the padded input: a ceil_mode window that
// hangs past the end padding is still clipped there.
TEST(NNAveragePool, CountIncludePadWithCeilMode) {
  // Length 5, kernel 3, stride 2, pads [1, 0], ceil: windows [-1,2), [1,4) and [3,6), the last
  // clipped to [3,5) (the padded input ends at 5).
  AttributeMap attrs{{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 0}}, {"ceil_mode", int64_t(1)}};
  auto x = f32({2, 4, 6, 8, 10}, {1, 1, 5});
  auto excl = run_op("AveragePool", {x}, attrs)[0];
  EXPECT_EQ(excl.shape(), (Shape{1, 1, 3}));
  expect_near_all(excl, {3, 6, 9});
  attrs["count_include_pad"] = int64_t(1);
  auto incl = run_op("AveragePool", {x}, attrs)[0];
  expect_near_all(incl, {2, 6, 9});
}

TEST(NNAveragePool, OneDThreeDAndDouble) {
  auto y1 = run_op("AveragePool", {f32({1, 2, 3, 4}, {1, 1, 4})}, {{"kernel_shape", Ints{2}}})[0];
  expect_near_all(y1, {1.5, 2.5, 3.5});
  auto y3 = run_op("AveragePool", {iota_f32({1, 1, 2, 2, 2})}, {{"kernel_shape", Ints{2, 2, 2}}})[0];
  expect_near_all(y3, {3.5});
  auto d = run_op("AveragePool", {Tensor::from_vector<double>({1, 2, 4}, {1, 1, 3})}, {{"kernel_shape", Ints{3}}})[0];
  EXPECT_EQ(d.dtype(), DType::Float64);
  EXPECT_DOUBLE_EQ(d.data<double>()[0], 7.0 / 3.0);
}

TEST(NNAveragePool, Errors) {
  EXPECT_THROW(run_op("AveragePool", {iota_f32({1, 1, 4})}), UserError);
  EXPECT_THROW(
      run_op("AveragePool", {iota_f32({1, 1, 4})}, {{"kernel_shape", Ints{2}}, {"auto_pad", std::string("X")}}),
      UserError);
  EXPECT_THROW(run_op("AveragePool", {Tensor::from_vector<uint8_t>({1, 2}, {1, 1, 2})}, {{"kernel_shape", Ints{2}}}),
               UserError);
}

TEST(NNGlobalPool, AverageAndMax) {
  auto x = f32({1, 2, 3, 6, -1, -2, -3, -4}, {1, 2, 2, 2});
  auto avg = run_op("GlobalAveragePool", {x})[0];
  EXPECT_EQ(avg.shape(), (Shape{1, 2, 1, 1}));
  expect_near_all(avg, {3, -2.5});
  auto mx = run_op("GlobalMaxPool", {x})[0];
  EXPECT_EQ(mx.shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values<float>(mx), (std::vector<float>{6, -1}));
  auto one_d = run_op("GlobalMaxPool", {f32({3, 9, 1}, {1, 1, 3})})[0];
  EXPECT_EQ(one_d.shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(values<float>(one_d), (std::vector<float>{9}));
  auto h = run_op("GlobalAveragePool", {Tensor::from_vector<Half>({Half(1.0f), Half(2.0f)}, {1, 1, 2})})[0];
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(float(h.data<Half>()[0]), 1.5f);
  EXPECT_THROW(run_op("GlobalAveragePool", {iota_f32({2, 2})}), UserError);
  EXPECT_THROW(run_op("GlobalMaxPool", {Tensor::from_vector<int32_t>({1}, {1, 1, 1})}), UserError);
}

}  // namespace
}  // namespace kiln::nn_test
