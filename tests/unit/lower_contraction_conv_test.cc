// Convs through the contraction lowering (lower_contraction_implicit.cc and the tiled nest of
// lower_contraction_tiled.cc): the implicit GEMM over phase planes (positions x output channels,
// K in segments per kernel position, the weights packed), its channel-rows form, the skips of
// kernel positions over padding, stems, squeeze-excitation FCs, staged and far-apart inputs, and
// the im2col form kept under strict numerics. Each case runs through the loop interpreter against
// the reference, and all cases of a test in one module through emit_c + JitModule.
// (Split from lower_contraction_test.cc, which keeps the MatMul, nest-shape and model tests.)
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using testing::compare_tensors;
using testing::KernelBatch;
using testing::random_inputs;

bool is_contraction_group(const FusionGroup& grp) { return grp.kind == GroupKind::Contraction; }

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
      // A video stem (R(2+1)D's): 3 input channels, (1, 7, 7) stride (1, 2, 2) over each frame
      // (its 3-term segments as a 2-D stem's; it took the im2col form at 40 GFLOP/s).
      {"ic_3d_stem_1x7x7", R"(  %y: f32[1,24,3,5,5] = Conv(%x, %w, %b) {kernel_shape=[1,7,7], pads=[0,3,3,0,3,3], strides=[1,2,2]} name="conv"
)", "%x: f32[1,3,3,10,9]", "%y", {{"w", {24, 3, 1, 7, 7}}, {"b", {24}}}},
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
      // Patch embeddings (kernel = stride, no padding): A read in place from the input, K in
      // segments of a kernel row's kw consecutive floats; 2 images, the input's last 2 columns
      // outside every window. Bias and ReLU.
      {"ic_patch_4x4", R"(  %c: f32[2,40,4,3] = Conv(%x, %w, %b) {kernel_shape=[4,4], strides=[4,4]} name="conv"
  %y: f32[2,40,4,3] = Relu(%c) name="relu"
)", "%x: f32[2,3,16,14]", "%y", {{"w", {40, 3, 4, 4}}, {"b", {40}}}},
      // CLIP's 32x32 patches: 1,024 phase planes, whose staging the lowering refused (the conv
      // ran as a library kernel).
      {"ic_patch_32x32", R"(  %y: f32[1,16,2,1] = Conv(%x, %w) {kernel_shape=[32,32], strides=[32,32]} name="conv"
)", "%x: f32[1,3,64,40]", "%y", {{"w", {16, 3, 32, 32}}}},
      // Channels-innermost planes (the default) of 256 channels: a position's channels are 1 KiB,
      // so positions lie 272 floats apart (PhasePlanes::cstride); 128 output channels, two whole
      // 64-wide panels: the register tile widens to 64 columns (widen_panels). Bias and ReLU.
      {"ic_inner_pad_wide", R"(  %c: f32[1,128,4,5] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,128,4,5] = Relu(%c) name="relu"
)", "%x: f32[1,256,4,5]", "%y", {{"w", {128, 256, 3, 3}}, {"b", {128}}}},
      // 8-wide lines: fitted to them, a 64-wide tile would be 4 rows; the 32-wide one takes 8.
      {"ic_inner_8_wide", R"(  %y: f32[1,128,8,8] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,32,8,8]", "%y", {{"w", {128, 32, 3, 3}}}},
      // 96 output channels are one and a half 64-wide panels: the tile stays 32 wide.
      {"ic_inner_96_out", R"(  %y: f32[1,96,6,6] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,32,6,6]", "%y", {{"w", {96, 32, 3, 3}}}},
      // Computed inputs whose source holds the channels innermost (a channels-last tensor
      // transposed to NCHW, as ConvNeXt's LayerNorm before its downsampling conv): staged
      // channels innermost position by position, the channels vectorised; stride 2 (four phase
      // planes) and a padded stride-1 3x3 conv.
      {"ic_channels_last_s2", R"(  %t: f32[1,24,6,8] = Transpose(%x) {perm=[0,3,1,2]} name="to_nchw"
  %r: f32[1,24,6,8] = Relu(%t) name="relu"
  %y: f32[1,40,3,4] = Conv(%r, %w) {kernel_shape=[2,2], strides=[2,2]} name="conv"
)", "%x: f32[1,6,8,24]", "%y", {{"w", {40, 24, 2, 2}}}},
      {"ic_channels_last_3x3", R"(  %t: f32[1,20,5,7] = Transpose(%x) {perm=[0,3,1,2]} name="to_nchw"
  %r: f32[1,20,5,7] = Relu(%t) name="relu"
  %y: f32[1,32,5,7] = Conv(%r, %w) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,5,7,20]", "%y", {{"w", {32, 20, 3, 3}}}},
      // A computed input (staged once into a plain copy) and a rectangular 2x5 patch.
      {"ic_patch_prologue_2x5", R"(  %s: f32[1,5,6,20] = Sigmoid(%x) name="sig"
  %y: f32[1,36,3,4] = Conv(%s, %w) {kernel_shape=[2,5], strides=[2,5]} name="conv"
)", "%x: f32[1,5,6,20]", "%y", {{"w", {36, 5, 2, 5}}}},
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
  small.contraction.implicit_channels_inner = 0;  // channel planes
  // The same with the phase planes staged channels innermost (transposing copies), as by default.
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
            "ic_7x1_flat",      "ic_inner_pad_wide", "ic_inner_96_out", "ic_inner_8_wide"};
        // A temporal (3, 1, 1) conv of a kernel input reads it in place with row tiles fitted to
        // its lines (the default schedule): no planes, the kernel rows over padding skipped.
        const bool lines_in_place = !sp && c.name == "ic_3d_temporal_3x1x1";
        if (lines_in_place) {
          EXPECT_EQ(nest.find("kiln_xph"), std::string::npos) << nest;
          EXPECT_NE(nest.find("zero segments skipped per tile"), std::string::npos) << nest;
        }
        const bool transposed_staging = nest.find("kiln_transpose_f32(&kiln_xph") != std::string::npos;
        EXPECT_EQ(transposed_staging, sp != &small && unit_stride_staged.count(c.name) && !lines_in_place) << nest;
        // ... and where a computed input's values lie channels innermost in their source: each
        // phase row's positions evaluated along the channels (a computed input from channel
        // planes, ic_prologue_pointwise's Sigmoid, keeps channel planes).
        static const std::set<std::string> computed_inner = {"ic_channels_last_s2", "ic_channels_last_3x3"};
        const bool computed_inner_staging = nest.find("kiln_xq") != std::string::npos;
        EXPECT_EQ(computed_inner_staging, sp != &small && computed_inner.count(c.name)) << nest;
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
        // Its side taps read 2 of a line's 14 positions: those calls run the 2 rows only.
        if (!sp && c.name == "ic_dilated_aspp_skip") {
          EXPECT_NE(nest.find("kiln_mk_f32((min("), std::string::npos) << nest;
        }
        // (40 output channels: one panel of 48, fit_panel_width, not two of 32.)
        if (!sp && c.name == "ic_1x7_lines") {
          EXPECT_NE(nest.find("micro-kernel 9x48"), std::string::npos) << nest;
          EXPECT_NE(nest.find("[305 x 112]"), std::string::npos) << nest;  // 16 lines of 18 rows, then 17
        }
        if (c.name == "ic_7x1_flat") {
          EXPECT_NE(nest.find("zero segments skipped per tile"), std::string::npos) << nest;
          if (!sp) {
            EXPECT_NE(nest.find("micro-kernel 9x48"), std::string::npos) << nest;
            EXPECT_NE(nest.find("[289 x 1008]"), std::string::npos) << nest;  // flat: no padding rows
          }
        }
        if (!sp && c.name == "ic_stride2_7x7_lines") {
          EXPECT_NE(nest.find("micro-kernel 7x32"), std::string::npos) << nest;
          EXPECT_NE(nest.find("[49 x 144]"), std::string::npos) << nest;
        }
        // Patch embeddings read the input (or its staged copy) in place: no phase planes.
        if (c.name.rfind("ic_patch_", 0) == 0) {
          EXPECT_EQ(nest.find("kiln_xph"), std::string::npos) << nest;
          EXPECT_EQ(nest.find("kiln_xin") != std::string::npos, c.name == "ic_patch_prologue_2x5") << nest;
        }
        if (!sp && c.name == "ic_inner_pad_wide") {
          EXPECT_NE(nest.find("micro-kernel 5x64"), std::string::npos) << nest;  // one line of 5 outputs
          EXPECT_NE(nest.find("kiln_transpose_f32(&kiln_xph"), std::string::npos) << nest;
          EXPECT_NE(nest.find(", 272, &x["), std::string::npos) << "positions 272 floats apart: " << nest;
        }
        if (!sp && c.name == "ic_inner_8_wide") {
          EXPECT_NE(nest.find("micro-kernel 8x32"), std::string::npos) << nest;
        }
        if (!sp && c.name == "ic_inner_96_out") {
          EXPECT_NE(nest.find("x32, K block"), std::string::npos) << nest;
          EXPECT_NE(nest.find(", 32, &x["), std::string::npos) << "positions 32 floats apart: " << nest;
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
// A 1x1 conv (cin -> cout) + ReLU + global pool over an hw x hw map.
ConvCase conv_pool_case(int64_t cin, int64_t cout, int64_t hw) {
  const std::string map = std::to_string(hw) + "," + std::to_string(hw), co = std::to_string(cout);
  return {"conv_gap_" + std::to_string(hw),
          "  %c: f32[1," + co + "," + map + "] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name=\"conv\"\n  %r: f32[1," + co +
              "," + map + "] = Relu(%c) name=\"relu\"\n  %y: f32[1," + co + ",1,1] = GlobalAveragePool(%r) name=\"gap\"\n",
          "%x: f32[1," + std::to_string(cin) + "," + map + "]", "%y", {{"w", {cout, cin, 1, 1}}, {"b", {cout}}}};
}

// The default plan keeps the conv and the pool apart, and a refusal says `why`.
void expect_apart(const Graph& g, const std::string& why) {
  FusionPlan apart = partition(g);
  EXPECT_EQ(apart.groups.size(), 2u);
  bool said = false;
  for (const auto& r : apart.rejected) said = said || r.reason.find(why) != std::string::npos;
  EXPECT_TRUE(said) << why;
}

// The plan under `sched` is one group, lowered.
std::pair<FusionPlan, loop::LoweredGroup> one_kernel(const Graph& g, const loop::Schedule& sched, const std::string& name) {
  FusionOptions o;
  o.schedule = sched;
  FusionPlan plan = partition(g, o);
  EXPECT_EQ(plan.groups.size(), 1u);
  if (plan.groups.size() != 1u) return {std::move(plan), {}};
  auto lg = loop::lower_group(plan.groups[0], name, sched);
  return {std::move(plan), std::move(lg)};
}

TEST(LowerContraction, ConvPoolRowsReadTheWeightsOnce) {
  const ConvCase c = conv_pool_case(64, 512, 7);
  auto g = make_conv_graph(c);
  // By default 49 positions fill 49 of 64 lanes of the tiled rows' columns: the conv and the pool
  // stay apart, and the refusal says why.
  expect_apart(*g, "49 of 64 vector lanes");
  // Allowed (rows_min_column_percent 0): the tiled rows, both column panels inside each row tile.
  loop::Schedule sched;
  sched.contraction.rows_min_column_percent = 0;
  sched.contraction.conv_rows_max_work = INT64_MAX;  // at any size
  auto [plan, lg] = one_kernel(*g, sched, c.name);
  ASSERT_TRUE(lg.kernel) << lg.reason;
  const std::string nest = loop::print_kernel(*lg.kernel);
  EXPECT_NE(nest.find("tiled rows"), std::string::npos) << nest;
  EXPECT_EQ(nest.find("kiln_tr_jt"), std::string::npos) << nest;
  auto values = run_reference_values(*g, random_inputs(*g, 3, {}, false));
  auto got = testing::interpret_group(*lg.kernel, plan.groups[0], values);
  EXPECT_EQ(testing::within_max_magnitude(got[0], values.at(plan.groups[0].outputs[0]), 1e-5), "");
}

// A conv + global pool whose positions fill the tiled rows' lanes (196 of 208 over 14x14) but whose
// work is above ContractionTile::conv_rows_max_work stays two kernels (the conv's implicit GEMM,
// then the pool), and the refusal names the work and the bound; at or below the bound (a smaller
// conv, or the bound raised) it is one tiled-rows kernel.
TEST(LowerContraction, ConvPoolRowsOnlyUpToTheirWork) {
  const ConvCase c = conv_pool_case(128, 256, 14);
  auto g = make_conv_graph(c);
  const int64_t work = 256 * 196 * 128;  // 6.4 M multiply-adds
  ASSERT_GT(work, loop::Schedule{}.contraction.conv_rows_max_work);
  expect_apart(*g, "Conv of " + std::to_string(work) + " multiply-adds would take the tiled rows");
  loop::Schedule sched;
  sched.contraction.conv_rows_max_work = work;
  auto [plan, lg] = one_kernel(*g, sched, c.name);
  ASSERT_TRUE(lg.kernel) << lg.reason;
  EXPECT_NE(loop::print_kernel(*lg.kernel).find("tiled rows"), std::string::npos);
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
                       const loop::Schedule& base = {}, size_t members = 3, bool strict_too = true) {
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
      if (sp && !strict_too) continue;
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
// sigmoid after it) takes the implicit GEMM, one row of positions by panels of output channels
// (144: three of 48) with the weights packed once, instead of a scalar dot product per output;
// strict numerics keep the direct nest (the reference's order), bit-exact.
TEST(LowerContraction, SqueezeExcitationFcIsTiled) {
  const ConvCase c{"se_fc", R"(  %c: f32[1,144,1,1] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="fc"
  %y: f32[1,144,1,1] = HardSigmoid(%c) name="gate"
)", "%x: f32[1,576,1,1]", "%y", {{"w", {144, 576, 1, 1}}, {"b", {144}}}};
  check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    EXPECT_EQ(nest.find("micro-kernel 1x48") != std::string::npos, !strict) << nest;
    EXPECT_EQ(nest.find("B prepacked") != std::string::npos, !strict) << nest;
    EXPECT_EQ(nest.find("micro-kernel") == std::string::npos, strict) << nest;
  }, {}, 2);
}

