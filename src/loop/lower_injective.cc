// Injective ops as index remaps: each output position reads one input position (or a constant), so
// the producer of the input is recomputed there instead of being stored. The index arithmetic
// follows the reference kernels (src/reference/ops/tensor_*.cc, index_*.cc): Slice's ONNX
// clamping, Pad's crop-then-fill and fold rules, Gather's negative indices. Constant index inputs
// are read now, at lowering time, and validated; a Gather (GatherElements, GatherND) with run-time
// indices loads them through checked_index (loop_ir.h): negatives wrap, and an index outside the
// axis is recorded in the kernel's status word, which the runtime reports after the kernel as the
// reference kernel reports it — the load itself stays in bounds either way.
#include <algorithm>
#include <set>

#include "loop/lower_internal.h"
#include "loop/runtime_params.h"
#include "reference/kernel_util.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

const std::set<std::string> kViews = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};

std::vector<int64_t> checked_perm(const Node& n, int64_t rank) {
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[size_t(i)] = rank - 1 - i;
  if (n.has_attr("perm")) perm = n.attr_ints("perm");
  if (int64_t(perm.size()) != rank) refuse("Transpose perm does not match the input rank");
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[size_t(p)]) refuse("Transpose perm is not a permutation");
    seen[size_t(p)] = true;
  }
  return perm;
}

// Per-axis (start, step) of a Slice, clamped exactly as the reference kernel does.
void slice_params(const Node& n, const Shape& in, std::vector<int64_t>& start, std::vector<int64_t>& step) {
  const int64_t rank = int64_t(in.size());
  if (!n.input(1) || !n.input(2)) refuse("Slice needs starts and ends");
  auto starts = *constant_ints(n, 1, "starts");
  auto ends = *constant_ints(n, 2, "ends");
  const size_t cnt = starts.size();
  std::vector<int64_t> axes(cnt), steps(cnt, 1);
  for (size_t i = 0; i < cnt; ++i) axes[i] = int64_t(i);
  if (auto a = constant_ints(n, 3, "axes")) axes = *a;
  if (auto s = constant_ints(n, 4, "steps")) steps = *s;
  if (ends.size() != cnt || axes.size() != cnt || steps.size() != cnt) refuse("Slice inputs have different lengths");
  start.assign(size_t(rank), 0);
  step.assign(size_t(rank), 1);
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < cnt; ++i) {
    const int64_t ax = normalize_axis(axes[i], rank);
    if (seen[size_t(ax)]) refuse("Slice axis appears twice");
    seen[size_t(ax)] = true;
    const int64_t dim = in[size_t(ax)];
    if (steps[i] == 0) refuse("Slice step is 0");
    const int64_t max_step = std::max<int64_t>(dim, 1);
    const int64_t st = std::clamp(steps[i], -max_step, max_step);
    int64_t s = starts[i] < 0 ? starts[i] + dim : starts[i];
    s = st > 0 ? std::clamp<int64_t>(s, 0, dim) : std::clamp<int64_t>(s, 0, dim - 1);
    start[size_t(ax)] = s;
    step[size_t(ax)] = st;
  }
}

// Index into an axis of length m (> 0) for a position j that may lie outside [0, m), as the
// reference Pad's fold_index.
Expr fold(Expr j, int64_t m, const std::string& mode) {
  if (m == 1) return int_imm(0);
  if (mode == "edge") return clamp(std::move(j), 0, m - 1);
  Expr M = int_imm(m);
  if (mode == "wrap") return binary(BinOp::Mod, add(binary(BinOp::Mod, j, M), M), M);
  // reflect: period 2(m-1), mirrored in its second half.
  const int64_t p = 2 * (m - 1);
  Expr P = int_imm(p);
  Expr k = binary(BinOp::Mod, add(binary(BinOp::Mod, j, P), P), P);
  return select(binary(BinOp::Lt, k, M), k, sub(P, k));
}


bool is_index_type(DType t) { return t == DType::Int32 || t == DType::Int64; }

// An index loaded from the index input `ind` into an axis of dim (> 0) elements: constant indices
// were validated at lowering time and only wrap (negatives count from the end); run-time ones are
// checked (checked_index: the kernel reports one out of range).
Expr index_into(const Value* ind, Expr i, int64_t dim, int64_t site) {
  if (!ind->is_constant()) return checked_index(std::move(i), dim, site);
  i = cast(DType::Int64, std::move(i));
  return select(binary(BinOp::Lt, i, int_imm(0)), add(i, int_imm(dim)), i);
}

}  // namespace

