// Normalization reference kernels: BatchNormalization (opset-15 form, inference and training mode),
// InstanceNormalization, LayerNormalization (with the optional Mean and InvStdDev outputs), LRN and
// MeanVarianceNormalization.
//
// All statistics and the normalization arithmetic run in double and are rounded to the output type
// once (see nn_internal.h): means over N*H*W elements summed sequentially in float32 drift from the
// pairwise sums the ONNX references use. Variances are two-pass (mean first, then squared
// deviations), except MeanVarianceNormalization, whose definition is E[x^2] - E[x]^2.
#include <algorithm>
#include <cmath>

#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"

namespace kiln::nn {

namespace {

const std::initializer_list<DType> kNormTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

std::vector<double> to_doubles(const Tensor& t) {
  const Tensor d = t.dtype() == DType::Float64 ? t : t.cast(DType::Float64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

// The input as doubles and a double tensor of the same shape for the result; `finish` rounds the
// result back to the input's type.
struct DoubleIO {
  std::vector<double> x;
  Tensor y;
  explicit DoubleIO(const Tensor& in) : x(to_doubles(in)), y(DType::Float64, in.shape()) {}
  double* out() { return y.data<double>(); }
  Tensor finish(DType dt) const { return dt == DType::Float64 ? y : y.cast(dt); }
};

void expect_channel_vector(const Tensor& t, int64_t channels, const char* what) {
  expect_float(t, what);
  if (t.shape() != Shape{channels}) user_error(what, " ", shape_str(t.shape()), " must have shape [", channels, "]");
}

// Y = scale * (X - mean) / sqrt(var + epsilon) + B per channel (dim 1). In training mode mean and
// var are the batch statistics over all dims but 1 (population variance), and outputs 1 and 2 are
// the updated running statistics: running * momentum + batch * (1 - momentum). In inference mode
// any requested outputs 1 and 2 are the unchanged input statistics (older opsets listed them as
// optional training outputs; passing the inputs through is the inference-mode value of both).
std::vector<Tensor> batch_norm_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 5, 5);
  const Tensor& x = in[0];
  expect_dtype_in(x, kNormTypes, "X");
  if (x.rank() < 2) user_error("X must have rank >= 2 (N x C x ...), got ", shape_str(x.shape()));
  const int64_t batch = x.dim(0), channels = x.dim(1), plane = dims_product(x.shape(), 2, x.rank());
  const char* names[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) expect_channel_vector(in[size_t(i)], channels, names[i - 1]);
  const double eps = node.attr_float("epsilon", 1e-5f);
  const double momentum = node.attr_float("momentum", 0.9f);
  const bool training = node.attr_int("training_mode", 0) != 0;
  const std::vector<double> scale = to_doubles(in[1]), bias = to_doubles(in[2]);
  std::vector<double> mean = to_doubles(in[3]), var = to_doubles(in[4]);

  DoubleIO io(x);
  auto at = [&](int64_t n, int64_t c, int64_t i) { return (n * channels + c) * plane + i; };
  if (training) {
    const double count = double(batch * plane);
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < plane; ++i) sum += io.x[size_t(at(n, c, i))];
      const double m = sum / count;
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t i = 0; i < plane; ++i) sq += (io.x[size_t(at(n, c, i))] - m) * (io.x[size_t(at(n, c, i))] - m);
      mean[size_t(c)] = m;
      var[size_t(c)] = sq / count;
    }
  }
  double* y = io.out();
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t c = 0; c < channels; ++c) {
      const size_t cu = size_t(c);
      const double inv_std = 1.0 / std::sqrt(var[cu] + eps);
      for (int64_t i = 0; i < plane; ++i) {
        const size_t e = size_t(at(n, c, i));
        y[e] = scale[cu] * (io.x[e] - mean[cu]) * inv_std + bias[cu];
      }
    }

  std::vector<Tensor> out{io.finish(x.dtype())};
  if (node.num_outputs() > 1) {
    Tensor running_mean = in[3], running_var = in[4];
    if (training) {
      Tensor rm(DType::Float64, {channels}), rv(DType::Float64, {channels});
      for (int64_t c = 0; c < channels; ++c) {
        rm.data<double>()[c] = in[3].as_double(c) * momentum + mean[size_t(c)] * (1 - momentum);
        rv.data<double>()[c] = in[4].as_double(c) * momentum + var[size_t(c)] * (1 - momentum);
      }
      running_mean = rm.cast(in[3].dtype());
      running_var = rv.cast(in[4].dtype());
    }
    out.push_back(running_mean);
    out.push_back(running_var);
  }
  return out;
}

