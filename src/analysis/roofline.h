// The roofline of a compiled model (Williams, Waterman and Patterson, CACM 2009): per kernel, its
// FLOPs, compulsory DRAM bytes, operational intensity and measured time, against the machine's
// probed peak and DRAM bandwidth:
//     attainable GFLOP/s = min(peak, bandwidth × intensity),  intensity = FLOPs / DRAM bytes.
//
// Counting conventions (what `kiln roofline` and docs/roofline.md state):
//  - FLOPs are node_flops (fusion/cost_model.h) summed over the fusion group's nodes: a multiply-add
//    is 2 FLOPs; every other arithmetic operation on one element is 1 (exp, erf, a division, a
//    comparison alike). A node recomputed in several groups counts in each (work the kernels do);
//    the model's total_flops counts every graph node once (the work the model asks for).
//  - DRAM bytes are compulsory traffic: every group input (activations and weights alike) read once
//    and every output written once, at their dtype's size. Whatever fits in cache between kernels
//    is still counted, so a kernel whose data stays in L2/L3 can sit above the DRAM roof.
//  - The roof is the probed machine (analysis/machine_probe.h): peak FLOP/s and DRAM triad
//    bandwidth for the thread count the model runs on.
//  - A kernel is memory-bound when its intensity is below the ridge point peak / bandwidth, else
//    compute-bound; percent of roof = attained GFLOP/s / attainable GFLOP/s (for a memory-bound
//    kernel this equals attained GB/s / bandwidth, which is also how kernels with no FLOPs, pure
//    data movement, get one).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/machine_probe.h"
#include "runtime/executable.h"

namespace kiln::analysis {

// The two roofs a model is measured against.
struct Roof {
  double peak_gflops = 0;
  double dram_gbps = 0;
  int threads = 1;
  double ridge() const { return dram_gbps > 0 ? peak_gflops / dram_gbps : 0; }  // FLOP/byte
};
// The machine's roof for `threads` threads: the 1-thread figures for 1, the N-thread ones for the
// probed N; between, the peak scales with the threads (capped at the N-thread peak) and the
// bandwidth is the N-thread one (DRAM bandwidth saturates with few threads).
Roof roof_for(const MachineModel& m, int threads);

struct KernelRoofline {
  std::string name;       // the kernel's (the fusion group's) name
  std::string kind;       // group kind: elementwise, reduction, contraction, opaque
  bool generated = false; // generated code (else a library kernel)
  double flops = 0;
  int64_t dram_bytes = 0;
  double time_ms = 0;     // median over the runs
  double gflops = 0, gbps = 0;   // attained
  double intensity = 0;          // FLOP per DRAM byte
  bool memory_bound = false;
  double roof_gflops = 0;        // attainable at this intensity
  double percent_of_roof = 0;
  std::string cost_class;        // fusion/cost_model.h cost_class
  double estimated_ms = 0;       // the cost model's estimate (calibrated when the report is)
};

// FLOPs and compulsory bytes of one fusion group.
double group_flops(const FusionGroup& g);
int64_t group_dram_bytes(const FusionGroup& g);
// Every node of the graph once.
double graph_flops(const Graph& g);

// One kernel placed under the roof (the pure part: tests drive it directly).
KernelRoofline place_kernel(std::string name, double flops, int64_t dram_bytes, double time_ms, const Roof& roof);

struct RooflineReport {
  std::string label;            // "fused" or "unfused"
  Roof roof;
  double total_flops = 0;       // graph_flops of the executable's graph
  double kernel_flops = 0;      // summed over kernels (recomputation included)
  int64_t total_dram_bytes = 0;
  double kernel_ms = 0;         // kernel medians summed
  double model_ms = 0;          // median wall time of a whole run
  // The fusion cost model's estimate of the kernels (estimate_time on this roof, one launch per
  // kernel): how far the model the partitioner decides with is from the measurement.
  double estimated_ms = 0;
  // The same estimate with the calibrated factors (kiln calibrate; tune/cost_calibration.h), and the
  // samples they were fitted from; 0 when this machine is not calibrated.
  double calibrated_ms = 0;
  int calibration_samples = 0;
  int runs = 0, undisturbed_runs = 0;
  std::vector<KernelRoofline> kernels;  // sorted by time, longest first
  // Share of kernel time in memory-/compute-bound kernels, and their time-weighted percent of
  // roof (= 100 × time the roof allows / time taken, over that class's kernels).
  double memory_time_share = 0, compute_time_share = 0;
  double memory_percent_of_roof = 0, compute_percent_of_roof = 0;
};

// The report for `ex` from its per-group median times (plan order, as TimedRuns::kernel_medians).
// With `calibration` (per-class factors fitted for this machine and thread count, and how many
// samples they come from), each kernel's estimate and the calibrated total use them.
struct Calibration {
  std::map<std::string, ClassEfficiency> efficiency;
  int samples = 0;
};
RooflineReport roofline(const runtime::Executable& ex, const std::vector<double>& group_median_ms,
                        const Roof& roof, std::string label, const Calibration& calibration = {});

// JSON: {machine: {...}, total_flops, ..., kernels: [...]} for the fused report, with the unfused
// one (when given) as "unfused": {the same keys but machine}.
std::string roofline_json(const RooflineReport& fused, const RooflineReport* unfused, const MachineModel& m);

// A log-log roofline plot (SVG 1.1, self-contained): both roofs, one dot per kernel (fused and
// unfused in two colours), labelled axes, a legend.
std::string roofline_svg(const RooflineReport& fused, const RooflineReport* unfused);
// A self-contained HTML page: the plot inline, the summary, and each report's table.
std::string roofline_html(const std::string& model, const RooflineReport& fused, const RooflineReport* unfused,
                          const MachineModel& m);
// The text table (sorted by time share) and summary lines.
std::string roofline_table(const RooflineReport& r);

}  // namespace kiln::analysis
