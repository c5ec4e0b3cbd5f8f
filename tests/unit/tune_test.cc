// kiln tune's pieces: the records file (round trip, schema, forgiving reads, merge), --budget
// parsing, kernel signatures, and per-kernel schedules in the Executable (a tuned schedule changes
// the nest of the kernel it targets and only that one; tuned kernels stay within the numerics
// contract of the reference).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lower_group_test_util.h"
#include "runtime/executable.h"
#include "tune/kernel_signature.h"
#include "tune/records.h"
#include "tune/schedule_fields.h"
#include "tune/tuner.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

tune::Record sample_record() {
  tune::Record r;
  r.signature = "matmul_relu-0123456789abcdef";
  r.ops = "MatMul,Relu";
  r.emitter = "contraction";
  r.machine = {"Test CPU \"quoted\" \\ name", "avx512f,avx2,fma", 2};
  r.target = "x86-avx512";
  r.improved = true;
  r.default_ms = 0.5;
  r.tuned_ms = 0.25;
  r.trials = 17;
  r.date = "2026-01-31T12:00:00Z";
  r.fields = {{"contraction.mr", 6}, {"contraction.nr", 48}, {"contraction.kc", 128}, {"parallel_min_work", 0}};
  return r;
}

void expect_same(const tune::Record& a, const tune::Record& b) {
  EXPECT_EQ(a.signature, b.signature);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.emitter, b.emitter);
  EXPECT_TRUE(a.machine == b.machine) << a.machine.str() << " vs " << b.machine.str();
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.improved, b.improved);
  EXPECT_DOUBLE_EQ(a.default_ms, b.default_ms);
  EXPECT_DOUBLE_EQ(a.tuned_ms, b.tuned_ms);
  EXPECT_EQ(a.trials, b.trials);
  EXPECT_EQ(a.date, b.date);
  EXPECT_EQ(a.fields, b.fields);
}

std::string temp_file(const std::string& tag) {
  return (fs::temp_directory_path() / ("kiln_tune_" + tag + "_" + std::to_string(::getpid()) + ".jsonl")).string();
}

TEST(TuneRecords, RoundTripsThroughALineAndAFile) {
  const tune::Record r = sample_record();
  const std::string line = tune::to_json_line(r);
  EXPECT_NE(line.find("\"schema\": 1"), std::string::npos) << line;
  std::string why;
  auto back = tune::from_json_line(line, &why);
  ASSERT_TRUE(back) << why;
  expect_same(r, *back);

  const std::string path = temp_file("roundtrip");
  tune::Record other = r;
  other.signature = "conv-fedcba9876543210";
  other.improved = false;
  tune::write_records(path, {r, other});
  tune::RecordsFile f = tune::read_records(path, &r.machine);
  EXPECT_TRUE(f.warnings.empty());
  ASSERT_EQ(f.records.size(), 2u);
  expect_same(r, f.records[0]);
  expect_same(other, f.records[1]);
  fs::remove(path);
}

TEST(TuneRecords, OtherSchemaCorruptAndForeignLinesAreSkippedWithOneWarningPerKind) {
  const tune::Record r = sample_record();
  tune::Record foreign = r;
  foreign.machine.cpu = "Another CPU";
  tune::Record other_threads = r;  // this CPU at another --threads: skipped without a warning
  other_threads.machine.threads = 4;
  std::string v2 = tune::to_json_line(r);
  v2.replace(v2.find("\"schema\": 1"), 11, "\"schema\": 2");
  const std::string path = temp_file("corrupt");
  {
    std::ofstream f(path);
    f << tune::to_json_line(r) << "\n"
      << "{\"schema\": 1, \"signature\": \n"                         // truncated
      << "not json at all\n"
      << v2 << "\n"                                                // a later schema
      << tune::to_json_line(foreign) << "\n"
      << tune::to_json_line(other_threads) << "\n";
  }
  tune::RecordsFile f = tune::read_records(path, &r.machine);
  ASSERT_EQ(f.records.size(), 1u);
  expect_same(r, f.records[0]);
  ASSERT_EQ(f.warnings.size(), 2u);
  EXPECT_NE(f.warnings[0].find("ignored 3 line(s)"), std::string::npos) << f.warnings[0];
  EXPECT_NE(f.warnings[1].find("1 record(s) of another machine"), std::string::npos) << f.warnings[1];
  // Without a machine (kiln tune --merge), every well-formed record is kept.
  EXPECT_EQ(tune::read_records(path, nullptr).records.size(), 3u);
  fs::remove(path);

  std::string why;
  std::string unknown = tune::to_json_line(r);
  unknown.insert(unknown.size() - 1, ", \"s:no_such_field\": 3");
  EXPECT_FALSE(tune::from_json_line(unknown, &why));
  EXPECT_NE(why.find("no_such_field"), std::string::npos);
  EXPECT_FALSE(tune::from_json_line(v2, &why));
  EXPECT_NE(why.find("schema 2"), std::string::npos) << why;
}

