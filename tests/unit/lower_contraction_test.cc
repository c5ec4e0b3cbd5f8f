// Loop lowering of contraction groups (one MatMul or Conv with prologue and epilogue): small IR
// graphs are partitioned and every group runs lowered — through the loop-IR interpreter, and
// (all cases of this file in one module) through emit_c + JitModule — and must match the unfused
// reference run (floats within 1e-5 relative). Plus refusal reasons, the nest's shape, the ONNX
// conformance tests of MatMul/Conv/Gemm, and the public models' contraction groups (printed as
// "[ lowering ]" lines).
//
// KILN_PRINT_NESTS=1 prints every lowered contraction kernel; KILN_LOWER_MODELS=1 adds resnet18,
// mobilenet_v2 and the encoder to the model sweep.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <set>

#include <random>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "codegen/c/c_emitter.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"
#include "runtime/jit.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::compare_tensors;
using testing::KernelBatch;
using testing::load_backend_test;
using testing::sorted_files;
using testing::random_inputs;

struct Case {
  std::string name, body, inputs, outputs;
  bool gemm_lowering = false;  // run run_lowering first (Gemm -> MatMul)
  bool edge_values = true;     // NaN/inf/huge values among the random inputs
};

std::unique_ptr<Graph> make_graph(const Case& c) {
  auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (" + c.outputs + ") {\n" + c.body + "}\n");
  if (c.gemm_lowering) run_lowering(*g);
  return g;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"matmul_bias_relu", R"(  %m: f32[6,5] = MatMul(%x, %w) name="mm"
  %a: f32[6,5] = Add(%m, %b) name="bias"
  %y: f32[6,5] = Relu(%a) name="relu"
)", "%x: f32[6,7], %w: f32[7,5], %b: f32[5]", "%y"},
      // A Transpose prologue on the right operand, batch dims broadcast both ways, a scale.
      {"batched_transpose_prologue", R"(  %t: f32[2,1,4,8] = Transpose(%k) {perm=[0,1,3,2]} name="tr"
  %s: f32[2,3,5,8] = MatMul(%q, %t) name="mm"
  %y: f32[2,3,5,8] = Mul(%s, %scale) name="scale"
)", "%q: f32[1,3,5,4], %k: f32[2,1,8,4], %scale: f32[1]", "%y"},
      // Prologue ops on the left operand (Div by a scalar, Slice), right operand 2-D weights.
      {"div_slice_prologue", R"(  %st = constant i64[1] [1]
  %en = constant i64[1] [7]
  %ax = constant i64[1] [2]
  %two = constant f32[] [2]
  %d: f32[2,3,9] = Div(%x, %two) name="div"
  %sl: f32[2,3,6] = Slice(%d, %st, %en, %ax) name="slice"
  %y: f32[2,3,4] = MatMul(%sl, %w) name="mm"
)", "%x: f32[2,3,9], %w: f32[6,4]", "%y"},
      {"vector_left", R"(  %y: f32[2,5] = MatMul(%v, %w) name="mm"
)", "%v: f32[7], %w: f32[2,7,5]", "%y"},
      {"vector_right", R"(  %y: f32[2,4] = MatMul(%a, %v) name="mm"
  %z: f32[2,4] = Tanh(%y) name="tanh"
)", "%a: f32[2,4,7], %v: f32[7]", "%z"},
      // The raw product is a graph output too: the kernel stores it and the epilogue's result.
      {"raw_output_stored", R"(  %m: f32[4,3] = MatMul(%x, %w) name="mm"
  %y: f32[4,3] = Sigmoid(%m) name="sig"
)", "%x: f32[4,6], %w: f32[6,3]", "%m, %y"},
      // GELU (erf form) after a MatMul with bias.
      {"matmul_gelu", R"(  %half = constant f32[] [0.5]
  %one = constant f32[] [1]
  %rs2 = constant f32[] [0.70710678]
  %m: f32[3,8] = MatMul(%x, %w) name="mm"
  %a: f32[3,8] = Add(%m, %b) name="bias"
  %d: f32[3,8] = Mul(%a, %rs2) name="scale"
  %e: f32[3,8] = Erf(%d) name="erf"
  %p: f32[3,8] = Add(%e, %one) name="plus1"
  %h: f32[3,8] = Mul(%a, %half) name="half"
  %y: f32[3,8] = Mul(%h, %p) name="gelu"
)", "%x: f32[3,5], %w: f32[5,8], %b: f32[8]", "%y", false, false},
      {"matmul_int32", R"(  %y: i32[3,4] = MatMul(%a, %b) name="mm"
)", "%a: i32[3,5], %b: i32[5,4]", "%y"},
      {"matmul_f16", R"(  %m: f16[3,4] = MatMul(%a, %b) name="mm"
  %y: f16[3,4] = Relu(%m) name="relu"
)", "%a: f16[3,5], %b: f16[5,4]", "%y", false, false},
      {"conv_bias_residual_relu", R"(  %c: f32[2,4,4,4] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]} name="conv"
  %r: f32[2,4,4,4] = Add(%c, %res) name="residual"
  %y: f32[2,4,4,4] = Relu(%r) name="relu"
)", "%x: f32[2,3,8,8], %w: f32[4,3,3,3], %b: f32[4], %res: f32[2,4,4,4]", "%y"},
      {"depthwise_clip", R"(  %lo = constant f32[] [0]
  %hi = constant f32[] [6]
  %c: f32[1,6,5,5] = Conv(%x, %w) {group=6, kernel_shape=[3,3], pads=[1,1,1,1]} name="dw"
  %y: f32[1,6,5,5] = Clip(%c, %lo, %hi) name="relu6"
)", "%x: f32[1,6,5,5], %w: f32[6,1,3,3]", "%y"},
      {"pad_conv", R"(  %pads = constant i64[8] [0, 0, 1, 2, 0, 0, 1, 0]
  %p: f32[1,2,8,8] = Pad(%x, %pads) {mode="reflect"} name="pad"
  %y: f32[1,3,6,6] = Conv(%p, %w) {kernel_shape=[3,3]} name="conv"
)", "%x: f32[1,2,6,6], %w: f32[3,2,3,3]", "%y"},
      // Grouped (not depthwise), dilated, asymmetric pads, per-axis strides, bias broadcast Add.
      {"grouped_dilated_conv", R"(  %c: f32[1,6,3,3] = Conv(%x, %w) {group=2, kernel_shape=[2,3], pads=[0,1,2,1], dilations=[2,1], strides=[2,2]} name="conv"
  %y: f32[1,6,3,3] = Add(%c, %b) name="bias"
)", "%x: f32[1,4,5,5], %w: f32[6,2,2,3], %b: f32[6,1,1]", "%y"},
      {"conv1d_same_upper", R"(  %y: f32[2,3,4] = Conv(%x, %w, %b) {kernel_shape=[3], auto_pad="SAME_UPPER", strides=[2]} name="conv"
)", "%x: f32[2,2,7], %w: f32[3,2,3], %b: f32[3]", "%y"},
      {"conv_f16_pointwise", R"(  %y: f16[1,3,4,4] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f16[1,2,4,4], %w: f16[3,2,1,1], %b: f16[3]", "%y", false, false},
      {"gemm_via_lowering", R"(  %y: f32[4,6] = Gemm(%a, %b, %c) {transB=1, alpha=0.5, beta=2.0} name="gemm"
  %z: f32[4,6] = Relu(%y) name="relu"
)", "%a: f32[4,3], %b: f32[6,3], %c: f32[6]", "%z", true},
  };
  return all;
}

