// Lowering of contraction-anchored groups (MatMul, Conv with prologue and epilogue) to loop nests.
#include "loop/lower_internal.h"

namespace kiln::loop::detail {

LoweredGroup lower_contraction_group(const FusionGroup& grp, const std::string& kernel_name) {
  LoweredGroup r;
  r.reason = "contractions are not lowered to loops yet";
  return r;
}

}  // namespace kiln::loop::detail
