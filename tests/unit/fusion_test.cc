// Fusion partitioner: small IR graphs in, kernel counts and group contents out (tinygrad-style
// kernel-count tests), and DoNotFuse* cases asserting the refusal reason a user would read.
// Every case also executes the plan kernel by kernel and checks the outputs are bit-identical to
// the unfused reference run.
#include <gtest/gtest.h>

#include <random>

#include "fusion/group_graph.h"
#include "fusion/partitioner.h"
#include "fusion/plan_executor.h"
#include "ir/parser.h"
#include "reference/op_registry.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

TensorMap random_inputs(const Graph& g) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  TensorMap m;
  for (Value* in : g.inputs()) {
    Tensor t(in->dtype(), in->shape());
    if (in->dtype() == DType::Float32)
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    m[in->name()] = t;
  }
  return m;
}

// Partitions g, checks the plan computes bit-identical outputs, returns it.
FusionPlan plan_and_check(const Graph& g, const FusionOptions& o = {}) {
  FusionPlan p = partition(g, o);
  auto in = random_inputs(g);
  auto want = run_reference(g, in);
  auto got = run_plan_reference(g, p, in);
  for (auto& [name, t] : want) EXPECT_TRUE(got.at(name).bitwise_equal(t)) << "output " << name << " differs";
  return p;
}

std::string reasons(const FusionPlan& p) {
  std::string r;
  for (const auto& x : p.rejected) r += x.producer + " -> " + x.consumer + ": " + x.reason + "\n";
  return r;
}


// A view left on its own between two kernels that fuse with nothing (recurrent layers with weights
// given at run time: library kernels): both of
// its edges are reported with the refusal, naming the view (they used to be left out, so a
// boundary there had no reason at all).
TEST(Fusion, EdgesOfAViewBetweenKernelsAreExplained) {
  auto g = ir(R"(  %y1: f32[3,1,1,2] = RNN(%x, %w1, %r1) {hidden_size=2} name="rnn1"
  %ax = constant i64[1] [1]
  %s: f32[3,1,2] = Squeeze(%y1, %ax) name="squeeze"
  %y: f32[3,1,1,2] = RNN(%s, %w2, %r2) {hidden_size=2} name="rnn2"
)",
              "%x: f32[3,1,2], %w1: f32[1,2,2], %r1: f32[1,2,2], %w2: f32[1,2,2], %r2: f32[1,2,2]", "%y");
  auto p = plan_and_check(*g);
  const std::string why = reasons(p);
  EXPECT_NE(why.find("rnn1 -> squeeze: "), std::string::npos) << why;
  EXPECT_NE(why.find("squeeze -> rnn2: "), std::string::npos) << why;
  EXPECT_NE(why.find("RNN 'rnn2'"), std::string::npos) << why;  // the refusal that kept it apart
}

TEST(Fusion, ElementwiseChainIsOneKernel) {
  auto g = ir(R"(  %a: f32[4,16] = Relu(%x) name="relu"
  %b: f32[4,16] = Exp(%a) name="exp"
  %y: f32[4,16] = Add(%b, %x) name="add"
)",
              "%x: f32[4,16]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 1) << reasons(p);
  EXPECT_EQ(p.intermediate_bytes_fused, 0);
  EXPECT_EQ(p.intermediate_bytes_unfused, 2 * 4 * 16 * 4);
}

TEST(Fusion, DiamondIsOneKernel) {
  auto g = ir(R"(  %a: f32[4,16] = Sigmoid(%x) name="a"
  %b: f32[4,16] = Tanh(%x) name="b"
  %c: f32[4,16] = Mul(%a, %b) name="c"
  %y: f32[4,16] = Add(%c, %a) name="d"
)",
              "%x: f32[4,16]", "%y");
  EXPECT_EQ(plan_and_check(*g).kernel_count(), 1);
}

TEST(Fusion, NoFusionGivesOneKernelPerOp) {
  auto g = ir(R"(  %a: f32[4,16] = Relu(%x) name="relu"
  %b: f32[4,16] = Reshape(%a, %s) name="view"
  %y: f32[4,16] = Exp(%b) name="exp"
)",
              "%x: f32[4,16], %s: i64[2]", "%y");
  FusionOptions o;
  o.enabled = false;
  FusionPlan p = partition(*g, o);
  EXPECT_EQ(p.kernel_count(), 2);  // the Reshape is a view: no kernel
  EXPECT_EQ(p.accepted_fusions, 0);
}