// Y = scale[c] * (X - mean) / sqrt(var + epsilon) + B[c], statistics per (n, c) over the spatial dims.
std::vector<Tensor> instance_norm_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 3, 3);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16}, "input");
  const Shape spatial = spatial_dims(x, 3, "input");
  const int64_t channels = x.dim(1), plane = shape_numel(spatial), planes = x.dim(0) * channels;
  expect_channel_vector(in[1], channels, "scale");
  expect_channel_vector(in[2], channels, "B");
  const double eps = node.attr_float("epsilon", 1e-5f);
  const std::vector<double> scale = to_doubles(in[1]), bias = to_doubles(in[2]);
  DoubleIO io(x);
  double* y = io.out();
  for (int64_t p = 0; p < planes; ++p) {
    const double* xp = io.x.data() + p * plane;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < plane; ++i) sum += xp[i];
    const double m = sum / double(plane);
    for (int64_t i = 0; i < plane; ++i) sq += (xp[i] - m) * (xp[i] - m);
    const double inv_std = 1.0 / std::sqrt(sq / double(plane) + eps);
    const size_t c = size_t(p % channels);
    for (int64_t i = 0; i < plane; ++i) y[p * plane + i] = scale[c] * (xp[i] - m) * inv_std + bias[c];
  }
  return {io.finish(x.dtype())};
}

// Normalizes over dims [axis, rank): Y = (X - mean) * inv_std_dev * Scale + B, where Scale and the
// optional B broadcast (numpy rules) to X's shape. Mean and InvStdDev = 1 / sqrt(var + epsilon)
// have X's shape with dims from `axis` on set to 1, and the type stash_type names.
std::vector<Tensor> layer_norm_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 3);
  const Tensor& x = in[0];
  expect_dtype_in(x, kNormTypes, "X");
  expect_same_dtype(x, in[1], "LayerNormalization");
  const bool has_bias = in.size() > 2 && in[2].defined();
  if (has_bias) expect_same_dtype(x, in[2], "LayerNormalization");
  if (x.rank() < 1) user_error("X must have rank >= 1");
  const int64_t axis = normalize_axis(node.attr_int("axis", -1), x.rank());
  const double eps = node.attr_float("epsilon", 1e-5f);
  const std::optional<DType> stash = dtype_from_onnx(node.attr_int("stash_type", 1));
  if (!stash || !is_float(*stash))
    user_error("stash_type must name a floating-point type, got ", node.attr_int("stash_type", 1));
  for (size_t i = 1; i < (has_bias ? 3u : 2u); ++i)
    if (in[i].rank() > x.rank() || broadcast_shapes({in[i].shape(), x.shape()}) != x.shape())
      user_error(i == 1 ? "Scale " : "B ", shape_str(in[i].shape()), " does not broadcast to X ", shape_str(x.shape()));

  const int64_t rows = dims_product(x.shape(), 0, axis), cols = dims_product(x.shape(), axis, x.rank());
  const std::vector<double> scale = to_doubles(in[1]);
  const std::vector<double> bias = has_bias ? to_doubles(in[2]) : std::vector<double>{};
  Shape stat_shape = x.shape();
  std::fill(stat_shape.begin() + axis, stat_shape.end(), 1);
  Tensor mean_t(DType::Float64, stat_shape), inv_t(DType::Float64, stat_shape);
  DoubleIO io(x);
  double* y = io.out();
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = io.x.data() + r * cols;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < cols; ++i) sum += xr[i];
    const double m = cols ? sum / double(cols) : 0.0;
    for (int64_t i = 0; i < cols; ++i) sq += (xr[i] - m) * (xr[i] - m);
    const double inv_std = 1.0 / std::sqrt((cols ? sq / double(cols) : 0.0) + eps);
    mean_t.data<double>()[r] = m;
    inv_t.data<double>()[r] = inv_std;
    for (int64_t i = 0; i < cols; ++i) y[r * cols + i] = (xr[i] - m) * inv_std;
  }
  // Scale and bias may broadcast along any dim, so they are applied by a walk over X's elements.
  std::vector<Shape> affine{in[1].shape()};
  if (has_bias) affine.push_back(in[2].shape());
  for (BroadcastIter it(x.shape(), affine); !it.done(); it.next()) {
    double v = y[it.index()] * scale[size_t(it.offset(0))];
    if (has_bias) v += bias[size_t(it.offset(1))];
    y[it.index()] = v;
  }
  std::vector<Tensor> out{io.finish(x.dtype())};
  if (node.num_outputs() > 1) out.push_back(mean_t.cast(*stash));
  if (node.num_outputs() > 2) out.push_back(inv_t.cast(*stash));
  return out;
}

