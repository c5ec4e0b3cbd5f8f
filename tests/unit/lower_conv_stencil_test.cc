// Grouped and depthwise convs through the stencil nest (src/loop/lower_conv_stencil.cc): every
// stride, dilation, kernel size and padding (including padding wider than the input, where some
// phase rows have no interior), channel multipliers, group widths below a micro-kernel tile, a
// fused prologue and transcendental epilogues. Each case runs through the loop interpreter and
// (all cases in one module) through emit_c + JitModule, in both numerics modes: the default
// within the contract, --strict-fp element for element against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "codegen/c/c_emitter.h"
#include "ir/parser.h"
#include "kernels/depthwise.h"
#include "kernels/microkernel.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"
#include "support/error.h"

namespace kiln {
namespace {

using testing::KernelBatch;
using testing::random_inputs;

struct StencilCase {
  std::string name, body, inputs, outputs;
  std::vector<std::pair<std::string, Shape>> consts;
};

std::vector<StencilCase> stencil_cases() {
  return {
      {"dw_3x3_s1_bias_clip", R"(  %c: f32[2,6,7,9] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], group=6} name="conv"
  %y: f32[2,6,7,9] = Clip(%c, %lo, %hi) name="clip"
)", "%x: f32[2,6,7,9]", "%y", {{"w", {6, 1, 3, 3}}, {"b", {6}}, {"lo", {}}, {"hi", {}}}},
      {"dw_3x3_s2_asym_pad", R"(  %y: f32[1,5,4,3] = Conv(%x, %w) {kernel_shape=[3,3], pads=[0,1,1,0], strides=[2,2], group=5} name="conv"
)", "%x: f32[1,5,8,7]", "%y", {{"w", {5, 1, 3, 3}}}},
      {"dw_5x5_s2_dilated", R"(  %y: f32[1,4,3,4] = Conv(%x, %w, %b) {kernel_shape=[5,5], pads=[4,2,4,2], strides=[2,2], dilations=[2,1], group=4} name="conv"
)", "%x: f32[1,4,6,7]", "%y", {{"w", {4, 1, 5, 5}}, {"b", {4}}}},
      {"dw_7x7_convnext", R"(  %y: f32[1,8,5,5] = Conv(%x, %w, %b) {kernel_shape=[7,7], pads=[3,3,3,3], group=8} name="conv"
)", "%x: f32[1,8,5,5]", "%y", {{"w", {8, 1, 7, 7}}, {"b", {8}}}},
      {"dw_pad_wider_than_input", R"(  %y: f32[1,3,5,6] = Conv(%x, %w) {kernel_shape=[3,3], pads=[3,3,3,4], strides=[1,1], group=3} name="conv"
)", "%x: f32[1,3,1,1]", "%y", {{"w", {3, 1, 3, 3}}}},
      {"dw_stride3_rect", R"(  %y: f32[1,2,3,2] = Conv(%x, %w) {kernel_shape=[2,4], pads=[1,0,1,1], strides=[3,2], group=2} name="conv"
)", "%x: f32[1,2,8,5]", "%y", {{"w", {2, 1, 2, 4}}}},
      {"dw_multiplier_2", R"(  %y: f32[1,8,4,4] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], group=4} name="conv"
)", "%x: f32[1,4,4,4]", "%y", {{"w", {8, 1, 3, 3}}, {"b", {8}}}},
      {"grouped_width_4", R"(  %c: f32[2,12,5,5] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], group=3} name="conv"
  %y: f32[2,12,5,5] = Relu(%c) name="relu"
)", "%x: f32[2,12,5,5]", "%y", {{"w", {12, 4, 3, 3}}, {"b", {12}}}},
      {"grouped_width_8_regnet", R"(  %c: f32[1,16,3,3] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=2} name="conv"
  %y: f32[1,16,3,3] = Relu(%c) name="relu"
)", "%x: f32[1,16,6,5]", "%y", {{"w", {16, 8, 3, 3}}, {"b", {16}}}},
      // 16+ input channels per group and whole vectors of output channels: each group an
      // implicit GEMM through the segmented micro-kernel under the default numerics
      // (Schedule::stencil_group_gemm_min_channels); 16 and 32 output channels per group, two
      // images, stride 2 with asymmetric padding and a residual.
      {"groupgemm_16x16_relu", R"(  %c: f32[1,32,7,7] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], group=2} name="conv"
  %y: f32[1,32,7,7] = Relu(%c) name="relu"
)", "%x: f32[1,32,7,7]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}},
      {"groupgemm_16x32_s2_residual", R"(  %c: f32[2,64,4,2] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,0,1,1], strides=[2,2], group=2} name="conv"
  %y: f32[2,64,4,2] = Add(%c, %r) name="res"
)", "%x: f32[2,32,8,5], %r: f32[2,64,4,2]", "%y", {{"w", {64, 16, 3, 3}}, {"b", {64}}}},
      {"grouped_pointwise", R"(  %y: f32[1,6,3,4] = Conv(%x, %w) {kernel_shape=[1,1], group=2} name="conv"
)", "%x: f32[1,8,3,4]", "%y", {{"w", {6, 4, 1, 1}}}},
      {"dw_prologue_silu_epilogue", R"(  %a: f32[1,6,6,5] = Add(%x, %r) name="res"
  %c: f32[1,6,3,3] = Conv(%a, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=6} name="conv"
  %s: f32[1,6,3,3] = Sigmoid(%c) name="sig"
  %y: f32[1,6,3,3] = Mul(%c, %s) name="silu"
)", "%x: f32[1,6,6,5], %r: f32[1,6,6,5]", "%y", {{"w", {6, 1, 3, 3}}, {"b", {6}}}},
      // Rows that 16-lane targets run as whole vectors (28 -> 32 lanes, stores masked), with an
      // epilogue, and with a residual read along the row (which keeps the row's own width).
      {"dw_3x3_rows_28_silu", R"(  %c: f32[2,5,3,28] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], group=5} name="conv"
  %s: f32[2,5,3,28] = Sigmoid(%c) name="sig"
  %y: f32[2,5,3,28] = Mul(%c, %s) name="silu"
)", "%x: f32[2,5,3,28]", "%y", {{"w", {5, 1, 3, 3}}, {"b", {5}}}},
      // A costly prologue (sigmoid) before a stride-2 conv whose phases read every input element:
      // computed once per element into a plane (kiln_xplane), or without a plane budget one
      // computed row per input row (kiln_xline).
      {"dw_3x3_s2_sigmoid_prologue", R"(  %s: f32[1,4,9,10] = Sigmoid(%x) name="sig"
  %y: f32[1,4,5,5] = Conv(%s, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=4} name="conv"
)", "%x: f32[1,4,9,10]", "%y", {{"w", {4, 1, 3, 3}}, {"b", {4}}}},
      // 16 channels per vector on 16-lane targets (rows narrower than 16, channels a multiple of
      // 16): a 5x5 window over 7x7 with SiLU; stride 2 with asymmetric padding, a residual and
      // two images.
      {"dw_5x5_7x7_blocks_silu", R"(  %c: f32[1,32,7,7] = Conv(%x, %w, %b) {kernel_shape=[5,5], pads=[2,2,2,2], group=32} name="conv"
  %s: f32[1,32,7,7] = Sigmoid(%c) name="sig"
  %y: f32[1,32,7,7] = Mul(%c, %s) name="silu"
)", "%x: f32[1,32,7,7]", "%y", {{"w", {32, 1, 5, 5}}, {"b", {32}}}},
      {"dw_3x3_s2_blocks_residual", R"(  %c: f32[2,16,5,4] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,0,1,1], strides=[2,2], group=16} name="conv"
  %y: f32[2,16,5,4] = Add(%c, %r) name="res"
)", "%x: f32[2,16,9,8], %r: f32[2,16,5,4]", "%y", {{"w", {16, 1, 3, 3}}, {"b", {16}}}},
      // Two images, stride 1: each image's rows transposed into the planes, its outputs out of the
      // tile (the copies' offsets per image), and a dilated window's taps from the offset table.
      {"dw_3x3_two_images_blocks", R"(  %c: f32[2,16,6,5] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[2,2,2,2], dilations=[2,2], group=16} name="conv"
  %y: f32[2,16,6,5] = Add(%c, %r) name="res"
)", "%x: f32[2,16,6,5], %r: f32[2,16,6,5]", "%y", {{"w", {16, 1, 3, 3}}, {"b", {16}}}},
      {"dw_5x5_rows_14_residual", R"(  %c: f32[1,3,4,14] = Conv(%x, %w) {kernel_shape=[5,5], pads=[2,2,2,2], group=3} name="conv"
  %y: f32[1,3,4,14] = Add(%c, %r) name="res"
)", "%x: f32[1,3,4,14], %r: f32[1,3,4,14]", "%y", {{"w", {3, 1, 5, 5}}}},
  };
}

