// Loop lowering of groups with several contractions: sibling contractions (split into parts,
// each lowered on its own, merged into one kernel) and chains of MatMuls (attention, an MLP with
// LayerNorm: the row pipeline of lower_contraction_chain.cc). Small IR graphs run lowered through
// the loop-IR interpreter and (all cases in one module) through emit_c + JitModule, and must match
// the unfused reference (floats within 1e-5 relative; the kernels keep the reference's summation
// order: bit-identical on finite inputs; compiled kernels with a float exp or erf, which are
// kiln_expf and kiln_erff, within 2 ulp of std::exp and std::erf: within 1e-5 of the tensor's
// largest magnitude). Cases the partitioner
// forms itself (siblings, attention, the MLP) are partitioned; the others (an intermediate also
// needed outside, three chained MatMuls, a chain next to a sibling, odd tile shapes) are hand-made
// groups of the whole graph.
// Plus refusals with their reasons, the nests' shape, and the splicing utilities.
//
// KILN_PRINT_NESTS=1 prints every multi-contraction kernel.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <unistd.h>

#include "codegen/c/c_emitter.h"
#include "ir/parser.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "lower_group_test_util.h"
#include "runtime/jit.h"
#include "transforms/lowering.h"

namespace kiln {
namespace {

using testing::compare_tensors;
using testing::random_inputs;

struct Case {
  std::string name, body, inputs, outputs;
  bool hand = false;           // one hand-made group of the whole graph (else: partitioned)
  bool edge_values = true;     // NaN/inf/huge values among the random inputs
  // Row sums in lanes (rows of 32 and more, Schedule::reduction_lanes): the reference's bits only
  // under --strict-fp's schedule.
  bool lanes = false;
};

std::unique_ptr<Graph> make_graph(const Case& c) {
  auto g = parse_graph("graph main opset 17 (" + c.inputs + ") -> (" + c.outputs + ") {\n" + c.body + "}\n");
  run_lowering(*g);  // Softmax -> ReduceMax/Sub/Exp/ReduceSum/Div, as the models reach fusion
  return g;
}

// One group holding every node: inputs are the values read and not computed, outputs the graph's.
FusionGroup whole_graph_group(const Graph& g, const std::string& name) {
  FusionGroup grp;
  grp.name = name;
  grp.kind = GroupKind::Contraction;
  for (Node* n : g.nodes()) {
    grp.nodes.push_back(n);
    for (const Value* v : n->inputs())
      if (v && (v->is_constant() || v->is_graph_input()) &&
          std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
        grp.inputs.push_back(v);
  }
  for (Value* o : g.outputs()) grp.outputs.push_back(o);
  return grp;
}

FusionPlan plan_of(const Graph& g, const Case& c) {
  if (!c.hand) return partition(g);
  FusionPlan p;
  p.groups.push_back(whole_graph_group(g, c.name));
  return p;
}

const std::vector<FusionGroup*> multi_groups(FusionPlan& plan) {
  std::vector<FusionGroup*> r;
  for (auto& grp : plan.groups)
    if (grp.kind == GroupKind::Contraction && loop::detail::contraction_count(grp) > 1) r.push_back(&grp);
  return r;
}

// Single-head attention spelled as the encoder exports it: q/k/v slices of one projection, head
// split (Reshape + Transpose), scale, QKᵀ, softmax, ·V, head merge. 6 positions, 2 heads of 4.
const char* kAttention = R"(  %s0 = constant i64[1] [0]
  %s1 = constant i64[1] [8]
  %s2 = constant i64[1] [16]
  %s3 = constant i64[1] [24]
  %ax = constant i64[1] [2]
  %heads = constant i64[3] [6, 2, 4]
  %merged = constant i64[2] [6, 8]
  %scale = constant f32[] [2]
  %q: f32[6,1,8] = Slice(%x, %s0, %s1, %ax) name="slice_q"
  %k: f32[6,1,8] = Slice(%x, %s1, %s2, %ax) name="slice_k"
  %v: f32[6,1,8] = Slice(%x, %s2, %s3, %ax) name="slice_v"
  %qr: f32[6,2,4] = Reshape(%q, %heads) name="reshape_q"
  %qt: f32[2,6,4] = Transpose(%qr) {perm=[1,0,2]} name="heads_q"
  %qs: f32[2,6,4] = Div(%qt, %scale) name="scale"
  %kr: f32[6,2,4] = Reshape(%k, %heads) name="reshape_k"
  %kt: f32[2,4,6] = Transpose(%kr) {perm=[1,2,0]} name="heads_k"
  %vr: f32[6,2,4] = Reshape(%v, %heads) name="reshape_v"
  %vt: f32[2,6,4] = Transpose(%vr) {perm=[1,0,2]} name="heads_v"
  %sc: f32[2,6,6] = MatMul(%qs, %kt) name="qk"
  %p: f32[2,6,6] = Softmax(%sc) {axis=-1} name="softmax"
  %o: f32[2,6,4] = MatMul(%p, %vt) name="pv"
  %ot: f32[6,2,4] = Transpose(%o) {perm=[1,0,2]} name="merge"
  %y: f32[6,8] = Reshape(%ot, %merged) name="reshape_out"
)";

// MatMul -> bias -> GELU (erf) -> MatMul -> bias -> residual -> LayerNorm, as mlp_ln.
const char* kMlp = R"(  %rs2 = constant f32[] [1.4142135]
  %one = constant f32[] [1]
  %half = constant f32[] [0.5]
  %axl = constant i64[1] [-1]
  %two = constant f32[] [2]
  %eps = constant f32[] [1e-05]
  %m1: f32[1,8,16] = MatMul(%x, %w1) name="fc1"
  %a1: f32[1,8,16] = Add(%b1, %m1) name="fc1_bias"
  %d: f32[1,8,16] = Div(%a1, %rs2) name="gelu_div"
  %e: f32[1,8,16] = Erf(%d) name="gelu_erf"
  %p1: f32[1,8,16] = Add(%e, %one) name="gelu_add"
  %g1: f32[1,8,16] = Mul(%a1, %p1) name="gelu_mul"
  %h: f32[1,8,16] = Mul(%g1, %half) name="gelu_half"
  %m2: f32[1,8,12] = MatMul(%h, %w2) name="fc2"
  %a2: f32[1,8,12] = Add(%b2, %m2) name="fc2_bias"
  %r: f32[1,8,12] = Add(%x, %a2) name="residual"
  %mean: f32[1,8,1] = ReduceMean(%r, %axl) {keepdims=1} name="mean"
  %c: f32[1,8,12] = Sub(%r, %mean) name="center"
  %sq: f32[1,8,12] = Pow(%c, %two) name="square"
  %var: f32[1,8,1] = ReduceMean(%sq, %axl) {keepdims=1} name="var"
  %ve: f32[1,8,1] = Add(%var, %eps) name="var_eps"
  %sd: f32[1,8,1] = Sqrt(%ve) name="std"
  %n: f32[1,8,12] = Div(%c, %sd) name="normalize"
  %s: f32[1,8,12] = Mul(%n, %gamma) name="gamma"
  %y: f32[1,8,12] = Add(%s, %beta) name="beta"
)";
const char* kMlpInputs =
    "%x: f32[1,8,12], %w1: f32[12,16], %b1: f32[16], %w2: f32[16,12], %b2: f32[12], %gamma: f32[12], %beta: f32[12]";

// `  %name = constant f32[dims] [...]`: fixed pseudo-random values in [-1, 1) with two decimals
// (weights: constants, so the lowering may read them in panels).
std::string weights(const std::string& name, const Shape& shape, unsigned seed) {
  std::string s = "  %" + name + " = constant f32" + shape_str(shape) + " [";
  unsigned x = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    x = x * 1103515245u + 12345u;
    s += (i ? ", " : "") + std::to_string(int((x >> 16) % 200) - 100) + "e-2";
  }
  return s + "]\n";
}

