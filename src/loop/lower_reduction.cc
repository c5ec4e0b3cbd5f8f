// Lowering of reduction-anchored groups (row kernels: softmax, LayerNorm; pools) to loop nests.
#include "loop/lower_internal.h"

namespace kiln::loop::detail {

LoweredGroup lower_reduction_group(const FusionGroup& grp, const std::string& kernel_name) {
  LoweredGroup r;
  r.reason = "reductions are not lowered to loops yet";
  return r;
}

}  // namespace kiln::loop::detail
