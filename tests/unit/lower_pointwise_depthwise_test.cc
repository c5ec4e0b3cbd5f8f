// The pointwise -> depthwise emitter (lower_pointwise_depthwise.cc): a 1x1 conv, elementwise ops,
// a depthwise conv and elementwise ops after it as one kernel over blocks of the expanded
// channels. Cases with strides, windows, channel counts that do not fill the blocks, several
// images, transcendental activations on either side and a residual are run in the loop
// interpreter and compiled, against the reference: within the numerics contract by default, bit
// for bit under --strict-fp (the 1x1 conv's sums from zero, its bias added after them where the
// stencil stages the expanded rows, as the reference orders them); the refusals say why; the
// partitioner forms the kernel on a MobileNet-style block, under --strict-fp too.
#include <gtest/gtest.h>

#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "loop/loop_ir.h"
#include "loop/lower_internal.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using testing::KernelBatch;
using testing::random_inputs;

struct PwDwCase {
  std::string name, body, inputs;
  std::vector<std::pair<std::string, Shape>> consts;
  std::string outputs = "%y";
};

std::unique_ptr<Graph> make_graph(const PwDwCase& c) {
  return testing::graph_with_constants(c.inputs, c.outputs, c.body, c.consts, 5, 0.4f,
                                       [](const std::string& name) { return name == "lo" ? "0" : "0.6"; });
}

// The whole case as one group (the partitioner may keep a tiny case apart).
FusionGroup case_group(const Graph& g, const std::string& name) {
  FusionGroup grp = testing::whole_group(g);
  grp.name = name;
  return grp;
}

