// The decomposition passes and transpose_to_reshape, checked numerically against the reference
// executor before and after the pass (lowering_test_util.h), plus their refusals.
#include <numeric>

#include "lowering_test_util.h"
#include "transforms/decompose_activations.h"
#include "transforms/decompose_normalization.h"
#include "transforms/decompose_softmax.h"
#include "transforms/transpose_to_reshape.h"

namespace kiln {
namespace {

using testing::check_pass_equivalence;
using testing::EquivalenceOptions;
using testing::op_types;
using testing::RandomConst;
using testing::with_constants;

std::string type_str(DType dt, const Shape& s) { return std::string(dtype_name(dt)) + shape_str(s); }

// ---------------------------------------------------------------- LayerNormalization

TEST(DecomposeNormalization, LayerNormEveryAxisWithAndWithoutBias) {
  const Shape x{2, 3, 4};
  for (int64_t axis : {-1, -2, 0, 1, 2})
    for (bool bias : {false, true})
      for (bool full_scale : {false, true}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        const Shape norm(x.begin() + a, x.end());
        // Scale either covers all normalized dims or just the last one (broadcast).
        const Shape scale = full_scale ? norm : Shape{x.back()};
        std::mt19937 rng(unsigned(axis + 10));
        std::vector<RandomConst> consts = {{"gamma", DType::Float32, scale}};
        if (bias) consts.push_back({"beta", DType::Float32, scale});
        const std::string text = with_constants(
            "graph main opset 17 (%x: f32[2,3,4]) -> (%y) {\n"
            "  %y: f32[2,3,4] = LayerNormalization(%x, %gamma" + std::string(bias ? ", %beta" : "") +
                ") {axis=" + std::to_string(axis) + ", epsilon=0.001}\n}\n",
            consts, rng);
        SCOPED_TRACE(text);
        auto g = check_pass_equivalence(text, "decompose_normalization");
        EXPECT_FALSE(op_types(*g).count("LayerNormalization"));
      }
}

TEST(DecomposeNormalization, LayerNormMeanAndInvStdDevOutputs) {
  // Used statistics outputs stay correct. They come straight from the chain when it runs in
  // stash_type (f32 X, f32 stash; f32 X, f64 stash computes in f64), and through a Cast when the
  // chain runs wider than the stash (f64 X with the default f32 stash is not narrowed).
  struct Case {
    const char *x, *stash, *stat, *mean_producer;
  };
  for (const Case& c : {Case{"f32", "1", "f32", "ReduceMean"}, Case{"f32", "11", "f64", "ReduceMean"},
                        Case{"f64", "1", "f32", "Cast"}}) {
    const std::string x = c.x, stat = c.stat;
    const std::string text = "graph main opset 17 (%x: " + x + "[3,5], %gamma: " + x + "[5], %beta: " + x +
                             "[5]) -> (%y, %mean, %inv) {\n  %y: " + x + "[3,5], %mean: " + stat + "[3,1], %inv: " +
                             stat + "[3,1] = LayerNormalization(%x, %gamma, %beta) {stash_type=" + c.stash + "}\n}\n";
    SCOPED_TRACE(text);
    auto g = check_pass_equivalence(text, "decompose_normalization");
    EXPECT_TRUE(op_types(*g).count("Reciprocal"));
    EXPECT_EQ(g->find_value("mean")->producer()->op_type(), c.mean_producer);
  }
  // Mean requested but unused by anything: not computed separately.
  auto g = check_pass_equivalence(
      "graph main opset 17 (%x: f32[3,5], %gamma: f32[5]) -> (%y) {\n"
      "  %y: f32[3,5], %mean: f32[3,1], %inv: f32[3,1] = LayerNormalization(%x, %gamma)\n}\n",
      "decompose_normalization");
  EXPECT_FALSE(op_types(*g).count("Reciprocal"));
  EXPECT_EQ(g->find_value("mean"), nullptr);
}

TEST(DecomposeNormalization, LayerNormHalfAndDoublePrecision) {
  EquivalenceOptions half;
  half.rel = 4e-3;  // f16 output rounding; the statistics themselves run in f32
  auto g = check_pass_equivalence(
      "graph main opset 17 (%x: f16[4,8], %gamma: f16[8], %beta: f16[8]) -> (%y) {\n"
      "  %y: f16[4,8] = LayerNormalization(%x, %gamma, %beta)\n}\n",
      "decompose_normalization", half);
  EXPECT_TRUE(op_types(*g).count("Cast"));
  EquivalenceOptions dbl;
  dbl.rel = 1e-12;
  g = check_pass_equivalence(
      "graph main opset 17 (%x: f64[4,8], %gamma: f64[8]) -> (%y) {\n"
      "  %y: f64[4,8] = LayerNormalization(%x, %gamma)\n}\n",
      "decompose_normalization", dbl);
  EXPECT_FALSE(op_types(*g).count("Cast"));  // the f32 stash never narrows an f64 computation
}

// ---------------------------------------------------------------- InstanceNorm, MVN

TEST(DecomposeNormalization, InstanceNormRanksAndRuntimeScale) {
  for (const Shape& x : {Shape{2, 3, 5}, Shape{2, 3, 4, 4}, Shape{1, 2, 3, 2, 2}}) {
    std::mt19937 rng(4);
    const std::string t = type_str(DType::Float32, x);
    const std::string text = with_constants(
        "graph main opset 17 (%x: " + t + ", %b: f32[" + std::to_string(x[1]) + "]) -> (%y) {\n"
        "  %y: " + t + " = InstanceNormalization(%x, %s, %b) {epsilon=0.01}\n}\n",
        {{"s", DType::Float32, {x[1]}}}, rng);
    SCOPED_TRACE(text);
    auto g = check_pass_equivalence(text, "decompose_normalization");
    EXPECT_EQ(op_types(*g), (std::set<std::string>{"ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div", "Reshape"}));
  }
}

TEST(DecomposeNormalization, MeanVarianceNormAxes) {
  for (const char* axes : {"", " {axes=[1]}", " {axes=[-1,0]}", " {axes=[0,1,2,3]}"}) {
    SCOPED_TRACE(axes);
    EquivalenceOptions o;
    o.rel = 2e-5;  // divides by a std that can be small for a 2-element group
    check_pass_equivalence(
        "graph main opset 17 (%x: f32[2,3,4,5]) -> (%y) {\n"
        "  %y: f32[2,3,4,5] = MeanVarianceNormalization(%x)" + std::string(axes) + "\n}\n",
        "decompose_normalization", o);
  }
}

TEST(DecomposeNormalization, Refusals) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3], %i: i32[2,3], %s: f32[3], %s4: f32[4], %x2: f32[2,3,4]) "
      "-> (%a, %b, %c, %d, %e, %f) {\n"
      "  %a: f32[2,3] = LayerNormalization(%x, %s) {axis=2}\n"
      "  %b: i32[2,3] = LayerNormalization(%i, %s)\n"
      "  %c: f32[2,3] = LayerNormalization(%x, %s4)\n"
      "  %d: f32[2,3] = InstanceNormalization(%x, %s, %s)\n"
      "  %e: f32[2,3,4] = MeanVarianceNormalization(%x2) {axes=[1,1]}\n"
      "  %f: f32[2,3] = LayerNormalization(%x, %s) {stash_type=7}\n"
      "}\n");
  auto why = [&](const char* out) { return DecomposeNormalization::refusal(*g, *g->find_value(out)->producer()); };
  EXPECT_EQ(why("a"), "axis is out of range");
  EXPECT_EQ(why("b"), "X is not a floating-point tensor");
  EXPECT_EQ(why("c"), "Scale does not broadcast to X or differs in dtype");
  EXPECT_EQ(why("d"), "X has no spatial axes (rank < 3)");
  EXPECT_EQ(why("e"), "axes are out of range or repeated");
  EXPECT_EQ(why("f"), "stash_type is not a floating-point type");
  EXPECT_FALSE(DecomposeNormalization().run(*g));
}

