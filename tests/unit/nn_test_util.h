// Small helpers shared by the nn_*_test.cc kernel tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "ir/tensor.h"
#include "op_test_util.h"

namespace kiln::nn_test {

using kiln::testing::run_op;
using kiln::testing::values;

inline Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, std::move(s)); }

// start, start + 1, ... as float32 of the given shape (the ONNX tests' np.arange inputs).
inline Tensor iota_f32(Shape s, float start = 0.0f) {
  std::vector<float> v(size_t(shape_numel(s)));
  std::iota(v.begin(), v.end(), start);
  return f32(v, std::move(s));
}

// Deterministic pseudo-random floats in [-1, 1) for comparisons against naive loops.
inline std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1 << 23) - 1.0f;
  }
  return v;
}

inline void expect_near_all(const Tensor& t, const std::vector<double>& expected, double tol = 1e-5) {
  ASSERT_EQ(t.numel(), int64_t(expected.size()));
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_NEAR(t.as_double(i), expected[size_t(i)], tol) << "element " << i;
}

}  // namespace kiln::nn_test