// Clip bounds are the scalars lo = -0.5 and hi = 0.5, so that both bounds are hit.
std::unique_ptr<Graph> make_graph(const StencilCase& c) {
  return testing::graph_with_constants(c.inputs, c.outputs, c.body, c.consts, 5, 0.4f,
                                       [](const std::string& name) { return name == "lo" ? "-0.5" : "0.5"; });
}

// Strided depthwise convs too (by default they take the untiled nest: StridedDepthwiseTakesTheUntiledNest).
loop::Schedule stencil_schedule() {
  loop::Schedule s;
  s.stencil_strided_depthwise = 1;
  return s;
}

loop::Schedule strict_schedule() {
  loop::Schedule s = stencil_schedule();
  s.set_strict_numerics();
  return s;
}

TEST(LowerConvStencil, MatchesReference) {
  loop::Schedule par = stencil_schedule();
  par.parallel_min_work = 1;  // the parallel loop over (image, group) in the interpreter too
  KernelBatch fma, strict;
  for (const StencilCase& c : stencil_cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = partition(*g);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    int convs = 0;
    for (const auto& grp : plan.groups) {
      if (grp.kind != GroupKind::Contraction) continue;
      ++convs;
      // The whole case is one kernel: prologue and epilogue fused into the stencil.
      EXPECT_EQ(grp.nodes.size(), g->nodes().size());
      // Modes 3 and 4: every depthwise case sums its window in the epilogue's row loop (no
      // accumulator plane), default and strict numerics.
      loop::Schedule direct = stencil_schedule(), direct_strict = strict_schedule();
      direct.stencil_direct_min_width = direct_strict.stencil_direct_min_width = 1;
      direct.stencil_kernel_min_width = direct_strict.stencil_kernel_min_width = 0;
      // Modes 0-4 have 16 lanes (the default): rows of 12+ positions in whole vectors, narrow rows
      // of 16k channels in channel blocks. Modes 5 and 6 an 8-lane target, which takes neither.
      loop::Schedule wide = direct, wide_strict = direct_strict;
      wide.vector_width = wide_strict.vector_width = 8;
      // Modes 7 and 8 (16 and 8 lanes): every stride-1 depthwise window through the depthwise
      // micro-kernel (rows of any width, 3x3 too); mode 9 the same schedule under strict numerics,
      // which never takes it (its sums are not in the reference's order).
      loop::Schedule kernel = stencil_schedule();
      kernel.stencil_kernel_min_width = 1;
      kernel.stencil_direct_min_width = int64_t(1) << 40;
      loop::Schedule kernel8 = kernel, kernel_strict = kernel;
      kernel8.vector_width = 8;
      kernel_strict.set_strict_numerics();
      for (int mode = 0; mode < 10; ++mode) {
        loop::Schedule sched = mode == 0 ? par : mode == 1 ? stencil_schedule() : mode == 2 ? strict_schedule() : mode == 3 ? direct
                                     : mode == 4 ? direct_strict : mode == 5 ? wide : mode == 6 ? wide_strict
                                     : mode == 7 ? kernel : mode == 8 ? kernel8 : kernel_strict;
        // A costly computed input of a strided conv is staged a plane at a time (modes 0-4) or,
        // with no plane budget, a row at a time (modes 5-9).
        if (mode >= 5) sched.stage_plane_bytes = 0;
        auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(mode), sched);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        const std::string nest = loop::print_kernel(*lg.kernel);
        const bool blocks = (mode < 5 || mode == 7 || mode == 9) && c.name.find("_blocks") != std::string::npos;
        EXPECT_NE(nest.find(blocks ? "kiln_dbp" : "kiln_dph"), std::string::npos) << "not the stencil nest:\n" << nest;
        const bool costly_strided = c.name == "dw_3x3_s2_sigmoid_prologue";
        EXPECT_EQ(nest.find("kiln_xplane") != std::string::npos, costly_strided && mode < 5) << nest;
        EXPECT_EQ(nest.find("kiln_xline") != std::string::npos, costly_strided && mode >= 5) << nest;
        const bool depthwise = c.name.rfind("dw_", 0) == 0 && c.name != "dw_multiplier_2";
        if (mode >= 3 && mode <= 6 && depthwise) EXPECT_EQ(nest.find("kiln_dacc"), std::string::npos) << "an accumulator plane:\n" << nest;
        // One input channel per output channel's plane, stride and dilation 1 (not in channel blocks).
        static const std::set<std::string> stride1 = {"dw_3x3_s1_bias_clip", "dw_7x7_convnext", "dw_pad_wider_than_input",
                                                      "dw_multiplier_2", "dw_3x3_rows_28_silu", "dw_5x5_rows_14_residual",
                                                      "dw_5x5_7x7_blocks_silu"};
        // By default (modes 0 and 1) only windows of more than 9 taps over rows of 12+ take it.
        const bool takes_kernel = ((mode == 7 || mode == 8) && stride1.count(c.name) && !blocks) ||
                                  (mode <= 1 && c.name == "dw_5x5_rows_14_residual");
        EXPECT_EQ(nest.find(kernels::kDepthwiseF32) != std::string::npos, takes_kernel) << "mode " << mode << ":\n" << nest;
        // Groups of several channels sum every output channel of a group at once through the
        // grouped-conv micro-kernel under the default numerics, never strict; so does a channel
        // multiplier where neither the direct sum (modes 3 and 5) nor the depthwise micro-kernel
        // (modes 7 and 8) takes it.
        const bool strict_mode = mode == 2 || mode == 4 || mode == 6 || mode == 9;
        const bool several = c.name.rfind("grouped_", 0) == 0 || (c.name == "dw_multiplier_2" && mode <= 1);
        EXPECT_EQ(nest.find(kernels::kGroupedConvF32) != std::string::npos, several && !strict_mode)
            << "mode " << mode << ":\n" << nest;
        const bool gemm = c.name.rfind("groupgemm_", 0) == 0 && !strict_mode;
        EXPECT_EQ(nest.find(kernels::kMicroKernelSegF32) != std::string::npos, gemm) << "mode " << mode << ":\n" << nest;
        auto got = testing::interpret_group(*lg.kernel, grp, values);
        for (size_t o = 0; o < got.size(); ++o)
          // The group GEMM sums K as (kernel position, input channel): within the contract.
          EXPECT_EQ(gemm ? testing::within_max_magnitude(got[o], values.at(grp.outputs[o]))
                         : testing::compare_tensors(got[o], values.at(grp.outputs[o])),
                    "")
              << "interpreted, output " << o;
        if (mode == 1 || mode == 3 || mode == 5 || mode == 7 || mode == 8) fma.add(std::move(*lg.kernel), grp, values);
        else if (mode == 2 || mode == 4 || mode == 6 || mode == 9) strict.add(std::move(*lg.kernel), grp, values);
      }
    }
    EXPECT_EQ(convs, 1);
  }
  fma.check("stencil_fma", /*contract=*/true);
  strict.check("stencil_strict", /*contract=*/false);
}

