// probe_machine: what the system says (CPU model, caches, ISA) and what the loops in
// probe_kernels.cc measure. The JSON cache and the bandwidth rule are in machine_model.cc.
#include "analysis/machine_probe.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "analysis/probe_kernels.h"
#include "support/clock.h"

namespace kiln::analysis {

namespace {

using namespace detail;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string l;
  std::getline(f, l);
  return trim(l);
}

// "48K", "1024K", "32M" → bytes; 0 when unreadable.
int64_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  int64_t v = std::strtoll(s.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v <<= 10;
  else if (end && (*end == 'M' || *end == 'm')) v <<= 20;
  else if (end && (*end == 'G' || *end == 'g')) v <<= 30;
  return v;
}

// "0-1,4,6-7" → 5.
int count_cpu_list(const std::string& s) {
  int n = 0;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t dash = part.find('-');
    if (part.empty()) continue;
    if (dash == std::string::npos) ++n;
    else n += std::atoi(part.c_str() + dash + 1) - std::atoi(part.c_str()) + 1;
  }
  return std::max(1, n);
}

// Cache sizes from sysfs (what lscpu reads), falling back to sysconf and then to typical sizes, so
// the probe still sizes its buffers sensibly in a container that hides /sys.
void read_caches(MachineModel& m) {
  for (int i = 0; i < 16; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level = read_line(dir + "level");
    if (level.empty()) break;
    std::string type = read_line(dir + "type");
    if (type == "Instruction") continue;
    int64_t size = parse_size(read_line(dir + "size"));
    int shared = count_cpu_list(read_line(dir + "shared_cpu_list"));
    if (level == "1") m.l1d_bytes = size;
    if (level == "2") m.l2_bytes = size, m.l2_shared_by = shared;
    if (level == "3") m.l3_bytes = size, m.l3_shared_by = shared;
  }
  auto sc = [](int name) { long v = sysconf(name); return v > 0 ? int64_t(v) : int64_t(0); };
  if (m.l1d_bytes <= 0) m.l1d_bytes = sc(_SC_LEVEL1_DCACHE_SIZE);
  if (m.l2_bytes <= 0) m.l2_bytes = sc(_SC_LEVEL2_CACHE_SIZE);
  if (m.l3_bytes <= 0) m.l3_bytes = sc(_SC_LEVEL3_CACHE_SIZE);
  if (m.l1d_bytes <= 0) m.l1d_bytes = 32 << 10;
  if (m.l2_bytes <= 0) m.l2_bytes = 1 << 20;
  if (m.l3_bytes <= 0) m.l3_bytes = int64_t(8) << 20, m.l3_shared_by = std::max(1, current_cpus());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

// Page-aligned, written once so every page is mapped before anything is timed.
Buffer make_buffer(int64_t floats) {
  size_t bytes = (size_t(floats) * sizeof(float) + 4095) / 4096 * 4096;
  float* p = static_cast<float*>(std::aligned_alloc(4096, bytes));
  if (!p) throw std::bad_alloc();
  for (int64_t i = 0; i < floats; ++i) p[i] = float(i & 1023) * (1.0f / 1024);
  return Buffer(p);
}

int64_t round_floats(int64_t bytes) {
  return std::max<int64_t>(kBlockFloats, bytes / int64_t(sizeof(float)) / kBlockFloats * kBlockFloats);
}

// How many calls of f make one sample of about `target_s` seconds (timed on one thread).
int64_t calibrate(const std::function<void(int64_t)>& f, double target_s) {
  int64_t n = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    f(n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= target_s / 4 || n >= (int64_t(1) << 40)) return std::max<int64_t>(1, int64_t(double(n) * target_s / std::max(s, 1e-9)));
    n *= 4;
  }
}

// Samples last about 1 ms (0.1 ms when quick): on a machine shared with other work the scheduler
// time-slices in a few ms, so most short samples run uninterrupted and their median is the
// hardware's figure, where long samples would all include someone else's slice.
class Prober {
 public:
  Prober(const MachineModel& m, const ProbeOptions& o)
      : isa_(best_isa()), reps_(std::max(1, o.repetitions)), target_s_(o.quick ? 1e-4 : 1e-3),
        sink_(size_t(std::max(1, m.threads)) * 16, 0.0f) {}

  double peak_gflops(int threads) {
    if (fma_iters_ == 0) fma_iters_ = calibrate([&](int64_t n) { fma_loop(isa_, n, &sink_[0]); }, target_s_);
    const double flops = fma_loop(isa_, 1, &sink_[0]) * double(fma_iters_);  // per thread and sample
    auto secs = timed_samples(threads, reps_, [](int) {}, [&](int t) { fma_loop(isa_, fma_iters_, &sink_[16 * t]); });
    return flops * threads / median(secs) / 1e9;
  }