bool is_contraction_group(const FusionGroup& grp) { return grp.kind == GroupKind::Contraction; }

// Every case lowers every contraction group and agrees with the reference in the interpreter.
TEST(LowerContraction, InterpretedMatchesReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = partition(*g);
    int contractions = 0;
    for (const auto& grp : plan.groups)
      if (is_contraction_group(grp)) {
        ++contractions;
        auto lg = loop::lower_group(grp, grp.name);
        EXPECT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
        if (lg.kernel && std::getenv("KILN_PRINT_NESTS")) std::cout << loop::print_kernel(*lg.kernel);
      }
    EXPECT_EQ(contractions, 1);
    testing::check_lowered(*g, random_inputs(*g, 5, {}, c.edge_values));
    testing::check_lowered(*g, random_inputs(*g, 6, {}, false));
  }
}

// The same kernels compiled as one C module (one translation unit for the whole file) and run on
// the inputs the reference computed for each group.
TEST(LowerContraction, JitMatchesReference) {
  KernelBatch batch;
  for (const Case& c : cases()) {
    auto g = make_graph(c);
    FusionPlan plan = partition(*g);
    const TensorMap inputs = random_inputs(*g, 7, {}, c.edge_values);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : plan.groups) {
      if (!is_contraction_group(grp)) continue;
      auto lg = loop::lower_group(grp, c.name + "_" + grp.name);
      ASSERT_TRUE(lg.kernel) << c.name << ": " << lg.reason;
      batch.add(std::move(*lg.kernel), grp, values);
    }
  }
  batch.check("lower_contraction_test");
}

