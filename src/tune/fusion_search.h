// kiln tune's fusion decisions (issue 12): where the cost model's benefit for a fusion the
// partitioner made was close to nothing, measure the plan with that fusion and without it, and keep
// the faster one — what Inductor's benchmark_fusion does for epilogues, for every kind of fusion
// kiln makes.
//
// A decision is the partitioner's log entry (FusionPlan::accepted): the two sides' first nodes and
// the estimate apart and its benefit. Close: benefit < FusionSearchOptions::close × apart (views,
// which ride along for a token benefit, are not decisions; nor are pairs whose nodes share a name
// with another node, since records name them). Heaviest first (by the estimate
// apart), each close decision is tried in turn on top of the ones already kept apart: the model is
// built again with the pair in FusionOptions::keep_apart (the partitioner then re-plans around it,
// which may change neighbouring kernels too), both builds are profiled in interleaved rounds, and
// the kernels that differ between the two plans are compared — the fused side's kernels against
// the apart side's, summed medians, so an unrelated kernel's noise does not decide. Apart wins
// when it is faster by min_gain; the pair then stays apart for the next trials. A decision equal to
// one measured already (AcceptedFusion::shape_key: the same ops and shapes on both sides, as in the
// repeated blocks of a stage) takes that one's result without a measurement of its own.
//
// Results become records (emitter "fusion", tune/records.h) keyed by the graph's fingerprint and
// the pair: `kiln run/bench/compile` keep the improved pairs apart (cli use_tuned_records), and a
// second `kiln tune` does not measure a recorded decision again.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "tune/records.h"

namespace kiln::tune {

struct FusionSearchOptions {
  double budget_s = 60;
  double close = 0.2;       // relative benefit below which a fusion is measured
  double min_gain = 0.03;   // apart must beat fused by this fraction
  int rounds = 3;           // interleaved profiling rounds per build
  int runs = 5;             // runs per round
  runtime::BuildOptions build;  // threads, target, numerics; fusion.keep_apart is the starting set
  std::function<void(const std::string&)> progress;
};

struct FusionTrial {
  AcceptedFusion fusion;            // the decision as the default plan made it
  bool measured = false;
  bool apart = false;               // apart was faster: kept apart
  bool from_records = false;        // decided by an earlier kiln tune
  std::string same_as;              // decided by the measured trial of the same decision elsewhere
  double fused_ms = 0, apart_ms = 0;  // the differing kernels, summed medians
  int kernels_fused = 0, kernels_apart = 0;  // how many kernels differ on each side
  std::string note;                 // why it was not measured
};

struct FusionSearchReport {
  std::string graph;                // graph_fingerprint of the searched graph
  std::vector<FusionTrial> trials;  // the close decisions, heaviest first
  std::vector<std::pair<std::string, std::string>> keep_apart;  // the pairs kept apart at the end
  double search_s = 0;
};

// Searches `g` (simplified and lowered) on `inputs`. `records` (this machine's, any target) are
// consulted for decisions already measured; the caller turns the report into records with
// fusion_records.
FusionSearchReport search_fusions(const Graph& g, const TensorMap& inputs, const FusionSearchOptions& opts,
                                  const std::vector<Record>& records);

// The measured trials as records of `machine` and `target`.
std::vector<Record> fusion_records(const FusionSearchReport& rep, const MachineKey& machine, const std::string& target);

// The keep-apart pairs of `records` for `machine` and `target`, by graph: what
// FusionOptions::keep_apart takes.
std::map<std::string, std::vector<std::pair<std::string, std::string>>> keep_apart_pairs(
    const std::vector<Record>& records, const MachineKey& machine, const std::string& target);

}  // namespace kiln::tune
