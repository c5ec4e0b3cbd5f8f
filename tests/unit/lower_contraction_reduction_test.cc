// Loop lowering of contraction groups with row reductions over the trailing axes of the
// contraction's output (MatMul + bias + residual + LayerNorm as PyTorch exports it, MatMul +
// softmax, Conv + ReLU + GlobalAveragePool): each group lowers to one kernel (a local row per
// outer position, then the row passes), and the run agrees with the unfused reference through
// the loop-IR interpreter and through emit_c + JitModule. Plus the refusals (rows over 64 KiB,
// reductions over other axes) and the nest's shape.
#include <gtest/gtest.h>

#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <map>

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
using testing::random_inputs;

struct Case {
  std::string name, body, inputs, outputs;
  bool run_lowering = false;  // Softmax -> ReduceMax/Sub/Exp/ReduceSum/Div
  bool edge_values = true;    // NaN/inf/huge values among the random inputs
};

std::unique_ptr<Graph> make_graph(const Case& c) {
  auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (" + c.outputs + ") {\n" + c.body + "}\n");
  if (c.run_lowering) run_lowering(*g);
  return g;
}

const char* kLayerNorm = R"(  %ax = constant i64[1] [-1]
  %two = constant f32[] [2]
  %eps = constant f32[] [1e-05]
  %m: f32[2,3,16] = MatMul(%x, %w) name="mm"
  %a: f32[2,3,16] = Add(%m, %b) name="bias"
  %r: f32[2,3,16] = Add(%a, %res) name="residual"
  %mean: f32[2,3,1] = ReduceMean(%r, %ax) {keepdims=1} name="mean"
  %d: f32[2,3,16] = Sub(%r, %mean) name="sub"
  %sq: f32[2,3,16] = Pow(%d, %two) name="pow"
  %var: f32[2,3,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[2,3,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[2,3,1] = Sqrt(%ve) name="sqrt"
  %n: f32[2,3,16] = Div(%d, %sd) name="div"
  %s: f32[2,3,16] = Mul(%n, %g) name="gamma"
  %y: f32[2,3,16] = Add(%s, %be) name="beta"
)";
const char* kLayerNormInputs = "%x: f32[2,3,8], %w: f32[8,16], %b: f32[16], %res: f32[2,3,16], %g: f32[16], %be: f32[16]";

// LayerNorm (no affine) over the rows of %m: f32[20,16] into %y (uses %ax and %eps).
const std::string kLayerNormOfM = R"(  %mean: f32[20,1] = ReduceMean(%m, %ax) {keepdims=1} name="mean"
  %d: f32[20,16] = Sub(%m, %mean) name="sub"
  %sq: f32[20,16] = Mul(%d, %d) name="sq"
  %var: f32[20,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[20,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[20,1] = Sqrt(%ve) name="sqrt"
  %y: f32[20,16] = Div(%d, %sd) name="div"
)";

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"matmul_bias_residual_layernorm", kLayerNorm, kLayerNormInputs, "%y"},
      // The residual stream is a graph output too: stored by the first loop over the row.
      {"layernorm_residual_output", kLayerNorm, kLayerNormInputs, "%y, %r"},
      {"matmul_softmax", R"(  %sc = constant f32[] [0.125]
  %m: f32[2,4,12] = MatMul(%q, %k) name="mm"
  %s: f32[2,4,12] = Mul(%m, %sc) name="scale"
  %y: f32[2,4,12] = Softmax(%s) {axis=-1} name="softmax"
)", "%q: f32[2,4,8], %k: f32[2,8,12]", "%y", true},
      {"conv_relu_gap", R"(  %c: f32[2,4,6,6] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %r: f32[2,4,6,6] = Relu(%c) name="relu"
  %y: f32[2,4,1,1] = GlobalAveragePool(%r) name="gap"
)", "%x: f32[2,3,6,6], %w: f32[4,3,3,3], %b: f32[4]", "%y"},
      {"matmul_f16_softmax", R"(  %m: f16[3,10] = MatMul(%q, %k) name="mm"
  %y: f16[3,10] = Softmax(%m) {axis=-1} name="softmax"
)", "%q: f16[3,6], %k: f16[6,10]", "%y", true, false},
      // Big enough for a parallel outer loop (OpenMP threads, each with its own local row).
      {"parallel_layernorm", R"(  %ax = constant i64[1] [-1]
  %eps = constant f32[] [1e-05]
  %m: f32[64,128] = MatMul(%x, %w) name="mm"
  %mean: f32[64,1] = ReduceMean(%m, %ax) {keepdims=1} name="mean"
  %d: f32[64,128] = Sub(%m, %mean) name="sub"
  %sq: f32[64,128] = Mul(%d, %d) name="sq"
  %var: f32[64,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[64,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[64,1] = Sqrt(%ve) name="sqrt"
  %y: f32[64,128] = Div(%d, %sd) name="div"
)", "%x: f32[64,32], %w: f32[32,128]", "%y", false, false},
      // The residual broadcasts the 2-D MatMul output to [1, S, D] (a transformer's flattened
      // tokens); the rows are the same.
      {"broadcast_residual_layernorm", R"(  %ax = constant i64[1] [-1]
  %eps = constant f32[] [1e-05]
  %m: f32[6,16] = MatMul(%x, %w) name="mm"
  %r: f32[1,6,16] = Add(%m, %res) name="residual"
  %mean: f32[1,6,1] = ReduceMean(%r, %ax) {keepdims=1} name="mean"
  %d: f32[1,6,16] = Sub(%r, %mean) name="sub"
  %sq: f32[1,6,16] = Mul(%d, %d) name="sq"
  %var: f32[1,6,1] = ReduceMean(%sq, %ax) {keepdims=1} name="var"
  %ve: f32[1,6,1] = Add(%var, %eps) name="add_eps"
  %sd: f32[1,6,1] = Sqrt(%ve) name="sqrt"
  %y: f32[1,6,16] = Div(%d, %sd) name="div"
)", "%x: f32[6,8], %w: f32[8,16], %res: f32[1,6,16]", "%y, %m, %r"},
      // A classifier head: the pooled rows flattened (a reshape keeps the row's flat offsets).
      {"conv_gap_flatten", R"(  %c: f32[3,5,4,4] = Conv(%x, %w) {kernel_shape=[1,1]} name="conv"
  %r: f32[3,5,4,4] = Relu(%c) name="relu"
  %p: f32[3,5,1,1] = GlobalAveragePool(%r) name="gap"
  %y: f32[3,5] = Flatten(%p) {axis=1} name="flatten"
)", "%x: f32[3,2,4,4], %w: f32[5,2,1,1]", "%y"},
      // The raw product read by the reduction directly; per-row output only.
      {"matmul_rowmax", R"(  %ax = constant i64[1] [1]
  %m: f32[5,7] = MatMul(%x, %w) name="mm"
  %y: f32[5] = ReduceMax(%m, %ax) {keepdims=0} name="max"
)", "%x: f32[5,3], %w: f32[3,7]", "%y"},
      // Window attention's scores (Swin): a scaled Q, K^T by a Transpose, both computed in the
      // kernel and batched over windows and heads, a bias broadcast over the windows, softmax.
      // Tiled rows: one GEMM per batch position, B packed per batch, A per block (case 9).
      {"window_attention_scores", R"(  %sc = constant f32[] [0.35]
  %qs: f32[2,3,5,8] = Mul(%q, %sc) name="scale"
  %kt: f32[2,3,8,12] = Transpose(%k) {perm=[0,1,3,2]} name="kt"
  %m: f32[2,3,5,12] = MatMul(%qs, %kt) name="mm"
  %a: f32[2,3,5,12] = Add(%m, %bias) name="bias"
  %y: f32[2,3,5,12] = Softmax(%a) {axis=-1} name="softmax"
)", "%q: f32[2,3,5,8], %k: f32[2,3,12,8], %bias: f32[3,5,12]", "%y", true},
      // B broadcast over A's batch dims ([1, 3, ...] against [2, 3, ...]): packed per batch.
      {"broadcast_b_rowmax", R"(  %ax = constant i64[1] [-1]
  %m: f32[2,3,5,12] = MatMul(%x, %w) name="mm"
  %y: f32[2,3,5,1] = ReduceMax(%m, %ax) {keepdims=1} name="max"
)", "%x: f32[2,3,5,7], %w: f32[1,3,7,12]", "%y"},
      // A LayerNorm tail as A's prologue, then MatMul by a constant-shaped [K, N] input and a
      // LayerNorm over its rows (Swin's patch merging): A packed per block of rows.
      {"prologue_matmul_layernorm", R"(  %ax = constant i64[1] [-1]
  %eps = constant f32[] [1e-05]
  %xs: f32[20,9] = Mul(%x, %g) name="gamma"
  %xb: f32[20,9] = Add(%xs, %be) name="beta"
  %m: f32[20,16] = MatMul(%xb, %w) name="mm"
)" + kLayerNormOfM, "%x: f32[20,9], %g: f32[9], %be: f32[9], %w: f32[9,16]", "%y"},
      // A read transposed through an elementwise prologue (channels-first to tokens, then an
      // activation and a per-channel scale: SegFormer's Mix-FFN GELU after its depthwise conv): A
      // packed per block by one transposing copy and the prologue applied in place.
      {"transposed_prologue_matmul_layernorm", R"(  %ax = constant i64[1] [-1]
  %eps = constant f32[] [1e-05]
  %xt: f32[20,9] = Transpose(%x) {perm=[1,0]} name="to_tokens"
  %xa: f32[20,9] = Tanh(%xt) name="act"
  %xs: f32[20,9] = Mul(%xa, %xt) name="gate"
  %xg: f32[20,9] = Mul(%xs, %g) name="per_channel"
  %m: f32[20,16] = MatMul(%xg, %w) name="mm"
)" + kLayerNormOfM, "%x: f32[9,20], %g: f32[9], %w: f32[9,16]", "%y"},
  };
  return all;
}

// Lowers every contraction group of the case; returns the kernels.
std::vector<loop::LoopKernel> lower_contractions(const Graph& g, const std::string& prefix, int* groups = nullptr,
                                                const loop::Schedule& sched = {}) {
  std::vector<loop::LoopKernel> ks;
  for (const auto& grp : partition(g).groups) {
    if (grp.kind != GroupKind::Contraction) continue;
    if (groups) ++*groups;
    auto lg = loop::lower_group(grp, prefix + grp.name, sched);
    EXPECT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
    if (lg.kernel) ks.push_back(std::move(*lg.kernel));
  }
  return ks;
}

TEST(LowerContractionRows, InterpretedMatchesReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    int groups = 0;
    auto ks = lower_contractions(*g, "", &groups);
    // The reductions are fused into the contraction's group: one kernel for the whole case.
    EXPECT_EQ(groups, 1);
    EXPECT_EQ(partition(*g).groups.size(), 1u);
    if (std::getenv("KILN_PRINT_NESTS"))
      for (const auto& k : ks) std::cout << loop::print_kernel(k);
    auto run = testing::check_lowered(*g, random_inputs(*g, 5, {}, c.edge_values));
    EXPECT_EQ(run.refused, 0);
    testing::check_lowered(*g, random_inputs(*g, 6, {}, false));
  }
}

