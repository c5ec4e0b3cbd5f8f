// Float sums of row kernels in Schedule::reduction_lanes partial sums (lower_reduction.cc's file
// comment, docs/codegen.md "Numerics contract"): element j into partial j mod L in ascending j,
// partials combined pairwise (l with l + L/2, ...). The order is checked against hand-computed
// sums whose rounding depends on it and against a C++ re-implementation, bit for bit, interpreted
// and compiled; compiled kernels (LayerNorm, softmax, Reduce*) against the reference within the
// contract; and reduction_lanes = 0 against the reference bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "codegen/c/c_emitter.h"
#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"
#include "loop/row_kernel.h"
#include "reference/executor.h"
#include "runtime/jit.h"

namespace kiln {
namespace {

using namespace loop;

// The documented order, written independently of the lowering.
template <class T>
T lane_sum(const T* x, int64_t n, int64_t L) {
  std::vector<T> p(size_t(L), T(0));
  for (int64_t j = 0; j < n; ++j) p[size_t(j % L)] = p[size_t(j % L)] + x[j];
  for (int64_t h = L / 2; h >= 1; h /= 2)
    for (int64_t l = 0; l < h; ++l) p[size_t(l)] = p[size_t(l)] + p[size_t(l + h)];
  return p[0];
}

Schedule lanes(int L) {
  Schedule s;
  s.reduction_lanes = L;
  return s;
}

// A one-group graph lowered with `sched`; the group and its kernel.
struct Lowered {
  std::unique_ptr<Graph> g;
  FusionPlan plan;
  LoopKernel k;
};

Lowered lower(const std::string& text, const std::string& name, const Schedule& sched) {
  Lowered r;
  r.g = parse_graph(text);
  r.plan = partition(*r.g, {});
  EXPECT_EQ(r.plan.groups.size(), 1u);
  LoweredGroup lg = loop::detail::lower_reduction_group(r.plan.groups[0], name, true, sched);
  EXPECT_TRUE(lg.kernel) << lg.reason;
  if (lg.kernel) r.k = std::move(*lg.kernel);
  return r;
}

std::vector<Tensor> interpreted(const Lowered& l, const TensorMap& inputs) {
  const FusionGroup& grp = l.plan.groups[0];
  std::vector<Tensor> in, out;
  for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant() : inputs.at(v->name()));
  for (const Value* v : grp.outputs) out.emplace_back(v->dtype(), v->shape());
  std::vector<Tensor*> ip, op;
  for (auto& t : in) ip.push_back(&t);
  for (auto& t : out) op.push_back(&t);
  interpret(l.k, ip, op);
  return out;
}

// Every kernel compiled into one module; outputs per kernel.
std::vector<std::vector<Tensor>> compiled(const std::vector<const Lowered*>& ls, const std::vector<TensorMap>& inputs,
                                          const std::string& tag) {
  std::vector<LoopKernel> ks;
  for (const Lowered* l : ls) ks.push_back(l->k);
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_lanes_" + tag + "_" + std::to_string(::getpid()));
  // Strict numerics: the lanes' order is the kernel's own; no FMA may change the bits compared.
  const runtime::BuildOptions o = testing::numerics_options(true, dir.string());
  auto module = runtime::JitModule::build(codegen::emit_c(ks, o.emit), o.compile);
  std::vector<std::vector<Tensor>> outs;
  for (size_t i = 0; i < ls.size(); ++i) {
    const FusionGroup& grp = ls[i]->plan.groups[0];
    std::vector<Tensor> in, out;
    std::vector<void*> args;
    for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant().clone() : inputs[i].at(v->name()).clone());
    for (const Value* v : grp.outputs) out.emplace_back(v->dtype(), v->shape());
    for (auto& t : in) args.push_back(t.raw());
    for (auto& t : out) args.push_back(t.raw());
    module->get(ks[i].name)(args.data());
    outs.push_back(std::move(out));
  }
  module.reset();
  std::filesystem::remove_all(dir);
  return outs;
}

// Bitwise equal, NaN matching NaN (lower_group_test_util.h).
const auto exact = kiln::testing::bit_exact;

// The numerics contract: |got - want| <= 1e-4 * max |want| over the tensor.
std::string within_contract(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return "type or shape differs";
  double mx = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.as_double(i))) mx = std::max(mx, std::fabs(want.as_double(i)));
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.as_double(i), w = want.as_double(i);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::fabs(g - w) <= 1e-4 * mx;
    if (!ok) return cat("element ", i, ": got ", g, ", want ", w, " (max |want| ", mx, ")");
  }
  return "";
}

