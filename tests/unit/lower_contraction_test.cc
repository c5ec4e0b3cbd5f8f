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
// (Sums in the reference's order: the implicit conv reorders K, ImplicitConv* below.)
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

// Convs as implicit GEMMs (positions × output channels, the input staged into phase planes, the
// weights packed): every stride, dilation and padding, a fused prologue and epilogue, output
// channels that are not a whole number of panels, and remainders of every tile dimension. The
// weights must be constants for the implicit form (they are packed when the kernel is bound):
// `consts` become constant lines of random values.
struct ConvCase {
  std::string name, body, inputs, outputs;
  std::vector<std::pair<std::string, Shape>> consts;
};

std::vector<ConvCase> implicit_conv_cases() {
  return {
      {"ic_3x3_pad", R"(  %y: f32[2,40,5,6] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[2,16,5,6]", "%y", {{"w", {40, 16, 3, 3}}, {"b", {40}}}},
      {"ic_stride2_asym_pad_relu_residual", R"(  %c: f32[1,32,4,2] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,0,2,1], strides=[2,2]} name="conv"
  %a: f32[1,32,4,2] = Add(%c, %r) name="res"
  %y: f32[1,32,4,2] = Relu(%a) name="relu"
)", "%x: f32[1,17,7,5], %r: f32[1,32,4,2]", "%y", {{"w", {32, 17, 3, 3}}}},
      {"ic_dilated_stride3_5x5", R"(  %y: f32[1,33,2,3] = Conv(%x, %w) {kernel_shape=[5,5], dilations=[2,1], strides=[3,2], pads=[2,2,2,2]} name="conv"
)", "%x: f32[1,18,9,6]", "%y", {{"w", {33, 18, 5, 5}}}},
      {"ic_prologue_pointwise", R"(  %s: f32[1,24,6,6] = Sigmoid(%x) name="sig"
  %m: f32[1,24,6,6] = Mul(%x, %s) name="silu"
  %y: f32[1,64,6,6] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,24,6,6]", "%y", {{"w", {64, 24, 1, 1}}, {"b", {64}}}},
      {"ic_pointwise_stride2", R"(  %y: f32[2,48,3,4] = Conv(%x, %w) {kernel_shape=[1,1], strides=[2,2]} name="conv"
)", "%x: f32[2,20,6,7]", "%y", {{"w", {48, 20, 1, 1}}}},
      {"ic_pointwise_in_place", R"(  %y: f32[1,32,3,5] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,16,3,5]", "%y", {{"w", {32, 16, 1, 1}}, {"b", {32}}}},
      // Few input channels (a stem): K segments of 3 (the segmented micro-kernel keeps the
      // accumulators across them); any number of output channels (16 < nr), output rows narrower
      // than a tile. Under strict numerics, output channels as rows (StrictStemTakesChannelRows).
      {"ic_stem_im2col", R"(  %c: f32[2,40,6,5] = Conv(%x, %w, %b) {kernel_shape=[7,7], pads=[3,3,3,3], strides=[2,2]} name="conv"
  %y: f32[2,40,6,5] = Relu(%c) name="relu"
)", "%x: f32[2,3,11,9]", "%y", {{"w", {40, 3, 7, 7}}, {"b", {40}}}},
      {"ic_stem_im2col_few_out", R"(  %y: f32[1,16,7,9] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,3,7,9]", "%y", {{"w", {16, 3, 3, 3}}}},
      // Many positions (>= ContractionTile::window_channel_rows_positions) and output channels
      // (>= window_channel_rows_min_cout): output channels as rows too, the columns positions over
      // the phase planes' lines (GemmView::col_line; their padding columns computed, not stored);
      // a residual and ReLU epilogue, 70 output channels (a rest of rows), two images; a strided
      // conv with asymmetric padding over two phases of rows and columns.
      {"ic_rows_3x3_residual", R"(  %c: f32[2,70,12,14] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %a: f32[2,70,12,14] = Add(%c, %r) name="res"
  %y: f32[2,70,12,14] = Relu(%a) name="relu"
)", "%x: f32[2,24,12,14], %r: f32[2,70,12,14]", "%y", {{"w", {70, 24, 3, 3}}, {"b", {70}}}},
      {"ic_rows_stride2_asym", R"(  %y: f32[1,64,14,11] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,0,2,1], strides=[2,2]} name="conv"
)", "%x: f32[1,17,26,23]", "%y", {{"w", {64, 17, 3, 3}}}},
      // Fewer output channels than the default nr (32): narrower panels (a 16x16 tile), and 20
      // channels: panels of two vectors, the last one partly zero.
      {"ic_narrow_out_16", R"(  %y: f32[1,16,9,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,24,9,8]", "%y", {{"w", {16, 24, 3, 3}}, {"b", {16}}}},
      // Lines much wider than their outputs (an ASPP-style dilation over a small map: 17
      // phase-plane columns for 5 outputs): only each line's whole micro-kernel tiles are computed.
      {"ic_dilated_lines", R"(  %y: f32[1,32,6,5] = Conv(%x, %w, %b) {kernel_shape=[3,3], dilations=[6,6], pads=[6,6,6,6]} name="conv"
)", "%x: f32[1,16,6,5]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}},
      // DeepLabV3's ASPP branch in small: dilation 12 over 14x14, where a tap 12 rows or columns
      // off reads 2 of 14 lines or line positions. Each row tile skips the kernel positions that
      // read only padding there (GemmOperand::segment_live), with a ReLU epilogue. 264 input
      // channels: one K block per kernel position at the default kc (256), as the skip needs.
      {"ic_dilated_aspp_skip", R"(  %c: f32[1,32,14,14] = Conv(%x, %w, %b) {kernel_shape=[3,3], dilations=[12,12], pads=[12,12,12,12]} name="conv"
  %y: f32[1,32,14,14] = Relu(%c) name="relu"
)", "%x: f32[1,264,14,14]", "%y", {{"w", {32, 264, 3, 3}}, {"b", {32}}}},
      // 3-D convs with a trivial window along some axes (R(2+1)D's factorised convs): the
      // (1, 3, 3) one over every depth position's plane (depth folded into the batch), the
      // (3, 1, 1) one over (D, H·W); a residual epilogue reads the 5-D output.
      {"ic_3d_spatial_1x3x3", R"(  %c: f32[2,32,3,3,5] = Conv(%x, %w, %b) {kernel_shape=[1,3,3], pads=[0,1,1,0,1,1], strides=[1,2,1]} name="conv"
  %y: f32[2,32,3,3,5] = Add(%c, %r) name="res"
)", "%x: f32[2,16,3,6,5], %r: f32[2,32,3,3,5]", "%y", {{"w", {32, 16, 1, 3, 3}}, {"b", {32}}}},
      {"ic_3d_temporal_3x1x1", R"(  %y: f32[1,40,3,4,3] = Conv(%x, %w) {kernel_shape=[3,1,1], pads=[1,0,0,1,0,0], strides=[2,1,1]} name="conv"
)", "%x: f32[1,18,5,4,3]", "%y", {{"w", {40, 18, 3, 1, 1}}}},
      {"ic_narrow_out_20", R"(  %y: f32[1,20,5,7] = Conv(%x, %w) {kernel_shape=[3,3], pads=[0,1,2,1]} name="conv"
)", "%x: f32[1,16,5,7]", "%y", {{"w", {20, 16, 3, 3}}}},
      // Inception-v3's 1x7 conv over 17x17: 23-wide lines, each computed as two 9-row tiles (18
      // rows for 17 outputs; the last tile's extra row reads past the line, into the next one
      // and, after the last, into the planes' slack). Bias and ReLU.
      {"ic_1x7_lines", R"(  %c: f32[1,40,17,17] = Conv(%x, %w, %b) {kernel_shape=[1,7], pads=[0,3,0,3]} name="conv"
  %y: f32[1,40,17,17] = Relu(%c) name="relu"
)", "%x: f32[1,16,17,17]", "%y", {{"w", {40, 16, 1, 7}}, {"b", {40}}}},
      // Inception-v3's 7x1 conv over 17x17: flat 14-row tiles across the lines; the tiles that lie
      // wholly in the output rows a kernel row misses (its taps read the padding above or below)
      // skip its calls (GemmOperand::segment_line). Bias and ReLU.
      {"ic_7x1_flat", R"(  %c: f32[1,40,17,17] = Conv(%x, %w, %b) {kernel_shape=[7,1], pads=[3,0,3,0]} name="conv"
  %y: f32[1,40,17,17] = Relu(%c) name="relu"
)", "%x: f32[1,144,17,17]", "%y", {{"w", {40, 144, 7, 1}}, {"b", {40}}}},
      // A 3x3 stride-2 conv to 7x7 (ResNet's layer4.0 conv2 in small): 7-row tiles of one
      // phase-plane line (49 rows, not 55 over the 8-wide lines).
      {"ic_stride2_7x7_lines", R"(  %y: f32[1,32,7,7] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]} name="conv"
)", "%x: f32[1,16,14,14]", "%y", {{"w", {32, 16, 3, 3}}}},
  };
}