TEST(TuneRecords, UnreadableFileIsAUserErrorAndAMissingOneIsEmpty) {
  EXPECT_TRUE(tune::read_records("/nonexistent/kiln/records.jsonl", nullptr).records.empty());
  const std::string dir = temp_file("dir");
  fs::create_directories(dir);
  EXPECT_THROW(tune::read_records(dir, nullptr), UserError);
  EXPECT_THROW(tune::write_records(dir + "/no/such/folder/r.jsonl", {sample_record()}), UserError);
  fs::remove_all(dir);
}

TEST(TuneRecords, MergeKeepsOnePerKeyTheLargerSpeedup) {
  tune::Record a = sample_record(), b = a, c = a;
  b.tuned_ms = 0.1;  // 5x beats 2x
  c.signature = "relu-1111111111111111";
  auto m = tune::merge_records({a, c}, {b});
  ASSERT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m[0].tuned_ms, 0.1);
  EXPECT_EQ(m[1].signature, c.signature);
  // Only improved records of this machine and target become per-kernel schedules.
  tune::Record d = c;
  d.improved = false;
  const Target t = *Target::by_name("x86-avx512");
  auto ks = tune::kernel_schedules({a, d}, a.machine, t);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(ks.at(a.signature).contraction.mr, 6);
  EXPECT_EQ(ks.at(a.signature).contraction.nr, 48);
  EXPECT_TRUE(tune::kernel_schedules({a}, {"x", "y", 2}, t).empty());
}

TEST(TuneBudget, ParsesDurationsAndRefusesTheRest) {
  EXPECT_DOUBLE_EQ(tune::parse_budget("10m"), 600);
  EXPECT_DOUBLE_EQ(tune::parse_budget("90s"), 90);
  EXPECT_DOUBLE_EQ(tune::parse_budget("1m30s"), 90);
  EXPECT_DOUBLE_EQ(tune::parse_budget("45"), 45);
  EXPECT_DOUBLE_EQ(tune::parse_budget("1h"), 3600);
  for (const char* bad : {"", "0", "0s", "-5", "10x", "m", "1m30", "s10", "1e9", "99999999999"})
    EXPECT_THROW(tune::parse_budget(bad), UserError) << bad;
}

// Two MatMul+Relu kernels of different shapes on separate inputs (so that they are two kernels).
std::unique_ptr<Graph> two_matmuls(const std::string& prefix, int64_t n2) {
  const std::string n = std::to_string(n2);
  return testing::graph_with_constants(
      "%" + prefix + "x1: f32[64,128], %" + prefix + "x2: f32[32,96]", "%" + prefix + "y1, %" + prefix + "y2",
      "  %" + prefix + "a: f32[64,96] = MatMul(%" + prefix + "x1, %" + prefix + "w1) name=\"" + prefix + "mm1\"\n" +
          "  %" + prefix + "y1: f32[64,96] = Relu(%" + prefix + "a)\n" + "  %" + prefix + "b: f32[32," + n +
          "] = MatMul(%" + prefix + "x2, %" + prefix + "w2)\n" + "  %" + prefix + "y2: f32[32," + n + "] = Relu(%" +
          prefix + "b)\n",
      {{prefix + "w1", {128, 96}}, {prefix + "w2", {96, n2}}}, 7, 0.1f);
}

std::vector<std::string> signatures(const runtime::Executable& ex) {
  std::vector<std::string> s;
  for (const auto& grp : ex.plan().groups)
    if (grp.counts_as_kernel()) s.push_back(tune::kernel_signature(grp));
  return s;
}

runtime::BuildOptions options() {
  runtime::BuildOptions o;
  o.threads = 1;
  o.fusion.target = *Target::by_name("x86-avx512");
  o.load_kernels = false;  // the C source is what these tests compare
  return o;
}

