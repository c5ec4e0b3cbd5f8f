// kiln tune's schedule-aware cost model: predicts, for one kernel, how much faster or slower a
// schedule runs than the kernel's default schedule, from features of the (kernel, schedule) pair,
// learned from what the tuner has measured. The tuner uses it as a filter (as Ansor and
// MetaSchedule do): it proposes more candidates than it measures and measures the model's best
// ones plus a few random ones (exploration, so that a wrong model cannot starve the search).
//
// Why a separate model: the roofline (fusion/cost_model.h, calibrated by tune/cost_calibration.h)
// prices a kernel by its FLOPs and bytes, which no schedule changes; it sees every schedule of a
// kernel alike and cannot rank them.
//
// Features: schedule_features gives the raw φ(kernel, schedule): the schedule fields the search
// space varies, on a log2 scale and, for cache budgets, relative to the target's L1/L2 (the
// micro-kernel tile mr × nr/vw, its register use, kc and whether the packed kc × nr and mr × kc
// panels fit L1, the A-reuse, rows, stencil and chain budgets over L2, the channel-rows
// thresholds, unroll), and what the lowering made of the schedule: whether the nest runs a
// parallel loop, that loop's extent and the imbalance of its split over the threads
// (ceil(E/T)·T/E − 1), serial execution × log2 FLOPs (a big kernel left serial loses), the number
// of loops and micro-kernel calls (code size). The model reads relative_features: φ(s) − φ(default)
// — the default is the origin — and the squares of the main differences (mr, nr, kc, the L2
// budgets, unroll), so that an optimum inside a field's range is a bowl the linear fit can
// represent; centred on the default (hand-tuned, usually near the optimum) the bowl needs small
// coefficients, which the ridge penalty leaves alone.
//
// Fit (ScheduleModel::fit): ridge regression of y = ln(time / default time) on x, without an
// intercept (the default predicts exactly 0), columns scaled to unit weighted RMS, samples
// weighted (the kernel being searched 1, other kernels' and records' samples less: their
// responses to a field resemble this kernel's but are not the same), solved by Cholesky, the
// penalty chosen by closed-form leave-one-out error. Small, exact and dependency-free; the sample
// counts are tens to hundreds.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fusion/target.h"
#include "loop/loop_ir.h"
#include "loop/schedule.h"

namespace kiln::tune {

// What the features use of a kernel besides its schedule (FusionGroup::cost).
struct KernelTraits {
  double flops = 0;
  double bytes = 0;
};

// The raw φ(kernel, schedule) on `t` with `threads` threads; `lowered` is the kernel's nest under
// `s` (nullptr: the nest features are 0).
std::vector<double> schedule_features(const KernelTraits& k, const loop::Schedule& s, const loop::LoopKernel* lowered,
                                      const Target& t, int threads);
// What the model reads: `raw` relative to its kernel's default's, with the squared differences.
std::vector<double> relative_features(const std::vector<double>& raw, const std::vector<double>& raw_default);
// The names of relative_features' values, in order.
const std::vector<std::string>& feature_names();

class ScheduleModel {
 public:
  // A fit needs this many samples (of any kernel); fewer and the tuner measures unfiltered.
  static constexpr size_t kMinSamples = 12;

  // One measured point: features relative to its kernel's default (x), ln(time / default time) (y),
  // the kernel it belongs to (the tuner's index; records of earlier tunes use theirs).
  void add(std::vector<double> x, double y, int kernel);
  size_t size() const { return samples_.size(); }

  // Fits on every sample, those of `kernel` at weight 1 and the others' at `others_weight`.
  // False (and not fitted) with fewer than kMinSamples samples.
  bool fit(int kernel, double others_weight = 0.3);
  bool fitted() const { return fitted_; }
  // Predicted ln(time / default time) of a point with features x (0 before a fit).
  double predict(const std::vector<double>& x) const;
  const std::vector<double>& weights() const { return beta_; }
  double lambda_share() const { return lambda_share_; }  // the penalty the last fit chose, per unit weight

 private:
  struct Sample {
    std::vector<double> x;
    double y;
    int kernel;
  };
  std::vector<Sample> samples_;
  std::vector<double> beta_;  // per feature, in the features' own units
  bool fitted_ = false;
  double lambda_share_ = 0;
};

// The filter's choice among `predicted` (ln time ratios, lower is faster): the `keep - explore`
// best, then `explore` picked at random among the rest; ascending indices. All of them when there
// are no more than `keep`.
std::vector<size_t> pick_candidates(const std::vector<double>& predicted, size_t keep, size_t explore,
                                    std::mt19937_64& rng);

}  // namespace kiln::tune