std::unique_ptr<Graph> make_conv_graph(const ConvCase& c) {
  return testing::graph_with_constants(c.inputs, c.outputs, c.body, c.consts, 11, 0.3f);
}

TEST(LowerContraction, ImplicitConvMatchesReference) {
  loop::Schedule small;
  small.contraction = {2, 8, 5};  // remainders of rows, output channels and K blocks within segments
  small.contraction.fit_position_rows = 0;  // keep mr = 2
  small.parallel_min_work = 1;
  // The same with the phase planes staged channels innermost (transposing copies).
  loop::Schedule inner = small;
  inner.contraction.implicit_channels_inner = 1;
  KernelBatch batch;
  for (const ConvCase& c : implicit_conv_cases()) {
    SCOPED_TRACE(c.name);
    // The ic_rows_ cases take the channel-rows form (their phase planes are below the L2 budget
    // that sends a conv there by default).
    const bool rows = c.name.rfind("ic_rows_", 0) == 0;
    small.contraction.window_channel_rows_plane_bytes = rows ? 0 : loop::ContractionTile{}.window_channel_rows_plane_bytes;
    loop::Schedule dflt;
    if (rows) dflt.contraction.window_channel_rows_plane_bytes = 0;
    auto g = make_conv_graph(c);
    FusionPlan plan = partition(*g);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    int convs = 0;
    for (const auto& grp : plan.groups) {
      if (!is_contraction_group(grp)) continue;
      ++convs;
      for (const loop::Schedule* sp : std::vector<const loop::Schedule*>{&small, &inner, nullptr}) {
        if (sp == &inner) inner.contraction.window_channel_rows_plane_bytes = small.contraction.window_channel_rows_plane_bytes;
        auto lg = sp ? loop::lower_group(grp, "ic", *sp) : loop::lower_group(grp, c.name + "_" + grp.name, dflt);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        const std::string nest = loop::print_kernel(*lg.kernel);
        // Channels innermost wherever the conv reads a kernel input along unit-stride columns
        // through staged planes: each plane row's interior one transposing copy.
        // (Not: a computed input, columns of stride 2 or more, a 1x1 conv read in place, depth
        // folded into the batch, channel rows.)
        static const std::set<std::string> unit_stride_staged = {
            "ic_3x3_pad",       "ic_dilated_lines", "ic_dilated_aspp_skip",   "ic_3d_temporal_3x1x1",
            "ic_narrow_out_16", "ic_narrow_out_20", "ic_stem_im2col_few_out", "ic_1x7_lines",
            "ic_7x1_flat"};
        const bool transposed_staging = nest.find("kiln_transpose_f32(&kiln_xph") != std::string::npos;
        EXPECT_EQ(transposed_staging, sp == &inner && unit_stride_staged.count(c.name)) << nest;
        // The implicit form: weights packed from their [Cout][Cin][kh][kw] order, K in segments
        // (or, as channel rows, the weights in place as A and each tile's B panel packed from
        // the phase planes staged once per call).
        if (c.name.rfind("ic_rows_", 0) == 0) {
          EXPECT_NE(nest.find("kiln_xkoff"), std::string::npos) << nest;
          EXPECT_NE(nest.find("B packed"), std::string::npos) << nest;
        } else {
          EXPECT_NE(nest.find("packed: panels of"), std::string::npos) << nest;
          EXPECT_NE(nest.find("K in segments of"), std::string::npos) << nest;
          EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << "no im2col panel: " << nest;
        }
        // Narrow panels leave registers for more rows; the row tile is fitted to the output lines
        // (position_rows): one line of 8 outputs (16 rows would compute 96 rows for 72 outputs).
        if (!sp && c.name == "ic_narrow_out_16") {
          EXPECT_NE(nest.find("micro-kernel 8x16"), std::string::npos) << nest;
          EXPECT_NE(nest.find("[72 x 216]"), std::string::npos) << nest;  // no padding columns computed
        }
        // (With 16 input channels at the default kc a call runs all nine kernel positions: no skip.)
        if ((sp && c.name == "ic_dilated_lines") || c.name == "ic_dilated_aspp_skip") {
          EXPECT_NE(nest.find("zero segments skipped per tile"), std::string::npos) << nest;
        }
        if (!sp && c.name == "ic_1x7_lines") {
          EXPECT_NE(nest.find("micro-kernel 9x32"), std::string::npos) << nest;
          EXPECT_NE(nest.find("[305 x 112]"), std::string::npos) << nest;  // 16 lines of 18 rows, then 17
        }
        if (c.name == "ic_7x1_flat") {
          EXPECT_NE(nest.find("zero segments skipped per tile"), std::string::npos) << nest;
          if (!sp) {
            EXPECT_NE(nest.find("micro-kernel 14x32"), std::string::npos) << nest;
            EXPECT_NE(nest.find("[289 x 1008]"), std::string::npos) << nest;  // flat: no padding rows
          }
        }
        if (!sp && c.name == "ic_stride2_7x7_lines") {
          EXPECT_NE(nest.find("micro-kernel 7x32"), std::string::npos) << nest;
          EXPECT_NE(nest.find("[49 x 144]"), std::string::npos) << nest;
        }
        if (!sp && c.name == "ic_narrow_out_20") {
          EXPECT_NE(nest.find("micro-kernel 7x32"), std::string::npos) << nest;  // one output line of 7
          EXPECT_NE(nest.find("[35 x 144]"), std::string::npos) << nest;
        }
        auto got = testing::interpret_group(*lg.kernel, grp, values);
        for (size_t o = 0; o < got.size(); ++o)
          EXPECT_EQ(testing::within_max_magnitude(got[o], values.at(grp.outputs[o]), 1e-5), "") << "output " << o;
        if (!sp) batch.add(std::move(*lg.kernel), grp, values);
      }
    }
    EXPECT_EQ(convs, 1);
  }
  batch.check("implicit_conv_test", /*contract=*/true);
}

