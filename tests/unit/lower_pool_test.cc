// Loop lowering of windowed pools (MaxPool, AveragePool) and ArgMax/ArgMin row reductions: small
// IR graphs (pads, strides, dilations, ceil_mode, count_include_pad 0/1, 1-D/3-D, integer and half
// types, a fused ReLU prologue and an epilogue) are partitioned and lowered; each plan runs with the
// loop interpreter and, in one JIT module for the whole file, as compiled C, and must match the
// unfused reference run (random inputs include NaN, +-inf and signed zeros), MaxPool's Indices
// output included. Plus hand-computed NaN/tie cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
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
  // Indices: flat positions in the input (row-major, or column-major with storage_order=1), with
  // a prologue, an epilogue reading the indices, ties and padding.
  c.push_back({"max_indices_pads", "%x: f32[2,3,9,9]", "%y, %i", R"(  %y: f32[2,3,5,5], %i: i64[2,3,5,5] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pool"
)"});
  c.push_back({"max_indices_col_major_ceil", "%x: f32[1,2,7,6]", "%y, %i", R"(  %y: f32[1,2,4,3], %i: i64[1,2,4,3] = MaxPool(%x) {kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1, storage_order=1} name="pool"
)"});
  c.push_back({"max_indices_3d_dilated", "%x: f32[1,2,5,6,7]", "%y, %i", R"(  %y: f32[1,2,4,5,6], %i: i64[1,2,4,5,6] = MaxPool(%x) {kernel_shape=[2, 2, 2], dilations=[1, 1, 2], pads=[0, 0, 1, 0, 0, 0], storage_order=1} name="pool"
)"});
  c.push_back({"relu_max_indices_epilogue", "%x: f32[2,4,8,8]", "%y, %c", R"(  %r: f32[2,4,8,8] = Relu(%x) name="relu"
  %y: f32[2,4,4,4], %i: i64[2,4,4,4] = MaxPool(%r) {kernel_shape=[2, 2], strides=[2, 2]} name="pool"
  %c: i32[2,4,4,4] = Cast(%i) {to=6} name="cast"
)"});
  c.push_back({"max_i8_indices_1d", "%x: i8[2,3,10]", "%y, %i", R"(  %y: i8[2,3,5], %i: i64[2,3,5] = MaxPool(%x) {kernel_shape=[3], strides=[2], pads=[1, 1]} name="pool"
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

// With Indices every output takes the point form (each window keeps its best position); without,
// the interior runs as rows, and storage_order changes nothing.
TEST(LowerPoolShape, IndicesTakeThePointForm) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,2,4,40]) -> (%y, %i) {
  %y: f32[1,2,2,20], %i: i64[1,2,2,20] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2], storage_order=1} name="pool"
}
)");
  const std::string s = loop::print_kernel(lower_only_group(*g));
  EXPECT_EQ(s.find("kiln_prow"), std::string::npos) << s;
  EXPECT_NE(s.find("kiln_idx0"), std::string::npos) << s;
  auto h = parse_graph(R"(graph main opset 17 (%x: f32[1,2,4,40]) -> (%y) {
  %y: f32[1,2,2,20] = MaxPool(%x) {kernel_shape=[2, 2], strides=[2, 2], storage_order=1} name="pool"
}
)");
  EXPECT_NE(loop::print_kernel(lower_only_group(*h)).find("kiln_prow"), std::string::npos);
  check_lowered(*g, random_inputs(*g));
}

// AveragePool's sum: the reference's double under --strict-fp, float (the compute type) by default.
TEST(LowerPoolShape, AverageSumsInFloatUnlessStrict) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,2,9,40]) -> (%y) {
  %y: f32[1,2,4,19] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2]} name="pool"
}
)");
  FusionPlan plan = partition(*g, {});
  ASSERT_EQ(plan.groups.size(), 1u);
  loop::Schedule strict;
  strict.set_strict_numerics();
  const std::string fast = loop::print_kernel(*loop::lower_group(plan.groups[0], "fast").kernel);
  const std::string exact = loop::print_kernel(*loop::lower_group(plan.groups[0], "exact", strict).kernel);
  EXPECT_EQ(fast.find("f64"), std::string::npos) << fast;
  EXPECT_NE(exact.find("f64"), std::string::npos) << exact;
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

// ---------------------------------------------------------------- rows along the output width

using testing::bit_exact;

