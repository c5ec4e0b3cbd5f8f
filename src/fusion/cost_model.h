// The one cost struct shared by fusion, (later) the tuner and `kiln roofline` (after XLA's
// EstimateRunTimeData): FLOPs, bytes moved, and the roofline time estimate
//     time = max(flops / peak, bytes / bandwidth) + launch overhead.
// FLOP convention: a multiply-add is 2 FLOPs; every other arithmetic op on one element is 1
// (node_flops in cost_model.cc has the rules per op kind; docs/roofline.md states them).
#pragma once
#include <cstdint>

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
  double total_us() const { return (compute_us > memory_us ? compute_us : memory_us) + launch_us + recompute_us; }
};

// Fills the time fields from flops/bytes for `kernels` kernel launches on `t`.
CostEstimate estimate_time(double flops, int64_t bytes_read, int64_t bytes_written, int kernels, const Target& t);

// Arithmetic FLOPs of one node (0 for pure data movement).
double node_flops(const Node& n);

// Bytes of a value's tensor.
int64_t value_bytes(const Value* v);

}  // namespace kiln
