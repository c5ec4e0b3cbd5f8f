// Target: what the fusion engine and (later) code generators know about the machine. Fusion limits
// come from here, never from global constants.
//
// The numbers below are a *description* of a machine class, not a measurement: the roofline issue
// adds a probe that measures peak FLOP/s and bandwidth and overrides them. Kernel counts depend on
// the target (register limits), so they are reported for the default target, which is fixed (not
// detected from the host) so that the same model gives the same plan on every machine.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct Target {
  std::string name;
  int vector_lanes_f32 = 16;      // float32 lanes per SIMD register
  int vector_registers = 32;      // architectural SIMD registers
  // Registers a contraction micro-kernel keeps live (accumulators + operand loads): an AVX-512
  // 6x32 float tile is 12 accumulators + 2 B loads + 1 broadcast.
  int contraction_tile_registers = 15;
  int64_t l1_bytes = 32 * 1024;
  int64_t l2_bytes = 1024 * 1024;
  int max_kernel_args = 64;       // buffers one kernel may take (C: pointer array; GPUs: param space)
  int threads = 2;
  double peak_gflops = 150.0;     // float32, all threads
  double dram_gbps = 20.0;
  double launch_overhead_us = 2.0;  // per kernel: thread-pool dispatch and barrier on a CPU

  // Bytes of intermediate rows a fused kernel may keep on chip (rule 6: attention rows, row
  // reductions after a contraction): half of L2, leaving room for operand tiles.
  int64_t onchip_budget_bytes() const { return l2_bytes / 2; }

  static Target default_target();  // "x86-avx512"
  // "x86-avx512", "x86-avx2"; nullopt for unknown names.
  static std::optional<Target> by_name(const std::string& name);
  static std::vector<std::string> names();
};

}  // namespace kiln