// The nests of these cases at the default schedule, each also checked against the reference
// (interpreted, then compiled in one module).
std::vector<std::string> default_nests(const std::vector<ConvCase>& cases, const std::string& tag) {
  std::vector<std::string> nests;
  KernelBatch batch;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = make_conv_graph(c);
    FusionPlan plan = partition(*g);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    EXPECT_EQ(plan.groups.size(), 1u);
    for (const auto& grp : plan.groups) {
      auto lg = loop::lower_group(grp, c.name);
      EXPECT_TRUE(lg.kernel) << lg.reason;
      if (!lg.kernel) continue;
      nests.push_back(loop::print_kernel(*lg.kernel));
      auto got = testing::interpret_group(*lg.kernel, grp, values);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(testing::within_max_magnitude(got[o], values.at(grp.outputs[o]), 1e-5), "") << "output " << o;
      batch.add(std::move(*lg.kernel), grp, values);
    }
  }
  batch.check(tag, /*contract=*/true);
  return nests;
}

// A GEMM of one K block stores as much as it computes: its tiles are short and wide
// (ContractionTile::store_run), each output row a run of 128 columns instead of 32; with two K
// blocks the tile keeps its rows (B's panels reused across them).
TEST(LowerContraction, OneKBlockGemmTakesWideShortTiles) {
  const std::vector<ConvCase> cases = {
      {"expand_k16", R"(  %c: f32[1,96,32,32] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,96,32,32] = Relu(%c) name="relu"
)", "%x: f32[1,16,32,32]", "%y", {{"w", {96, 16, 1, 1}}, {"b", {96}}}},
      {"k_two_blocks", R"(  %y: f32[1,96,64,64] = Conv(%x, %w) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,300,64,64]", "%y", {{"w", {96, 300, 1, 1}}}},
  };
  const std::vector<std::string> nests = default_nests(cases, "wide_short_tiles");
  ASSERT_EQ(nests.size(), 2u);
  EXPECT_NE(nests[0].find("[96 x 16] * [16 x 1024], tile 32x128"), std::string::npos) << nests[0];
  EXPECT_NE(nests[1].find("[96 x 300] * [300 x 4096], tile 96x32"), std::string::npos) << nests[1];
}