// One pool group per case; `ranges` are the printed loops the width must split into: the left
// border (kiln_wl), the interior's finalising loop (vectorized) and the right border (kiln_wr),
// each absent when empty, or "point" for a pool without an interior.
struct RowCase {
  std::string name, inputs, body;
  std::vector<std::string> ranges;
};

std::vector<RowCase> row_cases() {
  std::vector<RowCase> c;
  // Width 11 -> 6 outputs: column 0 reaches into the begin padding, column 5 into the end one.
  c.push_back({"max_odd", "%x: f32[1,3,13,11]", R"(  %y: f32[1,3,7,6] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pool"
)", {"for kiln_wl in [0, 1)", "for i3 in [0, 4) vectorized", "for kiln_wr in [0, 1)"}});
  c.push_back({"max_dilated_asym", "%x: f32[2,2,9,14]", R"(  %y: f32[2,2,10,13] = MaxPool(%x) {kernel_shape=[2, 3], dilations=[2, 2], pads=[2, 1, 1, 2]} name="pool"
)", {"for kiln_wl in [0, 1)", "for i3 in [0, 10) vectorized", "for kiln_wr in [0, 2)"}});
  // ceil_mode: the last window hangs past the input (no padding at the start).
  c.push_back({"max_ceil", "%x: f32[1,2,8,10]", R"(  %y: f32[1,2,4,5] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1} name="pool"
)", {"for i3 in [0, 4) vectorized", "for kiln_wr in [0, 1)"}});
  c.push_back({"avg_ceil_cip1", "%x: f32[1,2,9,12]", R"(  %y: f32[1,2,5,7] = AveragePool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1} name="pool"
)", {"for kiln_wl in [0, 1)", "for i3 in [0, 5) vectorized", "for kiln_wr in [0, 1)"}});
  c.push_back({"avg_cip0_stride3_f64", "%x: f64[2,1,10,17]", R"(  %y: f64[2,1,4,6] = AveragePool(%x) {kernel_shape=[3, 2], strides=[3, 3], pads=[1, 1, 1, 1]} name="pool"
)", {"for kiln_wl in [0, 1)", "for i3 in [0, 5) vectorized"}});
  // Interiors longer than one row of accumulators (512): two full rows and a tail.
  c.push_back({"max_wide_1d", "%x: f32[1,2,1200]", R"(  %y: f32[1,2,1200] = MaxPool(%x) {kernel_shape=[3], pads=[1, 1]} name="pool"
)", {"for kiln_wl in [0, 1)", "for kiln_wb in [0, 2)", "for i2 in [0, 512) vectorized", "for i2t in [0, 174) vectorized",
     "for kiln_wr in [0, 1)"}});
  c.push_back({"avg_wide_1d_cip1", "%x: f32[1,1,1100]", R"(  %y: f32[1,1,1100] = AveragePool(%x) {kernel_shape=[4], pads=[2, 1], count_include_pad=1} name="pool"
)", {"for kiln_wl in [0, 2)", "for kiln_wb in [0, 2) parallel", "for i2t in [0, 73) vectorized",
     "for kiln_wr in [0, 1)"}});
  // A window row of 10 positions: its loop stays outside the row loop.
  c.push_back({"max_long_window_row", "%x: f32[1,2,6,40]", R"(  %y: f32[1,2,6,13] = MaxPool(%x) {kernel_shape=[2, 10], strides=[1, 3], pads=[0, 4, 1, 4]} name="pool"
)", {"for kiln_wl in [0, 2)", "for kiln_k1 in [0, 10)", "for i3 in [0, 10) vectorized", "for kiln_wr in [0, 1)"}});
  c.push_back({"avg_long_window_row", "%x: f32[1,1,3,30]", R"(  %y: f32[1,1,3,7] = AveragePool(%x) {kernel_shape=[1, 9], strides=[1, 4], pads=[0, 2, 0, 2], count_include_pad=1} name="pool"
)", {"for kiln_wl in [0, 1)", "for kiln_k1 in [0, 9)", "for i3 in [0, 5) vectorized", "for kiln_wr in [0, 1)"}});
  c.push_back({"max_window_width_1", "%x: f32[1,2,7,5]", R"(  %y: f32[1,2,4,5] = MaxPool(%x) {kernel_shape=[3, 1], strides=[2, 1], pads=[1, 0, 1, 0]} name="pool"
)", {"for i3 in [0, 5) vectorized"}});
  // Every window reaches into the padding: no interior.
  c.push_back({"avg_no_interior", "%x: f32[1,1,5,2]", R"(  %y: f32[1,1,5,2] = AveragePool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]} name="pool"
)", {"point"}});
  c.push_back({"max_ints_f16", "%x: i8[1,2,5,9], %u: u8[1,2,5,9], %h: f16[1,2,5,9]", R"(  %y: i8[1,2,3,5] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pi"
  %z: u8[1,2,3,5] = MaxPool(%u) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="pu"
  %w: f16[1,2,3,5] = MaxPool(%h) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]} name="ph"
)", {"for kiln_wl in [0, 1)", "for i3 in [0, 3) vectorized", "for kiln_wr in [0, 1)"}});
  // A fused prologue (non-overlapping windows) and epilogue across the three ranges.
  c.push_back({"relu_avg_scale", "%x: f32[1,4,8,9], %s: f32[1,4,1,1]", R"(  %r: f32[1,4,8,9] = Relu(%x) name="relu"
  %p: f32[1,4,4,5] = AveragePool(%r) {kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 1]} name="pool"
  %y: f32[1,4,4,5] = Mul(%p, %s) name="scale"
)", {"for i3 in [0, 4) vectorized", "for kiln_wr in [0, 1)"}});
  return c;
}

// Runs `kernels` compiled (one module) on `ins`, into `outs` (already shaped).
void run_compiled(const std::vector<loop::LoopKernel>& kernels, std::vector<std::vector<Tensor>>& ins,
                  std::vector<std::vector<Tensor>>& outs) {
  const auto dir = fs::temp_directory_path() / ("kiln_pool_rows_" + std::to_string(::getpid()));
  runtime::CompileOptions opts;
  opts.cache_dir = dir.string();
  auto module = runtime::JitModule::build(codegen::emit_c(kernels), opts);
  for (size_t k = 0; k < kernels.size(); ++k) {
    std::vector<void*> args;
    for (auto& t : ins[k]) args.push_back(t.raw());
    for (auto& t : outs[k]) args.push_back(t.raw());
    module->get(kernels[k].name)(args.data());
  }
  module.reset();
  fs::remove_all(dir);
}

// Each case's nest has the expected ranges, and its outputs (random inputs with NaN, +-inf and
// signed zeros, two seeds) are the reference's bits, interpreted and compiled.
TEST(LowerPoolRows, RangesAndExactResults) {
  std::vector<loop::LoopKernel> kernels;
  std::vector<std::vector<Tensor>> ins, outs, wants;
  std::vector<std::string> names;
  // The rows keep each output's window order: bit for bit the reference's under --strict-fp
  // numerics (default numerics sum an AveragePool in float instead of double).
  loop::Schedule strict;
  strict.set_strict_numerics();
  for (const auto& c : row_cases()) {
    SCOPED_TRACE(c.name);
    auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (%y" +
                         std::string(c.name == "max_ints_f16" ? ", %z, %w" : "") + ") {\n" + c.body + "}\n");
    const FusionPlan plan = partition(*g, {});
    for (unsigned seed : {5u, 17u}) {
      const TensorMap inputs = random_inputs(*g, seed);
      auto values = run_reference_values(*g, inputs);
      for (const auto& grp : plan.groups) {
        auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(seed) + "_" + grp.name, strict);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        const std::string text = loop::print_kernel(*lg.kernel);
        for (const auto& r : c.ranges) {
          if (r == "point") EXPECT_EQ(text.find("kiln_prow"), std::string::npos) << text;
          else EXPECT_NE(text.find(r), std::string::npos) << r << "\n" << text;
        }
        std::vector<Tensor> in, out, want;
        for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant() : values.at(v).clone());
        for (const Value* v : grp.outputs) {
          out.emplace_back(v->dtype(), v->shape());
          want.push_back(values.at(v));
        }
        std::vector<Tensor*> ip, op;
        for (auto& t : in) ip.push_back(&t);
        for (auto& t : out) op.push_back(&t);
        loop::interpret(*lg.kernel, ip, op);
        for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(bit_exact(out[i], want[i]), "") << "interpreted, output " << i;
        for (auto& t : out) t = Tensor(t.dtype(), t.shape());
        kernels.push_back(std::move(*lg.kernel));
        names.push_back(c.name);
        ins.push_back(std::move(in));
        outs.push_back(std::move(out));
        wants.push_back(std::move(want));
      }
    }
  }
  run_compiled(kernels, ins, outs);
  for (size_t k = 0; k < kernels.size(); ++k)
    for (size_t i = 0; i < outs[k].size(); ++i)
      EXPECT_EQ(bit_exact(outs[k][i], wants[k][i]), "") << names[k] << " compiled, output " << i;
}

// Hand-computed, in the interior (columns 1-3) and the left border (column 0) of a 1x3 window,
// stride 3: MaxPool keeps a NaN that comes first and skips a later one, and of equal zeros keeps
// the first one's sign; AveragePool sums in window order (2^60 + 1 - 2^60 is 0 in double, not 1).
TEST(LowerPoolRows, NanZerosAndSummationOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float big = std::ldexp(1.0f, 60);
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,1,3,12]) -> (%y, %a) {
  %y: f32[1,1,3,4] = MaxPool(%x) {kernel_shape=[1, 3], strides=[1, 3], pads=[0, 1, 0, 1]} name="pool"
  %a: f32[1,1,3,4] = AveragePool(%x) {kernel_shape=[1, 3], strides=[1, 3], pads=[0, 1, 0, 1]} name="avg"
}
)");
  TensorMap in;
  in["x"] = Tensor::from_vector<float>({-0.0f, 0.0f, nan, 5, 7, 7, nan, 2, -0.0f, 0.0f, -inf, 100,
                                        1, nan, 0.0f, -0.0f, -0.0f, -inf, -inf, -inf, nan, nan, 3, 9,
                                        3, 4, big, 1, -big, 1, big, -big, -big, 1, big, 0},
                                       {1, 1, 3, 12});
  const FusionPlan plan = partition(*g, {});
  std::vector<loop::LoopKernel> kernels;
  std::vector<std::vector<Tensor>> ins, outs;
  for (const auto& grp : plan.groups) {
    auto lg = loop::lower_group(grp, "hand_" + grp.name);
    ASSERT_TRUE(lg.kernel) << lg.reason;
    EXPECT_NE(loop::print_kernel(*lg.kernel).find("for i3 in [0, 3) vectorized"), std::string::npos);
    kernels.push_back(*lg.kernel);
    ins.push_back({in.at("x").clone()});
    outs.push_back({});
    for (const Value* v : grp.outputs) outs.back().emplace_back(v->dtype(), v->shape());
  }
  run_compiled(kernels, ins, outs);
  TensorMap compiled;
  for (size_t i = 0; i < plan.groups.size(); ++i)
    for (size_t o = 0; o < plan.groups[i].outputs.size(); ++o) compiled[plan.groups[i].outputs[o]->name()] = outs[i][o];
  auto run = check_lowered(*g, in);  // interpreted (and compared with the reference)
  for (const TensorMap& got : {run.outputs, compiled}) {
    const float* y = got.at("y").data<float>();
    EXPECT_TRUE(std::signbit(y[0]) && y[0] == 0);  // -0 then +0: the first
    EXPECT_TRUE(std::isnan(y[1]));                 // NaN first
    EXPECT_EQ(y[2], 7.0f);                         // NaN later: skipped
    EXPECT_TRUE(std::signbit(y[3]) && y[3] == 0);  // -0, +0, -inf
    EXPECT_EQ(y[4], 1.0f);                         // 1, NaN
    EXPECT_TRUE(!std::signbit(y[5]) && y[5] == 0);  // +0, -0, -0
    EXPECT_EQ(y[6], -inf);
    EXPECT_TRUE(std::isnan(y[7]));
    const float* a = got.at("a").data<float>();
    EXPECT_EQ(a[8], 3.5f);  // the border: 3 + 4 over 2 positions
    EXPECT_EQ(a[9], 0.0f);  // big + 1 rounds to big, - big
    EXPECT_EQ(a[10], 0.0f);  // 1 + big - big
    EXPECT_EQ(a[11], 0.0f);  // -big + 1 + big
  }
  for (const auto& [name, t] : run_reference(*g, in)) {
    EXPECT_EQ(bit_exact(run.outputs.at(name), t), "") << name;
    EXPECT_EQ(bit_exact(compiled.at(name), t), "") << name;
  }
}

