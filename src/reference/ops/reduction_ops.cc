// Reduce* reference kernels (ONNX opset-18 form): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
// ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.
//
// All take `axes` as optional int64 input 1 and attrs keepdims (default 1) and noop_with_empty_axes
// (default 0). Absent or empty axes reduce every axis, unless noop_with_empty_axes=1, which makes
// the op an identity. A reduction over an empty set yields the op's identity element (0 for sums,
// 1 for products, -inf / the type's lowest value for max, -inf for the log reductions).
//
// Algorithm: the input dims are merged into maximal runs that are all reduced or all kept (size-1
// dims vanish), so a reduction over any axis set becomes a walk over contiguous runs of the
// innermost merged dim, each folded into one accumulator (innermost run reduced) or into a row of
// accumulators (innermost run kept). Every output's inputs are folded in row-major order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/kernel_util.h"
#include "reference/ops/reduction_internal.h"

namespace kiln {

void register_reduction_ops(OpRegistry& r) {
  reduction::register_reduce_ops(r);
  reduction::register_softmax_ops(r);
  reduction::register_select_ops(r);
  reduction::register_cumsum_op(r);
}

namespace reduction {
namespace {

enum class Kind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

struct ReducePlan {
  Shape out_shape;
  int64_t out_numel = 1;
  int64_t count = 1;                 // input elements folded into each output
  std::vector<int64_t> dims;         // merged input dims, outermost first (never empty)
  std::vector<int64_t> out_strides;  // output stride of each merged dim; 0 for reduced runs
};

ReducePlan plan_reduce(const Shape& s, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  std::vector<bool> run_reduced;
  for (size_t i = 0; i < s.size(); ++i) {
    if (reduced[i]) {
      p.count *= s[i];
      if (keepdims) p.out_shape.push_back(1);
    } else {
      p.out_shape.push_back(s[i]);
    }
    if (s[i] == 1) continue;
    if (!p.dims.empty() && run_reduced.back() == reduced[i]) {
      p.dims.back() *= s[i];
    } else {
      p.dims.push_back(s[i]);
      run_reduced.push_back(reduced[i]);
    }
  }
  if (p.dims.empty()) {  // a single element
    p.dims.push_back(1);
    run_reduced.push_back(false);
  }
  p.out_numel = shape_numel(p.out_shape);
  p.out_strides.assign(p.dims.size(), 0);
  int64_t stride = 1;
  for (size_t i = p.dims.size(); i-- > 0;) {
    if (run_reduced[i]) continue;
    p.out_strides[i] = stride;
    stride *= p.dims[i];
  }
  return p;
}

// Calls f(in_offset, out_offset, len, inner_reduced) for each contiguous run of the innermost
// merged dim, in input order. The input must be non-empty.
template <class F>
void walk(const ReducePlan& p, int64_t in_numel, F&& f) {
  size_t nd = p.dims.size();
  int64_t len = p.dims[nd - 1];
  bool inner_reduced = p.out_strides[nd - 1] == 0;
  std::vector<int64_t> idx(nd - 1, 0);
  int64_t out = 0;
  for (int64_t in = 0; in < in_numel; in += len) {
    f(in, out, len, inner_reduced);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < p.dims[d]) {
        out += p.out_strides[d];
        break;
      }
      out -= p.out_strides[d] * (p.dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// Folds every input element v into its output's accumulator: acc = add(acc, A(v), out_index).
template <class T, class A, class Add>
std::vector<A> accumulate(const Tensor& x, const ReducePlan& p, A init, Add add) {
  std::vector<A> acc(size_t(p.out_numel), init);
  if (x.numel() == 0) return acc;
  const T* xd = x.data<T>();
  walk(p, x.numel(), [&](int64_t in, int64_t out, int64_t len, bool inner_reduced) {
    const T* src = xd + in;
    if (inner_reduced) {
      A a = acc[size_t(out)];
      for (int64_t j = 0; j < len; ++j) a = add(a, static_cast<A>(src[j]), out);
      acc[size_t(out)] = a;
    } else {
      A* dst = acc.data() + out;
      for (int64_t j = 0; j < len; ++j) dst[j] = add(dst[j], static_cast<A>(src[j]), out + j);
    }
  });
  return acc;
}

template <class T, class A, class Fin>
Tensor finish(const ReducePlan& p, const std::vector<A>& acc, Fin fin) {
  Tensor out(dtype_of<T>(), p.out_shape);
  T* od = out.data<T>();
  for (size_t i = 0; i < acc.size(); ++i) od[i] = narrow<T>(fin(acc[i], i));
  return out;
}

// max/min that propagate NaN, as numpy does.
template <class A>
A max_nan(A a, A v) {
  return (v > a || is_nan(v)) ? v : a;
}
template <class A>
A min_nan(A a, A v) {
  return (v < a || is_nan(v)) ? v : a;
}

template <class T, Kind K>
Tensor reduce_typed(const Tensor& x, const ReducePlan& p) {
  using A = Accum<T>;
  using R = RealOf<T>;
  constexpr bool flt = std::is_floating_point_v<A>;
  auto same = [](auto a, size_t) { return a; };
  auto sum = [](A a, A v, int64_t) { return add_wrap(a, v); };
  if constexpr (K == Kind::Sum) {
    return finish<T>(p, accumulate<T, A>(x, p, A(0), sum), same);
  } else if constexpr (K == Kind::Mean) {
    int64_t n = p.count;
    return finish<T>(p, accumulate<T, A>(x, p, A(0), sum), [n](A a, size_t) {
      if constexpr (flt) return a / A(n);  // 0/0 = NaN for an empty set, as numpy's mean
      else return n == 0 ? A(0) : A(a / A(n));  // integer mean truncates toward zero
    });
  } else if constexpr (K == Kind::Max) {
    A init = flt ? -std::numeric_limits<A>::infinity() : A(std::numeric_limits<T>::lowest());
    return finish<T>(p, accumulate<T, A>(x, p, init, [](A a, A v, int64_t) { return max_nan(a, v); }), same);
  } else if constexpr (K == Kind::Min) {
    A init = flt ? std::numeric_limits<A>::infinity() : A(std::numeric_limits<T>::max());
    return finish<T>(p, accumulate<T, A>(x, p, init, [](A a, A v, int64_t) { return min_nan(a, v); }), same);
  } else if constexpr (K == Kind::Prod) {
    return finish<T>(p, accumulate<T, A>(x, p, A(1), [](A a, A v, int64_t) { return mul_wrap(a, v); }), same);
  } else if constexpr (K == Kind::L1) {
    auto add_abs = [](A a, A v, int64_t) {
      if constexpr (flt) return a + std::abs(v);
      else if constexpr (std::is_signed_v<A>) return add_wrap(a, v < 0 ? add_wrap(A(~v), A(1)) : v);
      else return add_wrap(a, v);
    };
    return finish<T>(p, accumulate<T, A>(x, p, A(0), add_abs), same);
  } else if constexpr (K == Kind::SumSquare || K == Kind::L2) {
    auto acc = accumulate<T, A>(x, p, A(0), [](A a, A v, int64_t) { return add_wrap(a, mul_wrap(v, v)); });
    if constexpr (K == Kind::SumSquare) return finish<T>(p, acc, same);
    else return finish<T>(p, acc, [](A a, size_t) { return std::sqrt(R(a)); });
  } else if constexpr (K == Kind::LogSum) {
    return finish<T>(p, accumulate<T, A>(x, p, A(0), sum), [](A a, size_t) { return std::log(R(a)); });
  } else {
    static_assert(K == Kind::LogSumExp);
    // Stable: log(sum(exp(x - m))) + m with m the max. A row whose max is not finite (empty,
    // all -inf, any +inf or NaN) has that max as its result, avoiding inf - inf.
    constexpr R inf = std::numeric_limits<R>::infinity();
    auto mx = accumulate<T, R>(x, p, -inf, [](R a, R v, int64_t) { return max_nan(a, v); });
    auto s = accumulate<T, R>(x, p, R(0), [&mx](R a, R v, int64_t o) { return a + std::exp(v - mx[size_t(o)]); });
    return finish<T>(p, s, [&mx](R a, size_t i) {
      R m = mx[i];
      return std::isfinite(m) ? m + std::log(a) : m;
    });
  }
}

// Which axes to reduce, or an empty vector when the op is an identity (noop_with_empty_axes).
std::vector<bool> reduced_axes(const Node& node, const std::vector<Tensor>& in, bool* identity) {
  const Tensor& x = in[0];
  int64_t rank = x.rank();
  std::vector<int64_t> axes;
  if (in.size() > 1 && in[1].defined()) {
    if (!is_integer(in[1].dtype())) user_error("axes must be an int64 tensor, got ", dtype_name(in[1].dtype()));
    if (in[1].rank() > 1) user_error("axes must be 1-D, got shape ", shape_str(in[1].shape()));
    axes = in[1].to_int64_vector();
  }
  int64_t noop = node.attr_int("noop_with_empty_axes", 0);
  if (noop != 0 && noop != 1) user_error("noop_with_empty_axes must be 0 or 1, got ", noop);
  *identity = axes.empty() && noop == 1;
  std::vector<bool> reduced(size_t(rank), axes.empty());
  if (axes.empty()) return reduced;
  std::vector<bool> seen(size_t(std::max<int64_t>(rank, 1)), false);
  for (int64_t a : axes) {
    int64_t k = axis_in_rank(a, rank);
    if (seen[size_t(k)]) user_error("axes contains axis ", a, " more than once");
    seen[size_t(k)] = true;
    if (rank > 0) reduced[size_t(k)] = true;
  }
  return reduced;
}

template <Kind K>
std::vector<Tensor> reduce_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 2);
  constexpr TypeSet set = (K == Kind::Max || K == Kind::Min) ? TypeSet::ReduceMinMax : TypeSet::Reduce;
  expect_type_set(in[0], set, "input");
  int64_t keepdims = node.attr_int("keepdims", 1);
  if (keepdims != 0 && keepdims != 1) user_error("keepdims must be 0 or 1, got ", keepdims);
  bool identity = false;
  std::vector<bool> reduced = reduced_axes(node, in, &identity);
  if (identity) return {in[0]};
  ReducePlan plan = plan_reduce(in[0].shape(), reduced, keepdims == 1);
  return {dispatch_set<set>(in[0], "input",
                            [&](auto tag) { return reduce_typed<decltype(tag), K>(in[0], plan); })};
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  r.add({"ReduceSum", reduce_kernel<Kind::Sum>, {1}});
  r.add({"ReduceMean", reduce_kernel<Kind::Mean>, {1}});
  r.add({"ReduceMax", reduce_kernel<Kind::Max>, {1}});
  r.add({"ReduceMin", reduce_kernel<Kind::Min>, {1}});
  r.add({"ReduceProd", reduce_kernel<Kind::Prod>, {1}});
  r.add({"ReduceL1", reduce_kernel<Kind::L1>, {1}});
  r.add({"ReduceL2", reduce_kernel<Kind::L2>, {1}});
  r.add({"ReduceLogSum", reduce_kernel<Kind::LogSum>, {1}});
  r.add({"ReduceLogSumExp", reduce_kernel<Kind::LogSumExp>, {1}});
  r.add({"ReduceSumSquare", reduce_kernel<Kind::SumSquare>, {1}});
}

}  // namespace reduction
}  // namespace kiln
