#include "analysis/native_target.h"

#include <algorithm>

namespace kiln::analysis {

Target native_target(const MachineModel& m) {
  Target t = *Target::by_name(m.isa == "avx512" ? "x86-avx512" : "x86-avx2");
  t.name = "native";
  const int threads = std::max(1, m.threads);
  t.threads = threads;
  if (m.peak_gflops_nt > 0) t.peak_gflops = m.peak_gflops_nt;
  // Kernels stream their operands: the triad figure (reads and writes) is the DRAM roof.
  if (m.dram_nt.triad_gbps > 0) t.dram_gbps = m.dram_nt.triad_gbps;
  if (m.l1d_bytes > 0) t.l1_bytes = m.l1d_bytes;
  if (m.l2_bytes > 0) t.l2_bytes = m.l2_bytes;
  return t;
}

}  // namespace kiln::analysis