// Output channels that are not whole panels of 32 take the panel width that pads them least,
// among whole vectors up to 64 floats (fit_panel_width): 144 as three panels of 48 (R(2+1)D's
// 64 -> 144 convs), 40 as one of 48; 80 stays 3 x 32 (48 pads as much), 96 whole panels of 32.
// Off (0), 144 is five panels of 32. Numerically checked both ways.
TEST(LowerContraction, PanelWidthFitsTheOutputChannels) {
  for (const auto& [cout, fit, want] : std::vector<std::tuple<int64_t, int, std::string>>{
           {144, 1, "x48"}, {40, 1, "x48"}, {80, 1, "x32"}, {96, 1, "x32"}, {144, 0, "x32"}}) {
    SCOPED_TRACE(std::to_string(cout) + (fit ? " fitted" : " not fitted"));
    const std::string co = std::to_string(cout);
    const ConvCase c{"panel_fit", "  %c: f32[1," + co + ",14,14] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"conv\"\n" +
                                      "  %y: f32[1," + co + ",14,14] = Relu(%c) name=\"relu\"\n",
                     "%x: f32[1,32,14,14]", "%y", {{"w", {cout, 32, 3, 3}}, {"b", {cout}}}};
    loop::Schedule base;
    base.contraction.fit_panel_width = fit;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (!strict) {
        EXPECT_NE(nest.find(want + ", K block"), std::string::npos) << nest;
      }
    }, base, 2, /*strict_too=*/false);
  }
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

