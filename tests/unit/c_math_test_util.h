// Shared harness of the C prelude math tests (c_expf_test.cc, c_erff_test.cc): one unary op's
// float32, float16 and float64 kernels (vectorised loops, as the lowering marks them) emitted and
// JIT-compiled in one module per test suite, and float bit helpers.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "codegen/c/c_emitter.h"
#include "loop/loop_ir.h"
#include "runtime/jit.h"

namespace kiln::testing {

// Elements of the float32 kernel (the float16 one has 65536, one per half bit pattern; float64 64).
constexpr int64_t kMathChunk = int64_t(1) << 20;

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// y[i] = op(x[i]) over n elements of type t, in a vectorised loop.
inline loop::LoopKernel unary_kernel(const std::string& name, loop::UnOp op, DType t, int64_t n) {
  using namespace loop;
  auto x = std::make_shared<Buffer>(Buffer{"x", t, {n}, Scope::Global});
  auto y = std::make_shared<Buffer>(Buffer{"y", t, {n}, Scope::Global});
  Expr i = var("i");
  return {name, {}, {x}, {y}, for_loop("i", int_imm(n), {store(y, i, unary(op, load(x, i)))}, ForKind::Vectorized)};
}

// <prefix>_f32, <prefix>_f16 and <prefix>_f64 kernels of `op` in one module, in a private cache.
class UnaryMathModule {
 public:
  UnaryMathModule(const std::string& prefix, loop::UnOp op)
      : dir_(std::filesystem::temp_directory_path() / ("kiln_c_" + prefix + "_test_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    source_ = codegen::emit_c({unary_kernel(prefix + "_f32", op, DType::Float32, kMathChunk),
                               unary_kernel(prefix + "_f16", op, DType::Float16, 65536),
                               unary_kernel(prefix + "_f64", op, DType::Float64, 64)});
    runtime::CompileOptions o;
    o.cache_dir = dir_.string();
    module_ = runtime::JitModule::build(source_, o);
  }
  ~UnaryMathModule() {
    module_.reset();
    std::filesystem::remove_all(dir_);
  }
  void call(const std::string& name, void* x, void* y) const {
    void* args[] = {x, y};
    module_->get(name)(args);
  }
  const std::string& source() const { return source_; }

 private:
  std::filesystem::path dir_;
  std::string source_;
  std::unique_ptr<runtime::JitModule> module_;
};

// The fixture of a prelude math suite: one module with Spec::op's kernels per suite
// (Spec: `static constexpr const char* prefix; static constexpr loop::UnOp op;`).
template <class Spec>
class UnaryMathSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    module_ = std::make_unique<UnaryMathModule>(Spec::prefix, Spec::op);
    source_ = module_->source();
  }
  static void TearDownTestSuite() { module_.reset(); }
  static void call(const char* name, void* x, void* y) { module_->call(name, x, y); }

  static inline std::string source_;
  static inline std::unique_ptr<UnaryMathModule> module_;
};

// For an odd function bounded by 1 (erf, tanh): each y[i] against the correctly rounded ref(x[i])
// (computed in double): NaN exactly, anything else within max_ulp with the input's sign and
// |y| <= 1 (so the ulp distance is the distance of bit patterns of equal sign, subnormals
// included). Reports the first failures; returns the largest distance.
inline int64_t check_odd_bounded(const char* name, double (*ref)(double), int64_t max_ulp, const std::vector<float>& x,
                                 const std::vector<float>& y) {
  int64_t worst = 0;
  int failures = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = float(ref(double(x[i]))), got = y[i];
    bool ok;
    if (std::isnan(want)) {
      ok = std::isnan(got);
    } else {
      const int64_t d = std::llabs(int64_t(bits(got)) - int64_t(bits(want)));
      worst = std::max(worst, d);
      ok = d <= max_ulp && std::signbit(got) == std::signbit(x[i]) && std::fabs(got) <= 1.0f;
    }
    if (!ok && ++failures <= 5)
      ADD_FAILURE() << name << "(" << std::hexfloat << x[i] << ") = " << got << ", want " << want;
  }
  return worst;
}

// Fills `x` (kMathChunk floats) with input sets and calls run() after each: 2^24 bit patterns
// spread over all 2^32 (every 256th, the low byte varying: both signs, NaNs, infinities,
// subnormal and huge inputs), then every float within 2^17 of each of `centres`, both signs.
// Returns the largest of run()'s results.
template <class Run>
int64_t sweep_inputs(std::vector<float>& x, const std::vector<float>& centres, Run run) {
  int64_t worst = 0;
  for (uint32_t c = 0; c < 16; ++c) {
    for (uint32_t i = 0; i < uint32_t(kMathChunk); ++i) {
      const uint32_t j = c * uint32_t(kMathChunk) + i;
      x[i] = from_bits((j << 8) | ((j * 157u) & 0xffu));
    }
    worst = std::max(worst, run());
  }
  size_t k = 0;
  for (float centre : centres)
    for (uint32_t d = 0; d < (1u << 18); ++d) {
      const float f = from_bits(bits(centre) - (1u << 17) + d);
      x[k++] = f;
      x[k++] = -f;
    }
  std::fill(x.begin() + std::ptrdiff_t(k), x.end(), 0.0f);
  return std::max(worst, run());
}

}  // namespace kiln::testing