// The case's conv group lowered under `sched`: its printed nest and LoopKernel::vector_bits.
std::pair<std::string, int> lowered_conv(const StencilCase& c, const loop::Schedule& sched) {
  auto g = make_graph(c);
  for (const auto& grp : partition(*g).groups)
    if (grp.kind == GroupKind::Contraction) {
      auto lg = loop::lower_group(grp, "k", sched);
      EXPECT_TRUE(lg.kernel) << lg.reason;
      if (lg.kernel) return {loop::print_kernel(*lg.kernel), lg.kernel->vector_bits};
    }
  ADD_FAILURE() << "no conv kernel for " << c.name;
  return {std::string(), -1};
}

// On a 16-lane target a row filling at least three quarters of its vectors runs in whole ones
// (the loop over x padded, the stores guarded, their values computed before the guard so that no
// load is masked) and the kernel asks for 512-bit vectors; a row read along by a residual keeps
// its width (the extra lanes would read past the buffer), narrow rows and 8-lane targets are
// left alone, and so is every row under stencil_whole_vectors = 0.
TEST(LowerConvStencil, WholeVectorRows) {
  auto lower = [](const std::string& name, int width, int whole) {
    loop::Schedule s;
    s.vector_width = width;
    s.stencil_whole_vectors = whole;
    for (const StencilCase& c : stencil_cases())
      if (c.name == name) return lowered_conv(c, s);
    ADD_FAILURE() << "no case " << name;
    return std::make_pair(std::string(), -1);
  };
  auto [silu, silu_bits] = lower("dw_3x3_rows_28_silu", 16, 1);
  EXPECT_EQ(silu_bits, 512);
  EXPECT_NE(silu.find("for kiln_dx in [0, 32)"), std::string::npos) << silu;
  EXPECT_NE(silu.find("if (kiln_dx < 28)"), std::string::npos) << silu;
  auto [res, res_bits] = lower("dw_5x5_rows_14_residual", 16, 1);
  EXPECT_EQ(res_bits, 512);
  EXPECT_NE(res.find("for kiln_dx in [0, 14)"), std::string::npos) << res;
  EXPECT_EQ(res.find("if ("), std::string::npos) << res;
  auto [narrow, narrow_bits] = lower("dw_3x3_s1_bias_clip", 16, 1);  // rows of 9 in 16 lanes
  EXPECT_EQ(narrow_bits, 0);
  EXPECT_EQ(narrow.find("if ("), std::string::npos) << narrow;
  for (auto [width, whole] : {std::pair{8, 1}, std::pair{16, 0}}) {
    auto [nest, bits] = lower("dw_3x3_rows_28_silu", width, whole);
    EXPECT_EQ(bits, 0);
    EXPECT_NE(nest.find("for kiln_dx in [0, 28)"), std::string::npos) << nest;
  }
}