std::string row_sum_graph(const std::string& dt, int64_t rows, int64_t n) {
  const std::string in = cat(dt, "[", rows, ",", n, "]"), out = cat(dt, "[", rows, ",1]");
  return cat("graph main opset 17 (%x: ", in, ") -> (%y) {\n  %ax = constant i64[1] [-1]\n  %y: ", out,
             " = ReduceSum(%x, %ax) {keepdims=1}\n}\n");
}

// ---------------------------------------------------------------- the order, by hand

// One row of 64 (4 blocks of 16 lanes) whose sum depends on the order: 2^25 absorbs a following
// 1 (its ulp is 4), so the reference's row order loses what the lanes keep.
TEST(ReductionLanes, HandComputedOrder) {
  const float big = 33554432.0f;  // 2^25
  Tensor a(DType::Float32, {3, 64});
  float* x = a.data<float>();
  // Row 0: x0 = 2^25, x16 = -2^25 (both lane 0), every other element 1. In row order 2^25 swallows
  // x1..x15, then cancels: 47. In lanes: lane 0 = 2^25 - 2^25 + 1 + 1 = 2, lanes 1..15 = 4 each: 62.
  for (int j = 0; j < 64; ++j) x[j] = 1.0f;
  x[0] = big;
  x[16] = -big;
  // Row 1: 2^25 in lane 0 and -2^25 in lane 8, 1 in lanes 1..7 and 9..15 (elements 1..15), 0 after.
  // The tree adds lane 8 to lane 0 first: 0 + 14 ones = 14. Lane order (or row order) would give 7.
  for (int j = 0; j < 64; ++j) x[64 + j] = j < 16 ? 1.0f : 0.0f;
  x[64 + 0] = big;
  x[64 + 8] = -big;
  // Row 2: 2^25 in lane 1 absorbs the three 1s that follow it there (elements 17, 33, 49), then
  // cancels with lane 2's -2^25 in the tree: 0. The row order cancels first, then adds them: 3.
  for (int j = 0; j < 64; ++j) x[128 + j] = 0.0f;
  x[128 + 1] = big, x[128 + 17] = 1, x[128 + 33] = 1, x[128 + 49] = 1, x[128 + 2] = -big;

  Lowered l16 = lower(row_sum_graph("f32", 3, 64), "hand16", lanes(16));
  Lowered l0 = lower(row_sum_graph("f32", 3, 64), "hand0", lanes(0));
  const TensorMap in = {{"x", a}};
  std::vector<Tensor> got = interpreted(l16, in), seq = interpreted(l0, in);
  EXPECT_EQ(got[0].data<float>()[0], 62.0f);
  EXPECT_EQ(got[0].data<float>()[1], 14.0f);
  EXPECT_EQ(got[0].data<float>()[2], 0.0f);
  EXPECT_EQ(seq[0].data<float>()[0], 47.0f);
  EXPECT_EQ(seq[0].data<float>()[1], 7.0f);
  EXPECT_EQ(seq[0].data<float>()[2], 3.0f);
  const Tensor want = run_reference(*l0.g, in).at("y");
  EXPECT_EQ(exact(seq[0], want), "");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[0].data<float>()[r], lane_sum(x + 64 * r, 64, 16)) << "row " << r;
  auto c = compiled({&l16, &l0}, {in, in}, "hand");
  EXPECT_EQ(exact(c[0][0], got[0]), "");
  EXPECT_EQ(exact(c[1][0], want), "");
  // Written in the loop IR: a buffer of 16 partials and the tree's last step, lane 0 + lane 1.
  const std::string text = print_kernel(l16.k);
  EXPECT_NE(text.find("kiln_lanes0: f32[16]"), std::string::npos) << text;
  EXPECT_EQ(print_kernel(l0.k).find("kiln_lanes"), std::string::npos);
}

