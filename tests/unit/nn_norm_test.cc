// Normalization reference kernels: BatchNormalization, InstanceNormalization, LayerNormalization,
// LRN, MeanVarianceNormalization. Expected values worked by hand from the ONNX definitions.
#include "nn_test_util.h"

namespace kiln::nn_test {
namespace {

TEST(NNBatchNorm, Inference) {
  // Channel 0: (x - 1) / 2; channel 1: 2 * (x - 3) / 1 + 1.
  auto y =
      run_op("BatchNormalization",
             {f32({1, 2, 3, 4}, {1, 2, 1, 2}), f32({1, 2}, {2}), f32({0, 1}, {2}), f32({1, 3}, {2}), f32({4, 1}, {2})},
             {{"epsilon", 0.0f}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 1, 2}));
  expect_near_all(y, {0, 0.5, 1, 3});
  // Default epsilon 1e-5 is added to the variance: (2 - 0) / sqrt(1 + 1e-5).
  auto e =
      run_op("BatchNormalization", {f32({2}, {1, 1}), f32({1}, {1}), f32({0}, {1}), f32({0}, {1}), f32({1}, {1})})[0];
  expect_near_all(e, {2 / std::sqrt(1 + 1e-5)}, 1e-7);
}

TEST(NNBatchNorm, TrainingModeUsesBatchStatistics) {
  // One channel over batch 2 x width 2: values 1, 3, 5, 7 -> mean 4, population variance 5.
  auto out = run_op("BatchNormalization",
                    {f32({1, 3, 5, 7}, {2, 1, 2}), f32({1}, {1}), f32({0}, {1}), f32({0}, {1}), f32({1}, {1})},
                    {{"epsilon", 0.0f}, {"training_mode", int64_t(1)}}, 3);
  ASSERT_EQ(out.size(), 3u);
  const double s5 = std::sqrt(5.0);
  expect_near_all(out[0], {-3 / s5, -1 / s5, 1 / s5, 3 / s5});
  expect_near_all(out[1], {0.0 * 0.9 + 4 * 0.1});  // running mean, default momentum 0.9
  expect_near_all(out[2], {1.0 * 0.9 + 5 * 0.1});  // running var
  auto m = run_op("BatchNormalization",
                  {f32({1, 3, 5, 7}, {2, 1, 2}), f32({1}, {1}), f32({0}, {1}), f32({2}, {1}), f32({3}, {1})},
                  {{"momentum", 0.5f}, {"training_mode", int64_t(1)}}, 3);
  expect_near_all(m[1], {3});
  expect_near_all(m[2], {4});
}

TEST(NNBatchNorm, MixedParameterTypesAndHalf) {
  // opset 15 lets scale/B and mean/var have their own float types.
  auto y = run_op("BatchNormalization",
                  {Tensor::from_vector<Half>({Half(3.0f)}, {1, 1}), Tensor::from_vector<double>({2}, {1}),
                   Tensor::from_vector<double>({1}, {1}), f32({1}, {1}), f32({4}, {1})},
                  {{"epsilon", 0.0f}})[0];
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(float(y.data<Half>()[0]), 3.0f);  // 2 * (3 - 1) / 2 + 1
}

TEST(NNBatchNorm, Errors) {
  auto x = iota_f32({1, 2, 2});
  auto c = f32({1, 1}, {2});
  EXPECT_THROW(run_op("BatchNormalization", {x, f32({1}, {1}), c, c, c}), UserError);
  EXPECT_THROW(run_op("BatchNormalization", {x, c, c, c}), UserError);
  EXPECT_THROW(
      run_op("BatchNormalization", {f32({1}, {1}), f32({1}, {1}), f32({1}, {1}), f32({1}, {1}), f32({1}, {1})}),
      UserError);
  EXPECT_THROW(run_op("BatchNormalization", {x, c, c, Tensor::from_vector<int64_t>({0, 0}, {2}), c}), UserError);
}

TEST(NNInstanceNorm, PerSampleAndChannel) {
  // Plane [1,2,3,4]: mean 2.5, variance 1.25; scale 2, bias 1. Plane [5,7,5,7]: mean 6, variance 1;
  // scale 3, bias -1.
  auto y =
      run_op("InstanceNormalization", {f32({1, 2, 3, 4, 5, 7, 5, 7}, {1, 2, 4}), f32({2, 3}, {2}), f32({1, -1}, {2})},
             {{"epsilon", 0.0f}})[0];
  const double s = std::sqrt(1.25);
  expect_near_all(y, {1 - 3 / s, 1 - 1 / s, 1 + 1 / s, 1 + 3 / s, -4, 2, -4, 2});
  EXPECT_THROW(run_op("InstanceNormalization", {iota_f32({1, 2, 4}), f32({1}, {1}), f32({1}, {1})}), UserError);
  EXPECT_THROW(run_op("InstanceNormalization", {iota_f32({2, 2}), f32({1, 1}, {2}), f32({1, 1}, {2})}), UserError);
}

TEST(NNLayerNorm, LastAxisWithMeanAndInvStdDev) {
  // Rows [1,3] and [2,6]: means 2 and 4, variances 1 and 4 -> normalized [-1, 1] for both rows.
  auto out = run_op("LayerNormalization", {f32({1, 3, 2, 6}, {2, 2}), f32({2, 3}, {2}), f32({1, 1}, {2})},
                    {{"epsilon", 0.0f}}, 3);
  ASSERT_EQ(out.size(), 3u);
  expect_near_all(out[0], {-1, 4, -1, 4});
  EXPECT_EQ(out[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(out[1].dtype(), DType::Float32);
  expect_near_all(out[1], {2, 4});
  expect_near_all(out[2], {1, 0.5});
}

TEST(NNLayerNorm, AxisZeroNoBiasAndBroadcastScale) {
  // All four values [1,3,2,6]: mean 3, variance (4 + 0 + 1 + 9) / 4 = 3.5.
  auto out = run_op("LayerNormalization", {f32({1, 3, 2, 6}, {2, 2}), f32({1, 1, 1, 1}, {2, 2})},
                    {{"epsilon", 0.0f}, {"axis", int64_t(0)}}, 2);
  const double s = std::sqrt(3.5);
  expect_near_all(out[0], {-2 / s, 0, -1 / s, 3 / s});
  EXPECT_EQ(out[1].shape(), (Shape{1, 1}));
  expect_near_all(out[1], {3});
  // A [1]-shaped scale broadcasts over the normalized dims.
  auto b = run_op("LayerNormalization", {f32({1, 3}, {1, 2}), f32({10}, {1})}, {{"epsilon", 0.0f}})[0];
  expect_near_all(b, {-10, 10});
}

TEST(NNLayerNorm, StashTypeAndDouble) {
  auto out = run_op("LayerNormalization",
                    {Tensor::from_vector<double>({1, 3}, {1, 2}), Tensor::from_vector<double>({1, 1}, {2})},
                    {{"epsilon", 0.0f}, {"stash_type", int64_t(11)}}, 2);
  EXPECT_EQ(out[0].dtype(), DType::Float64);
  EXPECT_EQ(out[1].dtype(), DType::Float64);
  EXPECT_EQ(values<double>(out[0]), (std::vector<double>{-1, 1}));
  EXPECT_THROW(run_op("LayerNormalization", {iota_f32({1, 2}), f32({1, 1}, {2})}, {{"stash_type", int64_t(7)}}),
               UserError);
  EXPECT_THROW(run_op("LayerNormalization", {iota_f32({1, 2}), f32({1, 1, 1}, {3})}), UserError);
  EXPECT_THROW(run_op("LayerNormalization", {iota_f32({1, 2}), f32({1, 1}, {2})}, {{"axis", int64_t(2)}}), UserError);
}

TEST(NNLrn, AcrossChannels) {
  // size 3, alpha/size = 1, beta 1, bias 1: y_c = x_c / (1 + sum of squares of neighbours).
  auto x = f32({1, 2, 3}, {1, 3, 1, 1});
  auto y = run_op("LRN", {x}, {{"size", int64_t(3)}, {"alpha", 3.0f}, {"beta", 1.0f}, {"bias", 1.0f}})[0];
  expect_near_all(y, {1.0 / 6, 2.0 / 15, 3.0 / 14});
  // Even size 2: the window is c .. c + 1.
  auto y2 = run_op("LRN", {x}, {{"size", int64_t(2)}, {"alpha", 2.0f}, {"beta", 1.0f}, {"bias", 1.0f}})[0];
  expect_near_all(y2, {1.0 / 6, 2.0 / 14, 3.0 / 10});
  // Defaults alpha 1e-4, beta 0.75, bias 1.
  auto d = run_op("LRN", {f32({10}, {1, 1, 1})}, {{"size", int64_t(1)}})[0];
  expect_near_all(d, {10 / std::pow(1 + 1e-4 * 100, 0.75)});
  EXPECT_THROW(run_op("LRN", {x}), UserError);
  EXPECT_THROW(run_op("LRN", {x}, {{"size", int64_t(0)}}), UserError);
}

TEST(NNMeanVarianceNorm, DefaultAndCustomAxes) {
  // Default axes [0, 2, 3]: channel 0 holds [1, 3] (mean 2, std 1), channel 1 [2, 2] (std 0).
  auto y = run_op("MeanVarianceNormalization", {f32({1, 3, 2, 2}, {1, 2, 1, 2})})[0];
  expect_near_all(y, {-1, 1, 0, 0});
  // Over the last axis only: rows [0, 4] and [1, 1].
  auto z = run_op("MeanVarianceNormalization", {f32({0, 4, 1, 1}, {2, 2})}, {{"axes", std::vector<int64_t>{-1}}})[0];
  expect_near_all(z, {-1, 1, 0, 0});
  EXPECT_THROW(run_op("MeanVarianceNormalization", {iota_f32({2, 2})}), UserError);  // axis 3 out of range
  EXPECT_THROW(run_op("MeanVarianceNormalization", {iota_f32({2, 2})}, {{"axes", std::vector<int64_t>{1, -1}}}),
               UserError);
}

}  // namespace
}  // namespace kiln::nn_test
