// Run-time index checks (issue 15, item 8): generated code for Gather, GatherElements and GatherND
// with indices that are data must report an index outside [-dim, dim) as the reference kernels do
// (a UserError naming the node), not read a clamped element; negative indices in range count from
// the end. Checked on the loop interpreter (the IR's meaning), the JIT-compiled executable (one
// and several threads, the status word cleared between runs) and the AOT driver's text; kernels
// without data-dependent indices must carry no check at all.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "codegen/c/c_emitter.h"
#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "loop/lower_group.h"
#include "reference/executor.h"
#include "runtime/aot_bundle.h"
#include "runtime/executable.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

// The one group of g's plan that is not a view, lowered.
loop::LoopKernel lowered_kernel(const Graph& g) {
  FusionPlan plan = partition(g, FusionOptions{});
  for (const FusionGroup& grp : plan.groups) {
    if (!grp.counts_as_kernel()) continue;
    loop::LoweredGroup lg = loop::lower_group(grp, grp.name);
    if (!lg.kernel) ADD_FAILURE() << "group " << grp.name << " refused: " << lg.reason;
    return lg.kernel ? *lg.kernel : loop::LoopKernel{};
  }
  ADD_FAILURE() << "no kernel";
  return {};
}

// Runs kernel k (inputs in the graph's input order) through the interpreter.
Tensor interpret_one(const loop::LoopKernel& k, std::vector<Tensor> inputs, const Value* out) {
  Tensor y(out->dtype(), out->shape());
  std::vector<Tensor*> in, outs = {&y};
  for (Tensor& t : inputs) in.push_back(&t);
  loop::interpret(k, in, outs);
  return y;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

void expect_index_error(const std::function<void()>& f, const std::string& node) {
  try {
    f();
    ADD_FAILURE() << "no error for an index out of range";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(node + ": an index is out of range"), std::string::npos) << e.what();
  }
}

const char* kGather = R"(  %y: f32[5,3] = Gather(%data, %idx) {axis=0} name="g"
)";

Tensor data43() {
  return Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {4, 3});
}

TEST(IndexCheck, GatherInTheInterpreter) {
  auto g = ir(kGather, "%data: f32[4,3], %idx: i64[5]", "%y");
  loop::LoopKernel k = lowered_kernel(*g);
  ASSERT_EQ(k.index_checks.size(), 1u);
  EXPECT_EQ(k.index_checks[0].message, "node 'g' (Gather): an index is out of range for the axis it indexes");
  // In range, negatives from the end: the reference's rows.
  auto ok = Tensor::from_vector<int64_t>({3, -4, -1, 0, 2}, {5});
  auto want = run_reference(*g, {{"data", data43()}, {"idx", ok}}).at("y");
  expect_same(interpret_one(k, {data43(), ok}, g->find_value("y")), want);
  for (std::vector<int64_t> bad : {std::vector<int64_t>{0, 1, 4, 2, 3}, std::vector<int64_t>{0, -5, 1, 1, 1},
                                   std::vector<int64_t>{INT64_MIN, 0, 0, 0, INT64_MAX}})
    expect_index_error([&] { interpret_one(k, {data43(), Tensor::from_vector<int64_t>(bad, {5})}, g->find_value("y")); },
                       "node 'g' (Gather)");
}

TEST(IndexCheck, GatherElementsAndGatherNDInTheInterpreter) {
  auto ge = ir(R"(  %y: f32[2,3] = GatherElements(%data, %idx) {axis=0} name="ge"
)", "%data: f32[4,3], %idx: i32[2,3]", "%y");
  loop::LoopKernel k = lowered_kernel(*ge);
  ASSERT_EQ(k.index_checks.size(), 1u);
  auto ok = Tensor::from_vector<int32_t>({0, -1, 3, -4, 2, 1}, {2, 3});
  expect_same(interpret_one(k, {data43(), ok}, ge->find_value("y")),
              run_reference(*ge, {{"data", data43()}, {"idx", ok}}).at("y"));
  expect_index_error(
      [&] { interpret_one(k, {data43(), Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 0}, {2, 3})}, ge->find_value("y")); },
      "node 'ge' (GatherElements)");

  auto nd = ir(R"(  %y: f32[2] = GatherND(%data, %idx) name="nd"
)", "%data: f32[4,3], %idx: i64[2,2]", "%y");
  k = lowered_kernel(*nd);
  ASSERT_EQ(k.index_checks.size(), 1u);
  auto ok_nd = Tensor::from_vector<int64_t>({3, 2, -1, -3}, {2, 2});
  expect_same(interpret_one(k, {data43(), ok_nd}, nd->find_value("y")),
              run_reference(*nd, {{"data", data43()}, {"idx", ok_nd}}).at("y"));
  // The second coordinate indexes the axis of 3: 3 is out of range there (not in the first's 4).
  expect_index_error(
      [&] { interpret_one(k, {data43(), Tensor::from_vector<int64_t>({0, 0, 1, 3}, {2, 2})}, nd->find_value("y")); },
      "node 'nd' (GatherND)");
}

