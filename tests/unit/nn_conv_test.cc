// Conv and ConvTranspose reference kernels. Expected values are the ONNX spec examples
// (onnx/backend/test/case/node/conv.py, convtranspose.py) or worked by hand.
#include "nn_test_util.h"

namespace kiln::nn_test {
namespace {

Tensor ones(const Shape& s) { return f32(std::vector<float>(size_t(shape_numel(s)), 1.0f), s); }

TEST(NNConv, SpecBasicWithAndWithoutPadding) {
  auto x = iota_f32({1, 1, 5, 5}), w = ones({1, 1, 3, 3});
  auto padded = run_op("Conv", {x, w},
                       {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}})[0];
  EXPECT_EQ(padded.shape(), (Shape{1, 1, 5, 5}));
  EXPECT_EQ(values<float>(padded), (std::vector<float>{12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                                       117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84}));
  auto valid = run_op("Conv", {x, w})[0];
  EXPECT_EQ(values<float>(valid), (std::vector<float>{54, 63, 72, 99, 108, 117, 144, 153, 162}));
  auto valid2 = run_op("Conv", {x, w}, {{"auto_pad", std::string("VALID")}})[0];
  EXPECT_EQ(values<float>(valid2), values<float>(valid));
}

TEST(NNConv, SpecStridesAndAsymmetricPadding) {
  auto x = iota_f32({1, 1, 7, 5}), w = ones({1, 1, 3, 3});
  auto strides = std::vector<int64_t>{2, 2};
  auto pad = run_op("Conv", {x, w}, {{"strides", strides}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}})[0];
  EXPECT_EQ(pad.shape(), (Shape{1, 1, 4, 3}));
  EXPECT_EQ(values<float>(pad), (std::vector<float>{12, 27, 24, 63, 108, 81, 123, 198, 141, 112, 177, 124}));
  auto nopad = run_op("Conv", {x, w}, {{"strides", strides}})[0];
  EXPECT_EQ(values<float>(nopad), (std::vector<float>{54, 72, 144, 162, 234, 252}));
  auto asym = run_op("Conv", {x, w}, {{"strides", strides}, {"pads", std::vector<int64_t>{1, 0, 1, 0}}})[0];
  EXPECT_EQ(asym.shape(), (Shape{1, 1, 4, 2}));
  EXPECT_EQ(values<float>(asym), (std::vector<float>{21, 33, 99, 117, 189, 207, 171, 183}));
}

TEST(NNConv, AutoPadSame) {
  auto same_lower = run_op("Conv", {iota_f32({1, 1, 5, 5}), ones({1, 1, 3, 3})},
                           {{"auto_pad", std::string("SAME_LOWER")}, {"strides", std::vector<int64_t>{2, 2}}})[0];
  EXPECT_EQ(values<float>(same_lower), (std::vector<float>{12, 27, 24, 63, 108, 81, 72, 117, 84}));
  // Even kernel: one pad element, at the end for SAME_UPPER and at the start for SAME_LOWER.
  auto x = f32({1, 2, 3, 4}, {1, 1, 4}), w = ones({1, 1, 2});
  EXPECT_EQ(values<float>(run_op("Conv", {x, w}, {{"auto_pad", std::string("SAME_UPPER")}})[0]),
            (std::vector<float>{3, 5, 7, 4}));
  EXPECT_EQ(values<float>(run_op("Conv", {x, w}, {{"auto_pad", std::string("SAME_LOWER")}})[0]),
            (std::vector<float>{1, 3, 5, 7}));
}

TEST(NNConv, DilationBiasAndOneD) {
  // y[i] = x[i] + 10 * x[i + 2] + bias.
  auto y = run_op("Conv", {f32({1, 2, 3, 4, 5}, {1, 1, 5}), f32({1, 10}, {1, 1, 2}), f32({0.5f}, {1})},
                  {{"dilations", std::vector<int64_t>{2}}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{31.5f, 42.5f, 53.5f}));
}