std::vector<PwDwCase> cases() {
  return {
      // MobileNetV2's shape: ReLU6 on both sides, stride 1.
      {"relu6_s1", R"(  %a: f32[1,12,9,9] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %r: f32[1,12,9,9] = Clip(%a, %lo, %hi) name="clip1"
  %d: f32[1,12,9,9] = Conv(%r, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], group=12} name="dw"
  %y: f32[1,12,9,9] = Clip(%d, %lo, %hi) name="clip2"
)", "%x: f32[1,5,9,9]", {{"w1", {12, 5, 1, 1}}, {"b1", {12}}, {"w2", {12, 1, 3, 3}}, {"b2", {12}}, {"lo", {}}, {"hi", {}}}},
      // Stride 2 over an odd size, no biases, two images.
      {"relu_s2_batch2_no_bias", R"(  %a: f32[2,16,11,10] = Conv(%x, %w1) {kernel_shape=[1,1]} name="pw"
  %r: f32[2,16,11,10] = Relu(%a) name="relu1"
  %y: f32[2,16,6,5] = Conv(%r, %w2) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=16} name="dw"
)", "%x: f32[2,3,11,10]", {{"w1", {16, 3, 1, 1}}, {"w2", {16, 1, 3, 3}}}},
      // MobileNetV3's HardSwish before a 5x5 window, stride 2, asymmetric padding; ReLU after.
      {"hardswish_k5_s2", R"(  %a: f32[1,20,13,13] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %h: f32[1,20,13,13] = HardSwish(%a) name="hswish"
  %d: f32[1,20,6,7] = Conv(%h, %w2, %b2) {kernel_shape=[5,5], pads=[1,2,2,3], strides=[2,2], group=20} name="dw"
  %y: f32[1,20,6,7] = Relu(%d) name="relu2"
)", "%x: f32[1,7,13,13]", {{"w1", {20, 7, 1, 1}}, {"b1", {20}}, {"w2", {20, 1, 5, 5}}, {"b2", {20}}}},
      // EfficientNet's SiLU (x * sigmoid(x)) on both sides.
      {"silu_both", R"(  %a: f32[1,24,8,8] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %s: f32[1,24,8,8] = Sigmoid(%a) name="sig1"
  %m: f32[1,24,8,8] = Mul(%a, %s) name="silu1"
  %d: f32[1,24,8,8] = Conv(%m, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], group=24} name="dw"
  %t: f32[1,24,8,8] = Sigmoid(%d) name="sig2"
  %y: f32[1,24,8,8] = Mul(%d, %t) name="silu2"
)", "%x: f32[1,10,8,8]", {{"w1", {24, 10, 1, 1}}, {"b1", {24}}, {"w2", {24, 1, 3, 3}}, {"b2", {24}}}},
      // SiLU before a stride-2 conv: the expanded plane staged with its SiLU once per element
      // (a plane, or with no plane budget a row at a time) before the phases copy it.
      {"silu_s2", R"(  %a: f32[1,12,10,11] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %s: f32[1,12,10,11] = Sigmoid(%a) name="sig1"
  %m: f32[1,12,10,11] = Mul(%a, %s) name="silu1"
  %y: f32[1,12,5,6] = Conv(%m, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2], group=12} name="dw"
)", "%x: f32[1,6,10,11]", {{"w1", {12, 6, 1, 1}}, {"b1", {12}}, {"w2", {12, 1, 3, 3}}, {"b2", {12}}}},
      // 32 expanded channels over narrow rows: the channel-blocked stencil (two blocks of 16),
      // SiLU before and after, a 5x5 window.
      {"silu_channel_blocks", R"(  %a: f32[1,32,7,7] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %s: f32[1,32,7,7] = Sigmoid(%a) name="sig1"
  %m: f32[1,32,7,7] = Mul(%a, %s) name="silu1"
  %d: f32[1,32,7,7] = Conv(%m, %w2, %b2) {kernel_shape=[5,5], pads=[2,2,2,2], group=32} name="dw"
  %t: f32[1,32,7,7] = Sigmoid(%d) name="sig2"
  %y: f32[1,32,7,7] = Mul(%d, %t) name="silu2"
)", "%x: f32[1,6,7,7]", {{"w1", {32, 6, 1, 1}}, {"b1", {32}}, {"w2", {32, 1, 5, 5}}, {"b2", {32}}}},
      // After the depthwise conv: a residual of the expanded shape and a per-channel scale; a
      // dilated window; two outputs.
      {"residual_dilated_two_outputs", R"(  %a: f32[1,9,7,6] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %r: f32[1,9,7,6] = Relu(%a) name="relu1"
  %d: f32[1,9,7,6] = Conv(%r, %w2) {kernel_shape=[3,3], pads=[2,2,2,2], dilations=[2,2], group=9} name="dw"
  %y: f32[1,9,7,6] = Add(%d, %res) name="res"
  %z: f32[1,9,7,6] = Mul(%y, %sc) name="scale"
)", "%x: f32[1,4,7,6], %res: f32[1,9,7,6]", {{"w1", {9, 4, 1, 1}}, {"b1", {9}}, {"w2", {9, 1, 3, 3}}, {"sc", {1, 9, 1, 1}}}, "%y, %z"},
  };
}

loop::Schedule blocks_of_one_tile() {
  loop::Schedule s;
  s.pointwise_depthwise_bytes = 1;  // one micro-kernel row block of channels per block
  s.parallel_min_work = 1;
  return s;
}

loop::Schedule odd_tiles() {
  loop::Schedule s;
  s.contraction.mr = 3;  // blocks of 3 channels, the rest of a block in a shorter call
  s.contraction.nr = 12;
  s.pointwise_depthwise_bytes = 1;
  s.stage_plane_bytes = 0;  // a strided conv's costly input staged a row at a time
  return s;
}

