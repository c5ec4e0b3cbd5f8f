// The scatter emitter (loop/lower_scatter.cc): ScatterElements and ScatterND as generated code,
// against the reference kernels (index_scatter.cc) bit for bit — every reduction, every axis,
// negative and duplicate indices (the reference's row-major order decides among duplicates),
// several dtypes, shapes made up here — in the loop interpreter and JIT-compiled on one and four
// threads; an out-of-range index is the node's one-line error, as for Gather; and a scatter fuses
// with nothing, by the lowering's own refusal.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "lower_group_test_util.h"

namespace kiln {
namespace {

using testing::bit_exact;

// Indices in [-dim, dim), many of them repeated (a small range).
Tensor random_indices(const Shape& s, int64_t dim, std::mt19937& rng, DType t = DType::Int64) {
  std::uniform_int_distribution<int64_t> u(-dim, dim - 1);
  Tensor r(DType::Int64, s);
  for (int64_t i = 0; i < r.numel(); ++i) r.data<int64_t>()[i] = u(rng);
  return t == DType::Int64 ? r : r.cast(t);
}

struct Case {
  std::string text;
  TensorMap inputs;
};

// Runs `c` lowered (every group generated, in the interpreter) and compares with the reference.
void check_interpreted(const Case& c) {
  SCOPED_TRACE(c.text);
  auto g = parse_graph(c.text);
  const TensorMap want = run_reference(*g, c.inputs);
  const FusionPlan plan = partition(*g, {});
  const testing::LoweredRun run = testing::run_lowered(*g, plan, c.inputs);
  EXPECT_EQ(run.refused, 0) << "library kernels remain";
  EXPECT_EQ(run.lowered, 1);
  for (const auto& k : run.kernels) EXPECT_FALSE(k.index_checks.empty());
  for (const auto& [r, n] : run.reasons) ADD_FAILURE() << n << " refused: " << r;
  for (const auto& [name, w] : want) EXPECT_EQ(bit_exact(run.outputs.at(name), w), "") << name;
}

std::string elements_text(const std::string& t, const Shape& ds, const Shape& us, int64_t axis, const std::string& red,
                          const std::string& it = "i64") {
  return "graph main opset 18 (%x: " + t + shape_str(ds) + ", %i: " + it + shape_str(us) + ", %u: " + t +
         shape_str(us) + ") -> (%y) {\n  %y: " + t + shape_str(ds) + " = ScatterElements(%x, %i, %u) {axis=" +
         std::to_string(axis) + ", reduction=\"" + red + "\"} name=\"sc\"\n}\n";
}

TEST(LowerScatter, ScatterElementsEveryReductionAxisAndType) {
  std::mt19937 rng(7);
  const Shape ds = {4, 5, 3};
  for (const char* t : {"f32", "f16", "i32", "i64", "f64"})
    for (int64_t axis : {0, 1, 2, -1})
      for (const char* red : {"none", "add", "mul", "max", "min"}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        Shape us = {3, 4, 2};  // smaller than data outside the axis
        us[size_t(a)] = 7;     // longer than the axis: duplicates for sure
        Case c{elements_text(t, ds, us, axis, red), {}};
        auto g = parse_graph(c.text);
        c.inputs = testing::random_inputs(*g, unsigned(rng()), {}, /*edge_values=*/true);
        c.inputs["i"] = random_indices(us, ds[size_t(a)], rng);
        check_interpreted(c);
      }
  // int32 indices, bool data (add/max are or, mul/min are and).
  for (const char* red : {"none", "add", "mul"}) {
    Case c{elements_text("bool", {6}, {9}, 0, red, "i32"), {}};
    auto g = parse_graph(c.text);
    c.inputs = testing::random_inputs(*g, 5, {}, false);
    c.inputs["i"] = random_indices({9}, 6, rng, DType::Int32);
    check_interpreted(c);
  }
}

TEST(LowerScatter, ScatterNDEveryReductionAndTupleLength) {
  std::mt19937 rng(11);
  const Shape ds = {4, 3, 5};
  for (const char* t : {"f32", "i64", "f16"})
    for (int64_t q : {1, 2, 3})
      for (const char* red : {"none", "add", "mul", "max", "min"}) {
        const Shape is = {6, q};
        Shape us = {6};
        us.insert(us.end(), ds.begin() + q, ds.end());
        Case c{"graph main opset 18 (%x: " + std::string(t) + shape_str(ds) + ", %i: i64" + shape_str(is) +
                   ", %u: " + t + shape_str(us) + ") -> (%y) {\n  %y: " + t + shape_str(ds) +
                   " = ScatterND(%x, %i, %u) {reduction=\"" + red + "\"} name=\"nd\"\n}\n",
               {}};
        auto g = parse_graph(c.text);
        c.inputs = testing::random_inputs(*g, unsigned(rng()), {}, true);
        Tensor idx(DType::Int64, is);
        for (int64_t k = 0; k < 6; ++k)
          for (int64_t j = 0; j < q; ++j) {
            // Tuples 0-2 repeat as 3-5: duplicates, some spelled with negative indices.
            std::uniform_int_distribution<int64_t> u(0, ds[size_t(j)] - 1);
            const int64_t v = k < 3 ? u(rng) : idx.data<int64_t>()[(k - 3) * q + j];
            idx.data<int64_t>()[k * q + j] = k == 4 ? v - ds[size_t(j)] : v;
          }
        c.inputs["i"] = idx;
        check_interpreted(c);
      }
}

// Big enough for the parallel loop over the other axes (and the copy's): compiled, one and four
// threads, bit-equal to the reference (float add in the reference's order at each position).
TEST(LowerScatter, CompiledOnSeveralThreads) {
  std::mt19937 rng(3);
  const Shape ds = {64, 300}, us = {64, 500};
  for (int threads : {1, 4})
    for (const char* red : {"none", "add"}) {
      const std::string text = elements_text("f32", ds, us, 1, red);
      SCOPED_TRACE(text);
      auto g = parse_graph(text);
      TensorMap in = testing::random_inputs(*g, 4, {}, false);
      in["i"] = random_indices(us, 300, rng);
      const TensorMap want = run_reference(*g, in);
      runtime::BuildOptions o;
      o.threads = threads;
      auto ex = runtime::Executable::build(parse_graph(text), o);
      ASSERT_EQ(ex->plan().library_kernel_count(), 0);
      EXPECT_EQ(bit_exact(ex->run(in).at("y"), want.at("y")), "");
      // An index out of range: the node's error, after which a good run still succeeds.
      Tensor bad = in["i"].clone();
      bad.data<int64_t>()[64 * 500 - 3] = 300;
      TensorMap bad_in = in;
      bad_in["i"] = bad;
      try {
        ex->run(bad_in);
        ADD_FAILURE() << "no error for an index out of range";
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("node 'sc' (ScatterElements): an index is out of range"), std::string::npos)
            << e.what();
      }
      EXPECT_EQ(bit_exact(ex->run(in).at("y"), want.at("y")), "");
    }
}

TEST(LowerScatter, OutOfRangeIndexIsTheNodesErrorInTheInterpreter) {
  const std::string nd =
      "graph main opset 18 (%x: f32[4,3], %i: i64[2,1], %u: f32[2,3]) -> (%y) {\n"
      "  %y: f32[4,3] = ScatterND(%x, %i, %u) name=\"nd\"\n}\n";
  auto g = parse_graph(nd);
  const FusionPlan plan = partition(*g, {});
  ASSERT_EQ(plan.groups.size(), 1u);
  loop::LoweredGroup lg = loop::lower_group(plan.groups[0], "nd");
  ASSERT_TRUE(lg.kernel) << lg.reason;
  EXPECT_EQ(lg.emitter, "scatter");
  ASSERT_EQ(lg.kernel->index_checks.size(), 1u);
  EXPECT_EQ(lg.kernel->index_checks[0].message, "node 'nd' (ScatterND): an index is out of range for the axis it indexes");
  TensorMap in = testing::random_inputs(*g, 2, {}, false);
  in["i"] = Tensor::from_vector<int64_t>({-4, 4}, {2, 1});  // -4 is row 0; 4 is out of range
  EXPECT_THROW(run_reference(*g, in), UserError);
  std::vector<Tensor> ins;
  for (const Value* v : plan.groups[0].inputs) ins.push_back(in.at(v->name()));
  std::vector<Tensor*> ip;
  for (auto& t : ins) ip.push_back(&t);
  Tensor y(DType::Float32, {4, 3});
  try {
    loop::interpret(*lg.kernel, ip, {&y});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'nd' (ScatterND): an index is out of range"), std::string::npos) << e.what();
  }
}

// A scatter is a kernel of its own: its elementwise producer and consumer stay kernels of their
// own, and the refusal kiln explain prints is the lowering's.
TEST(LowerScatter, FusesWithNothingByTheLoweringsRefusal) {
  const std::string text =
      "graph main opset 18 (%x: f32[8,16], %i: i64[8,4], %u: f32[8,4]) -> (%y) {\n"
      "  %e: f32[8,4] = Exp(%u)\n"
      "  %s: f32[8,16] = ScatterElements(%x, %i, %e) {axis=1, reduction=\"add\"} name=\"sc\"\n"
      "  %y: f32[8,16] = Relu(%s)\n}\n";
  auto g = parse_graph(text);
  const FusionPlan plan = partition(*g, {});
  EXPECT_EQ(plan.kernel_count(), 3);
  EXPECT_EQ(plan.library_kernel_count(), 0);
  for (const auto& grp : plan.groups) {
    if (grp.nodes.size() == 1 && grp.nodes[0]->op_type() == "ScatterElements") {
      EXPECT_EQ(grp.emitter, "scatter");
    }
  }
  FusionGroup whole = testing::whole_group(*g);
  whole.kind = GroupKind::Opaque;
  loop::LoweredGroup lg = loop::lower_group(whole, "all");
  EXPECT_FALSE(lg.kernel);
  EXPECT_NE(lg.reason.find("is a kernel of its own"), std::string::npos) << lg.reason;
  std::mt19937 rng(1);
  TensorMap in = testing::random_inputs(*g, 8, {}, false);
  in["i"] = random_indices({8, 4}, 16, rng);
  testing::check_lowered(*g, in);
}

}  // namespace
}  // namespace kiln