TEST(LowerContractionRows, JitMatchesReference) {
  KernelBatch batch;
  for (const Case& c : cases()) {
    auto g = make_graph(c);
    for (unsigned seed : {7u, 8u}) {
      const TensorMap inputs = random_inputs(*g, seed, {}, c.edge_values && seed == 7);
      auto values = run_reference_values(*g, inputs);
      for (const auto& grp : partition(*g).groups) {
        if (grp.kind != GroupKind::Contraction) continue;
        auto lg = loop::lower_group(grp, c.name + "_" + std::to_string(seed) + "_" + grp.name);
        ASSERT_TRUE(lg.kernel) << c.name << ": " << lg.reason;
        batch.add(std::move(*lg.kernel), grp, values);
      }
    }
  }
  batch.check("lower_contraction_rows");
}

loop::Schedule untiled() {
  loop::Schedule s;
  s.tile_contractions = false;
  s.parallel_min_work = 32768;  // the shape tests' nests are small
  return s;
}

// Untiled: one local row per outer position, allocated inside the outer loops, written by the
// first loop over the row (with the K loop inside), read by the reduction passes.
TEST(LowerContractionRows, NestShape) {
  auto g = make_graph(cases()[0]);
  auto ks = lower_contractions(*g, "", nullptr, untiled());
  ASSERT_EQ(ks.size(), 1u);
  const std::string s = loop::print_kernel(ks[0]);
  SCOPED_TRACE(s);
  const size_t i0 = s.find("for i0 in [0, 2)"), i1 = s.find("for i1 in [0, 3)"), row = s.find("kiln_crow0"),
               c = s.find("for kiln_c2 in [0, 16)"), k = s.find("for kiln_k0 in [0, 8)"), pass = s.find("kiln_j0_2"),
               st = s.find("y[");
  for (size_t p : {i0, i1, row, c, k, pass, st}) ASSERT_NE(p, std::string::npos);
  EXPECT_LT(i0, i1);
  EXPECT_LT(i1, row);
  EXPECT_LT(row, c);
  EXPECT_LT(c, k);
  EXPECT_LT(k, pass);
  EXPECT_LT(pass, st);
  // The residual and bias are read once per element, in the first loop only.
  EXPECT_EQ(s.find("res["), s.rfind("res[")) << "residual read more than once";
}

