// The scatter emitter: ScatterElements and ScatterND (src/reference/ops/index_scatter.cc) as
// generated code. A scatter group is the scatter node alone, and its kernel is two nests in
// sequence:
//
//   copy     for i in data:    out[i] = data[i]                      (parallel, vectorised)
//   scatter  for p in updates: out[at(p)] = combine(out[at(p)], updates[p])
//
// `at(p)` reads the run-time indices through checked_index (loop_ir.h), exactly as Gather's are
// read: an index outside [-dim, dim) sets the kernel's status word, which the runtime turns into
// the node's one-line error after the call, and the store goes to position 0 of that axis instead
// (the output is discarded then): never out of bounds.
//
// Order: the reference applies updates in row-major order of `updates`, so with duplicate indices
// and reduction=none the last one wins (and float add/mul round in that order). The scatter nest
// keeps that order wherever two updates can meet:
//  - ScatterElements along axis a: updates p and q can only meet when they agree on every other
//    axis, so the other axes' loops are outermost (the first one parallel for big updates: its
//    iterations write disjoint output positions) and the axis loop is innermost, serial, in
//    increasing order — the reference's order for each output position;
//  - ScatterND: two index tuples may name the same slice, so the tuple loop is serial; the slice
//    loop inside writes distinct positions (the default schedule may vectorise it).
//
// Fusion: none. The group holds the scatter node alone (a producer of `updates` inlined into the
// scatter loop would be recomputed for nothing, and one of `data` would have to run in the copy
// nest; neither is worth a second nest spelling yet). The partitioner learns that from this
// lowering (the analysis refuses any bigger group, with the reason), never from a rule of its own.
#include <algorithm>

#include "loop/lower_internal.h"
#include "reference/kernel_util.h"

