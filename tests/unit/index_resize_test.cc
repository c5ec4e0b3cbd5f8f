// Unit tests of the Resize reference kernel (opset-13 form: X, roi, scales, sizes). Expected values
// come from the ONNX spec's numpy reference (onnx/backend/test/case/node/resize.py, interpolate_nd),
// evaluated for these inputs, or are worked out by hand where stated.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"

namespace kiln {
namespace {

using testing::run_op;
using testing::values;
using testing::f32;
using testing::i64;

Tensor scales(std::vector<float> v) { return f32(v, {int64_t(v.size())}); }
Tensor sizes(std::vector<int64_t> v) { return i64(v, {int64_t(v.size())}); }

// 1..16 as [1,1,4,4], the input of most ONNX Resize conformance tests.
Tensor grid4() {
  std::vector<float> v;
  for (int i = 1; i <= 16; ++i) v.push_back(float(i));
  return f32(v, {1, 1, 4, 4});
}

Tensor resize_scales(const Tensor& x, std::vector<float> s, AttributeMap a) {
  return run_op("Resize", {x, Tensor{}, scales(std::move(s))}, std::move(a))[0];
}
Tensor resize_sizes(const Tensor& x, std::vector<int64_t> s, AttributeMap a) {
  return run_op("Resize", {x, Tensor{}, Tensor{}, sizes(std::move(s))}, std::move(a))[0];
}

void expect_near(const Tensor& t, const std::vector<float>& want, float tol = 1e-5f) {
  auto got = values<float>(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << i;
}

TEST(Resize, UpsampleScalesNearest) {
  auto out = resize_scales(f32({1, 2, 3, 4}, {1, 1, 2, 2}), {1, 1, 2, 3}, {{"mode", std::string("nearest")}});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 4, 6}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,  //
                                                   3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
}

TEST(Resize, DownsampleNearestScalesAndSizes) {
  auto x = f32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 4});
  auto a = resize_scales(x, {1, 1, 0.6f, 0.6f}, {});  // nearest is the default mode
  EXPECT_EQ(a.shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(values<float>(a), (std::vector<float>{1, 3}));
  auto b = resize_sizes(x, {1, 1, 1, 3}, {});
  EXPECT_EQ(values<float>(b), (std::vector<float>{1, 2, 4}));
}

TEST(Resize, NearestModesAndCoordinateModes) {
  struct Case {
    const char *nearest, *coord;
    std::vector<float> row0, row7;  // first and last output rows of the 8x8 result
  };
  const Case cases[] = {
      {"round_prefer_ceil", "asymmetric", {1, 2, 2, 3, 3, 4, 4, 4}, {13, 14, 14, 15, 15, 16, 16, 16}},
      {"floor", "align_corners", {1, 1, 1, 2, 2, 3, 3, 4}, {13, 13, 13, 14, 14, 15, 15, 16}},
      {"ceil", "half_pixel", {1, 2, 2, 3, 3, 4, 4, 4}, {13, 14, 14, 15, 15, 16, 16, 16}},
  };
  for (const Case& c : cases) {
    auto out = resize_sizes(grid4(), {1, 1, 8, 8},
                            {{"mode", std::string("nearest")}, {"nearest_mode", std::string(c.nearest)},
                             {"coordinate_transformation_mode", std::string(c.coord)}});
    auto v = values<float>(out);
    EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 8), c.row0) << c.nearest;
    EXPECT_EQ(std::vector<float>(v.end() - 8, v.end()), c.row7) << c.nearest;
  }
  // Rows of the floor/align_corners case: x_original = y * 3/7 -> rows 0,0,0,1,1,2,2,3.
  auto out = resize_sizes(grid4(), {1, 1, 8, 8},
                          {{"nearest_mode", std::string("floor")},
                           {"coordinate_transformation_mode", std::string("align_corners")}});
  std::vector<float> col0;
  for (int y = 0; y < 8; ++y) col0.push_back(out.data<float>()[y * 8]);
  EXPECT_EQ(col0, (std::vector<float>{1, 1, 1, 5, 5, 9, 9, 13}));
}