// A Slice fused after the Gather computes only rows 0 and 1; an index out of range in row 3 is
// still refused (the reference checks every index), by the pass over the whole index input.
TEST(IndexCheck, IndicesTheNestDoesNotReadAreCheckedToo) {
  auto g = ir(R"(  %st = constant i64[1] [0]
  %en = constant i64[1] [2]
  %gs: f32[4,3] = Gather(%data, %idx) {axis=0} name="g"
  %y: f32[2,3] = Slice(%gs, %st, %en) name="slice"
)", "%data: f32[4,3], %idx: i64[4]", "%y");
  FusionPlan plan = partition(*g, FusionOptions{});
  ASSERT_EQ(plan.groups.size(), 1u);  // one kernel: Gather and Slice
  const FusionGroup& grp = plan.groups[0];
  loop::LoweredGroup lg = loop::lower_group(grp, grp.name);
  ASSERT_TRUE(lg.kernel) << lg.reason;
  ASSERT_EQ(lg.kernel->index_checks.size(), 1u);
  auto run = [&](const Tensor& idx) {  // the kernel's arguments in group order (constants too)
    std::vector<Tensor> in;
    for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant() : v->name() == "idx" ? idx : data43());
    return interpret_one(*lg.kernel, in, g->find_value("y"));
  };
  auto ok = Tensor::from_vector<int64_t>({2, -1, -4, 0}, {4});
  expect_same(run(ok), run_reference(*g, {{"data", data43()}, {"idx", ok}}).at("y"));
  expect_index_error([&] { run(Tensor::from_vector<int64_t>({0, 1, 2, 9}, {4})); }, "node 'g' (Gather)");
}

// A run-time CumSum axis is an index into the input's dims: -1 is the last, 2 of a rank-2 input is
// refused as the reference refuses it (it used to scan the last axis instead).
TEST(IndexCheck, CumSumAxisInTheInterpreter) {
  auto g = ir(R"(  %y: f32[2,3] = CumSum(%x, %axis) name="cs"
)", "%x: f32[2,3], %axis: i64[]", "%y");
  loop::LoopKernel k = lowered_kernel(*g);
  ASSERT_EQ(k.index_checks.size(), 1u);
  auto x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  for (int64_t a : {0, 1, -1, -2}) {
    auto axis = Tensor::from_vector<int64_t>({a}, {});
    expect_same(interpret_one(k, {x, axis}, g->find_value("y")), run_reference(*g, {{"x", x}, {"axis", axis}}).at("y"));
  }
  for (int64_t a : {2, -3}) {
    try {
      interpret_one(k, {x, Tensor::from_vector<int64_t>({a}, {})}, g->find_value("y"));
      ADD_FAILURE() << "axis " << a << " accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("node 'cs' (CumSum): the axis input is out of range"), std::string::npos)
          << e.what();
    }
  }
}

// The check costs nothing where no index is data: no check, no status argument, no helper call.
TEST(IndexCheck, KernelsWithoutRunTimeIndicesCarryNoCheck) {
  auto g = ir(R"(  %idx = constant i64[3] [2, -1, 0]
  %gc: f32[3,3] = Gather(%data, %idx) {axis=0} name="gc"
  %y: f32[3,3] = Relu(%gc) name="relu"
)", "%data: f32[4,3]", "%y");
  loop::LoopKernel k = lowered_kernel(*g);
  EXPECT_TRUE(k.index_checks.empty());
  const std::string c = codegen::emit_c({k});
  EXPECT_EQ(c.find("kiln_status"), std::string::npos) << c;

  auto rt = ir(kGather, "%data: f32[4,3], %idx: i64[5]", "%y");
  loop::LoopKernel kr = lowered_kernel(*rt);
  const std::string cr = codegen::emit_c({kr});
  EXPECT_NE(cr.find("int32_t* const kiln_status = (int32_t*)args[3];"), std::string::npos) << cr;
  EXPECT_NE(cr.find("kiln_checked_index(kiln_status, "), std::string::npos) << cr;
}

