// Layout kernels: ops that rearrange elements without looking at them. Each builds a StridedView of
// its input and materializes it (see tensor_movement.h); Concat copies blocks directly.
#include <algorithm>
#include <cstring>

#include "reference/kernel_util.h"
#include "reference/ops/tensor_movement.h"

namespace kiln {
namespace {

// Checks that perm is a permutation of [0, rank).
void check_permutation(const std::vector<int64_t>& perm, int64_t rank) {
  if (int64_t(perm.size()) != rank) user_error("perm has ", perm.size(), " entries for an input of rank ", rank);
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[size_t(p)]) user_error("perm is not a permutation of [0, ", rank, ")");
    seen[size_t(p)] = true;
  }
}

std::vector<Tensor> transpose(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  std::vector<int64_t> perm(size_t(x.rank()));
  for (int64_t i = 0; i < x.rank(); ++i) perm[size_t(i)] = x.rank() - 1 - i;
  if (node.has_attr("perm")) perm = node.attr_ints("perm");
  check_permutation(perm, x.rank());
  return {materialize(x, permuted_view(x.shape(), perm))};
}

std::vector<Tensor> concat(const Node& node, const std::vector<Tensor>& in) {
  if (in.empty()) user_error("expects at least 1 input");
  node.require_attr("axis");
  const Tensor& first = in[0];
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) user_error("input ", i, " is missing");
    expect_same_dtype(first, in[i], "Concat");
  }
  const int64_t rank = first.rank();
  if (rank == 0) user_error("cannot concatenate scalars");
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), rank);
  Shape out_shape = first.shape();
  out_shape[size_t(axis)] = 0;
  for (const Tensor& t : in) {
    bool ok = t.rank() == rank;
    for (int64_t d = 0; ok && d < rank; ++d) ok = d == axis || t.dim(d) == first.dim(d);
    if (!ok)
      user_error("input shapes ", shape_str(first.shape()), " and ", shape_str(t.shape()),
                 " differ outside axis ", axis);
    out_shape[size_t(axis)] += t.dim(axis);
  }
  Tensor out(first.dtype(), out_shape);
  if (out.numel() == 0) return {out};

  // Each input contributes one contiguous block (its axis slab) per outer index.
  const size_t es = dtype_size(first.dtype());
  const int64_t outer = dims_product(out_shape, 0, axis);
  const int64_t inner = dims_product(out_shape, axis + 1, rank);
  const size_t out_row = size_t(out_shape[size_t(axis)] * inner) * es;
  auto* dst = static_cast<uint8_t*>(out.raw());
  size_t col = 0;
  for (const Tensor& t : in) {
    const size_t block = size_t(t.dim(axis) * inner) * es;
    if (block == 0) continue;
    const auto* src = static_cast<const uint8_t*>(t.raw());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + size_t(o) * out_row + col, src + size_t(o) * block, block);
    col += block;
  }
  return {out};
}

std::vector<Tensor> split(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 2);
  const Tensor& x = in[0];
  if (x.rank() == 0) user_error("cannot split a scalar");
  const int64_t axis = normalize_axis(node.attr_int("axis", 0), x.rank());
  const int64_t dim = x.dim(axis);
  const int64_t n = int64_t(node.num_outputs());
  if (n == 0) user_error("has no outputs");

  std::vector<int64_t> sizes;
  // An empty `split` tensor cannot describe n >= 1 outputs; exporters use it to mean "absent".
  if (in.size() > 1 && in[1].defined() && in[1].numel() > 0) {
    if (node.has_attr("num_outputs")) user_error("'split' input and 'num_outputs' attribute are both given");
    sizes = int_values(in[1], "split");
    if (int64_t(sizes.size()) != n) user_error("split has ", sizes.size(), " sizes for ", n, " outputs");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) user_error("split sizes must be non-negative, got ", s);
      total += s;
    }
    if (total != dim) user_error("split sizes sum to ", total, " but axis ", axis, " has size ", dim);
  } else if (node.has_attr("num_outputs")) {
    // Opset-18 form: ceil-sized chunks, the last one smaller when the axis is not divisible.
    if (node.attr_int("num_outputs", 0) != n)
      user_error("num_outputs is ", node.attr_int("num_outputs", 0), " but the node has ", n, " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    sizes.assign(size_t(n), chunk);
    sizes.back() = dim - chunk * (n - 1);
    if (sizes.back() < 0) user_error("axis of size ", dim, " cannot be split into ", n, " chunks of ", chunk);
  } else {
    // Opset-13..17 form: equal parts only.
    if (dim % n != 0) user_error("axis ", axis, " of size ", dim, " cannot be split into ", n, " equal parts");
    sizes.assign(size_t(n), dim / n);
  }

  std::vector<Tensor> outs;
  StridedView v = contiguous_view(x.shape());
  const int64_t axis_stride = v.strides[size_t(axis)];
  int64_t start = 0;
  for (int64_t s : sizes) {
    v.shape[size_t(axis)] = s;
    v.offset = start * axis_stride;
    outs.push_back(materialize(x, v));
    start += s;
  }
  return outs;
}