TEST(Resize, TfHalfPixelForNN) {
  // Opset-11 mode kept by the frontend (test_resize_downsample_sizes_nearest_tf_half_pixel_for_nn).
  auto out = resize_sizes(grid4(), {1, 1, 3, 2}, {{"coordinate_transformation_mode", std::string("tf_half_pixel_for_nn")}});
  EXPECT_EQ(values<float>(out), (std::vector<float>{6, 8, 10, 12, 14, 16}));
}

TEST(Resize, LinearHalfPixelUpsample) {
  auto out = resize_scales(f32({1, 2, 3, 4}, {1, 1, 2, 2}), {1, 1, 2, 2}, {{"mode", std::string("linear")}});
  expect_near(out, {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4});
}

TEST(Resize, LinearAlignCornersUsesTheOutputLength) {
  // Width 4 * 0.6 -> floor(2.4) = 2 outputs, and align_corners maps x to x * (4 - 1) / (2 - 1) with
  // that output length (the spec's "length of the resized tensor"; ONNX Runtime 1.32 gives
  // [1, 4]). The ONNX 1.12 numpy reference, and test_resize_downsample_scales_linear_align_corners
  // generated from it, use the unrounded 2.4 instead ([1, 3.142857]).
  auto out = resize_scales(f32({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 2, 4}), {1, 1, 0.6f, 0.6f},
                           {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 1, 2}));
  expect_near(out, {1.0f, 4.0f});
  // Upsampling by a non-whole scale: 5 * 1.5 -> 7, x -> x * 4 / 6 (ONNX Runtime's values).
  auto up = resize_scales(f32({0, 1, 4, 9, 16}, {5}), {1.5f},
                          {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}});
  expect_near(up, {0.0f, 0.6666667f, 2.0f, 4.0f, 7.333334f, 11.333333f, 16.0f});
  // With sizes the length is exact: 2x2 -> 3x3 puts the midpoints in between (hand-computed).
  auto b = resize_sizes(f32({1, 2, 3, 4}, {2, 2}), {3, 3},
                        {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("align_corners")}});
  expect_near(b, {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4});
}

TEST(Resize, LinearPytorchHalfPixelSingleColumn) {
  auto out = resize_sizes(grid4(), {1, 1, 3, 1},
                          {{"mode", std::string("linear")},
                           {"coordinate_transformation_mode", std::string("pytorch_half_pixel")}});
  expect_near(out, {1.6666666f, 7.0f, 12.333333f});
}

TEST(Resize, CubicUpsample) {
  auto out = resize_scales(grid4(), {1, 1, 2, 2}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 8, 8}));
  expect_near(out, {0.47265625f, 0.76953125f, 1.24609375f, 1.875f,      2.28125f,     2.91015625f,  3.38671875f,
                    3.68359375f, 1.66015625f, 1.95703125f, 2.43359375f, 3.0625f,      3.46875f,     4.09765625f,
                    4.57421875f, 4.87109375f, 3.56640625f, 3.86328125f, 4.33984375f,  4.96875f,     5.375f,
                    6.00390625f, 6.48046875f, 6.77734375f, 6.08203125f, 6.37890625f,  6.85546875f,  7.484375f,
                    7.890625f,   8.51953125f, 8.99609375f, 9.29296875f, 7.70703125f,  8.00390625f,  8.48046875f,
                    9.109375f,   9.515625f,   10.14453125f, 10.62109375f, 10.91796875f, 10.22265625f, 10.51953125f,
                    10.99609375f, 11.625f,    12.03125f,   12.66015625f, 13.13671875f, 13.43359375f, 12.12890625f,
                    12.42578125f, 12.90234375f, 13.53125f, 13.9375f,     14.56640625f, 15.04296875f, 15.33984375f,
                    13.31640625f, 13.61328125f, 14.08984375f, 14.71875f, 15.125f,      15.75390625f, 16.23046875f,
                    16.52734375f});
}

