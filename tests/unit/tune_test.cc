// kiln tune's pieces: the records file (round trip, schema, forgiving reads, merge), --budget
// parsing, kernel signatures, and per-kernel schedules in the Executable (a tuned schedule changes
// the nest of the kernel it targets and only that one; tuned kernels stay within the numerics
// contract of the reference); the schedule model (it learns which field sets the time, and as the
// search's filter measures fewer points for the same result) and the parallel compile of a batch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "lower_group_test_util.h"
#include "runtime/executable.h"
#include "tune/kernel_signature.h"
#include "runtime/jit.h"
#include "support/error.h"
#include "tune/records.h"
#include "tune/schedule_fields.h"
#include "tune/schedule_model.h"
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

// ---------------------------------------------------------------- the schedule model

// A random point of the contraction search space (the fields the model sees vary at once).
loop::Schedule random_schedule(std::mt19937_64& rng, const Target& t) {
  loop::Schedule s = loop::Schedule::for_target(t);
  auto any = [&](std::vector<int64_t> v) { return v[rng() % v.size()]; };
  s.contraction.mr = int(any({1, 2, 3, 4, 5, 6, 7, 8}));
  s.contraction.nr = int(any({16, 32, 48, 64}));
  s.contraction.kc = any({64, 128, 192, 256, 384, 512});
  s.contraction.a_reuse_bytes = any({128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20});
  s.rows_block_bytes = any({64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20});
  s.unroll = int(any({1, 2, 4, 8}));
  s.chain.min_tiles = any({1, 2, 4, 8});
  return s;
}

// Of the pairs whose true values differ by more than `margin`, the share the predictions order
// the same way (points with equal deciding fields tie in truth and are not compared).
double concordance(const std::vector<double>& predicted, const std::vector<double>& truth, double margin) {
  int pairs = 0, agree = 0;
  for (size_t i = 0; i < truth.size(); ++i)
    for (size_t j = i + 1; j < truth.size(); ++j)
      if (std::fabs(truth[i] - truth[j]) > margin) {
        ++pairs;
        agree += (predicted[i] < predicted[j]) == (truth[i] < truth[j]);
      }
  return pairs ? double(agree) / pairs : 0;
}

// Synthetic samples whose time one field decides (with 3 % noise; the other fields vary at
// random and do not matter): fitted on 40, the model orders 30 held-out points by that field, and
// the point it ranks first is within 5 % of the best one. For two deciding fields and twelve sample
// draws, so the fit is not tuned to one case.
TEST(TuneModel, LearnsWhichFieldDecidesTheTimeAndRanksHeldOutPoints) {
  const Target t = *Target::by_name("x86-avx512");
  const loop::Schedule dflt = loop::Schedule::for_target(t);
  const tune::KernelTraits k{2e8, 4e6};
  const std::vector<double> f0 = tune::schedule_features(k, dflt, nullptr, t, 2);
  struct Law {
    const char* field;
    std::function<double(const loop::Schedule&)> ln_time;  // up to the noise
  };
  const std::vector<Law> laws = {
      {"kc", [](const loop::Schedule& s) { return 0.3 * std::pow(std::log2(double(s.contraction.kc)) - 7, 2); }},
      {"mr", [](const loop::Schedule& s) { return 0.25 * std::pow(std::log2(double(s.contraction.mr)) - 2, 2); }},
  };
  for (int seed = 1; seed <= 12; ++seed)
  for (const Law& law : laws) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> noise(0, 0.03);
    auto x_of = [&](const loop::Schedule& s) {
      return tune::relative_features(tune::schedule_features(k, s, nullptr, t, 2), f0);
    };
    tune::ScheduleModel m;
    for (int i = 0; i < 40; ++i) {
      const loop::Schedule s = random_schedule(rng, t);
      m.add(x_of(s), law.ln_time(s) - law.ln_time(dflt) + noise(rng), 0);
      if (i + 1 < int(tune::ScheduleModel::kMinSamples)) EXPECT_FALSE(m.fit(0)) << "fitted on " << i + 1 << " samples";
    }
    ASSERT_TRUE(m.fit(0));
    EXPECT_NEAR(m.predict(x_of(dflt)), 0, 1e-12) << "the default is the origin";
    std::vector<double> predicted, truth;
    for (int i = 0; i < 30; ++i) {
      const loop::Schedule s = random_schedule(rng, t);
      predicted.push_back(m.predict(x_of(s)));
      truth.push_back(law.ln_time(s));
    }
    EXPECT_GT(concordance(predicted, truth, 0.05), 0.9) << law.field << " seed " << seed;
    const size_t first = size_t(std::min_element(predicted.begin(), predicted.end()) - predicted.begin());
    EXPECT_LT(truth[first] - *std::min_element(truth.begin(), truth.end()), std::log(1.05))
        << law.field << " seed " << seed;
  }
}