TEST(LowerPointwiseDepthwise, MatchesReference) {
  KernelBatch compiled, compiled_strict;
  for (const PwDwCase& c : cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    const FusionGroup grp = case_group(*g, c.name);
    ASSERT_TRUE(loop::detail::is_pointwise_depthwise(grp));
    for (unsigned seed : {3u, 4u}) {
      // Seed 4 with NaN, inf and huge inputs (through the 1x1 conv into the padded planes).
      const TensorMap inputs = random_inputs(*g, seed, {}, seed == 4);
      auto values = run_reference_values(*g, inputs);
      int mode = 0;
      loop::Schedule strict;
      strict.set_strict_numerics();
      for (const loop::Schedule& sched : {loop::Schedule{}, blocks_of_one_tile(), odd_tiles(), strict}) {
        SCOPED_TRACE(cat("schedule ", mode));
        auto lg = loop::lower_group(grp, cat(c.name, "_", seed, "_", mode++), sched);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        EXPECT_EQ(lg.emitter, "pointwise-depthwise");
        const std::string nest = loop::print_kernel(*lg.kernel);
        // The expanded channels live in the block buffer only: no buffer of the expanded tensor.
        EXPECT_NE(nest.find("allocate kiln_pu"), std::string::npos) << nest;
        EXPECT_EQ(nest.find("kiln_mid"), std::string::npos) << nest;
        // 16k channels over rows narrower than 16: the stencil in channel blocks.
        const bool blocks = c.name == "silu_channel_blocks" || c.name == "relu_s2_batch2_no_bias";
        EXPECT_EQ(nest.find("kiln_dbp") != std::string::npos, blocks) << nest;
        // A SiLU before the depthwise conv is staged a plane at a time; with no plane budget a
        // stride-2 conv's a row at a time, a stride-1 conv's straight into its plane.
        const bool costly = c.name == "silu_s2" || c.name == "silu_both";
        EXPECT_EQ(nest.find("kiln_xplane") != std::string::npos, costly && sched.stage_plane_bytes > 0) << nest;
        EXPECT_EQ(nest.find("kiln_xline") != std::string::npos, c.name == "silu_s2" && sched.stage_plane_bytes == 0) << nest;
        auto got = testing::interpret_group(*lg.kernel, grp, values);
        for (size_t o = 0; o < got.size(); ++o) {
          if (sched.reorder_sums)
            EXPECT_EQ(testing::within_max_magnitude(got[o], values.at(grp.outputs[o])), "") << "output " << o;
          else
            EXPECT_EQ(testing::bit_exact(got[o], values.at(grp.outputs[o])), "") << "output " << o;
        }
        (sched.reorder_sums ? compiled : compiled_strict).add(std::move(*lg.kernel), grp, values);
      }
    }
  }
  compiled.check("pointwise_depthwise", /*contract=*/true);
  compiled_strict.check("pointwise_depthwise_strict", /*contract=*/false, /*bits=*/true);
}

// The expanded channels' blocks are shared evenly among the threads: 240 channels with room for
// 72 per block were blocks of 72, 72, 72 and 24, 144 channels on one of two threads and 96 on the
// other; blocks of 40 give each thread 120. One thread keeps the largest block. Either way the
// kernel matches the reference.
TEST(LowerPointwiseDepthwise, ChannelBlocksShareTheThreadsEvenly) {
  const PwDwCase c{"wide", R"(  %a: f32[1,240,4,4] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %r: f32[1,240,4,4] = Relu(%a) name="relu1"
  %y: f32[1,240,4,4] = Conv(%r, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], group=240} name="dw"
)", "%x: f32[1,5,4,4]", {{"w1", {240, 5, 1, 1}}, {"b1", {240}}, {"w2", {240, 1, 3, 3}}, {"b2", {240}}}};
  auto g = make_graph(c);
  const FusionGroup grp = case_group(*g, c.name);
  auto values = run_reference_values(*g, random_inputs(*g, 3, {}, false));
  for (int threads : {1, 2}) {
    SCOPED_TRACE(cat(threads, " threads"));
    loop::Schedule s;
    s.threads = threads;
    s.pointwise_depthwise_bytes = 72 * 16 * int64_t(sizeof(float));  // 72 channels of 4x4
    s.stencil_channel_blocks_below = 0;                                // channels one at a time
    auto lg = loop::lower_group(grp, cat("wide_", threads), s);
    ASSERT_TRUE(lg.kernel) << lg.reason;
    const std::string nest = loop::print_kernel(*lg.kernel);
    EXPECT_NE(nest.find(threads == 1 ? "for kiln_pt in [0, 4)" : "for kiln_pt in [0, 6)"), std::string::npos) << nest;
    auto got = testing::interpret_group(*lg.kernel, grp, values);
    EXPECT_EQ(testing::within_max_magnitude(got[0], values.at(grp.outputs[0])), "");
  }
}

