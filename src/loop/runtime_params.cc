#include "loop/runtime_params.h"

#include <algorithm>
#include <set>

#include "loop/lower_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

const std::set<std::string> kReductions = {"ReduceSum",  "ReduceMean",   "ReduceMax",       "ReduceMin",
                                           "ReduceProd", "ReduceL1",     "ReduceL2",        "ReduceLogSum",
                                           "ReduceLogSumExp", "ReduceSumSquare"};

Expr I(int64_t v) { return int_imm(v); }
Expr le(Expr a, Expr b) { return binary(BinOp::Le, std::move(a), std::move(b)); }
Expr eq(Expr a, Expr b) { return binary(BinOp::Eq, std::move(a), std::move(b)); }
Expr ne(Expr a, Expr b) { return binary(BinOp::Ne, std::move(a), std::move(b)); }
Expr all(Expr a, Expr b) { return !a ? b : binary(BinOp::And, std::move(a), std::move(b)); }
Expr any(Expr a, Expr b) { return !a ? b : binary(BinOp::Or, std::move(a), std::move(b)); }
Expr lo_hi(Expr v, Expr lo, Expr hi) { return binary(BinOp::Max, binary(BinOp::Min, std::move(v), std::move(hi)), std::move(lo)); }
// A position counted from the end when negative (the add happens only after clamping v into
// [-dim-1, dim+1], which changes no clamped result and keeps it free of overflow).
Expr from_end(const Expr& v, int64_t dim) {
  Expr c = lo_hi(v, I(-dim - 1), I(dim + 1));
  return select(lt(c, I(0)), add(c, I(dim)), c);
}

bool runtime(const Node& n, size_t input) {
  const Value* v = n.num_inputs() > input ? n.input(input) : nullptr;
  return v && !v->is_constant() && shape_numel(v->shape()) > 0;
}

bool int_vector(const Value* v, int64_t len) {
  return v && (v->dtype() == DType::Int32 || v->dtype() == DType::Int64) && v->shape().size() == 1 &&
         v->shape()[0] == len;
}

int64_t rank_of(const Node& n) { return int64_t(n.input(0)->shape().size()); }
int64_t slice_count(const Node& n) { return shape_numel(n.input(1)->shape()); }

// The entries of a Slice: axis (normalised, and whether in range) and step of entry i.
Expr slice_axis(const Node& n, const ParamAt& at, int64_t i) { return n.input(3) ? at(3, i) : I(i); }
Expr slice_step(const Node& n, const ParamAt& at, int64_t i) { return n.input(4) ? at(4, i) : I(1); }
Expr normalized(const Expr& a, int64_t rank) { return select(lt(a, I(0)), add(a, I(rank)), a); }

// Entry i of a Slice applied to an axis of `dim` elements: (start, step, count), as the reference.
struct SliceEntry {
  Expr start, step, count;
};
SliceEntry slice_entry(const Node& n, const ParamAt& at, int64_t i, int64_t dim) {
  const int64_t max_step = std::max<int64_t>(dim, 1);
  Expr st = lo_hi(slice_step(n, at, i), I(-max_step), I(max_step));
  Expr s = from_end(at(1, i), dim), e = from_end(at(2, i), dim);
  Expr s_pos = lo_hi(s, I(0), I(dim)), e_pos = lo_hi(e, I(0), I(dim));
  Expr s_neg = lo_hi(s, I(0), I(dim - 1)), e_neg = lo_hi(e, I(-1), I(dim - 1));
  Expr pos = lt(I(0), st);
  // Dividing by a step of 0 (invalid: the guard fails) must not trap.
  Expr up = select(eq(st, I(0)), I(1), st), down = select(eq(st, I(0)), I(1), sub(I(0), st));
  Expr n_pos = select(lt(s_pos, e_pos), binary(BinOp::Div, add(sub(e_pos, s_pos), sub(up, I(1))), up), I(0));
  Expr n_neg = select(lt(e_neg, s_neg), binary(BinOp::Div, add(sub(s_neg, e_neg), sub(down, I(1))), down), I(0));
  return {select(pos, s_pos, s_neg), st, select(pos, n_pos, n_neg)};
}