// Q, K and V projections of one input after a LayerNorm tail (the prologue), N = 40, 64 and 19:
// widths that are not whole micro-kernel panels, so the joined columns have padding between the
// siblings (lower_contraction_sibling_gemm.cc). Hand-made groups of the whole graph.
std::string qkv(bool prologue) {
  std::string a = prologue ? "%n" : "%x";
  std::string s = weights("wq", {24, 40}, 1) + weights("wk", {24, 64}, 2) + weights("wv", {24, 19}, 3) +
                  weights("bq", {40}, 4) + weights("bk", {64}, 5) + weights("bv", {19}, 6);
  if (prologue)
    s += R"(  %c: f32[2,12,24] = Sub(%x, %mu) name="center"
  %d: f32[2,12,24] = Div(%c, %sd) name="normalize"
  %n: f32[2,12,24] = Mul(%d, %gamma) name="gamma"
)";
  s += "  %q: f32[2,12,40] = MatMul(" + a + ", %wq) name=\"q\"\n";
  s += "  %k: f32[2,12,64] = MatMul(" + a + ", %wk) name=\"k\"\n";
  s += "  %v: f32[2,12,19] = MatMul(" + a + ", %wv) name=\"v\"\n";
  s += R"(  %qb: f32[2,12,40] = Add(%q, %bq) name="q_bias"
  %kb: f32[2,12,64] = Add(%bk, %k) name="k_bias"
  %kr: f32[2,12,64] = Relu(%kb) name="k_relu"
  %vb: f32[2,12,19] = Add(%v, %bv) name="v_bias"
)";
  return s;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // Siblings of one left operand as one GEMM: with the prologue (A packed per tile once for
      // all siblings, one tile spanning the three column ranges) and on a plain input (A in
      // place, one column panel per tile, each tile within one sibling).
      {"sibling_gemm_prologue", qkv(true), "%x: f32[2,12,24], %mu: f32[2,12,1], %sd: f32[2,12,1], %gamma: f32[24]",
       "%qb, %kr, %vb", true},
      {"sibling_gemm_in_place", qkv(false), "%x: f32[2,12,24]", "%qb, %kr, %vb", true},
      // Sibling 1x1 convs of one input (an Inception block's branch heads) with bias and ReLU:
      // the implicit GEMM (positions × output channels), its stores per output line.
      {"sibling_gemm_convs", weights("w1", {40, 32, 1, 1}, 7) + weights("w2", {48, 32, 1, 1}, 8) + weights("b1", {40}, 9) +
                                 weights("b2", {48}, 10) + R"(  %a: f32[1,40,6,6] = Conv(%x, %w1, %b1) {kernel_shape=[1,1]} name="conv_a"
  %ra: f32[1,40,6,6] = Relu(%a) name="relu_a"
  %b: f32[1,48,6,6] = Conv(%x, %w2, %b2) {kernel_shape=[1,1]} name="conv_b"
  %rb: f32[1,48,6,6] = Relu(%b) name="relu_b"
)",
       "%x: f32[1,32,6,6]", "%ra, %rb", true},
      // Two siblings that join, one with a softmax (its own nest, spliced), and a trailing Add
      // of two of them (read from the joined GEMM's outputs in local buffers).
      {"sibling_gemm_mixed", weights("w1", {16, 33}, 11) + weights("w2", {16, 33}, 12) + weights("w3", {16, 8}, 13) +
                                 R"(  %p: f32[9,33] = MatMul(%x, %w1) name="p"
  %q: f32[9,33] = MatMul(%x, %w2) name="q"
  %r: f32[9,8] = MatMul(%x, %w3) name="r"
  %rs: f32[9,8] = Softmax(%r) {axis=-1} name="softmax"
  %s: f32[9,33] = Add(%p, %q) name="join"
  %y: f32[9,33] = Tanh(%s) name="tanh"
)",
       "%x: f32[9,16]", "%y, %q, %rs", true},
      // ResNet's downsampling block head: the 3x3 conv + ReLU and the 1x1 stride-2 conv read x.
      {"sibling_convs", R"(  %a: f32[1,4,4,4] = Conv(%x, %w1, %b1) {kernel_shape=[3,3], pads=[1,1,1,1], strides=[2,2]} name="conv1"
  %r: f32[1,4,4,4] = Relu(%a) name="relu"
  %d: f32[1,4,4,4] = Conv(%x, %w2, %b2) {kernel_shape=[1,1], strides=[2,2]} name="downsample"
)", "%x: f32[1,3,8,8], %w1: f32[4,3,3,3], %b1: f32[4], %w2: f32[4,3,1,1], %b2: f32[4]", "%r, %d"},
      // Siblings joined by an Add: the trailing elementwise part reads both from local buffers.
      {"sibling_convs_add", R"(  %a: f32[1,2,4,4] = Conv(%x, %w1) {kernel_shape=[1,1]} name="conv_a"
  %b: f32[1,2,4,4] = Conv(%x, %w2) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv_b"
  %s: f32[1,2,4,4] = Add(%a, %b) name="add"
  %y: f32[1,2,4,4] = Relu(%s) name="relu"
)", "%x: f32[1,3,4,4], %w1: f32[2,3,1,1], %w2: f32[2,3,3,3]", "%y, %a"},
      // Sibling MatMuls sharing a prologue (recomputed in each part), one with a softmax.
      {"sibling_matmuls_prologue", R"(  %two = constant f32[] [2]
  %t: f32[5,4] = Transpose(%x) {perm=[1,0]} name="tr"
  %u: f32[5,4] = Mul(%t, %two) name="scale"
  %q: f32[5,3] = MatMul(%u, %wq) name="q"
  %k: f32[5,6] = MatMul(%u, %wk) name="k"
  %ks: f32[5,6] = Softmax(%k) {axis=-1} name="softmax"
)", "%x: f32[4,5], %wq: f32[4,3], %wk: f32[4,6]", "%q, %ks"},
      {"attention", kAttention, "%x: f32[6,1,24]", "%y"},
      {"mlp_layernorm", kMlp, kMlpInputs, "%y"},
      // The attention probabilities are an output too: the row passes store them, the next
      // stage reads them back as its row.
      {"attention_probs_output", kAttention, "%x: f32[6,1,24]", "%y, %p", true},
      // The GELU output is an output too, and so is the raw second product.
      {"mlp_intermediate_outputs", kMlp, kMlpInputs, "%y, %h, %m2", true},
      // Three chained MatMuls, batched right operands broadcast over the left's batch, f64.
      {"three_chained_f64", R"(  %m1: f64[2,3,5] = MatMul(%x, %w1) name="mm1"
  %r1: f64[2,3,5] = Tanh(%m1) name="tanh"
  %m2: f64[2,3,4] = MatMul(%r1, %w2) name="mm2"
  %r2: f64[2,3,4] = Sigmoid(%m2) name="sigmoid"
  %m3: f64[2,3,6] = MatMul(%r2, %w3) name="mm3"
  %y: f64[2,3,6] = Neg(%m3) name="neg"
)", "%x: f64[2,3,7], %w1: f64[1,7,5], %w2: f64[5,4], %w3: f64[2,4,6]", "%y", true},
      // A chain next to an independent sibling MatMul on the same input: two parts.
      {"chain_and_sibling", R"(  %m1: f32[4,6] = MatMul(%x, %w1) name="mm1"
  %r1: f32[4,6] = Relu(%m1) name="relu"
  %m2: f32[4,3] = MatMul(%r1, %w2) name="mm2"
  %z: f32[4,5] = MatMul(%x, %w3) name="side"
)", "%x: f32[4,7], %w1: f32[7,6], %w2: f32[6,3], %w3: f32[7,5]", "%m2, %z", true},
      // Row tiles over batches: a first right operand read transposed (packed per tile).
      {"chain_transposed_operand", R"(  %bt: f32[3,9,16] = Transpose(%b) {perm=[0,2,1]} name="bt"
  %s: f32[3,24,16] = MatMul(%a, %bt) name="mm1"
  %e: f32[3,24,16] = Exp(%s) name="exp"
  %o: f32[3,24,5] = MatMul(%e, %c) name="mm2"
)", "%a: f32[3,24,9], %b: f32[3,16,9], %c: f32[3,16,5]", "%o", true, false},
      // 7 rows: no tile size divides them, the last tile is partial (guarded rows).
      {"chain_row_tail", R"(  %s: f32[7,6] = MatMul(%a, %w1) name="mm1"
  %r: f32[7,6] = Relu(%s) name="relu"
  %o: f32[7,3] = MatMul(%r, %w2) name="mm2"
)", "%a: f32[7,5], %w1: f32[5,6], %w2: f32[6,3]", "%o", true},
      // The partial last tile with a softmax between the products (passes on guarded rows).
      {"chain_tail_softmax", R"(  %s: f32[7,6] = MatMul(%a, %w1) name="mm1"
  %p: f32[7,6] = Softmax(%s) {axis=-1} name="softmax"
  %o: f32[7,3] = MatMul(%p, %w2) name="mm2"
)", "%a: f32[7,4], %w1: f32[4,6], %w2: f32[6,3]", "%o", true},
      // Rows of 40 keys: the softmax passes run four rows at a time (ChainTile::row_jam), under
      // the row kernel's shared condition (48 queries: whole tiles) and under per-row guards
      // (37 queries: a partial last tile).
      {"chain_short_rows_jammed", R"(  %kt: f32[2,8,40] = Transpose(%k) {perm=[0,2,1]} name="kt"
  %s: f32[2,48,40] = MatMul(%q, %kt) name="mm1"
  %p: f32[2,48,40] = Softmax(%s) {axis=-1} name="softmax"
  %o: f32[2,48,8] = MatMul(%p, %v) name="mm2"
)", "%q: f32[2,48,8], %k: f32[2,40,8], %v: f32[2,40,8]", "%o", true, true, true},
      {"chain_short_rows_jammed_tail", R"(  %kt: f32[8,40] = Transpose(%k) {perm=[1,0]} name="kt"
  %s: f32[37,40] = MatMul(%q, %kt) name="mm1"
  %p: f32[37,40] = Softmax(%s) {axis=-1} name="softmax"
  %o: f32[37,8] = MatMul(%p, %v) name="mm2"
)", "%q: f32[37,8], %k: f32[40,8], %v: f32[40,8]", "%o", true, true, true},
      // The last stage stored transposed (its rows along memory, as an MLP written back as NCHW):
      // through the accumulator tile and one transposing copy per tile, batched, with a partial
      // last tile (37 rows).
      {"chain_transposed_output", R"(  %h: f32[2,37,32] = MatMul(%x, %w1) name="mm1"
  %r: f32[2,37,32] = Relu(%h) name="relu"
  %m: f32[2,37,24] = MatMul(%r, %w2) name="mm2"
  %a: f32[2,37,24] = Add(%m, %b2) name="bias"
  %y: f32[2,24,37] = Transpose(%a) {perm=[0,2,1]} name="to_channels"
)", "%x: f32[2,37,16], %w1: f32[16,32], %w2: f32[32,24], %b2: f32[24]", "%y", true},
      // A right operand read transposed and too big to pack: the dot form (per column, along k).
      {"chain_dot_form", R"(  %wt: f32[64,160] = Transpose(%w) {perm=[1,0]} name="wt"
  %s: f32[2,160] = MatMul(%a, %wt) name="mm1"
  %r: f32[2,160] = Relu(%s) name="relu"
  %o: f32[2,3] = MatMul(%r, %w2) name="mm2"
)", "%a: f32[2,64], %w: f32[160,64], %w2: f32[160,3]", "%o", true, false},
  };
  return all;
}

