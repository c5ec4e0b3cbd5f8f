// Shared by the conv tests of the contraction lowering (lower_contraction_conv_test.cc,
// lower_contraction_conv_forms_test.cc): the implicit-GEMM conv cases, their graphs, and the
// check that lowers a conv group at default and strict numerics.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"

namespace kiln::conv_test {

using testing::compare_tensors;
using testing::KernelBatch;
using testing::random_inputs;

inline bool is_contraction_group(const FusionGroup& grp) { return grp.kind == GroupKind::Contraction; }

// Convs as implicit GEMMs (positions × output channels, the input staged into phase planes, the
// weights packed): every stride, dilation and padding, a fused prologue and epilogue, output
// channels that are not a whole number of panels, and remainders of every tile dimension. The
// weights must be constants for the implicit form (they are packed when the kernel is bound):
// `consts` become constant lines of random values.
struct ConvCase {
  std::string name, body, inputs, outputs;
  std::vector<std::pair<std::string, Shape>> consts;
};

inline std::vector<ConvCase> implicit_conv_cases() {
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

inline std::unique_ptr<Graph> make_conv_graph(const ConvCase& c) {
  return testing::graph_with_constants(c.inputs, c.outputs, c.body, c.consts, 11, 0.3f);
}

// A conv group of `members` nodes (by default three: two prologue ops whose result the kernel
// computes, and the conv), lowered at default and strict numerics: `check_nest` sees each nest
// (strict: true), the interpreted outputs match the reference (bit-exact under strict, and under
// the default too when `fma_exact`), and both batches compile and run.
inline void check_conv_both_numerics(const ConvCase& c, bool fma_exact, const std::function<void(const std::string&, bool)>& check_nest,
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

}  // namespace kiln::conv_test