// A pointwise conv of a kernel input with more than channel_rows_few_k input channels: over a
// page of positions or more (1024: each input channel's plane a page apart) the output channels
// are the GEMM's rows, the input B copied per tile; over fewer (31x32) the implicit GEMM with
// positions as rows reads it in place (ContractionTile::channel_rows_positions). Bias and ReLU.
TEST(LowerContraction, PointwiseConvTakesChannelRowsFromAPageOfPositions) {
  for (const int64_t h : {32, 31}) {
    SCOPED_TRACE(h);
    const std::string shape = "1,48," + std::to_string(h) + ",32";
    const ConvCase c{"pw_page_" + std::to_string(h), "  %c: f32[" + shape + R"(] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %y: f32[)" + shape + R"(] = Relu(%c) name="relu"
)", "%x: f32[1,160," + std::to_string(h) + ",32]", "%y", {{"w", {48, 160, 1, 1}}, {"b", {48}}}};
    const int64_t positions = h * 32;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (strict) return;  // strict numerics always take channel rows (the reference's K order)
      if (positions >= 1024) {
        EXPECT_NE(nest.find("[48 x 160] * [160 x 1024]"), std::string::npos) << nest;
        EXPECT_NE(nest.find("B copied per tile"), std::string::npos) << nest;
      } else {
        EXPECT_NE(nest.find("[" + std::to_string(positions) + " x 160] * [160 x 48]"), std::string::npos) << nest;
      }
    }, {}, 2);
  }
}

