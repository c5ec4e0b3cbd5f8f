// The measuring loops behind the machine probe (internal to src/analysis): an FMA loop for peak
// float32 FLOP/s, a streaming sum for read bandwidth and a STREAM-style triad, each on the widest
// ISA the CPU has, and a harness that times a piece of work split over pinned threads.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace kiln::analysis::detail {

enum class Isa { Scalar, Avx2, Avx512 };
Isa best_isa();               // by __builtin_cpu_supports (which also checks OS register support)
const char* isa_name(Isa i);  // "avx512", "avx2", "scalar"
int isa_vector_bits(Isa i);

// Floats per block the streaming loops work on: buffer lengths must be multiples of it.
constexpr int64_t kBlockFloats = 128;

// `iters` rounds of independent FMAs on enough accumulators to hide FMA latency on every port;
// returns the FLOPs done (an FMA is 2). The result goes to *sink so the loop is not removed.
double fma_loop(Isa isa, int64_t iters, float* sink);
// Sum of p[0..n) (n a multiple of kBlockFloats), with several vector accumulators.
float read_sum(Isa isa, const float* p, int64_t n);
// a[i] = b[i] + s * c[i] for i in [0, n) (n a multiple of kBlockFloats).
void triad(Isa isa, float* a, const float* b, const float* c, float s, int64_t n);

// Runs `setup(t)` once on each of `threads` threads (first touch of their buffers), one warm-up
// call of `work(t)`, then timed calls until `reps` ran with no worker preempted (or 10x reps
// tries); returns the wall seconds of the kept calls, each from the earliest start to the latest
// end over the threads. Thread t is pinned to the t-th CPU this process may use, so the OS does
// not stack two workers on one core mid-sample.
std::vector<double> timed_samples(int threads, int reps, const std::function<void(int)>& setup,
                                  const std::function<void(int)>& work);

// CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

}  // namespace kiln::analysis::detail