std::string lowered_nest(const Case& c, const loop::Schedule& sched = {}) {
  auto g = make_graph(c);
  for (const auto& grp : partition(*g).groups)
    if (is_contraction_group(grp)) {
      auto lg = loop::lower_group(grp, grp.name, sched);
      return lg.kernel ? loop::print_kernel(*lg.kernel) : "refused: " + lg.reason;
    }
  return "no contraction group";
}

loop::Schedule untiled() {
  loop::Schedule s;
  s.tile_contractions = false;
  s.parallel_min_work = 32768;  // the shape tests' nests are small
  return s;
}

// The untiled nest's shape: output loops outside (the outermost parallel when big), the K loop
// innermost accumulating into `acc`, the epilogue after it, one store.
TEST(LowerContraction, NestShape) {
  Case c{"big", R"(  %m: f32[64,32] = MatMul(%x, %w) name="mm"
  %y: f32[64,32] = Relu(%m) name="relu"
)", "%x: f32[64,48], %w: f32[48,32]", "%y"};
  const std::string s = lowered_nest(c, untiled());
  SCOPED_TRACE(s);
  const size_t i0 = s.find("for i0 in [0, 64) parallel"), i1 = s.find("for i1 in [0, 32)"),
               k = s.find("for i2 in [0, 48)"), acc = s.find("acc = 0"), st = s.find("y[");
  ASSERT_NE(i0, std::string::npos);
  ASSERT_NE(i1, std::string::npos);
  ASSERT_NE(k, std::string::npos);
  ASSERT_NE(acc, std::string::npos);
  ASSERT_NE(st, std::string::npos);
  EXPECT_LT(i0, i1);
  EXPECT_LT(i1, acc);
  EXPECT_LT(acc, k);
  EXPECT_LT(k, st);
  // No padding: no predicate in a plain MatMul's K loop.
  const size_t upd = s.find("acc = (acc +");
  ASSERT_NE(upd, std::string::npos);
  EXPECT_EQ(s.substr(upd, s.find('\n', upd) - upd).find("select"), std::string::npos);
}

// The tiled nest: a parallel tile loop, the accumulator tile, the micro-kernel call with the
// operands read in place (MatMul weights and activations are plain buffers), the epilogue after.
TEST(LowerContraction, TiledNestShape) {
  Case c{"big", R"(  %m: f32[64,32] = MatMul(%x, %w) name="mm"
  %y: f32[64,32] = Relu(%m) name="relu"
)", "%x: f32[64,48], %w: f32[48,32]", "%y"};
  const std::string s = lowered_nest(c);
  SCOPED_TRACE(s);
  const size_t t = s.find("for kiln_t in [0, 1)"), acc = s.find("allocate kiln_acc"), mk = s.find("kiln_mk_f32(8, 32"),
               st = s.find("y[");
  ASSERT_NE(t, std::string::npos);
  ASSERT_NE(acc, std::string::npos);
  ASSERT_NE(mk, std::string::npos);
  ASSERT_NE(st, std::string::npos);
  EXPECT_LT(t, acc);
  EXPECT_LT(acc, mk);
  EXPECT_LT(mk, st);
  EXPECT_EQ(s.find("kiln_bpack"), std::string::npos);  // B read in place
  // A conv packs its im2col panel (4 output channels: a 2-row micro-kernel tile).
  loop::Schedule two_rows;
  two_rows.contraction.mr = 2;
  const std::string conv = lowered_nest(cases()[9], two_rows);
  EXPECT_NE(conv.find("kiln_bpack"), std::string::npos) << conv;
}

