#include "reference/kernel_util.h"
#include "reference/ops/reduction_internal.h"

namespace kiln::reduction {

bool dtype_in_set(DType dt, TypeSet s) {
  if (dt == DType::Undefined) return false;
  return dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    return in_set<T>(s);
  });
}

void expect_type_set(const Tensor& t, TypeSet s, const char* what) {
  if (dtype_in_set(t.dtype(), s)) return;
  std::string allowed;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int8, DType::Int16,
                   DType::Int32, DType::Int64, DType::UInt8, DType::UInt16, DType::UInt32, DType::UInt64, DType::Bool})
    if (dtype_in_set(dt, s)) allowed += cat(allowed.empty() ? "" : ", ", dtype_name(dt));
  user_error(what, " has unsupported type ", dtype_name(t.dtype()), " (expects one of ", allowed, ")");
}

AxisView axis_view(const Shape& s, int64_t axis) {
  AxisView v;
  if (s.empty()) return v;
  int64_t r = int64_t(s.size());
  v.outer = dims_product(s, 0, axis);
  v.n = s[size_t(axis)];
  v.inner = dims_product(s, axis + 1, r);
  return v;
}

int64_t axis_in_rank(int64_t axis, int64_t rank) {
  if (rank == 0 && (axis == 0 || axis == -1)) return 0;
  return normalize_axis(axis, rank);
}

int64_t scalar_int_input(const Tensor& t, const char* what) {
  if (!is_integer(t.dtype())) user_error(what, " must be an integer tensor, got ", dtype_name(t.dtype()));
  if (t.rank() > 1 || t.numel() != 1)
    user_error(what, " must be a scalar or a 1-element 1-D tensor, got shape ", shape_str(t.shape()));
  return t.as_int64(0);
}

}  // namespace kiln::reduction