TEST(LowerContractionRows, BigNestIsParallel) {
  auto g = make_graph(cases()[5]);
  auto ks = lower_contractions(*g, "", nullptr, untiled());
  ASSERT_EQ(ks.size(), 1u);
  const std::string s = loop::print_kernel(ks[0]);
  EXPECT_NE(s.find("for i0 in [0, 64) parallel"), std::string::npos) << s;
  EXPECT_NE(s.find("allocate kiln_crow0: f32[128] local"), std::string::npos) << s;
}

// Tiled (the default for float32 MatMul rows over the last axis): blocks of mr rows in parallel,
// the block's products from the micro-kernel into kiln_acc, then the per-row passes reading it;
// bit-identical to the untiled nest.
TEST(LowerContractionRows, TiledRowBlocks) {
  auto g = make_graph(cases()[5]);
  loop::Schedule sched;
  sched.parallel_min_work = 32768;
  sched.threads = 2;  // 64 rows: two blocks of 32 (a multiple of mr = 8), one per thread
  auto ks = lower_contractions(*g, "", nullptr, sched);
  ASSERT_EQ(ks.size(), 1u);
  const std::string s = loop::print_kernel(ks[0]);
  SCOPED_TRACE(s);
  const size_t blk = s.find("for kiln_tr_blk in [0, 2) parallel"), mk = s.find("kiln_mk_f32(8, 32"),
               rr = s.find("for kiln_tr_row in"), row = s.find("allocate kiln_crow0");
  for (size_t p : {blk, mk, rr, row}) ASSERT_NE(p, std::string::npos);
  EXPECT_LT(blk, mk);
  EXPECT_LT(mk, rr);
  EXPECT_LT(rr, row);
  // Tiled: 0, 1, 5 (MatMul rows), 3 (conv + GAP, packed im2col), 7 (1x1 conv + GAP, in place),
  // 2 (batched B in place), 9 (batched and computed A and B), 10 (broadcast B), 11 (computed A), 12 (computed from a transposed A);
  // 6 as well as it lowers.
  const std::map<size_t, std::string> packed = {
      {9, "B packed per batch, A packed per block"}, {10, "B packed per batch"}, {11, "A packed per block"},
      {12, "A packed per block"}};
  for (size_t i : {0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 12}) {
    auto gi = make_graph(cases()[i]);
    SCOPED_TRACE(cases()[i].name);
    loop::Schedule odd;  // rows and columns not multiples of the tile
    odd.contraction = {4, 12, 8};
    odd.contraction.rows_min_column_percent = 0;  // the tiled rows even over few positions
    odd.contraction.conv_rows_max_work = INT64_MAX;  // at any size
    odd.parallel_min_work = 1;
    auto tiled = lower_contractions(*gi, "t", nullptr, odd), plain = lower_contractions(*gi, "p", nullptr, untiled());
    ASSERT_EQ(tiled.size(), 1u);
    ASSERT_EQ(plain.size(), 1u);
    const std::string text = loop::print_kernel(tiled[0]);
    if (i != 6) {
      EXPECT_NE(text.find("kiln_mk_f32"), std::string::npos) << text;
    }
    if (packed.count(i)) {
      EXPECT_NE(text.find(packed.at(i)), std::string::npos) << text;
    }
    // A transposed source: one transposing copy per block (transposed_a_pack), not a gather.
    EXPECT_EQ(text.find("kiln_transpose_f32(&kiln_apack") != std::string::npos, i == 12) << text;
    const TensorMap inputs = random_inputs(*gi, 4, {}, false);
    auto values = run_reference_values(*gi, inputs);
    for (const auto& grp : partition(*gi).groups) {
      if (grp.kind != GroupKind::Contraction) continue;
      auto a = testing::interpret_group(tiled[0], grp, values), b = testing::interpret_group(plain[0], grp, values);
      for (size_t o = 0; o < a.size(); ++o) EXPECT_EQ(std::memcmp(a[o].raw(), b[o].raw(), a[o].nbytes()), 0);
    }
  }
}

