// kiln tune's search: for every distinct kernel of a model (by tune::kernel_signature), a budgeted
// coordinate descent over its search space (tune/search_space.h), starting from the default
// schedule; every point the lowering accepts and whose generated C differs from the points already
// tried is measured (tune/measurer.h) against the incumbent in the same batch, and taken when it
// beats it by TuneOptions::min_gain. When a full pass over its fields improves nothing, a (1+8)
// evolution strategy tries batches of random points that change two or three fields of the best at
// once (a win restarts the descent from it); a kernel stops after three such batches without a win
// or when its share of the budget is spent; a final batch of the default and the best,
// interleaved, gives the times a record keeps.
//
// The budget is split over the kernels still to tune in proportion to their default time (times
// their instance count), recomputed as each kernel starts so that what a converged kernel leaves
// goes to the others; the heaviest kernels go first. A batch is only started when its predicted
// cost (the last batch's, per candidate) fits the kernel's share. When the measurer runs N
// requests at once (Measurer::parallelism, e.g. a Ray cluster of N machines), N kernels are
// searched side by side and each round's batches go to Measurer::measure_all together; with
// N = 1 (LocalMeasurer) the search is one kernel after the other.
//
// The schedule model (tune/schedule_model.h) filters the candidates: fitted on every point this
// tune has measured (and the records of this model's kernels from earlier tunes), it ranks a
// batch's proposed points before they are compiled; a descent batch of more than three new values
// measures the model's best two and one random other, a mutant batch is chosen from six times
// as many proposed mutants (the best six and two random ones). Points not measured may be proposed
// again later. Until the model has ScheduleModel::kMinSamples samples every proposed point is
// measured, as with TuneOptions::filter off.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "tune/cost_calibration.h"
#include "tune/measurer.h"
#include "tune/records.h"

namespace kiln::tune {

// "10m", "90s", "1h", "1m30s" or plain seconds ("45"); UserError otherwise (also for 0).
double parse_budget(const std::string& text);

struct TuneOptions {
  double budget_s = 600;
  runtime::BuildOptions build;  // threads, target, compiler, numerics; kernel_schedules is ignored
  TimingProtocol protocol;
  double min_gain = 0.03;       // a candidate must beat the incumbent by this fraction (noise)
  std::function<void(const std::string&)> progress;  // one line per step, for a progress display
  bool filter = true;           // rank candidates with the schedule model, measure its best (above)
  // A batch's candidates are split over this many C sources, compiled by as many compiler
  // processes at once (runtime::JitModule::build_all); 0: one per hardware thread.
  int compile_jobs = 0;
  // Each batch as it is sent: its candidates' kernel names in the request and their schedules.
  // A log; and how a test's fake measurer knows the schedule of what it "times".
  std::function<void(const std::vector<std::string>& kernels, const std::vector<loop::Schedule>& schedules)> on_batch;
};

struct KernelResult {
  std::string signature, name, ops, emitter;  // name: the first instance's kernel name
  int instances = 0;
  double default_ms = 0, tuned_ms = 0;        // per call, from the confirming batch (or the record)
  int trials = 0;                             // points measured (the incumbents of the batches not counted)
  int proposed = 0;                           // points proposed (lowered, distinct); trials of them measured
  int mutants = 0;                            // of the trials: evolution-strategy points (several fields)
  bool improved = false;
  bool from_records = false;                  // already recorded: not searched again
  std::string note;                           // why it was not searched (budget spent, ...)
  std::map<std::string, int64_t> changed;     // fields that differ from the default schedule
};

struct TuneReport {
  std::vector<KernelResult> kernels;  // distinct kernels, heaviest first
  double search_s = 0;                // wall time of the search (what the budget limits)
  double compile_s = 0;               // of which the measurer compiled (summed over batches)
  size_t model_samples = 0;           // the schedule model's samples at the end
  MachineKey machine;
  // The default build's kernels as cost-model samples (tune/cost_calibration.h; `model` left empty
  // for the caller): the profile the budget was weighted by, kept to calibrate the cost model.
  std::vector<CostSample> samples;
};

// Tunes `g` (simplified and lowered) on `inputs` (every graph input). `records` are the records
// read so far (kernels recorded for this machine and target are skipped); each finished kernel's
// record is upserted into it and `save` is called with the whole list, so an interrupted run
// keeps what it finished.
TuneReport tune_model(const Graph& g, const TensorMap& inputs, const TuneOptions& opts, Measurer& measurer,
                      std::vector<Record>& records, const std::function<void(const std::vector<Record>&)>& save);

}  // namespace kiln::tune