std::string unsupported_injective(const Node& n, bool any_length) {
  const std::string& op = n.op_type();
  static const std::set<std::string> ok = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout",
                                           "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
                                           "Expand", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "Trilu",
                                           "EyeLike", "ConstantOfShape", "GatherND", "OneHot", "Range", "CumSum", "TopK"};
  if (!ok.count(op)) return cat(op, " has no loop form");
  if (n.num_outputs() == 0) return cat(op, " has no outputs");
  if (op != "ConstantOfShape" && (n.num_inputs() == 0 || !n.input(0))) return cat(op, " has no input 0");
  if (has_runtime_params(n)) return runtime_params_refusal(n);
  if (op == "GatherND" && (n.num_inputs() < 2 || !n.input(1) || !is_index_type(n.input(1)->dtype())))
    return "GatherND indices must be int32 or int64";
  if (op == "OneHot") {
    if (n.num_inputs() < 3 || !n.input(2)) return "OneHot needs depth and values";
    if (n.input(0)->dtype() == DType::Bool) return "OneHot indices must be numeric";
    if (shape_numel(n.input(2)->shape()) != 2) return "OneHot values must hold [off, on]";
  }
  if (op == "CumSum") {
    const DType t = n.input(0)->dtype();
    if (!(is_float(t) || t == DType::Int32 || t == DType::Int64 || t == DType::UInt32 || t == DType::UInt64))
      return cat("CumSum does not accept ", dtype_name(t));
    const Value* ax = n.num_inputs() > 1 ? n.input(1) : nullptr;
    if (!ax || !is_index_type(ax->dtype()) || shape_numel(ax->shape()) != 1) return "CumSum axis must be an int32 or int64 scalar";
    for (const char* a : {"exclusive", "reverse"})
      if (n.attr_int(a, 0) != 0 && n.attr_int(a, 0) != 1) return cat("CumSum ", a, " must be 0 or 1");
    // Each output element is the running sum spelled out over its row (an unrolled scan): the rows
    // scanned, over every axis the run-time axis may name, are bounded; longer ones are the scan
    // emitter's (lower_scan.cc), alone.
    const Shape& xs = n.input(0)->shape();
    if (xs.empty()) return "CumSum of a scalar";
    int64_t len = 0;
    if (ax->is_constant()) {
      const int64_t a = ax->constant().as_int64(0), r = int64_t(xs.size());
      if (a < -r || a >= r) return "CumSum axis is out of range";
      len = xs[size_t(a < 0 ? a + r : a)];
    } else {
      for (int64_t d : xs) len += d;
    }
    if (len > kMaxScanLength && !any_length) return row_loop_reason(n);
  }
  if (op == "TopK") {
    const Shape& xs = n.input(0)->shape();
    const DType t = n.input(0)->dtype();
    if (t == DType::Bool || t == DType::Undefined) return cat("TopK does not accept ", dtype_name(t));
    if (xs.empty() || n.num_outputs() != 2) return "TopK needs an input of rank >= 1 and two outputs";
    const int64_t r = int64_t(xs.size()), a = n.attr_int("axis", -1);
    if (a < -r || a >= r) return "TopK axis is out of range";
    for (const char* at : {"largest", "sorted"})
      if (n.attr_int(at, 1) != 0 && n.attr_int(at, 1) != 1) return cat("TopK ", at, " must be 0 or 1");
    const int64_t len = xs[size_t(a < 0 ? a + r : a)];
    if (n.output(0)->shape().size() != xs.size() || n.output(0)->shape()[size_t(a < 0 ? a + r : a)] > len)
      return "TopK output does not match its input";
    if (len > kMaxSelectLength && !any_length) return row_loop_reason(n);
  }
  if (op == "Range") {
    for (size_t i = 0; i < 3; ++i)
      if (n.num_inputs() <= i || !n.input(i) || shape_numel(n.input(i)->shape()) != 1)
        return "Range start, limit and delta must be scalars";
    if (n.input(0)->dtype() == DType::Bool) return "Range does not support bool";
  }
  if ((op == "Gather" || op == "GatherElements") && (n.num_inputs() < 2 || !n.input(1) || !is_index_type(n.input(1)->dtype())))
    return cat(op, " indices must be int32 or int64");
  if (op == "Dropout" && n.input(2)) {
    const Value* tm = n.input(2);
    if (!tm->is_constant() || tm->constant().numel() != 1) return "Dropout training_mode is computed at run time";
    if (tm->constant().as_int64(0) != 0) return "training-mode Dropout is not lowered";
  }
  return "";
}

