// Lowering of one fusion group to one loop nest (loop fusion): the consumer's loop absorbs its
// producers' computations. Covered so far: elementwise/broadcast/injective groups (including
// views). Groups with reductions, contractions or opaque ops are not lowered yet: the runtime runs
// them with library kernels (the reference kernels) and `kiln explain` / `--check` say so.
#pragma once
#include <optional>
#include <string>

#include "fusion/fusion_plan.h"
#include "loop/loop_ir.h"
#include "loop/schedule.h"

namespace kiln::loop {

struct LoweredGroup {
  std::optional<LoopKernel> kernel;  // set when the group could be lowered
  std::string reason;                // why not, otherwise (one line, for explain/--check)
};

// Lowers `grp` (from a FusionPlan of `g`) to a kernel named `name` (a sanitised C identifier).
// Kernel inputs are grp.inputs in order, outputs grp.outputs in order; constants are inputs too.
// `sched` carries the performance parameters (tile sizes, vector width); the defaults suit the
// default target.
LoweredGroup lower_group(const FusionGroup& grp, const std::string& name, const Schedule& sched = Schedule{});

// A C identifier derived from any string (model names are untrusted): [A-Za-z0-9_], not starting
// with a digit, never empty.
std::string sanitize_identifier(const std::string& s);

}  // namespace kiln::loop
