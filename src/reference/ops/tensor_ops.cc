// Shape and data-movement reference kernels. This file holds the ops that only reinterpret a
// tensor's shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity, inference Dropout: they share the
// input's storage, no copy) or describe it (Shape, Size, Constant). Ops that move elements live in
// tensor_layout_ops.cc and tensor_pad.cc; Gather and friends in index_ops.cc.
#include <algorithm>

#include "reference/kernel_util.h"
#include "reference/ops/tensor_internal.h"
#include "reference/ops/tensor_movement.h"

namespace kiln {
namespace {

std::vector<Tensor> reshape(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  Shape shape = int_values(in[1], "shape");
  const bool allowzero = node.attr_int("allowzero", 0) != 0;
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t& d = shape[i];
    if (d == 0 && !allowzero) {
      // 0 means "keep the input's dim here" unless allowzero asks for a literal 0.
      if (int64_t(i) >= x.rank()) user_error("shape ", shape_str(shape), " copies dim ", i, " of a rank-", x.rank(), " input");
      d = x.dim(int64_t(i));
    }
    if (d == -1) {
      if (infer >= 0) user_error("shape ", shape_str(in[1].to_int64_vector()), " has more than one -1");
      infer = int64_t(i);
    } else if (d < 0) {
      user_error("shape ", shape_str(in[1].to_int64_vector()), " has invalid dimension ", d);
    } else {
      known = shape_numel({known, d});
    }
  }
  if (infer >= 0) {
    if (allowzero && std::count(shape.begin(), shape.end(), 0) > 0)
      user_error("shape ", shape_str(shape), " has both 0 and -1 with allowzero=1");
    if (known == 0 || x.numel() % known != 0)
      user_error("cannot reshape ", shape_str(x.shape()), " to ", shape_str(in[1].to_int64_vector()));
    shape[size_t(infer)] = x.numel() / known;
  }
  if (shape_numel(shape) != x.numel())
    user_error("cannot reshape ", shape_str(x.shape()), " (", x.numel(), " elements) to ", shape_str(shape));
  return {x.reshaped(shape)};
}

std::vector<Tensor> flatten(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  int64_t axis = node.attr_int("axis", 1);
  // Unlike most ops, axis == rank is valid (everything goes to the outer dim).
  if (axis < -x.rank() || axis > x.rank()) user_error("axis ", axis, " is out of range for rank ", x.rank());
  if (axis < 0) axis += x.rank();
  return {x.reshaped({dims_product(x.shape(), 0, axis), dims_product(x.shape(), axis, x.rank())})};
}

// Normalised, duplicate-free axes for a tensor of `rank`.
std::vector<int64_t> unique_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> r;
  for (int64_t a : axes) {
    int64_t ax = normalize_axis(a, rank);
    if (std::find(r.begin(), r.end(), ax) != r.end()) user_error("axis ", a, " appears twice in axes");
    r.push_back(ax);
  }
  return r;
}

std::vector<Tensor> squeeze(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 2);
  const Tensor& x = in[0];
  std::vector<bool> drop(size_t(x.rank()), false);
  // No (or empty) axes: drop every size-1 dim, as onnxruntime does for an empty axes tensor.
  if (in.size() > 1 && in[1].defined() && in[1].numel() > 0) {
    for (int64_t ax : unique_axes(int_values(in[1], "axes"), x.rank())) {
      if (x.dim(ax) != 1) user_error("cannot squeeze axis ", ax, " of size ", x.dim(ax));
      drop[size_t(ax)] = true;
    }
  } else {
    for (int64_t d = 0; d < x.rank(); ++d) drop[size_t(d)] = x.dim(d) == 1;
  }
  Shape out;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (!drop[size_t(d)]) out.push_back(x.dim(d));
  return {x.reshaped(out)};
}