std::string name(int64_t site, const std::string& what) { return cat("kiln_p", site, "_", what); }
Expr named(int64_t site, const std::string& what) { return var(name(site, what)); }

// Lets in the prologue: `what` = e, returned as its variable.
struct Prologue {
  int64_t site;
  std::vector<Stmt> lets;
  Expr bind(const std::string& what, Expr e) {
    lets.push_back(let(name(site, what), std::move(e)));
    return named(site, what);
  }
};

// Slice: each entry's normalised axis, then per input axis the (start, step, count) of the entry
// naming it (the last one; the guard rejects an axis named twice), an unsliced axis's defaults
// otherwise; then the guard over those.
Expr slice_prologue(const Node& n, const ParamAt& at, Prologue& p) {
  const Shape& in = n.input(0)->shape();
  const Shape& out = n.output(0)->shape();
  const int64_t rank = rank_of(n), cnt = slice_count(n);
  Expr ok;
  std::vector<Expr> axes;
  for (int64_t i = 0; i < cnt; ++i) {
    Expr a = p.bind(cat("axis", i), slice_axis(n, at, i));
    ok = all(ok, all(le(I(-rank), a), lt(a, I(rank))));
    ok = all(ok, ne(slice_step(n, at, i), I(0)));
    axes.push_back(p.bind(cat("axis", i, "_n"), normalized(a, rank)));
  }
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = i + 1; j < axes.size(); ++j) ok = all(ok, ne(axes[i], axes[j]));
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t dim = in[size_t(k)];
    SliceEntry acc{I(0), I(1), I(dim)};
    for (int64_t i = 0; i < cnt; ++i) {
      SliceEntry e = slice_entry(n, at, i, dim);
      Expr hit = eq(axes[size_t(i)], I(k));
      acc = {select(hit, e.start, acc.start), select(hit, e.step, acc.step), select(hit, e.count, acc.count)};
    }
    p.bind(cat("start", k), acc.start);
    p.bind(cat("step", k), acc.step);
    ok = all(ok, eq(p.bind(cat("count", k), acc.count), I(out[size_t(k)])));
  }
  return ok;
}

// Pad: the (begin, end) pads of each axis, clamped into [-(dim+1), out+1] (every pad outside is
// invalid, and stays invalid there).
std::vector<std::pair<Expr, Expr>> pad_amounts(const Node& n, const ParamAt& at) {
  const Shape& in = n.input(0)->shape();
  const Shape& out = n.output(0)->shape();
  const int64_t rank = rank_of(n);
  std::vector<std::pair<Expr, Expr>> r(size_t(rank), {I(0), I(0)});
  if (runtime(n, 3)) {
    // Which axis entry i pads is data: axis k takes the entry that names it (the guard, pad_axes_ok,
    // checks they are distinct and in range), or no padding.
    const int64_t na = shape_numel(n.input(3)->shape());
    for (int64_t k = 0; k < rank; ++k) {
      auto clamped = [&](int64_t j) { return lo_hi(at(1, j), I(-in[size_t(k)] - 1), I(out[size_t(k)] + 1)); };
      Expr b = I(0), e = I(0);
      for (int64_t i = 0; i < na; ++i) {
        Expr hit = eq(normalized(at(3, i), rank), I(k));
        b = select(hit, clamped(i), b);
        e = select(hit, clamped(na + i), e);
      }
      r[size_t(k)] = {b, e};
    }
    return r;
  }
  std::vector<int64_t> axes;
  if (auto a = constant_ints(n, 3, "axes")) {
    for (int64_t ax : *a) axes.push_back(ax < 0 ? ax + rank : ax);
  } else {
    for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
  }
  const int64_t na = int64_t(axes.size());
  for (int64_t i = 0; i < na; ++i) {
    const size_t k = size_t(axes[size_t(i)]);
    auto clamped = [&](int64_t j) { return lo_hi(at(1, j), I(-in[k] - 1), I(out[k] + 1)); };
    r[k] = {clamped(i), clamped(na + i)};
  }
  return r;
}

