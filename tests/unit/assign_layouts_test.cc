// Layout assignment (fusion/assign_layouts.h): which values between convs are stored channels-last
// with the next conv's padding around them, the graph it leaves (the IR before and after), and the
// compiled model against the reference: the producer's kernel stores the padded value (its border
// zeroed), the next conv reads it in place (no staging), residual Adds read it back.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "fusion/assign_layouts.h"
#include "fusion/partitioner.h"
#include "ir/printer.h"
#include "lower_group_test_util.h"
#include "loop/lower_group.h"
#include "runtime/executable.h"

namespace kiln {
namespace {

// A graph built conv by conv, weights random constants.
struct Net {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  std::mt19937 rng{7};
  int next = 0;

  Value* input(const Shape& s) { return g->add_input("x", {DType::Float32, s}); }
  Value* constant(const Shape& s) {
    std::normal_distribution<float> d(0.f, 0.1f);
    std::vector<float> v(size_t(shape_numel(s)));
    for (float& f : v) f = d(rng);
    return g->add_constant("w" + std::to_string(next++), Tensor::from_vector(v, s));
  }
  Value* op(const std::string& type, const std::vector<Value*>& in, const Shape& out, AttributeMap a = {}) {
    const std::string name = type + std::to_string(next++);
    Value* v = g->add_value(name, {DType::Float32, out});
    g->add_node(type, in, {v}, std::move(a), name);
    return v;
  }
  Value* conv(Value* x, int64_t cout, int64_t k, int64_t pad, int64_t stride = 1) {
    const Shape& s = x->shape();
    const int64_t h = (s[2] + 2 * pad - k) / stride + 1, w = (s[3] + 2 * pad - k) / stride + 1;
    return op("Conv", {x, constant({cout, s[1], k, k}), constant({cout})}, {s[0], cout, h, w},
              {{"kernel_shape", std::vector<int64_t>{k, k}},
               {"pads", std::vector<int64_t>{pad, pad, pad, pad}},
               {"strides", std::vector<int64_t>{stride, stride}}});
  }
  Value* relu(Value* x) { return op("Relu", {x}, x->shape()); }
  Value* add(Value* a, Value* b) { return op("Add", {a, b}, a->shape()); }
};

// Two residual blocks of 3x3 convs (ResNet's basic block) after a stem conv: the stem's output
// feeds a conv and the first residual Add; the second block's input a conv and its Add. `tail`
// reads the last block's output (a graph output, or a pool).
std::unique_ptr<Graph> residual_blocks(int64_t c, int64_t hw, bool pool_at_end = false, int64_t batch = 1) {
  Net n;
  Value* x = n.input({batch, c, hw, hw});
  Value* s = n.relu(n.conv(x, c, 3, 1));
  Value* b1 = n.relu(n.add(n.conv(n.relu(n.conv(s, c, 3, 1)), c, 3, 1), s));
  Value* b2 = n.relu(n.add(n.conv(n.relu(n.conv(b1, c, 3, 1)), c, 3, 1), b1));
  if (pool_at_end)
    b2 = n.op("MaxPool", {b2}, {1, c, hw / 2, hw / 2},
              {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}});
  n.g->add_output(b2);
  return std::move(n.g);
}

int count_layout_pads(const Graph& g) {
  int k = 0;
  for (const Node* nd : g.nodes()) k += is_layout_boundary(*nd);
  return k;
}

TEST(AssignLayouts, ValuesBetweenStrideOneConvsGoChannelsLast) {
  auto g = residual_blocks(32, 10);
  const std::vector<std::string> done = assign_layouts(*g, loop::Schedule{});
  // The stem's output, both blocks' inner values and the first block's output: every value a
  // conv produces and a stride-1 3x3 conv reads; not the graph output.
  EXPECT_EQ(done.size(), 4u);
  EXPECT_EQ(count_layout_pads(*g), 4);
  for (const Node* nd : g->nodes()) {
    if (is_layout_boundary(*nd)) {
      EXPECT_EQ(nd->output(0)->shape(), (Shape{1, 12, 12, 32})) << nd->name();  // NHWC, 1 of padding around
      EXPECT_EQ(nd->input(0)->producer()->op_type(), "Transpose");
    }
    // The convs reading a channels-last value read it unpadded, through a Transpose back.
    if (nd->op_type() == "Conv" && nd->input(0)->producer() && nd->input(0)->producer()->op_type() == "Transpose") {
      EXPECT_EQ(nd->attr_ints("pads"), (std::vector<int64_t>{0, 0, 0, 0})) << nd->name();
    }
  }
  EXPECT_EQ(g->outputs()[0]->shape(), (Shape{1, 32, 10, 10}));  // the model's layout
}

// The IR before and after, printed (constants elided): the golden of the rewrite.
TEST(AssignLayouts, PrintedRewriteOfOneValue) {
  Net n;
  Value* x = n.input({1, 16, 6, 6});
  Value* a = n.relu(n.conv(x, 16, 3, 1));
  n.g->add_output(n.conv(a, 16, 3, 1));
  assign_layouts(*n.g, loop::Schedule{});
  const std::string want = R"(graph main opset 17 (%x: f32[1,16,6,6]) -> (%Conv6) {
  %w0 = constant f32[16,16,3,3] elided
  %w1 = constant f32[16] elided
  %w4 = constant f32[16,16,3,3] elided
  %w5 = constant f32[16] elided
  %"Relu3/pads" = constant i64[8] [0, 1, 1, 0, 0, 1, 1, 0]
  %"Relu3/Conv6/starts" = constant i64[3] [0, 1, 1]
  %"Relu3/Conv6/ends" = constant i64[3] [16, 7, 7]
  %"Relu3/Conv6/axes" = constant i64[3] [1, 2, 3]
  %Conv2: f32[1,16,6,6] = Conv(%x, %w0, %w1) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} name="Conv2"
  %Relu3: f32[1,16,6,6] = Relu(%Conv2) name="Relu3"
  %"Relu3/nhwc": f32[1,6,6,16] = Transpose(%Relu3) {perm=[0,2,3,1]} name="Relu3/nhwc"
  %"Relu3/channels_last": f32[1,8,8,16] = Pad(%"Relu3/nhwc", %"Relu3/pads") {kiln_layout="channels_last", mode="constant"} name="Relu3/channels_last"
  %"Relu3/Conv6/nchw": f32[1,16,8,8] = Transpose(%"Relu3/channels_last") {perm=[0,3,1,2]} name="Relu3/Conv6/nchw"
  %"Relu3/Conv6/slice": f32[1,16,6,6] = Slice(%"Relu3/Conv6/nchw", %"Relu3/Conv6/starts", %"Relu3/Conv6/ends", %"Relu3/Conv6/axes") name="Relu3/Conv6/slice"
  %Conv6: f32[1,16,6,6] = Conv(%"Relu3/Conv6/slice", %w4, %w5) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[1,1]} name="Conv6"
}
)";
  // (The elided weights' hashes depend on the random numbers: left out.)
  const std::string got = std::regex_replace(print_graph(*n.g, PrintOptions{8}), std::regex(" hash=[0-9a-f]+"), "");
  EXPECT_EQ(got, want);
}