TEST(NNConv, GroupsAndDepthwise) {
  // Depthwise: each channel scaled by its own 1x1 weight, plus per-channel bias.
  auto dw = run_op("Conv", {f32({1, 2, 3, 4}, {1, 2, 1, 2}), f32({2, 3}, {2, 1, 1, 1}), f32({1, -1}, {2})},
                   {{"group", int64_t(2)}})[0];
  EXPECT_EQ(values<float>(dw), (std::vector<float>{3, 5, 8, 11}));
  // Two groups of two input channels: out0 = x0 + x1, out1 = x2 - x3.
  auto g =
      run_op("Conv", {f32({1, 2, 3, 4}, {1, 4, 1, 1}), f32({1, 1, 1, -1}, {2, 2, 1, 1})}, {{"group", int64_t(2)}})[0];
  EXPECT_EQ(values<float>(g), (std::vector<float>{3, -1}));
  // Depthwise with multiplier 2 (4 outputs from 2 channels): outputs 0,1 read channel 0.
  auto mult = run_op("Conv", {f32({5, 7}, {1, 2, 1, 1}), f32({1, 2, 3, 4}, {4, 1, 1, 1})}, {{"group", int64_t(2)}})[0];
  EXPECT_EQ(values<float>(mult), (std::vector<float>{5, 10, 21, 28}));
}

TEST(NNConv, PointwiseMultiChannelBatch) {
  // 1x1 kernel, stride 1: y[n, m, p] = sum_c w[m, c] * x[n, c, p] + b[m].
  auto x = iota_f32({2, 2, 1, 2});  // n0: c0 [0,1], c1 [2,3]; n1: c0 [4,5], c1 [6,7]
  auto y = run_op("Conv", {x, f32({1, 1, 1, -1, 2, 0}, {3, 2, 1, 1}), f32({0, 0, 100}, {3})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 1, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{2, 4, -2, -2, 100, 102, 10, 12, -2, -2, 108, 110}));
}

TEST(NNConv, ThreeD) {
  auto y = run_op("Conv", {iota_f32({1, 1, 2, 2, 3}, 1), ones({1, 1, 2, 2, 2})},
                  {{"pads", std::vector<int64_t>{0, 0, 1, 0, 0, 0}}})[0];
  // Output depth 1, height 1, width 3 (one column of padding at the start of W).
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1, 3}));
  // Columns of x summed over depth and height are 22, 26, 30; the windows cover column pairs
  // (padding, 0), (0, 1) and (1, 2).
  EXPECT_EQ(values<float>(y), (std::vector<float>{22, 48, 56}));
}

TEST(NNConv, HalfAndDouble) {
  auto h = run_op("Conv", {Tensor::from_vector<Half>({Half(1.0f), Half(2.0f), Half(3.0f)}, {1, 1, 3}),
                           Tensor::from_vector<Half>({Half(0.5f), Half(0.5f)}, {1, 1, 2})})[0];
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(float(h.data<Half>()[0]), 1.5f);
  EXPECT_EQ(float(h.data<Half>()[1]), 2.5f);
  auto d = run_op(
      "Conv", {Tensor::from_vector<double>({1, 2, 3}, {1, 1, 3}), Tensor::from_vector<double>({1, -1}, {1, 1, 2})})[0];
  EXPECT_EQ(values<double>(d), (std::vector<double>{-1, -1}));
}

// A strided, padded, dilated, grouped conv against a direct loop in the same (c, kh, kw) order.
TEST(NNConv, MatchesDirectLoop) {
  const int64_t n = 2, c = 4, h = 9, w = 8, m = 6, group = 2, kh = 3, kw = 2, sh = 2, sw = 1, dh = 1, dw = 2;
  const int64_t ph0 = 1, pw0 = 2, ph1 = 0, pw1 = 1, cg = c / group, mg = m / group;
  auto xv = noise(size_t(n * c * h * w), 3), wv = noise(size_t(m * cg * kh * kw), 4), bv = noise(size_t(m), 5);
  auto y = run_op("Conv", {f32(xv, {n, c, h, w}), f32(wv, {m, cg, kh, kw}), f32(bv, {m})},
                  {{"group", group},
                   {"strides", std::vector<int64_t>{sh, sw}},
                   {"dilations", std::vector<int64_t>{dh, dw}},
                   {"pads", std::vector<int64_t>{ph0, pw0, ph1, pw1}}})[0];
  const int64_t oh = (h + ph0 + ph1 - ((kh - 1) * dh + 1)) / sh + 1,
                ow = (w + pw0 + pw1 - ((kw - 1) * dw + 1)) / sw + 1;
  ASSERT_EQ(y.shape(), (Shape{n, m, oh, ow}));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t om = 0; om < m; ++om)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          float s = 0;
          const int64_t g = om / mg;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * sh + ky * dh - ph0, ix = ox * sw + kx * dw - pw0;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += wv[size_t(((om * cg + ic) * kh + ky) * kw + kx)] *
                     xv[size_t(((in * c + g * cg + ic) * h + iy) * w + ix)];
              }
          s += bv[size_t(om)];
          EXPECT_NEAR(y.data<float>()[((in * m + om) * oh + oy) * ow + ox], s, 1e-6);
        }
}