// Run-time Pad axes: each in [-rank, rank) and no axis named twice (the reference's checks).
Expr pad_axes_ok(const Node& n, const ParamAt& at) {
  const int64_t rank = rank_of(n), na = shape_numel(n.input(3)->shape());
  Expr ok;
  for (int64_t i = 0; i < na; ++i) {
    ok = all(ok, all(le(I(-rank), at(3, i)), lt(at(3, i), I(rank))));
    for (int64_t j = 0; j < i; ++j) ok = all(ok, ne(normalized(at(3, i), rank), normalized(at(3, j), rank)));
  }
  return ok;
}

// Pad: per axis the elements cropped before it, the padding before it and the kept length; then
// the guard (crops within the axis, the declared length, a kept element to fold from).
Expr pad_prologue(const Node& n, const ParamAt& at, Prologue& p) {
  const Shape& in = n.input(0)->shape();
  const Shape& out = n.output(0)->shape();
  const bool constant_mode = n.attr_string("mode", "constant") == "constant";
  const auto amounts = pad_amounts(n, at);
  Expr ok = runtime(n, 3) ? pad_axes_ok(n, at) : Expr();
  for (size_t k = 0; k < in.size(); ++k) {
    const auto& [begin, end] = amounts[k];
    Expr crop_lo = p.bind(cat("crop", k), binary(BinOp::Max, sub(I(0), begin), I(0)));
    Expr crop_hi = binary(BinOp::Max, sub(I(0), end), I(0));
    Expr pad_lo = p.bind(cat("pad", k), binary(BinOp::Max, begin, I(0)));
    Expr pad_hi = binary(BinOp::Max, end, I(0));
    Expr kept = p.bind(cat("kept", k), sub(sub(I(in[k]), crop_lo), crop_hi));
    ok = all(ok, le(crop_lo, I(in[k])));
    ok = all(ok, le(crop_hi, sub(I(in[k]), crop_lo)));
    ok = all(ok, eq(add(add(pad_lo, kept), pad_hi), I(out[k])));
    if (!constant_mode) ok = all(ok, any(lt(I(0), kept), eq(add(pad_lo, pad_hi), I(0))));
  }
  return ok ? ok : int_imm(1, DType::Bool);
}

Shape reduced_shape(const Shape& in, const std::vector<bool>& red, bool keep) {
  Shape s;
  for (size_t k = 0; k < in.size(); ++k) {
    if (!red[k]) s.push_back(in[k]);
    else if (keep) s.push_back(1);
  }
  return s;
}

// Every set of `count` distinct axes that gives n's declared output shape.
std::vector<std::vector<bool>> reduction_candidates(const Node& n) {
  const Shape& in = n.input(0)->shape();
  const size_t rank = in.size();
  const int64_t count = shape_numel(n.input(1)->shape());
  const bool keep = n.attr_int("keepdims", 1) != 0;
  std::vector<std::vector<bool>> r;
  if (rank > 16 || count > int64_t(rank)) return r;
  for (uint32_t mask = 0; mask < (1u << rank); ++mask) {
    if (__builtin_popcount(mask) != count) continue;
    std::vector<bool> red(rank);
    for (size_t k = 0; k < rank; ++k) red[k] = (mask >> k) & 1u;
    if (reduced_shape(in, red, keep) == n.output(0)->shape()) r.push_back(red);
  }
  return r;
}

// The candidates after dropping size-1 axes, which reduce nothing: distinct ones are the sets the
// data really chooses between.
std::vector<std::vector<bool>> distinct_candidates(const Node& n) {
  const Shape& in = n.input(0)->shape();
  std::vector<std::vector<bool>> r;
  for (std::vector<bool> c : reduction_candidates(n)) {
    for (size_t k = 0; k < in.size(); ++k) c[k] = c[k] && in[k] != 1;
    if (std::find(r.begin(), r.end(), c) == r.end()) r.push_back(c);
  }
  return r;
}