namespace kiln::loop::detail {

namespace {

enum class Combine { None, Add, Mul, Max, Min };

Combine parse_combine(const Node& n) {
  const std::string r = n.attr_string("reduction", "none");
  if (r == "none") return Combine::None;
  if (r == "add") return Combine::Add;
  if (r == "mul") return Combine::Mul;
  if (r == "max") return Combine::Max;
  if (r == "min") return Combine::Min;
  refuse(cat(name_of(&n), ": unsupported reduction '", r, "' (expected none, add, mul, max or min)"));
}

// dst (op) src, as index_detail::combine computes it: integers wrap (through uint64), bool add/max
// are or and mul/min are and, half types compute in float, and max/min keep a NaN (dst's if it is
// one, else src's when src is NaN: `dst >= src || dst != dst ? dst : src`).
Expr combine(Combine c, DType t, const Expr& dst, const Expr& src) {
  if (c == Combine::None) return src;
  if (t == DType::Bool)
    return binary(c == Combine::Add || c == Combine::Max ? BinOp::Or : BinOp::And, dst, src);
  if (is_integer(t)) {
    if (c == Combine::Max) return select(binary(BinOp::Lt, dst, src), src, dst);
    if (c == Combine::Min) return select(binary(BinOp::Lt, src, dst), src, dst);
    const Expr a = cast(DType::UInt64, dst), b = cast(DType::UInt64, src);
    return cast(t, binary(c == Combine::Add ? BinOp::Add : BinOp::Mul, a, b));
  }
  const Expr a = to_compute(dst), b = to_compute(src);
  if (c == Combine::Max || c == Combine::Min) {
    const Expr keep = binary(BinOp::Or, binary(c == Combine::Max ? BinOp::Ge : BinOp::Le, a, b), unary(UnOp::IsNaN, a));
    return select(keep, dst, src);
  }
  Expr r = binary(c == Combine::Add ? BinOp::Add : BinOp::Mul, a, b);
  return r->type == t ? r : cast(t, r);
}

// out[i] = data[i] over the whole tensor: parallel when big, vectorised.
Stmt copy_nest(const BufferPtr& data, const BufferPtr& out) {
  const int64_t n = out->numel();
  return for_loop("i", int_imm(n), {store(out, var("i"), load(data, var("i")))},
                  n >= 4096 ? ForKind::Parallel : ForKind::Vectorized);
}

struct ScatterBuffers {
  BufferPtr data, indices, updates, out;
};

ScatterBuffers bind_scatter(const FusionGroup& grp, const Node& n, const std::string& name, LoopKernel& k) {
  std::unordered_map<const Value*, BufferPtr> ins, outs;
  bind_kernel(grp, name, k, {}, &ins, &outs);
  ScatterBuffers b;
  for (size_t i = 0; i < 3; ++i)
    if (n.num_inputs() <= i || !n.input(i)) refuse(cat(name_of(&n), " needs data, indices and updates"));
  b.data = ins.at(n.input(0));
  b.indices = ins.at(n.input(1));
  b.updates = ins.at(n.input(2));
  b.out = outs.at(n.output(0));
  if (b.indices->dtype != DType::Int32 && b.indices->dtype != DType::Int64) refuse(cat(name_of(&n), ": indices must be int32 or int64"));
  if (b.data->dtype != b.updates->dtype) refuse(cat(name_of(&n), ": data and updates differ in type"));
  return b;
}

// ScatterElements: for each position p of updates, out[p with p[axis] = indices[p]] (op)= updates[p].
Stmt scatter_elements_nest(const Node& n, const ScatterBuffers& b, Combine c, int64_t site) {
  const Shape &ds = b.data->shape, &us = b.updates->shape;
  const int64_t rank = int64_t(ds.size());
  if (rank < 1) refuse(cat(name_of(&n), ": data must have rank >= 1"));
  if (b.indices->shape != us)
    refuse(cat(name_of(&n), ": indices shape ", shape_str(b.indices->shape), " differs from updates shape ", shape_str(us)));
  if (int64_t(us.size()) != rank) refuse(cat(name_of(&n), ": indices rank differs from data rank"));
  const int64_t axis = normalize_axis(n.attr_int("axis", 0), rank);
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && us[size_t(d)] > ds[size_t(d)])
      refuse(cat(name_of(&n), ": indices shape ", shape_str(us), " exceeds data shape ", shape_str(ds), " outside the scatter axis"));
  // Every index into an empty axis is out of range: the reference kernel reports it.
  if (ds[size_t(axis)] == 0) refuse(cat(name_of(&n), " scatters into an empty axis"));

  // The updates position and the output position, per dim (the axis from the index).
  std::vector<Expr> u(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d) u[size_t(d)] = us[size_t(d)] == 1 ? int_imm(0) : var(cat("i", d));
  Expr uflat = int_imm(0), oflat = int_imm(0);
  for (int64_t d = 0; d < rank; ++d) uflat = add(mul(uflat, int_imm(us[size_t(d)])), u[size_t(d)]);
  const Expr j = var("t0");
  for (int64_t d = 0; d < rank; ++d) oflat = add(mul(oflat, int_imm(ds[size_t(d)])), d == axis ? j : u[size_t(d)]);
  std::vector<Stmt> body = {
      let("t0", checked_index(load(b.indices, uflat), ds[size_t(axis)], site)),
      let("t1", oflat),
      store(b.out, var("t1"), combine(c, b.out->dtype, load(b.out, var("t1")), load(b.updates, uflat)))};
  // The axis loop innermost (serial, increasing: the reference's order at each output position),
  // the other axes outside it in order; the outermost of those parallel when there is work.
  if (us[size_t(axis)] > 1) body = {for_loop(cat("i", axis), int_imm(us[size_t(axis)]), std::move(body))};
  std::vector<int64_t> others;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && us[size_t(d)] > 1) others.push_back(d);
  for (size_t k = others.size(); k-- > 0;) {
    const int64_t d = others[k];
    const bool par = k == 0 && shape_numel(us) >= 4096;
    body = {for_loop(cat("i", d), int_imm(us[size_t(d)]), std::move(body), par ? ForKind::Parallel : ForKind::Serial)};
  }
  return block(std::move(body));
}

