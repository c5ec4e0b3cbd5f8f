// Timing a compiled model run by run and kernel by kernel: the loop `kiln bench` and
// `kiln roofline` share, so both report the same medians under the same rules.
//
// Runs go through Executable::run_into on buffers allocated once (a kernel is not timed faulting
// in fresh output pages). With per-kernel timing on, a kernel's samples are those of the runs
// during which no thread of this process was preempted (no involuntary context switch), when at
// least 3 runs were clean; on a machine busy with other work the others time that work too.
// Otherwise every run is kept (TimedRuns::undisturbed_runs says how many were clean).
#pragma once
#include <string>
#include <vector>

#include "runtime/executable.h"

namespace kiln::analysis {

// Inputs and outputs as caller buffers allocated once, in the graph's input/output order.
struct CallerBuffers {
  CallerBuffers(const runtime::Executable& ex, const TensorMap& inputs);
  void run(runtime::Executable& ex) { ex.run_into(in, out); }
  std::vector<const void*> in;
  std::vector<Tensor> outs;
  std::vector<void*> out;
};

// Median of `v` (0 when empty; the mean of the middle two for an even count).
double median(std::vector<double> v);

// "NAME=FILE.npy" specs (--input) read into tensors; UserError on a malformed spec.
TensorMap read_input_specs(const std::vector<std::string>& specs);
// `given` plus fixed-seed values for every graph input it lacks: uniform in [-1, 1) for floats,
// small non-negative integers (0..3) for integer types, so index inputs stay in range.
TensorMap fill_inputs(const Graph& g, TensorMap given);

struct TimedRuns {
  std::vector<double> run_ms;                  // whole-model wall time of each timed run
  std::vector<std::vector<double>> kernel_ms;  // per plan group: the samples kept (see above)
  int undisturbed_runs = 0;
  bool kernels_from_undisturbed = false;       // kernel_ms holds only the clean runs' samples
  // Per plan group, the median of its kept samples (ms).
  std::vector<double> kernel_medians() const;
};

// `warmup` untimed runs, then `runs` timed ones; per-kernel times (profiling switched on for the
// duration) when `per_kernel`.
TimedRuns time_runs(runtime::Executable& ex, const TensorMap& inputs, int runs, int warmup, bool per_kernel);

}  // namespace kiln::analysis