// A depthwise conv over rows narrower than stencil_channel_blocks_below with a multiple of 16
// channels runs 16 channels per vector on a 16-lane target (kiln_dbp: planes interleaved by
// channel), asking for 512-bit vectors; other channel counts, 8-lane targets and
// stencil_channel_blocks_below = 0 keep the plane per channel.
TEST(LowerConvStencil, ChannelBlocks) {
  auto nest_of = [](const std::string& body, const std::string& inputs, const std::vector<std::pair<std::string, Shape>>& consts,
                    const loop::Schedule& sched) { return lowered_conv({"c", body, inputs, "%y", consts}, sched); };
  auto dw = [](int c) {
    return cat("  %y: f32[1,", c, ",7,7] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1], group=", c, "} name=\"conv\"\n");
  };
  auto in = [](int c) { return cat("%x: f32[1,", c, ",7,7]"); };
  loop::Schedule wide;
  wide.vector_width = 16;
  auto [blocked, bits] = nest_of(dw(48), in(48), {{"w", {48, 1, 3, 3}}}, wide);
  EXPECT_NE(blocked.find("kiln_dbp"), std::string::npos) << blocked;
  EXPECT_NE(blocked.find("for kiln_dt in [0, 3)"), std::string::npos) << blocked;  // 3 blocks of 16
  EXPECT_EQ(bits, 512);
  // The window sums through the blocked micro-kernel; the weights, the input's rows and the
  // output go through transposing copies (one for the weights, one per input row, one for the
  // output), no element-wise gather or scatter of the channels.
  EXPECT_NE(blocked.find(kernels::kDepthwiseBlockedF32), std::string::npos) << blocked;
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(blocked, kernels::kTransposeF32), 3u) << blocked;
  EXPECT_EQ(count(blocked, "] = x["), 0u) << blocked;
  // --strict-fp spells the sums out (the reference's order, no fused multiply-adds); the copies stay.
  loop::Schedule strict = wide;
  strict.set_strict_numerics();
  const std::string spelled = nest_of(dw(48), in(48), {{"w", {48, 1, 3, 3}}}, strict).first;
  EXPECT_EQ(spelled.find(kernels::kDepthwiseBlockedF32), std::string::npos) << spelled;
  EXPECT_EQ(count(spelled, kernels::kTransposeF32), 3u) << spelled;
  // A stride-2 window reads every other input column: the rows are gathered element by element.
  loop::Schedule strided = wide;
  strided.stencil_strided_depthwise = 1;  // (a 3x3 one of a kernel input takes the untiled nest otherwise)
  const std::string s2 = nest_of("  %y: f32[1,32,4,4] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=32} name=\"conv\"\n",
                                 "%x: f32[1,32,8,8]", {{"w", {32, 1, 3, 3}}}, strided).first;
  EXPECT_EQ(count(s2, kernels::kTransposeF32), 2u) << s2;
  EXPECT_NE(s2.find("] = x["), std::string::npos) << s2;
  EXPECT_NE(nest_of(dw(24), in(24), {{"w", {24, 1, 3, 3}}}, wide).first.find("kiln_dph"), std::string::npos);
  loop::Schedule off = wide, narrow;
  off.stencil_channel_blocks_below = 0;
  narrow.vector_width = 8;
  EXPECT_NE(nest_of(dw(48), in(48), {{"w", {48, 1, 3, 3}}}, off).first.find("kiln_dph"), std::string::npos);
  EXPECT_NE(nest_of(dw(48), in(48), {{"w", {48, 1, 3, 3}}}, narrow).first.find("kiln_dph"), std::string::npos);
}

