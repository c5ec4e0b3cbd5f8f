// The graph IR text form: exact printing, parsing back, round trips and parse errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const PrintOptions kFull{-1};  // never elide

// print(parse(text)) must reproduce canonical text exactly.
void expect_round_trip(const std::string& text) {
  std::unique_ptr<Graph> g = parse_graph(text);
  EXPECT_EQ(verify_graph_message(*g), "");
  EXPECT_EQ(print_graph(*g, kFull), text);
}

std::string parse_error(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(IrText, PrintsEveryAttributeKindSorted) {
  Graph g;
  Value* x = g.add_input("x", {DType::Float32, {1, 3, 8, 8}});
  Value* w = g.add_constant("w", Tensor::from_vector<float>({1, 2.5f, -kInf, NAN, 0, 3e-8f, 0.1f, -0.0f}, {2, 4}));
  Value* y = g.add_value("y", {DType::Float32, {1, 2, 8, 8}});
  AttributeMap a;
  a["group"] = int64_t(1);
  a["alpha"] = 0.5f;
  a["beta"] = 1.0f;
  a["gamma"] = 1e20f;
  a["neg"] = -0.0f;
  a["big"] = kInf;
  a["pads"] = std::vector<int64_t>{1, 1, -1, 0};
  a["scales"] = std::vector<float>{2.0f, 0.25f};
  a["mode"] = std::string("NOT\"SET\\\n");
  a["modes"] = std::vector<std::string>{"a", ""};
  a["no_ints"] = std::vector<int64_t>{};
  a["no_floats"] = std::vector<float>{};
  a["no_strings"] = std::vector<std::string>{};
  a["t"] = Tensor::from_vector<int32_t>({1, -2}, {2});
  g.add_node("Conv", {x, w, nullptr}, {y}, a, "conv1");
  g.add_output(y);
  const std::string expected =
      "graph main opset 17 (%x: f32[1,3,8,8]) -> (%y) {\n"
      "  %w = constant f32[2,4] [1, 2.5, -inf, nan, 0, 3e-08, 0.1, -0]\n"
      "  %y: f32[1,2,8,8] = Conv(%x, %w, _) {alpha=0.5, beta=1.0, big=inf, gamma=1e+20, group=1, "
      "mode=\"NOT\\\"SET\\\\\\n\", modes=[\"a\", \"\"], neg=-0.0, no_floats=floats[], no_ints=ints[], "
      "no_strings=strings[], pads=[1,1,-1,0], scales=[2.0, 0.25], t=tensor i32[2] [1, -2]} name=\"conv1\"\n"
      "}\n";
  EXPECT_EQ(print_graph(g), expected);
  expect_round_trip(expected);

  // Kinds survive the round trip exactly (1.0 stays a float, [2.0, 0.25] floats, ints[] ints).
  auto g2 = parse_graph(expected);
  const Node& n = *g2->nodes().at(0);
  EXPECT_EQ(n.attr_int("group", 0), 1);
  EXPECT_TRUE(std::holds_alternative<float>(n.attrs().at("beta")));
  EXPECT_EQ(n.attr_float("beta", 0), 1.0f);
  EXPECT_EQ(n.attr_float("gamma", 0), 1e20f);
  EXPECT_TRUE(std::signbit(n.attr_float("neg", 0)));
  EXPECT_EQ(n.attr_float("big", 0), kInf);
  EXPECT_EQ(n.attr_ints("pads"), (std::vector<int64_t>{1, 1, -1, 0}));
  EXPECT_EQ(n.attr_floats("scales"), (std::vector<float>{2.0f, 0.25f}));
  EXPECT_EQ(n.attr_string("mode", ""), "NOT\"SET\\\n");
  EXPECT_EQ(n.attr_strings("modes"), (std::vector<std::string>{"a", ""}));
  EXPECT_TRUE(std::holds_alternative<std::vector<int64_t>>(n.attrs().at("no_ints")));
  EXPECT_TRUE(std::holds_alternative<std::vector<float>>(n.attrs().at("no_floats")));
  EXPECT_TRUE(std::holds_alternative<std::vector<std::string>>(n.attrs().at("no_strings")));
  EXPECT_TRUE(n.attr_tensor("t")->bitwise_equal(Tensor::from_vector<int32_t>({1, -2}, {2})));
  EXPECT_EQ(n.input(2), nullptr);
  EXPECT_EQ(n.name(), "conv1");
  const Tensor& wt = g2->find_value("w")->constant();
  EXPECT_EQ(wt.data<float>()[2], -kInf);
  EXPECT_TRUE(std::isnan(wt.data<float>()[3]));
  EXPECT_EQ(wt.data<float>()[5], 3e-8f);
  EXPECT_EQ(wt.data<float>()[6], 0.1f);
  EXPECT_TRUE(std::signbit(wt.data<float>()[7]));
}

TEST(IrText, WeirdNamesAreQuoted) {
  Graph g;
  g.set_name("torch-jit-export");
  Value* x = g.add_input("input.1", {DType::Float32, {2}});
  Value* a = g.add_value("onnx::Relu_12", {DType::Float32, {2}});
  Value* b = g.add_value("/layer1/Conv_output_0", {DType::Float32, {2}});
  Value* c = g.add_value("_", {DType::Float32, {2}});
  Value* d = g.add_value("tab\there \"q\" \x01", {DType::Float32, {2}});
  g.add_node("Relu", {x}, {a}, {}, "/layer1/Relu");
  g.add_node("Neg", {a}, {b});
  g.add_node("Abs", {b}, {c});
  g.add_node("Abs", {c}, {d}, {{"odd name", int64_t(3)}});
  g.add_output(d);
  const std::string expected =
      "graph \"torch-jit-export\" opset 17 (%input.1: f32[2]) -> (%\"tab\\there \\\"q\\\" \\x01\") {\n"
      "  %\"onnx::Relu_12\": f32[2] = Relu(%input.1) name=\"/layer1/Relu\"\n"
      "  %\"/layer1/Conv_output_0\": f32[2] = Neg(%\"onnx::Relu_12\")\n"
      "  %\"_\": f32[2] = Abs(%\"/layer1/Conv_output_0\")\n"
      "  %\"tab\\there \\\"q\\\" \\x01\": f32[2] = Abs(%\"_\") {\"odd name\"=3}\n"
      "}\n";
  EXPECT_EQ(print_graph(g), expected);
  expect_round_trip(expected);
  auto g2 = parse_graph(expected);
  EXPECT_EQ(g2->name(), "torch-jit-export");
  ASSERT_NE(g2->find_value("tab\there \"q\" \x01"), nullptr);
  EXPECT_NE(g2->find_value("_"), nullptr);
  EXPECT_EQ(g2->nodes().at(3)->attr_int("odd name", 0), 3);
}

TEST(IrText, MultiOutputNodesDomainsAndOmittedInputs) {
  const std::string text =
      "graph g opset 13 (%x: f32[2,6], %k: i64[]) -> (%v, %i, %s) {\n"
      "  %ax = constant i64[1] [1]\n"
      "  %v: f32[2,3], %i: i64[2,3] = TopK(%x, %k) {axis=-1, largest=1}\n"
      "  %s: f32[2,6] = com.example::Fancy(_, %x, _, %ax)\n"
      "  Print(%s)\n"
      "}\n";
  expect_round_trip(text);
  auto g = parse_graph(text);
  EXPECT_EQ(g->opset(), 13);
  ASSERT_EQ(g->num_nodes(), 3u);
  const Node& topk = *g->nodes()[0];
  EXPECT_EQ(topk.num_outputs(), 2u);
  EXPECT_EQ(topk.output(1)->type(), (TensorType{DType::Int64, {2, 3}}));
  EXPECT_EQ(g->find_value("k")->shape(), Shape{});
  const Node& fancy = *g->nodes()[1];
  EXPECT_EQ(fancy.domain(), "com.example");
  EXPECT_EQ(fancy.op_type(), "Fancy");
  ASSERT_EQ(fancy.num_inputs(), 4u);
  EXPECT_EQ(fancy.input(0), nullptr);
  EXPECT_EQ(fancy.input(2), nullptr);
  EXPECT_EQ(g->nodes()[2]->num_outputs(), 0u);
  ASSERT_EQ(g->outputs().size(), 3u);
  EXPECT_EQ(g->outputs()[2]->name(), "s");
  // Uses were wired by the parser.
  EXPECT_EQ(g->find_value("x")->uses().size(), 2u);
}

TEST(IrText, ConstantsOfEveryDtypeRoundTrip) {
  Graph g;
  auto add = [&](const std::string& n, Tensor t) { g.add_output(g.add_constant(n, std::move(t))); };
  add("f32", Tensor::from_vector<float>({std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                                         1.0f / 3, 16777216.0f, 1e-45f},
                                        {5}));
  add("f64", Tensor::from_vector<double>({0.1, 1.0 / 3, -1e300, std::numeric_limits<double>::denorm_min()}, {2, 2}));
  add("f16", Tensor::from_vector<Half>({Half(0.1f), Half(65504.0f), Half(-kInf), Half(5.9604645e-08f)}, {4}));
  add("bf16", Tensor::from_vector<BFloat16>({BFloat16(0.1f), BFloat16(3.0e38f), BFloat16(-1.5f)}, {3}));
  add("i8", Tensor::from_vector<int8_t>({-128, 127}, {2}));
  add("i16", Tensor::from_vector<int16_t>({-32768, 32767}, {2}));
  add("i32", Tensor::from_vector<int32_t>({std::numeric_limits<int32_t>::min(), 7}, {2}));
  add("i64", Tensor::from_vector<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}, {2}));
  add("u8", Tensor::from_vector<uint8_t>({0, 255}, {2}));
  add("u16", Tensor::from_vector<uint16_t>({65535}, {1}));
  add("u32", Tensor::from_vector<uint32_t>({4294967295u}, {1}));
  add("u64", Tensor::from_vector<uint64_t>({std::numeric_limits<uint64_t>::max()}, {1}));
  add("b", Tensor::from_vector<bool>({true, false}, {2}));
  add("scalar", Tensor::scalar<float>(-2.0f));
  add("empty", Tensor(DType::Int64, {0, 3}));
  const std::string text = print_graph(g, kFull);
  EXPECT_NE(text.find("%f64 = constant f64[2,2] [0.1, 0.3333333333333333, -1e+300, 5e-324]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%f16 = constant f16[4] [0.1, 65504, -inf, 6e-08]"), std::string::npos) << text;
  EXPECT_NE(text.find("%bf16 = constant bf16[3] [0.1, 3e+38, -1.5]"), std::string::npos) << text;
  EXPECT_NE(text.find("%i64 = constant i64[2] [-9223372036854775808, 9223372036854775807]"), std::string::npos);
  EXPECT_NE(text.find("%u64 = constant u64[1] [18446744073709551615]"), std::string::npos);
  EXPECT_NE(text.find("%b = constant bool[2] [true, false]"), std::string::npos);
  EXPECT_NE(text.find("%scalar = constant f32[] [-2]"), std::string::npos);
  EXPECT_NE(text.find("%empty = constant i64[0,3] []"), std::string::npos);
  auto g2 = parse_graph(text);
  EXPECT_EQ(print_graph(*g2, kFull), text);
  for (const Value* v : g.values()) {
    const Value* v2 = g2->find_value(v->name());
    ASSERT_NE(v2, nullptr) << v->name();
    EXPECT_TRUE(v2->constant().bitwise_equal(v->constant())) << v->name();
  }
}

