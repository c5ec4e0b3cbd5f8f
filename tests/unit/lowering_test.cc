// The lowering passes, numerically: every rewrite runs through the reference executor before and
// after on random inputs (lowering_test_util.h). This file: fold_batchnorm, lower_gemm and the
// lowering pipeline; lowering_decompose_test.cc has the decompositions and transpose_to_reshape.
#include <algorithm>
#include <sstream>

#include "lowering_test_util.h"
#include "transforms/fold_batchnorm.h"
#include "transforms/lower_gemm.h"
#include "transforms/lowering.h"

namespace kiln {
namespace {

using testing::check_pass_equivalence;
using testing::EquivalenceOptions;
using testing::op_types;
using testing::RandomConst;
using testing::with_constants;

// BN parameters for C channels, var positive.
std::vector<RandomConst> bn_params(int64_t c, DType dt = DType::Float32) {
  return {{"scale", dt, {c}}, {"shift", dt, {c}}, {"mean", dt, {c}}, {"var", dt, {c}, 0.1, 2.0}};
}

std::vector<RandomConst> concat(std::vector<RandomConst> a, const std::vector<RandomConst>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const Node* only_node(const Graph& g) {
  EXPECT_EQ(g.num_nodes(), 1u);
  return g.nodes().at(0);
}

// ---------------------------------------------------------------- fold_batchnorm

TEST(FoldBatchNorm, ConvWithBiasFoldsIntoOneConv) {
  std::mt19937 rng(7);
  const std::string text = with_constants(
      "graph main opset 17 (%x: f32[2,3,6,6]) -> (%y) {\n"
      "  %c: f32[2,4,6,6] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"conv\"\n"
      "  %y: f32[2,4,6,6] = BatchNormalization(%c, %scale, %shift, %mean, %var) {epsilon=0.001}\n"
      "}\n",
      concat({{"w", DType::Float32, {4, 3, 3, 3}}, {"b", DType::Float32, {4}}}, bn_params(4)), rng);
  auto g = check_pass_equivalence(text, "fold_batchnorm");
  const Node* conv = only_node(*g);
  EXPECT_EQ(conv->op_type(), "Conv");
  EXPECT_EQ(conv->name(), "conv");
  EXPECT_EQ(conv->attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(conv->output(0)->name(), "y");
}

TEST(FoldBatchNorm, GroupedConvWithoutBiasAndDoublePrecision) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    std::mt19937 rng(8);
    const std::string t = dt == DType::Float32 ? "f32" : "f64";
    const std::string text = with_constants(
        "graph main opset 17 (%x: " + t + "[1,4,5,5]) -> (%y) {\n"
        "  %c: " + t + "[1,6,2,2] = Conv(%x, %w) {group=2, strides=[2,2], kernel_shape=[2,2]}\n"
        "  %y: " + t + "[1,6,2,2] = BatchNormalization(%c, %scale, %shift, %mean, %var)\n"
        "}\n",
        concat({{"w", dt, {6, 2, 2, 2}}}, bn_params(6, dt)), rng);
    EquivalenceOptions o;
    o.rel = dt == DType::Float64 ? 1e-12 : 1e-5;
    auto g = check_pass_equivalence(text, "fold_batchnorm", o);
    EXPECT_EQ(op_types(*g), std::set<std::string>{"Conv"});
    EXPECT_EQ(only_node(*g)->num_inputs(), 3u);  // gained a bias
  }
}

TEST(FoldBatchNorm, MatMulAndGemmFoldTheirWeights) {
  std::mt19937 rng(9);
  const std::string mm = with_constants(
      "graph main opset 17 (%x: f32[4,6]) -> (%y) {\n"
      "  %m: f32[4,5] = MatMul(%x, %w) name=\"mm\"\n"
      "  %y: f32[4,5] = BatchNormalization(%m, %scale, %shift, %mean, %var)\n"
      "}\n",
      concat({{"w", DType::Float32, {6, 5}}}, bn_params(5)), rng);
  auto g = check_pass_equivalence(mm, "fold_batchnorm");
  EXPECT_EQ(op_types(*g), (std::set<std::string>{"MatMul", "Add"}));

  // Every C shape Gemm allows, with and without transB, alpha and beta.
  for (const char* c_type : {"", "f32[5]", "f32[1,5]", "f32[4,1]", "f32[4,5]", "f32[]"})
    for (int trans_b : {0, 1}) {
      std::vector<RandomConst> consts = bn_params(5);
      consts.push_back({"w", DType::Float32, trans_b ? Shape{5, 6} : Shape{6, 5}});
      std::string c_arg;
      if (*c_type) {
        std::string ct = c_type;
        Shape cs;
        std::stringstream dims(ct.substr(4, ct.size() - 5));
        for (std::string d; std::getline(dims, d, ',');) cs.push_back(std::stoll(d));
        consts.push_back({"c", DType::Float32, cs});
        c_arg = ", %c";
      }
      const std::string text = with_constants(
          "graph main opset 17 (%x: f32[4,6]) -> (%y) {\n"
          "  %m: f32[4,5] = Gemm(%x, %w" + c_arg + ") {alpha=0.75, beta=1.5, transB=" + std::to_string(trans_b) +
              "} name=\"fc\"\n"
              "  %y: f32[4,5] = BatchNormalization(%m, %scale, %shift, %mean, %var)\n"
              "}\n",
          consts, rng);
      SCOPED_TRACE(text);
      auto gg = check_pass_equivalence(text, "fold_batchnorm");
      const Node* gemm = only_node(*gg);
      EXPECT_EQ(gemm->op_type(), "Gemm");
      EXPECT_EQ(gemm->attr_float("beta", 0), 1.0f);
      EXPECT_EQ(gemm->attr_float("alpha", 0), 0.75f);
    }
}

TEST(FoldBatchNorm, OriginalConstantsAreNotModified) {
  std::mt19937 rng(10);
  auto g = parse_graph(with_constants(
      "graph main opset 17 (%x: f32[1,2,3,3]) -> (%y, %z) {\n"
      "  %c: f32[1,3,3,3] = Conv(%x, %w)\n"
      "  %y: f32[1,3,3,3] = BatchNormalization(%c, %scale, %shift, %mean, %var)\n"
      "  %z: f32[1,3,3,3] = Conv(%x, %w)\n"
      "}\n",
      concat({{"w", DType::Float32, {3, 2, 1, 1}}}, bn_params(3)), rng));
  const Tensor w = g->find_value("w")->constant();  // shares storage with the graph's constant
  const Tensor snapshot = w.clone();
  ASSERT_TRUE(FoldBatchNorm().run(*g));
  EXPECT_TRUE(w.bitwise_equal(snapshot));
  EXPECT_TRUE(g->find_value("w")->constant().bitwise_equal(snapshot));  // still used by %z's Conv
}

TEST(FoldBatchNorm, UnfoldableConstantBnBecomesAffine) {
  std::mt19937 rng(11);
  for (const char* shape : {"[2,3]", "[2,3,4]", "[2,3,2,2,2]"}) {
    const std::string s = shape;
    const std::string text = with_constants(
        "graph main opset 17 (%x: f32" + s + ") -> (%y) {\n"
        "  %r: f32" + s + " = Relu(%x)\n"
        "  %y: f32" + s + " = BatchNormalization(%r, %scale, %shift, %mean, %var) {epsilon=0.01}\n"
        "}\n",
        bn_params(3), rng);
    SCOPED_TRACE(text);
    auto g = check_pass_equivalence(text, "fold_batchnorm");
    EXPECT_EQ(op_types(*g), (std::set<std::string>{"Relu", "Mul", "Add"}));
  }
  // A producer with a second consumer keeps its weights.
  const std::string shared = with_constants(
      "graph main opset 17 (%x: f32[1,2,3,3]) -> (%y, %z) {\n"
      "  %c: f32[1,3,3,3] = Conv(%x, %w)\n"
      "  %y: f32[1,3,3,3] = BatchNormalization(%c, %scale, %shift, %mean, %var)\n"
      "  %z: f32[1,3,3,3] = Relu(%c)\n"
      "}\n",
      concat({{"w", DType::Float32, {3, 2, 1, 1}}}, bn_params(3)), rng);
  auto g = check_pass_equivalence(shared, "fold_batchnorm");
  EXPECT_EQ(op_types(*g), (std::set<std::string>{"Conv", "Mul", "Add", "Relu"}));
}

TEST(FoldBatchNorm, RuntimeParametersBecomeArithmetic) {
  EquivalenceOptions o;
  o.ranges["var"] = {0.1, 2.0};
  auto g = check_pass_equivalence(
      "graph main opset 17 (%x: f32[2,3,4,4], %scale: f32[3], %shift: f16[3], %mean: f32[3], %var: f32[3]) -> (%y) {\n"
      "  %y: f32[2,3,4,4] = BatchNormalization(%x, %scale, %shift, %mean, %var) {epsilon=0.01}\n"
      "}\n",
      "fold_batchnorm", o);
  EXPECT_EQ(op_types(*g), (std::set<std::string>{"Reshape", "Cast", "Sub", "Add", "Sqrt", "Div", "Mul"}));
}

TEST(FoldBatchNorm, RefusalsNameTheReason) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3], %s: f32[3], %i: i32[2,3], %w: f32[3,3]) -> (%a, %b, %rm, %c, %d) {\n"
      "  %a: f32[2,3], %m1: f32[3], %v1: f32[3] = BatchNormalization(%x, %s, %s, %s, %s) {training_mode=1}\n"
      "  %b: f32[2,3], %rm: f32[3] = BatchNormalization(%x, %s, %s, %s, %s)\n"
      "  %mm: f32[2,3] = MatMul(%x, %w)\n"
      "  %c: f32[2,3] = BatchNormalization(%mm, %s, %s, %s, %s)\n"
      "  %d: f32[2,3] = Relu(%x)\n"
      "}\n");
  auto node = [&](const char* out) { return g->find_value(out)->producer(); };
  EXPECT_EQ(FoldBatchNorm::refusal(*g, *node("a")), "training_mode=1 normalizes with batch statistics");
  EXPECT_EQ(FoldBatchNorm::refusal(*g, *node("b")), "the running mean/var outputs are used");
  EXPECT_EQ(FoldBatchNorm::refusal(*g, *node("d")), "not a BatchNormalization");
  EXPECT_EQ(FoldBatchNorm::refusal(*g, *node("c")), "");
  EXPECT_EQ(FoldBatchNorm::fold_refusal(*g, *node("c")), "the parameters are not constant");
}