TEST(Fusion, FuelStopsAfterNFusions) {
  auto g = ir(R"(  %a: f32[4,16] = Relu(%x) name="a"
  %b: f32[4,16] = Exp(%a) name="b"
  %c: f32[4,16] = Neg(%b) name="c"
  %y: f32[4,16] = Abs(%c) name="d"
)",
              "%x: f32[4,16]", "%y");
  FusionOptions o;
  o.fuel = 1;
  FusionPlan p = plan_and_check(*g, o);
  EXPECT_EQ(p.accepted_fusions, 1);
  EXPECT_EQ(p.kernel_count(), 3);
  EXPECT_NE(reasons(p).find("fusion fuel exhausted"), std::string::npos) << reasons(p);
}

TEST(Fusion, ConvBiasReluEpilogue) {
  auto g = ir(R"(  %w = constant f32[2,3,1,1] [1, 2, 3, 4, 5, 6]
  %bias = constant f32[2,1,1] [0.5, -0.5]
  %c: f32[1,2,4,4] = Conv(%x, %w) {kernel_shape=[1,1]} name="conv"
  %a: f32[1,2,4,4] = Add(%c, %bias) name="bias"
  %r: f32[1,2,4,4] = Add(%a, %res) name="residual"
  %y: f32[1,2,4,4] = Relu(%r) name="relu"
)",
              "%x: f32[1,3,4,4], %res: f32[1,2,4,4]", "%y");
  auto p = plan_and_check(*g);
  ASSERT_EQ(p.kernel_count(), 1) << reasons(p);
  EXPECT_EQ(p.groups[0].name, "fused_conv_add_relu_0");
  EXPECT_EQ(p.groups[0].kind, GroupKind::Contraction);
}

// A prologue op re-runs each time the contraction reads the operand it reaches, also through
// members in between: here Exp reaches the MatMul's left operand through a Concat, and the left
// operand is packed once per panel of 8192 columns (4 panels). Counting only the op feeding the
// contraction directly priced it as free (a bilinear resize before a Concat into a conv).
TEST(Fusion, PrologueRecomputeCountsOpsBehindAConcat) {
  auto g = ir(R"(  %e: f32[8,32] = Exp(%x) name="exp"
  %c: f32[8,64] = Concat(%e, %s) {axis=1} name="cat"
  %y: f32[8,32768] = MatMul(%c, %w) name="mm"
)",
              "%x: f32[8,32], %s: f32[8,32], %w: f32[64,32768]", "%y");
  GroupGraph gg(*g);
  Members all, without_exp;
  for (const Node* n : gg.nodes()) {
    all.push_back(gg.index(n));
    if (n->op_type() != "Exp") without_exp.push_back(gg.index(n));
  }
  std::sort(all.begin(), all.end());
  std::sort(without_exp.begin(), without_exp.end());
  const Target t = Target::default_target();
  EXPECT_EQ(gg.cost_of(without_exp, {}, t).recompute_us, 0.0);
  EXPECT_GT(gg.cost_of(all, {}, t).recompute_us, 0.0);
}

