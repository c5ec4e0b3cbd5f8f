// Concatenation in place (fusion/concat_in_place.h): which Concats qualify and why not, the
// partitioner leaving them alone (their parts' producers keep their epilogues), the memory plan
// putting each part inside the Concat's slot (checked by the planner's overlap test), and the
// executable computing the reference's numbers with no kernel for the Concat.
#include <gtest/gtest.h>

#include "fusion/concat_in_place.h"
#include "fusion/explain.h"
#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "lower_group_test_util.h"
#include "runtime/executable.h"
#include "runtime/memory_plan.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

const Node* node(const Graph& g, const std::string& name) {
  for (const Node* n : g.nodes())
    if (n->name() == name) return n;
  ADD_FAILURE() << "no node " << name;
  return nullptr;
}

// A constant of `n` values in [-0.5, 0.5), the same for every run.
std::string values(int n) {
  std::string r = "[";
  uint32_t x = 12345u + uint32_t(n);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    r += (i ? ", " : "") + std::to_string(double(x >> 8) / double(1u << 24) - 0.5);
  }
  return r + "]";
}

// An inception block at batch 1: three conv branches (one of two convs), each with its ReLU, and a
// max-pool branch, concatenated along the channels; the block's output feeds two consumers (so no
// consumer can absorb the Concat as a prologue).
std::unique_ptr<Graph> inception(int64_t batch = 1) {
  const std::string b = std::to_string(batch);
  auto t = [&](int c, int hw = 8) { return "f32[" + b + "," + std::to_string(c) + "," + std::to_string(hw) + "," + std::to_string(hw) + "]"; };
  return ir("  %w1 = constant f32[8,16,1,1] " + values(8 * 16) + "\n"
            "  %w2 = constant f32[4,16,1,1] " + values(4 * 16) + "\n"
            "  %w3 = constant f32[8,4,3,3] " + values(8 * 4 * 9) + "\n"
            "  %w5 = constant f32[16,36,1,1] " + values(16 * 36) + "\n"
            "  %c1: " + t(8) + " = Conv(%x, %w1) name=\"conv1\"\n"
            "  %r1: " + t(8) + " = Relu(%c1) name=\"relu1\"\n"
            "  %c2: " + t(4) + " = Conv(%x, %w2) name=\"conv2\"\n"
            "  %r2: " + t(4) + " = Relu(%c2) name=\"relu2\"\n"
            "  %c3: " + t(8) + " = Conv(%r2, %w3) {pads=[1,1,1,1]} name=\"conv3\"\n"
            "  %r3: " + t(8) + " = Relu(%c3) name=\"relu3\"\n"
            "  %p4: " + t(16) + " = MaxPool(%x) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"pool4\"\n"
            "  %cat: " + t(36) + " = Concat(%r1, %r3, %p4, %r2) {axis=1} name=\"cat\"\n"
            "  %y1: " + t(36) + " = Sigmoid(%cat) name=\"sig\"\n"
            "  %s: " + t(36, 4) + " = MaxPool(%cat) {kernel_shape=[2,2], strides=[2,2]} name=\"down\"\n"
            "  %y2: " + t(16, 4) + " = Conv(%s, %w5) name=\"conv5\"\n",
            "%x: " + t(16), "%y1, %y2");
}