TEST(DecomposeNormalization, BatchNormTrainingModeAndRunningStatistics) {
  // Batch statistics over every axis but the channel axis; the running mean and variance, when
  // they are outputs, blend the inputs with momentum.
  for (const char* x : {"f32[2,3,4,5]", "f32[4,3]", "f32[2,3,7]"}) {
    const std::string t = x;
    const std::string text = "graph main opset 15 (%x: " + t + ", %s: f32[3], %b: f32[3], %m: f32[3], %v: f32[3]) "
                             "-> (%y, %rm, %rv) {\n  %y: " + t + ", %rm: f32[3], %rv: f32[3] = "
                             "BatchNormalization(%x, %s, %b, %m, %v) {training_mode=1, momentum=0.8, epsilon=0.01}\n}\n";
    SCOPED_TRACE(text);
    EquivalenceOptions o;
    o.rel = 1e-5;  // the reference computes the statistics in double
    auto g = check_pass_equivalence(text, "decompose_normalization", o);
    EXPECT_FALSE(op_types(*g).count("BatchNormalization"));
  }
  // Only Y used: no running statistics are computed.
  auto g = check_pass_equivalence(
      "graph main opset 15 (%x: f32[2,3,4], %s: f32[3], %b: f32[3], %m: f32[3], %v: f32[3]) -> (%y) {\n"
      "  %y: f32[2,3,4], %rm: f32[3], %rv: f32[3] = BatchNormalization(%x, %s, %b, %m, %v) {training_mode=1}\n}\n",
      "decompose_normalization");
  EXPECT_EQ(g->find_value("rm"), nullptr);
  // Parameters of another dtype than X stay with the reference kernel, with the reason.
  auto h = parse_graph(
      "graph main opset 15 (%x: f32[2,3], %s: f64[3]) -> (%y) {\n"
      "  %y: f32[2,3] = BatchNormalization(%x, %s, %s, %s, %s) {training_mode=1}\n}\n");
  EXPECT_EQ(DecomposeNormalization::refusal(*h, *h->find_value("y")->producer()),
            "the parameters are not vectors of X's dtype and channel count");
}