std::vector<Tensor> slice(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 5);
  const Tensor& x = in[0];
  const int64_t rank = x.rank();
  auto starts = int_values(in[1], "starts");
  auto ends = int_values(in[2], "ends");
  const size_t n = starts.size();
  if (ends.size() != n) user_error("starts has ", n, " entries but ends has ", ends.size());
  std::vector<int64_t> axes(n), steps(n, 1);
  for (size_t i = 0; i < n; ++i) axes[i] = int64_t(i);
  if (in.size() > 3 && in[3].defined()) axes = int_values(in[3], "axes");
  if (in.size() > 4 && in[4].defined()) steps = int_values(in[4], "steps");
  if (axes.size() != n) user_error("axes has ", axes.size(), " entries but starts has ", n);
  if (steps.size() != n) user_error("steps has ", steps.size(), " entries but starts has ", n);

  StridedView v = contiguous_view(x.shape());
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ax = normalize_axis(axes[i], rank);
    if (seen[size_t(ax)]) user_error("axis ", axes[i], " is sliced twice");
    seen[size_t(ax)] = true;
    const int64_t dim = x.dim(ax);
    if (steps[i] == 0) user_error("slice step cannot be 0");
    // A step of magnitude >= dim selects at most the start element, so clamping it changes nothing
    // but keeps the arithmetic below (and the view stride) from overflowing.
    const int64_t max_step = std::max<int64_t>(dim, 1);
    const int64_t step = std::clamp(steps[i], -max_step, max_step);
    // ONNX clamping: negative indices count from the end; starts/ends then clamp to [0, dim] for
    // positive steps and to [0, dim-1] / [-1, dim-1] for negative steps (so INT64_MAX/MIN mean "to
    // the end"). Both adds are overflow-free: dim >= 0 is only added to negative values.
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    int64_t count;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      count = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    v.shape[size_t(ax)] = count;
    if (count > 0) v.offset += start * v.strides[size_t(ax)];
    v.strides[size_t(ax)] *= step;
  }
  return {materialize(x, v)};
}

std::vector<Tensor> expand(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  Shape target = int_values(in[1], "shape");
  for (int64_t d : target)
    if (d < 0) user_error("shape ", shape_str(target), " has a negative dimension");
  Shape out_shape = broadcast_shapes({x.shape(), target});
  StridedView v{out_shape, broadcast_strides(x.shape(), out_shape), 0};
  return {materialize(x, v)};
}

std::vector<Tensor> tile(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  auto repeats = int_values(in[1], "repeats");
  if (int64_t(repeats.size()) != x.rank())
    user_error("repeats has ", repeats.size(), " entries for an input of rank ", x.rank());
  // Output axis d of size r*n is, in row-major order, the pair (repeat, index): view it as two
  // axes, the outer with stride 0, so tiling is a broadcast copy.
  auto strides = shape_strides(x.shape());
  StridedView v;
  Shape out_shape;
  for (size_t d = 0; d < repeats.size(); ++d) {
    if (repeats[d] < 0) user_error("repeats must be non-negative, got ", repeats[d]);
    v.shape.insert(v.shape.end(), {repeats[d], x.shape()[d]});
    v.strides.insert(v.strides.end(), {0, strides[d]});
    int64_t n = 0;
    if (__builtin_mul_overflow(repeats[d], x.shape()[d], &n))
      user_error("repeats[", d, "] = ", repeats[d], " times dimension ", x.shape()[d], " overflows");
    out_shape.push_back(n);
  }
  shape_numel(out_shape);  // throws before the view below is materialised if the product overflows
  return {materialize(x, v).reshaped(out_shape)};
}

int64_t blocksize_attr(const Node& node) {
  node.require_attr("blocksize");
  int64_t b = node.attr_int("blocksize", 0);
  if (b <= 0) user_error("blocksize must be positive, got ", b);
  return b;
}

std::vector<Tensor> depth_to_space(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  if (x.rank() != 4) user_error("expects a 4-D input, got shape ", shape_str(x.shape()));
  const int64_t b = blocksize_attr(node);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (c % (b * b) != 0) user_error("channels ", c, " are not divisible by blocksize^2 = ", b * b);
  const int64_t oc = c / (b * b);
  const std::string mode = node.attr_string("mode", "DCR");
  StridedView v;
  // DCR: channels split as (b, b, C'); CRD: as (C', b, b). Both then interleave blocks into H and W.
  if (mode == "DCR") v = permuted_view({n, b, b, oc, h, w}, {0, 3, 4, 1, 5, 2});
  else if (mode == "CRD") v = permuted_view({n, oc, b, b, h, w}, {0, 1, 4, 2, 5, 3});
  else user_error("unsupported mode '", mode, "' (expected DCR or CRD)");
  return {materialize(x, v).reshaped({n, oc, h * b, w * b})};
}

std::vector<Tensor> space_to_depth(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  if (x.rank() != 4) user_error("expects a 4-D input, got shape ", shape_str(x.shape()));
  const int64_t b = blocksize_attr(node);
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  if (h % b != 0 || w % b != 0)
    user_error("spatial size ", h, "x", w, " is not divisible by blocksize ", b);
  auto v = permuted_view({n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4});
  return {materialize(x, v).reshaped({n, c * b * b, h / b, w / b})};
}

}  // namespace

void register_layout_ops(OpRegistry& r) {
  r.add({"Transpose", transpose, {}});
  r.add({"Concat", concat, {}});
  r.add({"Split", split, {1}});
  r.add({"Slice", slice, {1, 2, 3, 4}});
  r.add({"Expand", expand, {1}});
  r.add({"Tile", tile, {1}});
  r.add({"DepthToSpace", depth_to_space, {}});
  r.add({"SpaceToDepth", space_to_depth, {}});
}

}  // namespace kiln
