// The stable identity of a fusion group for the tuner: what the kernel computes and on what, not
// where it sits in a plan. Kernel names (fused_conv_add_relu_12) carry the group's index, which
// changes when anything before it does; a tuned schedule must follow the kernel, so records and
// per-kernel schedule overrides (runtime::BuildOptions::kernel_schedules) are keyed by this.
#pragma once
#include <string>

#include "fusion/fusion_plan.h"

namespace kiln::tune {

// "<op types joined by _>-<16 hex digits>": the digits hash, in the group's node order, every
// node's op type, domain and attributes (values included), how its inputs are wired (a group input
// by position, or node j's output k), and every group input's and output's dtype and shape; a
// constant input also hashes its values when it is small (a scalar the lowering may inline), only
// its type otherwise (a weight's values do not change the nest). Value and node names are not
// hashed. Two groups with the same signature lower to the same nest under the same schedule.
std::string kernel_signature(const FusionGroup& grp);

}  // namespace kiln::tune
