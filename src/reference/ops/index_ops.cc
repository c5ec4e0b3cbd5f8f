// Registration of the indexing and generator ops. The kernels live in index_gather.cc,
// index_scatter.cc, index_resize.cc, index_grid_sample.cc and index_generators.cc; register_tensor_ops calls this.
#include "reference/ops/index_internal.h"
#include "reference/ops/tensor_internal.h"

namespace kiln {

void register_index_ops(OpRegistry& r) {
  register_gather_ops(r);
  register_scatter_ops(r);
  register_resize_ops(r);
  register_grid_sample_ops(r);
  register_generator_ops(r);
}

namespace index_detail {

std::vector<int64_t> read_indices(const Tensor& t, const char* what) {
  if (t.dtype() != DType::Int32 && t.dtype() != DType::Int64)
    user_error(what, " must be int32 or int64, got ", dtype_name(t.dtype()));
  return t.to_int64_vector();
}

Reduction parse_reduction(const Node& node) {
  std::string r = node.attr_string("reduction", "none");
  if (r == "none") return Reduction::None;
  if (r == "add") return Reduction::Add;
  if (r == "mul") return Reduction::Mul;
  if (r == "max") return Reduction::Max;
  if (r == "min") return Reduction::Min;
  user_error("unsupported reduction '", r, "' (expected none, add, mul, max or min)");
}

}  // namespace index_detail
}  // namespace kiln