TEST(NNConv, Errors) {
  auto x = iota_f32({1, 2, 4, 4});
  EXPECT_THROW(run_op("Conv", {x, ones({1, 3, 3, 3})}), UserError);                           // channels
  EXPECT_THROW(run_op("Conv", {x, ones({3, 1, 3, 3})}, {{"group", int64_t(2)}}), UserError);  // 3 % 2
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3, 3}), ones({2})}), UserError);                // bias
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3})}), UserError);                              // W rank
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 5, 5})}), UserError);                           // too small
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3, 3})}, {{"auto_pad", std::string("SAME")}}), UserError);
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3, 3})}, {{"kernel_shape", std::vector<int64_t>{2, 2}}}), UserError);
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3, 3})}, {{"strides", std::vector<int64_t>{0, 1}}}), UserError);
  EXPECT_THROW(run_op("Conv", {x, ones({1, 2, 3, 3})}, {{"pads", std::vector<int64_t>{1, 1}}}), UserError);
  EXPECT_THROW(run_op("Conv", {iota_f32({2, 2}), ones({1, 2})}), UserError);
  EXPECT_THROW(
      run_op("Conv", {Tensor::from_vector<int32_t>({1, 2}, {1, 1, 2}), Tensor::from_vector<int32_t>({1}, {1, 1, 1})}),
      UserError);
}

TEST(NNConvTranspose, SpecDefault) {
  auto y = run_op("ConvTranspose", {iota_f32({1, 1, 3, 3}), ones({1, 2, 3, 3})})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 5, 5}));
  std::vector<float> plane{0, 1, 3, 3, 2, 3, 8, 15, 12, 7, 9, 21, 36, 27, 15, 9, 20, 33, 24, 13, 6, 13, 21, 15, 8};
  std::vector<float> both = plane;
  both.insert(both.end(), plane.begin(), plane.end());
  EXPECT_EQ(values<float>(y), both);
  auto y1 = run_op("ConvTranspose", {iota_f32({1, 1, 3}), ones({1, 2, 3})})[0];
  EXPECT_EQ(values<float>(y1), (std::vector<float>{0, 1, 3, 3, 2, 0, 1, 3, 3, 2}));
}

// The spec's attribute example: strides [3, 2] with output_shape [10, 8] (one row and column of
// zeros beyond the full 9 x 7 result), or equivalently output_padding [1, 1].
TEST(NNConvTranspose, SpecOutputShapeAndOutputPadding) {
  auto x = iota_f32({1, 1, 3, 3}), w = ones({1, 2, 3, 3});
  std::vector<float> rows[] = {{0, 0, 1, 1, 3, 2, 2, 0}, {3, 3, 7, 4, 9, 5, 5, 0}, {6, 6, 13, 7, 15, 8, 8, 0}};
  std::vector<float> plane;
  for (int r = 0; r < 9; ++r) plane.insert(plane.end(), rows[r / 3].begin(), rows[r / 3].end());
  plane.insert(plane.end(), 8, 0.0f);
  std::vector<float> expected = plane;
  expected.insert(expected.end(), plane.begin(), plane.end());
  auto strides = std::vector<int64_t>{3, 2};
  auto a = run_op("ConvTranspose", {x, w}, {{"strides", strides}, {"output_shape", std::vector<int64_t>{10, 8}}})[0];
  EXPECT_EQ(a.shape(), (Shape{1, 2, 10, 8}));
  EXPECT_EQ(values<float>(a), expected);
  auto b = run_op("ConvTranspose", {x, w}, {{"strides", strides}, {"output_padding", std::vector<int64_t>{1, 1}}})[0];
  EXPECT_EQ(values<float>(b), expected);
  auto c = run_op("ConvTranspose", {x, w},
                  {{"strides", strides},
                   {"output_shape", std::vector<int64_t>{10, 8}},
                   {"kernel_shape", std::vector<int64_t>{3, 3}},
                   {"output_padding", std::vector<int64_t>{1, 1}}})[0];
  EXPECT_EQ(values<float>(c), expected);
}

