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
    t.contraction_tile_registers = 15;  // 6x16 tile: 12 accumulators + 2 B loads + 1 broadcast
    t.peak_gflops = 75.0;
    return t;
  }
  return std::nullopt;
}

std::vector<std::string> Target::names() { return {"x86-avx512", "x86-avx2"}; }

}  // namespace kiln