TEST(LowerContractionRows, Refusals) {
  // A row of 20000 floats (80 KB) exceeds the 64 KiB local row.
  Case big{"big_row", R"(  %ax = constant i64[1] [-1]
  %m: f32[2,20000] = MatMul(%x, %w) name="mm"
  %y: f32[2,1] = ReduceSum(%m, %ax) {keepdims=1} name="sum"
)", "%x: f32[2,2], %w: f32[2,20000]", "%y"};
  // A reduction over the leading axis.
  Case lead{"leading_axis", R"(  %ax = constant i64[1] [0]
  %m: f32[6,5] = MatMul(%x, %w) name="mm"
  %y: f32[1,5] = ReduceSum(%m, %ax) {keepdims=1} name="sum"
)", "%x: f32[6,3], %w: f32[3,5]", "%y"};
  for (const Case* c : {&big, &lead}) {
    SCOPED_TRACE(c->name);
    auto g = make_graph(*c);
    // The contraction with its reduction is refused, with a reason...
    auto lg = loop::lower_group(testing::whole_group(*g), "whole");
    EXPECT_FALSE(lg.kernel);
    // (its cause: the local row's budget, or a reduction the row passes cannot take), ...
    const std::string cause = c == &big ? "exceeds the 64 KiB local row" : "over non-trailing axes";
    EXPECT_NE(lg.reason.find(cause), std::string::npos) << lg.reason;
    EXPECT_NE(lg.reason.find("separate kernels"), std::string::npos) << lg.reason;
    // ... so the partitioner, which asks the lowering, keeps the two apart and both lower.
    FusionPlan plan = partition(*g);
    EXPECT_EQ(plan.kernel_count(), 2);
    for (const auto& grp : plan.groups) EXPECT_TRUE(loop::lower_group(grp, grp.name).kernel) << grp.name;
    testing::check_lowered(*g, random_inputs(*g, 9));
  }
}

