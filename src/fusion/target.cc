#include "fusion/target.h"

namespace kiln {

Target Target::default_target() { return *by_name("x86-avx512"); }

std::optional<Target> Target::by_name(const std::string& name) {
  Target t;
  t.name = name;
  if (name == "x86-avx512") return t;  // the defaults in target.h describe this class
  if (name == "x86-avx2") {
    t.vector_lanes_f32 = 8;
    t.vector_registers = 16;
    // 6x16 tile: 12 ymm accumulators + 2 B loads + 1 broadcast, as on AVX-512 but half as wide.
    t.peak_gflops = 75.0;
    return t;
  }
  if (name == "cuda-sm80") {
    // Per thread: 255 registers, an 8x8 accumulator tile plus operand fragments. Per block: 48 KiB
    // of shared memory without opting in to more. A100-class throughput and launch cost.
    t.vector_lanes_f32 = 1;
    t.vector_registers = 255;
    t.contraction_accumulators = 64;  // an 8x8 tile per thread
    t.contraction_operand_registers = 16;
    t.l1_bytes = 192 * 1024;
    t.l2_bytes = 40 * 1024 * 1024;
    t.shared_memory_bytes = 48 * 1024;
    t.max_kernel_args = 256;  // 4 KiB of kernel parameters, 16 bytes per buffer
    t.threads = 108 * 2048;
    t.peak_gflops = 19500.0;
    t.dram_gbps = 1555.0;
    t.launch_overhead_us = 5.0;
    return t;
  }
  return std::nullopt;
}

std::vector<std::string> Target::names() { return {"x86-avx512", "x86-avx2", "cuda-sm80"}; }

}  // namespace kiln
