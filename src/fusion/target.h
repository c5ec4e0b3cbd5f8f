// Target: what the fusion engine and (later) code generators know about the machine. Fusion limits
// come from here, never from global constants.
//
// The numbers below are a *description* of a machine class, not a measurement: the roofline issue
// adds a probe that measures peak FLOP/s and bandwidth and overrides them. Kernel counts depend on
// the target (register limits), so they are reported for the default target, which is fixed (not
// detected from the host) so that the same model gives the same plan on every machine.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// How far one class of kernels (fusion/cost_model.h cost_class: conv, matmul, pool, ...) runs from
// the roofline on a measured machine, fitted from timed kernels by `kiln calibrate`
// (src/tune/cost_calibration.h). The calibrated time of a kernel is
//     max(flops / (peak × compute), bytes / (bandwidth × memory)) + overhead_us.
struct ClassEfficiency {
  double compute = 1;       // fraction of the peak FLOP/s the class attains
  double memory = 1;        // fraction of DRAM bandwidth (above 1 where operands stay in cache)
  double overhead_us = 0;   // per launch (replaces Target::launch_overhead_us)
  int samples = 0;          // kernels the factors were fitted from
};

struct Target {
  std::string name;
  int vector_lanes_f32 = 16;      // float32 lanes per SIMD register
  int vector_registers = 32;      // architectural SIMD registers
  // The partitioner's register model of a contraction's micro-kernel: accumulators (12 zmm, a
  // 6x32 float tile) and, during the K loop only, operand registers (2 B loads + 1 A broadcast);
  // the epilogue runs after the K loop, when the operand registers are free again. A conservative
  // budget for fusion decisions: code generation picks its own tile from the registers
  // (loop::Schedule::for_target: 8x32 on AVX-512, 16 accumulators).
  int contraction_accumulators = 12;
  int contraction_operand_registers = 3;
  int64_t l1_bytes = 32 * 1024;
  int64_t l2_bytes = 1024 * 1024;
  int max_kernel_args = 64;       // buffers one kernel may take (C: pointer array; GPUs: param space)
  int threads = 2;
  double peak_gflops = 150.0;     // float32, all threads
  double dram_gbps = 20.0;
  double launch_overhead_us = 2.0;  // per kernel: thread-pool dispatch and barrier on a CPU

  // GPUs: shared memory per thread block (0 on CPUs, where rows live in L2). On-chip budgets of
  // fused kernels (the rows of a chain) come from it through loop::Schedule::for_target.
  int64_t shared_memory_bytes = 0;

  // Calibrated factors per cost class, "all" for classes with too few samples of their own; empty
  // (every description target, and `native` on a machine never calibrated) is the plain roofline.
  // Only `--target native` gets them: a description gives the same plan on every machine.
  std::map<std::string, ClassEfficiency> efficiency;

  static Target default_target();  // "x86-avx512"
  // "x86-avx512", "x86-avx2", "cuda-sm80", "cuda-sm90", "opencl"; nullopt for unknown names.
  static std::optional<Target> by_name(const std::string& name);
  static std::vector<std::string> names();
};

}  // namespace kiln