TEST(Resize, CubicAMinusHalfExcludeOutside) {
  auto out = resize_scales(grid4(), {1, 1, 0.8f, 0.8f},
                           {{"mode", std::string("cubic")}, {"cubic_coeff_a", -0.5f}, {"exclude_outside", int64_t(1)}});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 3, 3}));
  expect_near(out, {1.36812675f, 2.6695013f, 4.0133367f, 6.5736251f, 7.875f, 9.2188349f, 11.948966f, 13.250341f,
                    14.594176f});
}

TEST(Resize, CubicSizesNonIntegerScale) {
  auto out = resize_sizes(grid4(), {1, 1, 9, 10}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(out.shape(), (Shape{1, 1, 9, 10}));
  auto v = values<float>(out);
  const std::vector<float> row0 = {0.45507923f, 0.64057922f, 0.97157919f, 1.42257917f, 1.9073292f,
                                   2.2233293f,  2.7080791f,  3.1590793f,  3.4900792f,  3.6755793f};
  for (size_t i = 0; i < row0.size(); ++i) EXPECT_NEAR(v[i], row0[i], 1e-5f) << i;
}

TEST(Resize, TfCropAndResize) {
  AttributeMap a{{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}};
  auto roi = f32({0, 0, 0.4f, 0.6f, 1, 1, 0.6f, 0.8f}, {8});
  auto out = run_op("Resize", {grid4(), roi, Tensor{}, sizes({1, 1, 3, 3})}, a)[0];
  expect_near(out, {7.6f, 7.9f, 8.2f, 8.8f, 9.1f, 9.4f, 10.0f, 10.3f, 10.6f});
  // Sampling points beyond the input take extrapolation_value.
  a["extrapolation_value"] = 10.0f;
  auto roi2 = f32({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}, {8});
  auto out2 = run_op("Resize", {grid4(), roi2, Tensor{}, sizes({1, 1, 3, 3})}, a)[0];
  expect_near(out2, {7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10});
  // Nearest mode extrapolates too (hand-computed: rows 1.2 + 1.2y = 1.2, 2.4, 3.6 -> 1, 2, outside;
  // the single column 0.5 * (0.6 + 0.8) * 3 = 2.1 -> 2).
  a["mode"] = std::string("nearest");
  auto roi3 = f32({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 0.8f}, {8});
  auto out3 = run_op("Resize", {grid4(), roi3, Tensor{}, sizes({1, 1, 3, 1})}, a)[0];
  EXPECT_EQ(values<float>(out3), (std::vector<float>{7, 11, 10}));
}

TEST(Resize, TfCropAndResizeWithScalesKeepsTheScaledOutputSize) {
  // The output is floor(input * scale) = 8 per axis, as ONNX shape inference (which types the
  // output at import) and ONNX Runtime have it, not the spec text's input * (roi_end - roi_start) *
  // scale. x_original = 0.25 * 3 + x * 0.5 * 3 / (8 - 1). The input is linear (4r + c + 1), so
  // bilinear sampling returns 4 * y_original + x_original + 1 exactly.
  auto roi = f32({0, 0, 0.25f, 0.25f, 1, 1, 0.75f, 0.75f}, {8});
  auto out = run_op("Resize", {grid4(), roi, scales({1, 1, 2, 2})},
                    {{"mode", std::string("linear")},
                     {"coordinate_transformation_mode", std::string("tf_crop_and_resize")}})[0];
  EXPECT_EQ(out.shape(), (Shape{1, 1, 8, 8}));
  std::vector<float> want;
  auto xo = [](int x) { return 0.75f + float(x) * 1.5f / 7.0f; };
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) want.push_back(4 * xo(y) + xo(x) + 1);
  expect_near(out, want);
}

