#include "analysis/probe_kernels.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_PROBE_X86 1
#endif

namespace kiln::analysis::detail {

namespace {

using Clock = std::chrono::steady_clock;

// FMA loop constants: acc = acc * m + c converges to c / (1 - m) = 1, so values stay normal (no
// denormal slow path) and finite however long the loop runs.
constexpr float kMul = 0.999f, kAdd = 0.001f;

#ifdef KILN_PROBE_X86
// Horizontal sum by a store (GCC 12's _mm512_reduce_add_ps warns about its own undefined lanes).
__attribute__((target("avx512f"))) float hsum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0;
  for (float x : lanes) s += x;
  return s;
}

// 16 accumulators: Zen 4/5 and Intel cores have 2 FMA ports with 4-cycle latency (8 in flight),
// and 16 of the 32 zmm registers leave slack for deeper pipelines without spilling.
__attribute__((target("avx512f"))) double fma_avx512(int64_t iters, float* sink) {
  constexpr int kAcc = 16;
  __m512 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_set1_ps(float(j) * 1e-3f);
  const __m512 m = _mm512_set1_ps(kMul), c = _mm512_set1_ps(kAdd);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kAcc; ++j) s = _mm512_add_ps(s, acc[j]);
  *sink += hsum512(s);
  return double(iters) * kAcc * 16 * 2;
}

// 12 of the 16 ymm registers: 2 ports x 4 cycles = 8 needed, the rest is margin.
__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters, float* sink) {
  constexpr int kAcc = 12;
  __m256 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_set1_ps(float(j) * 1e-3f);
  const __m256 m = _mm256_set1_ps(kMul), c = _mm256_set1_ps(kAdd);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  }
  alignas(32) float lanes[8];
  __m256 s = acc[0];
  for (int j = 1; j < kAcc; ++j) s = _mm256_add_ps(s, acc[j]);
  _mm256_store_ps(lanes, s);
  for (float v : lanes) *sink += v;
  return double(iters) * kAcc * 8 * 2;
}

// 8 accumulators: one 64-byte line per iteration, 2 loads per cycle and a 2-cycle add latency.
__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += kBlockFloats) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(p + i + 16 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return hsum512(acc[0]);
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, int64_t n) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(p + i + 8 * j));
  }
  for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc[0]);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

__attribute__((target("avx512f"))) void triad_avx512(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 4
    for (int j = 0; j < 64; j += 16)
      _mm512_store_ps(a + i + j, _mm512_fmadd_ps(vs, _mm512_load_ps(c + i + j), _mm512_load_ps(b + i + j)));
  }
}

__attribute__((target("avx2,fma"))) void triad_avx2(float* a, const float* b, const float* c, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t i = 0; i < n; i += 32) {
#pragma GCC unroll 4
    for (int j = 0; j < 32; j += 8)
      _mm256_store_ps(a + i + j, _mm256_fmadd_ps(vs, _mm256_load_ps(c + i + j), _mm256_load_ps(b + i + j)));
  }
}
#endif

double fma_scalar(int64_t iters, float* sink) {
  constexpr int kAcc = 8;
  float acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = float(j) * 1e-3f;
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kAcc; ++j) acc[j] = acc[j] * kMul + kAdd;
  for (float v : acc) *sink += v;
  return double(iters) * kAcc * 2;
}

float sum_scalar(const float* p, int64_t n) {
  float acc[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  float s = 0;
  for (float v : acc) s += v;
  return s;
}

long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}

void pin_to(int cpu_index) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == cpu_index) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);  // best effort: unpinned still measures
      return;
    }
  }
}

}  // namespace

Isa best_isa() {
#ifdef KILN_PROBE_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
  return Isa::Scalar;
}

const char* isa_name(Isa i) { return i == Isa::Avx512 ? "avx512" : i == Isa::Avx2 ? "avx2" : "scalar"; }
int isa_vector_bits(Isa i) { return i == Isa::Avx512 ? 512 : i == Isa::Avx2 ? 256 : 32; }

double fma_loop(Isa isa, int64_t iters, float* sink) {
#ifdef KILN_PROBE_X86
  if (isa == Isa::Avx512) return fma_avx512(iters, sink);
  if (isa == Isa::Avx2) return fma_avx2(iters, sink);
#endif
  return fma_scalar(iters, sink);
}

float read_sum(Isa isa, const float* p, int64_t n) {
#ifdef KILN_PROBE_X86
  if (isa == Isa::Avx512) return sum_avx512(p, n);
  if (isa == Isa::Avx2) return sum_avx2(p, n);
#endif
  return sum_scalar(p, n);
}

void triad(Isa isa, float* a, const float* b, const float* c, float s, int64_t n) {
#ifdef KILN_PROBE_X86
  if (isa == Isa::Avx512) return triad_avx512(a, b, c, s, n);
  if (isa == Isa::Avx2) return triad_avx2(a, b, c, s, n);
#endif
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

int available_cpus() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) return std::max(1, CPU_COUNT(&allowed));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<double> timed_samples(int threads, int reps, const std::function<void(int)>& setup,
                                  const std::function<void(int)>& work) {
  threads = std::max(1, threads);
  reps = std::max(1, reps);
  // A sample during which the scheduler took a CPU from any worker (an involuntary context
  // switch: another process ran), or that some worker started late (its CPU was busy when the
  // barrier released it), measures that other process, not the machine: it is retaken, up to
  // 10x reps attempts, and kept only when no clean one came (a machine that busy gets its
  // median, marked by the load average the model records).
  const int max_attempts = 10 * reps + 1;
  std::vector<Clock::time_point> start(threads), end(threads);
  std::vector<char> preempted(threads, 0);
  std::vector<double> clean, dirty;
  int attempt = 0, phase = 0;
  bool done = false;
  // The barrier lines the threads up before every sample, so a sample measures all of them
  // working at once (what a parallel kernel sees), not their staggered tails. Its completion
  // step (one thread, after every arrival) judges the sample after every second phase.
  auto judge = [&]() noexcept {
    if (phase++ % 2 == 0) return;
    const auto first = *std::min_element(start.begin(), start.end());
    const double secs = std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) - first).count();
    const double skew = std::chrono::duration<double>(*std::max_element(start.begin(), start.end()) - first).count();
    const bool ok = skew <= 0.05 * secs && std::none_of(preempted.begin(), preempted.end(), [](char p) { return p != 0; });
    if (attempt++ > 0) (ok ? clean : dirty).push_back(secs);  // attempt 0 is the warm-up
    done = int(clean.size()) >= reps || attempt >= max_attempts;
  };
  std::barrier sync(threads, judge);
  auto body = [&](int t) {
    pin_to(t);
    setup(t);
    for (;;) {
      sync.arrive_and_wait();
      const long csw0 = involuntary_switches();
      start[t] = Clock::now();
      work(t);
      end[t] = Clock::now();
      preempted[t] = involuntary_switches() != csw0;
      sync.arrive_and_wait();
      if (done) break;
    }
  };
  // Every worker is a new thread, even for one: pinning the caller would leak into whatever it runs
  // next (OpenMP workers inherit their creator's affinity).
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& th : pool) th.join();
  if (clean.empty()) return dirty;
  return clean;
}

}  // namespace kiln::analysis::detail