// `c` lowered with the schedule field `field` on (`on`) and off (0) over `base`, both against the
// reference: every nest has `form`, and `marker` exactly where the field is on.
template <class T>
void check_field_on_and_off(const ConvCase& c, const loop::Schedule& base, T loop::ContractionTile::*field, T on,
                            const std::string& form, const std::string& marker, size_t members = 2, bool strict_too = true) {
  for (const T value : {on, T{0}}) {
    SCOPED_TRACE(value);
    loop::Schedule sched = base;
    sched.contraction.*field = value;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (strict) return;
      ASSERT_NE(nest.find(form), std::string::npos) << nest;
      EXPECT_EQ(nest.find(marker) != std::string::npos, value == on) << nest;
    }, sched, members, strict_too);
  }
}

// A positions-as-rows tile whose output lines follow each other (row tiles fitted to the 8-wide
// lines) is stored per row tile, right after the last K block's call (store_per_call); with the
// field off, once after the tile.
TEST(LowerContraction, ImplicitConvStoresEachRowTileAfterItsLastCall) {
  const ConvCase c{"store_per_call", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,32,8,8] = Relu(%c) name="relu"
)", "%x: f32[1,16,8,8]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::store_per_call, 1, "kiln_transpose_f32(&y", "+ (kiln_m0 + (kiln_r");
}

