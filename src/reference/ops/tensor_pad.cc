// Pad (opset-13..18 form: pads, constant_value and axes are inputs; modes constant, reflect, edge,
// and wrap from opset 19 since it costs one line).
//
// Negative pads crop. As in the ONNX reference, cropping happens first and the remaining positive
// pads are then filled from the cropped axis, so reflect/edge/wrap never read cropped elements.
// Each output axis gets a table mapping output index -> source index (-1: the constant), and the
// copy walks output rows through those tables.
#include <algorithm>
#include <cstring>
#include <limits>

#include "reference/kernel_util.h"
#include "reference/ops/tensor_movement.h"

namespace kiln {
namespace {

enum class PadMode { Constant, Reflect, Edge, Wrap };

PadMode parse_mode(const std::string& s) {
  if (s == "constant") return PadMode::Constant;
  if (s == "reflect") return PadMode::Reflect;
  if (s == "edge") return PadMode::Edge;
  if (s == "wrap") return PadMode::Wrap;
  user_error("unsupported mode '", s, "' (expected constant, reflect, edge or wrap)");
}

// Index into an axis of length m (> 0) for a position j that may lie outside [0, m).
int64_t fold_index(int64_t j, int64_t m, PadMode mode) {
  switch (mode) {
    case PadMode::Edge: return std::clamp<int64_t>(j, 0, m - 1);
    case PadMode::Wrap: return ((j % m) + m) % m;
    case PadMode::Reflect: {
      // Reflection without repeating the edge has period 2(m-1); this matches numpy's "reflect"
      // even for pads longer than the axis.
      if (m == 1) return 0;
      const int64_t p = 2 * (m - 1), k = ((j % p) + p) % p;
      return k < m ? k : p - k;
    }
    case PadMode::Constant: break;
  }
  return -1;
}

std::vector<Tensor> pad(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 4);
  const Tensor& x = in[0];
  const int64_t rank = x.rank();
  const PadMode mode = parse_mode(node.attr_string("mode", "constant"));
  auto pads = int_values(in[1], "pads");
  for (int64_t p : pads)
    if (p == std::numeric_limits<int64_t>::min()) user_error("pad ", p, " is out of range");

  std::vector<int64_t> axes;
  if (in.size() > 3 && in[3].defined()) {
    std::vector<bool> seen(size_t(rank), false);
    for (int64_t a : int_values(in[3], "axes")) {
      int64_t ax = normalize_axis(a, rank);
      if (seen[size_t(ax)]) user_error("axis ", a, " appears twice in axes");
      seen[size_t(ax)] = true;
      axes.push_back(ax);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t na = axes.size();
  if (pads.size() != 2 * na) user_error("pads has ", pads.size(), " entries, expected ", 2 * na);
  std::vector<int64_t> begin(size_t(rank), 0), end(size_t(rank), 0);
  for (size_t i = 0; i < na; ++i) {
    begin[size_t(axes[i])] = pads[i];
    end[size_t(axes[i])] = pads[na + i];
  }

  Tensor fill(x.dtype(), {});
  if (mode == PadMode::Constant && in.size() > 2 && in[2].defined() && in[2].numel() > 0) {
    if (in[2].numel() != 1) user_error("constant_value must be a scalar, got shape ", shape_str(in[2].shape()));
    fill = in[2].reshaped({}).cast(x.dtype());
  }

  // Output shape first (allocating the output validates its size), then the index tables.
  Shape out_shape(static_cast<size_t>(rank));
  const size_t ur = size_t(rank);
  std::vector<int64_t> crop_lo(ur), pad_lo(ur), kept(ur);
  for (int64_t d = 0; d < rank; ++d) {
    const size_t du = size_t(d);
    crop_lo[du] = std::max<int64_t>(0, -begin[du]);
    const int64_t crop_hi = std::max<int64_t>(0, -end[du]);
    pad_lo[du] = std::max<int64_t>(0, begin[du]);
    const int64_t pad_hi = std::max<int64_t>(0, end[du]);
    if (crop_lo[du] > x.dim(d) || crop_hi > x.dim(d) - crop_lo[du])
      user_error("pads crop more than the ", x.dim(d), " elements of axis ", d);
    const int64_t m = x.dim(d) - crop_lo[du] - crop_hi;
    if (m == 0 && mode != PadMode::Constant && pad_lo[du] + pad_hi > 0)
      user_error("cannot ", node.attr_string("mode", ""), "-pad axis ", d, ", which is empty");
    kept[du] = m;
    if (__builtin_add_overflow(pad_lo[du], m, &out_shape[du]) ||
        __builtin_add_overflow(out_shape[du], pad_hi, &out_shape[du]))
      user_error("pads ", pad_lo[du], " and ", pad_hi, " are too large");
  }
  Tensor out(x.dtype(), out_shape);
  if (out.numel() == 0) return {out};
  if (rank == 0) return {x.clone()};

  std::vector<std::vector<int64_t>> maps(ur);
  for (size_t du = 0; du < size_t(rank); ++du) {
    auto& map = maps[du];
    map.resize(size_t(out_shape[du]));
    for (int64_t o = 0; o < out_shape[du]; ++o) {
      const int64_t j = o - pad_lo[du], m = kept[du];
      const int64_t k = (j >= 0 && j < m) ? j : fold_index(j, m, mode);
      map[size_t(o)] = k < 0 ? -1 : crop_lo[du] + k;
    }
  }

  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const uint8_t*>(x.raw());
  const auto* fillp = static_cast<const uint8_t*>(fill.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const auto in_strides = shape_strides(x.shape());
  const auto& inner_map = maps.back();
  const int64_t inner = out_shape.back(), rows = out.numel() / inner;
  std::vector<int64_t> counter(size_t(rank), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    bool fill_row = false;
    for (int64_t d = 0; d + 1 < rank && !fill_row; ++d) {
      const int64_t k = maps[size_t(d)][size_t(counter[size_t(d)])];
      fill_row = k < 0;
      base += k * in_strides[size_t(d)];
    }
    for (int64_t j = 0; j < inner; ++j, dst += es) {
      const int64_t k = fill_row ? -1 : inner_map[size_t(j)];
      std::memcpy(dst, k < 0 ? fillp : src + size_t(base + k) * es, es);
    }
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (++counter[size_t(d)] < out_shape[size_t(d)]) break;
      counter[size_t(d)] = 0;
    }
  }
  return {out};
}

}  // namespace

void register_pad_op(OpRegistry& r) { r.add({"Pad", pad, {1, 3}}); }

}  // namespace kiln
