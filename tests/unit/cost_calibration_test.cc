// The calibrated cost model: cost classes from a kernel's nodes, estimate_time with per-class
// factors (and its fallbacks), the samples file (round trip, forgiving reads, upsert), and the fit
// (it recovers factors that generated the samples, keeps the overhead within its cap, and prices a
// class with too few samples by the "all" factors), and the partitioner pricing with a calibrated
// target.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "fusion/cost_model.h"
#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "tune/cost_calibration.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

std::string class_of(const std::string& body, const std::string& inputs, const std::string& outputs) {
  auto g = ir(body, inputs, outputs);
  const std::vector<Node*> all = g->nodes();
  std::vector<const Node*> nodes(all.begin(), all.end());
  return cost_class(nodes);
}

TEST(CostClass, HeaviestPartNamesTheKernel) {
  EXPECT_EQ(class_of("  %c: f32[1,4,6,6] = Conv(%x, %w) {kernel_shape=[3,3]}\n  %y: f32[1,4,6,6] = Relu(%c)\n",
                     "%x: f32[1,2,8,8], %w: f32[4,2,3,3]", "%y"),
            "conv");
  EXPECT_EQ(class_of("  %y: f32[1,4,6,6] = Conv(%x, %w) {group=4, kernel_shape=[3,3]}\n",
                     "%x: f32[1,4,8,8], %w: f32[4,1,3,3]", "%y"),
            "grouped_conv");
  EXPECT_EQ(class_of("  %m: f32[3,5] = MatMul(%a, %b)\n  %y: f32[3] = ReduceSum(%m) {axes=[1], keepdims=0}\n",
                     "%a: f32[3,4], %b: f32[4,5]", "%y"),
            "matmul");
  EXPECT_EQ(class_of("  %r: f32[1,2,8,8] = Relu(%x)\n  %y: f32[1,2,4,4] = MaxPool(%r) {kernel_shape=[2,2], strides=[2,2]}\n",
                     "%x: f32[1,2,8,8]", "%y"),
            "pool");
  EXPECT_EQ(class_of("  %e: f32[4,8] = Exp(%x)\n  %y: f32[4] = ReduceSum(%e) {axes=[1], keepdims=0}\n", "%x: f32[4,8]", "%y"),
            "reduction");
  EXPECT_EQ(class_of("  %y: f32[4,8] = Add(%x, %x)\n", "%x: f32[4,8]", "%y"), "elementwise");
  EXPECT_EQ(class_of("  %y: f32[8,4] = Transpose(%x) {perm=[1,0]}\n", "%x: f32[4,8]", "%y"), "movement");
}

TEST(CostModel, ClassFactorsScaleTheRoofline) {
  Target t = Target::default_target();
  t.peak_gflops = 100;
  t.dram_gbps = 10;
  // Plain roofline: 1e6 FLOPs at 100 GFLOP/s is 10 us; 1e5 bytes at 10 GB/s is 10 us.
  CostEstimate plain = estimate_time(1e6, 60000, 40000, 1, t, "conv");
  EXPECT_DOUBLE_EQ(plain.compute_us, 10);
  EXPECT_DOUBLE_EQ(plain.memory_us, 10);
  EXPECT_DOUBLE_EQ(plain.launch_us, t.launch_overhead_us);
  t.efficiency["conv"] = {0.5, 2.0, 0.25, 10};
  t.efficiency["all"] = {0.25, 1.0, 1.0, 30};
  CostEstimate conv = estimate_time(1e6, 60000, 40000, 1, t, "conv");
  EXPECT_DOUBLE_EQ(conv.compute_us, 20);
  EXPECT_DOUBLE_EQ(conv.memory_us, 5);
  EXPECT_DOUBLE_EQ(conv.total_us(), 20.25);
  // A class without factors of its own takes "all"'s.
  CostEstimate other = estimate_time(1e6, 60000, 40000, 2, t, "pool");
  EXPECT_DOUBLE_EQ(other.compute_us, 40);
  EXPECT_DOUBLE_EQ(other.launch_us, 2.0);
  // Re-pricing an estimate keeps its class.
  EXPECT_DOUBLE_EQ(estimate_time(conv, 1, t).total_us(), conv.total_us());
}

