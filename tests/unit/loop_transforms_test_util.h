// Helpers of the schedule-transform tests (loop_transforms_test.cc, loop_transforms_policy_test.cc):
// small hand-built kernels, deterministic inputs, and the equivalence and refusal checks — the
// kernel before and after a transform must give bit-identical outputs in the loop interpreter and
// compiled through the C emitter and the JIT; a refusal must leave the kernel as it was.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "codegen/c/c_emitter.h"
#include "loop/loop_interpreter.h"
#include "loop/loop_transforms.h"
#include "runtime/jit.h"

namespace kiln::sched_test {

using namespace loop;

// ---------------------------------------------------------------- builders

inline BufferPtr gbuf(const std::string& n, Shape s) { return std::make_shared<Buffer>(Buffer{n, DType::Float32, s, Scope::Global}); }
inline Expr v(const std::string& n) { return var(n); }
inline Expr fv(const std::string& n) { return var(n, DType::Float32); }  // a float32 scalar
inline Expr I(int64_t x) { return int_imm(x); }
inline Expr F(double x) { return float_imm(x); }
inline Expr fadd(Expr a, Expr b) { return binary(BinOp::Add, std::move(a), std::move(b)); }
inline Expr fmul(Expr a, Expr b) { return binary(BinOp::Mul, std::move(a), std::move(b)); }
inline Expr lin(const std::string& a, int64_t ca, const std::string& b) { return add(mul(v(a), I(ca)), v(b)); }

inline LoopKernel kernel(const std::string& name, std::vector<BufferPtr> ins, std::vector<BufferPtr> outs, Stmt body) {
  LoopKernel k;
  k.name = name;
  k.inputs = std::move(ins);
  k.outputs = std::move(outs);
  k.body = std::move(body);
  return k;
}

// for i in [0, n) { y[i] = x[i] * 2 + 1 }
inline LoopKernel ew1d(int64_t n) {
  auto x = gbuf("x", {n}), y = gbuf("y", {n});
  return kernel("ew1d", {x}, {y}, for_loop("i", I(n), {store(y, v("i"), fadd(fmul(load(x, v("i")), F(2)), F(1)))}));
}

// y[i, j] = max(x[i, j] + b[j], 0)
inline LoopKernel nest2d(int64_t m, int64_t n) {
  auto x = gbuf("x", {m, n}), b = gbuf("b", {n}), y = gbuf("y", {m, n});
  Expr s = fadd(load(x, lin("i", n, "j")), load(b, v("j")));
  return kernel("nest2d", {x, b}, {y},
                for_loop("i", I(m), {for_loop("j", I(n), {store(y, lin("i", n, "j"), binary(BinOp::Max, s, F(0)))})}));
}

// y[i, j] = x[j, i]
inline LoopKernel transpose(int64_t m, int64_t n) {
  auto x = gbuf("x", {n, m}), y = gbuf("y", {m, n});
  return kernel("transpose", {x}, {y},
                for_loop("i", I(m), {for_loop("j", I(n), {store(y, lin("i", n, "j"), load(x, lin("j", m, "i")))})}));
}

// y[i] = Σ_k x[i, k] (a row reduction with its accumulator inside the row loop)
inline LoopKernel rowsum(int64_t m, int64_t r) {
  auto x = gbuf("x", {m, r}), y = gbuf("y", {m});
  return kernel("rowsum", {x}, {y},
                for_loop("i", I(m), {let("acc", F(0)), for_loop("k", I(r), {assign("acc", fadd(fv("acc"), load(x, lin("i", r, "k"))))}),
                                     store(y, v("i"), fv("acc"))}));
}

// y[i, j] = Σ_t a[i, t] · w[t, j]
inline LoopKernel matmul(int64_t m, int64_t kk, int64_t n) {
  auto a = gbuf("a", {m, kk}), w = gbuf("w", {kk, n}), y = gbuf("y", {m, n});
  Stmt t = for_loop("t", I(kk), {assign("acc", fadd(fv("acc"), fmul(load(a, lin("i", kk, "t")), load(w, lin("t", n, "j")))))});
  return kernel("matmul", {a, w}, {y},
                for_loop("i", I(m), {for_loop("j", I(n), {let("acc", F(0)), t, store(y, lin("i", n, "j"), fv("acc"))})}));
}

// y[o] = Σ_t x[o + t] · w[t]
inline LoopKernel conv1d(int64_t n, int64_t taps) {
  auto x = gbuf("x", {n + taps - 1}), w = gbuf("w", {taps}), y = gbuf("y", {n});
  Stmt t = for_loop("t", I(taps), {assign("acc", fadd(fv("acc"), fmul(load(x, add(v("o"), v("t"))), load(w, v("t")))))});
  return kernel("conv1d", {x, w}, {y}, for_loop("o", I(n), {let("acc", F(0)), t, store(y, v("o"), fv("acc"))}));
}

// for i in [0, n) { for j in [0, i + 1) { y[i, j] = x[i, j] * 3 } } — a non-constant extent.
inline LoopKernel triangle(int64_t n) {
  auto x = gbuf("x", {n, n}), y = gbuf("y", {n, n});
  return kernel("triangle", {x}, {y},
                for_loop("i", I(n), {for_loop("j", add(v("i"), I(1)), {store(y, lin("i", n, "j"), fmul(load(x, lin("i", n, "j")), F(3)))})}));
}

// ---------------------------------------------------------------- running

// Deterministic inputs: multiples of 1/32 in [-3.3, 3.3] (sums of a few stay exact).
inline std::vector<Tensor> inputs_for(const LoopKernel& k) {
  std::vector<Tensor> r;
  for (size_t b = 0; b < k.inputs.size(); ++b) {
    Tensor t(DType::Float32, k.inputs[b]->shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float((i * 7919 + int64_t(b) * 31) % 211 - 105) / 32;
    r.push_back(t);
  }
  return r;
}

// Outputs start at -7 so an element the kernel does not write compares too.
inline std::vector<Tensor> fresh_outputs(const LoopKernel& k) {
  std::vector<Tensor> r;
  for (const auto& b : k.outputs) {
    Tensor t(DType::Float32, b->shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = -7;
    r.push_back(t);
  }
  return r;
}

inline std::vector<Tensor> interpreted(const LoopKernel& k) {
  auto ins = inputs_for(k);
  auto outs = fresh_outputs(k);
  std::vector<Tensor*> ip, op;
  for (auto& t : ins) ip.push_back(&t);
  for (auto& t : outs) op.push_back(&t);
  interpret(k, ip, op);
  return outs;
}

inline void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].bitwise_equal(want[i])) << what << ", output " << i;
}