  // Each thread streams its own buffer of `bytes_per_thread`, `passes` times per sample (passes
  // calibrated on one thread, so small cache-resident buffers are swept often enough to time).
  Bandwidth cache_level(int64_t bytes_per_thread, int threads) {
    const int64_t n = round_floats(bytes_per_thread), n3 = round_floats(bytes_per_thread / 3);
    std::vector<Buffer> bufs(threads);
    auto setup = [&](int t) { bufs[t] = make_buffer(std::max(n, 3 * n3)); };  // first touch by its thread
    Bandwidth bw;
    Buffer probe_buf = make_buffer(std::max(n, 3 * n3));
    int64_t read_passes = calibrate([&](int64_t k) { sweep_read(probe_buf.get(), n, k, 0); }, target_s_);
    int64_t triad_passes =
        calibrate([&](int64_t k) { sweep_triad(probe_buf.get(), n3, k); }, target_s_);
    probe_buf.reset();
    auto rs = timed_samples(threads, reps_, setup, [&](int t) { sweep_read(bufs[t].get(), n, read_passes, t); });
    bw.read_gbps = double(threads) * double(read_passes) * double(n) * 4 / median(rs) / 1e9;
    auto ts = timed_samples(threads, reps_, setup, [&](int t) { sweep_triad(bufs[t].get(), n3, triad_passes); });
    bw.triad_gbps = double(threads) * double(triad_passes) * double(n3) * 12 / median(ts) / 1e9;
    return bw;
  }

  // DRAM: `buf` holds `chunks` chunks of `chunk_floats`, each as large as all L3 together; sample
  // r sweeps chunk r mod chunks (slice t to thread t), last touched `chunks` samples earlier and
  // evicted since. Samples stay a few ms long (one chunk, not the whole buffer), short enough
  // to run between the scheduler's interruptions on a busy machine.
  Bandwidth dram(float* buf, int64_t chunk_floats, int chunks, int threads) {
    const int64_t slice = chunk_floats / threads / kBlockFloats * kBlockFloats;
    const int64_t third = chunk_floats / 3 / kBlockFloats * kBlockFloats;  // a | b | c in a chunk
    const int64_t tslice = third / threads / kBlockFloats * kBlockFloats;
    std::vector<int> sample(size_t(threads) * 16, 0);  // per-thread counters, a line apart
    auto chunk = [&](int t) { return buf + chunk_floats * (sample[16 * size_t(t)]++ % chunks); };
    Bandwidth bw;
    auto rs = timed_samples(threads, reps_, [](int) {}, [&](int t) { sweep_read(chunk(t) + t * slice, slice, 1, t); });
    bw.read_gbps = double(threads) * double(slice) * 4 / median(rs) / 1e9;
    auto ts = timed_samples(threads, reps_, [](int) {}, [&](int t) {
      float* a = chunk(t) + t * tslice;
      triad(isa_, a, a + third, a + 2 * third, 0.5f, tslice);
    });
    bw.triad_gbps = double(threads) * double(tslice) * 12 / median(ts) / 1e9;
    return bw;
  }

 private:
  void sweep_read(const float* p, int64_t n, int64_t passes, int t) {
    float s = 0;
    for (int64_t k = 0; k < passes; ++k) s += read_sum(isa_, p, n);
    sink_[16 * size_t(t)] += s;
  }
  void sweep_triad(float* p, int64_t n3, int64_t passes) {
    for (int64_t k = 0; k < passes; ++k) triad(isa_, p, p + n3, p + 2 * n3, 0.5f, n3);
  }

  Isa isa_;
  int reps_;
  double target_s_;
  int64_t fma_iters_ = 0;
  std::vector<float> sink_;  // one 64-byte line per thread: no false sharing between workers
};

}  // namespace

std::string current_cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    size_t colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == "model name") return trim(line.substr(colon + 1));
  }
  return "unknown CPU";
}

int current_cpus() { return available_cpus(); }

MachineModel probe_machine(const ProbeOptions& o) {
  MachineModel m;
  m.cpu_model = current_cpu_model();
  m.cpus = current_cpus();
  m.threads = o.threads > 0 ? o.threads : m.cpus;
  Isa isa = best_isa();
  m.isa = isa_name(isa);
  m.vector_bits = isa_vector_bits(isa);
  read_caches(m);
  m.probed_at = iso_utc_now();
  m.quick = o.quick;
  std::ifstream("/proc/loadavg") >> m.load_avg;

  Prober p(m, o);
  const int n = m.threads;
  m.peak_gflops_1t = p.peak_gflops(1);
  m.peak_gflops_nt = p.peak_gflops(n);

  // Buffers sized to half of each level, so the level holds them with room for the stack and
  // page tables; the L3 buffer is at least 2x L2 so it cannot hide in L2.
  auto share = [](int64_t size, int sharers, int threads) { return size / 2 / std::max(1, std::min(sharers, threads)); };
  const int64_t l3_min = 2 * m.l2_bytes;
  m.l1_1t = p.cache_level(m.l1d_bytes / 2, 1);
  m.l1_nt = p.cache_level(m.l1d_bytes / 2, n);
  m.l2_1t = p.cache_level(share(m.l2_bytes, m.l2_shared_by, 1), 1);
  m.l2_nt = p.cache_level(share(m.l2_bytes, m.l2_shared_by, n), n);
  m.l3_1t = p.cache_level(std::max(l3_min, share(m.l3_bytes, m.l3_shared_by, 1)), 1);
  m.l3_nt = p.cache_level(std::max(l3_min, share(m.l3_bytes, m.l3_shared_by, n)), n);

  // DRAM: one buffer of 8x all L3 (2x when quick), written once here and swept by 1 and by N threads.
  const int64_t l3_instances = (m.cpus + m.l3_shared_by - 1) / m.l3_shared_by;
  const int64_t chunk = round_floats(m.l3_bytes * std::max<int64_t>(1, l3_instances));
  const int chunks = o.quick ? 2 : 8;
  Buffer big = make_buffer(chunk * chunks);
  m.dram_1t = p.dram(big.get(), chunk, chunks, 1);
  m.dram_nt = p.dram(big.get(), chunk, chunks, n);
  return m;
}

}  // namespace kiln::analysis