// A conv whose epilogue ends in a Transpose to channels-last (ConvNeXt's depthwise conv before
// its LayerNorm, a value stored channels-last between convs): the stores follow the value forward
// through the Transpose, so the tile's rows are the output's rows. With the register epilogue
// each row tile is copied row by row right after its last call (store_per_call), vectorised
// along the channels; with the field off after the tile. Whole lines (8 wide) and a stride-2
// conv whose tile lines are padded (17 rows for 16 outputs). Default numerics: under --strict-fp
// these convs take the channel-rows form, whose flat stores refuse the Transpose (it stays apart).
TEST(LowerContraction, ImplicitConvStoresAChannelsLastOutputByRows) {
  const ConvCase whole{"channels_last", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %r: f32[1,32,8,8] = Relu(%c) name="relu"
  %y: f32[1,8,8,32] = Transpose(%r) {perm=[0,2,3,1]} name="nhwc"
)", "%x: f32[1,16,8,8]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(whole, {}, &loop::ContractionTile::store_per_call, 1, "* [144 x 32]", "for kiln_sr in", 3, false);
  const ConvCase padded{"channels_last_lines", R"(  %c: f32[1,32,16,16] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %r: f32[1,32,16,16] = Relu(%c) name="relu"
  %y: f32[1,16,16,32] = Transpose(%r) {perm=[0,2,3,1]} name="nhwc"
)", "%x: f32[1,3,33,33]", "%y", {{"w", {32, 3, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(padded, {}, &loop::ContractionTile::store_per_call, 1, "[271 x 27] * [27 x 32]", "for kiln_sr in", 3, false);
}

