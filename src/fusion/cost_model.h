// The one cost struct shared by fusion, (later) the tuner and `kiln roofline` (after XLA's
// EstimateRunTimeData): FLOPs, bytes moved, and the roofline time estimate
//     time = max(flops / peak, bytes / bandwidth) + launch overhead.
// FLOP convention: a multiply-add is 2 FLOPs; every other arithmetic op on one element is 1
// (node_flops in cost_model.cc has the rules per op kind; docs/roofline.md states them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fusion/target.h"
#include "ir/graph.h"

namespace kiln {

struct CostEstimate {
  double flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double compute_us = 0, memory_us = 0, launch_us = 0;
  // Time spent recomputing values fused into several places (prologues, broadcasts). It is added
  // rather than overlapped with memory time: a kernel that recomputes is never cheaper than one
  // that does the same work once, so an epilogue fusion wins over an equal prologue fusion.
  double recompute_us = 0;
  std::string cost_class;  // cost_class() of the kernel's nodes ("" for a view)
  double total_us() const { return (compute_us > memory_us ? compute_us : memory_us) + launch_us + recompute_us; }
};

// Fills the time fields from flops/bytes for `kernels` kernel launches on `t`; a kernel of class
// `cls` on a calibrated target (Target::efficiency) is priced with that class's factors.
CostEstimate estimate_time(double flops, int64_t bytes_read, int64_t bytes_written, int kernels, const Target& t,
                           const std::string& cls = "");
// The factors `t` prices class `cls` with: its own, else "all", else the plain roofline (compute 1,
// memory 1, the target's launch overhead).
ClassEfficiency class_efficiency(const Target& t, const std::string& cls);
// Same, from an estimate's own flops, bytes and class: the estimate re-priced on another target.
CostEstimate estimate_time(const CostEstimate& c, int kernels, const Target& t);

// The kernel class the calibration fits factors for, from the kernel's nodes: "conv" (one-group
// Conv, ConvTranspose), "grouped_conv" (depthwise and other grouped convs: stencils, not GEMMs),
// "matmul" (MatMul, Gemm), then, for kernels without a contraction, "pool" (windowed pools),
// "reduction", "elementwise" (arithmetic), "movement" (no arithmetic: copies, transposes, gathers).
// Content, not the emitter, decides, so the partitioner can price a candidate before the analysis
// has picked one.
std::string cost_class(const std::vector<const Node*>& nodes);

// Arithmetic FLOPs of one node (0 for pure data movement).
double node_flops(const Node& n);

// Bytes of a value's tensor.
int64_t value_bytes(const Value* v);

}  // namespace kiln