// Default numerics: a window with rows and a width whose windows overlap along the row is reduced
// down its rows first, into column sums of a block of output rows, then along them
// (lower_pool.cc's pool_rows_separable). Each case says whether it takes that form; outputs
// (random inputs with NaN, +-inf and signed zeros, two seeds) match the reference, interpreted and
// compiled: Max's NaNs where the reference has them (a NaN first in its window is the result, a
// later one is skipped), averages within the tolerance.
TEST(LowerPoolRows, SeparableRows) {
  struct SepCase {
    std::string name, inputs, body;
    bool separable;
  };
  const std::vector<SepCase> cases = {
      // Rows of 35 column sums: blocks of 5 output rows and a tail of 2, padding at both ends.
      {"max_s2_pads_blocks", "%x: f32[1,3,13,37]",
       "%y: f32[1,3,7,19] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]}", true},
      // Rows of 72 column sums: one output row at a time.
      {"max_s1_long_rows", "%x: f32[1,2,9,70]",
       "%y: f32[1,2,9,70] = MaxPool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], ceil_mode=1}", true},
      {"avg_s1_cip0", "%x: f32[2,3,11,11]",
       "%y: f32[2,3,11,11] = AveragePool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0}", true},
      {"avg_s1_cip1_asym", "%x: f32[1,2,10,12]",
       "%y: f32[1,2,10,12] = AveragePool(%x) {kernel_shape=[3, 4], pads=[2, 1, 0, 2], count_include_pad=1}", true},
      {"max_3d", "%x: f32[1,2,5,6,9]",
       "%y: f32[1,2,4,6,7] = MaxPool(%x) {kernel_shape=[2, 3, 3], pads=[0, 1, 0, 0, 1, 0]}", true},
      {"max_i8_s2", "%x: i8[1,2,9,21]",
       "%y: i8[1,2,4,10] = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2]}", true},
      {"max_width_dilated", "%x: f32[1,2,8,30]",
       "%y: f32[1,2,8,26] = MaxPool(%x) {kernel_shape=[3, 3], dilations=[1, 2], pads=[1, 0, 1, 0]}", true},
      // The first and last output rows' windows lie entirely in the padding: -inf.
      {"max_rows_in_padding", "%x: f32[1,2,5,20]",
       "%y: f32[1,2,9,18] = MaxPool(%x) {kernel_shape=[3, 3], pads=[3, 0, 3, 0]}", true},
      // Dilated rows with padding: the clamped window start is not its first position.
      {"max_height_dilated_pads", "%x: f32[1,2,9,20]",
       "%y: f32[1,2,9,18] = MaxPool(%x) {kernel_shape=[3, 3], dilations=[2, 1], pads=[2, 0, 2, 0]}", false},
      // Windows that overlap nowhere along the row: separating them saves no reads.
      {"avg_2x2_s2", "%x: f32[1,4,8,8]", "%y: f32[1,4,4,4] = AveragePool(%x) {kernel_shape=[2, 2], strides=[2, 2]}",
       false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    // An epilogue (y squared) on the pool's output, as a second output.
    const std::string type = c.body.substr(4, c.body.find(" = ") - 4);
    auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (%y, %z) {\n  " + c.body + " name=\"pool\"\n  %z: " +
                         type + " = Mul(%y, %y) name=\"square\"\n}\n");
    const FusionPlan plan = partition(*g, {});
    ASSERT_EQ(plan.groups.size(), 1u);
    for (unsigned seed : {5u, 17u}) {
      const TensorMap inputs = random_inputs(*g, seed);
      auto want = run_reference(*g, inputs);
      auto lg = loop::lower_group(plan.groups[0], c.name + "_" + std::to_string(seed));
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string text = loop::print_kernel(*lg.kernel);
      EXPECT_EQ(text.find("kiln_pcol") != std::string::npos, c.separable) << text;
      std::vector<Tensor> in = {inputs.at("x").clone()}, out;
      for (const Value* v : plan.groups[0].outputs) out.emplace_back(v->dtype(), v->shape());
      std::vector<Tensor*> ip = {&in[0]}, op;
      for (auto& t : out) op.push_back(&t);
      loop::interpret(*lg.kernel, ip, op);
      std::vector<std::vector<Tensor>> ins = {{inputs.at("x").clone()}}, outs = {{}};
      for (const Value* v : plan.groups[0].outputs) outs[0].emplace_back(v->dtype(), v->shape());
      run_compiled({*lg.kernel}, ins, outs);
      for (size_t i = 0; i < out.size(); ++i) {
        const Tensor& w = want.at(plan.groups[0].outputs[i]->name());
        EXPECT_EQ(compare_tensors(out[i], w), "") << "interpreted, output " << i;
        EXPECT_EQ(compare_tensors(outs[0][i], w), "") << "compiled, output " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