TEST(TuneSignature, IgnoresNamesAndFollowsShapes) {
  auto a = runtime::Executable::build(two_matmuls("", 80), options());
  auto b = runtime::Executable::build(two_matmuls("renamed_", 80), options());
  auto c = runtime::Executable::build(two_matmuls("", 48), options());
  ASSERT_EQ(signatures(*a).size(), 2u);
  EXPECT_EQ(signatures(*a), signatures(*b));
  EXPECT_NE(signatures(*a)[0], signatures(*a)[1]);
  EXPECT_EQ(signatures(*a)[0], signatures(*c)[0]);  // the first kernel did not change
  EXPECT_NE(signatures(*a)[1], signatures(*c)[1]);
  EXPECT_EQ(signatures(*a)[0].rfind("matmul_relu-", 0), 0u) << signatures(*a)[0];
}

// The text of kernel `name`'s function in `src` up to the next kernel's.
std::string function_text(const std::string& src, const std::vector<std::string>& names, const std::string& name) {
  const size_t at = src.find("void " + name + "(");
  EXPECT_NE(at, std::string::npos) << name;
  size_t end = src.size();
  for (const auto& n : names)
    if (size_t p = src.find("void " + n + "("); n != name && p != std::string::npos && p > at) end = std::min(end, p);
  return src.substr(at, end - at);
}

TEST(TuneExecutable, ATunedScheduleChangesOnlyTheKernelItTargets) {
  auto dflt = runtime::Executable::build(two_matmuls("", 80), options());
  const std::vector<std::string> sigs = signatures(*dflt);
  ASSERT_EQ(sigs.size(), 2u);
  runtime::BuildOptions o = options();
  loop::Schedule s = loop::Schedule::for_target(o.fusion.target);
  s.contraction.mr = 4;
  s.contraction.nr = 16;
  o.kernel_schedules[sigs[0]] = s;
  auto tuned = runtime::Executable::build(two_matmuls("", 80), o);
  std::vector<std::string> names;
  for (const auto& k : tuned->kernels()) names.push_back(k.name);
  ASSERT_EQ(tuned->kernels().size(), dflt->kernels().size());
  int changed = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto& info = tuned->kernels()[k];
    if (!info.generated) continue;
    const bool target = tune::kernel_signature(tuned->plan().groups[info.group]) == sigs[0];
    EXPECT_EQ(info.tuned, target) << info.name;
    EXPECT_EQ(info.tuned_refused, "");
    const bool differs = function_text(tuned->source(), names, names[k]) != function_text(dflt->source(), names, names[k]);
    EXPECT_EQ(differs, target) << info.name;
    changed += differs;
  }
  EXPECT_EQ(changed, 1);
  // The tile's micro-kernel specialisation is the tuned one.
  EXPECT_NE(tuned->source().find("kiln_mk_f32_4x16"), std::string::npos);
}

TEST(TuneExecutable, EveryKernelUnderANonDefaultScheduleStaysWithinTheContract) {
  auto g = two_matmuls("", 80);
  auto ref_graph = g->clone();
  runtime::BuildOptions o = options();
  o.load_kernels = true;
  o.compile.cache_dir = (fs::temp_directory_path() / ("kiln_tune_exec_" + std::to_string(::getpid()))).string();
  auto probe = runtime::Executable::build(g->clone(), options());
  loop::Schedule s = loop::Schedule::for_target(o.fusion.target);
  s.contraction.mr = 3;
  s.contraction.nr = 48;
  s.contraction.kc = 64;
  s.parallel_min_work = 0;
  s.unroll = 1;
  for (const auto& sig : signatures(*probe)) o.kernel_schedules[sig] = s;
  auto ex = runtime::Executable::build(std::move(g), o);
  for (const auto& k : ex->kernels()) {
    if (k.generated) {
      EXPECT_TRUE(k.tuned) << k.name;
    }
  }
  TensorMap inputs;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Value* v : ref_graph->inputs()) {
    Tensor t(v->dtype(), v->shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    inputs[v->name()] = t;
  }
  TensorMap got = ex->run(inputs), want = run_reference(*ref_graph, inputs);
  for (const auto& [name, t] : want) EXPECT_EQ(testing::within_max_magnitude(got.at(name), t), "") << name;
  fs::remove_all(o.compile.cache_dir);
}


