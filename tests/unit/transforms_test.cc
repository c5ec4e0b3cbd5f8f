// Graph passes and the pipeline driver: what golden files cannot show (large constants, errors,
// dump/disable/timing options, verification after a broken pass).
#include <gtest/gtest.h>

#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "op_test_util.h"
#include "transforms/eliminate_common_subexpressions.h"
#include "transforms/eliminate_dead_code.h"
#include "transforms/fold_constants.h"
#include "transforms/pipeline.h"
#include "transforms/remove_identity.h"

namespace kiln {
namespace {

const char* kFlatten =
    "graph main opset 17 (%x: f32[2,3]) -> (%y) {\n"
    "  %axes = constant i64[1] [0]\n"
    "  %zero = constant i64[] [0]\n"
    "  %m1 = constant i64[1] [-1]\n"
    "  %i: f32[2,3] = Identity(%x)\n"
    "  %s: i64[2] = Shape(%i)\n"
    "  %g: i64[] = Gather(%s, %zero) {axis=0}\n"
    "  %u: i64[1] = Unsqueeze(%g, %axes)\n"
    "  %c: i64[2] = Concat(%u, %m1) {axis=0}\n"
    "  %y: f32[2,3] = Reshape(%i, %c)\n"
    "}\n";

std::string user_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------- pipeline driver

TEST(Pipeline, PassNamesAndOrder) {
  EXPECT_EQ(pass_names(), (std::vector<std::string>{"eliminate_common_subexpressions", "eliminate_dead_code",
                                                    "fold_constants", "remove_identity"}));
  std::vector<std::string> order;
  for (const auto& p : simplification_pipeline()) order.push_back(p->name());
  EXPECT_EQ(order, (std::vector<std::string>{"remove_identity", "eliminate_dead_code", "fold_constants",
                                             "eliminate_common_subexpressions", "eliminate_dead_code"}));
  EXPECT_EQ(create_pass("fold_constants")->name(), "fold_constants");
  EXPECT_EQ(user_error_of([] { create_pass("fold"); }),
            "unknown pass 'fold'; valid passes: eliminate_common_subexpressions, eliminate_dead_code, "
            "fold_constants, remove_identity");
}

TEST(Pipeline, DumpAfterOnePass) {
  auto g = parse_graph(kFlatten);
  std::ostringstream dump;
  PipelineOptions opts;
  opts.dump = &dump;
  opts.dump_after = "fold_constants";
  run_pipeline(*g, opts);
  EXPECT_EQ(dump.str(),
            "// after fold_constants\n"
            "graph main opset 17 (%x: f32[2,3]) -> (%y) {\n"
            "  %c = constant i64[2] [2, -1]\n"
            "  %y: f32[2,3] = Reshape(%x, %c)\n"
            "}\n");
  EXPECT_EQ(print_graph(*g), dump.str().substr(dump.str().find('\n') + 1));
}

TEST(Pipeline, DumpAfterAllMarksUnchangedPasses) {
  auto g = parse_graph(kFlatten);
  std::ostringstream dump;
  PipelineOptions opts;
  opts.dump = &dump;
  opts.dump_after = "all";
  run_pipeline(*g, opts);
  const std::string s = dump.str();
  EXPECT_NE(s.find("// after remove_identity\ngraph main"), std::string::npos) << s;
  EXPECT_NE(s.find("// after eliminate_dead_code (unchanged)\n// after fold_constants\ngraph"), std::string::npos) << s;
  EXPECT_NE(s.find("// after eliminate_common_subexpressions (unchanged)\n// after eliminate_dead_code (unchanged)\n"),
            std::string::npos)
      << s;
}

TEST(Pipeline, DisabledPassesAreSkipped) {
  auto g = parse_graph(kFlatten);
  PipelineOptions opts;
  opts.disabled = {"fold_constants", "remove_identity"};
  run_pipeline(*g, opts);
  EXPECT_EQ(print_graph(*g), kFlatten);
}

TEST(Pipeline, TimePassesPrintsEveryPassAndTotal) {
  auto g = parse_graph(kFlatten);
  std::ostringstream dump;
  PipelineOptions opts;
  opts.dump = &dump;
  opts.time_passes = true;
  opts.disabled = {"eliminate_common_subexpressions"};
  run_pipeline(*g, opts);
  std::vector<std::string> lines;
  std::istringstream in(dump.str());
  for (std::string l; std::getline(in, l);) lines.push_back(l.substr(0, l.find(':')));
  EXPECT_EQ(lines, (std::vector<std::string>{"// time remove_identity", "// time eliminate_dead_code",
                                             "// time fold_constants", "// time eliminate_dead_code",
                                             "// time total"}));
  EXPECT_NE(dump.str().find(" ms\n"), std::string::npos);
}

TEST(Pipeline, UnknownNamesListTheValidOnes) {
  Graph g;
  PipelineOptions opts;
  opts.dump_after = "cse";
  EXPECT_EQ(user_error_of([&] { run_pipeline(g, opts); }),
            "unknown pass 'cse' to dump after; valid names: eliminate_common_subexpressions, eliminate_dead_code, "
            "fold_constants, remove_identity, all");
  opts.dump_after = "";
  opts.disabled = {"dce"};
  EXPECT_EQ(user_error_of([&] { run_pipeline(g, opts); }),
            "unknown pass 'dce' to disable; valid passes: eliminate_common_subexpressions, eliminate_dead_code, "
            "fold_constants, remove_identity");
}

// A pass that claims a change and leaves a graph output undefined.
class BreakOutputs : public Pass {
 public:
  std::string name() const override { return "break_outputs"; }
  bool run(Graph& g) override {
    g.add_output(g.add_value("ghost", {DType::Float32, {1}}));
    return true;
  }
};

TEST(Pipeline, InvalidIrAfterAPassNamesThePass) {
  auto g = parse_graph(kFlatten);
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<RemoveIdentity>());
  passes.push_back(std::make_unique<BreakOutputs>());
  try {
    run_passes(*g, passes);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()),
              "IR verification failed after pass 'break_outputs':\ngraph output %ghost is never defined\n");
  }
  // Invalid input IR is reported before any pass runs.
  EXPECT_THROW(run_passes(*g, passes), InternalError);
}