tune::CostSample sample(const std::string& sig, const std::string& cls, double flops, double bytes, double ms) {
  tune::CostSample s;
  s.signature = sig;
  s.cost_class = cls;
  s.ops = "Conv,Relu";
  s.model = "model \"a\"";
  s.machine = {"Test CPU", "avx512f,avx2,fma", 2};
  s.flops = flops;
  s.bytes = bytes;
  s.ms = ms;
  s.date = "2026-12-02T06:00:00Z";
  return s;
}

std::string temp_dir() {
  std::string d = (fs::temp_directory_path() / ("kiln_calib_" + std::to_string(::getpid()))).string();
  fs::create_directories(d);
  return d;
}

TEST(CostSamples, RoundTripAndRejects) {
  const tune::CostSample s = sample("conv_relu-00ff", "conv", 2.5e8, 1.75e6, 1.125);
  std::string why;
  auto back = tune::sample_from_json_line(tune::sample_to_json_line(s), &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->signature, s.signature);
  EXPECT_EQ(back->cost_class, "conv");
  EXPECT_EQ(back->model, s.model);
  EXPECT_EQ(back->machine, s.machine);
  EXPECT_DOUBLE_EQ(back->flops, 2.5e8);
  EXPECT_DOUBLE_EQ(back->bytes, 1.75e6);
  EXPECT_DOUBLE_EQ(back->ms, 1.125);
  EXPECT_EQ(back->date, s.date);
  EXPECT_FALSE(tune::sample_from_json_line("{\"schema\": 2}", &why));
  EXPECT_NE(why.find("schema 2"), std::string::npos) << why;
  std::string line = tune::sample_to_json_line(s);
  line.replace(line.find("\"ms\": 1.125"), 11, "\"ms\": -1");
  EXPECT_FALSE(tune::sample_from_json_line(line, &why));
  EXPECT_NE(why.find("out of range"), std::string::npos) << why;
  EXPECT_FALSE(tune::sample_from_json_line("{\"schema\": 1, \"signature\": \"x\"}", &why));
  EXPECT_FALSE(tune::sample_from_json_line("not json", &why));
}

TEST(CostSamples, FileKeepsOneSamplePerKernelAndMachineAndWarnsOnce) {
  const std::string dir = temp_dir(), path = dir + "/samples.jsonl";
  std::vector<tune::CostSample> all = {sample("a-1", "conv", 1e6, 1e4, 0.01), sample("b-2", "pool", 0, 1e5, 0.02)};
  tune::upsert_sample(all, sample("a-1", "conv", 1e6, 1e4, 0.03));  // newer measurement of a-1
  tune::CostSample foreign = sample("a-1", "conv", 1e6, 1e4, 0.05);
  foreign.machine.cpu = "Other CPU";
  tune::upsert_sample(all, foreign);
  tune::CostSample one_thread = sample("a-1", "conv", 1e6, 1e4, 0.06);
  one_thread.machine.threads = 1;
  tune::upsert_sample(all, one_thread);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_DOUBLE_EQ(all[0].ms, 0.03);
  tune::write_samples(path, all);
  {
    std::ofstream f(path, std::ios::app);
    f << "{broken\n" << "{\"schema\": 7}\n";
  }
  const tune::MachineKey me = all[0].machine;
  tune::SamplesFile f = tune::read_samples(path, &me);
  ASSERT_EQ(f.samples.size(), 2u);  // this CPU at 2 threads; the 1-thread sample skipped silently
  ASSERT_EQ(f.warnings.size(), 2u);
  EXPECT_NE(f.warnings[0].find("ignored 2 line(s) that are not cost samples"), std::string::npos) << f.warnings[0];
  EXPECT_NE(f.warnings[1].find("1 sample(s) of another machine"), std::string::npos) << f.warnings[1];
  EXPECT_EQ(tune::read_samples(path, nullptr).samples.size(), 4u);
  EXPECT_TRUE(tune::read_samples(dir + "/missing.jsonl", nullptr).samples.empty());
  fs::remove_all(dir);
}