// Every case: its multi-contraction group lowers, and the run agrees with the reference in the
// interpreter (with and without NaN/inf among the inputs).
TEST(LowerChain, InterpretedMatchesReference) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = plan_of(*g, c);
    auto multi = multi_groups(plan);
    ASSERT_EQ(multi.size(), 1u) << "the partitioner no longer fuses this case";
    auto lg = loop::lower_group(*multi[0], multi[0]->name);
    ASSERT_TRUE(lg.kernel) << lg.reason;
    if (std::getenv("KILN_PRINT_NESTS")) std::cout << loop::print_kernel(*lg.kernel);
    const TensorMap want_inputs[] = {random_inputs(*g, 5, {}, c.edge_values), random_inputs(*g, 6, {}, false)};
    for (const TensorMap& inputs : want_inputs) {
      TensorMap want = run_reference(*g, inputs);
      auto run = testing::run_lowered(*g, plan, inputs);
      EXPECT_EQ(run.refused, 0) << (run.reasons.empty() ? "" : run.reasons.begin()->first);
      for (const auto& [name, t] : want) EXPECT_EQ(compare_tensors(run.outputs.at(name), t), "") << "output " << name;
    }
    // The reference's summation order is kept: bit-identical (finite inputs); row sums in lanes
    // under --strict-fp's schedule.
    loop::Schedule order;
    if (c.lanes) order.set_strict_numerics();
    TensorMap want = run_reference(*g, want_inputs[1]);
    auto run = testing::run_lowered(*g, plan, want_inputs[1], order);
    for (const auto& [name, t] : want)
      EXPECT_EQ(std::memcmp(run.outputs.at(name).raw(), t.raw(), size_t(t.nbytes())), 0) << "output " << name;
    // Rows run together (ChainTile::row_jam) give the same bits as one row at a time.
    loop::Schedule one_row;
    one_row.chain.row_jam = 1;
    auto jammed = testing::run_lowered(*g, plan, want_inputs[0]), alone = testing::run_lowered(*g, plan, want_inputs[0], one_row);
    for (const auto& [name, t] : jammed.outputs)
      EXPECT_EQ(std::memcmp(alone.outputs.at(name).raw(), t.raw(), size_t(t.nbytes())), 0) << "output " << name;
  }
}

