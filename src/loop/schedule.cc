#include "loop/schedule.h"

#include <algorithm>

namespace kiln::loop {

Schedule Schedule::for_target(const Target& t) {
  Schedule s;
  s.vector_width = std::max(1, t.vector_lanes_f32);
  // Two vectors of columns; rows fill the accumulator registers the target reserves
  // (AVX-512: 12 zmm → 6 × 32; AVX2: 12 ymm → 6 × 16).
  s.contraction.nr = 2 * s.vector_width;
  s.contraction.mr = std::max(1, t.contraction_accumulators / 2);
  s.threads = t.threads;
  return s;
}

}  // namespace kiln::loop