// Every f16 and bf16 bit pattern, and many f32/f64 ones, print to text that parses back to the
// same bits (NaNs excepted: they all print as `nan`).
TEST(IrText, FloatTextRoundTripsBitExactly) {
  auto round_trip = [](const Tensor& t) {
    Graph g;
    g.add_output(g.add_constant("t", t));
    return parse_graph(print_graph(g, kFull))->find_value("t")->constant();
  };
  auto check16 = [&](auto tag) {
    using H = decltype(tag);
    std::vector<H> all;
    for (uint32_t b = 0; b < 65536; ++b) {
      H h;
      h.bits = uint16_t(b);
      if (!std::isnan(float(h))) all.push_back(h);
    }
    Tensor back = round_trip(Tensor::from_vector<H>(all, {int64_t(all.size())}));
    for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(back.data<H>()[i].bits, all[i].bits) << float(all[i]);
  };
  check16(Half{});
  check16(BFloat16{});
  uint64_t state = 0x9e3779b97f4a7c15ull;  // xorshift: deterministic pseudo-random bit patterns
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::vector<float> f;
  std::vector<double> d;
  while (f.size() < 20000) {
    uint64_t r = next();
    float x;
    double y;
    uint32_t r32 = uint32_t(r);
    std::memcpy(&x, &r32, 4);
    std::memcpy(&y, &r, 8);
    if (!std::isnan(x)) f.push_back(x);
    if (!std::isnan(y)) d.push_back(y);
  }
  Tensor bf = round_trip(Tensor::from_vector<float>(f, {int64_t(f.size())}));
  Tensor bd = round_trip(Tensor::from_vector<double>(d, {int64_t(d.size())}));
  EXPECT_EQ(std::memcmp(bf.raw(), f.data(), f.size() * 4), 0);
  EXPECT_EQ(std::memcmp(bd.raw(), d.data(), d.size() * 8), 0);
}