// Rows with a tail (n mod L), 13 rows (8 run jammed), lane counts 8, 16 and 64, float32 and
// float64: interpreted and compiled equal the re-implementation bit for bit.
TEST(ReductionLanes, MatchesTheDocumentedOrderBitForBit) {
  struct C {
    std::string dt;
    int64_t rows, n;
    int L;
  };
  const std::vector<C> cs = {{"f32", 13, 300, 16}, {"f32", 3, 69, 16}, {"f32", 9, 1000, 8},
                             {"f32", 2, 256, 64},  {"f64", 10, 133, 16}};
  std::vector<Lowered> ls;
  std::vector<TensorMap> ins;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> ex(-20, 20);
  for (size_t i = 0; i < cs.size(); ++i) {
    const C& c = cs[i];
    ls.push_back(lower(row_sum_graph(c.dt, c.rows, c.n), cat("order", i), lanes(c.L)));
    Tensor d(DType::Float64, {c.rows, c.n});
    for (int64_t k = 0; k < d.numel(); ++k) d.data<double>()[k] = std::ldexp(mant(rng), ex(rng));  // wide range
    ins.push_back({{"x", d.cast(c.dt == "f32" ? DType::Float32 : DType::Float64)}});
  }
  std::vector<const Lowered*> ptrs;
  for (const auto& l : ls) ptrs.push_back(&l);
  auto comp = compiled(ptrs, ins, "order");
  for (size_t i = 0; i < cs.size(); ++i) {
    const C& c = cs[i];
    SCOPED_TRACE(cat(c.dt, "[", c.rows, ",", c.n, "] in ", c.L, " lanes"));
    const Tensor& x = ins[i].at("x");
    Tensor want(x.dtype(), {c.rows, 1});
    for (int64_t r = 0; r < c.rows; ++r) {
      if (c.dt == "f32") want.data<float>()[r] = lane_sum(x.data<float>() + r * c.n, c.n, c.L);
      else want.data<double>()[r] = lane_sum(x.data<double>() + r * c.n, c.n, c.L);
    }
    std::vector<Tensor> got = interpreted(ls[i], ins[i]);
    EXPECT_EQ(exact(got[0], want), "") << "interpreted";
    EXPECT_EQ(exact(comp[i][0], want), "") << "compiled";
    // Not the reference's bits (or the comparison above would prove nothing), but within the contract.
    const Tensor ref = run_reference(*ls[i].g, ins[i]).at("y");
    EXPECT_NE(exact(got[0], ref), "");
    EXPECT_EQ(within_contract(got[0], ref), "");
  }
}

TEST(ReductionLanes, ShortRowsAndStridedRowsKeepTheRowOrder) {
  // 31 < 2 x 16: one running sum; a leading axis (strided rows): one running sum.
  Lowered s = lower(row_sum_graph("f32", 4, 31), "short", lanes(16));
  EXPECT_EQ(print_kernel(s.k).find("kiln_lanes"), std::string::npos);
  Lowered t = lower("graph main opset 17 (%x: f32[300,9]) -> (%y) {\n  %ax = constant i64[1] [0]\n"
                    "  %y: f32[1,9] = ReduceSum(%x, %ax) {keepdims=1}\n}\n", "strided", lanes(16));
  EXPECT_EQ(print_kernel(t.k).find("kiln_lanes"), std::string::npos);
  Lowered l = lower(row_sum_graph("f32", 4, 32), "long", lanes(16));
  EXPECT_NE(print_kernel(l.k).find("kiln_lanes"), std::string::npos);
}

TEST(ReductionLanes, LaneCountMustBeAPowerOfTwo) {
  auto g = parse_graph(row_sum_graph("f32", 2, 100));
  FusionPlan plan = partition(*g, {});
  EXPECT_THROW(loop::detail::lower_reduction_group(plan.groups[0], "bad", true, lanes(12)), InternalError);
  EXPECT_TRUE(loop::detail::lower_reduction_group(plan.groups[0], "one", true, lanes(1)).kernel);
}

// ---------------------------------------------------------------- row kernels

struct Kernel {
  std::string name, inputs, body;
  bool exp;  // compiled float32 exp is kiln_expf: not the interpreter's bits
};