// The same kernels compiled as one C module, run on the group's inputs as the reference computed
// them: within tolerance with NaN/inf among the inputs, and bit-identical on finite inputs (the
// micro-kernel, packed and in-place operands and the row passes keep the reference's order).
// Except the kernels whose C calls kiln_expf or kiln_erff (float exp: softmax, Exp; float erf:
// GELU): the reference keeps std::exp and std::erf, the prelude's are within 2 ulp of them, and a
// contraction after them can cancel terms and so magnify that relative to one element; they are
// compared within 1e-5 of the tensor's largest magnitude instead (the numerics contract's form,
// docs/codegen.md).
bool calls_prelude_math(const std::string& source, const std::string& kernel) {
  const size_t begin = source.find("void " + kernel + "(void* const* args)");
  EXPECT_NE(begin, std::string::npos) << kernel;
  const size_t end = source.find("\nvoid ", begin + 1);
  const std::string body = source.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  return body.find("kiln_expf(") != std::string::npos || body.find("kiln_erff(") != std::string::npos;
}


TEST(LowerChain, JitMatchesReference) {
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<FusionPlan> plans;
  std::vector<loop::LoopKernel> kernels;
  struct Run {
    std::string name;
    bool exact;
    bool lanes;
    std::vector<Tensor> ins, want;
  };
  std::vector<Run> runs;
  plans.reserve(cases().size());
  for (const Case& c : cases()) {
    graphs.push_back(make_graph(c));
    const Graph& g = *graphs.back();
    plans.push_back(plan_of(g, c));
    for (FusionGroup* grp : multi_groups(plans.back())) {
      auto lg = loop::lower_group(*grp, c.name);
      ASSERT_TRUE(lg.kernel) << c.name << ": " << lg.reason;
      for (bool exact : {false, true}) {
        auto values = run_reference_values(g, random_inputs(g, exact ? 10 : 7, {}, !exact && c.edge_values));
        Run r{lg.kernel->name, exact, c.lanes, {}, {}};
        for (const Value* v : grp->inputs) r.ins.push_back((v->is_constant() ? v->constant() : values.at(v)).clone());
        for (const Value* v : grp->outputs) r.want.push_back(values.at(v));
        runs.push_back(std::move(r));
      }
      kernels.push_back(std::move(*lg.kernel));
    }
  }
  EXPECT_EQ(kernels.size(), cases().size());
  // Strict numerics: bit-identical to the reference on finite inputs (the same operations in the
  // same order). Default numerics (FMA in the micro-kernels and epilogues): within the contract.
  for (bool strict : {true, false}) {
    SCOPED_TRACE(strict ? "strict numerics" : "default numerics (FMA)");
    const auto dir = std::filesystem::temp_directory_path() /
                     ("kiln_lower_chain_test_" + std::to_string(strict) + "_" + std::to_string(::getpid()));
    const runtime::BuildOptions o = testing::numerics_options(strict, dir.string());
    const std::string source = codegen::emit_c(kernels, o.emit);
    if (std::getenv("KILN_PRINT_NESTS")) std::cout << source;
    auto module = runtime::JitModule::build(source, o.compile);
    for (auto& r : runs) {
      SCOPED_TRACE(cat(r.name, r.exact ? " (finite inputs)" : ""));
      std::vector<Tensor> got;
      std::vector<void*> args;
      auto kit = std::find_if(kernels.begin(), kernels.end(), [&](const loop::LoopKernel& k) { return k.name == r.name; });
      ASSERT_NE(kit, kernels.end());
      std::vector<Tensor> ins = loop::kernel_arguments(*kit, r.ins);
      for (auto& t : ins) args.push_back(t.raw());
      for (const auto& w : r.want) got.emplace_back(w.dtype(), w.shape());
      for (auto& t : got) args.push_back(t.raw());
      module->get(r.name)(args.data());
      const bool expf = calls_prelude_math(source, r.name);
      for (size_t i = 0; i < got.size(); ++i) {
        if (strict) {
          EXPECT_EQ(compare_tensors(got[i], r.want[i]), "") << "output " << i;
          if (r.exact && !r.lanes) {
            EXPECT_EQ(std::memcmp(got[i].raw(), r.want[i].raw(), got[i].nbytes()), 0) << "output " << i;
          }
        } else {
          EXPECT_EQ(testing::within_max_magnitude(got[i], r.want[i], expf ? 1e-5 : 1e-4), "") << "output " << i;
        }
      }
    }
    module.reset();
    std::filesystem::remove_all(dir);
  }
}

