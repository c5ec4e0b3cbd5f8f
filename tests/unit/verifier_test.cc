// verify_graph: one broken invariant per test, built through the Graph API (the parser cannot
// produce most of these).
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace kiln {
namespace {

const TensorType kF2{DType::Float32, {2}};

TEST(Verifier, ValidGraphPasses) {
  auto g = parse_graph(
      "graph g opset 17 (%x: f32[2]) -> (%y, %x, %c) {\n"
      "  %c = constant f32[2] [1, 2]\n"
      "  %a: f32[2] = Add(%x, %c)\n"
      "  %y: f32[2], %m: bool[2] = Dropout(%a, _, _)\n"
      "}\n");
  EXPECT_EQ(verify_graph_message(*g), "");
  EXPECT_NO_THROW(verify_graph(*g));
}

TEST(Verifier, NodesOutOfTopologicalOrder) {
  Graph g;
  Value* x = g.add_input("x", kF2);
  Value* a = g.add_value("a", kF2);
  Value* b = g.add_value("b", kF2);
  Node* relu = g.add_node("Relu", {x}, {a}, {}, "relu");
  g.insert_node_before(relu, "Neg", {a}, {b}, {}, "neg");  // reads %a before Relu defines it
  g.add_output(b);
  EXPECT_EQ(verify_graph_message(g),
            "node 'neg' (Neg): input 0 %a is defined later, by node 'relu' (Relu) (nodes are not in topological "
            "order)\n    %b: f32[2] = Neg(%a) name=\"neg\"\n");
  try {
    verify_graph(g);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("IR verification failed:\nnode 'neg' (Neg): input 0 %a", 0), 0u) << e.what();
  }
  g.topo_sort();
  EXPECT_EQ(verify_graph_message(g), "");
}

TEST(Verifier, InputNeverDefined) {
  Graph g;
  Value* x = g.add_input("x", kF2);
  Value* a = g.add_value("a", kF2);
  Value* b = g.add_value("b", kF2);
  Node* relu = g.add_node("Relu", {x}, {a}, {}, "relu");
  g.add_node("Neg", {a}, {b}, {}, "neg");
  g.add_output(b);
  g.remove_node(relu);  // leaves %a without a producer while Neg still reads it
  EXPECT_EQ(verify_graph_message(g), "node 'neg' (Neg): input 0 %a is never defined\n    %b: f32[2] = Neg(%a) name=\"neg\"\n");
}

TEST(Verifier, ValueProducedTwice) {
  Graph g;
  Value* x = g.add_input("x", kF2);
  Value* a = g.add_value("a", kF2);
  g.add_node("Relu", {x}, {a}, {}, "relu");
  a->set_constant(Tensor(DType::Float32, {2}));  // now a constant and still Relu's output
  g.add_output(a);
  EXPECT_EQ(verify_graph_message(g),
            "node 'relu' (Relu): output 0 %a is defined twice (it is a constant)\n"
            "    %a: f32[2] = Relu(%x) name=\"relu\"\n");
}

TEST(Verifier, UseListDisagreesWithNodeInputs) {
  // A node of graph `a` reads a value owned by graph `b`: b's use list names a node b does not
  // have, and a's node reads a value a does not own.
  Graph a, b;
  Value* vb = b.add_input("v", kF2);
  b.add_output(vb);
  Value* va = a.add_value("out", kF2);
  a.add_node("Relu", {vb}, {va}, {}, "stray");
  a.add_output(va);
  EXPECT_EQ(verify_graph_message(b),
            "use list of %v disagrees with the node inputs: it lists input 0 of a node not in the graph, which does "
            "not read it\n");
  EXPECT_EQ(verify_graph_message(a),
            "node 'stray' (Relu): input 0 %v does not belong to the graph\n    %out: f32[2] = Relu(%v) name=\"stray\"\n");
}

TEST(Verifier, GraphOutputWithoutDefinition) {
  Graph g;
  g.add_input("x", kF2);
  g.add_output(g.add_value("ghost", kF2));
  EXPECT_EQ(verify_graph_message(g), "graph output %ghost is never defined\n");
}

TEST(Verifier, UndefinedDtypes) {
  Graph g;
  Value* x = g.add_input("x", {});
  Value* y = g.add_value("y", {});
  g.add_node("Relu", {x}, {y}, {}, "r");
  g.add_output(y);
  EXPECT_EQ(verify_graph_message(g),
            "graph input %x has an undefined dtype\n"
            "node 'r' (Relu): output 0 %y has an undefined dtype\n    %y: undef[] = Relu(%x) name=\"r\"\n");
}

TEST(Verifier, ConstantTypeDiffersFromItsTensor) {
  Graph g;
  Value* c = g.add_constant("c", Tensor(DType::Float32, {2, 3}));
  g.add_output(c);
  c->set_type({DType::Float32, {3, 2}});
  EXPECT_EQ(verify_graph_message(g), "constant %c is typed f32[3,2] but its tensor is f32[2,3]\n");
  c->set_type({DType::Int32, {2, 3}});
  EXPECT_EQ(verify_graph_message(g), "constant %c is typed i32[2,3] but its tensor is f32[2,3]\n");
}

TEST(Verifier, DuplicateNamesAreRejectedAtConstruction) {
  // Graph keeps names unique itself, so the verifier's duplicate-name check is a backstop for
  // future mutation APIs; here we check the construction-time guard.
  Graph g;
  g.add_input("x", kF2);
  EXPECT_THROW(g.add_value("x", kF2), UserError);
  EXPECT_THROW(g.add_constant("x", Tensor(DType::Float32, {2})), UserError);
}

TEST(Verifier, ReportsEveryProblemCapped) {
  Graph g;
  for (int i = 0; i < 25; ++i) g.add_output(g.add_value("ghost" + std::to_string(i), kF2));
  std::string msg = verify_graph_message(g);
  EXPECT_NE(msg.find("graph output %ghost19 is never defined\n... and 5 more problems\n"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("ghost20"), std::string::npos);
}

}  // namespace
}  // namespace kiln