// ---------------------------------------------------------------- fold_constants

TEST(FoldConstants, ShapeFoldMatchesTheShapeKernel) {
  Tensor x(DType::Float32, {2, 3, 5, 7});
  for (int64_t start : {-10, -2, 0, 1, 3, 4, 9})
    for (int64_t end : {-9, -1, 0, 2, 4, 10}) {
      Graph g;
      Value* in = g.add_input("x", {DType::Float32, {2, 3, 5, 7}});
      Value* out = g.add_value("s", {});
      g.add_node("Shape", {in}, {out}, {{"start", start}, {"end", end}});
      g.add_output(out);
      ASSERT_TRUE(FoldConstants().run(g));
      Tensor want = testing::run_op("Shape", {x}, {{"start", start}, {"end", end}})[0];
      EXPECT_TRUE(g.outputs()[0]->constant().bitwise_equal(want)) << start << ":" << end;
    }
}

TEST(FoldConstants, LargeResultsFoldUnlessTheyExpandASmallInput) {
  // Neg of a 2^20 + 1 element constant does not grow the data: folded.
  Graph g;
  Value* w = g.add_constant("w", Tensor(DType::Float32, {1025, 1024}));
  Value* n = g.add_value("n", {DType::Float32, {1025, 1024}});
  g.add_node("Neg", {w}, {n});
  // Expand of a scalar to the same size would be a huge constant made from 4 bytes: kept.
  Value* one = g.add_constant("one", Tensor::scalar<float>(1.0f));
  Value* shape = g.add_constant("shape", Tensor::from_vector<int64_t>({1025, 1024}, {2}));
  Value* e = g.add_value("e", {DType::Float32, {1025, 1024}});
  g.add_node("Expand", {one, shape}, {e});
  // Without a declared type the size is only known after evaluation; the rule still applies.
  Value* z = g.add_value("z", {});
  g.add_node("ConstantOfShape", {shape}, {z});
  g.add_output(n);
  g.add_output(e);
  g.add_output(z);
  EXPECT_TRUE(FoldConstants().run(g));
  EXPECT_TRUE(n->is_constant());
  EXPECT_EQ(n->constant().numel(), 1025 * 1024);
  EXPECT_FALSE(e->is_constant());
  EXPECT_FALSE(z->is_constant());
  EXPECT_EQ(g.num_nodes(), 2u);  // (not verifiable: %z has no declared type, on purpose)
  // Exactly 2^20 elements is still folded.
  Graph g2;
  Value* s2 = g2.add_constant("shape", Tensor::from_vector<int64_t>({1024, 1024}, {2}));
  Value* z2 = g2.add_value("z", {DType::Float32, {1024, 1024}});
  g2.add_node("ConstantOfShape", {s2}, {z2});
  g2.add_output(z2);
  EXPECT_TRUE(FoldConstants().run(g2));
  EXPECT_TRUE(z2->is_constant());
}

TEST(FoldConstants, KernelErrorsOnConstantsPropagate) {
  auto g = parse_graph(
      "graph main opset 17 () -> (%y) {\n"
      "  %a = constant f32[6] [1, 2, 3, 4, 5, 6]\n"
      "  %s = constant i64[2] [4, 2]\n"
      "  %y: f32[4,2] = Reshape(%a, %s) name=\"bad\"\n"
      "}\n");
  std::string msg = user_error_of([&] { FoldConstants().run(*g); });
  EXPECT_EQ(msg.rfind("node 'bad' (Reshape): ", 0), 0u) << msg;
}