TEST(FoldBatchNorm, FoldRefusalsForProducers) {
  std::mt19937 rng(12);
  auto g = parse_graph(with_constants(
      "graph main opset 17 (%x: f32[2,3,4], %x2: f32[2,3], %wd: f32[3,3]) -> (%a, %b, %c) {\n"
      "  %m3: f32[2,3,3] = MatMul(%x, %w)\n"
      "  %a: f32[2,3,3] = BatchNormalization(%m3, %scale, %shift, %mean, %var)\n"
      "  %md: f32[2,3] = MatMul(%x2, %wd)\n"
      "  %b: f32[2,3] = BatchNormalization(%md, %scale, %shift, %mean, %var)\n"
      "  %c: f32[2,3] = BatchNormalization(%x2, %scale, %shift, %mean, %var)\n"
      "}\n",
      concat({{"w", DType::Float32, {4, 3}}}, bn_params(3)), rng));
  auto node = [&](const char* out) { return g->find_value(out)->producer(); };
  EXPECT_EQ(FoldBatchNorm::fold_refusal(*g, *node("a")),
            "MatMul output is not [batch, features], so axis 1 is not the feature axis");
  EXPECT_EQ(FoldBatchNorm::fold_refusal(*g, *node("b")), "MatMul weight is not constant");
  EXPECT_EQ(FoldBatchNorm::fold_refusal(*g, *node("c")), "X is not computed by a node");
}