TEST(AssignLayouts, ValuesOtherReadersNeedKeepTheModelsLayout) {
  // Read by a pool: not given the layout (the pool would read it across positions).
  {
    auto g = residual_blocks(32, 8, /*pool_at_end=*/true);
    assign_layouts(*g, loop::Schedule{});
    for (const Node* nd : g->nodes())
      if (nd->op_type() == "MaxPool") {
        EXPECT_NE(nd->input(0)->producer()->op_type(), "Slice");
      }
  }
  // Read by a stride-2 conv, or by a conv of few input channels: staged as before.
  {
    Net n;
    Value* x = n.input({1, 32, 8, 8});
    Value* a = n.relu(n.conv(x, 32, 3, 1));
    n.g->add_output(n.conv(a, 32, 3, 1, 2));
    EXPECT_TRUE(assign_layouts(*n.g, loop::Schedule{}).empty());
  }
  // One position (squeeze-excitation's FCs as 1x1 convs): both layouts are the same memory.
  {
    Net n;
    Value* x = n.input({1, 32, 1, 1});
    n.g->add_output(n.conv(n.relu(n.conv(x, 32, 1, 0)), 32, 1, 0));
    EXPECT_TRUE(assign_layouts(*n.g, loop::Schedule{}).empty());
  }
  // A 1x1 conv that joins a depthwise conv (the pointwise-depthwise kernel reads the model's
  // layout): not a reader that takes the planes in place.
  {
    Net n;
    Value* x = n.input({1, 32, 8, 8});
    Value* a = n.relu(n.conv(x, 32, 3, 1));
    Value* e = n.relu(n.conv(a, 64, 1, 0));
    n.g->add_output(n.op("Conv", {e, n.constant({64, 1, 3, 3})}, {1, 64, 8, 8},
                         {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
                          {"group", int64_t(64)}}));
    EXPECT_TRUE(assign_layouts(*n.g, loop::Schedule{}).empty());
  }
  // Not under strict numerics (its convs take the channel-rows forms, which stage anyway).
  {
    auto g = residual_blocks(32, 8);
    loop::Schedule strict;
    strict.set_strict_numerics();
    EXPECT_TRUE(assign_layouts(*g, strict).empty());
    loop::Schedule off;
    off.channels_last_values = 0;
    EXPECT_TRUE(assign_layouts(*g, off).empty());
  }
}

