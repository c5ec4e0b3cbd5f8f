// reciprocal_divisors: divisions by loop-invariant values multiply by the reciprocal — within
// 1.5 ulp of the division where the reciprocal is normal, the division itself (same bits) where it
// is not — and the divisions it must leave alone.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "loop_transforms_test_util.h"

namespace kiln::sched_test {
namespace {

// for i in [0, m) { f32 dv = d[i]; for j in [0, n) { y1[i, j] = x[i, j] / dv; y2[i, j] = x[i, j] / 3;
//                                                     y3[i, j] = x[i, j] / x[i, (j + 1) mod n] } }
LoopKernel row_divisions(int64_t m, int64_t n, ForKind inner) {
  auto x = gbuf("x", {m, n}), d = gbuf("d", {m}), y1 = gbuf("y1", {m, n}), y2 = gbuf("y2", {m, n}), y3 = gbuf("y3", {m, n});
  const Expr xij = load(x, lin("i", n, "j"));
  const Expr next = load(x, add(mul(v("i"), I(n)), mod(add(v("j"), I(1)), I(n))));
  return kernel("row_divisions", {x, d}, {y1, y2, y3},
                for_loop("i", I(m),
                         {let("dv", load(d, v("i"))),
                          for_loop("j", I(n),
                                   {store(y1, lin("i", n, "j"), binary(BinOp::Div, xij, fv("dv"))),
                                    store(y2, lin("i", n, "j"), binary(BinOp::Div, xij, F(3))),
                                    store(y3, lin("i", n, "j"), binary(BinOp::Div, xij, next))},
                                   inner)}));
}

// Divisors per row: normal ones, then 0, inf, NaN, a subnormal and one whose reciprocal is subnormal.
std::vector<Tensor> inputs(int64_t m, int64_t n) {
  Tensor x(DType::Float32, {m, n}), d(DType::Float32, {m});
  for (int64_t i = 0; i < m * n; ++i) x.data<float>()[i] = float((i * 7919) % 211 - 105) / 7 + 0.25f;
  const float special[] = {0.0f, INFINITY, NAN, 1e-39f, 3e38f, -0x1p-126f};
  for (int64_t i = 0; i < m; ++i) d.data<float>()[i] = i < 6 ? special[i] : float(i * 37 % 19 + 1) / 3 * (i % 2 ? -1 : 1);
  return {x, d};
}

std::vector<Tensor> run(const LoopKernel& k, std::vector<Tensor> ins) {
  std::vector<Tensor> outs;
  for (const auto& b : k.outputs) outs.emplace_back(DType::Float32, b->shape);
  std::vector<Tensor*> ip, op;
  for (auto& t : ins) ip.push_back(&t);
  for (auto& t : outs) op.push_back(&t);
  interpret(k, ip, op);
  return outs;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

TEST(ReciprocalDivisors, WithinRoundingAndExactOutsideTheNormalRange) {
  const int64_t m = 12, n = 37;
  for (ForKind inner : {ForKind::Serial, ForKind::Vectorized}) {
    const LoopKernel before = row_divisions(m, n, inner);
    LoopKernel after = before;
    reciprocal_divisors(after);
    const std::string text = print_kernel(after);
    EXPECT_NE(text.find("kiln_rcp = (1.0f / dv)"), std::string::npos) << text;
    EXPECT_NE(text.find("(x[((i * 37) + j)] * 0.333333343f)"), std::string::npos) << text;  // fl(1/3)
    EXPECT_NE(text.find("/ x["), std::string::npos) << "a divisor the loop changes stays: " << text;
    const auto want = run(before, inputs(m, n)), got = run(after, inputs(m, n));
    const std::vector<Tensor> in = inputs(m, n);
    const float* d = in[1].data<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t e = i * n + j;
        const float w1 = want[0].data<float>()[e], g1 = got[0].data<float>()[e];
        const float ad = std::fabs(d[i]);
        if (ad >= 0x1p-126f && ad <= 0x1p126f)
          EXPECT_TRUE(same_bits(g1, w1) || std::fabs(g1 - w1) <= 0x1.8p-23f * std::fabs(w1)) << "row " << i << " col " << j;
        else
          EXPECT_TRUE(same_bits(g1, w1)) << "row " << i << " (divisor " << d[i] << ") col " << j << ": " << g1 << " vs " << w1;
        const float w2 = want[1].data<float>()[e], g2 = got[1].data<float>()[e];
        EXPECT_LE(std::fabs(g2 - w2), 0x1.8p-23f * std::fabs(w2));
        EXPECT_TRUE(same_bits(got[2].data<float>()[e], want[2].data<float>()[e]));
      }
    // Compiled, the rewritten kernel gives the interpreter's bits (a single multiply: nothing to
    // contract into an FMA).
    const auto dir = std::filesystem::temp_directory_path() / ("kiln_rcp_" + std::to_string(::getpid()));
    runtime::CompileOptions opts;
    opts.cache_dir = dir.string();
    auto module = runtime::JitModule::build(codegen::emit_c({after}), opts);
    auto ins = inputs(m, n);
    std::vector<Tensor> outs;
    for (const auto& b : after.outputs) outs.emplace_back(DType::Float32, b->shape);
    std::vector<void*> args;
    for (auto& t : ins) args.push_back(t.raw());
    for (auto& t : outs) args.push_back(t.raw());
    module->get(after.name)(args.data());
    for (size_t o = 0; o < outs.size(); ++o)
      for (int64_t e = 0; e < m * n; ++e)
        ASSERT_TRUE(same_bits(outs[o].data<float>()[e], got[o].data<float>()[e])) << "output " << o << " element " << e;
    module.reset();
    std::filesystem::remove_all(dir);
  }
}

// Left alone: a parallel innermost loop (the emitter forks at the outermost loop only), divisions
// by constants whose reciprocal is not normal, and a divisor read from a buffer the loop writes.
TEST(ReciprocalDivisors, Refusals) {
  auto x = gbuf("x", {64}), y = gbuf("y", {64}), s = gbuf("s", {1});
  LoopKernel par = kernel("par", {x, s}, {y},
                          for_loop("i", I(64), {store(y, v("i"), binary(BinOp::Div, load(x, v("i")), load(s, I(0))))},
                                   ForKind::Parallel));
  const std::string p0 = print_kernel(par);
  reciprocal_divisors(par);
  EXPECT_EQ(print_kernel(par), p0);
  LoopKernel consts = kernel("consts", {x}, {y},
                             for_loop("i", I(64),
                                      {store(y, v("i"), binary(BinOp::Div, binary(BinOp::Div, load(x, v("i")), F(0)),
                                                                F(1e-39)))}));
  const std::string c0 = print_kernel(consts);
  reciprocal_divisors(consts);
  EXPECT_EQ(print_kernel(consts), c0);
  LoopKernel written = kernel("written", {x}, {y},
                              for_loop("i", I(64),
                                       {store(y, v("i"), binary(BinOp::Div, load(x, v("i")), load(y, I(0))))}));
  const std::string w0 = print_kernel(written);
  reciprocal_divisors(written);
  EXPECT_EQ(print_kernel(written), w0);
}

}  // namespace
}  // namespace kiln::sched_test
