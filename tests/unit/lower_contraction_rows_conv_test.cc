// Convs whose group ends in a reduction over the spatial axes (conv + ReLU + GlobalAveragePool,
// conv + ReduceMean) through the tiled rows (src/loop/lower_contraction_rows.cc): the im2col panel
// B of each image packed from the input staged into zero-padded phase planes, staged straight
// into the panel (a unit window of a computed input), read in place (a unit window of a kernel
// input) or gathered (3-D) — every stride, padding (wider than the input too), dilation, kernel
// size, 1-D and 2-D, batch 2, non-square inputs and a fused prologue. Each case runs through the
// loop interpreter (the tiled nest bit-identical to the untiled dot-product nest of the same
// schedule; the default numerics within the contract of the reference, --strict-fp in its bits)
// and, all cases in one module per mode, through emit_c + JitModule.
#include <gtest/gtest.h>

#include <cstring>

#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using testing::KernelBatch;
using testing::random_inputs;

struct RowsConvCase {
  std::string name, body, inputs;
  std::vector<std::pair<std::string, Shape>> consts;
  std::string b_source;  // the tiled rows comment's words for B ("" for the input in place)
};

std::vector<RowsConvCase> rows_conv_cases() {
  const std::string planes = "B packed per batch from phase planes";
  return {
      {"k3_pad1_relu_gap", R"(  %c: f32[1,8,6,7] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %r: f32[1,8,6,7] = Relu(%c) name="relu"
  %y: f32[1,8,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,4,6,7]", {{"w", {8, 4, 3, 3}}, {"b", {8}}}, planes},
      // Stride 2 with asymmetric padding, batch 2, the mean over the spatial axes kept as dims.
      {"k3_s2_asym_reducemean_batch2", R"(  %ax = constant i64[2] [2, 3]
  %c: f32[2,8,5,4] = Conv(%x, %w) {kernel_shape=[3,3], pads=[1,0,1,1], strides=[2,2]} name="conv"
  %y: f32[2,8,1,1] = ReduceMean(%c, %ax) {keepdims=1} name="mean"
)", "%x: f32[2,3,9,8]", {{"w", {8, 3, 3, 3}}}, planes},
      {"k3_dilation2", R"(  %c: f32[1,9,9,9] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[2,2,2,2], dilations=[2,2]} name="conv"
  %r: f32[1,9,9,9] = Relu(%c) name="relu"
  %y: f32[1,9,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,5,9,9]", {{"w", {9, 5, 3, 3}}, {"b", {9}}}, planes},
      // Stride 3 x 2, dilation 2 x 1, a rectangular kernel: several phases.
      {"k2x4_s3x2_d2x1_rect", R"(  %ax = constant i64[2] [-2, -1]
  %c: f32[1,8,3,2] = Conv(%x, %w, %b) {kernel_shape=[2,4], pads=[1,0,1,1], strides=[3,2], dilations=[2,1]} name="conv"
  %r: f32[1,8,3,2] = Relu(%c) name="relu"
  %y: f32[1,8] = ReduceMean(%r, %ax) {keepdims=0} name="mean"
)", "%x: f32[1,3,9,5]", {{"w", {8, 3, 2, 4}}, {"b", {8}}}, planes},
      {"k5_pad2_nonsquare", R"(  %c: f32[1,10,6,11] = Conv(%x, %w, %b) {kernel_shape=[5,5], pads=[2,2,2,2]} name="conv"
  %r: f32[1,10,6,11] = Relu(%c) name="relu"
  %y: f32[1,10,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,3,6,11]", {{"w", {10, 3, 5, 5}}, {"b", {10}}}, planes},
      // Padding wider than the input: phase rows with no interior.
      {"pad_wider_than_input", R"(  %c: f32[2,8,5,6] = Conv(%x, %w) {kernel_shape=[3,3], pads=[3,3,3,4]} name="conv"
  %r: f32[2,8,5,6] = Relu(%c) name="relu"
  %y: f32[2,8,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[2,3,1,1]", {{"w", {8, 3, 3, 3}}}, planes},
      // 1x1: the input read in place (49 positions: a partial column tile).
      {"k1_in_place", R"(  %c: f32[1,8,4,8] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %r: f32[1,8,4,8] = Relu(%c) name="relu"
  %y: f32[1,8,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,6,4,8]", {{"w", {8, 6, 1, 1}}, {"b", {8}}}, ""},
      {"k1_in_place_7x7_batch2", R"(  %c: f32[2,16,7,7] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %r: f32[2,16,7,7] = Clip(%c, %lo, %hi) name="clip"
  %y: f32[2,16,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[2,6,7,7]", {{"w", {16, 6, 1, 1}}, {"b", {16}}, {"lo", {}}, {"hi", {}}}, ""},
      // 40 positions = 32 + 8: the rest joins the last whole column panel as one 40-wide call
      // (Schedule::ContractionTile::merge_tail_cols), except under --strict-fp.
      {"k1_in_place_merged_tail", R"(  %c: f32[1,8,5,8] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %r: f32[1,8,5,8] = Relu(%c) name="relu"
  %y: f32[1,8,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,6,5,8]", {{"w", {8, 6, 1, 1}}, {"b", {8}}}, ""},
      // A 1x1 with stride 2 is not a unit window: packed from its (one) phase.
      {"k1_s2", R"(  %c: f32[1,8,4,3] = Conv(%x, %w) {kernel_shape=[1,1], strides=[2,2]} name="conv"
  %y: f32[1,8,1,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[1,5,8,6]", {{"w", {8, 5, 1, 1}}}, planes},
      // 1-D: stride 2, dilation 2, asymmetric padding, batch 2.
      {"conv1d_s2_d2", R"(  %c: f32[2,8,10] = Conv(%x, %w, %b) {kernel_shape=[3], pads=[2,1], strides=[2], dilations=[2]} name="conv"
  %r: f32[2,8,10] = Relu(%c) name="relu"
  %y: f32[2,8,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[2,4,20]", {{"w", {8, 4, 3}}, {"b", {8}}}, planes},
      {"conv1d_k1_in_place", R"(  %ax = constant i64[1] [2]
  %c: f32[1,8,20] = Conv(%x, %w) {kernel_shape=[1]} name="conv"
  %y: f32[1,8,1] = ReduceMean(%c, %ax) {keepdims=1} name="mean"
)", "%x: f32[1,4,20]", {{"w", {8, 4, 1}}}, ""},
      // 3-D: the gather through offset tables.
      {"conv3d_gathered", R"(  %c: f32[1,8,4,3,4] = Conv(%x, %w) {kernel_shape=[3,3,3], pads=[1,1,1,1,1,1], strides=[1,2,1]} name="conv"
  %r: f32[1,8,4,3,4] = Relu(%c) name="relu"
  %y: f32[1,8,1,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[1,2,4,6,4]", {{"w", {8, 2, 3, 3, 3}}}, "B packed per batch"},
  };
}

// Clip bounds are the scalars lo = -0.5 and hi = 0.5, so that both bounds are hit.
std::unique_ptr<Graph> make_graph(const RowsConvCase& c) {
  return testing::graph_with_constants(c.inputs, "%y", c.body, c.consts, 11, 0.4f,
                                       [](const std::string& name) { return name == "lo" ? "-0.5" : "0.5"; });
}

loop::Schedule strict_schedule() {
  loop::Schedule s;
  s.set_strict_numerics();
  return s;
}

// The one contraction group of `g` (the whole case fused into it).
const FusionGroup& conv_group(const FusionPlan& plan, const Graph& g) {
  const FusionGroup* found = nullptr;
  for (const auto& grp : plan.groups)
    if (grp.kind == GroupKind::Contraction) {
      EXPECT_EQ(found, nullptr) << "more than one contraction group";
      found = &grp;
    }
  EXPECT_NE(found, nullptr);
  EXPECT_EQ(found->nodes.size(), g.nodes().size()) << "the case is not one kernel";
  return *found;
}

TEST(LowerContractionRowsConv, MatchesReference) {
  loop::Schedule par;
  par.parallel_min_work = 1;  // parallel staging, packing and blocks in the interpreter too
  par.contraction.rows_min_column_percent = 0;  // the tiled rows even over few positions
  par.contraction.conv_rows_max_work = INT64_MAX;  // at any size
  loop::Schedule odd;         // rows and columns not multiples of the tile
  odd.contraction.rows_min_column_percent = 0;
  odd.contraction.conv_rows_max_work = INT64_MAX;  // at any size
  odd.contraction.mr = 4;
  odd.contraction.nr = 12;
  odd.contraction.kc = 8;
  odd.parallel_min_work = 1;
  KernelBatch fma, strict;
  for (const RowsConvCase& c : rows_conv_cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = partition(*g);
    const FusionGroup& grp = conv_group(plan, *g);
    for (unsigned seed : {3u, 4u}) {
      // Seed 4 with NaN, inf and huge values (0 * inf in the padding stays NaN, as in the reference).
      const TensorMap inputs = random_inputs(*g, seed, {}, seed == 4);
      auto values = run_reference_values(*g, inputs);
      for (int mode = 0; mode < 4; ++mode) {
        const loop::Schedule sched = mode == 0 ? par : mode == 1 ? odd : mode == 2 ? loop::Schedule{} : strict_schedule();
        loop::Schedule flat = sched;
        flat.tile_contractions = false;
        auto plain = loop::lower_group(grp, c.name + "_plain", flat);
        ASSERT_TRUE(plain.kernel) << plain.reason;
        const auto want = testing::interpret_group(*plain.kernel, grp, values);
        auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(seed) + "_" + std::to_string(mode), sched);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        const std::string nest = loop::print_kernel(*lg.kernel);
        ASSERT_NE(nest.find("tiled rows"), std::string::npos) << "not the tiled rows:\n" << nest;
        if (!c.b_source.empty()) {
          EXPECT_NE(nest.find(c.b_source), std::string::npos) << nest;
        } else {
          EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << "B not read in place:\n" << nest;
        }
        if (c.name == "k1_in_place_merged_tail" && mode >= 2) {
          const bool merged = nest.find("kiln_mk_f32(8, 40,") != std::string::npos;
          EXPECT_EQ(merged, mode == 2) << "mode " << mode << ":\n" << nest;
          EXPECT_EQ(nest.find("kiln_mk_f32(8, 8,") != std::string::npos, mode == 3) << nest;
        }
        // Packed from the planes: no per-element bounds select or clamp in the packing.
        if (c.b_source.find("phase planes") != std::string::npos) {
          EXPECT_EQ(nest.find("kiln_coff"), std::string::npos) << nest;
        }
        auto got = testing::interpret_group(*lg.kernel, grp, values);
        for (size_t o = 0; o < got.size(); ++o) {
          // The tiled nest sums K in the untiled nest's (the reference's) order: the same bits.
          EXPECT_EQ(testing::bit_exact(got[o], want[o]), "") << "mode " << mode << ", tiled against untiled, output " << o;
          const Tensor& ref = values.at(grp.outputs[o]);
          EXPECT_EQ(mode == 3 ? testing::bit_exact(got[o], ref) : testing::within_max_magnitude(got[o], ref), "")
              << "mode " << mode << ", output " << o;
        }
        if (mode == 2) fma.add(std::move(*lg.kernel), grp, values);
        if (mode == 3) strict.add(std::move(*lg.kernel), grp, values);
      }
    }
  }
  fma.check("rows_conv_fma", /*contract=*/true);
  strict.check("rows_conv_strict", /*contract=*/false, /*bits=*/true);
}

// A fused prologue (a residual Add, a channel scale, a ReLU before the conv): evaluated once per
// input element, into the phase planes (then packed as for a kernel input) or, a unit window,
// straight into the panel's rows.
TEST(LowerContractionRowsConv, PrologueStagedOnce) {
  const std::vector<RowsConvCase> cases = {
      {"prologue_k3_s2", R"(  %a: f32[2,4,7,6] = Add(%x, %res) name="res"
  %c: f32[2,8,4,3] = Conv(%a, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]} name="conv"
  %r: f32[2,8,4,3] = Relu(%c) name="relu"
  %y: f32[2,8,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[2,4,7,6], %res: f32[2,4,7,6]", {{"w", {8, 4, 3, 3}}, {"b", {8}}}, "B packed per batch from phase planes"},
      {"prologue_k1_staged", R"(  %a: f32[1,4,4,8] = Mul(%x, %s) name="scale"
  %c: f32[1,8,4,8] = Conv(%a, %w) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,8,1,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[1,4,4,8], %s: f32[1,4,1,1]", {{"w", {8, 4, 1, 1}}}, "B staged per image"},
      {"prologue_k1_not_whole_tiles", R"(  %a: f32[1,4,5,5] = Mul(%x, %s) name="scale"
  %c: f32[1,8,5,5] = Conv(%a, %w) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,8,1,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[1,4,5,5], %s: f32[1,4,1,1]", {{"w", {8, 4, 1, 1}}}, "B staged per image"},
      // A 1-D unit window of a computed input.
      {"prologue_conv1d_k1", R"(  %a: f32[2,4,20] = Relu(%x) name="relu_in"
  %c: f32[2,8,20] = Conv(%a, %w) {kernel_shape=[1]} name="conv"
  %y: f32[2,8,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[2,4,20]", {{"w", {8, 4, 1}}}, "B staged per image"},
      // A 1-D conv of a computed input, dilated and padded.
      {"prologue_conv1d_k3", R"(  %a: f32[1,4,20] = Relu(%x) name="relu_in"
  %c: f32[1,8,18] = Conv(%a, %w) {kernel_shape=[3], pads=[1,1], dilations=[2]} name="conv"
  %y: f32[1,8,1] = GlobalAveragePool(%c) name="gap"
)", "%x: f32[1,4,20]", {{"w", {8, 4, 3}}}, "B packed per batch from phase planes"},
  };
  KernelBatch fma, strict;
  for (const RowsConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    // The partitioner decides on the prologue; lower the whole case as one group regardless.
    FusionGroup grp = testing::whole_group(*g);
    const TensorMap inputs = random_inputs(*g, 5, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (int mode = 0; mode < 2; ++mode) {
      const loop::Schedule sched = mode == 0 ? loop::Schedule{} : strict_schedule();
      auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(mode), sched);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_NE(nest.find(c.b_source), std::string::npos) << nest;
      auto got = testing::interpret_group(*lg.kernel, grp, values);
      for (size_t o = 0; o < got.size(); ++o) {
        const Tensor& ref = values.at(grp.outputs[o]);
        EXPECT_EQ(mode == 1 ? testing::bit_exact(got[o], ref) : testing::within_max_magnitude(got[o], ref), "")
            << "mode " << mode << ", output " << o;
      }
      (mode == 0 ? fma : strict).add(std::move(*lg.kernel), grp, values);
    }
  }
  fma.check("rows_conv_prologue_fma", /*contract=*/true);
  strict.check("rows_conv_prologue_strict", /*contract=*/false, /*bits=*/true);
}

}  // namespace
}  // namespace kiln
