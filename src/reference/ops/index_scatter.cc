// ScatterElements and ScatterND (opset 16, plus the opset-18 max/min reductions): the output is a
// copy of `data` with `updates` written (or combined by `reduction`) at positions given by indices.
// Updates are applied in row-major order of `updates`, so with reduction=none and duplicate indices
// the last one wins (ONNX leaves that case undefined; a fixed order keeps the oracle deterministic).
#include "reference/kernel_util.h"
#include "reference/ops/index_internal.h"

namespace kiln {
namespace {

using index_detail::combine;
using index_detail::read_indices;
using index_detail::Reduction;
using index_detail::wrap_index;

// Applies one update run: `count` elements from src into dst, as bytes (no reduction) or typed.
void apply_run(const Tensor& out, uint8_t* dst, const uint8_t* src, int64_t count, Reduction red) {
  const size_t es = dtype_size(out.dtype());
  if (red == Reduction::None) {
    index_detail::copy_elems(dst, src, count, es);
    return;
  }
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = reinterpret_cast<T*>(dst);
    const T* s = reinterpret_cast<const T*>(src);
    for (int64_t i = 0; i < count; ++i) combine<T>(d[i], s[i], red);
  });
}

// For each element p of updates: out[p with p[axis] = indices[p]] (op)= updates[p].
std::vector<Tensor> scatter_elements(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 3);
  const Tensor& data = in[0];
  const Tensor& indices = in[1];
  const Tensor& updates = in[2];
  const int64_t rank = data.rank();
  if (rank < 1) user_error("data must have rank >= 1");
  expect_same_dtype(data, updates, "data and updates");
  if (indices.shape() != updates.shape())
    user_error("indices shape ", shape_str(indices.shape()), " differs from updates shape ",
               shape_str(updates.shape()));
  if (indices.rank() != rank) user_error("indices rank ", indices.rank(), " differs from data rank ", rank);
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      user_error("indices shape ", shape_str(indices.shape()), " exceeds data shape ", shape_str(data.shape()),
                 " outside the scatter axis");
  const Reduction red = index_detail::parse_reduction(node);
  std::vector<int64_t> idx = read_indices(indices, "indices");
  // Validate every index before writing anything.
  for (int64_t& i : idx) i = wrap_index(i, data.dim(axis), "ScatterElements");

  Tensor out = data.clone();
  const size_t es = dtype_size(data.dtype());
  const auto ostrides = shape_strides(data.shape());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const auto* src = static_cast<const uint8_t*>(updates.raw());
  std::vector<int64_t> pos(size_t(rank), 0);
  for (int64_t e = 0; e < updates.numel(); ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) off += (d == axis ? idx[size_t(e)] : pos[size_t(d)]) * ostrides[size_t(d)];
    apply_run(out, dst + size_t(off) * es, src + size_t(e) * es, 1, red);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++pos[size_t(d)] < updates.dim(d)) break;
      pos[size_t(d)] = 0;
    }
  }
  return {out};
}

// indices [..., k] holds k-tuples addressing data dims [0, k); each tuple receives one slice of
// updates with shape data.shape[k:]. updates.shape must be indices.shape[:-1] ++ data.shape[k:].
std::vector<Tensor> scatter_nd(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 3);
  const Tensor& data = in[0];
  const Tensor& indices = in[1];
  const Tensor& updates = in[2];
  const int64_t r = data.rank(), q = indices.rank();
  if (r < 1 || q < 1) user_error("data and indices must have rank >= 1");
  expect_same_dtype(data, updates, "data and updates");
  const int64_t k = indices.dim(q - 1);
  if (k < 1 || k > r) user_error("indices.shape[-1] = ", k, " must be in [1, ", r, "]");
  Shape want(indices.shape().begin(), indices.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + k, data.shape().end());
  if (updates.shape() != want)
    user_error("updates shape ", shape_str(updates.shape()), " must be ", shape_str(want), " (indices ",
               shape_str(indices.shape()), ", data ", shape_str(data.shape()), ")");
  const Reduction red = index_detail::parse_reduction(node);
  std::vector<int64_t> idx = read_indices(indices, "indices");

  const auto ostrides = shape_strides(data.shape());
  const int64_t tuples = dims_product(indices.shape(), 0, q - 1);
  const int64_t slice = dims_product(data.shape(), k, r);
  std::vector<int64_t> offsets(static_cast<size_t>(tuples));  // element offset of each tuple's slice in data
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j)
      off += wrap_index(idx[size_t(t * k + j)], data.dim(j), "ScatterND") * ostrides[size_t(j)];
    offsets[size_t(t)] = off;
  }

  Tensor out = data.clone();
  const size_t es = dtype_size(data.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const auto* src = static_cast<const uint8_t*>(updates.raw());
  for (int64_t t = 0; t < tuples; ++t)
    apply_run(out, dst + size_t(offsets[size_t(t)]) * es, src + size_t(t * slice) * es, slice, red);
  return {out};
}

}  // namespace

void register_scatter_ops(OpRegistry& r) {
  r.add({"ScatterElements", scatter_elements, {}});
  r.add({"ScatterND", scatter_nd, {}});
}

}  // namespace kiln