// The nest-shape tests below pin the tile parameters they were written for (6-row micro-kernel
// tiles, at least 16 tiles, 64 KiB of local rows), so a change of the defaults does not move them.
loop::Schedule shape_schedule() {
  loop::Schedule s;
  s.contraction.mr = 6;
  s.chain.min_tiles = 16;
  s.chain.max_row_blocks = 8;
  s.chain.max_local_bytes = 64 * 1024;
  s.chain.max_pack_bytes = 32 * 1024;
  s.parallel_min_work = 32768;
  return s;
}

std::string lowered(const Case& c) {
  auto g = make_graph(c);
  FusionPlan plan = plan_of(*g, c);
  auto multi = multi_groups(plan);
  if (multi.size() != 1) return "no multi-contraction group";
  auto lg = loop::lower_group(*multi[0], multi[0]->name, shape_schedule());
  return lg.kernel ? loop::print_kernel(*lg.kernel) : "refused: " + lg.reason;
}

const Case& find_case(const std::string& name) {
  for (const Case& c : cases())
    if (c.name == name) return c;
  throw std::runtime_error("no case " + name);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Buffer indices (the text of buf[...]) with a division or modulo left in them.
std::vector<std::string> divmod_indices(const std::string& s) {
  std::vector<std::string> r;
  for (size_t open = s.find('['); open != std::string::npos; open = s.find('[', open + 1)) {
    if (open == 0 || !(std::isalnum((unsigned char)s[open - 1]) || s[open - 1] == '_')) continue;  // not buf[...]
    int depth = 0;
    size_t close = open;
    for (; close < s.size(); ++close) {
      if (s[close] == '[') ++depth;
      if (s[close] == ']' && --depth == 0) break;
    }
    const std::string ix = s.substr(open, close - open + 1);
    if (ix.find(" / ") != std::string::npos || ix.find(" % ") != std::string::npos) r.push_back(ix);
  }
  return r;
}

// Attention is one row pipeline: one loop over row tiles, both products through the micro-kernel
// (QKᵀ from a packed copy of Kᵀ, ·V reading V in place inside the QKV tensor), the softmax passes
// between them, and no div/mod left in any index (the head split/merge views fold away).
TEST(LowerChain, AttentionNestShape) {
  const std::string s = lowered(find_case("attention"));
  SCOPED_TRACE(s);
  EXPECT_EQ(count(s, "for kiln_r in"), 1u);
  EXPECT_EQ(count(s, "kiln_mk_f32("), 2u);
  EXPECT_EQ(count(s, "allocate kiln_bpack0"), 1u);
  EXPECT_EQ(s.find("kiln_bpack1"), std::string::npos);
  // Kᵀ (a head's slice of the QKV tensor, read along k) packed by one transposing copy, its
  // view's div/mod folded first; not element by element.
  EXPECT_EQ(count(s, "kiln_transpose_f32(&kiln_bpack0[0], 6, &x["), 1u);
  // V: row stride 24 (K block kb from row 6 · kb), column 16 + 4h.
  EXPECT_NE(s.find("&x[(((kiln_tr1_kb * 144) + (i0 * 4)) + 16)], 24,"), std::string::npos);
  EXPECT_EQ(divmod_indices(s), std::vector<std::string>{});
  const size_t qk = s.find("kiln_mk_f32("), max = s.find("isnan"), pv = s.find("kiln_mk_f32(", qk + 1);
  ASSERT_NE(max, std::string::npos);
  EXPECT_LT(qk, max);
  EXPECT_LT(max, pv);
  // The head merge: row i1 (query), head i0, column c stored at [i1, 4 * i0 + c] of y[6, 8].
  EXPECT_NE(s.find("y[(((i1 * 8) + (i0 * 4)) + kiln_c1)]"), std::string::npos);
}

// The MLP reads both weights in place (no packing), the rows of 8 in tiles, LayerNorm's passes
// per row of the tile after the second product; a big enough one gets a parallel tile loop.
TEST(LowerChain, MlpNestShape) {
  const std::string s = lowered(find_case("mlp_layernorm"));
  SCOPED_TRACE(s);
  EXPECT_EQ(count(s, "kiln_mk_f32("), 2u);
  EXPECT_EQ(s.find("kiln_bpack"), std::string::npos);
  EXPECT_NE(s.find("for kiln_r in [0, 2)"), std::string::npos);  // 8 rows in tiles of 4
  EXPECT_EQ(s.find("parallel"), std::string::npos);
  EXPECT_EQ(divmod_indices(s), std::vector<std::string>{});
  // 512 rows: a parallel loop over 16 tiles of 32 rows, 8 micro-kernel calls of 4 rows each.
  const std::string b = lowered({"big", R"(  %s: f32[1,512,64] = MatMul(%x, %w1) name="mm1"
  %r: f32[1,512,64] = Relu(%s) name="relu"
  %o: f32[1,512,12] = MatMul(%r, %w2) name="mm2"
)", "%x: f32[1,512,12], %w1: f32[12,64], %w2: f32[64,12]", "%o", true});
  EXPECT_NE(b.find("for kiln_r in [0, 16) parallel"), std::string::npos) << b;
  EXPECT_NE(b.find("for kiln_tr0_rt in [0, 8) {\n"), std::string::npos) << b;
  EXPECT_NE(b.find("kiln_mk_f32(4, 32, kiln_tr0_kc, &kiln_atile[((kiln_tr0_rt * 48) + (kiln_tr0_kb * 12))]"), std::string::npos)
      << b;
}

// A partial last tile (7 rows in tiles of 6): guarded rows, and micro-kernel calls that stop at
// the last row (a 1-row call in the short tile). No micro-kernel where its conditions fail: a
// right operand neither in place nor packable (the dot form), float64.
TEST(LowerChain, LoopForms) {
  const std::string tail = lowered(find_case("chain_row_tail"));
  EXPECT_EQ(count(tail, "kiln_mk_f32("), 4u) << tail;  // two stages, full and short tiles
  EXPECT_NE(tail.find("if ((kiln_m0 + 6) <= 7)"), std::string::npos) << tail;
  EXPECT_NE(tail.find("kiln_mk_f32(1, "), std::string::npos) << tail;
  EXPECT_NE(tail.find("if (i0 < 7)"), std::string::npos) << tail;
  const std::string dot = lowered(find_case("chain_dot_form"));
  EXPECT_EQ(count(dot, "kiln_mk_f32("), 1u) << dot;  // the second product only
  EXPECT_NE(dot.find("acc = (acc + "), std::string::npos) << dot;
  EXPECT_EQ(dot.find("kiln_bpack"), std::string::npos) << dot;
  EXPECT_EQ(count(lowered(find_case("three_chained_f64")), "kiln_mk_f32("), 0u);
}

// Other tile shapes from the schedule (one row per tile; 16 rows and 64 columns per call) give
// the same results.
TEST(LowerChain, ScheduleVariants) {
  for (auto [mr, nr] : std::vector<std::pair<int, int>>{{1, 4}, {16, 64}, {3, 8}}) {
    loop::Schedule sched;
    sched.contraction.mr = mr;
    sched.contraction.nr = nr;
    for (const char* name : {"attention", "mlp_layernorm", "chain_transposed_operand", "chain_row_tail"}) {
      SCOPED_TRACE(cat(name, " mr=", mr, " nr=", nr));
      const Case& c = find_case(name);
      auto g = make_graph(c);
      FusionPlan plan = plan_of(*g, c);
      auto multi = multi_groups(plan);
      ASSERT_EQ(multi.size(), 1u);
      auto lg = loop::lower_group(*multi[0], multi[0]->name, sched);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const TensorMap inputs = random_inputs(*g, 8, {}, false);
      auto values = run_reference_values(*g, inputs);
      std::vector<Tensor> ins, outs;
      for (const Value* v : multi[0]->inputs) ins.push_back(v->is_constant() ? v->constant() : values.at(v));
      for (const Value* v : multi[0]->outputs) outs.emplace_back(v->dtype(), v->shape());
      std::vector<Tensor*> in_ptrs, out_ptrs;
      for (auto& t : ins) in_ptrs.push_back(&t);
      for (auto& t : outs) out_ptrs.push_back(&t);
      loop::interpret(*lg.kernel, in_ptrs, out_ptrs);
      for (size_t i = 0; i < outs.size(); ++i)
        EXPECT_EQ(compare_tensors(outs[i], values.at(multi[0]->outputs[i])), "") << "output " << i;
    }
  }
}

// Siblings: one scope per part; values only the trailing part reads live in local buffers.
TEST(LowerChain, SiblingNestShape) {
  const std::string a = lowered(find_case("sibling_convs"));
  EXPECT_EQ(count(a, "if 1 {"), 2u) << a;
  EXPECT_EQ(a.find("kiln_mid"), std::string::npos) << a;
  const std::string b = lowered(find_case("sibling_convs_add"));
  EXPECT_EQ(count(b, "if 1 {"), 3u) << b;
  EXPECT_NE(b.find("kiln_mid0"), std::string::npos) << b;  // conv_b's output (conv_a's is an output)
  EXPECT_EQ(b.find("kiln_mid1"), std::string::npos) << b;
}

// Siblings of one A as one GEMM: one tile loop through the micro-kernel over all the siblings'
// columns, A (and its prologue) produced once — one packing of A, the prologue's division once —
// and the weights packed into one argument (the first sibling's, then the others').
TEST(LowerChain, SiblingGemmNestShape) {
  const std::string p = lowered(find_case("sibling_gemm_prologue"));
  SCOPED_TRACE(p);
  EXPECT_EQ(count(p, "tiled contraction"), 1u);
  EXPECT_NE(p.find("x 24] * [24 x 147], tile"), std::string::npos);  // 64 + 64 + 19 columns
  EXPECT_NE(p.find("A packed, B prepacked, columns of 3 siblings"), std::string::npos);
  EXPECT_EQ(count(p, "for kiln_t in"), 1u);
  EXPECT_EQ(count(p, "kiln_apack["), 2u);  // one store (the packing), one address (the micro-kernel)
  EXPECT_EQ(count(p, "sd["), 1u);          // the prologue (its Sub and Div), in the packing only
  EXPECT_EQ(count(p, "mu["), 1u);
  EXPECT_NE(p.find("// wq packed: panels of 32 columns of [24 x 40], then wk: panels of 32 columns of [24 x 64], "
                   "then wv: panels of 32 columns of [24 x 19]"),
            std::string::npos);
  EXPECT_EQ(count(p, "if 1 {"), 1u);  // one part: the joined GEMM
  // A plain input: read in place, each tile one panel within one sibling.
  const std::string q = lowered(find_case("sibling_gemm_in_place"));
  EXPECT_EQ(count(q, "tiled contraction"), 1u) << q;
  EXPECT_NE(q.find("B prepacked, columns of 3 siblings"), std::string::npos) << q;
  EXPECT_EQ(q.find("kiln_apack"), std::string::npos) << q;
  // Mixed: the two plain siblings join, the softmax one keeps its own nest; the trailing Add.
  const std::string m = lowered(find_case("sibling_gemm_mixed"));
  EXPECT_EQ(count(m, "columns of 2 siblings"), 1u) << m;
  EXPECT_EQ(count(m, "if 1 {"), 3u) << m;
  const std::string c = lowered(find_case("sibling_gemm_convs"));
  EXPECT_NE(c.find("columns of 2 siblings"), std::string::npos) << c;
}

// Sibling 3x3 convs of one input (padded: the input staged once into phase planes, each part's
// staging the same) join too, with widths 20 and 35; their K runs in (kernel position, channel)
// order, so within the contract rather than bit for bit. With panels of 8 columns and a small A
// reuse budget, a tile spans two column panels, and one tile both siblings (columns 16..31: the
// first's last 4, its padding, the second's first 8), through the per-line stores.
TEST(LowerChain, SiblingGemmStagedConvs) {
  const Case c{"staged", weights("w1", {20, 16, 3, 3}, 14) + weights("w2", {35, 16, 3, 3}, 15) + R"(  %a: f32[1,20,5,5] = Conv(%x, %w1) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv_a"
  %b: f32[1,35,5,5] = Conv(%x, %w2) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv_b"
  %rb: f32[1,35,5,5] = Relu(%b) name="relu_b"
)",
               "%x: f32[1,16,5,5]", "%a, %rb", true};
  auto g = make_graph(c);
  FusionPlan plan = plan_of(*g, c);
  const TensorMap inputs = random_inputs(*g, 9, {}, false);
  auto values = run_reference_values(*g, inputs);
  for (int64_t reuse : {int64_t(512) * 1024, int64_t(1024)}) {
    SCOPED_TRACE(cat("a_reuse_bytes ", reuse));
    loop::Schedule sched;
    sched.contraction.nr = 8;
    sched.contraction.a_reuse_bytes = reuse;
    auto lg = loop::lower_group(plan.groups.at(0), "staged", sched);
    ASSERT_TRUE(lg.kernel) << lg.reason;
    const std::string s = loop::print_kernel(*lg.kernel);
    EXPECT_NE(s.find("columns of 2 siblings"), std::string::npos) << s;
    EXPECT_EQ(count(s, "allocate kiln_xph"), 1u) << s;  // the input staged once
    if (reuse == 1024) {
      EXPECT_NE(s.find("tile 25x16"), std::string::npos) << s;  // two panels per tile (5-row tiles: one line each)
    }
    std::vector<Tensor> ins, outs;
    for (const Value* v : plan.groups[0].inputs) ins.push_back(v->is_constant() ? v->constant() : values.at(v));
    for (const Value* v : plan.groups[0].outputs) outs.emplace_back(v->dtype(), v->shape());
    std::vector<Tensor*> in_ptrs, out_ptrs;
    for (auto& t : ins) in_ptrs.push_back(&t);
    for (auto& t : outs) out_ptrs.push_back(&t);
    loop::interpret(*lg.kernel, in_ptrs, out_ptrs);
    for (size_t i = 0; i < outs.size(); ++i)
      EXPECT_EQ(testing::within_max_magnitude(outs[i], values.at(plan.groups[0].outputs[i]), 1e-5), "") << "output " << i;
    // Compiled (default numerics).
    const auto dir = std::filesystem::temp_directory_path() / ("kiln_sibling_gemm_test_" + std::to_string(::getpid()));
    const runtime::BuildOptions o = testing::numerics_options(false, dir.string());
    auto module = runtime::JitModule::build(codegen::emit_c({*lg.kernel}, o.emit), o.compile);
    std::vector<Tensor> args_in = loop::kernel_arguments(*lg.kernel, ins), got;
    std::vector<void*> args;
    for (auto& t : args_in) args.push_back(t.raw());
    for (const Value* v : plan.groups[0].outputs) got.emplace_back(v->dtype(), v->shape());
    for (auto& t : got) args.push_back(t.raw());
    module->get(lg.kernel->name)(args.data());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(testing::within_max_magnitude(got[i], values.at(plan.groups[0].outputs[i]), 1e-4), "") << "compiled output " << i;
    module.reset();
    std::filesystem::remove_all(dir);
  }
}

// The splicing utilities: div/mod folded only where the ranges prove it; rebinding moves loads and
// stores of mapped buffers (with an index offset) and leaves the others.
TEST(LowerChain, IndexFoldAndRebind) {
  using namespace loop;
  const Expr i = var("i"), h = var("h"), k = var("k");
  const Expr n = add(add(mul(i, int_imm(768)), mul(h, int_imm(64))), k);  // (i*768 + h*64 + k)
  const std::map<std::string, int64_t> ranges = {{"i", 128}, {"h", 12}, {"k", 64}};
  EXPECT_EQ(print_expr(fold_index_divmod(div_floor(n, int_imm(768)), ranges)), "i");
  EXPECT_EQ(print_expr(fold_index_divmod(mod(n, int_imm(768)), ranges)), "((h * 64) + k)");
  EXPECT_EQ(print_expr(fold_index_divmod(mod(add(n, int_imm(1536)), int_imm(768)), ranges)), "((h * 64) + k)");
  EXPECT_EQ(print_expr(fold_index_divmod(div_floor(add(n, int_imm(1536)), int_imm(768)), ranges)), "(i + 2)");
  // Not provable: h may reach 12 (64*12 + 63 >= 768), k has no known range, or a term is negative.
  auto wider = ranges;
  wider["h"] = 13;
  const Expr q = div_floor(n, int_imm(768));
  EXPECT_EQ(print_expr(fold_index_divmod(q, wider)), print_expr(q));
  EXPECT_EQ(print_expr(fold_index_divmod(q, {{"i", 128}, {"h", 12}})), print_expr(q));
  const Expr neg = div_floor(binary(BinOp::Sub, mul(i, int_imm(768)), k), int_imm(768));
  EXPECT_EQ(print_expr(fold_index_divmod(neg, ranges)), print_expr(neg));
  // Loops bring their own ranges: the loop over k makes (i*64 + k) % 64 fold to k.
  auto a = std::make_shared<Buffer>(Buffer{"a", DType::Float32, {8, 64}, Scope::Global});
  auto b = std::make_shared<Buffer>(Buffer{"b", DType::Float32, {64}, Scope::Local});
  Stmt loop = for_loop("k", int_imm(64), {store(b, mod(add(mul(i, int_imm(64)), k), int_imm(64)), load(a, add(mul(i, int_imm(64)), k)))});
  EXPECT_EQ(print_stmt(fold_index_divmod(loop, {{"i", 8}})), "for k in [0, 64) {\n  b[k] = a[((i * 64) + k)]\n}\n");

  auto c = std::make_shared<Buffer>(Buffer{"c", DType::Float32, {512}, Scope::Global});
  auto d = std::make_shared<Buffer>(Buffer{"d", DType::Float64, {64}, Scope::Local});
  BufferMap m;
  m[a.get()] = BufferTarget{c, int_imm(100)};
  const Stmt moved = rebind_buffers(loop, m);
  EXPECT_EQ(print_stmt(moved), "for k in [0, 64) {\n  b[(((i * 64) + k) % 64)] = c[(((i * 64) + k) + 100)]\n}\n");
  EXPECT_EQ(print_stmt(loop).find("c["), std::string::npos);  // the original is untouched
  // A full-tensor position into a local row: the row's base subtracted first, then its offset in
  // the row buffer added (how the row passes read a staged row of a chain's tile).
  BufferMap row;
  row[a.get()] = BufferTarget{c, mul(var("t"), int_imm(64)), mul(i, int_imm(64))};
  EXPECT_EQ(print_stmt(rebind_buffers(loop, row)),
            "for k in [0, 64) {\n  b[(((i * 64) + k) % 64)] = c[((((i * 64) + k) - (i * 64)) + (t * 64))]\n}\n");
  row[a.get()] = BufferTarget{c, nullptr, int_imm(0)};  // a zero base is no subtraction
  EXPECT_EQ(print_stmt(rebind_buffers(loop, row)), "for k in [0, 64) {\n  b[(((i * 64) + k) % 64)] = c[((i * 64) + k)]\n}\n");
  BufferMap bad;
  bad[b.get()] = BufferTarget{d, nullptr};
  EXPECT_THROW(rebind_buffers(loop, bad), InternalError);
}

// What the chain lowering cannot prove correct is refused with a reason, and the group still
// runs (library kernels) with the reference's results.
TEST(LowerChain, Refusals) {
  struct Refused {
    Case c;
    std::string why;
  };
  const std::vector<Refused> refused = {
      {{"transposed_intermediate", R"(  %s: f32[4,4] = MatMul(%a, %b) name="mm1"
  %t: f32[4,4] = Transpose(%s) {perm=[1,0]} name="tr"
  %y: f32[4,3] = MatMul(%t, %c) name="mm2"
)", "%a: f32[4,5], %b: f32[5,4], %c: f32[4,3]", "%y", true},
       "not computed at its row position"},
      {{"right_operand_chained", R"(  %s: f32[4,4] = MatMul(%a, %b) name="mm1"
  %y: f32[3,4] = MatMul(%c, %s) name="mm2"
)", "%a: f32[4,5], %b: f32[5,4], %c: f32[3,4]", "%y", true},
       "right operand depends on another contraction"},
      // A depthwise conv into a 1x1 conv (a 1x1 into a depthwise is lower_pointwise_depthwise.cc's).
      {{"conv_chain", R"(  %a: f32[1,3,4,4] = Conv(%x, %w1) {kernel_shape=[3,3], pads=[1,1,1,1], group=3} name="dw"
  %r: f32[1,3,4,4] = Relu(%a) name="relu"
  %y: f32[1,2,4,4] = Conv(%r, %w2) {kernel_shape=[1,1]} name="pw"
)", "%x: f32[1,3,4,4], %w1: f32[3,1,3,3], %w2: f32[2,3,1,1]", "%y", true},
       "Conv in a chain of contractions"},
      {{"column_reduction", R"(  %ax = constant i64[1] [0]
  %s: f32[4,6] = MatMul(%a, %b) name="mm1"
  %m: f32[1,6] = ReduceMax(%s, %ax) {keepdims=1} name="colmax"
  %d: f32[4,6] = Sub(%s, %m) name="sub"
  %y: f32[4,3] = MatMul(%d, %c) name="mm2"
)", "%a: f32[4,5], %b: f32[5,6], %c: f32[6,3]", "%y", true},
       "non-trailing axes"},
      {{"rows_too_big", R"(  %s: f32[2,20000] = MatMul(%a, %b) name="mm1"
  %r: f32[2,20000] = Relu(%s) name="relu"
  %y: f32[2,3] = MatMul(%r, %c) name="mm2"
)", "%a: f32[2,2], %b: f32[2,20000], %c: f32[20000,3]", "%y", true, false},
       "of local rows"},
      {{"sibling_reduction_join", R"(  %ax = constant i64[1] [-1]
  %p: f32[3,4] = MatMul(%x, %w1) name="mm_a"
  %q: f32[3,4] = MatMul(%x, %w2) name="mm_b"
  %s: f32[3,4] = Add(%p, %q) name="add"
  %y: f32[3,1] = ReduceSum(%s, %ax) {keepdims=1} name="sum"
)", "%x: f32[3,5], %w1: f32[5,4], %w2: f32[5,4]", "%y", true},
       "after sibling contractions"},
  };
  for (const auto& [c, why] : refused) {
    SCOPED_TRACE(c.name);
    auto g = make_graph(c);
    FusionPlan plan = plan_of(*g, c);
    auto lg = loop::lower_group(plan.groups[0], c.name, shape_schedule());  // its 64 KiB of local rows
    EXPECT_FALSE(lg.kernel);
    EXPECT_NE(lg.reason.find(why), std::string::npos) << lg.reason;
    const TensorMap inputs = random_inputs(*g, 9, {}, c.edge_values);
    TensorMap want = run_reference(*g, inputs);
    auto run = testing::run_lowered(*g, plan, inputs);
    for (const auto& [name, t] : want) EXPECT_EQ(compare_tensors(run.outputs.at(name), t), "") << "output " << name;
  }
}

}  // namespace
}  // namespace kiln
