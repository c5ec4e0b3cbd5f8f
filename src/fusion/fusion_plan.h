// The result of fusion: groups of primitive nodes, each a future kernel, with the reasons for every
// fusion that was considered and refused.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusion/cost_model.h"
#include "fusion/op_kind.h"
#include "fusion/target.h"
#include "ir/graph.h"
#include "loop/schedule.h"

namespace kiln {

// Empty = "may fuse"; otherwise the reason a user reads in `kiln explain` (after XLA).
class FusionDecision {
 public:
  static FusionDecision yes() { return FusionDecision(""); }
  static FusionDecision no(std::string why) { return FusionDecision(std::move(why)); }
  bool ok() const { return reason_.empty(); }
  const std::string& reason() const { return reason_; }

 private:
  explicit FusionDecision(std::string r) : reason_(std::move(r)) {}
  std::string reason_;
};

// What shapes a group's loop nest.
enum class GroupKind { View, Elementwise, Reduction, Contraction, Opaque };
const char* group_kind_name(GroupKind k);

struct FusionGroup {
  std::string name;                   // fused_conv_add_relu_7: ops in order, then the group's index
  GroupKind kind = GroupKind::Elementwise;
  std::vector<const Node*> nodes;     // topological order; a node may appear in several groups (recomputed)
  std::vector<const Value*> inputs;   // tensors the kernel reads from memory (incl. weights)
  std::vector<const Value*> outputs;  // tensors it writes to memory
  CostEstimate cost;
  // The one analysis's answer for this group (loop::analyze_group): the emitter that builds it, or,
  // for an op with no loop spelling (a ReduceSum of undecided run-time axes, ...), why it runs alone
  // as a library kernel. A library kernel is always a single node: the partitioner never fuses
  // anything with it.
  std::string emitter;
  std::vector<std::string> placements;  // per node: root, inline, tile, row (loop/lower_group.cc)
  std::string library_reason;
  // A Concat built in place (fusion/concat_in_place.h): kind View, no kernel and no copy; the memory
  // plan puts its parts inside its slot, where their producers write them.
  bool in_place_concat = false;
  bool counts_as_kernel() const { return kind != GroupKind::View; }
  bool is_library() const { return !library_reason.empty(); }
};

struct Rejection {
  std::string producer, consumer;  // ONNX node names
  std::string reason;
};

// A fusion the partitioner made: the first real node of each side (views skipped) and the cost
// model's figures for it. kiln tune measures the close ones fused and apart (tune/fusion_search.h).
struct AcceptedFusion {
  std::string a, b;         // ONNX node names: producer side (or first sibling), consumer side
  std::string mode;         // "merge", "recompute", "siblings"
  double apart_us = 0;      // the estimate of the two kernels before the fusion
  double benefit_us = 0;    // apart minus fused
  // The two sides' first nodes by op type and operand shapes (no names): decisions with equal keys
  // are the same decision in another place of the model (the blocks of a ResNet stage), measured once.
  std::string shape_key;
};

struct FusionOptions {
  Target target = Target::default_target();
  bool enabled = true;   // false: one kernel per primitive op (--no-fusion, the ablation baseline)
  int64_t fuel = -1;     // stop after this many accepted fusions (-1: unlimited; --fusion-fuel)
  // The loop-nest parameters code generation will use; legality asks the lowering under exactly
  // these (unset: loop::Schedule::for_target(target)). Executable::build passes its own.
  std::optional<loop::Schedule> schedule;
  // Pairs of nodes (ONNX names) that must end up in different kernels, per graph (graph_fingerprint
  // of the graph partition() is given): kiln tune's fusion records, where a fusion measured slower
  // than its parts apart. Refusals name the record.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> keep_apart;
  loop::Schedule schedule_or_default() const { return schedule ? *schedule : loop::Schedule::for_target(target); }
};

struct FusionPlan {
  std::vector<FusionGroup> groups;  // in a valid execution order
  std::vector<Rejection> rejected;
  int64_t accepted_fusions = 0;
  std::vector<AcceptedFusion> accepted;  // in the order they were made
  Target target;
  // Bytes of intermediate tensors (not graph inputs, outputs or weights) written to memory, with one
  // kernel per op vs with this plan; and the cost model's time for both.
  int64_t intermediate_bytes_unfused = 0, intermediate_bytes_fused = 0;
  double est_us_unfused = 0, est_us_fused = 0;
  // Kernel launches per inference with one kernel per op (pure views launch nothing).
  int kernels_unfused = 0;
  // The one analysis: how often the partitioner asked it, how often the cache answered, and the
  // time spent in it (for --time-passes and the 24-layer-encoder figure in docs/fusion.md).
  int64_t analysis_calls = 0, analysis_cache_hits = 0;
  double analysis_ms = 0;
  int kernel_count() const;
  int library_kernel_count() const;
};

}  // namespace kiln
