// The probed machine as a fusion Target ("native"): the cost model's peak FLOP/s, DRAM bandwidth,
// cache sizes and thread count come from `kiln probe` instead of a target description; register
// counts and vector width from the description of the probed ISA (x86-avx512 or x86-avx2).
//
// The default target stays the fixed x86-avx512 description, so a model gives the same plan on
// every machine (kernel counts are tested against it); `--target native` plans for this machine,
// and `kiln explain` / `kiln roofline` show the cost model's estimates on the probed machine
// next to the description's or the measurement.
#pragma once
#include "analysis/machine_probe.h"
#include "fusion/target.h"

namespace kiln::analysis {

Target native_target(const MachineModel& m);

}  // namespace kiln::analysis
