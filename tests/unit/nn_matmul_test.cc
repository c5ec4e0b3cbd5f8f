// MatMul and Gemm reference kernels.
#include "nn_test_util.h"

namespace kiln::nn_test {
namespace {

TEST(NNMatMul, TwoByTwo) {
  auto y = run_op("MatMul", {f32({1, 2, 3, 4}, {2, 2}), f32({5, 6, 7, 8}, {2, 2})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{19, 22, 43, 50}));
}

TEST(NNMatMul, VectorOperandsFollowNumpy) {
  // 1-D x 1-D: inner product, a scalar.
  auto dot = run_op("MatMul", {f32({1, 2, 3}, {3}), f32({4, 5, 6}, {3})})[0];
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(values<float>(dot), (std::vector<float>{32}));
  // 1-D x 2-D: row vector times matrix, the prepended dim removed.
  auto vm = run_op("MatMul", {f32({1, 2}, {2}), f32({1, 2, 3, 4, 5, 6}, {2, 3})})[0];
  EXPECT_EQ(vm.shape(), Shape{3});
  EXPECT_EQ(values<float>(vm), (std::vector<float>{9, 12, 15}));
  // 2-D x 1-D: matrix times column vector, the appended dim removed.
  auto mv = run_op("MatMul", {f32({1, 2, 3, 4, 5, 6}, {2, 3}), f32({1, 0, -1}, {3})})[0];
  EXPECT_EQ(mv.shape(), Shape{2});
  EXPECT_EQ(values<float>(mv), (std::vector<float>{-2, -2}));
  // 3-D x 1-D keeps the batch dim.
  auto bv = run_op("MatMul", {iota_f32({2, 1, 2}), f32({1, 1}, {2})})[0];
  EXPECT_EQ(bv.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(bv), (std::vector<float>{1, 5}));
}

TEST(NNMatMul, BatchDimsBroadcast) {
  // A: [2,1,1,2] (rows [1,2] and [3,4]); B: [3,2,1] (columns [1,0], [0,1], [1,1]) -> [2,3,1,1].
  auto y = run_op("MatMul", {f32({1, 2, 3, 4}, {2, 1, 1, 2}), f32({1, 0, 0, 1, 1, 1}, {3, 2, 1})})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 3, 3, 4, 7}));
  // A rank-2 matrix shared by every batch of B.
  auto z = run_op("MatMul", {f32({1, 0, 0, 2}, {2, 2}), iota_f32({2, 2, 2})})[0];
  EXPECT_EQ(z.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{0, 1, 4, 6, 4, 5, 12, 14}));
}