// A 1x1 conv + global pool over a 7x7 map as the tiled rows: 49 columns are two micro-kernel
// panels (32 + 17), both computed inside each row tile so that the weights (A, 512 rows) are
// read once, not once per panel (RowTileProduct::panels_inside): no column-panel loop.
TEST(LowerContraction, ConvPoolRowsReadTheWeightsOnce) {
  const ConvCase c = {"conv_gap_7x7", R"(  %c: f32[1,512,7,7] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %r: f32[1,512,7,7] = Relu(%c) name="relu"
  %y: f32[1,512,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,64,7,7]", "%y", {{"w", {512, 64, 1, 1}}, {"b", {512}}}};
  auto g = make_conv_graph(c);
  // By default 49 positions fill 49 of 64 lanes of the tiled rows' columns: the conv and the pool
  // stay apart, and the refusal says why.
  FusionPlan apart = partition(*g);
  EXPECT_EQ(apart.groups.size(), 2u);
  bool said = false;
  for (const auto& r : apart.rejected) said = said || r.reason.find("49 of 64 vector lanes") != std::string::npos;
  EXPECT_TRUE(said);
  // Allowed (rows_min_column_percent 0): the tiled rows, both column panels inside each row tile.
  loop::Schedule sched;
  sched.contraction.rows_min_column_percent = 0;
  FusionOptions o;
  o.schedule = sched;
  FusionPlan plan = partition(*g, o);
  ASSERT_EQ(plan.groups.size(), 1u);
  auto lg = loop::lower_group(plan.groups[0], c.name, sched);
  ASSERT_TRUE(lg.kernel) << lg.reason;
  const std::string nest = loop::print_kernel(*lg.kernel);
  EXPECT_NE(nest.find("tiled rows"), std::string::npos) << nest;
  EXPECT_EQ(nest.find("kiln_tr_jt"), std::string::npos) << nest;
  auto values = run_reference_values(*g, random_inputs(*g, 3, {}, false));
  auto got = testing::interpret_group(*lg.kernel, plan.groups[0], values);
  EXPECT_EQ(testing::within_max_magnitude(got[0], values.at(plan.groups[0].outputs[0]), 1e-5), "");
}

// Skipping a kernel position's products over the padding drops terms 0 · w, which is exact only
// for finite weights (0 · inf is NaN, as the reference computes it): with one infinite weight
// nothing is skipped.
TEST(LowerContraction, ImplicitConvSkipsPaddingOnlyWithFiniteWeights) {
  const auto cases = implicit_conv_cases();
  const auto it = std::find_if(cases.begin(), cases.end(), [](const ConvCase& k) { return k.name == "ic_dilated_aspp_skip"; });
  ASSERT_NE(it, cases.end());
  const ConvCase c = *it;
  for (bool finite : {true, false}) {
    auto g = make_conv_graph(c);
    if (!finite)
      for (Value* v : g->values())
        if (v->name() == "w") {
          Tensor t = v->constant();
          t.data<float>()[7] = std::numeric_limits<float>::infinity();
          v->set_constant(std::move(t));
        }
    FusionPlan plan = partition(*g);
    int convs = 0;
    for (const auto& grp : plan.groups) {
      if (!is_contraction_group(grp)) continue;
      ++convs;
      auto lg = loop::lower_group(grp, "ic");
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_EQ(nest.find("zero segments skipped per tile") != std::string::npos, finite) << nest;
    }
    EXPECT_EQ(convs, 1);
  }
}

// A conv group of `members` nodes (by default three: two prologue ops whose result the kernel
// computes, and the conv), lowered at default and strict numerics: `check_nest` sees each nest
// (strict: true), the interpreted outputs match the reference (bit-exact under strict, and under
// the default too when `fma_exact`), and both batches compile and run.
void check_conv_both_numerics(const ConvCase& c, bool fma_exact, const std::function<void(const std::string&, bool)>& check_nest,
                       const loop::Schedule& base = {}, size_t members = 3) {
  auto g = make_conv_graph(c);
  const TensorMap inputs = random_inputs(*g, 3, {}, false);
  auto values = run_reference_values(*g, inputs);
  KernelBatch fma, strict;
  loop::Schedule strict_sched = base;
  strict_sched.set_strict_numerics();
  int convs = 0;
  for (const auto& grp : partition(*g).groups) {
    if (!is_contraction_group(grp)) continue;
    ++convs;
    EXPECT_EQ(grp.nodes.size(), members);  // the prologue (or epilogue) is fused
    for (const loop::Schedule* sp : {static_cast<const loop::Schedule*>(nullptr), static_cast<const loop::Schedule*>(&strict_sched)}) {
      auto lg = sp ? loop::lower_group(grp, c.name + "_strict", *sp) : loop::lower_group(grp, c.name, base);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      check_nest(loop::print_kernel(*lg.kernel), sp != nullptr);
      auto got = testing::interpret_group(*lg.kernel, grp, values);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(sp || fma_exact ? compare_tensors(got[o], values.at(grp.outputs[o]))
                                  : testing::within_max_magnitude(got[o], values.at(grp.outputs[o]), 1e-5),
                  "");
      (sp ? strict : fma).add(std::move(*lg.kernel), grp, values);
    }
  }
  EXPECT_EQ(convs, 1);
  fma.check(c.name + "_fma", /*contract=*/true);
  strict.check(c.name + "_strict", /*contract=*/false);
}

// A 3-channel stem: the implicit form by default (K segments of the 3 channels per kernel
// position), output channels as rows under strict numerics (K in the reference's (ci, ky, kx)
// order, A the weights in place, B packed per tile from the phase planes), bit-exact there.
TEST(LowerContraction, StrictStemTakesChannelRows) {
  const ConvCase c{"stem", R"(  %c: f32[1,24,8,7] = Conv(%x, %w, %b) {kernel_shape=[7,7], pads=[3,3,3,3], strides=[2,2]} name="conv"
  %y: f32[1,24,8,7] = Relu(%c) name="relu"
)", "%x: f32[1,3,16,13]", "%y", {{"w", {24, 3, 7, 7}}, {"b", {24}}}};
  check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    EXPECT_EQ(nest.find("K in segments of 3") != std::string::npos, !strict) << nest;
    EXPECT_EQ(nest.find("kiln_xkoff") != std::string::npos, strict) << nest;
  }, {}, 2);
}