// Local response normalization across channels: the sum of squares runs over channels
// c - floor((size-1)/2) .. c + ceil((size-1)/2) (clipped), and
// Y = X / (bias + alpha / size * square_sum) ^ beta.
std::vector<Tensor> lrn_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}, "X");
  const Shape spatial = spatial_dims(x, 3, "X");
  node.require_attr("size");
  const int64_t size = node.attr_int("size", 1);
  if (size < 1) user_error("size must be >= 1, got ", size);
  const double alpha = node.attr_float("alpha", 1e-4f), beta = node.attr_float("beta", 0.75f);
  const double bias = node.attr_float("bias", 1.0f);
  const int64_t channels = x.dim(1), plane = shape_numel(spatial);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  DoubleIO io(x);
  double* y = io.out();
  for (int64_t n = 0; n < x.dim(0); ++n)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t c0 = std::max<int64_t>(0, c - before), c1 = std::min(channels - 1, c + after);
      for (int64_t i = 0; i < plane; ++i) {
        double sq = 0;
        for (int64_t cc = c0; cc <= c1; ++cc) {
          const double v = io.x[size_t((n * channels + cc) * plane + i)];
          sq += v * v;
        }
        const size_t e = size_t((n * channels + c) * plane + i);
        y[e] = io.x[e] / std::pow(bias + alpha / double(size) * sq, beta);
      }
    }
  return {io.finish(x.dtype())};
}

// Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), expectations over `axes` (default [0, 2, 3]).
std::vector<Tensor> mvn_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 1, 1);
  const Tensor& x = in[0];
  expect_dtype_in(x, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}, "X");
  Shape group_shape = x.shape();  // X's shape with the reduced dims set to 1
  int64_t count = 1;
  std::vector<bool> seen(size_t(x.rank()), false);
  for (int64_t a : node.attr_ints("axes", {0, 2, 3})) {
    const size_t d = size_t(normalize_axis(a, x.rank()));
    if (seen[d]) user_error("axes lists axis ", a, " twice");
    seen[d] = true;
    count *= group_shape[d];
    group_shape[d] = 1;
  }
  const int64_t groups = shape_numel(group_shape);
  std::vector<double> sum(size_t(groups), 0.0), sq(size_t(groups), 0.0);
  DoubleIO io(x);
  for (BroadcastIter it(x.shape(), {group_shape}); !it.done(); it.next()) {
    const double v = io.x[size_t(it.index())];
    sum[size_t(it.offset(0))] += v;
    sq[size_t(it.offset(0))] += v * v;
  }
  for (int64_t gi = 0; gi < groups; ++gi) {
    const size_t g = size_t(gi);
    sum[g] /= double(count);
    // E[x^2] - E[x]^2 can round slightly below zero for constant groups.
    sq[g] = std::sqrt(std::max(0.0, sq[g] / double(count) - sum[g] * sum[g])) + 1e-9;
  }
  double* y = io.out();
  for (BroadcastIter it(x.shape(), {group_shape}); !it.done(); it.next()) {
    const size_t g = size_t(it.offset(0));
    y[it.index()] = (io.x[size_t(it.index())] - sum[g]) / sq[g];
  }
  return {io.finish(x.dtype())};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.add({"BatchNormalization", batch_norm_kernel, {}});
  r.add({"InstanceNormalization", instance_norm_kernel, {}});
  r.add({"LayerNormalization", layer_norm_kernel, {}});
  r.add({"LRN", lrn_kernel, {}});
  r.add({"MeanVarianceNormalization", mvn_kernel, {}});
}

}  // namespace kiln::nn