Expr Lowerer::lower_injective(const Node& n, size_t slot, Index& idx) {
  const std::string& op = n.op_type();
  const Value* x = n.input(0);

  if (kViews.count(op) || op == "Dropout") {
    if (op == "Dropout" && slot == 1) return int_imm(1, DType::Bool);  // inference mask: all kept
    if (x->shape() == idx.shape) return value_at(x, idx);
    return value_at(x, Index::from_flat(x->shape(), flat(idx)));
  }
  if (op == "Expand") return value_at(x, broadcast(idx, x->shape()));
  if (op == "Pad") return lower_pad(n, idx);
  if (op == "Concat") return lower_concat(n, idx);
  if (op == "Gather") return lower_gather(n, idx);
  if (op == "GatherElements") return lower_gather_elements(n, idx);
  if (op == "DepthToSpace" || op == "SpaceToDepth") return lower_space_depth(n, idx);
  if (op == "GatherND") return lower_gather_nd(n, idx);
  if (op == "OneHot") return lower_one_hot(n, idx);
  if (op == "Range") return lower_range(n, idx);
  if (op == "CumSum") return lower_cumsum(n, idx);
  if (op == "TopK") return lower_topk(n, slot, idx);

  if (op == "ConstantOfShape") {
    const Tensor* v = n.attr_tensor("value");
    if (v && v->numel() != 1) refuse("ConstantOfShape value must have one element");
    return v ? tensor_imm(*v, 0) : float_imm(0.0, DType::Float32);
  }
  const Shape& in = x->shape();
  const int64_t rank = int64_t(in.size());
  if (op == "EyeLike") {
    if (idx.shape.size() != 2) refuse("EyeLike input must have rank 2");
    const DType dt = n.output(0)->dtype();
    const auto& d = dims(idx);
    Expr on_diag = binary(BinOp::Eq, sub(d[1], d[0]), int_imm(n.attr_int("k", 0)));
    return select(on_diag, imm(1, dt), imm(0, dt));
  }

  const auto& d = dims(idx);
  std::vector<Expr> r(d.size());
  if (op == "Transpose") {
    auto perm = checked_perm(n, rank);
    for (size_t k = 0; k < perm.size(); ++k) r[size_t(perm[k])] = d[k];
  } else if (op == "Slice" && has_runtime_params(n)) {
    return lower_runtime_slice(n, idx);
  } else if (op == "Slice") {
    std::vector<int64_t> start, step;
    slice_params(n, in, start, step);
    for (size_t k = 0; k < r.size(); ++k) r[k] = add(int_imm(start[k]), mul(d[k], int_imm(step[k])));
  } else if (op == "Split") {
    const int64_t axis = normalize_axis(n.attr_int("axis", 0), rank);
    int64_t off = 0;
    for (size_t j = 0; j < slot; ++j) off += n.output(j)->shape()[size_t(axis)];
    r = d;
    r[size_t(axis)] = add(d[size_t(axis)], int_imm(off));
  } else if (op == "Tile") {
    for (size_t k = 0; k < r.size(); ++k)
      r[k] = in[k] == idx.shape[k] ? d[k] : in[k] == 1 ? int_imm(0) : mod(d[k], int_imm(in[k]));
  } else if (op == "Trilu") {
    if (rank < 2) refuse("Trilu input must have rank >= 2");
    // k may be any int64: clamped to [-rows, cols] (as the reference) it changes no result and
    // keeps the comparison free of overflow. A run-time k is loaded and clamped the same way.
    const int64_t rows = in[size_t(rank - 2)], cols = in[size_t(rank - 1)];
    Expr k = int_imm(0);
    if (const Value* kv = n.input(1)) {
      if (!is_integer(kv->dtype()) || shape_numel(kv->shape()) != 1) refuse("Trilu k must be an integer scalar");
      k = kv->is_constant() ? int_imm(std::clamp<int64_t>(kv->constant().as_int64(0), -rows, cols))
                            : clamp(cast(DType::Int64, value_at(kv, Index::zero(kv->shape()))), -rows, cols);
    }
    Expr diff = sub(d[size_t(rank - 1)], d[size_t(rank - 2)]);
    Expr keep = binary(n.attr_int("upper", 1) != 0 ? BinOp::Ge : BinOp::Le, diff, k);
    const DType dt = x->dtype();
    return select(keep, value_at(x, idx), imm(0, dt));
  } else {
    KILN_CHECK(false, "injective op ", op, " passed the support check but has no lowering");
  }
  return value_at(x, Index::from_dims(in, std::move(r)));
}