TEST(IrText, ElidesLargeConstantsWithAStableHash) {
  Graph g;
  Tensor big(DType::Float32, {17});
  big.data<float>()[3] = 1.0f;
  g.add_output(g.add_constant("big", big));
  g.add_output(g.add_constant("small", Tensor(DType::Float32, {16})));
  std::string text = print_graph(g);
  EXPECT_NE(text.find("%big = constant f32[17] elided hash="), std::string::npos) << text;
  EXPECT_NE(text.find("%small = constant f32[16] [0, 0,"), std::string::npos) << text;
  // The hash depends on the bytes only.
  Graph g2;
  g2.add_output(g2.add_constant("big", big.clone()));
  g2.add_output(g2.add_constant("small", Tensor(DType::Float32, {16})));
  EXPECT_EQ(print_graph(g2), text);
  big.data<float>()[3] = 2.0f;
  EXPECT_NE(print_graph(g), text);
  EXPECT_EQ(parse_error(text), "line 2:27: constant %big is elided");
  EXPECT_EQ(print_graph(g, PrintOptions{0}).find("[0"), std::string::npos);  // 0: elide everything non-empty
}

TEST(IrText, ElidedTensorAttributeCannotBeParsed) {
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %y: f32[20] = ConstantOfShape() {value=tensor f32[20] elided "
                        "hash=0123}\n}\n"),
            "line 2:57: attribute 'value' is elided");
}