TEST(TuneModel, PickKeepsTheBestAndSomeRandomOthers) {
  std::mt19937_64 rng(3);
  const std::vector<double> p = {0.5, -0.2, 0.9, -0.4, 0.1, 0.3, -0.1, 0.7, 0.2, 0.0};
  for (int round = 0; round < 20; ++round) {
    const std::vector<size_t> k = tune::pick_candidates(p, 4, 1, rng);
    ASSERT_EQ(k.size(), 4u);
    EXPECT_TRUE(std::is_sorted(k.begin(), k.end()));
    // the three best (-0.4, -0.2, -0.1) always, and one of the other seven
    EXPECT_NE(std::find(k.begin(), k.end(), 3u), k.end());
    EXPECT_NE(std::find(k.begin(), k.end(), 1u), k.end());
    EXPECT_NE(std::find(k.begin(), k.end(), 6u), k.end());
  }
  EXPECT_EQ(tune::pick_candidates({1, 0, 2}, 4, 1, rng), (std::vector<size_t>{0, 1, 2}));
}

// A measurer whose times follow a known function of the candidates' schedules (TuneOptions::on_batch
// tells it which schedule each kernel name is), compiling nothing: a quadratic bowl in log2 of mr,
// nr, kc and unroll with its minimum inside the search space. It keeps, per kernel, the times of
// the points it measured in order (a kernel's search names its first batch's candidates
// tune_c0_*), and checks how each batch was split into sources.
class LawMeasurer : public tune::Measurer {
 public:
  static double ms(const loop::Schedule& s) {
    auto sq = [](double v) { return v * v; };
    return std::exp(0.2 * sq(std::log2(double(s.contraction.mr)) - 2) +
                    0.2 * sq(std::log2(s.contraction.nr / 16.0) - 1) +
                    0.15 * sq(std::log2(double(s.contraction.kc)) - 7) + 0.1 * sq(std::log2(double(s.unroll)) - 1));
  }
  tune::MeasureResult measure(const tune::MeasureRequest& r) override {
    tune::MeasureResult out;
    if (r.kernels[0].rfind("tune_c0_", 0) == 0) measured.emplace_back();
    // compile_jobs sources, at least four candidates each (a source repeats the prelude)
    const size_t want_sources = std::clamp<size_t>(r.kernels.size() / 4, 1, size_t(jobs));
    if (r.sources.size() > 1) ++split_batches;
    if (r.sources.size() != want_sources)
      bad_split = cat(r.sources.size(), " sources for ", r.kernels.size(), " kernels");
    for (const std::string& name : r.kernels) {
      int defined = 0;
      for (const std::string& src : r.sources) defined += src.find("void " + name + "(") != std::string::npos;
      if (defined != 1) bad_split = cat(name, " defined in ", defined, " sources");
      tune::Measurement m;
      m.ok = true;
      m.median_ms = ms(schedules.at(name));
      if (&name != &r.kernels[0]) measured.back().push_back(m.median_ms);  // not the batch's incumbent
      out.candidates.push_back(m);
    }
    return out;
  }
  // Points measured (incumbents not counted) until one ran within 0.1 % of `ms`; -1: never.
  static int reached(const std::vector<double>& times, double ms) {
    for (size_t i = 0; i < times.size(); ++i)
      if (times[i] <= ms * 1.001) return int(i) + 1;
    return -1;
  }
  int jobs = 1;
  std::map<std::string, loop::Schedule> schedules;
  std::vector<std::vector<double>> measured;  // per kernel searched, in order
  std::string bad_split;
  int split_batches = 0;
};

