// The partitioner's door to the one analysis (loop::analyze_group, lower_group.h): may this set of
// nodes be one generated kernel, and which emitter builds it? It builds the FusionGroup a member
// set would become and asks the lowering, under the schedule code generation will use, caching
// the answer per (members, outputs) so that a candidate re-evaluated after an unrelated fusion
// costs a lookup. The refusal text becomes the FusionDecision `kiln explain` shows.
#pragma once
#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/group_graph.h"
#include "loop/lower_group.h"

namespace kiln {

class CodegenAnalysis {
 public:
  CodegenAnalysis(const GroupGraph& gg, loop::Schedule sched) : gg_(gg), sched_(std::move(sched)) {}

  // The group `m` becomes when it replaces the groups `replacing`, asked of the lowering. (A value
  // that several groups compute counts as an output of each; the plan later has one of them write
  // it, so the group generated can only have fewer outputs than the one asked about.)
  const loop::KernelAnalysis& analyze(const Members& m, const std::vector<int>& replacing) {
    return analyze(gg_.as_group(m, replacing), m);
  }
  const loop::KernelAnalysis& analyze(const FusionGroup& grp, const Members& m);

  // The FusionDecision an analysis gives: yes, or the refusal kiln explain shows.
  static FusionDecision decision(const loop::KernelAnalysis& a) {
    return a.ok ? FusionDecision::yes() : FusionDecision::no("code generation refuses the fused kernel: " + a.reason);
  }

  int64_t calls() const { return calls_; }
  int64_t hits() const { return hits_; }
  double ms() const { return ms_; }

 private:
  using Key = std::pair<Members, std::vector<const Value*>>;
  const GroupGraph& gg_;
  loop::Schedule sched_;
  std::map<Key, loop::KernelAnalysis> cache_;
  int64_t calls_ = 0, hits_ = 0;
  double ms_ = 0;
};

}  // namespace kiln