// The same with an epilogue the registers do not hold (a residual read channels-last too, through
// a Transpose in the prologue of the Add's other operand): the values go into a tile, then each
// row of it is copied into the output's row (the channels innermost: kiln_ej inside kiln_ex). With
// a second output in the conv's own layout both are stored per channel, the channels-last one
// strided; against the reference both ways.
TEST(LowerContraction, ImplicitConvCopiesAChannelsLastTileByRows) {
  const std::string body = R"(  %c: f32[1,40,6,7] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %t: f32[1,40,6,7] = Transpose(%res) {perm=[0,3,1,2]} name="back"
  %a: f32[1,40,6,7] = Add(%c, %t) name="add"
  %y: f32[1,6,7,40] = Transpose(%a) {perm=[0,2,3,1]} name="nhwc"
)";
  for (const bool both : {false, true}) {
    SCOPED_TRACE(both);
    const ConvCase c{"channels_last_tile", body, "%x: f32[1,16,6,7], %res: f32[1,6,7,40]", both ? "%y, %a" : "%y",
                     {{"w", {40, 16, 3, 3}}, {"b", {40}}}};
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool) {
      const size_t ex = nest.find("for kiln_ex in"), ej = nest.find("for kiln_ej in", ex);
      ASSERT_NE(ex, std::string::npos) << nest;
      // Rows: the channel loop right inside the row loop; else the channel loop outside.
      EXPECT_EQ(ej != std::string::npos && ej - ex < 200, !both) << nest;
    }, {}, 4, false);
  }
}

// Two threads share the tiles evenly in the order the nest runs them. ViT-B/16's MLP-in (A packed:
// a LayerNorm's tail) runs its column panels outermost (N > M): panels of 1920 and 1152 columns
// gave one thread all the wide ones; the panels are now equal. Its MLP-out + LayerNorm rows: 197
// rows in 3 blocks gave one thread two; now a whole number of blocks per thread. Against the
// reference both ways.
TEST(LowerContraction, TwoThreadsGetEqualShares) {
  loop::Schedule two;
  two.threads = 2;
  const ConvCase panels{"balance_panels", R"(  %d: f32[197,64] = Div(%x, %s) name="norm"
  %m: f32[197,3072] = MatMul(%d, %w) name="mm"
)", "%x: f32[197,64], %s: f32[197,1]", "%m", {{"w", {64, 3072}}}};
  check_conv_both_numerics(panels, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    if (strict) return;
    const size_t at = nest.find("tile ");
    ASSERT_NE(at, std::string::npos) << nest;
    const int64_t nc = std::stoll(nest.substr(nest.find('x', at) + 1));
    EXPECT_EQ(3072 % nc, 0) << "unequal column panels: " << nest.substr(at, 40);
  }, two, 2);
  const ConvCase rows{"balance_rows", R"(  %m: f32[197,768] = MatMul(%x, %w) name="mm"
  %ax = constant i64[1] [1]
  %mu: f32[197,1] = ReduceMean(%m, %ax) {keepdims=1} name="mean"
  %y: f32[197,768] = Sub(%m, %mu) name="center"
)", "%x: f32[197,64]", "%y", {{"w", {64, 768}}}};
  check_conv_both_numerics(rows, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    if (strict) return;
    const size_t at = nest.find(" rows per block");
    ASSERT_NE(at, std::string::npos) << nest;
    const size_t from = nest.rfind(' ', at - 1) + 1;
    const int64_t per = std::stoll(nest.substr(from, at - from));
    EXPECT_EQ((197 + per - 1) / per % 2, 0) << per << " rows per block";
  }, two, 3);
}

// A MatMul over an input read in place and prepacked weights whose whole-K panel (384 x 32 floats,
// 48 KiB) is within gemm_whole_k_bytes takes K in one block; with the field off, blocks of kc (two
// of 192). The same where A is computed (a LayerNorm's tail before a transformer's MLP, packed
// per row block). Against the reference both ways.
TEST(LowerContraction, MatMulTakesKWholeWhereItsPanelFits) {
  const ConvCase c{"gemm_whole_k", R"(  %m: f32[40,64] = MatMul(%x, %w) name="mm"
  %y: f32[40,64] = Add(%m, %b) name="add"
)", "%x: f32[40,384]", "%y", {{"w", {384, 64}}, {"b", {64}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::gemm_whole_k_bytes, int64_t{256 * 1024}, "[40 x 384] * [384 x 64]",
                         "K block 384");
  const ConvCase packed{"gemm_whole_k_packed_a", R"(  %d: f32[40,384] = Div(%x, %s) name="norm"
  %m: f32[40,64] = MatMul(%d, %w) name="mm"
  %y: f32[40,64] = Add(%m, %b) name="add"
)", "%x: f32[40,384], %s: f32[40,1]", "%y", {{"w", {384, 64}}, {"b", {64}}}};
  check_field_on_and_off(packed, {}, &loop::ContractionTile::gemm_whole_k_bytes, int64_t{256 * 1024}, "A packed",
                         "K block 384", 3);
}