// The partitioner does not fuse a reduction over a leading axis; a group built by hand that holds
// one is refused (the local row would not be contiguous), as are groups that read the staged
// row at another position (a Transpose before or after the reduction).
TEST(LowerContractionRows, HandBuiltGroupsAreRefused) {
  const char* bodies[] = {R"(  %ax = constant i64[1] [0]
  %m: f32[6,5] = MatMul(%x, %w) name="mm"
  %y: f32[1,5] = ReduceSum(%m, %ax) {keepdims=1} name="sum"
)",
                          R"(  %ax = constant i64[1] [-1]
  %m: f32[5,5] = MatMul(%x, %w) name="mm"
  %s: f32[5,1] = ReduceSum(%m, %ax) {keepdims=1} name="sum"
  %t: f32[5,5] = Transpose(%m) {perm=[1,0]} name="tr"
  %y: f32[5,5] = Sub(%t, %s) name="sub"
)",
                          R"(  %ax = constant i64[1] [-1]
  %m: f32[5,5] = MatMul(%x, %w) name="mm"
  %s: f32[5,1] = ReduceSum(%m, %ax) {keepdims=1} name="sum"
  %d: f32[5,5] = Sub(%m, %s) name="sub"
  %y: f32[5,5] = Transpose(%d) {perm=[1,0]} name="tr"
)"};
  const char* ins[] = {"%x: f32[6,3], %w: f32[3,5]", "%x: f32[5,3], %w: f32[3,5]", "%x: f32[5,3], %w: f32[3,5]"};
  const char* why[] = {"non-trailing axes", "another position", "Transpose after a reduction"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(why[i]);
    auto g = make_graph({"hand", bodies[i], ins[i], "%y"});
    FusionGroup grp;
    grp.name = "hand";
    grp.kind = GroupKind::Contraction;
    for (Node* n : g->nodes()) {
      grp.nodes.push_back(n);
      for (const Value* v : n->inputs())
        if ((v->is_constant() || v->is_graph_input()) && std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
          grp.inputs.push_back(v);
    }
    grp.outputs = {g->outputs()[0]};
    auto lg = loop::lower_group(grp, grp.name);
    EXPECT_FALSE(lg.kernel);
    EXPECT_NE(lg.reason.find(why[i]), std::string::npos) << lg.reason;
  }
}