Expr Lowerer::lower_concat(const Node& n, Index& idx) {
  if (!n.has_attr("axis")) refuse("Concat needs an axis");
  const int64_t rank = int64_t(idx.shape.size());
  if (rank == 0) refuse("Concat of scalars");
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), rank);
  const auto& d = dims(idx);
  const Expr j = d[size_t(axis)];
  struct Part {
    const Value* v;
    int64_t off, size;
  };
  std::vector<Part> parts;
  int64_t off = 0;
  for (const Value* v : n.inputs()) {
    if (!v) refuse("Concat input is missing");
    const int64_t s = v->shape()[size_t(axis)];
    if (s > 0) parts.push_back({v, off, s});
    off += s;
  }
  if (parts.empty()) refuse("Concat of empty inputs");
  // Nested selects from the last part; every part's index is clamped into it, so the parts not
  // selected still load in bounds.
  Expr acc;
  for (size_t p = parts.size(); p-- > 0;) {
    const Part& part = parts[p];
    std::vector<Expr> r = d;
    Expr local = sub(j, int_imm(part.off));
    if (parts.size() > 1) {
      if (p == 0) local = binary(BinOp::Min, local, int_imm(part.size - 1));
      else if (p + 1 == parts.size()) local = binary(BinOp::Max, local, int_imm(0));
      else local = clamp(local, 0, part.size - 1);
    }
    r[size_t(axis)] = local;
    Expr v = value_at(part.v, Index::from_dims(part.v->shape(), std::move(r)));
    acc = !acc ? v : select(binary(BinOp::Lt, j, int_imm(part.off + part.size)), v, acc);
  }
  return acc;
}

// Pad's fill value (constant mode; null otherwise): constant_value cast to x's type, as the
// reference does.
Expr Lowerer::pad_fill(const Node& n, const std::string& mode) {
  if (mode != "constant") return nullptr;
  const Value* x = n.input(0);
  const Value* cv = n.input(2);
  if (!cv || shape_numel(cv->shape()) == 0) return imm(0, x->dtype());
  if (shape_numel(cv->shape()) != 1) refuse("Pad constant_value must be a scalar");
  if (cv->is_constant()) return tensor_imm(cv->constant().reshaped({}).cast(x->dtype()), 0);
  if (cv->dtype() != x->dtype()) refuse("Pad constant_value has another type than the data");
  return value_at(cv, Index::zero(cv->shape()));
}