TEST(LowerPointwiseDepthwise, Refusals) {
  const std::string consts_body = R"(  %a: f32[1,8,6,6] = Conv(%x, %w1) {kernel_shape=[1,1]} name="pw"
  %r: f32[1,8,6,6] = Relu(%a) name="relu1"
  %y: f32[1,8,6,6] = Conv(%r, %w2) {kernel_shape=[3,3], pads=[1,1,1,1], group=8} name="dw"
)";
  const std::vector<std::pair<std::string, Shape>> consts = {{"w1", {8, 3, 1, 1}}, {"w2", {8, 1, 3, 3}}};
  struct Refused {
    PwDwCase c;
    loop::Schedule sched;
    std::string why;
  };
  loop::Schedule off;
  off.pointwise_depthwise_bytes = 0;
  const std::vector<Refused> refused = {
      {{"off", consts_body, "%x: f32[1,3,6,6]", consts}, off, "keeps them apart"},
      {{"expanded_output", consts_body, "%x: f32[1,3,6,6]", consts, "%y, %r"}, {}, "needed outside the kernel"},
      {{"weights_input", consts_body, "%x: f32[1,3,6,6], %w1: f32[8,3,1,1]", {{"w2", {8, 1, 3, 3}}}}, {}, "not constant"},
      {{"strided_pw", R"(  %a: f32[1,8,3,3] = Conv(%x, %w1) {kernel_shape=[1,1], strides=[2,2]} name="pw"
  %r: f32[1,8,3,3] = Relu(%a) name="relu1"
  %y: f32[1,8,3,3] = Conv(%r, %w2) {kernel_shape=[3,3], pads=[1,1,1,1], group=8} name="dw"
)", "%x: f32[1,3,6,6]", consts}, {}, "strided 1x1 conv"},
      {{"reduction_between", R"(  %ax = constant i64[1] [1]
  %a: f32[1,8,6,6] = Conv(%x, %w1) {kernel_shape=[1,1]} name="pw"
  %m: f32[1,1,6,6] = ReduceMean(%a, %ax) {keepdims=1} name="mean"
  %s: f32[1,8,6,6] = Sub(%a, %m) name="sub"
  %y: f32[1,8,6,6] = Conv(%s, %w2) {kernel_shape=[3,3], pads=[1,1,1,1], group=8} name="dw"
)", "%x: f32[1,3,6,6]", consts}, {}, "only elementwise ops"},
  };
  for (const auto& r : refused) {
    SCOPED_TRACE(r.c.name);
    auto g = make_graph(r.c);
    FusionGroup grp = case_group(*g, r.c.name);
    ASSERT_TRUE(loop::detail::is_pointwise_depthwise(grp));
    auto lg = loop::lower_group(grp, r.c.name, r.sched);
    EXPECT_FALSE(lg.kernel);
    EXPECT_NE(lg.reason.find(r.why), std::string::npos) << lg.reason;
  }
  // A depthwise conv feeding a 1x1 conv (the block's second half) is not this emitter's.
  auto g = make_graph({"dw_then_pw", R"(  %d: f32[1,8,6,6] = Conv(%x, %w2) {kernel_shape=[3,3], pads=[1,1,1,1], group=8} name="dw"
  %r: f32[1,8,6,6] = Relu(%d) name="relu"
  %y: f32[1,4,6,6] = Conv(%r, %w1) {kernel_shape=[1,1]} name="pw"
)", "%x: f32[1,8,6,6]", {{"w1", {4, 8, 1, 1}}, {"w2", {8, 1, 3, 3}}}});
  EXPECT_FALSE(loop::detail::is_pointwise_depthwise(case_group(*g, "dw_then_pw")));
}

// The partitioner fuses an inverted-residual block's expansion into its depthwise conv (the
// expanded tensor is the block's biggest), under --strict-fp too.
TEST(LowerPointwiseDepthwise, PartitionerFormsIt) {
  PwDwCase c{"block", R"(  %a: f32[1,96,28,28] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %r: f32[1,96,28,28] = Clip(%a, %lo, %hi) name="clip1"
  %d: f32[1,96,28,28] = Conv(%r, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], group=96} name="dw"
  %y: f32[1,96,28,28] = Clip(%d, %lo, %hi) name="clip2"
)", "%x: f32[1,16,28,28]", {{"w1", {96, 16, 1, 1}}, {"b1", {96}}, {"w2", {96, 1, 3, 3}}, {"b2", {96}}, {"lo", {}}, {"hi", {}}}};
  auto g = make_graph(c);
  FusionPlan plan = partition(*g);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].emitter, "pointwise-depthwise");
  FusionOptions strict;
  loop::Schedule s = strict.schedule_or_default();
  s.set_strict_numerics();
  strict.schedule = s;
  FusionPlan strict_plan = partition(*g, strict);
  ASSERT_EQ(strict_plan.groups.size(), 1u);
  EXPECT_EQ(strict_plan.groups[0].emitter, "pointwise-depthwise");
}