// The public models' contraction groups with row reductions (the encoder's MatMul + bias +
// residual + LayerNorm over 768, resnet18's head) compiled with the JIT and compared with the
// reference on the group's own inputs (about 10 s).
TEST(LowerContractionRows, PublicModelsJit) {
  int checked = 0;
  for (auto& [m, g] : testing::public_models({"demo", "resnet18", "mobilenet_v2", "encoder"})) {
    SCOPED_TRACE(m);
    const TensorMap inputs = random_inputs(*g, 13, {}, false);
    auto values = run_reference_values(*g, inputs);
    KernelBatch batch;
    for (const auto& grp : partition(*g).groups) {
      if (grp.kind != GroupKind::Contraction) continue;
      bool rows = false;
      for (const Node* n : grp.nodes) rows = rows || n->op_type().rfind("Reduce", 0) == 0 || n->op_type() == "GlobalAveragePool";
      if (!rows) continue;
      auto lg = loop::lower_group(grp, std::string(m) + "_" + grp.name);
      if (!lg.kernel) continue;
      batch.add(std::move(*lg.kernel), grp, values);
    }
    checked += int(batch.size());
    batch.check("rows_models");
  }
  std::cout << "[ rows ] " << checked << " model kernels with row reductions checked through the JIT\n";
}

}  // namespace
}  // namespace kiln