// Depthwise and groups of up to Schedule::stencil_max_group_width channels take the stencil, wider
// groups the tiled GEMM per group; a group whose staged planes exceed Schedule::stencil_bytes the
// untiled nest.
TEST(LowerConvStencil, ChosenByGroupWidthAndBudget) {
  auto nest_of = [](const std::string& body, const std::string& inputs, const std::vector<std::pair<std::string, Shape>>& consts,
                    const loop::Schedule& sched) { return lowered_conv({"c", body, inputs, "%y", consts}, sched).first; };
  const std::string dw = R"(  %y: f32[1,4,16,16] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1], group=4} name="conv"
)";
  EXPECT_NE(nest_of(dw, "%x: f32[1,4,16,16]", {{"w", {4, 1, 3, 3}}}, {}).find("kiln_dph"), std::string::npos);
  loop::Schedule tight;
  tight.stencil_bytes = 1024;
  EXPECT_EQ(nest_of(dw, "%x: f32[1,4,16,16]", {{"w", {4, 1, 3, 3}}}, tight).find("kiln_dph"), std::string::npos);
  const std::string wide = R"(  %y: f32[1,144,6,6] = Conv(%x, %w) {kernel_shape=[1,1], group=2} name="conv"
)";
  const std::string nest = nest_of(wide, "%x: f32[1,144,6,6]", {{"w", {144, 72, 1, 1}}}, {});
  EXPECT_EQ(nest.find("kiln_dph"), std::string::npos) << nest;
  EXPECT_NE(nest.find(kernels::kMicroKernelF32), std::string::npos) << nest;
}