std::vector<Tensor> unsqueeze(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  const Tensor& x = in[0];
  auto axes = int_values(in[1], "axes");
  // Axes index the output, whose rank counts the inserted dims.
  const int64_t out_rank = x.rank() + int64_t(axes.size());
  std::vector<bool> inserted(size_t(out_rank), false);
  for (int64_t ax : unique_axes(axes, out_rank)) inserted[size_t(ax)] = true;
  Shape out;
  int64_t next = 0;
  for (int64_t d = 0; d < out_rank; ++d) out.push_back(inserted[size_t(d)] ? 1 : x.dim(next++));
  return {x.reshaped(out)};
}

std::vector<Tensor> shape_op(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const int64_t rank = in[0].rank();
  // start/end slice the dims like Python, clamped to [0, rank].
  auto clamp_dim = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp_dim(node.attr_int("start", 0));
  const int64_t end = node.has_attr("end") ? clamp_dim(node.attr_int("end", rank)) : rank;
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(in[0].dim(d));
  return {Tensor::from_vector<int64_t>(dims, {int64_t(dims.size())})};
}

std::vector<Tensor> size_op(const Node&, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  return {Tensor::scalar<int64_t>(in[0].numel())};
}

std::vector<Tensor> identity(const Node&, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  return {in[0]};
}

std::vector<Tensor> dropout(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 3);
  const Tensor& x = in[0];
  auto scalar_input = [&](size_t i, const char* what) -> const Tensor* {
    if (in.size() <= i || !in[i].defined()) return nullptr;
    if (in[i].numel() != 1) user_error(what, " must be a scalar, got shape ", shape_str(in[i].shape()));
    return &in[i];
  };
  const Tensor* ratio = scalar_input(1, "ratio");
  const Tensor* training = scalar_input(2, "training_mode");
  if (training && training->as_int64(0) != 0) {
    const double r = ratio ? ratio->as_double(0) : 0.5;
    if (!(r >= 0.0 && r < 1.0)) user_error("ratio must be in [0, 1), got ", r);
    // Random masks would make the oracle nondeterministic; ratio 0 keeps everything, so it is exact.
    if (r > 0.0) user_error("training-mode Dropout is not supported");
  }
  std::vector<Tensor> outs{x};
  if (node.num_outputs() > 1) {
    Tensor mask(DType::Bool, x.shape());
    std::fill_n(mask.data<bool>(), mask.numel(), true);
    outs.push_back(mask);
  }
  return outs;
}

std::vector<Tensor> constant(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 0, 0);
  int set = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                        "value_strings", "sparse_value"})
    set += node.has_attr(a);
  if (set != 1) user_error("exactly one value attribute must be set, got ", set);
  if (node.has_attr("value_string") || node.has_attr("value_strings"))
    user_error("string constants are not supported (kiln has no string tensors)");
  if (node.has_attr("sparse_value")) user_error("sparse constants are not supported");
  if (const Tensor* t = node.attr_tensor("value")) return {*t};
  if (node.has_attr("value_float")) return {Tensor::scalar<float>(node.attr_float("value_float", 0))};
  if (node.has_attr("value_int")) return {Tensor::scalar<int64_t>(node.attr_int("value_int", 0))};
  if (node.has_attr("value_floats")) {
    auto v = node.attr_floats("value_floats");
    return {Tensor::from_vector<float>(v, {int64_t(v.size())})};
  }
  auto v = node.attr_ints("value_ints");
  return {Tensor::from_vector<int64_t>(v, {int64_t(v.size())})};
}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  r.add({"Reshape", reshape, {1}});
  r.add({"Flatten", flatten, {}});
  r.add({"Squeeze", squeeze, {1}});
  r.add({"Unsqueeze", unsqueeze, {1}});
  r.add({"Shape", shape_op, {}});
  r.add({"Size", size_op, {}});
  r.add({"Identity", identity, {}});
  r.add({"Dropout", dropout, {}});
  r.add({"Constant", constant, {}});
  register_layout_ops(r);
  register_pad_op(r);
  register_index_ops(r);
}

}  // namespace kiln