// An implicit conv whose B panel over all of K (576 x 32 floats, 72 KiB) is within
// implicit_whole_k_bytes takes K in one block: each row tile's accumulators stay in registers
// over all nine kernel positions, then it is stored. With the field off, implicit_kc blocks.
TEST(LowerContraction, ImplicitConvTakesKWholeWhereItsPanelFits) {
  const ConvCase c{"whole_k", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,32,8,8] = Relu(%c) name="relu"
)", "%x: f32[1,64,8,8]", "%y", {{"w", {32, 64, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::implicit_whole_k_bytes, int64_t{512 * 1024}, "* [576 x 32]",
                         "K block 576");
}

// The same where the output lines are padded in the tile (a stride-2 stem's phase-plane lines,
// 17 rows for 16 outputs, in 13-row tiles that cross them): each row tile is copied per line it
// overlaps, that line's valid rows only.
TEST(LowerContraction, ImplicitConvStoresEachRowTileOverPaddedLines) {
  const ConvCase c{"store_per_call_lines", R"(  %c: f32[1,32,16,16] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %y: f32[1,32,16,16] = Relu(%c) name="relu"
)", "%x: f32[1,3,33,33]", "%y", {{"w", {32, 3, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::store_per_call, 1, "[271 x 27] * [27 x 32]", "i64 kiln_sln = ");
}

// Squeeze-excitation's channel scale before a 1x1 conv (x · s, s one value per input channel,
// here computed in the kernel from z): the scale goes into the weights once per call (kiln_wsc)
// and B (channel rows, 16 output channels over 256 positions) or A (positions as rows, 48 output
// channels over 64 positions: the packed panels scaled) is x in place. Not under --strict-fp,
// where x · s is staged as the reference rounds it, bit-exact.
TEST(LowerContraction, ChannelScaleBeforePointwiseConvGoesIntoTheWeights) {
  struct Case {
    int cout, hw;
    std::string form;
  };
  for (const Case& sh : std::vector<Case>{{16, 16, "[16 x 24] * [24 x 256]"}, {48, 8, "[64 x 24] * [24 x 48]"}}) {
    // (Not structured bindings: clang before 16 cannot capture them in the lambda below.)
    const int cout = sh.cout, hw = sh.hw;
    const std::string form = sh.form;
    const std::string y = cat("f32[1,", cout, ",", hw, ",", hw, "]");
    const ConvCase c{"se_scale", cat("  %s: f32[1,24,1,1] = Sigmoid(%z) name=\"sig\"\n",
                                     "  %m: f32[1,24,", hw, ",", hw, "] = Mul(%x, %s) name=\"scale\"\n",
                                     "  %c: ", y, " = Conv(%m, %w, %b) {kernel_shape=[1,1]} name=\"conv\"\n",
                                     "  %y: ", y, " = Add(%c, %r) name=\"res\"\n"),
                     cat("%x: f32[1,24,", hw, ",", hw, "], %z: f32[1,24,1,1], %r: ", y), "%y",
                     {{"w", {cout, 24, 1, 1}}, {"b", {cout}}}};
    SCOPED_TRACE(form);
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (!strict) {
        EXPECT_NE(nest.find(form), std::string::npos) << nest;
      }
      EXPECT_EQ(nest.find("kiln_wsc") != std::string::npos, !strict) << nest;
    }, {}, 4);
  }
  // Not folded, and still right: two images (one scale per image), more output channels than
  // positions (the weights the larger side), a scale per position rather than per channel.
  const std::vector<ConvCase> kept = {
      {"se_batch2", R"(  %s: f32[2,24,1,1] = Sigmoid(%z) name="sig"
  %m: f32[2,24,8,8] = Mul(%x, %s) name="scale"
  %y: f32[2,32,8,8] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[2,24,8,8], %z: f32[2,24,1,1]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
      {"se_wide", R"(  %s: f32[1,24,1,1] = Sigmoid(%z) name="sig"
  %m: f32[1,24,4,4] = Mul(%x, %s) name="scale"
  %y: f32[1,32,4,4] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,24,4,4], %z: f32[1,24,1,1]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
      {"se_per_position", R"(  %s: f32[1,1,8,8] = Sigmoid(%z) name="sig"
  %m: f32[1,24,8,8] = Mul(%x, %s) name="scale"
  %y: f32[1,32,8,8] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,24,8,8], %z: f32[1,1,8,8]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
  };
  for (const ConvCase& c : kept) {
    SCOPED_TRACE(c.name);
    check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool) {
      EXPECT_EQ(nest.find("kiln_wsc"), std::string::npos) << nest;
    }, {}, 3);
  }
}