// Each pair (before, after): the interpreter gives the same outputs for both, and both compiled
// (one module for all pairs) give those outputs too.
inline void expect_equivalent(const std::vector<std::pair<LoopKernel, LoopKernel>>& pairs, const std::string& tag) {
  std::vector<LoopKernel> ks;
  std::vector<std::vector<Tensor>> want;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [before, after] = pairs[i];
    want.push_back(interpreted(before));
    expect_same(interpreted(after), want.back(), "interpreted " + after.name + " after the transform");
    before.name = "before_" + before.name + std::to_string(i);
    after.name = "after_" + after.name + std::to_string(i);
    ks.push_back(before);
    ks.push_back(after);
  }
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_sched_" + tag + "_" + std::to_string(::getpid()));
  runtime::CompileOptions opts;
  opts.cache_dir = dir.string();
  auto module = runtime::JitModule::build(codegen::emit_c(ks), opts);
  for (size_t i = 0; i < ks.size(); ++i) {
    auto ins = inputs_for(ks[i]);
    auto outs = fresh_outputs(ks[i]);
    std::vector<void*> args;
    for (auto& t : ins) args.push_back(t.raw());
    for (auto& t : outs) args.push_back(t.raw());
    module->get(ks[i].name)(args.data());
    expect_same(outs, want[i / 2], "compiled " + ks[i].name);
  }
  module.reset();
  std::filesystem::remove_all(dir);
}

// The transform `f` must throw ScheduleError whose message contains `why`, leaving k unchanged.
template <class Fn>
inline void expect_refused(LoopKernel k, Fn f, const std::string& why) {
  const std::string before = print_kernel(k);
  const StmtNode* root = k.body.get();
  try {
    f(k);
    ADD_FAILURE() << "not refused; now:\n" << print_kernel(k);
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
  EXPECT_EQ(k.body.get(), root);
  EXPECT_EQ(print_kernel(k), before);
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace kiln::sched_test
