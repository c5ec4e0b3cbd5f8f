#include "reference/ops/tensor_movement.h"

#include <cstring>

namespace kiln {

StridedView contiguous_view(const Shape& shape) { return {shape, shape_strides(shape), 0}; }

StridedView permuted_view(const Shape& shape, const std::vector<int64_t>& perm) {
  KILN_CHECK(perm.size() == shape.size(), "permutation rank ", perm.size(), " for shape ", shape_str(shape));
  auto strides = shape_strides(shape);
  StridedView v;
  for (int64_t p : perm) {
    v.shape.push_back(shape[size_t(p)]);
    v.strides.push_back(strides[size_t(p)]);
  }
  return v;
}

namespace {

// Copies `n` elements of ES bytes from src (element stride `stride`) to contiguous dst. The fixed
// size lets memcpy compile to one load and store per element without aliasing the typed storage.
template <size_t ES>
void gather_row(uint8_t* dst, const uint8_t* src, int64_t n, int64_t stride) {
  const int64_t step = stride * int64_t(ES);
  for (int64_t i = 0; i < n; ++i, dst += ES, src += step) std::memcpy(dst, src, ES);
}

void gather_row_any(uint8_t* dst, const uint8_t* src, int64_t n, int64_t stride, size_t es) {
  switch (es) {
    case 1: return gather_row<1>(dst, src, n, stride);
    case 2: return gather_row<2>(dst, src, n, stride);
    case 4: return gather_row<4>(dst, src, n, stride);
    case 8: return gather_row<8>(dst, src, n, stride);
    default:
      for (int64_t i = 0; i < n; ++i, dst += es, src += stride * int64_t(es)) std::memcpy(dst, src, es);
  }
}

}  // namespace

Tensor materialize(const Tensor& src, const StridedView& view) {
  KILN_CHECK(view.shape.size() == view.strides.size(), "view rank mismatch");
  Tensor out(src.dtype(), view.shape);
  if (out.numel() == 0) return out;

  // Coalesce: drop size-1 axes and merge an axis into its outer neighbour when the two walk memory
  // as one (outer stride == inner stride * inner size). A slice of whole rows or a transpose that
  // keeps the last axis then becomes a short loop of long memcpys.
  Shape dims;
  std::vector<int64_t> st;
  for (size_t i = 0; i < view.shape.size(); ++i) {
    int64_t n = view.shape[i], s = view.strides[i];
    if (n == 1) continue;
    if (!dims.empty() && st.back() == s * n) {
      dims.back() *= n;
      st.back() = s;
    } else {
      dims.push_back(n);
      st.push_back(s);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    st.push_back(1);
  }

  // Every element the view reaches must lie inside the source (a kernel bug otherwise).
  int64_t lo = view.offset, hi = view.offset;
  for (size_t i = 0; i < dims.size(); ++i) (st[i] < 0 ? lo : hi) += st[i] * (dims[i] - 1);
  KILN_CHECK(lo >= 0 && hi < src.numel(), "view reaches elements [", lo, ", ", hi, "] of a tensor of ",
             src.numel());

  const size_t es = dtype_size(src.dtype());
  const auto* base = static_cast<const uint8_t*>(src.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const size_t nd = dims.size();
  const int64_t inner = dims[nd - 1], inner_stride = st[nd - 1];
  const int64_t rows = out.numel() / inner;
  const size_t row_bytes = size_t(inner) * es;

  std::vector<int64_t> counter(nd, 0);
  int64_t off = view.offset;
  for (int64_t r = 0; r < rows; ++r, dst += row_bytes) {
    const uint8_t* s = base + off * int64_t(es);
    if (inner_stride == 1) std::memcpy(dst, s, row_bytes);
    else gather_row_any(dst, s, inner, inner_stride, es);
    for (int64_t d = int64_t(nd) - 2; d >= 0; --d) {
      size_t du = size_t(d);
      if (++counter[du] < dims[du]) {
        off += st[du];
        break;
      }
      counter[du] = 0;
      off -= st[du] * (dims[du] - 1);
    }
  }
  return out;
}

std::vector<int64_t> int_values(const Tensor& t, const char* what) {
  if (!is_integer(t.dtype())) user_error(what, " must be an integer tensor, got ", dtype_name(t.dtype()));
  if (t.rank() > 1) user_error(what, " must be 1-D, got shape ", shape_str(t.shape()));
  return t.to_int64_vector();
}

}  // namespace kiln