TEST(Fusion, SoftmaxSpelledOutIsOneKernel) {
  auto g = ir(R"(  %ax = constant i64[1] [-1]
  %m: f32[8,32,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %s: f32[8,32,32] = Sub(%x, %m) name="sub"
  %e: f32[8,32,32] = Exp(%s) name="exp"
  %z: f32[8,32,1] = ReduceSum(%e, %ax) {keepdims=1} name="sum"
  %y: f32[8,32,32] = Div(%e, %z) name="div"
)",
              "%x: f32[8,32,32]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 1) << reasons(p);
}

TEST(Fusion, LayerNormAsPyTorchSpellsItIsOneKernel) {
  auto g = ir(R"(  %ax = constant i64[1] [-1]
  %two = constant f32[] [2]
  %eps = constant f32[] [1e-05]
  %gamma = constant f32[64] [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
  %mean: f32[16,1] = ReduceMean(%x, %ax) {keepdims=1} name="mean"
  %d: f32[16,64] = Sub(%x, %mean) name="sub"
  %sq: f32[16,64] = Pow(%d, %two) name="pow"
  %var: f32[16,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[16,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[16,1] = Sqrt(%ve) name="sqrt"
  %n: f32[16,64] = Div(%d, %sd) name="div"
  %y: f32[16,64] = Mul(%n, %gamma) name="scale"
)",
              "%x: f32[16,64]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 1) << reasons(p);
  EXPECT_EQ(p.groups[0].kind, GroupKind::Reduction);
}

TEST(Fusion, AttentionIsOneKernel) {
  auto g = ir(R"(  %ax = constant i64[1] [-1]
  %scale = constant f32[] [0.125]
  %kt: f32[4,16,32] = Transpose(%k) {perm=[0,2,1]} name="kT"
  %s: f32[4,32,32] = MatMul(%q, %kt) name="qk"
  %ss: f32[4,32,32] = Mul(%s, %scale) name="scale"
  %m: f32[4,32,1] = ReduceMax(%ss, %ax) {keepdims=1} name="max"
  %d: f32[4,32,32] = Sub(%ss, %m) name="sub"
  %e: f32[4,32,32] = Exp(%d) name="exp"
  %z: f32[4,32,1] = ReduceSum(%e, %ax) {keepdims=1} name="sum"
  %p: f32[4,32,32] = Div(%e, %z) name="softmax"
  %y: f32[4,32,16] = MatMul(%p, %v) name="pv"
)",
              "%q: f32[4,32,16], %k: f32[4,32,16], %v: f32[4,32,16]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 1) << reasons(p);
  EXPECT_EQ(p.intermediate_bytes_fused, 0);
}

TEST(Fusion, SiblingConvsReadingOneInputShareAKernel) {
  auto g = ir(R"(  %w1 = constant f32[2,3,1,1] [1, 2, 3, 4, 5, 6]
  %w2 = constant f32[2,3,1,1] [6, 5, 4, 3, 2, 1]
  %a: f32[1,2,4,4] = Conv(%x, %w1) {kernel_shape=[1,1]} name="conv_a"
  %b: f32[1,2,4,4] = Conv(%x, %w2) {kernel_shape=[1,1]} name="conv_b"
  %y: f32[1,2,4,4] = Relu(%a) name="relu"
)",
              "%x: f32[1,3,4,4]", "%y, %b");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 1) << reasons(p);
}

TEST(Fusion, DoNotFuseSiblingConvsBeyondRegisterLimit) {
  // A 1x1 and a 3x3 conv of one input (ResNet's downsample and first conv) need a tile each.
  auto g = ir(R"(  %w1 = constant f32[2,3,1,1] [1, 2, 3, 4, 5, 6]
  %w2 = constant f32[2,3,3,3] [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6]
  %a: f32[1,2,4,4] = Conv(%x, %w1) {kernel_shape=[1,1]} name="conv_a"
  %b: f32[1,2,4,4] = Conv(%x, %w2) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv_b"
)",
              "%x: f32[1,3,4,4]", "%a, %b");
  EXPECT_EQ(plan_and_check(*g).kernel_count(), 1);  // x86-avx512: 2 x (12 + 3) = 30 of 32 registers
  FusionOptions o;
  o.target = *Target::by_name("x86-avx2");  // 16 registers
  auto p = partition(*g, o);
  EXPECT_EQ(p.kernel_count(), 2);
}

TEST(Fusion, DoNotFuseOpaqueOps) {
  // Hardmax as a graph op is opaque to the partitioner (the lowering pipeline decomposes it before
  // fusion; here it is partitioned as given): a library kernel.
  auto g = ir(R"(  %h: f32[4,32] = Hardmax(%x) name="hardmax"
  %y: f32[4,32] = Relu(%h) name="relu"
)",
              "%x: f32[4,32]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 2);
  EXPECT_NE(reasons(p).find("hardmax -> relu: Hardmax 'hardmax' has no generated code"), std::string::npos) << reasons(p);
  EXPECT_EQ(p.library_kernel_count(), 1);
}

TEST(Fusion, LongTopKIsAKernelOfItsOwn) {
  // Rows of 32: longer than TopK's unrolled selection takes, so the select emitter's kernel, which
  // the code generator refuses to fuse (the one analysis says so, not a rule of the partitioner).
  auto g = ir(R"(  %k = constant i64[1] [2]
  %v: f32[4,2], %i: i64[4,2] = TopK(%x, %k) name="topk"
  %y: f32[4,2] = Relu(%v) name="relu"
)",
              "%x: f32[4,32]", "%y, %i");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 2);
  EXPECT_EQ(p.library_kernel_count(), 0);
  EXPECT_NE(reasons(p).find("topk -> relu: code generation refuses the fused kernel: TopK 'topk' selects from rows "
                            "longer than 8 elements"),
            std::string::npos)
      << reasons(p);
}

TEST(Fusion, DoNotFuseReductionsOverDifferentAxes) {
  auto g = ir(R"(  %a1 = constant i64[1] [1]
  %a2 = constant i64[1] [2]
  %s: f32[2,1,8] = ReduceSum(%x, %a1) {keepdims=1} name="sum_rows"
  %d: f32[2,4,8] = Sub(%x, %s) name="center"
  %y: f32[2,4,1] = ReduceSum(%d, %a2) {keepdims=1} name="sum_cols"
)",
              "%x: f32[2,4,8]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 2) << reasons(p);
  EXPECT_NE(reasons(p).find("code generation refuses the fused kernel: the group's reductions reduce different rows"),
            std::string::npos)
      << reasons(p);
}