TEST(IrText, CommentsAndLayoutAreFree) {
  auto g = parse_graph(
      "// a comment\n graph   main opset 17(%x:f32[2])->(%y){ // trailing\n"
      "%c=constant f32[2][1,2] %y:f32[2]=Add(%x,%c){}\n}  // done");
  EXPECT_EQ(print_graph(*g),
            "graph main opset 17 (%x: f32[2]) -> (%y) {\n"
            "  %c = constant f32[2] [1, 2]\n"
            "  %y: f32[2] = Add(%x, %c)\n"
            "}\n");
}

TEST(IrText, ConstantGraphInputKeepsItsDefault) {
  Graph g;
  Value* x = g.add_input("x", {DType::Int64, {2}});
  x->set_constant(Tensor::from_vector<int64_t>({4, 5}, {2}));
  g.add_output(x);
  std::string text = print_graph(g);
  EXPECT_EQ(text, "graph main opset 17 (%x: i64[2]) -> (%x) {\n  %x = constant i64[2] [4, 5]\n}\n");
  auto g2 = parse_graph(text);
  EXPECT_TRUE(g2->find_value("x")->is_graph_input());
  EXPECT_TRUE(g2->find_value("x")->is_constant());
  EXPECT_EQ(print_graph(*g2), text);
}

TEST(IrText, UndefinedTypesPrintAsUndef) {
  Graph g;
  Value* x = g.add_input("x", {DType::Float32, {2}});
  Value* y = g.add_value("y", {});
  g.add_node("Relu", {x}, {y});
  g.add_output(y);
  std::string text = print_graph(g);
  EXPECT_NE(text.find("%y: undef[] = Relu(%x)"), std::string::npos);
  EXPECT_EQ(print_graph(*parse_graph(text)), text);
}

TEST(IrText, SyntaxErrorsNameLineAndColumn) {
  const std::string head = "graph g opset 17 (%x: f32[2]) -> (%y) {\n";
  EXPECT_EQ(parse_error(""), "line 1:1: expected 'graph', got end of input");
  EXPECT_EQ(parse_error("graph g opset x"), "line 1:15: expected an opset number, got 'x'");
  EXPECT_EQ(parse_error(head + "  %y: f32[2] = Relu(%x\n}\n"), "line 3:1: expected ')', got '}'");
  EXPECT_EQ(parse_error(head + "  %y: f32[2] = Relu(%x) {alpha 1}\n}\n"), "line 2:32: expected '=', got '1'");
  EXPECT_EQ(parse_error(head + "  %y: q32[2] = Relu(%x)\n}\n"), "line 2:7: expected a dtype such as f32, got 'q32'");
  EXPECT_EQ(parse_error(head + "  %y: f32[2] = Relu(%z)\n}\n"), "line 2:21: value %z is not defined");
  EXPECT_EQ(parse_error(head + "  %y: f32[2] = Relu(%x)\n  %y: f32[2] = Relu(%x)\n}\n"),
            "line 3:3: value %y is defined twice");
  EXPECT_EQ(parse_error(head + "  %x = constant f32[1] [1]\n}\n"), "line 2:3: value %x is defined twice");
  EXPECT_EQ(parse_error(head + "  %y: f32[2] = Relu(%x)\n}\n"), "(no error)");  // sanity: valid text is fine
}