TEST(ConcatInPlace, LegalityAndItsReasons) {
  auto g = inception();
  EXPECT_TRUE(concat_in_place(*g, *node(*g, "cat")).ok());
  EXPECT_EQ(concat_part_offsets(*node(*g, "cat")), (std::vector<int64_t>{0, 8 * 64 * 4, 16 * 64 * 4, 32 * 64 * 4}));

  auto batched = inception(2);
  EXPECT_EQ(concat_in_place(*batched, *node(*batched, "cat")).reason(),
            "its parts' slices are strided (axis 0 before the concatenation axis has size 2)");

  auto out = ir("  %a: f32[1,4] = Exp(%x) name=\"a\"\n  %b: f32[1,4] = Neg(%x) name=\"b\"\n"
                "  %y: f32[1,8] = Concat(%a, %b) {axis=1} name=\"cat\"\n",
                "%x: f32[1,4]", "%y");
  EXPECT_EQ(concat_in_place(*out, *node(*out, "cat")).reason(), "its output is a graph output (the caller's buffer)");

  auto input_part = ir("  %a: f32[1,4] = Exp(%x) name=\"a\"\n  %c: f32[1,8] = Concat(%a, %x) {axis=1} name=\"cat\"\n"
                       "  %y: f32[1,8] = Neg(%c) name=\"y\"\n",
                       "%x: f32[1,4]", "%y");
  EXPECT_EQ(concat_in_place(*input_part, *node(*input_part, "cat")).reason(), "a part is not an intermediate tensor");

  auto twice = ir("  %a: f32[1,4] = Exp(%x) name=\"a\"\n  %c: f32[1,8] = Concat(%a, %a) {axis=1} name=\"cat\"\n"
                  "  %y: f32[1,8] = Neg(%c) name=\"y\"\n",
                  "%x: f32[1,4]", "%y");
  EXPECT_EQ(concat_in_place(*twice, *node(*twice, "cat")).reason(), "a part appears twice");

  auto sliced = ir("  %s0 = constant i64[1] [0]\n  %s2 = constant i64[1] [2]\n  %ax = constant i64[1] [1]\n"
                   "  %a: f32[1,2] = Slice(%x, %s0, %s2, %ax) name=\"slice\"\n  %b: f32[1,4] = Exp(%x) name=\"b\"\n"
                   "  %c: f32[1,6] = Concat(%a, %b) {axis=1} name=\"cat\"\n  %y: f32[1,6] = Neg(%c) name=\"y\"\n",
                   "%x: f32[1,4]", "%y");
  EXPECT_EQ(concat_in_place(*sliced, *node(*sliced, "cat")).reason(),
            "part 'a' comes from Slice, which would become a copy kernel of its own");

  // DenseNet's pattern: a feature map is a part of every later Concat of its block; it can have
  // one place only, so none of them is built in place (they fuse into their consumers instead).
  auto dense = ir("  %f: f32[1,4] = Tanh(%x) name=\"f\"\n  %a: f32[1,4] = Exp(%x) name=\"a\"\n"
                  "  %b: f32[1,4] = Neg(%x) name=\"b\"\n"
                  "  %c1: f32[1,8] = Concat(%f, %a) {axis=1} name=\"cat1\"\n"
                  "  %c2: f32[1,12] = Concat(%f, %a, %b) {axis=1} name=\"cat2\"\n"
                  "  %y1: f32[1,8] = Neg(%c1) name=\"y1\"\n  %y2: f32[1,12] = Neg(%c2) name=\"y2\"\n",
                  "%x: f32[1,4]", "%y1, %y2");
  EXPECT_EQ(concat_in_place(*dense, *node(*dense, "cat1")).reason(), "part 'f' is also a part of another Concat");
  EXPECT_EQ(concat_in_place(*dense, *node(*dense, "cat2")).reason(), "part 'f' is also a part of another Concat");
  auto nested = ir("  %a: f32[1,4] = Exp(%x) name=\"a\"\n  %b: f32[1,4] = Neg(%x) name=\"b\"\n"
                   "  %c1: f32[1,8] = Concat(%a, %b) {axis=1} name=\"inner\"\n  %e: f32[1,4] = Tanh(%x) name=\"e\"\n"
                   "  %c2: f32[1,12] = Concat(%c1, %e) {axis=1} name=\"outer\"\n  %d: f32[1,4] = Sin(%x) name=\"d\"\n"
                   "  %c3: f32[1,8] = Concat(%a, %d) {axis=1} name=\"other\"\n"
                   "  %y: f32[1,12] = Neg(%c2) name=\"y\"\n  %y3: f32[1,8] = Neg(%c3) name=\"y3\"\n",
                   "%x: f32[1,4]", "%y, %y3");
  EXPECT_EQ(concat_in_place(*nested, *node(*nested, "inner")).reason(), "its output is a part of another Concat");
  EXPECT_EQ(concat_in_place(*nested, *node(*nested, "outer")).reason(),
            "part 'c1' comes from Concat, which would become a copy kernel of its own");
  EXPECT_EQ(concat_in_place(*nested, *node(*nested, "other")).reason(), "part 'a' is also a part of another Concat");
}