// ScatterND: indices [..., q] hold q-tuples addressing data dims [0, q); tuple t receives the
// slice updates[t, ...] of shape data.shape[q:].
Stmt scatter_nd_nest(const Node& n, const ScatterBuffers& b, Combine c, int64_t site) {
  const Shape &ds = b.data->shape, &is = b.indices->shape, &us = b.updates->shape;
  const int64_t r = int64_t(ds.size()), qr = int64_t(is.size());
  if (r < 1 || qr < 1) refuse(cat(name_of(&n), ": data and indices must have rank >= 1"));
  const int64_t q = is.back();
  if (q < 1 || q > r) refuse(cat(name_of(&n), ": indices.shape[-1] = ", q, " must be in [1, ", r, "]"));
  Shape want(is.begin(), is.end() - 1);
  want.insert(want.end(), ds.begin() + q, ds.end());
  if (us != want) refuse(cat(name_of(&n), ": updates shape ", shape_str(us), " must be ", shape_str(want)));
  const int64_t tuples = shape_numel(Shape(is.begin(), is.end() - 1));
  const int64_t slice = shape_numel(Shape(ds.begin() + q, ds.end()));
  if (tuples == 0 || slice == 0) return block({});
  for (int64_t d = 0; d < q; ++d)
    if (ds[size_t(d)] == 0) refuse(cat(name_of(&n), " scatters into an empty axis"));
  const auto strides = shape_strides(ds);
  const Expr t = tuples == 1 ? int_imm(0) : var("i0");
  std::vector<Stmt> body;
  Expr off = int_imm(0);
  for (int64_t d = 0; d < q; ++d) {
    const std::string v = cat("t", d);
    body.push_back(let(v, checked_index(load(b.indices, add(mul(t, int_imm(q)), int_imm(d))), ds[size_t(d)], site)));
    off = add(off, mul(var(v), int_imm(strides[size_t(d)])));
  }
  const std::string o = cat("t", q);
  body.push_back(let(o, off));
  const Expr s = slice == 1 ? int_imm(0) : var("i1");
  const Expr at = add(var(o), s);
  Stmt st = store(b.out, at, combine(c, b.out->dtype, load(b.out, at), load(b.updates, add(mul(t, int_imm(slice)), s))));
  body.push_back(slice == 1 ? st : for_loop("i1", int_imm(slice), {st}));
  return tuples == 1 ? block(std::move(body)) : for_loop("i0", int_imm(tuples), std::move(body));
}

}  // namespace

bool is_scatter(const Node& n) {
  return n.domain().empty() && (n.op_type() == "ScatterElements" || n.op_type() == "ScatterND");
}

LoweredGroup lower_scatter_group(const FusionGroup& grp, const std::string& kernel_name) {
  return lowered_or_refused([&]() {
    const Node* n = nullptr;
    for (const Node* m : grp.nodes)
      if (is_scatter(*m)) n = m;
    KILN_CHECK(n, "lower_scatter_group: group ", grp.name, " holds no scatter");
    if (grp.nodes.size() != 1)
      refuse(cat(name_of(n), " is a kernel of its own (the scatter emitter: a copy of data, then the updates in "
                             "order); it fuses with nothing"));
    LoopKernel k;
    const ScatterBuffers b = bind_scatter(grp, *n, kernel_name, k);
    const Combine c = parse_combine(*n);
    if (b.out->shape != b.data->shape || b.out->dtype != b.data->dtype)
      refuse(cat(name_of(n), ": the output does not match data"));
    std::vector<Stmt> body;
    if (b.out->numel() > 0) body.push_back(copy_nest(b.data, b.out));
    if (b.updates->numel() > 0) {
      const int64_t site = 1;  // the group's only node (lower_group names the node of each site)
      body.push_back(n->op_type() == "ScatterND" ? scatter_nd_nest(*n, b, c, site)
                                                 : scatter_elements_nest(*n, b, c, site));
    }
    k.body = block(std::move(body));
    return k;
  });
}

}  // namespace kiln::loop::detail