TEST(IrText, LiteralErrors) {
  const std::string head = "graph g opset 17 () -> (%c) {\n";
  EXPECT_EQ(parse_error(head + "  %c = constant f32[2,2] [1, 2, 3]\n}\n"),
            "line 2:26: tensor of type f32[2,2] needs 4 elements, got 3");
  EXPECT_EQ(parse_error(head + "  %c = constant f32[1] [1, 2]\n}\n"), "line 2:28: too many elements for f32[1] (1)");
  EXPECT_EQ(parse_error(head + "  %c = constant u8[1] [256]\n}\n"),
            "line 2:24: expected an integer in range for u8, got '256'");
  EXPECT_EQ(parse_error(head + "  %c = constant i32[1] [1.5]\n}\n"),
            "line 2:25: expected an integer in range for i32, got '1.5'");
  EXPECT_EQ(parse_error(head + "  %c = constant bool[1] [2]\n}\n"), "line 2:26: expected true or false for bool, got '2'");
  EXPECT_EQ(parse_error(head + "  %c = constant f32[1] [\"a\"]\n}\n"), "line 2:25: expected a number for f32, got string \"a\"");
  EXPECT_EQ(parse_error(head + "  %c = constant f32[-1] []\n}\n"), "line 2:21: expected a non-negative dimension, got '-1'");
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c: f32[1] = A() {v=[]}\n}\n"),
            "line 2:24: expected a list element (write an empty list as ints[], floats[] or strings[]), got ']'");
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c: f32[1] = A() {v=1, v=2}\n}\n"),
            "line 2:26: attribute 'v' is given twice");
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c: f32[1] = A() {v=\"ab\\q\"}\n}\n"),
            "line 2:23: unknown escape '\\q' in string");
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c: f32[1] = A() {v=\"ab\n\"}\n}\n"),
            "line 2:23: unterminated string");
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c: f32[1] = A() ; \n}\n"),
            "line 2:20: unexpected character \";\"");
  EXPECT_EQ(parse_error("graph g opset 17 () -> (%nope) {\n}\n"), "line 1:25: graph output %nope is not defined");
}

TEST(IrText, MixedNumberListIsFloats) {
  // Hand-written text may mix 1 and 2.5; any float element makes a float list.
  auto g = parse_graph("graph g opset 17 () -> () {\n  %c: f32[1] = A() {v=[1, 2.5, -inf], w=[-3]}\n}\n");
  const Node& n = *g->nodes()[0];
  EXPECT_EQ(n.attr_floats("v"), (std::vector<float>{1.0f, 2.5f, -kInf}));
  EXPECT_EQ(n.attr_ints("w"), (std::vector<int64_t>{-3}));
}

TEST(IrText, HugeDeclaredShapesFailWithoutAllocating) {
  EXPECT_EQ(parse_error("graph g opset 17 () -> () {\n  %c = constant f32[100000000000] [1]\n}\n"),
            "line 2:35: tensor of type f32[100000000000] needs 100000000000 elements, got 1");
  EXPECT_EQ(parse_error("graph g opset 17 (%x: f32[4294967296,4294967296,4294967296]) -> () {\n}\n"),
            "line 1:23: shape [4294967296,4294967296,4294967296] is too large");
}

// Mutated text either parses (and then round-trips) or is rejected with a UserError — never a
// crash or another exception type.
TEST(IrText, MutatedTextFailsCleanly) {
  const std::string base =
      "graph \"g-1\" opset 17 (%x: f32[2,3], %\"a b\": i64[2]) -> (%y, %k) {\n"
      "  %c = constant f32[2,3] [1, -2.5, inf, nan, 3e-08, 0]\n"
      "  %k = constant bool[2] [true, false]\n"
      "  %y: f32[2,3], %i: i64[2] = com.x::Op(%x, _, %c, %\"a b\") {f=1.0, i=[1,2], s=\"q\\n\", "
      "t=tensor i8[1] [-3], z=floats[]} name=\"n\"\n"
      "}\n";
  expect_round_trip(base);
  const std::string alphabet = "%\"[](){},=:_-.0123456789aefinx/ \n\\";
  uint64_t state = 12345;
  auto rnd = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = base;
    for (int m = 0, edits = 1 + int(rnd(3)); m < edits; ++m) {
      size_t pos = rnd(s.size());
      switch (rnd(3)) {
        case 0: s.erase(pos, 1 + rnd(4)); break;
        case 1: s.insert(pos, 1, alphabet[rnd(alphabet.size())]); break;
        default: s[pos] = alphabet[rnd(alphabet.size())];
      }
    }
    try {
      auto g = parse_graph(s);
      ++parsed;
      std::string text = print_graph(*g, kFull);
      EXPECT_EQ(print_graph(*parse_graph(text), kFull), text) << s;
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("line ", 0), 0u) << e.what() << "\n" << s;
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace kiln
