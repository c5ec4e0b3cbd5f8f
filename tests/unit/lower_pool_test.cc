// Loop lowering of windowed pools (MaxPool, AveragePool) and ArgMax/ArgMin row reductions: small
// IR graphs (pads, strides, dilations, ceil_mode, count_include_pad 0/1, 1-D/3-D, integer and half
// types, a fused ReLU prologue and an epilogue) are partitioned and lowered; each plan runs with the
// loop interpreter and, in one JIT module for the whole file, as compiled C, and must match the
// unfused reference run (random inputs include NaN, +-inf and signed zeros). Plus refusals
// (MaxPool's Indices output, storage_order) and hand-computed NaN/tie cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <filesystem>
#include <limits>
#include <map>
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
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"max_3x3_s2_pads", "%x: f32[2,3,9,9]", "%y", R"(  %y: f32[2,3,5,5] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pool"
)"});
  c.push_back({"max_3x3_s2_ceil", "%x: f32[1,2,8,8]", "%y", R"(  %y: f32[1,2,4,4] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1} name="pool"
)"});
  c.push_back({"max_ceil_pads_asym", "%x: f32[1,2,7,6]", "%y", R"(  %y: f32[1,2,4,3] = MaxPool(%x) {kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1} name="pool"
)"});
  c.push_back({"max_dilated", "%x: f32[1,2,10,10]", "%y", R"(  %y: f32[1,2,10,10] = MaxPool(%x) {kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]} name="pool"
)"});
  c.push_back({"avg_pad_cip0", "%x: f32[2,2,7,7]", "%y", R"(  %y: f32[2,2,4,4] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=0} name="pool"
)"});
  c.push_back({"avg_pad_cip1", "%x: f32[2,2,7,7]", "%y", R"(  %y: f32[2,2,4,4] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1} name="pool"
)"});
  // The last window (start 5) reaches past the end padding: its divisor counts 2 positions per dim.
  c.push_back({"avg_ceil_cip1", "%x: f32[1,1,6,6]", "%y", R"(  %y: f32[1,1,4,4] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1} name="pool"
)"});
  c.push_back({"avg_ceil_cip0_f64", "%x: f64[1,2,6,6]", "%y", R"(  %y: f64[1,2,4,4] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1} name="pool"
)"});
  c.push_back({"avg_dilated_f16", "%x: f16[1,3,9,9]", "%y", R"(  %y: f16[1,3,4,4] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]} name="pool"
)"});
  c.push_back({"relu_max_2x2_s2", "%x: f32[2,4,8,8]", "%y", R"(  %r: f32[2,4,8,8] = Relu(%x) name="relu"
  %y: f32[2,4,4,4] = MaxPool(%r) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
)"});
  c.push_back({"max_epilogue", "%x: f32[2,8,16,16], %b: f32[1,8,1,1]", "%y", R"(  %p: f32[2,8,8,8] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
  %a: f32[2,8,8,8] = Add(%p, %b) name="bias"
  %y: f32[2,8,8,8] = Relu(%a) name="relu"
)"});
  c.push_back({"max_f16_i8_u8", "%x: f16[1,2,5,5], %i: i8[1,2,5,5], %u: u8[1,2,5,5]", "%y, %z, %w", R"(  %y: f16[1,2,3,3] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="ph"
  %z: i8[1,2,3,3] = MaxPool(%i) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pi"
  %w: u8[1,2,3,3] = MaxPool(%u) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pu"
)"});
  c.push_back({"max_1d_avg_3d", "%x: f32[2,3,10], %v: f32[1,2,4,5,6]", "%y, %z", R"(  %y: f32[2,3,5] = MaxPool(%x) {kernel_shape=[3], strides=[2], pads=[1, 1]} name="p1"
  %z: f32[1,2,3,4,5] = AveragePool(%v) {kernel_shape=[2, 2, 2], pads=[0, 0, 0, 0, 0, 0]} name="p3"
)"});
  c.push_back({"max_same_upper", "%x: f32[1,2,7,7]", "%y", R"(  %y: f32[1,2,4,4] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"} name="pool"
)"});
  c.push_back({"argmax_last_keep0", "%x: f32[3,5,4]", "%y", R"(  %y: i64[3,4] = ArgMax(%x) {axis=1, keepdims=0, select_last_index=1} name="am"
)"});
  c.push_back({"argmin_first_keep1", "%x: f32[3,5,4]", "%y", R"(  %y: i64[3,5,1] = ArgMin(%x) {axis=-1} name="am"
)"});
  c.push_back({"arg_ints_ties", "%x: i32[4,9], %u: u8[6,3]", "%y, %z, %w", R"(  %y: i64[4,1] = ArgMax(%x) {axis=1, select_last_index=1} name="a1"
  %z: i64[1,3] = ArgMin(%u) {axis=0, select_last_index=1} name="a2"
  %w: i64[4] = ArgMax(%x) {axis=1, keepdims=0} name="a3"
)"});
  c.push_back({"argmax_f16_f64", "%x: f16[2,7], %d: f64[7,2]", "%y, %z", R"(  %y: i64[2] = ArgMax(%x) {axis=1, keepdims=0} name="a1"
  %z: i64[1,2] = ArgMin(%d) {axis=0, select_last_index=1} name="a2"
)"});
  c.push_back({"argmax_with_max", "%x: f32[6,10]", "%y, %m", R"(  %ax = constant i64[1] [-1]
  %m: f32[6,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %y: i64[6,1] = ArgMax(%x) {axis=-1, select_last_index=1} name="am"
)"});
  return c;
}

std::unique_ptr<Graph> graph_of(const Case& c) {
  return parse_graph("graph main opset 17 (" + c.inputs + ") -> (" + c.outputs + ") {\n" + c.body + "}\n");
}

class LowerPool : public ::testing::TestWithParam<size_t> {};

TEST_P(LowerPool, Interpreted) {
  const Case c = cases()[GetParam()];
  SCOPED_TRACE(c.name);
  auto g = graph_of(c);
  for (unsigned seed : {5u, 17u}) {
    auto run = check_lowered(*g, random_inputs(*g, seed));
    std::string why;
    for (const auto& [r, n] : run.reasons) why += r + "\n";
    EXPECT_EQ(run.refused, 0) << why;
    EXPECT_GE(run.lowered, 1);
    if (seed == 5 && std::getenv("KILN_PRINT_NESTS"))
      for (const auto& k : run.kernels) std::cout << loop::print_kernel(k);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LowerPool, ::testing::Range<size_t>(0, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

loop::LoopKernel lower_only_group(const Graph& g) {
  FusionPlan plan = partition(g, {});
  EXPECT_EQ(plan.groups.size(), 1u);
  auto lg = loop::lower_group(plan.groups[0], plan.groups[0].name);
  EXPECT_TRUE(lg.kernel) << lg.reason;
  return lg.kernel ? *lg.kernel : loop::LoopKernel{};
}

TEST(LowerPoolShape, ReluMaxPoolIsOneKernelOverOutputs) {
  auto g = graph_of(cases()[9]);
  const std::string s = loop::print_kernel(lower_only_group(*g));
  // Outer loops over the 2x4x4x4 output, 2x2 window loops inside.
  EXPECT_NE(s.find("for i3 in [0, 4)"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_k0"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_k1"), std::string::npos) << s;
}

TEST(LowerPoolShape, IndicesAndStorageOrderAreRefused) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,2,4,4]) -> (%y, %i, %z) {
  %y: f32[1,2,2,2], %i: i64[1,2,2,2] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
  %z: f32[1,2,2,2] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2], storage_order=1} name="pool2"
}
)");
  FusionPlan plan = partition(*g, {});
  int refused = 0;
  for (const auto& grp : plan.groups) {
    auto lg = loop::lower_group(grp, grp.name);
    EXPECT_FALSE(lg.kernel);
    if (lg.reason.find("Indices") != std::string::npos || lg.reason.find("storage_order") != std::string::npos)
      ++refused;
  }
  EXPECT_EQ(refused, 2);
  check_lowered(*g, random_inputs(*g));
}

// Hand-computed: MaxPool keeps a NaN seen first in a window and skips a later one (strict >);
// ArgMax treats NaN as the greatest value; select_last_index picks the last of equal values.
TEST(LowerPoolValues, NanAndTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,1,2,4], %v: f32[2,4]) -> (%y, %a, %b, %c) {
  %y: f32[1,1,1,2] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
  %a: i64[2] = ArgMax(%v) {axis=1, keepdims=0} name="am"
  %b: i64[2] = ArgMax(%v) {axis=1, keepdims=0, select_last_index=1} name="aml"
  %c: i64[2] = ArgMin(%v) {axis=1, keepdims=0, select_last_index=1} name="amin"
}
)");
  TensorMap in;
  in["x"] = Tensor::from_vector<float>({nan, 1, 2, nan, 5, -inf, 7, 3}, {1, 1, 2, 4});
  in["v"] = Tensor::from_vector<float>({1, nan, 3, nan, -2, 4, -2, 4}, {2, 4});
  auto run = check_lowered(*g, in);
  EXPECT_EQ(run.refused, 0);
  const Tensor& y = run.outputs.at("y");
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], 7.0f);
  EXPECT_EQ(run.outputs.at("a").to_int64_vector(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(run.outputs.at("b").to_int64_vector(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(run.outputs.at("c").to_int64_vector(), (std::vector<int64_t>{0, 2}));
}

// Every case compiled to C in one module; each kernel compared with the reference values of its
// group, for two input seeds.
TEST(LowerPoolJit, AllCasesCompiled) {
  KernelBatch batch;
  for (const auto& c : cases()) {
    auto g = graph_of(c);
    const FusionPlan plan = partition(*g, {});
    for (unsigned seed : {5u, 17u}) {
      auto values = run_reference_values(*g, random_inputs(*g, seed));
      for (const auto& grp : plan.groups) {
        auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(seed) + "_" + grp.name);
        ASSERT_TRUE(lg.kernel) << c.name << ": " << lg.reason;
        batch.add(std::move(*lg.kernel), grp, values);
      }
    }
  }
  batch.check("lower_pool");
}


// ---------------------------------------------------------------- ONNX node conformance tests

// The pool and arg node tests: every graph runs lowered (interpreter) and must match both kiln's
// reference and the stored expected outputs (loosely: numpy sums differently). Lowered/refused
// reduction-group counts and the refusal reasons are printed as "[ pool ]" lines.
TEST(LowerPoolOnnx, NodeConformance) {
  const fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) GTEST_SKIP() << root << " is not installed";
  int tests = 0, skipped = 0, lowered = 0, refused = 0;
  std::map<std::string, int> reasons;
  for (const char* prefix : {"test_maxpool", "test_averagepool", "test_argmax", "test_argmin"})
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
      FusionPlan plan = partition(*g, {});
      for (const auto& grp : plan.groups)
        if (grp.kind == GroupKind::Reduction) {
          auto lg = loop::lower_group(grp, grp.name);
          if (lg.kernel) ++lowered;
          else {
            ++refused;
            ++reasons[lg.reason];
          }
        }
      auto run = check_lowered(*g, inputs);
      auto outs = sorted_files(dir / "test_data_set_0", "output_");
      for (size_t i = 0; i < outs.size() && i < g->outputs().size(); ++i) {
        Tensor want = read_tensor_proto_file(outs[i].string());
        const Tensor& got = run.outputs.at(g->outputs()[i]->name());
        ASSERT_EQ(got.numel(), want.numel()) << "output " << i;
        for (int64_t e = 0; e < want.numel(); ++e) {
          const double gv = got.as_double(e), wv = want.as_double(e);
          EXPECT_TRUE(std::isnan(wv) ? std::isnan(gv) : std::fabs(gv - wv) <= 1e-3 * std::fabs(wv) + 1e-4)
              << "output " << i << " element " << e << ": got " << gv << ", want " << wv;
        }
      }
    }
  std::cout << "[ pool ] " << tests << " node tests (" << skipped << " skipped): reduction groups " << lowered
            << " lowered, " << refused << " refused\n";
  for (const auto& [r, n] : reasons) std::cout << "[ pool ]   " << n << "  " << r << "\n";
  EXPECT_GT(lowered, 40);
}

}  // namespace
}  // namespace kiln