Expr reduction_ok(const Node& n, const ParamAt& at, Prologue& p) {
  const int64_t rank = rank_of(n), cnt = shape_numel(n.input(1)->shape());
  Expr ok;
  std::vector<Expr> axes;
  for (int64_t i = 0; i < cnt; ++i) {
    Expr a = at(1, i);
    ok = all(ok, all(le(I(-rank), a), lt(a, I(rank))));
    axes.push_back(normalized(a, rank));
  }
  for (size_t i = 0; i < axes.size(); ++i)
    for (size_t j = i + 1; j < axes.size(); ++j) ok = all(ok, ne(axes[i], axes[j]));
  // Distinct, as many as a candidate has: the run-time set is a candidate when each axis is in it.
  auto in_set = [&](const std::vector<bool>& c) {
    Expr in_c;
    for (const Expr& a : axes) {
      Expr hit;
      for (int64_t k = 0; k < rank; ++k)
        if (c[size_t(k)]) hit = any(hit, eq(a, I(k)));
      in_c = all(in_c, hit ? hit : int_imm(0, DType::Bool));
    }
    return in_c ? in_c : int_imm(1, DType::Bool);
  };
  Expr one_of;
  for (const std::vector<bool>& c : reduction_candidates(n)) one_of = any(one_of, in_set(c));
  // Where the shapes leave the axes open, which of the distinct sets the data chose: the nest
  // reads its input through that set's view (runtime_reduction_view). Candidates equal up to
  // size-1 axes are one set, so each of them selects its set's number.
  const std::vector<std::vector<bool>> sets = distinct_candidates(n);
  if (sets.size() > 1) {
    const Shape& in = n.input(0)->shape();
    Expr which = I(0);
    for (const std::vector<bool>& c : reduction_candidates(n)) {
      std::vector<bool> s = c;
      for (size_t k = 0; k < in.size(); ++k) s[k] = s[k] && in[k] != 1;
      const int64_t i = std::find(sets.begin(), sets.end(), s) - sets.begin();
      which = select(in_set(c), I(i), which);
    }
    p.bind("set0", which);
  }
  return all(ok, one_of ? one_of : int_imm(0, DType::Bool));
}

}  // namespace

bool has_runtime_params(const Node& n) {
  if (!n.domain().empty() || n.num_inputs() == 0 || !n.input(0)) return false;
  const std::string& op = n.op_type();
  if (op == "Slice") return runtime(n, 1) || runtime(n, 2) || runtime(n, 3) || runtime(n, 4);
  if (op == "Pad") return runtime(n, 1) || runtime(n, 3);
  if (kReductions.count(op)) return runtime(n, 1);
  return false;
}

std::string runtime_params_refusal(const Node& n) {
  const std::string& op = n.op_type();
  const Shape& in = n.input(0)->shape();
  if (n.num_outputs() != 1 || !n.output(0)) return cat(op, " has an unexpected signature");
  if (op == "Slice") {
    if (!n.input(1) || !n.input(2)) return "Slice needs starts and ends";
    const int64_t cnt = slice_count(n);
    for (size_t i = 1; i < 5 && i < n.num_inputs(); ++i)
      if (n.input(i) && !int_vector(n.input(i), cnt)) return "Slice parameters are not int32/int64 vectors of one length";
  } else if (op == "Pad") {
    if (runtime(n, 3) && !int_vector(n.input(3), shape_numel(n.input(3)->shape())))
      return "Pad axes is not an int32/int64 vector";
    const std::string mode = n.attr_string("mode", "constant");
    if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
      return cat("Pad mode '", mode, "' is not supported");
    const int64_t na = n.input(3) ? shape_numel(n.input(3)->shape()) : int64_t(in.size());
    if (!int_vector(n.input(1), 2 * na)) return "Pad pads is not an int32/int64 vector of two entries per axis";
  } else {
    if (!int_vector(n.input(1), shape_numel(n.input(1)->shape()))) return cat(op, " axes is not an int32/int64 vector");
    if (reduction_candidates(n).empty())
      return cat(op, " axes are computed at run time and no set of ", shape_numel(n.input(1)->shape()),
                 " axes of ", shape_str(in), " gives the declared output ", shape_str(n.output(0)->shape()));
    return "";
  }
  if (in.empty()) return cat(op, " of a scalar with run-time parameters");
  if (shape_numel(in) == 0) return cat(op, " of an empty input with run-time parameters");
  if (n.output(0)->shape().size() != in.size()) return cat(op, " output rank differs from its input's");
  return "";
}