// Samples a known model generates (with a spread of sizes and intensities), recovered by the fit.
TEST(CostFit, RecoversTheFactorsThatMadeTheSamples) {
  const double peak = 200, bw = 40;
  const ClassEfficiency conv{0.7, 0.35, 0.5, 0}, elementwise{0.5, 2.5, 0.1, 0};
  std::vector<tune::CostSample> samples;
  auto make = [&](const std::string& cls, const ClassEfficiency& e, double flops, double bytes) {
    const double us = std::max(flops / (peak * e.compute * 1e3), bytes / (bw * e.memory * 1e3)) + e.overhead_us;
    samples.push_back(sample(cls + std::to_string(samples.size()), cls, flops, bytes, us / 1000));
  };
  for (int i = 0; i < 12; ++i) {
    make("conv", conv, 1e6 * std::pow(2.0, i), 4e4 * std::pow(1.6, i) * (i % 3 + 1));  // compute-bound mostly
    make("conv", conv, 1e5 * std::pow(1.5, i), 2e6 * std::pow(1.3, i));                // memory-bound
    make("elementwise", elementwise, 1e4 * std::pow(2.0, i), 8e4 * std::pow(2.0, i));
  }
  samples.push_back(sample("p-1", "pool", 1e5, 1e5, 0.01));  // one pool: too few for its own factors
  const auto fit = tune::fit_efficiency(samples, peak, bw);
  ASSERT_TRUE(fit.count("conv") && fit.count("elementwise") && fit.count("all"));
  EXPECT_FALSE(fit.count("pool"));
  EXPECT_NEAR(fit.at("conv").compute, conv.compute, 0.03 * conv.compute);
  EXPECT_NEAR(fit.at("conv").memory, conv.memory, 0.03 * conv.memory);
  EXPECT_NEAR(fit.at("conv").overhead_us, conv.overhead_us, 0.1);
  EXPECT_NEAR(fit.at("elementwise").memory, elementwise.memory, 0.03 * elementwise.memory);
  EXPECT_EQ(fit.at("conv").samples, 24);
  EXPECT_EQ(fit.at("all").samples, 37);
  // Predictions of generated samples are within a few percent; the pool uses "all".
  for (const auto& s : samples)
    if (s.cost_class != "pool") EXPECT_NEAR(tune::predicted_ms(s, peak, bw, fit) / s.ms, 1.0, 0.05) << s.signature;
  const tune::CostSample& pool = samples.back();
  Target t = Target::default_target();
  t.peak_gflops = peak;
  t.dram_gbps = bw;
  t.efficiency = {{"all", fit.at("all")}};
  EXPECT_DOUBLE_EQ(tune::predicted_ms(pool, peak, bw, fit),
                   estimate_time(pool.flops, int64_t(pool.bytes), 0, 1, t, "pool").total_us() / 1000);
  // No samples: no factors (the plain roofline).
  EXPECT_TRUE(tune::fit_efficiency({}, peak, bw).empty());
}

TEST(CostFit, OverheadStaysAtLaunchScale) {
  // Kernels 40 us slower than any efficiency explains: the fit may not call that a launch cost.
  std::vector<tune::CostSample> samples;
  for (int i = 0; i < 8; ++i) samples.push_back(sample("m" + std::to_string(i), "matmul", 1e6 * (i + 1), 1e4, 0.045 + 0.005 * i));
  const auto fit = tune::fit_efficiency(samples, 200, 40);
  EXPECT_LE(fit.at("matmul").overhead_us, 1.0);
}

TEST(CostFit, PartitionerPricesWithTheCalibratedTarget) {
  auto g = ir("  %a: f32[64,256] = Exp(%x)\n  %y: f32[64,256] = Neg(%a)\n", "%x: f32[64,256]", "%y");
  FusionOptions plain;
  plain.target.peak_gflops = 100;
  plain.target.dram_gbps = 10;
  FusionOptions calibrated = plain;
  calibrated.target.efficiency["elementwise"] = {1.0, 0.5, 0.0, 10};  // half the bandwidth, no launch cost
  const FusionPlan p = partition(*g, plain), c = partition(*g, calibrated);
  ASSERT_EQ(p.kernel_count(), 1);
  ASSERT_EQ(c.kernel_count(), 1);
  EXPECT_EQ(c.groups[0].cost.cost_class, "elementwise");
  // One kernel reading 64 KiB and writing 64 KiB: 13.1 us at 10 GB/s, 26.2 us at half of it.
  const double bytes = 2.0 * 64 * 256 * 4;
  EXPECT_NEAR(p.est_us_fused, bytes / 10e3 + plain.target.launch_overhead_us, 1e-6);
  EXPECT_NEAR(c.est_us_fused, bytes / 5e3, 1e-6);
}

}  // namespace
}  // namespace kiln