Expr Lowerer::lower_pad(const Node& n, Index& idx) {
  const Value* x = n.input(0);
  const Shape& in = x->shape();
  const int64_t rank = int64_t(in.size());
  const std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    refuse(cat("Pad mode '", mode, "' is not supported"));
  if (has_runtime_params(n)) return lower_runtime_pad(n, idx, pad_fill(n, mode));
  auto pads = constant_ints(n, 1, "pads");
  if (!pads) refuse("Pad has no pads");
  std::vector<int64_t> axes;
  if (auto a = constant_ints(n, 3, "axes")) {
    for (int64_t ax : *a) axes.push_back(normalize_axis(ax, rank));
    std::set<int64_t> u(axes.begin(), axes.end());
    if (u.size() != axes.size()) refuse("Pad axis appears twice");
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  if (pads->size() != 2 * axes.size()) refuse("Pad pads do not match the axes");
  std::vector<int64_t> begin(size_t(rank), 0), end(size_t(rank), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    begin[size_t(axes[i])] = (*pads)[i];
    end[size_t(axes[i])] = (*pads)[axes.size() + i];
  }

  const Expr fill = pad_fill(n, mode);
  if (rank == 0) return value_at(x, idx);

  const auto& d = dims(idx);
  std::vector<Expr> r(static_cast<size_t>(rank));
  Expr inside;  // constant mode: the position lies in the (cropped) input
  bool empty = false;
  for (size_t k = 0; k < size_t(rank); ++k) {
    const int64_t crop_lo = std::max<int64_t>(0, -begin[k]), crop_hi = std::max<int64_t>(0, -end[k]);
    const int64_t pad_lo = std::max<int64_t>(0, begin[k]), pad_hi = std::max<int64_t>(0, end[k]);
    if (crop_lo > in[k] || crop_hi > in[k] - crop_lo) refuse("Pad crops more than the axis holds");
    const int64_t m = in[k] - crop_lo - crop_hi;
    if (pad_lo + m + pad_hi != idx.shape[k]) refuse("Pad output shape does not match its pads");
    Expr j = sub(d[k], int_imm(pad_lo));
    if (pad_lo == 0 && pad_hi == 0) {
      r[k] = add(j, int_imm(crop_lo));
      continue;
    }
    if (m == 0) {
      if (mode != "constant") refuse("Pad of an empty axis");
      empty = true;
      continue;
    }
    if (mode == "constant") {
      // Only the padded sides need a test (and a clamp, so the load stays in bounds).
      Expr lo_ok = binary(BinOp::Ge, j, int_imm(0)), hi_ok = binary(BinOp::Lt, j, int_imm(m));
      Expr in_range = pad_lo == 0 ? hi_ok : pad_hi == 0 ? lo_ok : binary(BinOp::And, lo_ok, hi_ok);
      inside = inside ? binary(BinOp::And, inside, in_range) : in_range;
      Expr kept = pad_lo == 0   ? binary(BinOp::Min, j, int_imm(m - 1))
                  : pad_hi == 0 ? binary(BinOp::Max, j, int_imm(0))
                                : clamp(j, 0, m - 1);
      r[k] = add(kept, int_imm(crop_lo));
    } else {
      r[k] = add(fold(j, m, mode), int_imm(crop_lo));
    }
  }
  if (empty) return fill;
  Expr v = value_at(x, Index::from_dims(in, std::move(r)));
  return inside ? select(inside, v, fill) : v;
}

Expr Lowerer::lower_gather(const Node& n, Index& idx) {
  const Value* data = n.input(0);
  const Value* ind = n.input(1);
  const int64_t r = int64_t(data->shape().size()), q = int64_t(ind->shape().size());
  if (r < 1) refuse("Gather data must have rank >= 1");
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), r);
  const int64_t dim = data->shape()[size_t(axis)];
  const auto& d = dims(idx);

  // Constant indices are read now: validated (the reference kernel rejects an out-of-range index),
  // wrapped, and when they form an arithmetic progression a + b*p over their flat position p
  // (one index, [0, 1, 2], every other row...) turned into index arithmetic instead of a load.
  std::vector<Expr> id(d.begin() + axis, d.begin() + axis + q);
  Index at_ind = Index::from_dims(ind->shape(), std::move(id));
  Expr pos;
  if (ind->is_constant()) {
    std::vector<int64_t> vals = ind->constant().to_int64_vector();
    for (int64_t& i : vals) {
      if (i < -dim || i >= dim) refuse(cat("Gather index ", i, " is out of range for a dimension of size ", dim));
      if (i < 0) i += dim;
    }
    const int64_t step = vals.size() > 1 ? vals[1] - vals[0] : 0;
    bool affine = true;
    for (size_t p = 0; p < vals.size() && affine; ++p) affine = vals[p] == vals[0] + step * int64_t(p);
    if (affine && !vals.empty()) pos = add(int_imm(vals[0]), mul(flat(at_ind), int_imm(step)));
  }
  if (!pos) {
    if (dim == 0) refuse("Gather from an empty axis");
    pos = index_into(ind, value_at(ind, at_ind), dim, index_check_site(n));
  }
  std::vector<Expr> di(d.begin(), d.begin() + axis);
  di.push_back(pos);
  di.insert(di.end(), d.begin() + axis + q, d.end());
  return value_at(data, Index::from_dims(data->shape(), std::move(di)));
}

Expr Lowerer::lower_gather_elements(const Node& n, Index& idx) {
  const Value* data = n.input(0);
  const Value* ind = n.input(1);
  const Shape& ds = data->shape();
  const int64_t r = int64_t(ds.size());
  if (r < 1 || int64_t(ind->shape().size()) != r) refuse("GatherElements indices rank differs from data rank");
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), r);
  for (int64_t k = 0; k < r; ++k)
    if (k != axis && ind->shape()[size_t(k)] > ds[size_t(k)]) refuse("GatherElements indices exceed the data");
  const int64_t dim = ds[size_t(axis)];
  if (dim == 0) refuse("GatherElements from an empty axis");
  if (ind->is_constant())
    for (int64_t i : ind->constant().to_int64_vector())
      if (i < -dim || i >= dim) refuse(cat("GatherElements index ", i, " is out of range for a dimension of size ", dim));
  std::vector<Expr> di = dims(idx);
  di[size_t(axis)] = index_into(ind, value_at(ind, idx), dim, index_check_site(n));
  return value_at(data, Index::from_dims(ds, std::move(di)));
}

