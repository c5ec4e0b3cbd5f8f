// Loop lowering of reduction groups (row kernels): small IR graphs (softmax and LayerNorm spelled
// out, GlobalAveragePool, Reduce* over trailing, inner and several axes, keepdims 0/1, integer
// and half types) are partitioned and lowered; each plan runs with the loop interpreter and, in one
// JIT module for the whole file, as compiled C, and must match the unfused reference run (floats
// within 1e-5 relative, integers exactly). Plus refusals (cross-row broadcasts, ArgMax, windowed
// pools) and the ONNX reduce/softmax/layernorm node conformance tests, whose lowered/refused
// counts are printed as "[ reduction ]" lines.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <iostream>
#include <unistd.h>

#include "codegen/c/c_emitter.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/parser.h"
#include "lower_group_test_util.h"
#include "runtime/jit.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::check_lowered;
using testing::compare_tensors;
using testing::KernelBatch;
using testing::load_backend_test;
using testing::sorted_files;
using testing::random_inputs;

struct Case {
  std::string name, inputs, outputs, body;
  bool all_lowered = true;
};

const char* kAxLast = "  %ax = constant i64[1] [-1]\n";

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"softmax", "%x: f32[6,33]", "%y", std::string(kAxLast) + R"(  %m: f32[6,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %s: f32[6,33] = Sub(%x, %m) name="sub"
  %e: f32[6,33] = Exp(%s) name="exp"
  %z: f32[6,1] = ReduceSum(%e, %ax) {keepdims=1} name="sum"
  %y: f32[6,33] = Div(%e, %z) name="div"
)"});
  c.push_back({"layernorm", "%x: f32[4,5,16], %w: f32[16], %b: f32[16]", "%y", std::string(kAxLast) + R"(  %two = constant f32[] [2]
  %eps = constant f32[] [1e-05]
  %mean: f32[4,5,1] = ReduceMean(%x, %ax) {keepdims=1} name="mean"
  %d: f32[4,5,16] = Sub(%x, %mean) name="sub"
  %sq: f32[4,5,16] = Pow(%d, %two) name="pow"
  %var: f32[4,5,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[4,5,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[4,5,1] = Sqrt(%ve) name="sqrt"
  %n: f32[4,5,16] = Div(%d, %sd) name="div"
  %s: f32[4,5,16] = Mul(%n, %w) name="scale"
  %y: f32[4,5,16] = Add(%s, %b) name="shift"
)"});
  c.push_back({"gap", "%x: f32[2,3,5,7]", "%y", R"(  %p: f32[2,3,1,1] = GlobalAveragePool(%x) name="gap"
  %y: f32[2,3,1,1] = Relu(%p) name="relu"
)"});
  c.push_back({"gmp_f16", "%x: f16[2,3,4,4]", "%y", R"(  %y: f16[2,3,1,1] = GlobalMaxPool(%x) name="gmp"
)"});
  c.push_back({"sum_axis1_keep0", "%x: f32[3,4,5]", "%y", R"(  %ax = constant i64[1] [1]
  %y: f32[3,5] = ReduceSum(%x, %ax) {keepdims=0} name="sum"
)"});
  c.push_back({"sum_axes02_keep1", "%x: f32[3,4,5]", "%y", R"(  %ax = constant i64[2] [0, 2]
  %y: f32[1,4,1] = ReduceSum(%x, %ax) {keepdims=1} name="sum"
)"});
  c.push_back({"sum_all_keep0", "%x: f32[3,4,5]", "%y", R"(  %y: f32[] = ReduceSum(%x) {keepdims=0} name="sum"
)"});
  c.push_back({"sum_i64", "%x: i64[5,7]", "%y", R"(  %ax = constant i64[1] [1]
  %y: i64[5] = ReduceSum(%x, %ax) {keepdims=0} name="sum"
)"});
  c.push_back({"mean_max_min_i32", "%x: i32[4,6]", "%y, %z, %w", R"(  %ax = constant i64[1] [1]
  %y: i32[4,1] = ReduceMean(%x, %ax) {keepdims=1} name="mean"
  %z: i32[4,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %w: i32[4,1] = ReduceMin(%x, %ax) {keepdims=1} name="min"
)"});
  c.push_back({"prod_u32_l1_i32", "%x: u32[3,4], %v: i32[3,4]", "%y, %z", R"(  %ax = constant i64[1] [0]
  %y: u32[1,4] = ReduceProd(%x, %ax) {keepdims=1} name="prod"
  %z: i32[4] = ReduceL1(%v, %ax) {keepdims=0} name="l1"
)"});
  // Every float kind over the middle axis, each in its own group.
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                         "ReduceLogSumExp", "ReduceSumSquare"})
    c.push_back({std::string(op) + "_f32", "%x: f32[3,4,5]", "%y", std::string(R"(  %ax = constant i64[1] [-2]
  %y: f32[3,1,5] = )") + op + R"((%x, %ax) {keepdims=1} name="r"
)"});
  c.push_back({"l2_lse_f16", "%x: f16[3,8]", "%y, %z", std::string(kAxLast) + R"(  %y: f16[3] = ReduceL2(%x, %ax) {keepdims=0} name="l2"
  %z: f16[3,1] = ReduceLogSumExp(%x, %ax) {keepdims=1} name="lse"
)"});
  c.push_back({"mean_f64_epilogue", "%x: f64[5,9]", "%y, %m", std::string(kAxLast) + R"(  %m: f64[5,1] = ReduceMean(%x, %ax) {keepdims=1} name="mean"
  %y: f64[5,9] = Sub(%x, %m) name="sub"
)"});
  c.push_back({"logsoftmax_parallel", "%x: f32[64,128]", "%y", std::string(kAxLast) + R"(  %m: f32[64,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %s: f32[64,128] = Sub(%x, %m) name="sub"
  %e: f32[64,128] = Exp(%s) name="exp"
  %z: f32[64,1] = ReduceSum(%e, %ax) {keepdims=1} name="sum"
  %l: f32[64,1] = Log(%z) name="log"
  %y: f32[64,128] = Sub(%s, %l) name="lsub"
)"});
  // keepdims=0 over the last axis of a square tensor, then broadcast along the *last* axis: the
  // per-row result is read at other rows. The row kernel refuses that; the partitioner, asking
  // it, keeps the two apart, and both kernels are generated.
  c.push_back({"cross_row_broadcast", "%x: f32[4,4]", "%y", std::string(kAxLast) + R"(  %s: f32[4] = ReduceSum(%x, %ax) {keepdims=0} name="sum"
  %y: f32[4,4] = Add(%x, %s) name="add"
)"});
  return c;
}

std::unique_ptr<Graph> graph_of(const Case& c) {
  return parse_graph("graph main opset 17 (" + c.inputs + ") -> (" + c.outputs + ") {\n" + c.body + "}\n");
}

// Only finite values for the row kernels that normalise (a NaN would hide the rest of the row).
TensorMap inputs_of(const Case& c, const Graph& g) {
  const bool edges = c.name.find("softmax") == std::string::npos && c.name != "layernorm";
  return random_inputs(g, 11, {}, edges);
}

class LowerReduction : public ::testing::TestWithParam<size_t> {};

TEST_P(LowerReduction, Interpreted) {
  const Case c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  auto g = graph_of(c);
  auto run = check_lowered(*g, inputs_of(c, *g));
  std::string why;
  for (const auto& [r, n] : run.reasons) why += r + "\n";
  if (c.all_lowered) {
    EXPECT_EQ(run.refused, 0) << why;
    EXPECT_GE(run.lowered, 1);
  }
  if (std::getenv("KILN_PRINT_NESTS"))
    for (const auto& k : run.kernels) std::cout << loop::print_kernel(k);
}

INSTANTIATE_TEST_SUITE_P(Cases, LowerReduction, ::testing::Range<size_t>(0, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

TEST(LowerReductionShape, SoftmaxIsOneRowKernel) {
  auto g = graph_of(cases()[0]);
  FusionPlan plan = partition(*g, {});
  ASSERT_EQ(plan.groups.size(), 1u);
  auto lg = loop::lower_group(plan.groups[0], plan.groups[0].name);
  ASSERT_TRUE(lg.kernel) << lg.reason;
  const std::string s = loop::print_kernel(*lg.kernel);
  // Two reduction passes (rows of 33: in lanes) plus the output pass, inside one loop over the
  // rows; x is never stored.
  EXPECT_NE(s.find("for i0 in [0, 6)"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_lanes0"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_lanes1"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_j2_1"), std::string::npos) << s;
}

TEST(LowerReductionShape, CrossRowReadIsRefused) {
  auto g = graph_of(cases().back());
  auto lg = loop::lower_group(testing::whole_group(*g), "whole");
  EXPECT_FALSE(lg.kernel);
  EXPECT_NE(lg.reason.find("another row"), std::string::npos) << lg.reason;
  FusionPlan plan = partition(*g, {});
  EXPECT_EQ(plan.kernel_count(), 2);
  ASSERT_EQ(plan.rejected.size(), 1u);
  EXPECT_NE(plan.rejected[0].reason.find("another row"), std::string::npos) << plan.rejected[0].reason;
}

TEST(LowerReductionShape, RefusalsHaveReasons) {
  // A pool and another reduction in one nest: refused with the reason, and the partitioner keeps
  // them apart (each lowers alone).
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[2,3,8,8]) -> (%m) {
  %ax = constant i64[2] [2, 3]
  %y: f32[2,3,4,4] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
  %m: f32[2,3,1,1] = ReduceMean(%y, %ax) {keepdims=1} name="mean"
}
)");
  auto lg = loop::lower_group(testing::whole_group(*g), "whole");
  EXPECT_FALSE(lg.kernel);
  EXPECT_NE(lg.reason.find("cannot share a loop nest with"), std::string::npos) << lg.reason;
  FusionPlan plan = partition(*g, {});
  EXPECT_EQ(plan.kernel_count(), 2);
  for (const auto& grp : plan.groups) EXPECT_TRUE(loop::lower_group(grp, grp.name).kernel) << grp.name;
  check_lowered(*g, random_inputs(*g));
}

// Every case compiled to C in one module; each lowered kernel compared with the reference values
// of its group.
TEST(LowerReductionJit, AllCasesCompiled) {
  KernelBatch batch;
  for (const auto& c : cases()) {
    auto g = graph_of(c);
    auto values = run_reference_values(*g, inputs_of(c, *g));
    for (const auto& grp : partition(*g, {}).groups) {
      auto lg = loop::lower_group(grp, c.name + "_" + grp.name);
      if (lg.kernel) batch.add(std::move(*lg.kernel), grp, values);  // refused groups are checked elsewhere
    }
  }
  EXPECT_GE(batch.size(), cases().size());
  batch.check("lower_reduction");
}

// ---------------------------------------------------------------- ONNX node conformance tests

// Expected outputs of the backend tests, compared more loosely than with kiln's reference (their
// values come from numpy, which sums pairwise).
std::string close_to_expected(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.numel() != want.numel()) return "dtype or size differs";
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.as_double(i), w = want.as_double(i);
    if (std::isnan(w) ? !std::isnan(g) : std::fabs(g - w) > 1e-3 * std::fabs(w) + 1e-4)
      return cat("element ", i, ": got ", g, ", want ", w);
  }
  return "";
}

TEST(LowerReductionOnnx, NodeConformance) {
  const fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) GTEST_SKIP() << root << " is not installed";
  int tests = 0, skipped = 0, lowered = 0, refused = 0, reduction_lowered = 0, reduction_refused = 0;
  std::map<std::string, int> reasons;
  for (const char* prefix : {"test_reduce_", "test_softmax", "test_logsoftmax", "test_layer_normalization"})
    for (const auto& dir : sorted_files(root, prefix)) {
      const std::string name = dir.filename().string();
      std::unique_ptr<Graph> g;
      TensorMap inputs;
      std::string why;
      if (!load_backend_test(dir, g, inputs, why)) {
        ++skipped;
        continue;
      }
      SCOPED_TRACE(name);
      ++tests;
      if (std::getenv("KILN_PRINT_REFUSED")) {
        FusionPlan p = partition(*g, {});
        for (const auto& grp : p.groups) {
          auto lg = loop::lower_group(grp, grp.name);
          if (!lg.kernel) std::cout << "[ refused   ] " << name << ": " << lg.reason << "\n";
        }
      }
      FusionPlan plan = partition(*g, {});
      for (const auto& grp : plan.groups)
        if (grp.kind == GroupKind::Reduction) {
          auto lg = loop::lower_group(grp, grp.name);
          if (lg.kernel) ++reduction_lowered;
          else {
            ++reduction_refused;
            ++reasons[lg.reason];
          }
        }
      auto run = check_lowered(*g, inputs);
      lowered += run.lowered;
      refused += run.refused;
      auto outs = sorted_files(dir / "test_data_set_0", "output_");
      for (size_t i = 0; i < outs.size() && i < g->outputs().size(); ++i) {
        Tensor want = read_tensor_proto_file(outs[i].string());
        EXPECT_EQ(close_to_expected(run.outputs.at(g->outputs()[i]->name()), want), "") << "output " << i;
      }
    }
  std::cout << "[ reduction ] " << tests << " node tests (" << skipped << " skipped): " << lowered
            << " groups lowered, " << refused << " refused; reduction groups: " << reduction_lowered
            << " lowered, " << reduction_refused << " refused\n";
  for (const auto& [r, n] : reasons) std::cout << "[ reduction ]   " << n << "  " << r << "\n";
  EXPECT_GT(reduction_lowered, 50);
}

}  // namespace
}  // namespace kiln
