// Machine probe: the JSON form round-trips and rejects what it cannot read, the cache is used only
// for this CPU, the bandwidth rule picks the level a kernel's bytes fit, and a quick probe gives
// sane figures (peak > 0, DRAM slower than L1, N threads not slower than one).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "analysis/machine_probe.h"
#include "analysis/native_target.h"

namespace kiln::analysis {
namespace {

namespace fs = std::filesystem;

MachineModel sample_model() {
  MachineModel m;
  m.cpu_model = "Test \"CPU\" \\ 9000\t";
  m.isa = "avx512";
  m.vector_bits = 512;
  m.cpus = 2;
  m.threads = 2;
  m.l1d_bytes = 48 << 10;
  m.l2_bytes = 1 << 20;
  m.l3_bytes = int64_t(32) << 20;
  m.l2_shared_by = 1;
  m.l3_shared_by = 2;
  m.probed_at = "2026-11-30T12:00:00Z";
  m.peak_gflops_1t = 150.25;
  m.peak_gflops_nt = 300.5;
  m.l1_1t = {400, 300};
  m.l1_nt = {800, 600};
  m.l2_1t = {200, 150};
  m.l2_nt = {400, 300};
  m.l3_1t = {100, 75};
  m.l3_nt = {180, 140};
  m.dram_1t = {20.125, 15.5};
  m.dram_nt = {30.75, 25.25};
  return m;
}

TEST(MachineProbe, JsonRoundTrip) {
  MachineModel m = sample_model();
  std::string j = to_json(m);
  auto back = from_json(j);
  ASSERT_TRUE(back.has_value()) << j;
  EXPECT_EQ(back->cpu_model, m.cpu_model);
  EXPECT_EQ(back->isa, "avx512");
  EXPECT_EQ(back->probed_at, m.probed_at);
  EXPECT_FALSE(back->quick);
  EXPECT_EQ(back->vector_bits, 512);
  EXPECT_EQ(back->l3_bytes, int64_t(32) << 20);
  EXPECT_EQ(back->l3_shared_by, 2);
  EXPECT_EQ(back->peak_gflops_nt, 300.5);
  EXPECT_EQ(back->l1_nt.triad_gbps, 600);
  EXPECT_EQ(back->dram_1t.read_gbps, 20.125);
  EXPECT_EQ(back->dram_nt.triad_gbps, 25.25);
  EXPECT_EQ(to_json(*back), j);  // every field survives, not only the ones checked above
  EXPECT_NE(j.find("\"dram_triad_gbps_nt\": 25.25"), std::string::npos) << j;
}

TEST(MachineProbe, JsonRejectsWhatItCannotRead) {
  const std::string good = to_json(sample_model());
  EXPECT_FALSE(from_json("").has_value());
  EXPECT_FALSE(from_json("{").has_value());
  EXPECT_FALSE(from_json(good.substr(0, good.size() / 2)).has_value());
  EXPECT_FALSE(from_json(good + "x").has_value());
  // Another format version, a missing field, a field of the wrong type, nesting.
  std::string other = good;
  other.replace(other.find("\"format\": 1"), 11, "\"format\": 2");
  EXPECT_FALSE(from_json(other).has_value());
  std::string missing = good;
  size_t k = missing.find(",\n  \"l2_read_gbps_nt\"");
  missing.erase(k, missing.find(',', k + 1) - k);
  EXPECT_FALSE(from_json(missing).has_value());
  std::string wrong = good;
  wrong.replace(wrong.find("\"cpus\": 2"), 9, "\"cpus\": \"2\"");
  EXPECT_FALSE(from_json(wrong).has_value());
  EXPECT_FALSE(from_json("{\"format\": {\"x\": 1}}").has_value());
  // Unknown extra keys are fine (a newer writer may add some).
  std::string extra = good;
  extra.insert(1, "\"note\": null, \"flag\": true,");
  EXPECT_TRUE(from_json(extra).has_value());
}

TEST(MachineProbe, BandwidthRulePicksTheLevelTheBytesFit) {
  MachineModel m = sample_model();
  EXPECT_STREQ(m.level_for(1 << 20, 1), "L2");             // exactly one L2
  EXPECT_STREQ(m.level_for((1 << 20) + 1, 1), "L3");
  EXPECT_STREQ(m.level_for((1 << 20) + 1, 2), "L2");       // two threads: two private L2s
  EXPECT_STREQ(m.level_for(int64_t(32) << 20, 2), "L3");   // exactly the L3
  EXPECT_STREQ(m.level_for((int64_t(32) << 20) + 1, 2), "DRAM");
  EXPECT_EQ(m.bandwidth_for(int64_t(64) << 20, 2, false), 25.25);  // DRAM triad, N threads
  EXPECT_EQ(m.bandwidth_for(int64_t(64) << 20, 1, true), 20.125);  // DRAM read, 1 thread
  EXPECT_EQ(m.bandwidth_for(int64_t(4) << 20, 2, true), 180);      // L3 read, N threads
  EXPECT_EQ(m.bandwidth_for(4096, 1, false), 150);                 // L2 triad, 1 thread
}

// Points $XDG_CACHE_HOME at a fresh directory for one test and restores it after.
class MachineProbeCache : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("XDG_CACHE_HOME");
    had_old_ = old != nullptr;
    if (old) old_ = old;
    char tmpl[] = "/tmp/kiln_probe_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (had_old_) setenv("XDG_CACHE_HOME", old_.c_str(), 1);
    else unsetenv("XDG_CACHE_HOME");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  MachineModel this_machine() {
    MachineModel m = sample_model();
    m.cpu_model = current_cpu_model();
    m.cpus = current_cpus();
    m.threads = m.cpus;
    return m;
  }
  std::string dir_, old_;
  bool had_old_ = false;
};

TEST_F(MachineProbeCache, SaveThenLoadOnlyForThisCpu) {
  EXPECT_EQ(machine_cache_path(), dir_ + "/kiln/machine.json");
  EXPECT_FALSE(load_cached_machine().has_value());  // nothing saved yet
  MachineModel m = this_machine();
  save_machine(m);
  auto back = load_cached_machine();
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(to_json(*back), to_json(m));
  // Another CPU model or CPU count: the cache is not this machine's.
  MachineModel other = m;
  other.cpu_model += " (other)";
  save_machine(other);
  EXPECT_FALSE(load_cached_machine().has_value());
  other = m;
  other.cpus += 1;
  save_machine(other);
  EXPECT_FALSE(load_cached_machine().has_value());
  // A corrupt file is no cache.
  std::ofstream(machine_cache_path()) << "{\"format\": 1, ";
  EXPECT_FALSE(load_cached_machine().has_value());
}

TEST_F(MachineProbeCache, MachineModelReusesTheCacheUnlessToldToReprobe) {
  MachineModel m = this_machine();
  m.probed_at = "cached";
  save_machine(m);
  ProbeOptions quick;
  quick.quick = true;
  quick.repetitions = 1;
  EXPECT_EQ(machine_model(false, quick).probed_at, "cached");  // full cached model serves a quick ask
  ProbeOptions one = quick;
  one.threads = 1;
  EXPECT_EQ(machine_model(false, one).probed_at, "cached");  // its 1-thread figures serve 1 thread
  ProbeOptions other_threads = quick;
  other_threads.threads = m.threads + 1;
  MachineModel re = machine_model(false, other_threads);  // another thread count: probed again
  EXPECT_NE(re.probed_at, "cached");
  EXPECT_EQ(re.threads, m.threads + 1);
  EXPECT_TRUE(re.quick);
  // ... and saved: the cache now holds the quick model, which a quick ask reuses.
  auto saved = load_cached_machine();
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->probed_at, re.probed_at);
  save_machine(m);
  MachineModel forced = machine_model(true, quick);
  EXPECT_NE(forced.probed_at, "cached");
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

TEST(MachineProbe, QuickProbeIsSane) {
  ProbeOptions o;
  o.quick = true;
  o.repetitions = 3;
  MachineModel m = probe_machine(o);
  EXPECT_EQ(m.cpu_model, current_cpu_model());
  EXPECT_EQ(m.threads, current_cpus());
  EXPECT_TRUE(m.isa == "avx512" || m.isa == "avx2" || m.isa == "scalar") << m.isa;
  EXPECT_GT(m.l1d_bytes, 0);
  EXPECT_GT(m.l2_bytes, m.l1d_bytes);
  EXPECT_GT(m.l3_bytes, 0);
  EXPECT_EQ(m.probed_at.size(), 20u) << m.probed_at;  // 2026-11-30T12:00:00Z
  // Speeds are checked for having been measured (positive, not NaN), not against a floor: the
  // quick probe times a few microseconds of work, and on a shared 2-core CI machine under ASan
  // with the other ctest shard busy, the N-thread peak once came out at 0.078 GFLOP/s (one thread
  // waiting for a core the other shard held).
  EXPECT_GT(m.peak_gflops_1t, 0.0);
  EXPECT_GT(m.dram_1t.read_gbps, 0.0);
  EXPECT_GT(m.dram_1t.triad_gbps, 0.0);
  // The cache level's figure above DRAM's — except in the sanitizer build, where every load of
  // the probe's loops is instrumented: L1 "bandwidth" there is the checks' speed (15.6 GB/s
  // against 19.7 from DRAM was seen under ASan with the other shard on the second core).
  if (!kSanitizedBuild) EXPECT_LT(m.dram_1t.read_gbps, m.l1_1t.read_gbps);
  // N-thread figures exist; how they compare with one thread, or with each other, is not
  // checked here: ctest runs tests in parallel on a 2-core machine, so another test may hold the
  // second core during one probe and not the next (dram_nt > l1_nt was seen that way).
  EXPECT_GT(m.peak_gflops_nt, 0.0);
  EXPECT_GT(m.l1_nt.read_gbps, 0.0);
  EXPECT_GT(m.dram_nt.read_gbps, 0.0);
}

}  // namespace
}  // namespace kiln::analysis

namespace kiln::analysis {
namespace {

// The probed machine as a fusion target: measured peak (N threads), DRAM triad, caches and
// threads; registers and vector width from the ISA's description.
TEST(NativeTarget, TakesTheProbedFigures) {
  MachineModel m;
  m.isa = "avx2";
  m.threads = 4;
  m.peak_gflops_nt = 321.5;
  m.dram_nt.triad_gbps = 33.25;
  m.l1d_bytes = 48 * 1024;
  m.l2_bytes = 2 * 1024 * 1024;
  const Target t = native_target(m);
  EXPECT_EQ(t.name, "native");
  EXPECT_EQ(t.peak_gflops, 321.5);
  EXPECT_EQ(t.dram_gbps, 33.25);
  EXPECT_EQ(t.threads, 4);
  EXPECT_EQ(t.l1_bytes, 48 * 1024);
  EXPECT_EQ(t.l2_bytes, 2 * 1024 * 1024);
  EXPECT_EQ(t.vector_lanes_f32, Target::by_name("x86-avx2")->vector_lanes_f32);
  m.isa = "avx512";
  EXPECT_EQ(native_target(m).vector_registers, Target::by_name("x86-avx512")->vector_registers);
}

}  // namespace
}  // namespace kiln::analysis