// A strided depthwise conv of a kernel input with a window of 3x3 at most takes the untiled nest
// (its window unrolled, the input read in place), unless its epilogue is transcendental (that nest would not vectorise it)
// or its input is computed in the kernel (evaluated per tap there); stride 1 keeps the stencil.
// The untiled nests match the reference, compiled.
TEST(LowerConvStencil, StridedDepthwiseTakesTheUntiledNest) {
  KernelBatch batch;
  for (const StencilCase& c : stencil_cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : partition(*g).groups) {
      if (grp.kind != GroupKind::Contraction) continue;
      const Node* conv = nullptr;
      for (const Node* n : grp.nodes)
        if (n->op_type() == "Conv") conv = n;
      ASSERT_NE(conv, nullptr);
      const Shape& ws = conv->input(1)->shape();
      const bool depthwise = ws[1] == 1 && ws[0] == conv->input(0)->shape()[1];
      const auto strides = conv->attr_ints("strides");
      const bool strided = std::any_of(strides.begin(), strides.end(), [](int64_t s) { return s > 1; });
      const bool small_window = ws[2] <= 3 && ws[3] <= 3;  // 3x3 at most (lower_conv_stencil.cc)
      // (Both cases with a computed input: a transcendental epilogue, a sigmoid prologue.)
      const bool untiled = depthwise && strided && small_window && c.name != "dw_prologue_silu_epilogue" &&
                           c.name != "dw_3x3_s2_sigmoid_prologue";
      auto lg = loop::lower_group(grp, c.name, loop::Schedule{});
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      const bool stencil = nest.find("kiln_dph") != std::string::npos || nest.find("kiln_dbp") != std::string::npos;
      EXPECT_EQ(!stencil, untiled) << nest;
      if (untiled) batch.add(std::move(*lg.kernel), grp, values);
    }
  }
  EXPECT_GT(batch.size(), 0u);
  batch.check("strided_depthwise_untiled", /*contract=*/true);
}