std::vector<Stmt> runtime_params_prologue(const Node& n, const ParamAt& at, int64_t site) {
  Prologue p{site, {}};
  Expr ok = n.op_type() == "Slice" ? slice_prologue(n, at, p) : n.op_type() == "Pad" ? pad_prologue(n, at, p)
                                                                                     : reduction_ok(n, at, p);
  p.lets.push_back(let(name(site, "guard"), checked_index(select(ok, I(0), I(1)), 1, site)));
  return p.lets;
}

std::string runtime_params_message(const Node& n) {
  const std::string what = n.op_type() == "Slice" ? "starts/ends/axes/steps" : n.op_type() == "Pad" ? "pads" : "axes";
  return cat(n.describe(), ": the run-time ", what, " are invalid or do not give the declared output shape ",
             shape_str(n.output(0)->shape()));
}

Expr runtime_param(int64_t site, const std::string& what, size_t axis) { return named(site, cat(what, axis)); }

std::optional<std::vector<bool>> runtime_reduced_axes(const Node& n) {
  std::vector<std::vector<bool>> sets = distinct_candidates(n);
  if (sets.size() != 1) return std::nullopt;
  return sets[0];
}

std::vector<std::vector<bool>> runtime_reduction_sets(const Node& n) { return distinct_candidates(n); }

// ---------------------------------------------------------------- in the nest

void Lowerer::require_kernel_params(const Node& n) {
  for (size_t i = 1; i < n.num_inputs(); ++i) {
    const Value* v = n.input(i);
    // The prologue reads the parameters from the kernel's arguments: computed ones stay outside.
    if (v && !v->is_constant() && !input_buffers_.count(v))
      refuse(cat(name_of(&n), " parameters computed in the same kernel are not lowered"));
  }
}

Expr Lowerer::lower_runtime_slice(const Node& n, Index& idx) {
  require_kernel_params(n);
  const int64_t site = index_check_site(n);
  const Shape& in = n.input(0)->shape();
  const auto& d = dims(idx);
  std::vector<Expr> r(in.size());
  // Clamped into the axis: with parameters the guard rejects, the loads still stay in bounds.
  for (size_t k = 0; k < in.size(); ++k)
    r[k] = clamp(add(runtime_param(site, "start", k), mul(d[k], runtime_param(site, "step", k))), 0, in[k] - 1);
  return value_at(n.input(0), Index::from_dims(in, std::move(r)));
}

Expr Lowerer::lower_runtime_pad(const Node& n, Index& idx, const Expr& fill) {
  require_kernel_params(n);
  const int64_t site = index_check_site(n);
  const Value* x = n.input(0);
  const Shape& in = x->shape();
  const std::string mode = n.attr_string("mode", "constant");
  const auto& d = dims(idx);
  std::vector<Expr> r(in.size());
  Expr inside;
  for (size_t k = 0; k < in.size(); ++k) {
    const Expr kept = runtime_param(site, "kept", k);
    Expr j = sub(d[k], runtime_param(site, "pad", k));
    Expr m = binary(BinOp::Max, kept, I(1));  // the guard rejects an empty kept axis that is padded
    Expr f;
    if (mode == "constant" || mode == "edge") {
      if (mode == "constant") inside = all(inside, all(le(I(0), j), lt(j, kept)));
      f = lo_hi(j, I(0), sub(m, I(1)));
    } else if (mode == "wrap") {
      f = binary(BinOp::Mod, add(binary(BinOp::Mod, j, m), m), m);
    } else {  // reflect: period 2(m-1), mirrored in its second half; one element folds to itself
      Expr period = binary(BinOp::Max, mul(I(2), sub(m, I(1))), I(1));
      Expr q = binary(BinOp::Mod, add(binary(BinOp::Mod, j, period), period), period);
      f = select(le(m, I(1)), I(0), select(lt(q, m), q, sub(period, q)));
    }
    r[k] = clamp(add(f, runtime_param(site, "crop", k)), 0, in[k] - 1);
  }
  Expr v = value_at(x, Index::from_dims(in, std::move(r)));
  return inside ? select(inside, v, fill) : v;
}

}  // namespace kiln::loop::detail
