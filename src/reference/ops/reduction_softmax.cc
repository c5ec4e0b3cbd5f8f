// Softmax, LogSoftmax and Hardmax reference kernels with opset-13 semantics: each normalises along
// the single axis `axis` (default -1), not over the flattened trailing dims as opset <= 12 did.
//
// The tensor is viewed as [outer, n, inner]; each outer block is processed with per-inner-position
// running max/sum rows so the inner loops are contiguous whatever the axis. Softmax and
// LogSoftmax subtract the row max before exponentiating so large inputs do not overflow.
#include <cmath>
#include <limits>

#include "reference/kernel_util.h"
#include "reference/ops/reduction_internal.h"

namespace kiln::reduction {
namespace {

enum class Norm { Softmax, LogSoftmax, Hardmax };

template <class T, Norm N>
Tensor normalize_typed(const Tensor& x, const AxisView& v) {
  using A = Accum<T>;  // float for f32/f16/bf16, double for f64
  Tensor out(x.dtype(), x.shape());
  if (x.numel() == 0) return out;
  const T* xd = x.data<T>();
  T* od = out.data<T>();
  const size_t inner = size_t(v.inner);
  std::vector<A> best(inner), sum(inner), block(size_t(v.n) * inner);
  std::vector<int64_t> arg(inner);
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* src = xd + o * v.n * v.inner;
    T* dst = od + o * v.n * v.inner;
    for (size_t k = 0; k < block.size(); ++k) block[k] = static_cast<A>(src[k]);
    // Row max (and, for Hardmax, the first index reaching it; a NaN counts as the max).
    for (size_t j = 0; j < inner; ++j) {
      best[j] = block[j];
      arg[j] = 0;
    }
    for (int64_t i = 1; i < v.n; ++i) {
      const A* row = block.data() + size_t(i) * inner;
      for (size_t j = 0; j < inner; ++j)
        if (row[j] > best[j] || (std::isnan(row[j]) && !std::isnan(best[j]))) {
          best[j] = row[j];
          arg[j] = i;
        }
    }
    if constexpr (N == Norm::Hardmax) {
      for (int64_t i = 0; i < v.n; ++i)
        for (size_t j = 0; j < inner; ++j) dst[size_t(i) * inner + j] = T(arg[j] == i ? 1.0f : 0.0f);
      continue;
    } else {
      for (size_t j = 0; j < inner; ++j) sum[j] = A(0);
      for (int64_t i = 0; i < v.n; ++i) {
        A* row = block.data() + size_t(i) * inner;
        for (size_t j = 0; j < inner; ++j) {
          A e = std::exp(row[j] - best[j]);
          sum[j] += e;
          if constexpr (N == Norm::Softmax) row[j] = e;
        }
      }
      for (int64_t i = 0; i < v.n; ++i) {
        const A* row = block.data() + size_t(i) * inner;
        T* d = dst + size_t(i) * inner;
        for (size_t j = 0; j < inner; ++j) {
          if constexpr (N == Norm::Softmax) d[j] = narrow<T>(row[j] / sum[j]);
          else d[j] = narrow<T>(row[j] - best[j] - std::log(sum[j]));
        }
      }
    }
  }
  return out;
}

template <Norm N>
std::vector<Tensor> normalize_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  int64_t axis = axis_in_rank(node.attr_int("axis", -1), x.rank());
  AxisView v = axis_view(x.shape(), axis);
  return {dispatch_set<TypeSet::Float>(x, "input",
                                       [&](auto tag) { return normalize_typed<decltype(tag), N>(x, v); })};
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  r.add({"Softmax", normalize_kernel<Norm::Softmax>, {}});
  r.add({"LogSoftmax", normalize_kernel<Norm::LogSoftmax>, {}});
  r.add({"Hardmax", normalize_kernel<Norm::Hardmax>, {}});
}

}  // namespace kiln::reduction
