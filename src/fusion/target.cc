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
  if (name == "cuda-sm90") {
    // H100-class (SXM): the same per-thread and per-block limits as sm_80 (kiln's launches do
    // not opt in to more than 48 KiB of shared memory per block), 132 SMs, float32 throughput
    // without tensor cores, HBM3.
    Target g = *by_name("cuda-sm80");
    g.name = name;
    g.l1_bytes = 256 * 1024;
    g.l2_bytes = 50 * 1024 * 1024;
    g.threads = 132 * 2048;
    g.peak_gflops = 67000.0;
    g.dram_gbps = 3350.0;
    return g;
  }
  if (name == "opencl") {
    // A mid-range OpenCL GPU with OpenCL 1.2's full-profile minimums as its limits: 32 KiB of
    // local memory per work-group, 1 KiB of kernel parameters (kiln passes a buffer and an
    // offset, 16 bytes, per argument), and a driver's larger launch cost.
    t.vector_lanes_f32 = 1;
    t.vector_registers = 128;
    t.contraction_accumulators = 32;  // a 4x8 tile per work-item
    t.contraction_operand_registers = 12;
    t.l1_bytes = 64 * 1024;
    t.l2_bytes = 4 * 1024 * 1024;
    t.shared_memory_bytes = 32 * 1024;
    t.max_kernel_args = 63;  // 1024 bytes / 16, less the scratch buffer
    t.threads = 32 * 1024;
    t.peak_gflops = 10000.0;
    t.dram_gbps = 500.0;
    t.launch_overhead_us = 10.0;
    return t;
  }
  return std::nullopt;
}

std::vector<std::string> Target::names() { return {"x86-avx512", "x86-avx2", "cuda-sm80", "cuda-sm90", "opencl"}; }

}  // namespace kiln