// The fused kernel's expansion runs over column panels of whole vectors: over a 7x7 map it
// computes 64 positions for 49 (KernelAnalysis::padding_flops). MobileNetV2's last blocks (160 ->
// 960 over 7x7) lose more to that than fusing saves, so the partitioner keeps the expansion and
// the depthwise conv apart and says why; the same widths over 28x28 (no padding) stay fused.
TEST(LowerPointwiseDepthwise, TilePaddingKeepsSmallMapsApart) {
  auto block = [](int64_t hw) {
    const std::string s = std::to_string(hw);
    const std::string m = "[1,960," + s + "," + s + "]";
    return PwDwCase{"block" + s, "  %a: f32" + m + R"( = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="pw"
  %r: f32)" + m + R"( = Clip(%a, %lo, %hi) name="clip1"
  %d: f32)" + m + R"( = Conv(%r, %w2, %b2) {kernel_shape=[3,3], pads=[1,1,1,1], group=960} name="dw"
  %y: f32)" + m + R"( = Clip(%d, %lo, %hi) name="clip2"
)", "%x: f32[1,160," + s + "," + s + "]",
                    {{"w1", {960, 160, 1, 1}}, {"b1", {960}}, {"w2", {960, 1, 3, 3}}, {"b2", {960}}, {"lo", {}}, {"hi", {}}}};
  };
  auto small = make_graph(block(7));
  FusionGroup grp = case_group(*small, "block7");
  const loop::KernelAnalysis a = loop::analyze_group(grp, loop::Schedule{});
  ASSERT_TRUE(a.ok) << a.reason;
  EXPECT_EQ(a.emitter, "pointwise-depthwise");
  EXPECT_DOUBLE_EQ(a.padding_flops, 2.0 * 960 * 160 * (64 - 49));
  FusionPlan apart = partition(*small);
  EXPECT_EQ(apart.groups.size(), 2u);
  bool said = false;
  for (const auto& d : apart.rejected) said = said || d.reason.find("MFLOP of tile padding") != std::string::npos;
  EXPECT_TRUE(said) << "the padding is the reason kiln explain shows";
  auto big = make_graph(block(28));
  FusionPlan fused = partition(*big);
  ASSERT_EQ(fused.groups.size(), 1u);
  EXPECT_EQ(fused.groups[0].emitter, "pointwise-depthwise");
}

}  // namespace
}  // namespace kiln