TEST(Resize, PytorchHalfPixelSingleOutputSamplesTheFirstElement) {
  // Spec: x_original = 0 when length_resized == 1. (The numpy reference uses -0.5 instead, which only
  // differs for cubic; ONNX Runtime follows the spec.)
  auto out = resize_sizes(f32({1, 5, 2, 7}, {4}), {1},
                          {{"mode", std::string("cubic")},
                           {"coordinate_transformation_mode", std::string("pytorch_half_pixel")}});
  EXPECT_EQ(values<float>(out), (std::vector<float>{1}));
}

TEST(Resize, OtherRanks) {
  // 1-D, half_pixel linear with a non-integer scale: 5 * 1.5 -> 7 outputs.
  auto a = resize_scales(f32({1, 4, 2, 8, 5}, {5}), {1.5f}, {{"mode", std::string("linear")}});
  expect_near(a, {1.0f, 2.5f, 3.6666667f, 2.3333333f, 5.0f, 7.5f, 5.5f});
  // 3-D, asymmetric linear x2 on every axis (first two rows of the 4x4x4 output).
  std::vector<float> d3;
  for (int i = 0; i < 8; ++i) d3.push_back(1.5f * float(i));
  auto b = resize_scales(f32(d3, {2, 2, 2}), {2, 2, 2},
                         {{"mode", std::string("linear")}, {"coordinate_transformation_mode", std::string("asymmetric")}});
  EXPECT_EQ(b.shape(), (Shape{4, 4, 4}));
  auto bv = values<float>(b);
  EXPECT_EQ(std::vector<float>(bv.begin(), bv.begin() + 8), (std::vector<float>{0, 0.75f, 1.5f, 1.5f, 1.5f, 2.25f, 3, 3}));
  EXPECT_EQ(std::vector<float>(bv.end() - 4, bv.end()), (std::vector<float>{9, 9.75f, 10.5f, 10.5f}));
  // 5-D cubic, resizing four of the five axes.
  std::vector<float> d5;
  for (int i = 0; i < 72; ++i) d5.push_back(float(i % 7));
  auto c = resize_sizes(f32(d5, {2, 3, 2, 2, 3}), {1, 3, 3, 2, 4}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(c.shape(), (Shape{1, 3, 3, 2, 4}));
  auto cv = values<float>(c);
  const std::vector<float> head = {0.18940142f, 1.0071089f, 2.090399f, 2.6585829f, 3.5150282f, 4.1165905f, 5.0570202f,
                                   5.6585827f};
  for (size_t i = 0; i < head.size(); ++i) EXPECT_NEAR(cv[i], head[i], 1e-5f) << i;
  EXPECT_NEAR(cv.back(), 0.21194373f, 1e-5f);
}

TEST(Resize, IdentityScalesCopyInput) {
  auto x = f32({1.5f, -2, 3.25f, 1e30f}, {2, 2});
  for (const char* mode : {"nearest", "linear", "cubic"})
    EXPECT_EQ(values<float>(resize_scales(x, {1, 1}, {{"mode", std::string(mode)}})), values<float>(x)) << mode;
}

TEST(Resize, IntegerOutputsRoundAndSaturate) {
  // Hand-checked against interpolate_nd: linear [0,255] x2 -> 0, 63.75, 191.25, 255.
  auto a = resize_scales(Tensor::from_vector<uint8_t>({0, 255}, {2}), {2}, {{"mode", std::string("linear")}});
  EXPECT_EQ(values<uint8_t>(a), (std::vector<uint8_t>{0, 64, 191, 255}));
  // Cubic overshoot: reference values 0, -8.96, -26.89, 57.77, 197.23, 281.89, 263.96, 255.
  auto c8 = resize_scales(Tensor::from_vector<uint8_t>({0, 0, 255, 255}, {4}), {2}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(values<uint8_t>(c8), (std::vector<uint8_t>{0, 0, 0, 58, 197, 255, 255, 255}));
  auto c32 = resize_scales(Tensor::from_vector<int32_t>({0, 0, 255, 255}, {4}), {2}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(values<int32_t>(c32), (std::vector<int32_t>{0, -9, -27, 58, 197, 282, 264, 255}));
}

TEST(Resize, NearestIsExactForAnyDtype) {
  const int64_t big = (int64_t(1) << 60) + 1;
  auto a = resize_scales(i64({big, 3}, {2}), {2}, {});
  EXPECT_EQ(values<int64_t>(a), (std::vector<int64_t>{big, big, 3, 3}));
  auto b = resize_sizes(Tensor::from_vector<bool>({true, false}, {1, 2}), {2, 4}, {});
  EXPECT_EQ(values<bool>(b), (std::vector<bool>{true, true, false, false, true, true, false, false}));
}

TEST(Resize, HalfPrecisionLinear) {
  auto x = Tensor::from_vector<Half>({Half(1.0f), Half(2.0f), Half(3.0f), Half(4.0f)}, {1, 1, 2, 2});
  auto out = resize_scales(x, {1, 1, 2, 2}, {{"mode", std::string("linear")}});
  EXPECT_EQ(out.dtype(), DType::Float16);
  const std::vector<float> want = {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(float(out.data<Half>()[i]), want[size_t(i)]) << i;
}

TEST(Resize, EmptyInputsAndOutputs) {
  // Empty scales/roi tensors count as absent (opset-11 models pass 0-size constants).
  // half_pixel, scale 0.5: x_original = 0.5, 2.5 -> round_prefer_floor picks 0 and 2.
  auto a = run_op("Resize", {grid4(), f32({}, {0}), f32({}, {0}), sizes({1, 1, 2, 2})})[0];
  EXPECT_EQ(values<float>(a), (std::vector<float>{1, 3, 9, 11}));
  auto b = resize_sizes(grid4(), {1, 1, 0, 2}, {{"mode", std::string("linear")}});
  EXPECT_EQ(b.shape(), (Shape{1, 1, 0, 2}));
  auto c = resize_scales(f32({}, {1, 0}), {1, 2}, {{"mode", std::string("cubic")}});
  EXPECT_EQ(c.shape(), (Shape{1, 0}));
}

TEST(Resize, Errors) {
  auto x = f32({1, 2, 3, 4}, {2, 2});
  EXPECT_THROW(run_op("Resize", {x, Tensor{}, scales({2, 2}), sizes({4, 4})}), UserError);  // both
  EXPECT_THROW(run_op("Resize", {x}), UserError);                                            // neither
  EXPECT_THROW(resize_scales(x, {2}, {}), UserError);                                        // wrong length
  EXPECT_THROW(resize_sizes(x, {4, 4, 4}, {}), UserError);
  EXPECT_THROW(resize_scales(x, {1, 0}, {}), UserError);
  EXPECT_THROW(resize_scales(x, {1, -2}, {}), UserError);
  EXPECT_THROW(resize_sizes(x, {2, -1}, {}), UserError);
  EXPECT_THROW(resize_sizes(f32({}, {0, 2}), {2, 2}, {}), UserError);  // empty dim to non-empty
  EXPECT_THROW(resize_scales(x, {2, 2}, {{"mode", std::string("bilinear")}}), UserError);
  EXPECT_THROW(resize_scales(x, {2, 2}, {{"coordinate_transformation_mode", std::string("corners")}}), UserError);
  EXPECT_THROW(resize_scales(x, {2, 2}, {{"nearest_mode", std::string("round")}}), UserError);
  EXPECT_THROW(resize_scales(Tensor::from_vector<bool>({true, false}, {2}), {2}, {{"mode", std::string("linear")}}),
               UserError);
  EXPECT_THROW(run_op("Resize", {x, f32({0, 0, 1}, {3}), Tensor{}, sizes({3, 3})},
                      {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}),
               UserError);
}

}  // namespace
}  // namespace kiln
