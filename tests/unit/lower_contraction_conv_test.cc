// Convs through the contraction lowering (lower_contraction_implicit.cc and the tiled nest of
// lower_contraction_tiled.cc): the implicit GEMM over phase planes (positions x output channels,
// K in segments per kernel position, the weights packed), its channel-rows form, the skips of
// kernel positions over padding, stems, squeeze-excitation FCs, staged and far-apart inputs, and
// the im2col form kept under strict numerics. Each case runs through the loop interpreter against
// the reference, and all cases of a test in one module through emit_c + JitModule.
// (Split from lower_contraction_test.cc, which keeps the MatMul, nest-shape and model tests; the
// later conv tests are in lower_contraction_conv_forms_test.cc, the shared cases and checks in
// lower_contraction_conv_test_util.h.)
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ir/parser.h"
#include "kernels/depthwise.h"
#include "loop/loop_interpreter.h"
#include "lower_contraction_conv_test_util.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using namespace conv_test;

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
          EXPECT_NE(nest.find("[289 x 112]"), std::string::npos) << nest;  // lines of 9 + 8 rows (split, not 18)
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
  for (const auto& [cout, fit, width] : std::vector<std::tuple<int64_t, int, std::string>>{
           {144, 1, "x48"}, {40, 1, "x48"}, {80, 1, "x32"}, {96, 1, "x32"}, {144, 0, "x32"}}) {
    const std::string want = width;  // (a structured binding cannot be captured by clang's lambdas)
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

// A windowed conv with fewer output channels than a vector (RAFT's 128 -> 2 flow head, an image
// decoder's last 64 -> 3): the stencil over all its input channels as one group (grouped-conv
// micro-kernel by default, the reference's order under strict numerics); where the planes pass
// Schedule::stencil_bytes, the implicit GEMM with one vector of output channels, 3 of them live.
// Never the untiled nest (one scalar chain per output: 1.9 GFLOP/s). Stride 2 with asymmetric
// padding and two images in the second case.
TEST(LowerContraction, FewOutputChannelsTakeTheStencilOrAOneVectorPanel) {
  const std::vector<ConvCase> cases = {
      {"few_out_3x3_relu", R"(  %c: f32[1,3,10,12] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,3,10,12] = Relu(%c) name="relu"
)", "%x: f32[1,24,10,12]", "%y", {{"w", {3, 24, 3, 3}}, {"b", {3}}}},
      {"few_out_s2_two_images", R"(  %c: f32[2,2,5,4] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,0,1,1], strides=[2,2]} name="conv"
  %y: f32[2,2,5,4] = Relu(%c) name="relu"
)", "%x: f32[2,40,9,8]", "%y", {{"w", {2, 40, 3, 3}}, {"b", {2}}}},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
      EXPECT_NE(nest.find("kiln_dph"), std::string::npos) << "not the stencil:\n" << nest;
      EXPECT_EQ(nest.find(kernels::kGroupedConvF32) != std::string::npos, !strict) << nest;
    }, {}, 2);
    loop::Schedule no_planes;
    no_planes.stencil_bytes = 0;
    check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool) {
      EXPECT_NE(nest.find("x16, K block"), std::string::npos) << "not a one-vector panel:\n" << nest;
    }, no_planes, 2, /*strict_too=*/false);
  }
}

}  // namespace
}  // namespace kiln