TEST(NNConvTranspose, SpecPadsDilationsAutoPad) {
  auto x = iota_f32({1, 1, 3, 3}), w = ones({1, 2, 3, 3});
  auto pads = run_op("ConvTranspose", {x, w},
                     {{"strides", std::vector<int64_t>{3, 2}}, {"pads", std::vector<int64_t>{1, 2, 1, 2}}})[0];
  EXPECT_EQ(pads.shape(), (Shape{1, 2, 7, 3}));
  std::vector<float> p{1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15};
  const std::vector<float> p1 = p;
  p.insert(p.end(), p1.begin(), p1.end());  // both output channels
  EXPECT_EQ(values<float>(pads), p);

  auto dil = run_op("ConvTranspose", {f32({3, 8, 1, 9, 5, 7, 3, 2, 6}, {1, 1, 3, 3}), f32({7, 2, 1, 9}, {1, 1, 2, 2})},
                    {{"dilations", std::vector<int64_t>{2, 2}}})[0];
  EXPECT_EQ(values<float>(dil), (std::vector<float>{21, 56, 13, 16, 2,  63, 35, 67, 10, 14, 24, 22, 76,
                                                    76, 21, 9,  5,  88, 45, 63, 3,  2,  33, 18, 54}));

  auto same = run_op("ConvTranspose", {x, w},
                     {{"auto_pad", std::string("SAME_UPPER")}, {"strides", std::vector<int64_t>{2, 2}}})[0];
  EXPECT_EQ(same.shape(), (Shape{1, 2, 6, 6}));
  std::vector<float> s{0, 0, 1, 1, 3, 2, 0, 0, 1,  1,  3,  2,  3, 3, 8,  5, 12, 7,
                       3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8};
  const std::vector<float> s1 = s;
  s.insert(s.end(), s1.begin(), s1.end());
  EXPECT_EQ(values<float>(same), s);
  // SAME_LOWER moves the odd padding element to the start: the full 7-wide row minus its first.
  auto lower = run_op("ConvTranspose", {f32({0, 1, 2}, {1, 1, 3}), ones({1, 1, 3})},
                      {{"auto_pad", std::string("SAME_LOWER")}, {"strides", std::vector<int64_t>{2}}})[0];
  EXPECT_EQ(values<float>(lower), (std::vector<float>{0, 1, 1, 3, 2, 2}));
}

TEST(NNConvTranspose, GroupsAndBias) {
  // Two groups, one channel each: y0 = 3 * x0 + 1, y1 = 4 * x1 - 1 (1x1 kernel).
  auto y = run_op("ConvTranspose", {f32({1, 2}, {1, 2, 1, 1}), f32({3, 4}, {2, 1, 1, 1}), f32({1, -1}, {2})},
                  {{"group", int64_t(2)}})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{4, 7}));
  // Stride 2 with a 1-wide kernel leaves gaps of zeros (plus bias).
  auto gaps = run_op("ConvTranspose", {f32({1, 2}, {1, 1, 2}), f32({5}, {1, 1, 1}), f32({1}, {1})},
                     {{"strides", std::vector<int64_t>{2}}})[0];
  EXPECT_EQ(values<float>(gaps), (std::vector<float>{6, 1, 11}));
}

TEST(NNConvTranspose, Errors) {
  auto x = iota_f32({1, 2, 3, 3});
  EXPECT_THROW(run_op("ConvTranspose", {x, ones({3, 1, 3, 3})}), UserError);                           // W dim 0
  EXPECT_THROW(run_op("ConvTranspose", {x, ones({2, 1, 3, 3})}, {{"group", int64_t(3)}}), UserError);  // 2 % 3
  EXPECT_THROW(run_op("ConvTranspose", {x, ones({2, 1, 3, 3}), ones({2})}), UserError);                // bias [1]
  EXPECT_THROW(run_op("ConvTranspose", {x, ones({2, 1, 3, 3})}, {{"output_shape", std::vector<int64_t>{5}}}),
               UserError);
  EXPECT_THROW(run_op("ConvTranspose", {x, ones({2, 1, 3, 3})}, {{"pads", std::vector<int64_t>{3, 3, 3, 3}}}),
               UserError);  // empty output
}

}  // namespace
}  // namespace kiln::nn_test