// Stencil kernels are compiled without GCC's tree PRE (LoopKernel::no_tree_pre): it carried a
// row loop's sliding-window loads across iterations and GCC 12 then left the loop scalar
// (ConvNeXt's first depthwise conv, whose rows keep their width: 7.0 ms, 0.9 with PRE off).
TEST(LowerConvStencil, CompiledWithoutTreePre) {
  loop::Schedule s;
  s.vector_width = 16;
  for (const StencilCase& c : stencil_cases()) {
    if (c.name != "dw_5x5_rows_14_residual") continue;
    auto g = make_graph(c);
    for (const auto& grp : partition(*g).groups) {
      if (grp.kind != GroupKind::Contraction) continue;
      auto lg = loop::lower_group(grp, "k", s);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      EXPECT_TRUE(lg.kernel->no_tree_pre);
      const std::string src = codegen::emit_c({*lg.kernel});
      EXPECT_NE(src.find("KILN_NO_TREE_PRE void k("), std::string::npos) << src.substr(src.find("void k("));
      EXPECT_NE(src.find("#define KILN_NO_TREE_PRE __attribute__((optimize(\"no-tree-pre\")))"), std::string::npos);
      return;
    }
  }
  ADD_FAILURE() << "no stencil kernel";
}

}  // namespace
}  // namespace kiln