Expr Lowerer::lower_space_depth(const Node& n, Index& idx) {
  const Value* x = n.input(0);
  const Shape& in = x->shape();
  if (in.size() != 4) refuse(cat(n.op_type(), " input must be 4-D"));
  const int64_t b = n.attr_int("blocksize", 0);
  if (b <= 0) refuse(cat(n.op_type(), " blocksize must be positive"));
  const auto& d = dims(idx);
  Expr B = int_imm(b);
  std::vector<Expr> r(4);
  r[0] = d[0];
  if (n.op_type() == "DepthToSpace") {
    // out[n, c, y, x] = in[n, channel(c, y % b, x % b), y / b, x / b]
    const int64_t oc = idx.shape[1];
    if (in[1] != oc * b * b) refuse("DepthToSpace channels do not match its output");
    Expr b1 = mod(d[2], B), b2 = mod(d[3], B);
    const std::string mode = n.attr_string("mode", "DCR");
    if (mode == "DCR") r[1] = add(mul(add(mul(b1, B), b2), int_imm(oc)), d[1]);
    else if (mode == "CRD") r[1] = add(mul(d[1], int_imm(b * b)), add(mul(b1, B), b2));
    else refuse(cat("DepthToSpace mode '", mode, "' is not supported"));
    r[2] = div_floor(d[2], B);
    r[3] = div_floor(d[3], B);
  } else {
    // out[n, (b1 * b + b2) * C + c, y, x] = in[n, c, y * b + b1, x * b + b2]
    const int64_t c = in[1];
    if (in[2] % b != 0 || in[3] % b != 0) refuse("SpaceToDepth spatial size is not divisible by blocksize");
    Expr blk = div_floor(d[1], int_imm(c));
    r[1] = mod(d[1], int_imm(c));
    r[2] = add(mul(d[2], B), div_floor(blk, B));
    r[3] = add(mul(d[3], B), mod(blk, B));
  }
  return value_at(x, Index::from_dims(in, std::move(r)));
}

