// Row kernels over long rows: several rows at a time (unroll-and-jam, loop/row_jam.h), Max/Min and
// integer reductions in vector lanes, per-row values (sqrt(var + eps)) computed before the row
// loop, and softmax's exp kept in a local row instead of computed twice. None of it may change a
// bit (with float sums in the reference's order, Schedule::reduction_lanes = 0): every case is
// compared exactly with the reference, run by the loop interpreter and compiled by the JIT, with
// row counts and lengths that leave tails (the compiled softmax within 6 ulp: its exp is the
// prelude's kiln_expf, not std::exp).
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
#include "loop/lower_group.h"
#include "loop/row_jam.h"
#include "loop/row_kernel.h"
#include "reference/executor.h"
#include "runtime/jit.h"

namespace kiln {
namespace {

using namespace loop;

// Bitwise equal, NaN matching NaN (lower_group_test_util.h).
const auto exact = kiln::testing::bit_exact;

// Within `ulps` units in the last place (float32; NaN matches NaN). For the compiled softmax: its
// exp is the prelude's kiln_expf (within 2 ulp of std::exp, which the reference keeps), so only
// the interpreter can match the reference bit for bit. The sum and the division keep the
// reference's order: 2 ulp in each exp, at most 2 in their sum and 1 in the quotient's rounding
// bound each probability's difference by 6 ulp (3 seen with these inputs).
std::string within_ulps(const Tensor& got, const Tensor& want, int64_t ulps) {
  if (got.dtype() != DType::Float32 || want.dtype() != DType::Float32 || got.shape() != want.shape())
    return "not float32 of the same shape";
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::isnan(w) && std::isnan(g)) continue;
    int32_t gi, wi;
    std::memcpy(&gi, &g, 4);
    std::memcpy(&wi, &w, 4);
    if (std::signbit(g) != std::signbit(w) || std::llabs(int64_t(gi) - int64_t(wi)) > ulps)
      return cat("element ", i, ": got ", g, ", want ", w);
  }
  return "";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// ---------------------------------------------------------------- the transform alone

// y[i] = x[i*5] + ... + x[i*5+4] in row order, through a Let and a local buffer.
LoopKernel row_sums(int64_t rows, std::vector<Stmt> (*wrap)(std::vector<Stmt>, int64_t)) {
  auto x = std::make_shared<Buffer>(Buffer{"x", DType::Float32, Shape{rows, 5}, Scope::Global});
  auto y = std::make_shared<Buffer>(Buffer{"y", DType::Float32, Shape{rows}, Scope::Global});
  auto tmp = std::make_shared<Buffer>(Buffer{"tmp", DType::Float32, Shape{1}, Scope::Local});
  Expr i = var("i"), j = var("j");
  std::vector<Stmt> body = {
      let("s", float_imm(0)),
      for_loop("j", int_imm(5), {assign("s", binary(BinOp::Add, var("s", DType::Float32), load(x, add(mul(i, int_imm(5)), j))))}),
      allocate(tmp, {store(tmp, int_imm(0), var("s", DType::Float32)), store(y, i, load(tmp, int_imm(0)))})};
  LoopKernel k;
  k.name = "row_sums";
  k.inputs = {x};
  k.outputs = {y};
  k.body = block(wrap(std::move(body), rows));
  return k;
}

TEST(RowJam, SameResultsAsTheLoopItReplaces) {
  auto plain = [](std::vector<Stmt> b, int64_t n) { return std::vector<Stmt>{for_loop("i", int_imm(n), std::move(b))}; };
  auto jammed = [](std::vector<Stmt> b, int64_t n) { return loop::detail::jam_loop("i", n, b, 4, ForKind::Serial); };
  LoopKernel a = row_sums(11, plain), b = row_sums(11, jammed);
  const std::string text = print_kernel(b);
  // 2 blocks of 4 rows, then 3 rows one at a time; each copy has its own variables and buffer.
  EXPECT_NE(text.find("for i_b in [0, 2)"), std::string::npos) << text;
  EXPECT_NE(text.find("for i_t in [0, 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("s_r3"), std::string::npos) << text;
  EXPECT_NE(text.find("tmp_r3"), std::string::npos) << text;
  EXPECT_EQ(count(text, "for j in [0, 5)"), 2u) << text;  // one for the 4 jammed rows, one in the tail
  Tensor x(DType::Float32, {11, 5}), ya(DType::Float32, {11}), yb(DType::Float32, {11});
  for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = float(std::sin(double(k))) * 1e3f;
  interpret(a, {&x}, {&ya});
  interpret(b, {&x}, {&yb});
  EXPECT_EQ(exact(yb, ya), "");
}

// A condition every copy shares is tested once around the jammed branches; one that differs per
// row (a guard on the row index) or reads memory (an earlier copy may write it) stays per copy.
TEST(RowJam, SharedConditionsAreTestedOnce) {
  static Expr cond;  // the wrappers are plain functions (row_sums's signature)
  auto plain = [](std::vector<Stmt> b, int64_t n) { return std::vector<Stmt>{for_loop("i", int_imm(n), std::move(b))}; };
  auto guarded = [](std::vector<Stmt> b, int64_t n) {
    return loop::detail::jam_loop("i", n, {if_then(cond, std::move(b))}, 4, ForKind::Serial);
  };
  Tensor in(DType::Float32, {11, 5}), want(DType::Float32, {11});
  for (int64_t k = 0; k < in.numel(); ++k) in.data<float>()[k] = float(std::cos(double(k))) * 1e2f;
  interpret(row_sums(11, plain), {&in}, {&want});
  auto flag = std::make_shared<Buffer>(Buffer{"flag", DType::Float32, Shape{1}, Scope::Local});
  struct {
    Expr cond;
    size_t ifs;  // in the block of jammed rows (the tail loop has one more)
    bool run;    // flag is never stored: that kernel is only printed
  } cases[] = {{binary(BinOp::Lt, int_imm(0), int_imm(1)), 1, true},
               {binary(BinOp::Lt, var("i"), int_imm(11)), 4, true},
               {binary(BinOp::Lt, load(flag, int_imm(0)), float_imm(1)), 4, false}};
  for (const auto& c : cases) {
    cond = c.cond;
    LoopKernel k = row_sums(11, guarded);
    const std::string text = print_kernel(k);
    EXPECT_EQ(count(text, "if "), c.ifs + 1) << text;
    // The row loop over j: once in the jammed block when the condition is shared, else per copy.
    EXPECT_EQ(count(text, "for j in [0, 5)"), c.ifs == 1 ? 2u : 5u) << text;
    if (!c.run) continue;
    Tensor got(DType::Float32, {11});
    interpret(k, {&in}, {&got});
    EXPECT_EQ(exact(got, want), "");
  }
}

TEST(RowJam, NeedsAsManyIterationsAsCopies) {
  std::vector<Stmt> body = {let("s", float_imm(0))};
  EXPECT_THROW(loop::detail::jam_loop("i", 3, body, 4, ForKind::Serial), InternalError);
  EXPECT_THROW(loop::detail::jam_loop("i", 8, body, 1, ForKind::Serial), InternalError);
}

// ---------------------------------------------------------------- row kernels

struct Case {
  std::string name, inputs, body;
  bool jam, lanes;  // expected in the kernel
};

std::vector<Case> cases() {
  const std::string ax = "  %ax = constant i64[1] [-1]\n", eps = "  %eps = constant f32[] [1e-05]\n";
  // LayerNorm of %x [2, 9, 160] over its last axis up to the division: %n.
  const std::string normalised = R"(  %mean: f32[2,9,1] = ReduceMean(%x, %ax) {keepdims=1}
  %d: f32[2,9,160] = Sub(%x, %mean)
  %sq: f32[2,9,160] = Mul(%d, %d)
  %var: f32[2,9,1] = ReduceMean(%sq, %ax) {keepdims=1}
  %ve: f32[2,9,1] = Add(%var, %eps)
  %sd: f32[2,9,1] = Sqrt(%ve)
  %n: f32[2,9,160] = Div(%d, %sd)
)";
  return {
      // 13 rows of 300: one block of 8 rows and 5 more; the max in 9 lane blocks and a tail of 12.
      {"softmax", "%x: f32[13,300]", ax + R"(  %m: f32[13,1] = ReduceMax(%x, %ax) {keepdims=1}
  %s: f32[13,300] = Sub(%x, %m)
  %e: f32[13,300] = Exp(%s)
  %z: f32[13,1] = ReduceSum(%e, %ax) {keepdims=1}
  %y: f32[13,300] = Div(%e, %z)
)", true, true},
      // Rows over the last axis of a rank-3 tensor (jam over the inner of two outer loops), with
      // the per-row sqrt(var + eps) computed before the output loop.
      {"layernorm", "%x: f32[2,9,160], %w: f32[160], %b: f32[160]", ax + eps + normalised + R"(  %s: f32[2,9,160] = Mul(%n, %w)
  %y: f32[2,9,160] = Add(%s, %b)
)", true, false},
      // Max and Min over two trailing axes (row 320, unravelled), NaNs included.
      {"max_min_2d", "%x: f32[9,16,20]", R"(  %ax = constant i64[2] [1, 2]
  %hi: f32[9,1,1] = ReduceMax(%x, %ax) {keepdims=1}
  %lo: f32[9,1,1] = ReduceMin(%x, %ax) {keepdims=1}
  %y: f32[9,1,1] = Sub(%hi, %lo)
)", true, true},
      // Integer sums are exact in any order: lanes.
      {"int_sum", "%x: i32[10,200]", ax + R"(  %y: i32[10,1] = ReduceSum(%x, %ax) {keepdims=1}
)", true, true},
      // LayerNorm over the channels of a channels-first tensor (through a Transpose): the output
      // pass's vector loop reads x at a stride of 9, so rows run one at a time (GCC assembles the
      // jammed copies' strided loads element by element, fully unrolled: MobileViT 0.8 -> 13 ms).
      {"layernorm_transposed", "%xt: f32[2,160,9], %w: f32[160]", ax + eps + R"(  %x: f32[2,9,160] = Transpose(%xt) {perm=[0,2,1]}
)" + normalised + R"(  %y: f32[2,9,160] = Mul(%n, %w)
)", false, false},
      // A leading axis: rows are strided, no lanes; still 9 rows at a time (8 + 1).
      {"leading_axis", "%x: f32[300,9]", R"(  %ax = constant i64[1] [0]
  %y: f32[1,9] = ReduceSum(%x, %ax) {keepdims=1}
)", true, false},
  };
}

TEST(LowerReductionRows, LongRowsMatchTheReferenceExactly) {
  std::vector<LoopKernel> kernels;
  std::vector<std::vector<Tensor>> ins, wants;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (%y) {\n" + c.body + "}\n");
    FusionPlan plan = partition(*g, {});
    ASSERT_EQ(plan.groups.size(), 1u);
    const FusionGroup& grp = plan.groups[0];
    // The float sums in the reference's row order (reduction_lanes = 0): what this test checks
    // (jam, staging, hoisting, Max/Min and integer lanes) must not change a bit.
    // tests/unit/lower_reduction_lanes_test.cc covers the partial sums.
    Schedule sched;
    sched.reduction_lanes = 0;
    LoweredGroup lg = loop::detail::lower_reduction_group(grp, "rows_" + c.name, true, sched);  // unique names: one module
    ASSERT_TRUE(lg.kernel) << lg.reason;
    const std::string text = print_kernel(*lg.kernel);
    EXPECT_EQ(text.find("_r7") != std::string::npos, c.jam) << text;
    EXPECT_EQ(text.find("kiln_lanes") != std::string::npos, c.lanes) << text;
    if (c.name == "softmax") {
      // exp(x - max) is computed once per element, kept in a local row for the division.
      EXPECT_NE(text.find("kiln_keep"), std::string::npos) << text;
      EXPECT_EQ(count(text, "exp("), 9u) << text;  // 8 jammed rows + the tail row
    }
    if (c.name == "layernorm") {
      // sqrt is taken once per row, ahead of the loop over the row: no line with it reads a
      // row-pass variable.
      EXPECT_EQ(count(text, "sqrt("), 9u) << text;  // 8 jammed rows + the tail row
      for (size_t p = text.find("sqrt("); p != std::string::npos; p = text.find("sqrt(", p + 1)) {
        const std::string line = text.substr(text.rfind('\n', p) + 1, text.find('\n', p) - text.rfind('\n', p) - 1);
        EXPECT_EQ(line.find("kiln_j"), std::string::npos) << line;
      }
    }

    TensorMap inputs;
    std::mt19937 rng(7);
    std::normal_distribution<double> nd(0, 2);
    for (Value* v : g->inputs()) {
      Tensor d(DType::Float64, v->shape());
      for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = is_integer(v->dtype()) ? std::round(nd(rng) * 1e8) : nd(rng);
      if (c.name == "max_min_2d")
        for (int64_t i : {17, 400, 2879}) d.data<double>()[i] = std::nan("");
      inputs[v->name()] = d.cast(v->dtype());
    }
    TensorMap want = run_reference(*g, inputs);
    std::vector<Tensor> in, out;
    for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant() : inputs.at(v->name()));
    for (const Value* v : grp.outputs) out.emplace_back(v->dtype(), v->shape());
    std::vector<Tensor*> ip, op;
    for (auto& t : in) ip.push_back(&t);
    for (auto& t : out) op.push_back(&t);
    interpret(*lg.kernel, ip, op);
    ASSERT_EQ(grp.outputs.size(), 1u);
    EXPECT_EQ(exact(out[0], want.at("y")), "") << "interpreted";
    kernels.push_back(std::move(*lg.kernel));
    ins.push_back(std::move(in));
    wants.push_back({want.at("y")});
  }
  // Compiled: one module for every case.
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_rows_test_" + std::to_string(::getpid()));
  // Strict numerics: compared bit for bit with the reference (softmax within ulps: its exp).
  const runtime::BuildOptions o = testing::numerics_options(true, dir.string());
  auto module = runtime::JitModule::build(codegen::emit_c(kernels, o.emit), o.compile);
  for (size_t k = 0; k < kernels.size(); ++k) {
    SCOPED_TRACE(kernels[k].name);
    Tensor got(wants[k][0].dtype(), wants[k][0].shape());
    std::vector<void*> args;
    for (auto& t : ins[k]) args.push_back(t.raw());
    args.push_back(got.raw());
    module->get(kernels[k].name)(args.data());
    const bool softmax = kernels[k].name == "rows_softmax";
    EXPECT_EQ(softmax ? within_ulps(got, wants[k][0], 6) : exact(got, wants[k][0]), "") << "compiled";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
