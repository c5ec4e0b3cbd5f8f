// CumSum reference kernel (opset 14): running sums along the axis given by input 1 (a 0-D or
// 1-element 1-D int32/int64 tensor); attrs exclusive (each output omits its own element) and
// reverse (sum from the end). Sums accumulate in Accum<T> in the scan order.
#include <algorithm>

#include "reference/kernel_util.h"
#include "reference/ops/reduction_internal.h"

namespace kiln::reduction {
namespace {

template <class T>
Tensor cumsum_typed(const Tensor& x, const AxisView& v, bool exclusive, bool reverse) {
  using A = Accum<T>;
  Tensor out(x.dtype(), x.shape());
  if (x.numel() == 0) return out;
  const T* xd = x.data<T>();
  T* od = out.data<T>();
  const size_t inner = size_t(v.inner);
  std::vector<A> run(inner);
  for (int64_t o = 0; o < v.outer; ++o) {
    std::fill(run.begin(), run.end(), A(0));
    for (int64_t step = 0; step < v.n; ++step) {
      int64_t i = reverse ? v.n - 1 - step : step;
      size_t off = size_t((o * v.n + i) * v.inner);
      const T* src = xd + off;
      T* dst = od + off;
      for (size_t j = 0; j < inner; ++j) {
        A next = add_wrap(run[j], static_cast<A>(src[j]));
        dst[j] = narrow<T>(exclusive ? run[j] : next);
        run[j] = next;
      }
    }
  }
  return out;
}

std::vector<Tensor> cumsum_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  if (in[1].dtype() != DType::Int32 && in[1].dtype() != DType::Int64)
    user_error("axis must be an int32 or int64 tensor, got ", dtype_name(in[1].dtype()));
  int64_t axis = axis_in_rank(scalar_int_input(in[1], "axis"), x.rank());
  int64_t exclusive = node.attr_int("exclusive", 0);
  int64_t reverse = node.attr_int("reverse", 0);
  if (exclusive != 0 && exclusive != 1) user_error("exclusive must be 0 or 1, got ", exclusive);
  if (reverse != 0 && reverse != 1) user_error("reverse must be 0 or 1, got ", reverse);
  AxisView v = axis_view(x.shape(), axis);
  return {dispatch_set<TypeSet::Reduce>(x, "input", [&](auto tag) {
    return cumsum_typed<decltype(tag)>(x, v, exclusive == 1, reverse == 1);
  })};
}

}  // namespace

// The axis input does not change the output shape (it equals the input's), so it is not a shape
// input.
void register_cumsum_op(OpRegistry& r) { r.add({"CumSum", cumsum_kernel, {}}); }

}  // namespace kiln::reduction
