// Index-selecting reference kernels: ArgMax, ArgMin (opset 13: axis, keepdims, select_last_index)
// and TopK (opset 11: k is input 1; attrs axis, largest, sorted; outputs Values and int64 Indices).
//
// Ordering: a NaN compares greater than every number (numpy's sort order; argmax/argmin/topk then
// pick NaNs the way numpy does for argmax and sort). Ties go to the lower index, except that
// ArgMax/ArgMin with select_last_index=1 take the last occurrence. TopK always returns its k
// elements sorted (sorted=0 leaves the order unspecified, so sorted order is a valid answer).
#include <algorithm>
#include <numeric>

#include "reference/kernel_util.h"
#include "reference/ops/reduction_internal.h"

namespace kiln::reduction {
namespace {

// Strict "a is greater than b" with NaN as the greatest value (NaNs are equal to each other).
template <class K>
bool greater(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

template <class T>
Tensor arg_typed(const Tensor& x, const AxisView& v, const Shape& out_shape, bool want_max, bool last) {
  using K = Key<T>;
  Tensor out(DType::Int64, out_shape);
  const T* xd = x.data<T>();
  int64_t* od = out.data<int64_t>();
  const size_t inner = size_t(v.inner);
  std::vector<K> best(inner);
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* src = xd + o * v.n * v.inner;
    int64_t* arg = od + o * v.inner;
    for (size_t j = 0; j < inner; ++j) {
      best[j] = static_cast<K>(src[j]);
      arg[j] = 0;
    }
    for (int64_t i = 1; i < v.n; ++i) {
      const T* row = src + size_t(i) * inner;
      for (size_t j = 0; j < inner; ++j) {
        K c = static_cast<K>(row[j]);
        bool better = want_max ? greater(c, best[j]) : greater(best[j], c);
        // A tie (neither better nor worse) moves the answer only with select_last_index.
        if (better || (last && !greater(c, best[j]) && !greater(best[j], c))) {
          best[j] = c;
          arg[j] = i;
        }
      }
    }
  }
  return out;
}

template <bool Max>
std::vector<Tensor> arg_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  if (x.rank() == 0) user_error("input must have rank >= 1");
  int64_t axis = axis_in_rank(node.attr_int("axis", 0), x.rank());
  int64_t keepdims = node.attr_int("keepdims", 1);
  int64_t last = node.attr_int("select_last_index", 0);
  if (keepdims != 0 && keepdims != 1) user_error("keepdims must be 0 or 1, got ", keepdims);
  if (last != 0 && last != 1) user_error("select_last_index must be 0 or 1, got ", last);
  AxisView v = axis_view(x.shape(), axis);
  if (v.n == 0) user_error("cannot take ", Max ? "ArgMax" : "ArgMin", " over axis ", axis, " of size 0");
  Shape out_shape = x.shape();
  if (keepdims) out_shape[size_t(axis)] = 1;
  else out_shape.erase(out_shape.begin() + axis);
  return {dispatch_set<TypeSet::Numeric>(x, "input", [&](auto tag) {
    return arg_typed<decltype(tag)>(x, v, out_shape, Max, last == 1);
  })};
}

template <class T>
std::vector<Tensor> topk_typed(const Tensor& x, const AxisView& v, int64_t axis, int64_t k, bool largest) {
  using K = Key<T>;
  Shape out_shape = x.shape();
  out_shape[size_t(axis)] = k;
  Tensor values(x.dtype(), out_shape), indices(DType::Int64, out_shape);
  const T* xd = x.data<T>();
  T* vd = values.data<T>();
  int64_t* id = indices.data<int64_t>();
  std::vector<K> keys(size_t(v.n));
  std::vector<int64_t> order(size_t(v.n));
  // Orders indices best-first; equal keys by ascending index, which makes the order total.
  auto before = [&](int64_t a, int64_t b) {
    K ka = keys[size_t(a)], kb = keys[size_t(b)];
    if (largest ? greater(ka, kb) : greater(kb, ka)) return true;
    if (largest ? greater(kb, ka) : greater(ka, kb)) return false;
    return a < b;
  };
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t j = 0; j < v.inner; ++j) {
      const T* src = xd + o * v.n * v.inner + j;
      for (int64_t i = 0; i < v.n; ++i) keys[size_t(i)] = static_cast<K>(src[i * v.inner]);
      std::iota(order.begin(), order.end(), int64_t(0));
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      int64_t base = o * k * v.inner + j;
      for (int64_t i = 0; i < k; ++i) {
        int64_t src_i = order[size_t(i)];
        vd[base + i * v.inner] = src[src_i * v.inner];
        id[base + i * v.inner] = src_i;
      }
    }
  }
  return {values, indices};
}

std::vector<Tensor> topk_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  if (x.rank() == 0) user_error("input must have rank >= 1");
  int64_t axis = axis_in_rank(node.attr_int("axis", -1), x.rank());
  int64_t largest = node.attr_int("largest", 1);
  int64_t sorted = node.attr_int("sorted", 1);
  if (largest != 0 && largest != 1) user_error("largest must be 0 or 1, got ", largest);
  if (sorted != 0 && sorted != 1) user_error("sorted must be 0 or 1, got ", sorted);
  int64_t k = scalar_int_input(in[1], "k");
  int64_t n = x.dim(axis);
  if (k < 0 || k > n) user_error("k = ", k, " is out of range for axis ", axis, " of size ", n);
  AxisView v = axis_view(x.shape(), axis);
  return dispatch_set<TypeSet::Numeric>(
      x, "input", [&](auto tag) { return topk_typed<decltype(tag)>(x, v, axis, k, largest == 1); });
}

}  // namespace

void register_select_ops(OpRegistry& r) {
  r.add({"ArgMax", arg_kernel<true>, {}});
  r.add({"ArgMin", arg_kernel<false>, {}});
  r.add({"TopK", topk_kernel, {1}});
}

}  // namespace kiln::reduction