TEST(Fusion, DoNotFuseOverlappingPoolWithItsProducer) {
  auto g = ir(R"(  %r: f32[1,2,9,9] = Relu(%x) name="relu"
  %y: f32[1,2,4,4] = MaxPool(%r) {kernel_shape=[3,3], strides=[2,2]} name="pool"
)",
              "%x: f32[1,2,9,9]", "%y");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 2);
  EXPECT_NE(reasons(p).find("windows overlap"), std::string::npos) << reasons(p);
}

TEST(Fusion, DoNotFuseAcrossAnOpaqueKernel) {
  // relu → topk → add and relu → add: fusing relu with add would need topk in between (rows of
  // 32: the select emitter's kernel of its own, longer than TopK's unrolled selection takes).
  auto g = ir(R"(  %k = constant i64[1] [32]
  %r: f32[4,32] = Relu(%x) name="relu"
  %v: f32[4,32], %i: i64[4,32] = TopK(%r, %k) name="topk"
  %y: f32[4,32] = Add(%r, %v) name="add"
)",
              "%x: f32[4,32]", "%y, %i");
  auto p = plan_and_check(*g);
  EXPECT_EQ(p.kernel_count(), 3) << reasons(p);
  EXPECT_NE(reasons(p).find("relu -> add: fusing would create a cycle"), std::string::npos) << reasons(p);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(OpKindTable, EveryRegisteredOpHasAKind) {
  for (const auto& op : OpRegistry::global().names())
    EXPECT_TRUE(op_kind_of_type(op).has_value()) << op << " has no OpKind in src/fusion/op_kind.cc";
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// MatMul → GELU-like → MatMul chains fuse only while the intermediate rows fit on chip: a
// 512-wide hidden layer does on the default target, a 4096-wide one does not.
std::unique_ptr<Graph> mlp(int hidden) {
  std::string h = std::to_string(hidden);
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::Float32, {64, 32}});
  Value* w1 = g->add_constant("w1", Tensor(DType::Float32, {32, hidden}));
  Value* w2 = g->add_constant("w2", Tensor(DType::Float32, {hidden, 32}));
  Value* a = g->add_value("a", {DType::Float32, {64, hidden}});
  Value* r = g->add_value("r", {DType::Float32, {64, hidden}});
  Value* y = g->add_value("y", {DType::Float32, {64, 32}});
  g->add_node("MatMul", {x, w1}, {a}, {}, "fc1");
  g->add_node("Tanh", {a}, {r}, {}, "act");
  g->add_node("MatMul", {r, w2}, {y}, {}, "fc2");
  g->add_output(y);
  return g;
}

TEST(Fusion, MlpChainWithSmallHiddenRowsIsOneKernel) { EXPECT_EQ(plan_and_check(*mlp(512)).kernel_count(), 1); }

// The on-chip budget of a chain is the schedule's (the one code generation uses): the partitioner
// learns that the rows do not fit from the chain lowering itself.
TEST(Fusion, DoNotFuseChainWhoseRowsDoNotFitOnChip) {
  FusionOptions small;
  small.schedule = loop::Schedule::for_target(small.target);
  small.schedule->chain.max_local_bytes = 8 * 1024;  // one row of 4096 floats is 16 KiB
  auto p = partition(*mlp(4096), small);
  EXPECT_EQ(p.kernel_count(), 2) << reasons(p);
  EXPECT_NE(reasons(p).find("code generation refuses the fused kernel: the rows of a chain of contractions take"),
            std::string::npos)
      << reasons(p);
  EXPECT_EQ(plan_and_check(*mlp(4096)).kernel_count(), 1);  // the default 2 MiB holds a tile
}

TEST(Fusion, GpuSharedMemoryLimitsRowFusion) {
  FusionOptions gpu;
  gpu.target = *Target::by_name("cuda-sm80");  // 48 KiB shared memory per block
  auto p = partition(*mlp(16384), gpu);        // one row of 16384 floats is 64 KiB
  EXPECT_EQ(p.kernel_count(), 2) << reasons(p);
  EXPECT_NE(reasons(p).find("more than the 49152"), std::string::npos) << reasons(p);
  EXPECT_EQ(partition(*mlp(1024), gpu).kernel_count(), 1);  // 8 rows of 4 KiB fit
}

}  // namespace
}  // namespace kiln
