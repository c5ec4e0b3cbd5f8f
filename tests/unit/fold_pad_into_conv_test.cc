// fold_pad_into_conv: every Pad + Conv the pass rewrites computes exactly what it did (reference
// executor before and after, bit for bit), and the Pads it must leave alone.
#include "lowering_test_util.h"
#include "transforms/fold_pad_into_conv.h"

namespace kiln {
namespace {

using testing::check_pass_equivalence;
using testing::EquivalenceOptions;
using testing::RandomConst;
using testing::with_constants;

std::string list(const std::vector<int64_t>& v) {
  std::string r = "[";
  for (size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
  return r + "]";
}

// Random 1-D and 2-D convs (strides, dilations, their own pads, groups, bias) behind a Pad of
// zeros over the spatial axes — the pads as one list over every axis, or with an axes input
// (opset 18), the value given or left out: the folded conv's output is the reference's, bit for bit.
TEST(FoldPadIntoConv, RandomGeometriesKeepTheFunction) {
  std::mt19937 rng(5);
  int rewritten = 0;
  for (int i = 0; i < 200 && rewritten < 60; ++i) {
    const int nd = 1 + int(rng() % 2);
    const int64_t c = 1 + rng() % 3, m = 1 + rng() % 3, group = (c == m && rng() % 3 == 0) ? c : 1;
    Shape xs = {1 + int64_t(rng() % 2), c}, ps = xs, ws = {m, c / group}, ys = {xs[0], m};
    std::vector<int64_t> s, d, cb, ce, padb = {0, 0}, pade = {0, 0};
    bool ok = true;
    for (int a = 0; a < nd; ++a) {
      const int64_t in = 1 + rng() % 7, k = 1 + rng() % 3;
      s.push_back(1 + rng() % 2);
      d.push_back(1 + rng() % 2);
      cb.push_back(rng() % 2);
      ce.push_back(rng() % 2);
      padb.push_back(rng() % 3);
      pade.push_back(rng() % 3);
      xs.push_back(in);
      ps.push_back(in + padb.back() + pade.back());
      ws.push_back(k);
      const int64_t span = ps.back() + cb.back() + ce.back() - d.back() * (k - 1) - 1;
      if (span < 0) ok = false;
      ys.push_back(ok ? span / s.back() + 1 : 1);
    }
    if (!ok) continue;
    std::vector<int64_t> cpads = cb, ppads = padb;
    cpads.insert(cpads.end(), ce.begin(), ce.end());
    ppads.insert(ppads.end(), pade.begin(), pade.end());
    const bool bias = rng() % 2, with_axes = rng() % 2, with_value = rng() % 2;
    std::string pad_inputs = "%x, %pads";
    std::string consts_text;
    if (with_axes) {  // the spatial axes only, named from the end
      std::vector<int64_t> axes, pp;
      for (int a = 0; a < nd; ++a) axes.push_back(a - nd);
      for (int a = 0; a < nd; ++a) pp.push_back(padb[size_t(2 + a)]);
      for (int a = 0; a < nd; ++a) pp.push_back(pade[size_t(2 + a)]);
      consts_text += "  %pads = constant i64[" + std::to_string(pp.size()) + "] " + list(pp) + "\n";
      consts_text += "  %axes = constant i64[" + std::to_string(nd) + "] " + list(axes) + "\n";
      pad_inputs += with_value ? ", %zero, %axes" : ", _, %axes";
    } else {
      consts_text += "  %pads = constant i64[" + std::to_string(ppads.size()) + "] " + list(ppads) + "\n";
      if (with_value) pad_inputs += ", %zero";
    }
    if (with_value) consts_text += "  %zero = constant f32[] [0]\n";
    std::vector<RandomConst> consts = {{"w", DType::Float32, ws}};
    if (bias) consts.push_back({"b", DType::Float32, {m}});
    const std::string text = with_constants(
        "graph main opset 18 (%x: f32" + shape_str(xs) + ") -> (%y) {\n" + consts_text + "  %p: f32" + shape_str(ps) +
            " = Pad(" + pad_inputs + ")\n  %y: f32" + shape_str(ys) + " = Conv(%p, %w" + (bias ? ", %b" : "") +
            ") {strides=" + list(s) + ", dilations=" + list(d) + ", pads=" + list(cpads) + ", group=" + std::to_string(group) +
            "}\n}\n",
        consts, rng);
    SCOPED_TRACE(text);
    auto g = parse_graph(text);
    ASSERT_EQ(FoldPadIntoConv::refusal(*g->nodes().back()), "");
    EquivalenceOptions o;
    o.rel = 0;  // the same taps in the same order: bit-identical
    auto after = check_pass_equivalence(text, "fold_pad_into_conv", o);
    // The conv reads the Pad's input; the Pad is left unread (dead code elimination's to remove).
    const Node* conv = after->nodes().back();
    ASSERT_EQ(conv->op_type(), "Conv");
    EXPECT_EQ(conv->input(0)->name(), "x");
    for (const Node* n : after->nodes())
      if (n->op_type() == "Pad") EXPECT_TRUE(n->output(0)->uses().empty());
    ++rewritten;
  }
  EXPECT_GE(rewritten, 40);
}

// A Pad that something else reads too stays for it; the conv reads the Pad's input.
TEST(FoldPadIntoConv, PadWithAnotherReaderStays) {
  std::mt19937 rng(3);
  const std::string text = with_constants(R"(graph main opset 13 (%x: f32[1,2,5,5]) -> (%y, %r) {
  %pads = constant i64[8] [0, 0, 1, 0, 0, 0, 1, 2]
  %p: f32[1,2,7,7] = Pad(%x, %pads)
  %y: f32[1,3,5,5] = Conv(%p, %w) {kernel_shape=[3,3]}
  %r: f32[1,2,7,7] = Relu(%p)
}
)",
                                          {{"w", DType::Float32, {3, 2, 3, 3}}}, rng);
  EquivalenceOptions o;
  o.rel = 0;
  auto after = check_pass_equivalence(text, "fold_pad_into_conv", o);
  std::set<std::string> ops;
  for (const Node* n : after->nodes()) ops.insert(n->op_type());
  EXPECT_EQ(ops, (std::set<std::string>{"Pad", "Conv", "Relu"}));
  for (const Node* n : after->nodes())
    if (n->op_type() == "Conv") {
      EXPECT_EQ(n->input(0)->name(), "x");
      EXPECT_EQ(n->attr_ints("pads"), (std::vector<int64_t>{1, 0, 1, 2}));
    }
}

TEST(FoldPadIntoConv, Refusals) {
  auto g = parse_graph(R"(graph main opset 13 (%x: f32[1,1,6,6], %w: f32[1,1,3,3], %q: i64[8]) -> (%a, %b, %c, %d, %e, %f, %h) {
  %wc = constant f32[1,1,3,3] [1, 2, 3, 4, 5, 6, 7, 8, 9]
  %wc2 = constant f32[1,2,3,3] [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9]
  %winf = constant f32[1,1,3,3] [1, 2, 3, 4, inf, 6, 7, 8, 9]
  %sp = constant i64[8] [0, 0, 1, 1, 0, 0, 1, 1]
  %cp = constant i64[8] [0, 1, 1, 1, 0, 0, 1, 1]
  %neg = constant i64[8] [0, 0, -1, 1, 0, 0, 1, 1]
  %one = constant f32[] [1]
  %p1: f32[1,1,8,8] = Pad(%x, %sp) {mode="reflect"}
  %a: f32[1,1,6,6] = Conv(%p1, %wc) name="reflect"
  %p2: f32[1,1,8,8] = Pad(%x, %sp, %one)
  %b: f32[1,1,6,6] = Conv(%p2, %wc) name="one"
  %p3: f32[1,2,8,8] = Pad(%x, %cp)
  %c: f32[1,1,6,6] = Conv(%p3, %wc2) name="channel"
  %p4: f32[1,1,7,8] = Pad(%x, %neg)
  %d: f32[1,1,5,6] = Conv(%p4, %wc) name="crop"
  %p5: f32[1,1,8,8] = Pad(%x, %q)
  %e: f32[1,1,6,6] = Conv(%p5, %wc) name="computed_pads"
  %p6: f32[1,1,8,8] = Pad(%x, %sp)
  %f: f32[1,1,6,6] = Conv(%p6, %w) name="computed_weights"
  %h: f32[1,1,6,6] = Conv(%p6, %winf) name="inf"
}
)");
  std::vector<std::string> why;
  for (const Node* n : g->nodes())
    if (n->op_type() == "Conv") why.push_back(FoldPadIntoConv::refusal(*n));
  EXPECT_EQ(why, (std::vector<std::string>{"the Pad's mode is not constant", "the Pad's value is not +0",
                                           "the Pad pads the batch or channel axis", "the Pad crops (negative pads)",
                                           "the Pad's pads are computed", "the weights are computed",
                                           "a weight is not finite (0 * inf through the Pad is NaN)"}));
}

}  // namespace
}  // namespace kiln
