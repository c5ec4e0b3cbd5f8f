// The machine model: what this CPU can do, measured. Peak float32 FLOP/s (an FMA loop on the widest
// ISA the CPU has) and read/triad bandwidth from each cache level and from DRAM, each for 1 thread
// and for N threads, plus the cache sizes and ISA read from the system. The roofline, the cost
// model and `kiln bench --kernels` compare kernels against these figures.
//
// A probe takes a few seconds, so the result is cached as JSON at
// $XDG_CACHE_HOME/kiln/machine.json (or ~/.cache/kiln/machine.json) and reused while the CPU
// model, CPU count and thread count match; `kiln probe --reprobe` measures again.
//
// Conventions: GB/s are 1e9 bytes per second. Read bandwidth counts each float read once; triad
// (a = b + s*c) counts 12 bytes per element (two reads, one write; STREAM's convention: the
// write-allocate read of `a` is not counted, though ordinary stores pay it). Every figure is the
// median of `repetitions` samples of about 1 ms; N-thread samples run the threads concurrently,
// pinned one per CPU, each on its own slice.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::analysis {

struct Bandwidth {
  double read_gbps = 0;
  double triad_gbps = 0;
};

struct MachineModel {
  std::string cpu_model;    // /proc/cpuinfo "model name"
  std::string isa;          // the FMA loop's: "avx512", "avx2" or "scalar"
  int vector_bits = 0;      // 512, 256, or 32 for scalar
  int cpus = 0;             // CPUs this process may use
  int threads = 0;          // N of the N-thread figures
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per cache instance
  int l2_shared_by = 1, l3_shared_by = 1;             // CPUs sharing one instance
  std::string probed_at;    // ISO 8601 UTC, e.g. 2026-11-30T12:00:00Z
  bool quick = false;       // measured with ProbeOptions::quick (less reliable)
  double load_avg = 0;      // 1-minute load average when probed: a busy machine measures low

  double peak_gflops_1t = 0, peak_gflops_nt = 0;
  Bandwidth l1_1t, l1_nt, l2_1t, l2_nt, l3_1t, l3_nt, dram_1t, dram_nt;

  // The memory level a kernel touching `bytes` (all threads together) is measured against:
  // "DRAM" beyond the L3 size, "L3" beyond the L2 capacity of the threads that run it, else "L2".
  // L1 is never the yardstick: a kernel's operands come from other kernels, not from its own L1.
  const char* level_for(int64_t bytes, int threads) const;
  // That level's bandwidth with `threads` threads (the 1-thread figure for 1, the N-thread one
  // otherwise): read bandwidth when `reads_only` (reductions: their output is negligible), triad
  // bandwidth otherwise (streams read and written, as elementwise kernels do).
  double bandwidth_for(int64_t bytes, int threads, bool reads_only) const;
};

struct ProbeOptions {
  int threads = 0;        // 0: every CPU this process may use
  int repetitions = 7;    // samples per figure; the median is kept
  bool quick = false;     // ~50x shorter samples and a DRAM buffer of 2x L3: for tests only
};

// Measures the machine (a few seconds; well under a second with `quick`).
MachineModel probe_machine(const ProbeOptions& opts = {});

// Where the cache lives: $XDG_CACHE_HOME/kiln/machine.json or ~/.cache/kiln/machine.json.
std::string machine_cache_path();
// The cached model when it exists, parses, and was measured on this CPU model with this CPU count;
// otherwise nullopt (a corrupt or foreign cache is simply not used).
std::optional<MachineModel> load_cached_machine();
// Writes the cache (atomically: a temporary file renamed over it). UserError when it cannot.
void save_machine(const MachineModel& m);

// The cached model when it fits (same CPU; the same thread count, or any when 1 thread is asked
// for, since every probe measures 1 thread too), else probes and saves. `reprobe` always measures.
MachineModel machine_model(bool reprobe = false, const ProbeOptions& opts = {});

// Flat JSON object, one key per field ("dram_triad_gbps_nt", ...). from_json returns nullopt on
// malformed text, a missing field, or another format version.
std::string to_json(const MachineModel& m);
std::optional<MachineModel> from_json(const std::string& text);

// This CPU's model name and usable CPU count, as probe_machine records them.
std::string current_cpu_model();
int current_cpus();

}  // namespace kiln::analysis
