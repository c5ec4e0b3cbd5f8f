// Registration hooks shared between the tensor-op files (register_tensor_ops calls these).
#pragma once
#include "reference/op_registry.h"

namespace kiln {

// Gather-family and other index-driven kernels (index_ops.cc).
void register_index_ops(OpRegistry& r);

}  // namespace kiln