// A GEMM with more columns than rows runs its column panels outermost (Schedule's
// columns_outer), so the threads' contiguous ranges of tiles split the columns: here a 1x1 conv
// with 16 output channels as rows over 3136 positions, two row blocks of 8 at two threads
// (MnasNet's 48 -> 16 conv over 56x56). With columns_outer = 0 the row blocks are outermost.
TEST(LowerContraction, WideGemmSplitsItsColumnsAmongThreads) {
  const ConvCase c{"cols_outer", R"(  %c: f32[1,16,56,56] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,16,56,56] = Relu(%c) name="relu"
)", "%x: f32[1,48,56,56]", "%y", {{"w", {16, 48, 1, 1}}, {"b", {16}}}};
  loop::Schedule two;
  two.threads = 2;
  check_field_on_and_off(c, two, &loop::ContractionTile::columns_outer, 1, "[16 x 48] * [48 x 3136]", "kiln_mb = (kiln_t % 2)");
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

// The planes' budget is per image: a batch of images whose planes exceed it together, each
// within it, keeps the implicit form (its row tiles walk one image at a time).
TEST(LowerContraction, WindowedConvPlaneBudgetIsPerImage) {
  const ConvCase c{"rows_batch", R"(  %y: f32[3,72,15,13] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[3,20,15,13]", "%y", {{"w", {72, 20, 3, 3}}, {"b", {72}}}};
  // One image's planes: 20 channels of 17 x 15 floats, 20,400 bytes.
  // (Not structured bindings: clang before 16 cannot capture them in the lambda below.)
  for (const auto& budget : std::vector<std::pair<int64_t, bool>>{{30 * 1024, false}, {16 * 1024, true}}) {
    const int64_t plane_bytes = budget.first;
    const bool rows = budget.second;
    loop::Schedule sched;
    sched.contraction.window_channel_rows_plane_bytes = plane_bytes;
    sched.contraction.window_channel_rows_min_cout = 64;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (!strict) {
        EXPECT_EQ(nest.find("K in segments") == std::string::npos, rows) << plane_bytes << "\n" << nest;
      }
    }, sched, 1);
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

// Patch convs sum K in the reference's (ci, ky, kx) order, so --strict-fp takes the in-place form
// too (with phase planes, CLIP's 32x32 conv stayed a library kernel there): bit-identical to the
// reference, compiled without FMA contraction.
TEST(LowerContraction, PatchConvUnderStrictNumericsIsBitExact) {
  loop::Schedule strict;
  strict.set_strict_numerics();
  KernelBatch batch;
  int patches = 0;
  for (const ConvCase& c : implicit_conv_cases()) {
    if (c.name.rfind("ic_patch_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    ++patches;
    auto g = make_conv_graph(c);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : partition(*g).groups) {
      if (!is_contraction_group(grp)) continue;
      auto lg = loop::lower_group(grp, c.name + "_strict", strict);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_NE(nest.find("K in segments of"), std::string::npos) << nest;
      EXPECT_EQ(nest.find("kiln_xph"), std::string::npos) << nest;
      batch.add(std::move(*lg.kernel), grp, values);
    }
  }
  EXPECT_EQ(patches, 3);
  batch.check("patch_strict", /*contract=*/false, /*bits=*/true);
}

}  // namespace
}  // namespace kiln
