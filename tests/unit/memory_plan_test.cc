// Memory planner: no two tensors live at the same time share bytes, peak is below the naive sum,
// and elementwise kernels overwrite a dying input in place.
#include <gtest/gtest.h>

#include <set>

#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "runtime/memory_plan.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> chain() {
  // x → a → b → c → d → y with a skip (a also feeds d): a lives long, b and c can reuse memory.
  return parse_graph(R"(graph main opset 17 (%x: f32[64,64]) -> (%y) {
  %k = constant i64[1] [3]
  %a: f32[64,64] = Relu(%x) name="a"
  %b: f32[64,64] = Exp(%a) name="b"
  %c: f32[64,64] = Neg(%b) name="c"
  %t: f32[64,3], %i: i64[64,3] = TopK(%c, %k) name="topk"
  %d: f32[64,64] = Add(%a, %c) name="d"
  %y: f32[64,64] = Sigmoid(%d) name="y"
}
)");
}

TEST(MemoryPlan, NoOverlapsAndPeakBelowNaiveSum) {
  auto g = chain();
  FusionOptions o;
  o.enabled = false;  // one kernel per op: many intermediates
  FusionPlan plan = partition(*g, o);
  runtime::MemoryPlan mp = runtime::plan_memory(*g, plan);
  EXPECT_NO_THROW(runtime::verify_memory_plan(mp));
  EXPECT_EQ(mp.naive_bytes, 4 * 64 * 64 * 4);  // a, b, c, d (TopK's outputs are unused: never written)
  EXPECT_LT(mp.arena_bytes, mp.naive_bytes);
  for (size_t i = 0; i < mp.slots.size(); ++i)
    for (size_t j = i + 1; j < mp.slots.size(); ++j) {
      const auto &x = mp.slots[i], &y = mp.slots[j];
      bool time = x.first <= y.last && y.first <= x.last;
      bool space = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      if (time && space) EXPECT_TRUE(x.shares == y.value || y.shares == x.value) << x.value->name() << " " << y.value->name();
    }
}

TEST(MemoryPlan, ElementwiseKernelWritesOverADyingInput) {
  auto g = chain();
  FusionOptions o;
  o.enabled = false;
  FusionPlan plan = partition(*g, o);
  runtime::MemoryPlan mp = runtime::plan_memory(*g, plan);
  // c = Neg(b): b dies there, same shape → in place.
  const auto* b = mp.find(g->find_value("b"));
  const auto* c = mp.find(g->find_value("c"));
  ASSERT_TRUE(b && c);
  EXPECT_EQ(c->offset, b->offset);
  EXPECT_EQ(c->shares, g->find_value("b"));
  // d = Add(a, c) with both dying → it may take either; a (long-lived) must not be overwritten
  // before its last use.
  const auto* a = mp.find(g->find_value("a"));
  EXPECT_EQ(a->last, mp.find(g->find_value("d"))->first);
}

TEST(MemoryPlan, FusedPlanHasFewerIntermediates) {
  auto g = chain();
  runtime::MemoryPlan fused = runtime::plan_memory(*g, partition(*g));
  FusionOptions o;
  o.enabled = false;
  runtime::MemoryPlan unfused = runtime::plan_memory(*g, partition(*g, o));
  EXPECT_LT(fused.naive_bytes, unfused.naive_bytes);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(MemoryPlan, KernelOrderFreesLargeTensorsEarly) {
  // Two branches that each make a large tensor and reduce it: run one branch to the end before
  // starting the other and only one large tensor is ever live.
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[256,256]) -> (%y) {
  %ax = constant i64[1] [1]
  %a: f32[256,256] = Relu(%x) name="a"
  %b: f32[256,256] = Exp(%x) name="b"
  %s1: f32[256,1] = ReduceSum(%a, %ax) {keepdims=1} name="s1"
  %s2: f32[256,1] = ReduceSum(%b, %ax) {keepdims=1} name="s2"
  %y: f32[256,1] = Add(%s1, %s2) name="y"
}
)");
  FusionOptions o;
  o.enabled = false;
  FusionPlan plan = partition(*g, o);
  int64_t before = runtime::plan_memory(*g, plan).arena_bytes;
  EXPECT_TRUE(runtime::order_for_memory(*g, plan));
  runtime::MemoryPlan after = runtime::plan_memory(*g, plan);
  EXPECT_LT(after.arena_bytes, before);
  EXPECT_LE(after.arena_bytes, 256 * 256 * 4 + 2 * 1024 + 1024);  // one large tensor + small ones
  // Still a valid order: every group runs after what it reads.
  std::set<const Value*> written;
  for (Value* in : g->inputs()) written.insert(in);
  for (const auto& grp : plan.groups) {
    for (const Value* v : grp.inputs) EXPECT_TRUE(v->is_constant() || written.count(v)) << v->name();
    for (const Value* v : grp.outputs) written.insert(v);
  }
}

}  // namespace
}  // namespace kiln