std::vector<Kernel> kernels() {
  const std::string ax = "  %ax = constant i64[1] [-1]\n";
  return {
      {"softmax", "%x: f32[13,300]", ax + R"(  %m: f32[13,1] = ReduceMax(%x, %ax) {keepdims=1}
  %s: f32[13,300] = Sub(%x, %m)
  %e: f32[13,300] = Exp(%s)
  %z: f32[13,1] = ReduceSum(%e, %ax) {keepdims=1}
  %y: f32[13,300] = Div(%e, %z)
)", true},
      {"layernorm", "%x: f32[2,9,160], %w: f32[160], %b: f32[160]", ax + R"(  %eps = constant f32[] [1e-05]
  %mean: f32[2,9,1] = ReduceMean(%x, %ax) {keepdims=1}
  %d: f32[2,9,160] = Sub(%x, %mean)
  %sq: f32[2,9,160] = Mul(%d, %d)
  %var: f32[2,9,1] = ReduceMean(%sq, %ax) {keepdims=1}
  %ve: f32[2,9,1] = Add(%var, %eps)
  %sd: f32[2,9,1] = Sqrt(%ve)
  %n: f32[2,9,160] = Div(%d, %sd)
  %s: f32[2,9,160] = Mul(%n, %w)
  %y: f32[2,9,160] = Add(%s, %b)
)", false},
      {"norms", "%x: f32[10,2,50]", R"(  %ax = constant i64[2] [1, 2]
  %a: f32[10,1,1] = ReduceL1(%x, %ax) {keepdims=1}
  %b: f32[10,1,1] = ReduceL2(%x, %ax) {keepdims=1}
  %c: f32[10,1,1] = ReduceSumSquare(%x, %ax) {keepdims=1}
  %ab: f32[10,1,1] = Add(%a, %b)
  %y: f32[10,1,1] = Add(%ab, %c)
)", false},
      {"logsum_f64", "%x: f64[9,70]", ax + R"(  %a: f64[9,70] = Abs(%x)
  %y: f64[9,1] = ReduceLogSum(%a, %ax) {keepdims=1}
)", false},
      {"half_mean", "%x: f16[9,200]", ax + R"(  %y: f16[9,1] = ReduceMean(%x, %ax) {keepdims=1}
)", false},
      {"global_avg", "%x: f32[2,8,9,9]", R"(  %y: f32[2,8,1,1] = GlobalAveragePool(%x)
)", false},
      {"logsumexp", "%x: f32[12,130]", ax + R"(  %y: f32[12,1] = ReduceLogSumExp(%x, %ax) {keepdims=1}
)", true},
  };
}

TensorMap kernel_inputs(const Graph& g) {
  TensorMap m;
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(1, 3);
  for (Value* v : g.inputs()) {
    Tensor d(DType::Float64, v->shape());
    for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = nd(rng);
    m[v->name()] = d.cast(v->dtype());
  }
  return m;
}

// Lanes on: interpreted == compiled bit for bit (but for kiln_expf), both within the contract of
// the reference; lanes off (0): interpreted and compiled (but for kiln_expf) bit-identical to the
// reference.
TEST(ReductionLanes, RowKernels) {
  std::vector<Lowered> ls;
  std::vector<TensorMap> ins;
  const auto ks = kernels();
  for (const Kernel& k : ks)
    for (int L : {16, 0}) {
      const std::string text = "graph main opset 17 (" + k.inputs + ") -> (%y) {\n" + k.body + "}\n";
      ls.push_back(lower(text, cat("rk_", k.name, "_", L), lanes(L)));
      ins.push_back(kernel_inputs(*ls.back().g));
      // The pairwise tree (lanes off, the order-free Max/Min passes still take one).
      if (L == 16) EXPECT_NE(print_kernel(ls.back().k).find("kiln_h"), std::string::npos) << k.name;
    }
  std::vector<const Lowered*> ptrs;
  for (const auto& l : ls) ptrs.push_back(&l);
  auto comp = compiled(ptrs, ins, "rows");
  for (size_t i = 0; i < ls.size(); ++i) {
    const Kernel& k = ks[i / 2];
    const bool on = i % 2 == 0;
    SCOPED_TRACE(cat(k.name, on ? " with lanes" : " without lanes"));
    const Tensor want = run_reference(*ls[i].g, ins[i]).at("y");
    const Tensor got = interpreted(ls[i], ins[i])[0];
    if (on) {
      EXPECT_EQ(within_contract(got, want), "") << "interpreted";
      EXPECT_EQ(within_contract(comp[i][0], want), "") << "compiled";
      EXPECT_EQ(k.exp ? within_contract(comp[i][0], got) : exact(comp[i][0], got), "") << "compiled vs interpreted";
    } else {
      EXPECT_EQ(exact(got, want), "") << "interpreted";
      EXPECT_EQ(k.exp ? within_contract(comp[i][0], want) : exact(comp[i][0], want), "") << "compiled";
    }
  }
}

}  // namespace
}  // namespace kiln
