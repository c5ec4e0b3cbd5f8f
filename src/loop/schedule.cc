#include "loop/schedule.h"

#include <algorithm>

namespace kiln::loop {

Schedule Schedule::for_target(const Target& t) {
  Schedule s;
  s.vector_width = std::max(1, t.vector_lanes_f32);
  // Two vectors of columns; as many rows as the registers left after the operands hold, at most 8
  // (AVX-512: 16 zmm accumulators, an 8 × 32 tile; AVX2: 6 × 16). Eight rows divide the
  // power-of-two channel and row counts of real models, so no remainder tiles: ResNet-18 on one
  // thread 36.6 ms with 6 × 32, 26.7 ms with 8 × 32. (The partitioner's register model keeps
  // Target::contraction_accumulators, a conservative 12, for its fusion decisions.)
  s.contraction.nr = 2 * s.vector_width;
  s.contraction.mr = std::clamp((t.vector_registers - t.contraction_operand_registers) / 2, 1, 8);
  s.contraction.accumulator_registers = std::max(1, t.vector_registers - t.contraction_operand_registers);
  s.threads = t.threads;
  s.chain.max_stream_bytes = t.l2_bytes;
  if (t.l2_bytes > 0) s.contraction.a_reuse_bytes = t.l2_bytes / 2;
  if (t.l2_bytes > 0) s.contraction.window_channel_rows_plane_bytes = 16 * t.l2_bytes;
  if (t.l2_bytes > 0) s.contraction.implicit_whole_k_bytes = t.l2_bytes / 4;
  if (t.l2_bytes > 0) s.contraction.gemm_whole_k_bytes = t.l2_bytes / 4;
  if (t.l2_bytes > 0) s.stencil_bytes = t.l2_bytes * 2;  // schedule.h: stencil_bytes
  // A GPU keeps a block's rows in shared memory: that is the on-chip budget of a chain's tile.
  if (t.shared_memory_bytes > 0) s.chain.max_local_bytes = t.shared_memory_bytes;
  return s;
}

}  // namespace kiln::loop