// ---------------------------------------------------------------- lower_gemm

TEST(LowerGemm, EveryAttributeCombinationMatchesTheReference) {
  const std::vector<std::string> c_shapes = {"", "[5]", "[1,5]", "[4,1]", "[4,5]", "[]"};
  int cases = 0;
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (bool const_a : {false, true})
        for (bool const_b : {false, true})
          for (const std::string& cs : c_shapes)
            for (bool const_c : {false, true})
              for (const char* ab : {"alpha=1.0, beta=1.0", "alpha=0.5, beta=2.0", "alpha=-1.5, beta=0.0"}) {
                if (cs.empty() && const_c) continue;
                std::mt19937 rng(unsigned(++cases));
                std::vector<RandomConst> consts;
                std::string inputs;
                auto operand = [&](const std::string& name, bool constant, Shape s) {
                  std::string type = "f32" + shape_str(s);
                  if (constant) consts.push_back({name, DType::Float32, s});
                  else inputs += std::string(inputs.empty() ? "" : ", ") + "%" + name + ": " + type;
                };
                operand("a", const_a, ta ? Shape{6, 4} : Shape{4, 6});
                operand("b", const_b, tb ? Shape{5, 6} : Shape{6, 5});
                Shape c_shape;
                if (!cs.empty()) {
                  std::stringstream dims(cs.substr(1, cs.size() - 2));
                  for (std::string d; std::getline(dims, d, ',');) c_shape.push_back(std::stoll(d));
                  operand("c", const_c, c_shape);
                }
                const std::string text = with_constants(
                    "graph main opset 17 (" + inputs + ") -> (%y) {\n  %y: f32[4,5] = Gemm(%a, %b" +
                        (cs.empty() ? "" : ", %c") + ") {" + ab + ", transA=" + std::to_string(ta) +
                        ", transB=" + std::to_string(tb) + "} name=\"fc\"\n}\n",
                    consts, rng);
                SCOPED_TRACE(text);
                auto g = check_pass_equivalence(text, "lower_gemm");
                std::set<std::string> ops = op_types(*g);
                EXPECT_FALSE(ops.count("Gemm"));
                EXPECT_TRUE(ops.count("MatMul"));
                // Constant operands are transposed at compile time, never at run time.
                EXPECT_EQ(ops.count("Transpose") != 0, (ta && !const_a) || (tb && !const_b));
                if (HasFailure()) return;
              }
  EXPECT_EQ(cases, 2 * 2 * 2 * 2 * 11 * 3);
}

