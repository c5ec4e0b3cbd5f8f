// Gather, GatherElements, GatherND (opset 13): read elements of `data` at positions given by an index
// tensor. Elements are copied as raw bytes, so every dtype is handled exactly.
#include "reference/kernel_util.h"
#include "reference/ops/index_internal.h"

namespace kiln {
namespace {

using index_detail::copy_elems;
using index_detail::read_indices;
using index_detail::wrap_index;

// out = data.shape[:axis] ++ indices.shape ++ data.shape[axis+1:]. Viewing data as
// [outer, dim, inner], every (outer, index) pair copies one contiguous run of `inner` elements.
std::vector<Tensor> gather(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& data = in[0];
  if (data.rank() < 1) user_error("data must have rank >= 1");
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), data.rank());
  std::vector<int64_t> idx = read_indices(in[1], "indices");
  const int64_t dim = data.dim(axis);
  for (int64_t& i : idx) i = wrap_index(i, dim, "Gather");

  Shape out_shape(data.shape().begin(), data.shape().begin() + axis);
  out_shape.insert(out_shape.end(), in[1].shape().begin(), in[1].shape().end());
  out_shape.insert(out_shape.end(), data.shape().begin() + axis + 1, data.shape().end());
  Tensor out(data.dtype(), out_shape);

  const size_t es = dtype_size(data.dtype());
  const int64_t outer = dims_product(data.shape(), 0, axis);
  const int64_t inner = dims_product(data.shape(), axis + 1, data.rank());
  const auto* src = static_cast<const uint8_t*>(data.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const int64_t n = int64_t(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < n; ++k)
      copy_elems(dst + size_t((o * n + k) * inner) * es, src + size_t((o * dim + idx[size_t(k)]) * inner) * es,
                 inner, es);
  return {out};
}

// out has the shape of indices; out[p] = data[p with p[axis] replaced by indices[p]].
std::vector<Tensor> gather_elements(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& data = in[0];
  const Tensor& indices = in[1];
  if (data.rank() < 1) user_error("data must have rank >= 1");
  if (indices.rank() != data.rank())
    user_error("indices rank ", indices.rank(), " differs from data rank ", data.rank());
  const int64_t rank = data.rank();
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indices.dim(d) > data.dim(d))
      user_error("indices shape ", shape_str(indices.shape()), " exceeds data shape ", shape_str(data.shape()),
                 " outside the gather axis");
  std::vector<int64_t> idx = read_indices(indices, "indices");

  Tensor out(data.dtype(), indices.shape());
  const size_t es = dtype_size(data.dtype());
  const auto dstrides = shape_strides(data.shape());
  const auto* src = static_cast<const uint8_t*>(data.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  std::vector<int64_t> pos(size_t(rank), 0);  // multi-index of the current indices element
  for (int64_t e = 0; e < out.numel(); ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t c = d == axis ? wrap_index(idx[size_t(e)], data.dim(axis), "GatherElements") : pos[size_t(d)];
      off += c * dstrides[size_t(d)];
    }
    std::memcpy(dst + size_t(e) * es, src + size_t(off) * es, es);
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++pos[size_t(d)] < indices.dim(d)) break;
      pos[size_t(d)] = 0;
    }
  }
  return {out};
}

// indices [..., m] holds m-tuples indexing data dims [b, b+m); each tuple selects the slice
// data[batch, tuple..., :] of shape data.shape[b+m:]. Batch dims are shared by data and indices.
std::vector<Tensor> gather_nd(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& data = in[0];
  const Tensor& indices = in[1];
  const int64_t r = data.rank(), q = indices.rank();
  const int64_t b = node.attr_int("batch_dims", 0);
  if (r < 1 || q < 1) user_error("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(q, r)) user_error("batch_dims ", b, " must be in [0, ", std::min(q, r) - 1, "]");
  for (int64_t d = 0; d < b; ++d)
    if (indices.dim(d) != data.dim(d))
      user_error("batch dimension ", d, " differs: data ", shape_str(data.shape()), ", indices ",
                 shape_str(indices.shape()));
  const int64_t m = indices.dim(q - 1);
  if (m < 1 || m > r - b) user_error("indices.shape[-1] = ", m, " must be in [1, ", r - b, "]");
  std::vector<int64_t> idx = read_indices(indices, "indices");

  Shape out_shape(indices.shape().begin(), indices.shape().end() - 1);
  out_shape.insert(out_shape.end(), data.shape().begin() + b + m, data.shape().end());
  Tensor out(data.dtype(), out_shape);

  const size_t es = dtype_size(data.dtype());
  const auto dstrides = shape_strides(data.shape());
  const int64_t batches = dims_product(data.shape(), 0, b);
  const int64_t batch_stride = dims_product(data.shape(), b, r);
  const int64_t tuples = dims_product(indices.shape(), b, q - 1);  // index tuples per batch
  const int64_t slice = dims_product(data.shape(), b + m, r);
  const auto* src = static_cast<const uint8_t*>(data.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t t = 0; t < tuples; ++t) {
      const int64_t* tuple = idx.data() + (bi * tuples + t) * m;
      int64_t off = bi * batch_stride;
      for (int64_t j = 0; j < m; ++j)
        off += wrap_index(tuple[j], data.dim(b + j), "GatherND") * dstrides[size_t(b + j)];
      copy_elems(dst + size_t((bi * tuples + t) * slice) * es, src + size_t(off) * es, slice, es);
    }
  return {out};
}

}  // namespace

void register_gather_ops(OpRegistry& r) {
  r.add({"Gather", gather, {}});
  r.add({"GatherElements", gather_elements, {}});
  r.add({"GatherND", gather_nd, {}});
}

}  // namespace kiln