// The filter's promise: on the same kernels and the same (deterministic) times, the search with
// the model reaches the result of the search without it (its best time) after fewer measured
// points, and ends no worse; it proposes more points than it measures. (It may then measure more
// in all: mutants that win restart the descent, and a search only stops after three mutant
// batches without a win.)
TEST(TuneSearch, TheModelFilterReachesTheSameResultWithFewerMeasurements) {
  auto g = two_matmuls("", 80);
  const TensorMap inputs = testing::random_inputs(*g, 5, {}, false);
  std::map<bool, tune::TuneReport> reports;
  std::map<bool, std::vector<std::vector<double>>> measured;
  for (bool filter : {false, true}) {
    tune::TuneOptions to;
    to.budget_s = 600;
    to.build.threads = 1;
    to.filter = filter;
    to.compile_jobs = 2;
    LawMeasurer m;
    m.jobs = 2;
    to.on_batch = [&](const std::vector<std::string>& names, const std::vector<loop::Schedule>& s) {
      for (size_t i = 0; i < names.size(); ++i) m.schedules[names[i]] = s[i];
    };
    std::vector<tune::Record> records;
    reports[filter] = tune::tune_model(*g, inputs, to, m, records, [](const std::vector<tune::Record>&) {});
    measured[filter] = m.measured;
    EXPECT_EQ(m.bad_split, "") << "filter " << filter;
    EXPECT_GT(m.split_batches, 0) << "no batch was large enough to split";
  }
  const tune::TuneReport &off = reports[false], &on = reports[true];
  ASSERT_EQ(off.kernels.size(), 2u);
  ASSERT_EQ(on.kernels.size(), 2u);
  ASSERT_EQ(measured[false].size(), 2u);
  ASSERT_EQ(measured[true].size(), 2u);
  int off_reach = 0, on_reach = 0, on_trials = 0, on_proposed = 0;
  for (size_t i = 0; i < 2; ++i) {
    const tune::KernelResult &a = off.kernels[i], &b = on.kernels[i];
    ASSERT_EQ(a.signature, b.signature);
    EXPECT_TRUE(a.improved) << a.name;
    EXPECT_TRUE(b.improved) << b.name;
    EXPECT_EQ(a.proposed, a.trials) << "unfiltered, every proposed point is measured";
    EXPECT_LE(b.tuned_ms, a.tuned_ms * 1.001) << b.name << ": " << tune::describe_fields(b.changed) << " vs "
                                              << tune::describe_fields(a.changed);
    const int ra = LawMeasurer::reached(measured[false][i], a.tuned_ms),
              rb = LawMeasurer::reached(measured[true][i], a.tuned_ms);
    ASSERT_GT(ra, 0);
    ASSERT_GT(rb, 0) << b.name << " never reached the unfiltered search's best";
    off_reach += ra;
    on_reach += rb;
    on_trials += b.trials;
    on_proposed += b.proposed;
  }
  EXPECT_LT(on_reach, off_reach) << "points measured to reach the unfiltered best: with the filter " << on_reach
                                 << ", without " << off_reach;
  EXPECT_GT(on_proposed, on_trials);
  EXPECT_GE(on.model_samples, size_t(on_trials));
  EXPECT_EQ(off.model_samples, 0u);
}

// A batch split into sources compiles them with one compiler process each, at once, and every
// object is loaded; a source that does not compile is the usual one-line internal error.
TEST(TuneCompile, BuildAllCompilesEachSourceIntoItsOwnObject) {
  runtime::CompileOptions co;
  co.cache_dir = (fs::temp_directory_path() / ("kiln_build_all_" + std::to_string(::getpid()))).string();
  co.use_cache = false;
  std::vector<std::string> sources;
  for (int i = 0; i < 3; ++i)
    sources.push_back(cat("int which(void) { return ", i, "; }\nvoid k", i,
                          "(void* const* a) { *(int*)a[0] = which() + 10; }\n"));
  const auto mods = runtime::JitModule::build_all(sources, co, 2);
  ASSERT_EQ(mods.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    int out = -1;
    void* args[] = {&out};
    mods[size_t(i)]->get(cat("k", i))(args);
    EXPECT_EQ(out, 10 + i) << "each object has its own which()";
    EXPECT_EQ(mods[size_t(i)]->find(cat("k", (i + 1) % 3)), nullptr);
  }
  sources[1] = "void k1(void* const* a) { this is not C }\n";
  try {
    runtime::JitModule::build_all(sources, co, 2);
    ADD_FAILURE() << "a source that does not compile was accepted";
  } catch (const InternalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("C compiler failed"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  fs::remove_all(co.cache_dir);
}

}  // namespace
}  // namespace kiln
