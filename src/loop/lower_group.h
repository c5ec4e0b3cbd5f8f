// Lowering of one fusion group to one loop nest (loop fusion): the consumer's loop absorbs its
// producers' computations. Four emitters build the nests: elementwise/injective groups
// (lower_group.cc), row kernels and pools (lower_reduction.cc, lower_pool.cc), one contraction with
// its prologue, epilogue and row passes (lower_contraction*.cc), and several contractions
// (siblings and chains, lower_contraction_siblings.cc / lower_contraction_chain.cc).
//
// The same entry point is the fusion partitioner's legality (analyze_group): whether a set of ops
// may be one kernel is answered by the code that would build it, run in check-only mode, so fusion
// and code generation cannot disagree (XLA's CanFuse asks the emitter's fusion analysis; TVM's
// CanComputeInline is the inline transform run with check_only). A group the analysis refuses is
// never planned; a planned group whose lowering fails later is a compiler bug.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "loop/loop_ir.h"
#include "loop/schedule.h"

namespace kiln::loop {

struct LoweredGroup {
  std::optional<LoopKernel> kernel;  // set when the group could be lowered
  std::string reason;                // why not, otherwise (one line, for explain/--check)
  std::string emitter;               // which emitter built it (see emitter names in lower_group.cc)
  std::vector<std::string> placements;  // per grp.nodes: root, inline, tile or row (lower_group.cc)
};

// The one analysis: can `grp` be one generated kernel under `sched`, and which emitter builds it?
// It is lower_group run for its answer (the kernel is built and dropped), so the answer is exactly
// what code generation will do. Pure: depends only on the group's nodes, inputs, outputs and the
// schedule, never on the group's name.
struct KernelAnalysis {
  bool ok = false;
  std::string reason;   // why not (when !ok): the FusionDecision text kiln explain shows
  std::string emitter;  // when ok
  std::vector<std::string> placements;
  double padding_flops = 0;  // LoopKernel::padding_flops of the kernel it builds
};
KernelAnalysis analyze_group(const FusionGroup& grp, const Schedule& sched);

// Why the recurrent emitter (lower_recurrent.cc) does not build RNN / GRU / LSTM node `n` as one
// kernel ("" when it does): transforms/decompose_recurrent unrolls exactly those.
std::string recurrent_kernel_refusal(const Node& n);

// Lowers `grp` (from a FusionPlan of `g`) to a kernel named `name` (a sanitised C identifier).
// Kernel inputs are grp.inputs in order, outputs grp.outputs in order; constants are inputs too.
// `sched` carries the performance parameters (tile sizes, vector width); the defaults suit the
// default target.
LoweredGroup lower_group(const FusionGroup& grp, const std::string& name, const Schedule& sched = Schedule{});

// A C identifier derived from any string (model names are untrusted): [A-Za-z0-9_], not starting
// with a digit, never empty.
std::string sanitize_identifier(const std::string& s);

}  // namespace kiln::loop