// The partitioner keeps the Concat alone (no kernel) and gives each ReLU to its conv.
TEST(ConcatInPlace, PartitionerLeavesTheConcatToItsProducers) {
  auto g = inception();
  FusionPlan plan = partition(*g);
  const FusionGroup* cat = nullptr;
  for (const FusionGroup& grp : plan.groups) {
    if (grp.in_place_concat) cat = &grp;
    for (const Node* n : grp.nodes)
      if (n->op_type() == "Relu") {
        bool with_conv = false;
        for (const Node* m : grp.nodes) with_conv = with_conv || m->op_type() == "Conv";
        EXPECT_TRUE(with_conv) << n->name() << " is not in its conv's kernel\n" << explain_text(*g, plan);
      }
  }
  ASSERT_TRUE(cat) << explain_text(*g, plan);
  EXPECT_FALSE(cat->counts_as_kernel());
  ASSERT_EQ(cat->nodes.size(), 1u);
  EXPECT_EQ(cat->nodes[0]->name(), "cat");
  const std::string text = explain_text(*g, plan);
  EXPECT_NE(text.find("in place: Concat 'cat' (no kernel: its 4 parts' producers write its slices)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("relu1 -> cat: Concat 'cat' is built in place: each part's producer writes its slice of the output"),
            std::string::npos)
      << text;
}

// Each part lies in the Concat's slot at its slice's offset, the slot is live from the first
// part's write to the last reader, and nothing else overlaps it meanwhile — also when a part is
// read by another kernel after the Concat's readers (relu2 feeds conv3 too).
TEST(ConcatInPlace, MemoryPlanPutsThePartsInsideTheConcat) {
  auto g = inception();
  for (bool fused : {true, false}) {
    FusionOptions o;
    o.enabled = fused;
    FusionPlan plan = partition(*g, o);
    runtime::order_for_memory(*g, plan);
    runtime::MemoryPlan mp = runtime::plan_memory(*g, plan);
    EXPECT_NO_THROW(runtime::verify_memory_plan(mp));
    const runtime::TensorSlot* cat = mp.find(g->find_value("cat"));
    ASSERT_TRUE(cat);
    const std::vector<int64_t> offsets = concat_part_offsets(*node(*g, "cat"));
    int i = 0;
    for (const char* part : {"r1", "r3", "p4", "r2"}) {
      const runtime::TensorSlot* s = mp.find(g->find_value(part));
      ASSERT_TRUE(s) << part;
      EXPECT_EQ(s->inside, cat->value) << part;
      EXPECT_EQ(s->offset, cat->offset + offsets[size_t(i++)]) << part;
      EXPECT_LE(cat->first, s->first) << part;
      EXPECT_GE(cat->last, s->last) << part;
    }
    // Independently of verify_memory_plan: whatever is live with the Concat is outside its bytes.
    for (const runtime::TensorSlot& s : mp.slots) {
      if (s.value == cat->value || s.inside == cat->value || s.shares == cat->value) continue;
      const bool time = s.first <= cat->last && cat->first <= s.last;
      const bool space = s.offset < cat->offset + cat->bytes && cat->offset < s.offset + s.bytes;
      EXPECT_FALSE(time && space) << s.value->name() << " overlaps the Concat while it is live";
    }
  }
}

// The executable runs no kernel for the Concat and computes the reference's numbers: within the
// tolerance by default, bit for bit under --strict-fp, at 1 and 2 threads; a Concat that is not
// built in place (batch 2) still runs as generated code.
TEST(ConcatInPlace, ExecutableMatchesTheReference) {
  for (int64_t batch : {1, 2}) {
    auto g = inception(batch);
    const TensorMap in = testing::random_inputs(*g, 5, {}, false);
    const TensorMap want = run_reference(*g, in);
    for (bool strict : {false, true})
      for (int threads : {1, 2}) {
        auto ex = testing::build_executable(*g, threads, strict);
        int in_place = 0;
        for (const auto& k : ex->kernels()) {
          const FusionGroup& grp = ex->plan().groups[k.group];
          in_place += grp.in_place_concat;
          EXPECT_TRUE(k.generated || grp.in_place_concat) << k.name << ": " << k.reason;
        }
        EXPECT_EQ(in_place, batch == 1 ? 1 : 0);
        const TensorMap got = ex->run(in);
        for (const auto& [name, t] : want)
          EXPECT_EQ(testing::within_max_magnitude(got.at(name), t, strict ? 0.0 : 1e-4), "")
              << name << " batch " << batch << " threads " << threads << " strict " << strict;
      }
  }
}

}  // namespace
}  // namespace kiln