TEST(LowerGemm, IntegerGemmIsBitExact) {
  std::mt19937 rng(3);
  const std::string text = with_constants(
      "graph main opset 17 (%a: i32[3,4]) -> (%y, %z) {\n"
      "  %y: i32[3,2] = Gemm(%a, %b, %c) {alpha=3.0, beta=2.0, transB=1}\n"
      "  %z: i64[2,2] = Gemm(%p, %q) {alpha=2.5}\n"
      "}\n",
      {{"b", DType::Int32, {2, 4}, -9, 9}, {"c", DType::Int32, {2}, -9, 9}, {"p", DType::Int64, {2, 2}, -9, 9},
       {"q", DType::Int64, {2, 2}, -9, 9}},
      rng);
  EquivalenceOptions o;
  o.rel = 0;
  o.ranges["a"] = {-9, 9};
  auto g = check_pass_equivalence(text, "lower_gemm", o);
  EXPECT_EQ(op_types(*g), (std::set<std::string>{"MatMul", "Mul", "Add"}));
}

TEST(LowerGemm, RefusalsAndSharedWeights) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3], %v: f32[3], %w: f32[3,2]) -> (%y, %z) {\n"
      "  %y: f32[2] = Gemm(%x, %v)\n"
      "  %z: f32[2,2] = com.example::Gemm(%x, %w)\n"
      "}\n");
  EXPECT_EQ(LowerGemm::refusal(*g->find_value("y")->producer()), "A and B are not matrices");
  EXPECT_EQ(LowerGemm::refusal(*g->find_value("z")->producer()), "not a Gemm");
  EXPECT_FALSE(LowerGemm().run(*g));
}

// ---------------------------------------------------------------- the lowering pipeline

TEST(Lowering, PipelineOrderAndNames) {
  std::vector<std::string> order;
  for (const auto& p : lowering_pipeline()) order.push_back(p->name());
  EXPECT_EQ(order, (std::vector<std::string>{"fold_batchnorm", "lower_gemm", "lower_conv_transpose", "fold_pad_into_conv", "trim_conv_taps",
                                             "lower_conv3d", "lower_einsum",
                                             "decompose_recurrent", "decompose_normalization", "decompose_softmax", "decompose_activations",
                                             "decompose_resize", "decompose_grid_sample", "decompose_lrn", "expand_square",
                                             "transpose_to_reshape",
                                             "eliminate_common_subexpressions", "eliminate_dead_code"}));
  EXPECT_EQ(lowering_pass_names().size(), 18u);
  // Under --strict-fp without lower_conv3d (its 2-D conv sums in another order).
  std::vector<std::string> strict;
  for (const auto& p : lowering_pipeline(/*strict_fp=*/true)) strict.push_back(p->name());
  EXPECT_EQ(std::count(strict.begin(), strict.end(), "lower_conv3d"), 0);
  EXPECT_EQ(strict.size(), order.size() - 1);
  for (const std::string& name : lowering_pass_names()) EXPECT_EQ(create_pass(name)->name(), name);
  Graph g;
  PipelineOptions opts;
  opts.disabled = {"fold_constants"};  // a simplification pass, not part of this pipeline
  EXPECT_THROW(run_lowering(g, opts), UserError);
}