std::unique_ptr<runtime::Executable> build(std::unique_ptr<Graph> g, int threads) {
  runtime::BuildOptions o;
  o.threads = threads;
  return runtime::Executable::build(std::move(g), o);
}

TEST(IndexCheck, CompiledGatherFusedWithItsConsumer) {
  auto g = ir(R"(  %g: f32[5,3] = Gather(%data, %idx) {axis=0} name="g"
  %y: f32[5,3] = Relu(%g) name="relu"
)", "%data: f32[4,3], %idx: i64[5]", "%y");
  auto want_g = ir(R"(  %g: f32[5,3] = Gather(%data, %idx) {axis=0} name="g"
  %y: f32[5,3] = Relu(%g) name="relu"
)", "%data: f32[4,3], %idx: i64[5]", "%y");
  auto ex = build(std::move(g), 1);
  size_t generated = 0;
  for (const auto& k : ex->kernels()) generated += k.generated;
  ASSERT_EQ(generated, 1u);
  auto ok = Tensor::from_vector<int64_t>({3, -4, -1, 0, 2}, {5});
  auto want = run_reference(*want_g, {{"data", data43()}, {"idx", ok}}).at("y");
  expect_same(ex->run({{"data", data43()}, {"idx", ok}}).at("y"), want);
  expect_index_error([&] { ex->run({{"data", data43()}, {"idx", Tensor::from_vector<int64_t>({0, 1, 2, 3, 4}, {5})}}); },
                     "node 'g' (Gather)");
  // The status word is cleared before each call: a good run after a bad one succeeds.
  expect_same(ex->run({{"data", data43()}, {"idx", ok}}).at("y"), want);
}

// A large gather runs in parallel loops: one bad index among 200k, written by whichever thread
// meets it, still stops the run.
TEST(IndexCheck, CompiledGatherOnSeveralThreads) {
  const int64_t n = 200000;
  auto g = ir("  %y: f32[" + std::to_string(n) + ",8] = Gather(%data, %idx) {axis=0} name=\"big\"\n",
              "%data: f32[1000,8], %idx: i32[" + std::to_string(n) + "]", "%y");
  auto ex = build(std::move(g), 4);
  Tensor data(DType::Float32, {1000, 8});
  for (int64_t i = 0; i < data.numel(); ++i) data.data<float>()[i] = float(i);
  Tensor idx(DType::Int32, {n});
  for (int64_t i = 0; i < n; ++i) idx.data<int32_t>()[i] = int32_t(i % 2000 - 1000);  // [-1000, 1000)
  Tensor y = ex->run({{"data", data}, {"idx", idx}}).at("y");
  EXPECT_EQ(y.data<float>()[8 * 1], float(8 * 1));    // index -999 is row 1
  EXPECT_EQ(y.data<float>()[8 * 1999], float(8 * 999));  // index 999
  idx.data<int32_t>()[n / 2 + 17] = 1000;
  expect_index_error([&] { ex->run({{"data", data}, {"idx", idx}}); }, "node 'big' (Gather)");
}

TEST(IndexCheck, AotDriverReportsTheNode) {
  auto g = ir(kGather, "%data: f32[4,3], %idx: i64[5]", "%y");
  runtime::BuildOptions o;
  o.load_kernels = false;  // the bundle's text only
  auto ex = runtime::Executable::build(std::move(g), o);
  runtime::AotBundle b = runtime::make_aot_bundle(*ex, runtime::AotOptions{});
  std::string c, h;
  for (const auto& [name, text] : b.files) {
    if (name == "kiln_model.c") c = text;
    if (name == "kiln_model.h") h = text;
  }
  EXPECT_NE(h.find("#define KILN_MODEL_ERR_INDEX 6"), std::string::npos) << h;
  EXPECT_NE(c.find("int32_t st = 0;"), std::string::npos) << c;
  EXPECT_NE(c.find("return kiln_model_fail_(KILN_MODEL_ERR_INDEX, \"%s\", \"node 'g' (Gather): an index is out of range"),
            std::string::npos)
      << c;
}

}  // namespace
}  // namespace kiln
