// The depthwise stencil micro-kernel (src/kernels/depthwise.cc) compiled by the JIT for each of
// its code paths — AVX-512 (masked vectors), AVX2 + FMA (whole vectors and a masked rest) and the
// plain loops — against the interface's semantics (kernels::depthwise_f32): windows of 3x3, 5x5,
// 7x7 and a rectangle, row counts that exercise every row block (8, 4, 2, 1 and their sums),
// column counts below, at and past a vector, row strides wider than the rows, and the output's
// elements outside the rows × cols block left as they were. Within the FMA contract (the kernel
// sums window column by column).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>

#include <unistd.h>

#include "kernels/depthwise.h"
#include "runtime/jit.h"

namespace kiln {
namespace {

const std::vector<std::pair<int64_t, int64_t>> kWindows = {{3, 3}, {5, 5}, {7, 7}, {2, 4}};

std::string wrapper_source() {
  std::set<std::pair<int64_t, int64_t>> windows(kWindows.begin(), kWindows.end());
  std::ostringstream os;
  os << "#include <stdint.h>\n" << kernels::depthwise_c_source(windows);
  // One entry point per window: args = {rows, cols, in, ldi, w, out, ldo}.
  for (auto [kh, kw] : kWindows)
    os << "void run_" << kh << "x" << kw << "(void* const* a) {\n"
       << "  " << kernels::depthwise_name(kh, kw)
       << "(*(const int64_t*)a[0], *(const int64_t*)a[1], (const float*)a[2], *(const int64_t*)a[3], (const float*)a[4],\n"
          "      (float*)a[5], *(const int64_t*)a[6]);\n"
          "}\n";
  return os.str();
}

void check_isa(const std::string& march) {
  SCOPED_TRACE(march);
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_dw_test_" + std::to_string(::getpid()));
  runtime::CompileOptions o;
  o.cache_dir = dir.string();
  for (auto& f : o.flags)
    if (f.rfind("-march=", 0) == 0) f = march;
  auto module = runtime::JitModule::build(wrapper_source(), o);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto [kh, kw] : kWindows)
    for (int64_t rows : {1, 2, 3, 7, 8, 14, 19})
      for (int64_t cols : {1, 5, 8, 13, 16, 17, 37}) {
        SCOPED_TRACE(std::to_string(kh) + "x" + std::to_string(kw) + ", " + std::to_string(rows) + " x " +
                     std::to_string(cols));
        const int64_t ldi = cols + kw - 1 + 3, ldo = cols + 5;
        std::vector<float> in(size_t((rows + kh - 1) * ldi)), w(size_t(kh * kw)), out(size_t(rows * ldo));
        for (auto* v : {&in, &w, &out})
          for (float& x : *v) x = u(rng);
        std::vector<float> want = out, got = out;
        kernels::depthwise_f32(kh, kw, rows, cols, in.data(), ldi, w.data(), want.data(), ldo);
        int64_t rows_v = rows, cols_v = cols, ldi_v = ldi, ldo_v = ldo;
        void* args[] = {&rows_v, &cols_v, in.data(), &ldi_v, w.data(), got.data(), &ldo_v};
        module->get("run_" + std::to_string(kh) + "x" + std::to_string(kw))(args);
        for (int64_t y = 0; y < rows; ++y)
          for (int64_t x = 0; x < ldo; ++x) {
            const size_t at = size_t(y * ldo + x);
            if (x >= cols)
              ASSERT_EQ(std::bit_cast<uint32_t>(got[at]), std::bit_cast<uint32_t>(want[at])) << "row " << y << " column " << x << " (outside)";
            else
              ASSERT_NEAR(got[at], want[at], 1e-5 * double(kh * kw)) << "row " << y << " column " << x;
          }
      }
  module.reset();
  std::filesystem::remove_all(dir);
}

TEST(DepthwiseKernel, EveryCodePathMatchesTheInterface) {
#if defined(__x86_64__)
  check_isa("-march=x86-64");   // the plain loops
  check_isa("-march=haswell");  // AVX2 + FMA
  // AVX-512 only where this machine can run it (the CI machines can).
  if (__builtin_cpu_supports("avx512f")) check_isa("-march=skylake-avx512");
  else std::cerr << "DepthwiseKernel: no AVX-512 on this machine; its code path was not run\n";
#else
  check_isa("-march=native");  // the plain loops
#endif
}

}  // namespace
}  // namespace kiln