TEST(Lowering, SmallCnnAndTransformerBlockLowerToPrimitives) {
  std::mt19937 rng(21);
  const std::string cnn = with_constants(
      "graph main opset 17 (%x: f32[2,3,8,8]) -> (%probs) {\n"
      "  %c: f32[2,4,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"conv\"\n"
      "  %bn: f32[2,4,8,8] = BatchNormalization(%c, %scale, %shift, %mean, %var) name=\"bn\"\n"
      "  %act: f32[2,4,8,8] = HardSwish(%bn)\n"
      "  %in: f32[2,4,8,8] = InstanceNormalization(%act, %in_s, %in_b)\n"
      "  %pool: f32[2,4,1,1] = GlobalAveragePool(%in)\n"
      "  %flat: f32[2,4] = Reshape(%pool, %flat_shape)\n"
      "  %logits: f32[2,10] = Gemm(%flat, %fc_w, %fc_b) {transB=1}\n"
      "  %probs: f32[2,10] = LogSoftmax(%logits)\n"
      "}\n",
      concat({{"w", DType::Float32, {4, 3, 3, 3}},
              {"b", DType::Float32, {4}},
              {"in_s", DType::Float32, {4}},
              {"in_b", DType::Float32, {4}},
              {"fc_w", DType::Float32, {10, 4}},
              {"fc_b", DType::Float32, {10}}},
             bn_params(4)),
      rng);
  const std::string with_shape = cnn.substr(0, cnn.find("{\n") + 2) + "  %flat_shape = constant i64[2] [2, 4]\n" +
                                 cnn.substr(cnn.find("{\n") + 2);
  auto check = [](const std::string& text, const std::set<std::string>& expected_ops) {
    auto g = parse_graph(text);
    std::mt19937 r(5);
    TensorMap inputs;
    for (const Value* in : g->inputs()) inputs[in->name()] = testing::random_tensor(in->dtype(), in->shape(), r);
    const TensorMap before = run_reference(*g, inputs);
    run_lowering(*g);
    EXPECT_EQ(op_types(*g), expected_ops) << print_graph(*g);
    const TensorMap after = run_reference(*g, inputs);
    for (const auto& [name, ref] : before)
      for (int64_t i = 0; i < ref.numel(); ++i)
        ASSERT_NEAR(after.at(name).as_double(i), ref.as_double(i), 1e-5 * std::max(1.0, std::abs(ref.as_double(i))));
  };
  check(with_shape, {"Conv", "Mul", "Add", "Clip", "ReduceMean", "Sub", "Sqrt", "Div", "GlobalAveragePool", "Reshape",
                     "MatMul", "ReduceMax", "Exp", "ReduceSum", "Log"});

  const std::string block = with_constants(
      "graph main opset 17 (%x: f32[1,6,8]) -> (%y) {\n"
      "  %ln: f32[1,6,8] = LayerNormalization(%x, %g, %b) {axis=-1}\n"
      "  %t: f32[6,1,8] = Transpose(%ln) {perm=[1,0,2]}\n"
      "  %flat: f32[6,8] = Reshape(%t, %s68)\n"
      "  %h: f32[6,8] = Gemm(%flat, %w1, %b1) {transB=1}\n"
      "  %a: f32[6,8] = Softmax(%h) {axis=0}\n"
      "  %y: f32[1,6,8] = Reshape(%a, %s168)\n"
      "}\n",
      {{"g", DType::Float32, {8}}, {"b", DType::Float32, {8}}, {"w1", DType::Float32, {8, 8}}, {"b1", DType::Float32, {8}}},
      rng);
  const std::string block_full = block.substr(0, block.find("{\n") + 2) +
                                 "  %s68 = constant i64[2] [6, 8]\n  %s168 = constant i64[3] [1, 6, 8]\n" +
                                 block.substr(block.find("{\n") + 2);
  check(block_full, {"ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div", "Reshape", "MatMul", "ReduceMax", "Exp",
                     "ReduceSum"});
}

TEST(Lowering, DumpAfterWorksForLoweringPasses) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3]) -> (%y) {\n"
      "  %y: f32[2,3] = Softmax(%x)\n"
      "}\n");
  std::ostringstream dump;
  PipelineOptions opts;
  opts.dump = &dump;
  opts.dump_after = "decompose_softmax";
  run_lowering(*g, opts);
  EXPECT_EQ(dump.str().rfind("// after decompose_softmax\ngraph main", 0), 0u) << dump.str();
}

}  // namespace
}  // namespace kiln