// Tiled and untiled nests give bit-identical float32 results (same products, same ascending
// summation per element), with every remainder exercised: M, N, K not multiples of the tile, K in
// several blocks, packed and in-place operands, grouped and padded convs.
// (Sums in the reference's order: the implicit conv reorders K, lower_contraction_conv_test.cc.)
TEST(LowerContraction, TiledIsBitIdenticalToUntiled) {
  loop::Schedule small;
  small.contraction = {2, 8, 5};  // mr, nr, kc: small so that the cases below need every remainder
  small.parallel_min_work = 1;
  small.reorder_sums = false;
  std::vector<Case> cs = {
      {"mm_remainders", R"(  %y: f32[2,13,19] = MatMul(%x, %w) name="mm"
)", "%x: f32[2,13,11], %w: f32[11,19]", "%y"},
      {"mm_wide_in_place", R"(  %y: f32[37,60] = MatMul(%x, %w) name="mm"
)", "%x: f32[37,11], %w: f32[11,60]", "%y"},
      {"mm_prologue_a", R"(  %t: f32[9,7] = Transpose(%x) {perm=[1,0]} name="tr"
  %y: f32[9,10] = MatMul(%t, %w) name="mm"
)", "%x: f32[7,9], %w: f32[7,10]", "%y"},
      // A computed (packed) A: a tile spans a panel of column tiles and packs A once for all.
      {"mm_computed_a_panel", R"(  %s: f32[2,13,11] = Sigmoid(%x) name="sig"
  %m: f32[2,13,11] = Mul(%x, %s) name="silu"
  %y: f32[2,13,19] = MatMul(%m, %w) name="mm"
  %z: f32[2,13,19] = Relu(%y) name="relu"
)", "%x: f32[2,13,11], %w: f32[11,19]", "%z"},
  };
  for (size_t i : {9, 10, 11, 12, 13}) cs.push_back(cases()[i]);
  for (const Case& c : cs) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = partition(*g);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : plan.groups) {
      if (!is_contraction_group(grp)) continue;
      loop::Schedule dflt;
      dflt.reorder_sums = false;
      // Panels narrower than N: accumulators for 2 rows x 2 column tiles only.
      loop::Schedule narrow = small;
      narrow.rows_block_bytes = 2 * 2 * 8 * 4;
      // An in-place A too big to re-read per column tile: tiles span panels of column tiles.
      loop::Schedule a_panels = small;
      a_panels.contraction.a_reuse_bytes = 1;
      a_panels.rows_block_bytes = 37 * 2 * 8 * 4;  // 2 column tiles of 8 per panel
      for (const loop::Schedule* sp : {&small, &dflt, &narrow, &a_panels}) {
        const loop::Schedule& sched = *sp;
        auto tiled = loop::lower_group(grp, "t", sched), plain = loop::lower_group(grp, "p", untiled());
        ASSERT_TRUE(tiled.kernel && plain.kernel) << tiled.reason << plain.reason;
        // Grouped and depthwise convs are the stencil nest (lower_conv_stencil.cc), the rest tiled.
        const bool stencil = c.name == "depthwise_clip" || c.name == "grouped_dilated_conv";
        if (sp != &dflt || stencil)
          EXPECT_NE(loop::print_kernel(*tiled.kernel).find(stencil ? "kiln_dph" : "kiln_mk_f32"), std::string::npos);
        if ((c.name == "mm_computed_a_panel" && sp != &dflt) || (c.name == "mm_wide_in_place" && sp == &a_panels))
          EXPECT_NE(loop::print_kernel(*tiled.kernel).find("kiln_q"), std::string::npos);  // the column loop of a panel
        auto a = testing::interpret_group(*tiled.kernel, grp, values),
             b = testing::interpret_group(*plain.kernel, grp, values);
        for (size_t o = 0; o < a.size(); ++o)
          EXPECT_EQ(std::memcmp(a[o].raw(), b[o].raw(), a[o].nbytes()), 0) << "output " << o;
      }
    }
  }
}


TEST(LowerContraction, ConvPaddingIsPredicated) {
  const std::string s = lowered_nest(cases()[9]);  // conv_bias_residual_relu
  EXPECT_NE(s.find("select"), std::string::npos) << s;
  // A 1x1 unpadded Conv needs no predicate.
  const std::string p = lowered_nest(cases()[14]);
  EXPECT_EQ(p.find("select"), std::string::npos) << p;
}

