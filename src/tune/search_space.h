// The search space of one kernel: which Schedule fields can change its nest, and the values worth
// trying, from the kernel's emitter and ops and the target's registers and caches. The space is a
// superset: a value may still be refused by the lowering (the tuner asks loop::lower_group for
// every point) or give the same nest as another (the tuner compares the generated C and measures
// each distinct nest once).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "loop/schedule.h"

namespace kiln::tune {

struct Dimension {
  std::string field;            // tune/schedule_fields.h name
  std::vector<int64_t> values;  // ascending, the default's value included
};

// The dimensions for `grp` (a planned, generated group) whose default schedule is `dflt` on `t`.
std::vector<Dimension> search_space(const FusionGroup& grp, const loop::Schedule& dflt, const Target& t);

// Whether `s` fits the target's registers: the micro-kernel's mr × nr accumulators plus its
// operand registers, and nr a multiple of the vector width up to the widest specialisation (64).
bool fits_registers(const loop::Schedule& s, const Target& t);

}  // namespace kiln::tune
