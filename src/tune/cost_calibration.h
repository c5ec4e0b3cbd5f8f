// Calibration of the fusion cost model from measured kernels (issue 12): the roofline estimate
//     time = max(flops / peak, bytes / bandwidth) + launch overhead
// is optimistic by 1.3-2x on this machine's models (no kernel reaches the roof), and by different
// amounts per class of kernel (a GEMM-like conv reaches 70-85 % of peak, a depthwise stencil or an
// elementwise kernel whose operands stay in cache sits far from either roof). Calibration fits,
// per cost class (fusion/cost_model.h cost_class), the three factors of Target::efficiency —
// compute efficiency, memory efficiency and a per-launch overhead — to kernel times measured on
// this machine, so that the estimate `kiln roofline`, `kiln explain` and `--target native`'s
// partitioner use predicts what the kernels take.
//
// Samples come from `kiln calibrate MODEL...` (every kernel of every model, timed as `kiln bench
// --kernels` times them) and from `kiln tune` (its profile of the default build). They are kept in
// a JSON-lines file beside the tuner's records, one per (kernel signature, machine), the newest
// measurement winning:
//   {"schema": 1, "signature": "conv_relu-…", "class": "conv", "ops": "Conv,Relu", "model": "resnet18",
//    "cpu": "AMD EPYC", "isa": "avx512f,avx2,fma", "threads": 1, "flops": 2.3e8, "bytes": 1.7e6,
//    "ms": 1.12, "date": "2026-12-02T06:00:00Z"}
// The fit is recomputed from the samples whenever it is needed (milliseconds), against the probed
// roof of the samples' thread count, so a re-probe or new samples take effect without a rebuild.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusion/target.h"
#include "runtime/executable.h"
#include "tune/records.h"

namespace kiln::tune {

inline constexpr int kSamplesSchema = 1;

// One kernel timed on one machine: the cost model's inputs for it and the measured median.
struct CostSample {
  std::string signature;   // tune::kernel_signature of its fusion group
  std::string cost_class;  // fusion/cost_model.h cost_class
  std::string ops, model;  // for reading the file; `model` also groups the held-out check
  MachineKey machine;
  double flops = 0;        // the partitioner's CostEstimate::flops (recomputation included)
  double bytes = 0;        // its bytes read + written
  double ms = 0;           // median time per call
  std::string date;
};

std::string sample_to_json_line(const CostSample& s);
std::optional<CostSample> sample_from_json_line(const std::string& line, std::string* why);

struct SamplesFile {
  std::vector<CostSample> samples;
  std::vector<std::string> warnings;  // one line per kind of line skipped
};
// Reads `path` (missing: empty; unreadable: UserError). With `machine`, only its samples are kept
// (another CPU or ISA: counted in a warning; this CPU at another thread count: skipped silently).
SamplesFile read_samples(const std::string& path, const MachineKey* machine);
void write_samples(const std::string& path, const std::vector<CostSample>& samples);
// Adds `s` or replaces the sample of the same signature and machine.
void upsert_sample(std::vector<CostSample>& samples, const CostSample& s);
// <kiln's cache folder>/cost_samples.jsonl under the records file's rule ("" with `why` otherwise).
std::string default_samples_path(std::string* why);

// One sample per kernel of `ex` (views excluded), from its per-group medians (plan order, as
// analysis::TimedRuns::kernel_medians gives them).
std::vector<CostSample> samples_of(const runtime::Executable& ex, const std::vector<double>& group_ms,
                                   const std::string& model, const MachineKey& machine);

// Classes with fewer samples than this are priced with the "all" factors (fitted over every
// sample): three kernels do not pin down three factors.
inline constexpr int kMinClassSamples = 4;

// The fitted factors per class, plus "all". Each class's factors minimise Σ √t·ln²(predicted /
// measured) over its samples: a kernel's error counts relative to its own time (log), and long
// kernels, which make up a model's time, count more, but not so much that the many short kernels
// of a small model stop mattering (weighting by t itself left them 2x off; unweighted, the long
// ones drift). The overhead is capped at a few microseconds (see kMaxOverheadUs). Found by a grid
// search refined around its best point: deterministic, and free of local-minimum trouble for three
// parameters. Empty when there are no samples.
std::map<std::string, ClassEfficiency> fit_efficiency(const std::vector<CostSample>& samples, double peak_gflops,
                                                      double dram_gbps);

// The cost model's time for a sample, in ms, on a roof with `efficiency` (empty: the plain roofline).
double predicted_ms(const CostSample& s, double peak_gflops, double dram_gbps,
                    const std::map<std::string, ClassEfficiency>& efficiency);

// The calibration `--target native` and `kiln roofline` use: the default samples file's samples
// of this machine at `threads`, fitted against the cached probe's roof for `threads`. Empty (no
// samples, no probe, no private cache folder) means uncalibrated. `samples` (optional) receives the
// sample count; `warnings` the samples file's warnings.
std::map<std::string, ClassEfficiency> load_calibration(int threads, int* samples = nullptr,
                                                        std::vector<std::string>* warnings = nullptr);

}  // namespace kiln::tune