// Groups the lowering could not build are never planned; an op with no spelling is a library kernel.
TEST(LowerContraction, PlannedGroupsLowerAndTheRestAreLibraryKernels) {
  Case pool{"pool", R"(  %c: f32[1,2,4,4] = Conv(%x, %w) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,2,1,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[1,3,4,4], %w: f32[2,3,1,1]", "%y"};
  Case sibling{"sibling", R"(  %a: f32[1,2,4,4] = Conv(%x, %w1) {kernel_shape=[1,1]} name="conv_a"
  %b: f32[1,2,4,4] = Conv(%x, %w2) {kernel_shape=[1,1]} name="conv_b"
  %y: f32[1,2,4,4] = Add(%a, %b) name="add"
)", "%x: f32[1,3,4,4], %w1: f32[2,3,1,1], %w2: f32[2,3,1,1]", "%y"};
  Case convt{"convt", R"(  %y: f32[1,2,5,5] = ConvTranspose(%x, %w) {kernel_shape=[3,3]} name="ct"
)", "%x: f32[1,3,3,3], %w: f32[3,2,3,3]", "%y"};
  for (const Case* c : {&pool, &sibling, &convt}) {
    SCOPED_TRACE(c->name);
    auto g = make_graph(*c);
    // The partitioner asks the lowering: every group it plans lowers, and only the ConvTranspose
    // (no loop spelling without the lowering pipeline's rewrite) is a library kernel, with a reason.
    FusionPlan plan = partition(*g);
    for (const auto& grp : plan.groups) {
      if (!grp.counts_as_kernel()) continue;
      if (grp.is_library()) {
        EXPECT_EQ(c, &convt) << grp.name << ": " << grp.library_reason;
        EXPECT_NE(grp.library_reason.find("ConvTranspose"), std::string::npos) << grp.library_reason;
        continue;
      }
      auto lg = loop::lower_group(grp, grp.name);
      EXPECT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
    }
    EXPECT_EQ(plan.library_kernel_count(), c == &convt ? 1 : 0);
    testing::check_lowered(*g, random_inputs(*g, 9));
  }
}

// ---------------------------------------------------------------- conformance and models

struct Counts {
  int lowered = 0, refused = 0;
  std::map<std::string, int> reasons;
  void print(const std::string& what) const {
    std::cout << "[ lowering ] " << what << ": " << lowered << " contraction groups lowered, " << refused
              << " refused\n";
    for (const auto& [r, n] : reasons) std::cout << "[ lowering ]   " << n << "  " << r << "\n";
  }
};

void count_groups(const FusionPlan& plan, Counts& counts) {
  for (const auto& grp : plan.groups) {
    if (!is_contraction_group(grp)) continue;
    auto lg = loop::lower_group(grp, grp.name);
    if (lg.kernel) ++counts.lowered;
    else {
      ++counts.refused;
      ++counts.reasons[lg.reason];
    }
  }
}

// The node conformance tests of MatMul, Conv and Gemm with their own inputs.
TEST(LowerContraction, OnnxConformance) {
  const fs::path root = "/usr/share/libonnx-testdata/data/node";
  if (!fs::exists(root)) GTEST_SKIP() << root << " is not installed";
  Counts counts;
  int tests = 0;
  for (const char* prefix : {"test_matmul", "test_conv", "test_gemm"})
    for (const auto& dir : sorted_files(root, prefix)) {
      std::unique_ptr<Graph> g;
      TensorMap inputs;
      std::string why;
      if (!load_backend_test(dir, g, inputs, why)) {
        continue;
      }
      SCOPED_TRACE(dir.filename().string());
      ++tests;
      testing::check_lowered(*g, inputs);
      count_groups(partition(*g), counts);
    }
  counts.print(cat("node tests test_matmul*/test_conv*/test_gemm* (", tests, " tests)"));
  EXPECT_GE(tests, 10);
  EXPECT_GT(counts.lowered, 10);
}

// The public models' contraction groups: the small models run lowered on random inputs; with
// KILN_LOWER_MODELS=1 resnet18, mobilenet_v2 and the encoder are lowered and counted only.
TEST(LowerContraction, PublicModels) {
  auto models = testing::public_models(testing::public_model_names());
  if (models.empty()) GTEST_SKIP() << "no exported models (ctest's models_end_to_end exports them)";
  for (auto& [m, g] : models) {
    SCOPED_TRACE(m);
    for (bool fused : {true, false}) {
      FusionOptions o;
      o.enabled = fused;
      // The big models' convolutions take minutes in the loop interpreter: counted, not run.
      if (m == "demo" || m == "mlp_ln") testing::check_lowered(*g, random_inputs(*g, 11, {}, /*edge_values=*/false), o);
      Counts counts;
      count_groups(partition(*g, o), counts);
      counts.print(m + (fused ? " fused" : " unfused"));
      // The partitioner asks the lowering: no planned contraction group of a public model is refused.
      EXPECT_EQ(counts.refused, 0);
      for (const auto& [r, n] : counts.reasons) ADD_FAILURE() << n << " groups refused: " << r;
    }
  }
}

}  // namespace
}  // namespace kiln
