// kiln tune's fusion decisions: the partitioner's log of accepted fusions (and the shape keys that
// let identical decisions share a measurement), keep-apart pairs (a refused fusion names the
// record; pairs of another graph do nothing), the graph fingerprint they are keyed by, fusion
// records (round trip, required fields, never taken for a schedule), and one search on a small
// graph (measured both ways, recorded).
#include <gtest/gtest.h>

#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "tune/fusion_search.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

// Two identical, independent MatMul + Relu blocks: GEMMs with an epilogue whose benefit is small
// next to them.
std::unique_ptr<Graph> two_blocks() {
  return ir("  %a: f32[64,128] = MatMul(%x1, %w1) name=\"mm1\"\n"
            "  %y1: f32[64,128] = Relu(%a) name=\"relu1\"\n"
            "  %c: f32[64,128] = MatMul(%x2, %w2) name=\"mm2\"\n"
            "  %y2: f32[64,128] = Relu(%c) name=\"relu2\"\n",
            "%x1: f32[64,128], %w1: f32[128,128], %x2: f32[64,128], %w2: f32[128,128]", "%y1, %y2");
}

TEST(FusionLog, AcceptedFusionsAreLoggedWithSharedShapeKeys) {
  auto g = two_blocks();
  FusionPlan p = partition(*g, FusionOptions{});
  ASSERT_EQ(p.kernel_count(), 2);
  ASSERT_EQ(p.accepted.size(), 2u);
  std::set<std::pair<std::string, std::string>> pairs;
  for (const auto& f : p.accepted) {
    pairs.insert({f.a, f.b});
    EXPECT_EQ(f.mode, "merge");
    EXPECT_GT(f.apart_us, 0);
    EXPECT_GT(f.benefit_us, 0);
    EXPECT_LT(f.benefit_us, f.apart_us);
  }
  EXPECT_TRUE(pairs.count({"mm1", "relu1"}) && pairs.count({"mm2", "relu2"}));
  EXPECT_EQ(p.accepted[0].shape_key, p.accepted[1].shape_key);
  // No fusion, no log.
  FusionOptions off;
  off.enabled = false;
  EXPECT_TRUE(partition(*g, off).accepted.empty());
}

TEST(FusionLog, KeepApartPairsSplitTheirGraphOnly) {
  auto g = two_blocks();
  const std::string fp = graph_fingerprint(*g);
  EXPECT_EQ(fp.size(), 16u);
  EXPECT_EQ(graph_fingerprint(*g->clone()), fp);
  FusionOptions o;
  o.keep_apart["0123456789abcdef"] = {{"mm1", "relu1"}};  // another graph's pair: no effect
  EXPECT_EQ(partition(*g, o).kernel_count(), 2);
  o.keep_apart[fp] = {{"mm1", "relu1"}, {"no_such_node", "relu2"}};  // unknown names are ignored
  FusionPlan p = partition(*g, o);
  EXPECT_EQ(p.kernel_count(), 3);
  bool named = false;
  for (const auto& r : p.rejected)
    if (r.producer == "mm1" && r.consumer == "relu1")
      named = r.reason.find("kept apart: kiln tune measured 'mm1' and 'relu1'") != std::string::npos;
  EXPECT_TRUE(named);
  // A name two nodes share names neither: its pairs do nothing (not the wrong node).
  auto dup = ir("  %a: f32[64,128] = MatMul(%x1, %w1) name=\"mm\"\n"
                "  %y1: f32[64,128] = Relu(%a) name=\"relu1\"\n"
                "  %c: f32[64,128] = MatMul(%x2, %w2) name=\"mm\"\n"
                "  %y2: f32[64,128] = Relu(%c) name=\"relu2\"\n",
                "%x1: f32[64,128], %w1: f32[128,128], %x2: f32[64,128], %w2: f32[128,128]", "%y1, %y2");
  FusionOptions d;
  d.keep_apart[graph_fingerprint(*dup)] = {{"mm", "relu1"}};
  EXPECT_EQ(partition(*dup, d).kernel_count(), 2);
  // The fingerprint follows the structure: another shape is another graph.
  auto h = ir("  %a: f32[32,128] = MatMul(%x, %w) name=\"mm1\"\n  %y: f32[32,128] = Relu(%a) name=\"relu1\"\n",
              "%x: f32[32,128], %w: f32[128,128]", "%y");
  EXPECT_NE(graph_fingerprint(*h), fp);
}