// GatherND: indices [..., m] (q dims) hold m-tuples indexing data dims [b, b+m) after b shared
// batch dims; the output is indices.shape[:-1] ++ data.shape[b+m:]. Each tuple element is loaded at
// (the output's first q-1 coordinates, j) and checked like Gather's run-time indices;
// constant indices are validated now, as the reference validates them at run time.
Expr Lowerer::lower_gather_nd(const Node& n, Index& idx) {
  const Value* data = n.input(0);
  const Value* ind = n.input(1);
  const Shape& ds = data->shape();
  const Shape& is = ind->shape();
  const int64_t r = int64_t(ds.size()), q = int64_t(is.size());
  const int64_t b = n.attr_int("batch_dims", 0);
  if (r < 1 || q < 1) refuse("GatherND data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(q, r)) refuse("GatherND batch_dims is out of range");
  for (int64_t k = 0; k < b; ++k)
    if (is[size_t(k)] != ds[size_t(k)]) refuse("GatherND batch dimensions differ");
  const int64_t m = is[size_t(q - 1)];
  if (m < 1 || m > r - b) refuse("GatherND indices.shape[-1] is out of range");
  if (int64_t(idx.shape.size()) != q - 1 + r - b - m) refuse("GatherND output rank does not match");
  if (ind->is_constant()) {
    std::vector<int64_t> vals = ind->constant().to_int64_vector();
    for (size_t p = 0; p < vals.size(); ++p) {
      const int64_t dim = ds[size_t(b + int64_t(p) % m)];
      if (vals[p] < -dim || vals[p] >= dim)
        refuse(cat("GatherND index ", vals[p], " is out of range for a dimension of size ", dim));
    }
  }
  const auto& d = dims(idx);
  std::vector<Expr> di;
  for (int64_t k = 0; k < b; ++k) di.push_back(d[size_t(k)]);
  for (int64_t j = 0; j < m; ++j) {
    const int64_t dim = ds[size_t(b + j)];
    if (dim == 0) refuse("GatherND from an empty axis");
    std::vector<Expr> at(d.begin(), d.begin() + (q - 1));
    at.push_back(int_imm(j));
    di.push_back(index_into(ind, value_at(ind, Index::from_dims(is, std::move(at))), dim, index_check_site(n)));
  }
  for (int64_t k = b + m; k < r; ++k) di.push_back(d[size_t(q - 1 + k - (b + m))]);
  return value_at(data, Index::from_dims(ds, std::move(di)));
}

// OneHot: output = indices.shape with depth inserted at `axis`; on_value where the index (negative
// ones counted from depth) equals the position on that axis, off_value elsewhere, and off for an
// index outside [-depth, depth) (the spec's rule; the reference's too). The comparisons avoid
// overflow: position - depth instead of index + depth, and float indices are truncated and
// compared as doubles instead of being converted to int64.
Expr Lowerer::lower_one_hot(const Node& n, Index& idx) {
  const Value* ind = n.input(0);
  const Value* values = n.input(2);
  const int64_t rank = int64_t(idx.shape.size());
  const int64_t axis = normalize_axis(n.attr_int("axis", -1), rank);
  const int64_t depth = idx.shape[size_t(axis)];
  const auto& d = dims(idx);
  std::vector<Expr> at;
  for (int64_t k = 0; k < rank; ++k)
    if (k != axis) at.push_back(d[size_t(k)]);
  if (int64_t(at.size()) != int64_t(ind->shape().size())) refuse("OneHot output rank does not match its indices");
  Expr i = value_at(ind, Index::from_dims(ind->shape(), std::move(at)));
  const Expr pos = d[size_t(axis)];
  Expr hit;
  const DType it = ind->dtype();
  if (is_float(it)) {
    Expr x = cast(DType::Float64, i);
    Expr tr = select(binary(BinOp::Lt, x, float_imm(0.0, DType::Float64)), unary(UnOp::Ceil, x), unary(UnOp::Floor, x));
    Expr p = cast(DType::Float64, pos);
    hit = binary(BinOp::Or, binary(BinOp::Eq, tr, p),
                 binary(BinOp::Eq, tr, binary(BinOp::Sub, p, float_imm(double(depth), DType::Float64))));
  } else if (it == DType::UInt64 || it == DType::UInt32 || it == DType::UInt16 || it == DType::UInt8) {
    hit = binary(BinOp::Eq, cast(DType::UInt64, i), cast(DType::UInt64, pos));
  } else {
    Expr v = cast(DType::Int64, i);
    hit = binary(BinOp::Or, binary(BinOp::Eq, v, pos), binary(BinOp::Eq, v, sub(pos, int_imm(depth))));
  }
  Expr off = value_at(values, Index::from_flat(values->shape(), int_imm(0)));
  Expr on = value_at(values, Index::from_flat(values->shape(), int_imm(1)));
  return select(hit, on, off);
}

// Range: element i is start + i * delta, computed as the reference does: in int64 for integer types
// (the output is the wrapped value), in double rounded once to T for floats. The output length was
// fixed at import from the constant bounds.
Expr Lowerer::lower_range(const Node& n, Index& idx) {
  const DType t = n.output(0)->dtype();
  auto scalar = [&](size_t k) { return value_at(n.input(k), Index::zero(n.input(k)->shape())); };
  const auto& d = dims(idx);
  const Expr i = d.empty() ? int_imm(0) : d[0];
  if (is_integer(t)) {
    Expr s = cast(DType::Int64, scalar(0)), step = cast(DType::Int64, scalar(2));
    return cast(t, add(s, mul(i, step)));
  }
  Expr s = cast(DType::Float64, scalar(0)), step = cast(DType::Float64, scalar(2));
  return cast(t, binary(BinOp::Add, s, binary(BinOp::Mul, cast(DType::Float64, i), step)));
}

// CumSum: output[.., i, ..] = the running sum along the axis, spelled out as the reference
// computes it: a sum that starts at 0 and adds the row's elements one by one in scan order
// (reverse: from the end), in the reference's accumulator type (float for float16/bfloat16, the
// float type itself, 64-bit integers with wrap-around, here unsigned so that C's signed overflow
// never happens), selected by i (exclusive: the sum before the element). Every output reads its
// whole row, so the work is row length squared: bounded by kMaxScanLength (unsupported_injective).
// A run-time axis selects among the scans of every axis it may name (all computed, all in bounds).
Expr Lowerer::lower_cumsum(const Node& n, Index& idx) {
  const Value* x = n.input(0);
  const Value* axv = n.input(1);
  const Shape& xs = x->shape();
  const int64_t rank = int64_t(xs.size());
  const DType t = x->dtype();
  const DType acc_t = is_float(t) ? compute_type(t) : DType::UInt64;
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  const auto& d = dims(idx);
  auto scan = [&](int64_t axis) {
    const int64_t len = xs[size_t(axis)];
    const Expr i = d[size_t(axis)];
    // prefix[k]: the sum of the first k elements in scan order (prefix[0] = 0).
    std::vector<Expr> prefix{imm(0, acc_t)};
    for (int64_t k = 0; k < len; ++k) {
      std::vector<Expr> at = d;
      at[size_t(axis)] = int_imm(reverse ? len - 1 - k : k);
      Expr v = cast(acc_t, value_at(x, Index::from_dims(xs, std::move(at))));
      prefix.push_back(binary(BinOp::Add, prefix.back(), v));
    }
    // Element i is the (len-1-i)-th in reverse scan order; inclusive sums take one more element.
    Expr pos = reverse ? sub(int_imm(len - 1), i) : i;
    Expr r = prefix[size_t(exclusive ? len - 1 : len)];
    for (int64_t k = len - 2; k >= 0; --k)
      r = select(binary(BinOp::Le, pos, int_imm(k)), prefix[size_t(exclusive ? k : k + 1)], r);
    return cast(t, r);
  };
  if (axv->is_constant()) {
    const int64_t a = axv->constant().as_int64(0);
    return scan(a < 0 ? a + rank : a);
  }
  // A run-time axis is checked like an index (the reference kernel rejects one outside
  // [-rank, rank)), then wrapped: the select picks the scan of the axis it names.
  Expr a = checked_index(value_at(axv, Index::zero(axv->shape())), rank, index_check_site(n));
  Expr r = scan(rank - 1);
  for (int64_t k = rank - 2; k >= 0; --k) r = select(binary(BinOp::Eq, a, int_imm(k)), scan(k), r);
  // One axis: nothing to pick, but the check must stay in the kernel.
  if (rank == 1) r = select(binary(BinOp::Eq, a, int_imm(0)), r, r);
  return r;
}

// TopK: the j-th output along the axis is the element of rank j in the reference's order: best
// first (largest or smallest; NaN counts as the greatest value, NaNs equal to each other), equal
// keys by ascending index, which makes the order total. rank(i) = the number of elements m that
// come before i; for m < i that is "x_i is not better than x_m", for m > i "x_m is better". k is
// the output's length on the axis (fixed at import). Every output compares its whole row with
// itself: row length squared, bounded by kMaxSelectLength (unsupported_injective).
Expr Lowerer::lower_topk(const Node& n, size_t slot, Index& idx) {
  const Value* x = n.input(0);
  const Shape& xs = x->shape();
  const int64_t rank = int64_t(xs.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  const bool largest = n.attr_int("largest", 1) != 0;
  const int64_t len = xs[size_t(axis)];
  const auto& d = dims(idx);
  const Expr j = d[size_t(axis)];
  const DType key_t = compute_type(x->dtype());
  std::vector<Expr> vals, keys;
  for (int64_t m = 0; m < len; ++m) {
    std::vector<Expr> at = d;
    at[size_t(axis)] = int_imm(m);
    vals.push_back(value_at(x, Index::from_dims(xs, std::move(at))));
    keys.push_back(cast(key_t, vals.back()));
  }
  // a > b with NaN the greatest (NaN > b for non-NaN b; nothing is greater than NaN).
  auto greater = [&](const Expr& a, const Expr& b) {
    if (!is_float(key_t)) return binary(BinOp::Gt, a, b);
    return select(unary(UnOp::IsNaN, a), unary(UnOp::Not, unary(UnOp::IsNaN, b)), binary(BinOp::Gt, a, b));
  };
  auto better = [&](int64_t a, int64_t b) { return largest ? greater(keys[size_t(a)], keys[size_t(b)]) : greater(keys[size_t(b)], keys[size_t(a)]); };
  Expr value, index;
  for (int64_t i = len; i-- > 0;) {
    Expr r = int_imm(0);
    for (int64_t m = 0; m < len; ++m) {
      if (m == i) continue;
      Expr before = m < i ? unary(UnOp::Not, better(i, m)) : better(m, i);
      r = add(r, cast(DType::Int64, before));
    }
    if (!value) {
      value = vals[size_t(i)];
      index = int_imm(i);
      continue;
    }
    Expr hit = binary(BinOp::Eq, r, j);
    value = select(hit, vals[size_t(i)], value);
    index = select(hit, int_imm(i), index);
  }
  return slot == 0 ? value : index;
}

}  // namespace kiln::loop::detail