// A squeeze-excitation FC: a 1x1 conv over a 1x1 map (a matrix-vector product with the hard
// sigmoid after it) takes the implicit GEMM, one row of positions by panels of 32 output
// channels with the weights packed once, instead of a scalar dot product per output; strict
// numerics keep the direct nest (the reference's order), bit-exact.
TEST(LowerContraction, SqueezeExcitationFcIsTiled) {
  const ConvCase c{"se_fc", R"(  %c: f32[1,144,1,1] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="fc"
  %y: f32[1,144,1,1] = HardSigmoid(%c) name="gate"
)", "%x: f32[1,576,1,1]", "%y", {{"w", {144, 576, 1, 1}}, {"b", {144}}}};
  check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    EXPECT_EQ(nest.find("micro-kernel 1x32") != std::string::npos, !strict) << nest;
    EXPECT_EQ(nest.find("B prepacked") != std::string::npos, !strict) << nest;
    EXPECT_EQ(nest.find("micro-kernel") == std::string::npos, strict) << nest;
  }, {}, 2);
}

// A pointwise conv over many positions whose input the kernel computes (a fused prologue): the
// input is staged once into a plain buffer and read in place as B of the channel-rows GEMM — not
// packed per tile through its per-element value. Both numerics modes; both bit-exact.
TEST(LowerContraction, StagedPointwiseConvMatchesReference) {
  const ConvCase c{"staged_pw", R"(  %s: f32[2,16,24,24] = Sigmoid(%x) name="sig"
  %m: f32[2,16,24,24] = Mul(%x, %s) name="silu"
  %y: f32[2,40,24,24] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[2,16,24,24]", "%y", {{"w", {40, 16, 1, 1}}, {"b", {40}}}};
  check_conv_both_numerics(c, /*fma_exact=*/true, [](const std::string& nest, bool) {
    EXPECT_NE(nest.find("kiln_xph"), std::string::npos) << nest;       // staged once
    EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << nest;     // no panel packed per tile
    EXPECT_EQ(nest.find("K in segments"), std::string::npos) << nest;  // output channels as rows
  });
}

// A 3x3 conv whose input the kernel computes (a skip connection's Concat with an upsampled
// branch, as in a U-Net decoder), under strict numerics (the im2col form): the input is staged
// once per call into a plain copy (kiln_xin) and the panels are packed from it, bit-exact; under
// the default numerics the implicit GEMM stages it into phase planes.
TEST(LowerContraction, ComputedInputOfWindowedConvIsStagedOnce) {
  const ConvCase c{"staged_3x3", R"(  %u: f32[1,8,6,6] = Relu(%a) name="relu"
  %cat: f32[1,20,6,6] = Concat(%u, %s) {axis=1} name="cat"
  %y: f32[1,16,6,6] = Conv(%cat, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%a: f32[1,8,6,6], %s: f32[1,12,6,6]", "%y", {{"w", {16, 20, 3, 3}}, {"b", {16}}}};
  check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    EXPECT_NE(nest.find(strict ? "kiln_xin" : "kiln_xph"), std::string::npos) << nest;  // staged once per call
  });
}

// A pointwise conv whose input channels lie pages apart (2070 positions each) with K blocks of 128
// rows: its in-place B is copied per tile into a contiguous panel (ContractionTile::copy_b_min_k),
// the last column tile's 22 columns padded with zeros; both numerics modes match the reference.
// With copy_b_min_k above K it is read in place.
TEST(LowerContraction, FarApartInPlaceBIsCopiedPerTile) {
  const ConvCase c{"copy_b", R"(  %s: f32[1,128,46,45] = Sigmoid(%x) name="sig"
  %m: f32[1,128,46,45] = Mul(%x, %s) name="silu"
  %y: f32[1,24,46,45] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,128,46,45]", "%y", {{"w", {24, 128, 1, 1}}, {"b", {24}}}};
  check_conv_both_numerics(c, /*fma_exact=*/true, [](const std::string& nest, bool) {
    EXPECT_NE(nest.find("B copied per tile"), std::string::npos) << nest;
    EXPECT_NE(nest.find("kiln_pz"), std::string::npos) << nest;  // the rest tile's zero columns
  });
  loop::Schedule sched;
  sched.contraction.copy_b_min_k = 256;
  auto g = make_conv_graph(c);
  for (const auto& grp : partition(*g).groups)
    if (is_contraction_group(grp)) {
      auto lg = loop::lower_group(grp, "c", sched);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_EQ(nest.find("B copied per tile"), std::string::npos) << nest;
      EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << nest;
      // B in place: the last column tile (2070 mod 32 = 22 columns) calls the micro-kernel with
      // its width as a constant (a specialisation), never the tile's run-time width.
      EXPECT_NE(nest.find("kiln_mk_f32(8, 22,"), std::string::npos) << nest;
      EXPECT_EQ(nest.find(", kiln_nc, kiln_kc"), std::string::npos) << nest;
    }
}

// A windowed conv over many positions with many output channels takes the output channels as
// rows (window_channel_rows), its computed input staged once into phase planes; K stays in the
// reference's order, so --strict-fp keeps this form and is bit-identical to the reference.
TEST(LowerContraction, WindowedConvOverManyPositionsHasChannelRows) {
  const ConvCase c{"rows_3x3", R"(  %s: f32[1,20,15,13] = Sigmoid(%x) name="sig"
  %m: f32[1,20,15,13] = Mul(%x, %s) name="silu"
  %y: f32[1,72,15,13] = Conv(%m, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,20,15,13]", "%y", {{"w", {72, 20, 3, 3}}, {"b", {72}}}};
  // Its planes (20 KiB) are below the default budget: as if they exceeded it.
  loop::Schedule over;
  over.contraction.window_channel_rows_plane_bytes = 16 * 1024;
  check_conv_both_numerics(
      c, /*fma_exact=*/false,
      [](const std::string& nest, bool) {
        EXPECT_NE(nest.find("kiln_xkoff"), std::string::npos) << nest;      // B's rows from the staged planes
        EXPECT_NE(nest.find("kiln_xph"), std::string::npos) << nest;        // staged once per call
        EXPECT_EQ(nest.find("K in segments"), std::string::npos) << nest;  // not the implicit form
      },
      over);
  // Below either threshold (planes within the budget, or fewer output channels): the implicit
  // form (positions as rows).
  for (const auto& [plane_bytes, cout] : std::vector<std::pair<int64_t, int64_t>>{{int64_t(1) << 20, 64}, {0, 128}}) {
    loop::Schedule sched;
    sched.contraction.window_channel_rows_plane_bytes = plane_bytes;
    sched.contraction.window_channel_rows_min_cout = cout;
    auto g = make_conv_graph(c);
    for (const auto& grp : partition(*g).groups)
      if (is_contraction_group(grp)) {
        auto lg = loop::lower_group(grp, "r", sched);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        EXPECT_NE(loop::print_kernel(*lg.kernel).find("K in segments"), std::string::npos) << plane_bytes << " " << cout;
      }
  }
}

// Under strict numerics (reorder_sums false) convs keep the reference's K order: im2col.
TEST(LowerContraction, ImplicitConvNotUnderStrictNumerics) {
  loop::Schedule strict;
  strict.reorder_sums = false;
  auto g = make_conv_graph(implicit_conv_cases()[0]);
  for (const auto& grp : partition(*g).groups)
    if (is_contraction_group(grp)) {
      auto lg = loop::lower_group(grp, "s", strict);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      EXPECT_EQ(loop::print_kernel(*lg.kernel).find("K in segments"), std::string::npos);
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
