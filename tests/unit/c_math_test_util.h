// Shared harness of the C prelude math tests (c_expf_test.cc, c_erff_test.cc): one unary op's
// float32, float16 and float64 kernels (vectorised loops, as the lowering marks them) emitted and
// JIT-compiled in one module per test suite, and float bit helpers.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

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

}  // namespace kiln::testing