tune::Record fusion_record() {
  tune::Record r;
  r.signature = "apart-00112233445566ff";
  r.ops = "merge";
  r.emitter = "fusion";
  r.machine = {"Test CPU", "avx512f,avx2,fma", 2};
  r.target = "x86-avx512";
  r.improved = true;
  r.default_ms = 0.034;
  r.tuned_ms = 0.018;
  r.trials = 1;
  r.date = "2026-12-02T06:00:00Z";
  r.graph = "0123456789abcdef";
  r.apart_a = "/features/features.4/Conv";
  r.apart_b = "/features/features.5/Relu \"quoted\"";
  return r;
}

TEST(FusionRecords, RoundTripAndNeverASchedule) {
  const tune::Record r = fusion_record();
  std::string why;
  auto back = tune::from_json_line(tune::to_json_line(r), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_TRUE(back->is_fusion());
  EXPECT_EQ(back->graph, r.graph);
  EXPECT_EQ(back->apart_a, r.apart_a);
  EXPECT_EQ(back->apart_b, r.apart_b);
  EXPECT_TRUE(back->fields.empty());
  // A fusion record without its pair is not a record.
  std::string line = tune::to_json_line(r);
  line.replace(line.find("\"apart_b\""), 9, "\"other_b\"");
  EXPECT_FALSE(tune::from_json_line(line, &why));
  EXPECT_NE(why.find("apart_b"), std::string::npos) << why;
  // Only improved pairs of this machine and target are kept apart; none becomes a schedule.
  tune::Record slower = r;
  slower.improved = false;
  slower.apart_b = "other";
  tune::Record foreign = r;
  foreign.machine.threads = 1;
  foreign.apart_b = "foreign";
  const std::vector<tune::Record> all = {r, slower, foreign};
  auto pairs = tune::keep_apart_pairs(all, r.machine, r.target);
  ASSERT_EQ(pairs.size(), 1u);
  ASSERT_EQ(pairs.at(r.graph).size(), 1u);
  EXPECT_EQ(pairs.at(r.graph)[0], std::make_pair(r.apart_a, r.apart_b));
  EXPECT_TRUE(tune::kernel_schedules(all, r.machine, Target::default_target()).empty());
  EXPECT_TRUE(tune::keep_apart_pairs(all, r.machine, "x86-avx2").empty());
}

TEST(FusionSearch, MeasuresACloseDecisionBothWaysAndRecordsIt) {
  auto g = ir("  %a: f32[128,256] = MatMul(%x, %w) name=\"mm\"\n  %y: f32[128,256] = Relu(%a) name=\"relu\"\n",
              "%x: f32[128,256], %w: f32[256,256]", "%y");
  TensorMap inputs;
  Tensor x(DType::Float32, {128, 256}), w(DType::Float32, {256, 256});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = float(i % 7) * 0.25f - 0.5f;
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = float(i % 5) * 0.125f - 0.25f;
  inputs["x"] = x;
  inputs["w"] = w;
  tune::FusionSearchOptions o;
  o.budget_s = 30;
  o.build.threads = 1;
  o.rounds = 1;
  o.runs = 3;
  tune::FusionSearchReport rep = tune::search_fusions(*g, inputs, o, {});
  EXPECT_EQ(rep.graph, graph_fingerprint(*g));
  ASSERT_EQ(rep.trials.size(), 1u);
  const tune::FusionTrial& t = rep.trials[0];
  EXPECT_EQ(t.fusion.a, "mm");
  EXPECT_EQ(t.fusion.b, "relu");
  ASSERT_TRUE(t.measured) << t.note;
  EXPECT_GT(t.fused_ms, 0);
  EXPECT_GT(t.apart_ms, 0);
  EXPECT_EQ(t.kernels_fused, 1);
  EXPECT_EQ(t.kernels_apart, 2);
  EXPECT_EQ(rep.keep_apart.size(), t.apart ? 1u : 0u);
  const tune::MachineKey m{"Test CPU", "isa", 1};
  auto recs = tune::fusion_records(rep, m, "x86-avx512");
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].graph, rep.graph);
  EXPECT_EQ(recs[0].apart_a, "mm");
  EXPECT_EQ(recs[0].improved, t.apart);
  // A second search takes the decision from the records without measuring.
  recs[0].improved = true;
  tune::FusionSearchReport again = tune::search_fusions(*g, inputs, o, recs);
  ASSERT_EQ(again.trials.size(), 1u);
  EXPECT_TRUE(again.trials[0].from_records);
  EXPECT_FALSE(again.trials[0].measured);
  ASSERT_EQ(again.keep_apart.size(), 1u);
  EXPECT_EQ(again.keep_apart[0], std::make_pair(std::string("mm"), std::string("relu")));
}

}  // namespace
}  // namespace kiln