// Measures here, one request after the other, but says it runs `n` at once: what the tuner does
// with a measurer of N workers (a Ray cluster), without the cluster.
class WideMeasurer : public tune::Measurer {
 public:
  explicit WideMeasurer(int n) : n_(n) {}
  tune::MeasureResult measure(const tune::MeasureRequest& r) override { return local_.measure(r); }
  std::vector<tune::MeasureResult> measure_all(const std::vector<tune::MeasureRequest>& rs) override {
    widest = std::max(widest, rs.size());
    ++rounds;
    return Measurer::measure_all(rs);
  }
  int parallelism() const override { return n_; }
  size_t widest = 0;
  int rounds = 0;

 private:
  int n_;
  tune::LocalMeasurer local_;
};

// With parallelism N the tuner sends up to N kernels' batches in one measure_all, and still keeps
// to the budget and records every kernel it searched; with 1 every call carries one batch (the
// one-kernel-at-a-time search LocalMeasurer has always had).
TEST(TuneSearch, AParallelMeasurerGetsSeveralKernelsBatchesPerRoundWithinTheBudget) {
  const std::string cache = (fs::temp_directory_path() / ("kiln_tune_wide_" + std::to_string(::getpid()))).string();
  for (int n : {1, 2}) {
    auto g = two_matmuls("", 80);
    const TensorMap inputs = testing::random_inputs(*g, 5, {}, false);
    tune::TuneOptions to;
    to.budget_s = 4;
    to.build.threads = 1;
    to.build.compile.cache_dir = cache;
    to.protocol.samples = 3;
    WideMeasurer m(n);
    std::vector<tune::Record> records;
    int saves = 0;
    const tune::TuneReport rep =
        tune::tune_model(*g, inputs, to, m, records, [&](const std::vector<tune::Record>&) { ++saves; });
    EXPECT_EQ(m.widest, size_t(n)) << "parallelism " << n << ", " << m.rounds << " rounds";
    ASSERT_EQ(rep.kernels.size(), 2u);
    int searched = 0;
    for (const auto& k : rep.kernels) searched += k.trials > 0;
    // Two slots give both kernels the whole budget side by side; one slot splits it by weight, and
    // the light kernel's share may be too small for a first batch.
    EXPECT_GE(searched, n) << "parallelism " << n;
    EXPECT_EQ(records.size(), size_t(searched));
    EXPECT_EQ(saves, searched);
    // The budget bounds the search; a batch is started only when its predicted cost fits, and a
    // prediction can be short by about one batch.
    EXPECT_LE(rep.search_s, to.budget_s + 3) << "parallelism " << n;
    // Heaviest first, whatever order the searches finished in.
    EXPECT_FALSE(rep.kernels[0].name.empty());
    EXPECT_FALSE(rep.kernels[1].name.empty());
  }
  fs::remove_all(cache);
}

// A measurer that compiles nothing and times every candidate alike: no point ever wins, so each
// kernel's coordinate descent converges after one pass, and the evolution strategy then tries its
// batches of multi-field mutants (at most three in a row without a win) and stops early, well
// inside the budget.
class FlatMeasurer : public tune::Measurer {
 public:
  tune::MeasureResult measure(const tune::MeasureRequest& r) override {
    tune::MeasureResult out;
    for (size_t i = 0; i < r.kernels.size(); ++i) {
      tune::Measurement m;
      m.ok = true;
      m.median_ms = 1.0;
      out.candidates.push_back(m);
    }
    ++batches;
    return out;
  }
  int batches = 0;
};

TEST(TuneSearch, MutantsFollowAConvergedDescentAndStopEarly) {
  auto g = two_matmuls("", 80);
  const TensorMap inputs = testing::random_inputs(*g, 5, {}, false);
  tune::TuneOptions to;
  to.budget_s = 600;
  to.build.threads = 1;
  FlatMeasurer m;
  std::vector<tune::Record> records;
  const tune::TuneReport rep = tune::tune_model(*g, inputs, to, m, records, [](const std::vector<tune::Record>&) {});
  ASSERT_EQ(rep.kernels.size(), 2u);
  for (const auto& k : rep.kernels) {
    EXPECT_GT(k.mutants, 0) << k.name;
    EXPECT_LE(k.mutants, 3 * 8) << k.name;  // three batches of eight without a win
    EXPECT_GT(k.trials, k.mutants) << k.name;  // the descent's points came first
    EXPECT_FALSE(k.improved) << k.name;
  }
  EXPECT_LT(rep.search_s, 60);  // stopped by convergence, not by the 600 s budget
}

}  // namespace
}  // namespace kiln
