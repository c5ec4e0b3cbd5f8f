// Entry point of the elementwise reference kernels, plus the type conversions (Cast, CastLike) and
// Clip. The other elementwise ops live in elementwise_unary.cc, elementwise_binary.cc and
// elementwise_compare.cc; their shared loops and dtype sets are in elementwise_internal.h.
#include <cmath>
#include <cstring>

#include "reference/ops/elementwise_internal.h"

namespace kiln {
namespace elementwise {
namespace {

template <class From, class To>
To convert_element(From v) {
  if constexpr (is_half_v<To> && !std::is_same_v<From, float> && !is_half_v<From>)
    return To(round_to_odd_float(double(v)));
  else
    return store<To>(load(v));  // float → integer saturates (NaN → 0), → bool is != 0
}

// Converts every element of x to dtype `to`. Same-dtype casts return x itself: tensors are
// immutable once produced, so sharing the storage is safe.
Tensor cast_tensor(const Tensor& x, DType to) {
  if (x.dtype() == to) return x;
  Tensor out(to, x.shape());
  dispatch_dtype(x.dtype(), [&](auto ftag) {
    using From = decltype(ftag);
    dispatch_dtype(to, [&](auto ttag) {
      using To = decltype(ttag);
      const From* src = x.data<From>();
      To* dst = out.data<To>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) dst[i] = convert_element<From, To>(src[i]);
    });
  });
  return out;
}

void register_cast(OpRegistry& r) {
  add_op(r, "Cast", [](const Node& node, const Inputs& in) {
    expect_inputs(in, 1, 1);
    node.require_attr("to");
    const int64_t code = node.attr_int("to", 0);
    std::optional<DType> to = dtype_from_onnx(code);
    if (!to) user_error("cast to ONNX type ", code, " is not supported");
    return Inputs{cast_tensor(in[0], *to)};
  });
  add_op(r, "CastLike", [](const Node&, const Inputs& in) {
    expect_inputs(in, 2, 2);
    return Inputs{cast_tensor(in[0], in[1].dtype())};
  });
}

// Clip(X, min?, max?): min and max are optional one-element tensors of X's type; an omitted bound
// does not clamp (so ±inf and NaN inputs pass through). With min > max every element becomes max,
// as the spec says (clamp to min first, then to max). NaN elements stay NaN.
void register_clip(OpRegistry& r) {
  add_op(r, "Clip", [](const Node&, const Inputs& in) {
    expect_inputs(in, 1, 3);
    const Tensor& x = in[0];
    const Tensor lo = in.size() > 1 ? in[1] : Tensor{};
    const Tensor hi = in.size() > 2 ? in[2] : Tensor{};
    for (const Tensor* b : {&lo, &hi}) {
      if (!b->defined()) continue;
      const char* which = b == &lo ? "min" : "max";
      expect_same_dtype(x, *b, which);
      if (b->numel() != 1) user_error(which, " must be a scalar, got shape ", shape_str(b->shape()));
    }
    Tensor out;
    dispatch_set<kNumeric>(x.dtype(), "input 0", [&](auto tag) {
      using T = decltype(tag);
      out = Tensor(x.dtype(), x.shape());
      const T* px = x.data<T>();
      T* po = out.data<T>();
      const bool has_lo = lo.defined(), has_hi = hi.defined();
      const T lo_v = has_lo ? lo.data<T>()[0] : T{}, hi_v = has_hi ? hi.data<T>()[0] : T{};
      const auto lo_c = load(lo_v), hi_c = load(hi_v);
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        T v = px[i];
        if (has_lo && load(v) < lo_c) v = lo_v;
        if (has_hi && load(v) > hi_c) v = hi_v;
        po[i] = v;
      }
    });
    return Inputs{out};
  });
}

}  // namespace
}  // namespace elementwise

void register_elementwise_ops(OpRegistry& r) {
  elementwise::register_unary(r);
  elementwise::register_binary(r);
  elementwise::register_compare(r);
  elementwise::register_cast(r);
  elementwise::register_clip(r);
}

}  // namespace kiln