// ---------------------------------------------------------------- Softmax, LogSoftmax

TEST(DecomposeSoftmax, EveryAxisIncludingLargeInputs) {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {-1, 0, 1, 2, -3}) {
      const std::string text = "graph main opset 17 (%x: f32[2,3,4]) -> (%y) {\n  %y: f32[2,3,4] = " +
                               std::string(op) + "(%x) {axis=" + std::to_string(axis) + "}\n}\n";
      SCOPED_TRACE(text);
      EquivalenceOptions o;
      check_pass_equivalence(text, "decompose_softmax", o);
      // Values near 100: exp would overflow f32 without subtracting the max first.
      o.ranges["x"] = {80, 120};
      o.rel = 1e-5;
      auto g = check_pass_equivalence(text, "decompose_softmax", o);
      std::set<std::string> want = {"ReduceMax", "Sub", "Exp", "ReduceSum"};
      want.insert(std::string(op) == "Softmax" ? "Div" : "Log");
      EXPECT_EQ(op_types(*g), want);
    }
  EquivalenceOptions dbl;
  dbl.rel = 1e-13;
  check_pass_equivalence("graph main opset 17 (%x: f64[3,7]) -> (%y) {\n  %y: f64[3,7] = Softmax(%x)\n}\n",
                         "decompose_softmax", dbl);
}

TEST(DecomposeSoftmax, HardmaxEveryAxisWithTiesAndNaN) {
  // Floor(x) over [0, 3) makes many ties (the first index wins); Sqrt of [-1, 1) makes NaNs, which
  // the reference Hardmax ranks above every number (the first NaN wins).
  for (const char* pre : {"Floor", "Sqrt", "Identity"})
    for (int64_t axis : {-1, 0, 1, 2}) {
      const std::string text = "graph main opset 17 (%x: f32[2,3,5]) -> (%y) {\n  %t: f32[2,3,5] = " + std::string(pre) +
                               "(%x)\n  %y: f32[2,3,5] = Hardmax(%t) {axis=" + std::to_string(axis) + "}\n}\n";
      SCOPED_TRACE(text);
      EquivalenceOptions o;
      o.ranges["x"] = std::string(pre) == "Floor" ? std::pair<double, double>{0, 3} : std::pair<double, double>{-1, 1};
      auto g = check_pass_equivalence(text, "decompose_softmax", o);
      EXPECT_FALSE(op_types(*g).count("Hardmax"));
      EXPECT_TRUE(op_types(*g).count("ArgMax"));
    }
}

TEST(DecomposeSoftmax, Refusals) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3], %i: i32[2,3], %z: f32[0,3]) -> (%a, %b, %c, %d) {\n"
      "  %a: f32[2,3] = Softmax(%x) {axis=2}\n"
      "  %b: i32[2,3] = LogSoftmax(%i)\n"
      "  %c: f32[0,3] = Hardmax(%z) {axis=0}\n"
      "  %d: f32[2,3] = Relu(%x)\n"
      "}\n");
  auto why = [&](const char* out) { return DecomposeSoftmax::refusal(*g->find_value(out)->producer()); };
  EXPECT_EQ(why("a"), "axis is out of range");
  EXPECT_EQ(why("b"), "X is not a floating-point tensor");
  EXPECT_EQ(why("c"), "X is empty (ArgMax has no row to rank)");
  EXPECT_EQ(why("d"), "not a Softmax, LogSoftmax or Hardmax");
  EXPECT_FALSE(DecomposeSoftmax().run(*g));
}

// ---------------------------------------------------------------- HardSigmoid, HardSwish