TEST(NNMatMul, IntegersAreExactAndWrap) {
  auto y = run_op("MatMul", {Tensor::from_vector<int64_t>({1'000'000'000'000, 2}, {1, 2}),
                             Tensor::from_vector<int64_t>({3, 5}, {2, 1})})[0];
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{3'000'000'000'010}));
  // 65536 * 65536 = 2^32 wraps to 0 in int32 (two's complement, as ONNX Runtime computes it).
  auto w = run_op("MatMul", {Tensor::from_vector<int32_t>({65536, -3}, {1, 2}),
                             Tensor::from_vector<int32_t>({65536, 7}, {2, 1})})[0];
  EXPECT_EQ(values<int32_t>(w), (std::vector<int32_t>{-21}));
  auto u = run_op("MatMul", {Tensor::from_vector<uint32_t>({4'000'000'000u, 1}, {1, 2}),
                             Tensor::from_vector<uint32_t>({1, 5}, {2, 1})})[0];
  EXPECT_EQ(values<uint32_t>(u), (std::vector<uint32_t>{4'000'000'005u}));
}

TEST(NNMatMul, HalfAndDouble) {
  auto h = run_op("MatMul", {Tensor::from_vector<Half>({Half(1.5f), Half(2.0f)}, {1, 2}),
                             Tensor::from_vector<Half>({Half(3.0f), Half(4.0f)}, {2, 1})})[0];
  EXPECT_EQ(h.dtype(), DType::Float16);
  EXPECT_EQ(float(h.data<Half>()[0]), 12.5f);
  auto d = run_op(
      "MatMul", {Tensor::from_vector<double>({0.1, 0.2}, {1, 2}), Tensor::from_vector<double>({0.3, 0.4}, {2, 1})})[0];
  EXPECT_EQ(d.data<double>()[0], 0.1 * 0.3 + 0.2 * 0.4);
}

// Blocking over j and k must not change the k-ascending float32 sum of each element: the result is
// bit-identical to a naive loop (shapes cross the 128 x 256 block boundaries).
TEST(NNMatMul, BlockedLoopMatchesNaiveBitForBit) {
  const int64_t m = 7, k = 300, n = 600;
  auto a = noise(size_t(m * k), 1), b = noise(size_t(k * n), 2);
  auto y = run_op("MatMul", {f32(a, {m, k}), f32(b, {k, n})})[0];
  const float* yd = y.data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float s = 0;
      for (int64_t kk = 0; kk < k; ++kk) s += a[size_t(i * k + kk)] * b[size_t(kk * n + j)];
      ASSERT_EQ(yd[i * n + j], s) << i << "," << j;
    }
}

TEST(NNMatMul, Errors) {
  EXPECT_THROW(run_op("MatMul", {iota_f32({2, 3}), iota_f32({2, 3})}), UserError);
  EXPECT_THROW(run_op("MatMul", {f32({1}, {}), iota_f32({1, 1})}), UserError);
  EXPECT_THROW(run_op("MatMul", {iota_f32({2, 2}), Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2})}), UserError);
  EXPECT_THROW(run_op("MatMul", {Tensor::from_vector<int8_t>({1}, {1, 1}), Tensor::from_vector<int8_t>({1}, {1, 1})}),
               UserError);
  // Batch dims that do not broadcast.
  EXPECT_THROW(run_op("MatMul", {iota_f32({2, 1, 2}), iota_f32({3, 2, 1})}), UserError);
}

TEST(NNGemm, AlphaBetaAndVectorBias) {
  AttributeMap attrs{{"alpha", 2.0f}, {"beta", 3.0f}};
  auto y = run_op("Gemm", {f32({1, 2, 3, 4}, {2, 2}), f32({5, 6, 7, 8}, {2, 2}), f32({1, 2}, {2})}, attrs)[0];
  EXPECT_EQ(values<float>(y), (std::vector<float>{41, 50, 89, 106}));
}

TEST(NNGemm, Transposes) {
  // A^T with A stored [[1,3],[2,4]] and B^T with B stored [[5,7],[6,8]] give the same product.
  auto ta = run_op("Gemm", {f32({1, 3, 2, 4}, {2, 2}), f32({5, 6, 7, 8}, {2, 2})}, {{"transA", int64_t(1)}})[0];
  EXPECT_EQ(values<float>(ta), (std::vector<float>{19, 22, 43, 50}));
  auto tb = run_op("Gemm", {f32({1, 2, 3, 4}, {2, 2}), f32({5, 7, 6, 8}, {2, 2})}, {{"transB", int64_t(1)}})[0];
  EXPECT_EQ(values<float>(tb), (std::vector<float>{19, 22, 43, 50}));
  // Non-square: A^T is [2,3] from A [3,2]; B^T is [3,1] from B [1,3].
  auto both = run_op("Gemm", {f32({1, 4, 2, 5, 3, 6}, {3, 2}), f32({1, 0, -1}, {1, 3})},
                     {{"transA", int64_t(1)}, {"transB", int64_t(1)}})[0];
  EXPECT_EQ(both.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<float>(both), (std::vector<float>{-2, -2}));
}

TEST(NNGemm, BiasBroadcastForms) {
  auto a = f32({1, 2, 3, 4}, {2, 2}), b = f32({1, 0, 0, 1}, {2, 2});
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b, f32({10}, {})})[0]), (std::vector<float>{11, 12, 13, 14}));
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b, f32({10}, {1})})[0]), (std::vector<float>{11, 12, 13, 14}));
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b, f32({10, 20}, {2, 1})})[0]), (std::vector<float>{11, 12, 23, 24}));
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b, f32({1, 1, 1, 1}, {2, 2})})[0]), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b, Tensor{}})[0]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values<float>(run_op("Gemm", {a, b})[0]), (std::vector<float>{1, 2, 3, 4}));
}

TEST(NNGemm, IntegerTypes) {
  auto y = run_op("Gemm",
                  {Tensor::from_vector<int32_t>({1, 2}, {1, 2}), Tensor::from_vector<int32_t>({3, 4}, {2, 1}),
                   Tensor::from_vector<int32_t>({-1}, {1})},
                  {{"alpha", 2.0f}})[0];
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{21}));
}

TEST(NNGemm, Errors) {
  auto a = iota_f32({2, 3});
  EXPECT_THROW(run_op("Gemm", {a, iota_f32({2, 3})}), UserError);  // inner dims 3 vs 2
  EXPECT_THROW(run_op("Gemm", {iota_f32({1, 2, 3}), iota_f32({3, 2})}), UserError);
  EXPECT_THROW(run_op("Gemm", {a, iota_f32({3, 2}), iota_f32({3})}), UserError);  // C [3] vs Y [2,2]
  EXPECT_THROW(run_op("Gemm", {a, iota_f32({3, 2}), iota_f32({1, 2, 2})}), UserError);
}

}  // namespace
}  // namespace kiln::nn_test