// A value only 1x1 convs read (ResNet-50's bottleneck outputs over 28x28 and smaller) gets the
// layout without padding: the 1x1 conv's A is the value's positions, channels innermost.
TEST(AssignLayouts, PointwiseReadersTakeTheLayoutUnpadded) {
  Net n;
  Value* x = n.input({1, 32, 7, 7});
  Value* a = n.relu(n.conv(x, 64, 3, 1));
  Value* y = n.add(n.conv(a, 64, 1, 0), a);
  n.g->add_output(y);
  auto g = std::move(n.g);
  const TensorMap in = testing::random_inputs(*g, 5, {}, false);
  const TensorMap want = run_reference(*g, in);
  ASSERT_EQ(assign_layouts(*g, loop::Schedule{}).size(), 1u);
  for (const Node* nd : g->nodes())
    if (is_layout_boundary(*nd)) {
      EXPECT_EQ(nd->output(0)->shape(), (Shape{1, 7, 7, 64}));
    }
  runtime::BuildOptions o;
  auto ex = runtime::Executable::build(std::move(g), runtime::with_numerics(o));
  EXPECT_EQ(ex->plan().kernel_count(), 2);
  const TensorMap got = ex->run(in);
  const std::string out = ex->graph().outputs()[0]->name();
  EXPECT_EQ(testing::within_max_magnitude(got.at(out), want.at(out), 1e-5), "");
}

// A zero Pad after a conv whose nest stores by flat offset (16 output channels as the GEMM's rows)
// is not stored through the padded path: the conv's values went to their unshifted offsets and the
// Pad's interior was wrong (random-graph seed 319392: a Pad of the batch and channel axes too).
TEST(AssignLayouts, PaddedOutputOfAFlatStoringConvIsRightOrApart) {
  auto make = [] {
    Net n;
    Value* x = n.input({1, 4, 17, 17});
    Value* c = n.conv(x, 16, 1, 0);
    Value* pads = n.g->add_constant("pads", Tensor::from_vector(std::vector<int64_t>{2, 1, 0, 0, 3, 3, 0, 2}, {8}));
    n.g->add_output(n.op("Pad", {c, pads}, {6, 20, 17, 19}, {{"mode", std::string("constant")}}));
    return std::move(n.g);
  };
  auto g = make();
  const TensorMap in = testing::random_inputs(*g, 5, {}, false);
  const TensorMap want = run_reference(*g, in);
  runtime::BuildOptions o;
  auto ex = runtime::Executable::build(make(), runtime::with_numerics(o));
  const TensorMap got = ex->run(in);
  const std::string out = g->outputs()[0]->name();
  EXPECT_EQ(testing::within_max_magnitude(got.at(out), want.at(out), 1e-5), "");
}

// Compiled: as many kernels as convs (the Transposes and Pads fused into them), the convs that
// read a channels-last value stage nothing, and the outputs are the reference's. 256 channels
// are padded to a stride of 272 (channels_inner_stride); a batch of two.
TEST(AssignLayouts, CompiledBlocksMatchTheReferenceAndReadInPlace) {
  struct Case {
    int64_t c, hw, batch;
  };
  for (const Case cs : {Case{32, 10, 1}, Case{64, 7, 1}, Case{256, 4, 1}, Case{32, 6, 2}}) {
    SCOPED_TRACE("channels " + std::to_string(cs.c) + ", batch " + std::to_string(cs.batch));
    auto g = residual_blocks(cs.c, cs.hw, false, cs.batch);
    const TensorMap in = testing::random_inputs(*g, 5, {}, false);
    const TensorMap want = run_reference(*g, in);
    runtime::BuildOptions o;
    auto ex = runtime::Executable::build(residual_blocks(cs.c, cs.hw, false, cs.batch), runtime::with_numerics(o));
    EXPECT_EQ(count_layout_pads(ex->graph()), 4);
    EXPECT_EQ(ex->plan().kernel_count(), 5);
    int in_place = 0;
    for (const FusionGroup& grp : ex->plan().groups) {
      loop::LoweredGroup lg = loop::lower_group(grp, grp.name, loop::Schedule{});
      ASSERT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
      const std::string text = loop::print_kernel(*lg.kernel);
      in_place += text.find("kiln_xph") == std::string::npos;
    }
    EXPECT_EQ(in_place, 4) << "the convs after the stem read their planes in place";
    const TensorMap got = ex->run(in);
    const std::string out = g->outputs()[0]->name();
    EXPECT_EQ(testing::within_max_magnitude(got.at(out), want.at(out), 1e-5), "");
  }
}

}  // namespace
}  // namespace kiln