TEST(DecomposeActivations, HardSigmoidAndHardSwishInEveryFloatType) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16})
    for (const char* op : {"HardSigmoid(%x)", "HardSigmoid(%x) {alpha=0.3, beta=0.4}", "HardSwish(%x)"}) {
      const std::string t = type_str(dt, {3, 17});
      const std::string text = "graph main opset 17 (%x: " + t + ") -> (%y) {\n  %y: " + t + " = " + op + "\n}\n";
      SCOPED_TRACE(text);
      EquivalenceOptions o;
      o.ranges["x"] = {-7, 7};  // both clipped regions and the linear part
      o.rel = dt == DType::Float32 ? 1e-6 : dt == DType::Float64 ? 1e-15 : dt == DType::Float16 ? 2e-3 : 2e-2;
      auto g = check_pass_equivalence(text, "decompose_activations", o);
      EXPECT_EQ(op_types(*g), (std::set<std::string>{"Mul", "Add", "Clip"}));
      for (const Value* v : g->values()) {
        if (v->is_constant()) {
          EXPECT_EQ(v->dtype(), dt) << v->name();
        }
      }
    }
}

TEST(DecomposeActivations, IntegerInputIsRefused) {
  auto g = parse_graph("graph main opset 17 (%x: i32[3]) -> (%y) {\n  %y: i32[3] = HardSwish(%x)\n}\n");
  EXPECT_EQ(DecomposeActivations::refusal(*g->find_value("y")->producer()), "X is not a floating-point tensor");
  EXPECT_FALSE(DecomposeActivations().run(*g));
}

// ---------------------------------------------------------------- transpose_to_reshape

// For every permutation of a few shapes with size-1 dims, the pass rewrites exactly the
// Transposes whose output data (flat) equals their input data, and the rewrite is exact.
TEST(TransposeToReshape, RewritesExactlyTheDataPreservingPermutations) {
  int rewritten = 0, kept = 0;
  for (const Shape& in : {Shape{1, 3, 1, 4}, Shape{2, 1, 1, 3}, Shape{1, 1, 5, 1}, Shape{2, 3, 4, 1}}) {
    std::vector<int64_t> perm(in.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      Shape out;
      for (int64_t p : perm) out.push_back(in[size_t(p)]);
      std::string perm_s;
      for (int64_t p : perm) perm_s += (perm_s.empty() ? "" : ",") + std::to_string(p);
      const std::string text = "graph main opset 17 (%x: " + type_str(DType::Float32, in) + ") -> (%y) {\n  %y: " +
                               type_str(DType::Float32, out) + " = Transpose(%x) {perm=[" + perm_s + "]}\n}\n";
      SCOPED_TRACE(text);
      auto g = parse_graph(text);
      // Ground truth: distinct input values, compare flat data.
      Tensor x(DType::Float32, in);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i);
      const Tensor y = run_reference(*g, {{"x", x}}).at("y");
      const bool moves_data = !y.reshaped(in).bitwise_equal(x);
      EquivalenceOptions o;
      o.rel = 0;
      o.expect_change = !moves_data;
      auto lowered = check_pass_equivalence(text, "transpose_to_reshape", o);
      EXPECT_EQ(op_types(*lowered), std::set<std::string>{moves_data ? "Transpose" : "Reshape"});
      (moves_data ? kept : rewritten)++;
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  // Shapes with 2, 2, 1 and 3 non-unit dims: 24/2 + 24/2 + 24 + 24/6 rewrite.
  EXPECT_EQ(rewritten, 12 + 12 + 24 + 4);
  EXPECT_EQ(kept, 96 - rewritten);
}

TEST(TransposeToReshape, DefaultPermAndRefusals) {
  EquivalenceOptions o;
  o.rel = 0;
  check_pass_equivalence("graph main opset 17 (%x: f32[1,1,6]) -> (%y) {\n  %y: f32[6,1,1] = Transpose(%x)\n}\n",
                         "transpose_to_reshape", o);
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2,3], %z: f32[0,1,2]) -> (%a, %b, %c) {\n"
      "  %a: f32[3,2] = Transpose(%x)\n"
      "  %b: f32[1,0,2] = Transpose(%z) {perm=[1,0,2]}\n"
      "  %c: f32[2,3] = Transpose(%x) {perm=[0,0]}\n"
      "}\n");
  auto why = [&](const char* out) { return TransposeToReshape::refusal(*g->find_value(out)->producer()); };
  EXPECT_EQ(why("a"), "perm reorders dims larger than 1, which moves data");
  EXPECT_EQ(why("b"), "X has a 0-sized dim");
  EXPECT_EQ(why("c"), "perm is not a permutation");
}

}  // namespace
}  // namespace kiln