TEST(FoldConstants, DropoutFoldsOnlyInInferenceMode) {
  auto g = parse_graph(
      "graph main opset 17 () -> (%a, %b) {\n"
      "  %c = constant f32[2] [1, 2]\n"
      "  %on = constant bool[] [true]\n"
      "  %a: f32[2] = Dropout(%c)\n"
      "  %b: f32[2] = Dropout(%c, _, %on)\n"
      "}\n");
  EXPECT_TRUE(FoldConstants().run(*g));
  EXPECT_TRUE(g->find_value("a")->constant().bitwise_equal(Tensor::from_vector<float>({1, 2}, {2})));
  EXPECT_FALSE(g->find_value("b")->is_constant());
}

TEST(FoldConstants, MismatchedDeclaredTypeIsAnInternalError) {
  auto g = parse_graph(
      "graph main opset 17 () -> (%y) {\n"
      "  %a = constant f32[2] [1, 2]\n"
      "  %y: f32[3] = Neg(%a)\n"
      "}\n");
  EXPECT_THROW(FoldConstants().run(*g), InternalError);
}

// ---------------------------------------------------------------- eliminate_common_subexpressions

TEST(EliminateCommonSubexpressions, LargeConstantsMergeOnlyWhenSharingStorage) {
  const int64_t n = EliminateCommonSubexpressions::kMaxComparedElements + 1;
  Graph g;
  Tensor t(DType::Float32, {n});
  Value* a = g.add_constant("a", t);
  Value* b = g.add_constant("b", t);          // same storage: merged
  Value* c = g.add_constant("c", t.clone());  // equal bytes, own storage: too large to compare
  Value* x = g.add_input("x", {DType::Float32, {n}});
  std::vector<Value*> sums;
  for (Value* k : {a, b, c}) {
    sums.push_back(g.add_value(k->name() + "_sum", {DType::Float32, {n}}));
    g.add_node("Add", {x, k}, {sums.back()});
    g.add_output(sums.back());
  }
  EXPECT_TRUE(EliminateCommonSubexpressions().run(g));
  EXPECT_EQ(verify_graph_message(g), "");
  EXPECT_EQ(g.find_value("b"), nullptr);
  EXPECT_NE(g.find_value("c"), nullptr);
  // b_sum became a duplicate of a_sum but is a graph output, so it stays, reading a.
  EXPECT_EQ(g.find_value("b_sum")->producer()->input(1), a);
}

TEST(EliminateCommonSubexpressions, SmallEqualConstantsMergeByValue) {
  Graph g;
  Value* a = g.add_constant("a", Tensor::from_vector<int64_t>({1, 2}, {2}));
  Value* b = g.add_constant("b", Tensor::from_vector<int64_t>({1, 2}, {2}));
  Value* c = g.add_constant("c", Tensor::from_vector<int64_t>({1, 2}, {1, 2}));  // other shape
  Value* y = g.add_value("y", {DType::Int64, {2}});
  Value* z = g.add_value("z", {DType::Int64, {1, 2}});
  g.add_node("Add", {a, b}, {y});
  g.add_node("Neg", {c}, {z});
  g.add_output(y);
  g.add_output(z);
  g.add_output(b);  // a constant graph output keeps its name
  EXPECT_TRUE(EliminateCommonSubexpressions().run(g));
  EXPECT_EQ(y->producer()->input(0), a);
  EXPECT_EQ(y->producer()->input(1), a);
  EXPECT_EQ(z->producer()->input(0), c);
  EXPECT_TRUE(g.is_graph_output(b));
  EXPECT_EQ(verify_graph_message(g), "");
}

// ---------------------------------------------------------------- remove_identity / dead code

TEST(RemoveIdentity, DropoutWhoseMaskIsAnOutputStays) {
  auto g = parse_graph(
      "graph main opset 17 (%x: f32[2]) -> (%y, %m) {\n"
      "  %d: f32[2], %m: bool[2] = Dropout(%x)\n"
      "  %y: f32[2] = Relu(%d)\n"
      "}\n");
  EXPECT_FALSE(RemoveIdentity().run(*g));
}

TEST(EliminateDeadCode, EmptyAndOutputOnlyGraphs) {
  Graph g;
  EXPECT_FALSE(EliminateDeadCode().run(g));
  Value* x = g.add_input("x", {DType::Float32, {1}});
  Value* y = g.add_value("y", {DType::Float32, {1}});
  g.add_node("Relu", {x}, {y});
  EXPECT_TRUE(EliminateDeadCode().run(g));  // no outputs at all: everything is dead
  EXPECT_EQ(g.num_nodes(), 0u);
  EXPECT_EQ(g.values().size(), 1u);  // the input survives
}

}  // namespace
}  // namespace kiln
