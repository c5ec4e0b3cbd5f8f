// The scan and select emitters (loop/lower_scan.cc): CumSum and TopK over rows longer than the
// unrolled spellings take, as loops, against the reference kernels bit for bit — every axis
// (the last one: a scalar accumulator; an earlier one: a row of accumulators), exclusive and
// reverse, a run-time axis, float16 and integers (wrapping), TopK largest and smallest with k ≪ n
// and k = n (insertion, heap and merge sort), ties and NaN — in the loop interpreter, and compiled (default and --strict-fp
// numerics, one and four threads); and neither fuses, by the lowering's refusal.
#include <gtest/gtest.h>

#include <string>

#include "lower_group_test_util.h"

namespace kiln {
namespace {

using testing::bit_exact;

// Runs `text` lowered (interpreter) and compares every output bit for bit with the reference;
// the graph's one kernel must be built by `emitter`.
void check_interpreted(const std::string& text, const std::string& emitter, const TensorMap& fixed = {},
                       unsigned seed = 3, bool edge_values = true) {
  SCOPED_TRACE(text);
  auto g = parse_graph(text);
  const TensorMap inputs = testing::random_inputs(*g, seed, fixed, edge_values);
  const TensorMap want = run_reference(*g, inputs);
  const FusionPlan plan = partition(*g, {});
  ASSERT_EQ(plan.library_kernel_count(), 0);
  for (const auto& grp : plan.groups) {
    if (grp.counts_as_kernel()) {
      EXPECT_EQ(grp.emitter, emitter);
    }
  }
  const testing::LoweredRun run = testing::run_lowered(*g, plan, inputs);
  EXPECT_EQ(run.refused, 0);
  for (const auto& [name, w] : want) EXPECT_EQ(bit_exact(run.outputs.at(name), w), "") << name;
}

std::string cumsum_text(const std::string& t, const Shape& s, int64_t axis, const std::string& attrs) {
  return "graph main opset 17 (%x: " + t + shape_str(s) + ") -> (%y) {\n  %a = constant i64[] [" +
         std::to_string(axis) + "]\n  %y: " + t + shape_str(s) + " = CumSum(%x, %a)" + attrs + "\n}\n";
}

TEST(LowerScan, CumSumLongRowsEveryAxisAndType) {
  for (const char* t : {"f32", "f16", "f64", "i32", "i64", "u32"})
    for (int64_t axis : {0, 1, 2, -1})
      for (const char* attrs : {"", " {exclusive=1}", " {reverse=1}", " {exclusive=1, reverse=1}"}) {
        Shape s = {3, 4, 5};
        s[size_t(axis < 0 ? axis + 3 : axis)] = 37;
        check_interpreted(cumsum_text(t, s, axis, attrs), "scan");
      }
  // A short row stays the unrolled spelling (which fuses).
  check_interpreted(cumsum_text("f32", {4, 16}, 1, ""), "elementwise");
}

TEST(LowerScan, CumSumRunTimeAxis) {
  const std::string text =
      "graph main opset 17 (%x: f32[6,20,3], %a: i32[]) -> (%y) {\n  %y: f32[6,20,3] = CumSum(%x, %a) {reverse=1}\n}\n";
  for (int axis : {0, 1, 2, -1, -3}) check_interpreted(text, "scan", {{"a", Tensor::scalar<int32_t>(axis)}});
  // An axis out of range is the node's error, as the reference's.
  auto g = parse_graph(text);
  TensorMap in = testing::random_inputs(*g, 1, {{"a", Tensor::scalar<int32_t>(3)}}, false);
  EXPECT_THROW(run_reference(*g, in), UserError);
  runtime::BuildOptions o;
  auto ex = runtime::Executable::build(parse_graph(text), o);
  try {
    ex->run(in);
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("the axis input is out of range"), std::string::npos) << e.what();
  }
}

std::string topk_text(const std::string& t, const Shape& s, int64_t axis, int64_t k, int largest) {
  Shape out = s;
  out[size_t(axis < 0 ? axis + int64_t(s.size()) : axis)] = k;
  return "graph main opset 17 (%x: " + t + shape_str(s) + ") -> (%v, %i) {\n  %k = constant i64[1] [" +
         std::to_string(k) + "]\n  %v: " + t + shape_str(out) + ", %i: i64" + shape_str(out) +
         " = TopK(%x, %k) {axis=" + std::to_string(axis) + ", largest=" + std::to_string(largest) + "}\n}\n";
}

TEST(LowerScan, TopKLongRowsEveryAxisKAndType) {
  for (const char* t : {"f32", "f16", "i32", "i64"})
    for (int64_t axis : {0, 1, -1})
      for (int64_t k : {1, 3, 29, 30})
        for (int largest : {0, 1}) {
          Shape s = {4, 5};
          s[size_t(axis < 0 ? axis + 2 : axis)] = 30;
          // Integers from a small range: many ties (ascending index decides); floats with NaN,
          // infinities and signed zeros (random_inputs' edge values).
          check_interpreted(topk_text(t, s, axis, k, largest), "select", {}, unsigned(k * 7 + largest));
        }
  check_interpreted(topk_text("f32", {3, 8}, 1, 2, 1), "elementwise");
}

// The three row algorithms by k: insertion (k ≤ 16), the heap (16 < k ≤ n/8), the merge sort
// (larger k); on random rows with and without ties, and on rows sorted either way (every element
// enters: insertion's and the heap's worst case).
TEST(LowerScan, TopKInsertionHeapAndMergeAgreeWithTheReference) {
  for (const char* t : {"f32", "i32"})
    for (int64_t k : {16, 17, 40, 41, 300})
      for (int largest : {0, 1})
        for (int data = 0; data < 3; ++data) {
          const std::string text = topk_text(t, {3, 330}, 1, k, largest);
          TensorMap fixed;
          if (data > 0) {
            Tensor x(DType::Float64, {3, 330});
            for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = double(data == 1 ? i % 330 : -(i % 330)) / 4;
            fixed["x"] = std::string(t) == "f32" ? x.cast(DType::Float32) : x.cast(DType::Int32);
          }
          check_interpreted(text, "select", fixed, unsigned(k + largest), /*edge_values=*/data == 0);
        }
}

// An output nobody reads is not a kernel output (fuzz seed 95033: a TopK whose indices were
// dead): only the other one is written.
TEST(LowerScan, TopKWithOneOutputUnused) {
  for (const char* used : {"%v", "%i"}) {
    const std::string text = std::string("graph main opset 17 (%x: f32[3,50]) -> (") + used +
                             ") {\n  %k = constant i64[1] [20]\n"
                             "  %v: f32[3,20], %i: i64[3,20] = TopK(%x, %k)\n}\n";
    check_interpreted(text, "select");
  }
}

// Compiled: default and strict numerics, one and four threads, big enough for parallel rows.
TEST(LowerScan, CompiledMatchesTheReferenceBitForBit) {
  const std::vector<std::string> texts = {cumsum_text("f32", {64, 1000}, 1, ""),
                                          cumsum_text("f32", {200, 64, 3}, 0, " {exclusive=1}"),
                                          cumsum_text("f16", {8, 300, 17}, 1, " {reverse=1}"),
                                          topk_text("f32", {64, 1000}, -1, 10, 1),
                                          topk_text("f32", {64, 1000}, -1, 100, 0),
                                          topk_text("f32", {300, 40, 3}, 1, 40, 0)};
  for (const std::string& text : texts)
    for (bool strict : {false, true})
      for (int threads : {1, 4}) {
        SCOPED_TRACE(text + (strict ? " strict" : "") + " threads " + std::to_string(threads));
        auto g = parse_graph(text);
        const TensorMap in = testing::random_inputs(*g, 5);
        const TensorMap want = run_reference(*g, in);
        runtime::BuildOptions o;
        o.strict_fp = strict;
        o.threads = threads;
        auto ex = runtime::Executable::build(parse_graph(text), runtime::with_numerics(o));
        ASSERT_EQ(ex->plan().library_kernel_count(), 0);
        const TensorMap got = ex->run(in);
        for (const auto& [name, w] : want) EXPECT_EQ(bit_exact(got.at(name), w), "") << name;
      }
}

// A long CumSum or TopK is a kernel of its own: the elementwise ops around it stay apart, and the
// reason is the lowering's.
TEST(LowerScan, LongRowsFuseWithNothing) {
  const std::string text =
      "graph main opset 17 (%x: f32[4,100]) -> (%y, %v, %i) {\n  %a = constant i64[] [1]\n"
      "  %e: f32[4,100] = Exp(%x)\n  %c: f32[4,100] = CumSum(%e, %a) name=\"cs\"\n"
      "  %y: f32[4,100] = Relu(%c)\n  %k = constant i64[1] [5]\n"
      "  %v: f32[4,5], %i: i64[4,5] = TopK(%e, %k) name=\"tk\"\n}\n";
  auto g = parse_graph(text);
  const FusionPlan plan = partition(*g, {});
  EXPECT_EQ(plan.library_kernel_count(), 0);
  int scan = 0, sel = 0;
  for (const auto& grp : plan.groups) {
    scan += grp.emitter == "scan";
    sel += grp.emitter == "select";
  }
  EXPECT_EQ(scan, 1);
  EXPECT_EQ(sel, 1);
  FusionGroup whole = testing::whole_group(*g);
  loop::LoweredGroup lg = loop::lower_group(whole, "all");
  EXPECT_FALSE(lg.kernel);
  EXPECT_NE(lg.reason.find("a kernel of its own"), std::string::npos) << lg.reason;
  testing::check_lowered(*g, testing::random_inputs(*g, 2, {}, false));
}

}  // namespace
}  // namespace kiln
