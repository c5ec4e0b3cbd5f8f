// Lowering of windowed pools (MaxPool, AveragePool) to loop nests: RowKernelBuilder::build_pool
// (row_kernel.h), which RowKernelBuilder::build (lower_reduction.cc) calls for a group anchored by
// a pool.
//
// Numerics follow src/reference/ops/nn_pool.cc: each output looks at the in-input positions of its
// window in window order (padding never supplies a value); MaxPool starts from the first of them
// and takes a later one only when strictly greater (a NaN first stays; a later NaN is skipped); a
// window entirely in padding gives -inf (the lowest value for integers); AveragePool sums in
// double (default numerics: in the compute type, float) and divides by the count of in-input
// positions, or with count_include_pad of those inside the padded input. MaxPool's Indices output (the first maximum's flat position in the input,
// row- or column-major by storage_order; -1 for a window entirely in padding) takes the point
// form for every output.
//
// The nest. One output per iteration with its window inside (pool_point) tests every window
// position against the input's bounds and chains a scalar accumulator through the window: a few
// cycles per position, ~4 GB/s on resnet18's MaxPool. So along the last spatial dim (the output
// width) the outputs split in three ranges: those whose windows reach into the padding at either
// end keep that form, and the interior between them, whose windows lie inside the input along
// that dim, runs as rows (pool_row):
//
//   for n, c, outer spatial dims                      -- outermost Parallel when big
//     for ow in [0, lo): the point form
//     row[j] = init                                   -- j over the interior, vectorized
//     for the window dims but the width:
//       if the window row is inside the input:        -- one test per window row, not per position
//         for j (vectorized):                         -- (a window row longer than 8: kw outside)
//           for kw (unrolled): row[j] = update(row[j], x[.., (lo + j) * stride + kw * dil - pad])
//       count += the window row's positions           -- the divisor; for MaxPool, "seen one"
//     for j (vectorized): outputs (epilogue) of finalise(row[j]) stored
//     for ow in [hi, out width): the point form
//
// Each output still sees its window positions in window order (window rows in order outside the
// row loop, a window row's positions in order inside it; the row loop only interleaves different
// outputs), so results are bit-identical to the point form: the same NaN rule, the same summation
// order. The row is at most kPoolRow accumulators (long widths run in chunks), so it and the input
// rows it reads stay in L1.
//
// Under default numerics a window with rows whose columns overlap along the row (3x3 stride 1 or
// 2: separable() counts the vector reads of both forms) is separated instead
// (pool_rows_separable): the height loop runs in blocks of output rows; per block,
//
//   col[r][u] = reduce over the window rows of x[.., row r's window row, base + u]   contiguous
//   for each row r: the border outputs in the point form, and
//     out[r][j] = reduce over kw of col[r][j * stride + kw * dilation]             vectorized
//
// MaxPool's result stays the reference's, NaNs included: the first pass skips NaNs (v > acc is
// false for them) and the second starts from the window's first in-input value, so a NaN there
// is the result and a later one is skipped; only which of two equal zeros is kept may differ.
#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fusion/op_kind.h"
#include "loop/affine.h"
#include "loop/row_kernel.h"
#include "reference/ops/nn_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

struct PoolSpec {
  const Value* x = nullptr;
  const Value* y = nullptr;
  nn::WindowGeometry g;
  size_t nd = 0;  // spatial dims
  bool is_max = false;
  bool include_pad = false;  // AveragePool's count_include_pad
  DType t = DType::Float32, ot = DType::Float32;
  DType A = DType::Float32;  // the accumulator: the compute type for Max, double for Average
  Expr init;                 // the accumulator's start
  const Value* indices = nullptr;  // MaxPool's Indices output, when the group computes it
  bool col_major = false;          // storage_order 1
};

namespace {

// Outputs of one pool row (the file comment): 512 float accumulators are 2 KiB.
constexpr int64_t kPoolRow = 512;
// Window rows up to this long are unrolled inside the row loop (pool_row).
constexpr int64_t kMaxInnerWindow = 8;
// The separable form (pool_rows_separable) unrolls the window rows inside its vectorized loop.
constexpr int64_t kMaxWindowRows = 16;
// It reduces a block of output rows down the window before it reduces them along. Rows of column
// sums shorter than kSeparableRowBytes go kSeparableBytes at a time: read right after they were
// stored, the second pass's loads (each straddling two pending stores) wait for the stores to
// retire, which made a 3x3 average over 35x35 planes 2.5x slower than unseparated (0.17 against
// 0.067 ms in blocks of 5 rows). Longer rows go one at a time: the wait is paid once per row, and
// blocks of two made a 3x3 stride-2 max over 111-wide rows slower (0.099 against 0.085 ms).
constexpr int64_t kSeparableRowBytes = 256;
constexpr int64_t kSeparableBytes = 1 << 10;

Expr bin(BinOp op, Expr a, Expr b) { return binary(op, std::move(a), std::move(b)); }
Expr conj(Expr a, Expr b) {
  if (!b) return a;
  return a ? bin(BinOp::And, a, b) : b;
}

// Window position o*stride - pad_begin + kk*dilation along spatial dim d for output position `o`.
// Bounds tests exist only where some window of the whole output reaches outside (statically known
// from the extremes); null means always true. `at` is the position to load: clamped where a test
// exists, so that the load is in bounds even where the test fails.
struct Tap {
  Expr pos, ge0, lt_in, lt_pad, at;
};
Tap tap(const nn::WindowGeometry& g, size_t d, const Expr& o, const Expr& kk) {
  Tap w;
  w.pos = sub(add(mul(o, int_imm(g.stride[d])), mul(kk, int_imm(g.dilation[d]))), int_imm(g.pad_begin[d]));
  const int64_t lo = -g.pad_begin[d], hi = (g.out[d] - 1) * g.stride[d] - g.pad_begin[d] + (g.kernel[d] - 1) * g.dilation[d];
  const int64_t n = g.in[d];
  if (lo < 0) w.ge0 = bin(BinOp::Ge, w.pos, int_imm(0));
  if (hi >= n) w.lt_in = bin(BinOp::Lt, w.pos, int_imm(n));
  if (hi >= n + g.pad_end[d]) w.lt_pad = bin(BinOp::Lt, w.pos, int_imm(n + g.pad_end[d]));
  w.at = lo < 0 || hi >= n ? clamp(w.pos, 0, n - 1) : w.pos;
  return w;
}

// [lo, hi): the output columns (last spatial dim) whose windows lie inside the input along it:
// o*stride - pad >= 0 and o*stride - pad + (kernel-1)*dilation <= in - 1. Empty when lo >= hi.
std::pair<int64_t, int64_t> interior(const nn::WindowGeometry& g) {
  const size_t d = g.in.size() - 1;
  const int64_t s = g.stride[d], p = g.pad_begin[d];
  const int64_t lo = std::max<int64_t>(0, p >= 0 ? (p + s - 1) / s : 0);
  const int64_t last = g.in[d] - 1 - (g.kernel[d] - 1) * g.dilation[d] + p;  // o*stride <= last
  const int64_t hi = last < 0 ? 0 : std::min(g.out[d], last / s + 1);
  return {lo, hi};
}

// The window dims but the width, at output position `outer` (its dims, image and channel first):
// their loops (kiln_k<tag><dim>), the window row's bounds tests (null: always true) and its
// clamped position in x (image and channel first, the width left out).
struct WindowRows {
  std::vector<std::pair<std::string, int64_t>> loops;
  std::vector<Expr> at;
  Expr inb, inpad;
};
WindowRows window_rows(const nn::WindowGeometry& g, const std::vector<Expr>& outer, const std::string& tag) {
  WindowRows r;
  r.at = {outer[0], outer[1]};
  for (size_t d = 0; d + 1 < g.in.size(); ++d) {
    Expr kk = int_imm(0);
    if (g.kernel[d] > 1) {
      std::string v = "kiln_k" + tag + std::to_string(d);
      r.loops.push_back({v, g.kernel[d]});
      kk = var(v);
    }
    const Tap t = tap(g, d, outer[2 + d], kk);
    r.inb = conj(conj(r.inb, t.ge0), t.lt_in);
    r.inpad = conj(r.inpad, t.lt_pad);
    r.at.push_back(t.at);
  }
  return r;
}

}  // namespace

void RowKernelBuilder::set_last_position(const Shape& shape, Expr pos) {
  set_position(shape, shape.size() - 1, std::move(pos));
}

void RowKernelBuilder::set_position(const Shape& shape, size_t dim, Expr pos) {
  outer_dims_[dim] = std::move(pos);
  Index idx = Index::from_dims(shape, outer_dims_);
  outer_flat_expr_ = L_.flat(idx);
  outer_flat_ = position_key(outer_flat_expr_);
}

// A MaxPool/AveragePool group: one loop per output dim but the last (outermost Parallel when big),
// then the last dim's border outputs each with its window inside, every window position tested
// against the input's bounds and loaded at a clamped position, and its interior as rows (the file
// comment). Prologue members are recomputed at each window position (the partitioner fuses them
// only for non-overlapping windows); epilogue members and every output live on the pool's output
// domain.
LoopKernel RowKernelBuilder::build_pool(const std::string& name, const Node& r) {
  for (const Node* n : grp_.nodes) {
    if (n == &r) continue;
    const auto ok = op_kind_of_type(n->op_type());
    if (ok && *ok == OpKind::Reduction && n->domain().empty())
      refuse(cat(n->op_type(), " cannot share a loop nest with ", r.op_type()));
    std::string why = unsupported_reason(*n);
    if (!why.empty()) refuse(why);
  }
  const bool is_max = r.op_type() == "MaxPool";
  const Value* x = r.input(0);
  const Value* y = r.output(0);
  if (!x || !y) refuse(cat(r.op_type(), " has an unexpected signature"));
  const Value* indices = is_max && r.num_outputs() > 1 ? r.output(1) : nullptr;
  const int64_t storage_order = r.attr_int("storage_order", 0);
  if (indices && (storage_order < 0 || storage_order > 1)) refuse("MaxPool storage_order must be 0 or 1");
  if (indices && (indices->dtype() != DType::Int64 || indices->shape() != y->shape()))
    refuse("MaxPool's Indices output is not int64 of the pooled shape");
  const DType t = x->dtype(), ot = y->dtype();
  const bool dtype_ok = t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
                        (is_max && (t == DType::Int8 || t == DType::UInt8));
  if (!dtype_ok || ot != t) refuse(cat(r.op_type(), " on ", dtype_name(t), " is not lowered to loops"));
  const Shape& xs = x->shape();
  const Shape& ys = y->shape();
  if (xs.size() < 3) refuse(cat(r.op_type(), " needs a rank >= 3 input"));
  const size_t nd = xs.size() - 2;
  if (!r.has_attr("kernel_shape") || r.attr_ints("kernel_shape").size() != nd)
    refuse(cat(r.op_type(), " has no kernel_shape for ", nd, " spatial dims"));
  const Shape spatial(xs.begin() + 2, xs.end());
  // The reference's own geometry (pads, auto_pad, ceil_mode's dropped last window, out sizes).
  const nn::WindowGeometry g = nn::window_geometry(r, spatial, r.attr_ints("kernel_shape"), r.attr_int("ceil_mode", 0) != 0);
  Shape want{xs[0], xs[1]};
  want.insert(want.end(), g.out.begin(), g.out.end());
  if (ys != want) refuse(cat(r.op_type(), " output ", shape_str(ys), " is not the pooled shape ", shape_str(want)));
  const int64_t out_n = shape_numel(ys);
  if (out_n == 0 || shape_numel(xs) == 0) refuse("empty pools are not lowered to loops");
  if (grp_.outputs.empty()) refuse("the group writes no outputs");
  for (const Value* o : grp_.outputs)
    if (shape_numel(o->shape()) != out_n)
      refuse(cat("group output '", o->name(), "' ", shape_str(o->shape()), " is not on the pool's output domain"));

  LoopKernel k;
  k.name = name;
  bind(k, {&r});
  std::vector<std::pair<std::string, int64_t>> outer = outer_loops(ys);
  results_[L_.input_buffers_.at(y).get()].defined = true;
  if (indices) {  // read, like the pooled value, through a Register buffer the window's Let replaces
    if (L_.input_buffers_.count(indices)) refuse("MaxPool's Indices output is also a kernel input");
    auto b = std::make_shared<Buffer>(Buffer{"b_pool_indices", DType::Int64, indices->shape(), Scope::Register});
    L_.input_buffers_[indices] = b;
    results_[b.get()] = Result{"kiln_ri0", true};
  }

  PoolSpec p;
  p.x = x;
  p.y = y;
  p.g = g;
  p.nd = nd;
  p.is_max = is_max;
  p.include_pad = !is_max && r.attr_int("count_include_pad", 0) != 0;
  p.indices = indices;
  p.col_major = storage_order == 1;
  p.t = t;
  p.ot = ot;
  // Average: the reference sums in double; default numerics sum in the compute type (a window of
  // at most a few hundred float terms stays well inside the contract, and the double sum and
  // conversions halved the pool's vector width: DenseNet's transition pools ran at a quarter of
  // the bandwidth roof), --strict-fp keeps the double sum.
  p.A = is_max || reorder_sums_ ? compute_type(t) : DType::Float64;
  // Max: a window entirely in padding gives -inf (the lowest value for integers).
  p.init = !is_max ? imm(0, p.A)
           : is_float(t) ? imm(-std::numeric_limits<double>::infinity(), p.A)
                         : int_imm(t == DType::Int8 ? -128 : 0, p.A);
  int64_t window = 1;
  for (int64_t kd : g.kernel) window *= kd;
  const bool parallel = out_n >= 8 && out_n * window >= 4096;

  std::vector<Stmt> body;
  const auto [lo, hi] = interior(g);
  // With Indices every output takes the point form (the rows keep no positions).
  const size_t last = ys.size() - 1;
  const std::string wv = "i" + std::to_string(last), hv = "i" + std::to_string(last - 1);
  if (hi <= lo || indices) {
    body = pool_point(p, k, "");
  } else if (separable(p, hi - lo)) {
    // The width runs in ranges and the height in blocks of rows (pool_rows_separable).
    if (!outer.empty() && outer.back().first == wv) outer.pop_back();
    if (!outer.empty() && outer.back().first == hv) outer.pop_back();
    body = pool_rows_separable(p, k, lo, hi, outer.empty() && parallel);
  } else {
    if (!outer.empty() && outer.back().first == wv) outer.pop_back();  // the width runs in ranges
    if (lo > 0) {
      set_last_position(ys, var("kiln_wl"));
      body.push_back(for_loop("kiln_wl", int_imm(lo), pool_point(p, k, "l")));
    }
    const int64_t m = hi - lo, blocks = m / kPoolRow, tail = m % kPoolRow;
    if (blocks == 0) {
      for (auto& s : pool_row(p, k, int_imm(lo), m, wv, "")) body.push_back(s);
    } else {
      // Without outer loops (a long 1-D pool of one plane) the rows are what runs in parallel.
      const Expr first = add(int_imm(lo), mul(var("kiln_wb"), int_imm(kPoolRow)));
      body.push_back(for_loop("kiln_wb", int_imm(blocks), pool_row(p, k, first, kPoolRow, wv, ""),
                              outer.empty() && parallel ? ForKind::Parallel : ForKind::Serial));
      if (tail > 0)
        for (auto& s : pool_row(p, k, int_imm(lo + blocks * kPoolRow), tail, wv + "t", "t")) body.push_back(s);
    }
    if (hi < g.out[nd - 1]) {
      set_last_position(ys, add(var("kiln_wr"), int_imm(hi)));
      body.push_back(for_loop("kiln_wr", int_imm(g.out[nd - 1] - hi), pool_point(p, k, "r")));
    }
  }
  for (size_t i = outer.size(); i-- > 0;) {
    const ForKind fk = i == 0 && parallel ? ForKind::Parallel : ForKind::Serial;
    body = {for_loop(outer[i].first, int_imm(outer[i].second), std::move(body), fk)};
  }
  k.body = body.size() == 1 ? body[0] : block(std::move(body));
  return k;
}

std::vector<Stmt> RowKernelBuilder::pool_point(const PoolSpec& p, const LoopKernel& k, const std::string& tag) {
  const nn::WindowGeometry& g = p.g;
  std::vector<std::pair<std::string, int64_t>> wloops;
  std::vector<Expr> xd{outer_dims_[0], outer_dims_[1]};
  Expr inb, inpad;  // null = always true
  // Indices: the position as the reference numbers it, (n * C + c) * spatial size + the spatial
  // offset, row-major or column-major (storage_order 1) within the spatial dims.
  std::vector<Expr> pos(p.nd);
  for (size_t d = 0; d < p.nd; ++d) {
    Expr kk = int_imm(0);
    if (g.kernel[d] > 1) {
      std::string v = "kiln_k" + tag + std::to_string(d);
      wloops.push_back({v, g.kernel[d]});
      kk = var(v);
    }
    const Tap w = tap(g, d, outer_dims_[2 + d], kk);
    inb = conj(conj(inb, w.ge0), w.lt_in);
    inpad = conj(inpad, w.lt_pad);
    xd.push_back(w.at);
    pos[d] = w.at;
  }
  Expr offset = int_imm(0);
  int64_t stride = 1;
  for (size_t i = 0; i < p.nd; ++i) {  // row-major: the last dim has stride 1; column-major: the first
    const size_t d = p.col_major ? i : p.nd - 1 - i;
    offset = add(offset, mul(pos[d], int_imm(stride)));
    stride *= g.in[d];
  }
  const Expr plane = add(mul(outer_dims_[0], int_imm(p.x->shape()[1])), outer_dims_[1]);
  const Expr flat_pos = add(mul(plane, int_imm(stride)), offset);
  Expr v = to_compute(L_.value_at(p.x, Index::from_dims(p.x->shape(), xd)));
  const DType A = p.A;
  const std::string acc = "kiln_acc0", cnt = "kiln_cnt0";
  Expr a = var(acc, A), c = var(cnt);
  Expr one_if = [&](Expr cond) { return cond ? select(cond, int_imm(1), int_imm(0)) : int_imm(1); }(
      p.include_pad ? inpad : inb);
  std::vector<Root> upd;
  const std::string best = "kiln_idx0";
  if (p.is_max) {
    // Strict > from the first in-input position on.
    Expr take = bin(BinOp::Or, bin(BinOp::Eq, c, int_imm(0)), bin(BinOp::Gt, v, a));
    if (inb) take = bin(BinOp::And, inb, take);
    upd.push_back(Root{StmtKind::Assign, acc, nullptr, nullptr, select(take, v, a)});
    if (p.indices) upd.push_back(Root{StmtKind::Assign, best, nullptr, nullptr, select(take, flat_pos, var(best))});
  } else {
    // The sum in double; the divisor counts in-input positions, or with count_include_pad those
    // inside the padded input (a ceil_mode window past the end padding is still clipped).
    Expr term = cast(A, v);
    upd.push_back(Root{StmtKind::Assign, acc, nullptr, nullptr, bin(BinOp::Add, a, inb ? select(inb, term, imm(0, A)) : term)});
  }
  upd.push_back(Root{StmtKind::Assign, cnt, nullptr, nullptr, bin(BinOp::Add, c, one_if)});

  std::vector<Root> init = {Root{StmtKind::Let, acc, nullptr, nullptr, p.init},
                            Root{StmtKind::Let, cnt, nullptr, nullptr, int_imm(0)}};
  // A window entirely in padding has no position: -1, as the reference.
  if (p.indices) init.push_back(Root{StmtKind::Let, best, nullptr, nullptr, int_imm(-1)});
  std::vector<Stmt> body = finish(std::move(init));
  for (auto& s : wrap(wloops, finish(std::move(upd)), false)) body.push_back(s);
  Expr fin = a;
  if (!p.is_max) {
    fin = bin(BinOp::Div, a, cast(A, c));
    if (p.t != DType::Float64) fin = cast(DType::Float32, fin);
  }
  for (auto& s : finish({Root{StmtKind::Let, "kiln_r0", nullptr, nullptr, cast(p.ot, fin)}})) body.push_back(s);
  if (p.indices)
    for (auto& s : finish({Root{StmtKind::Let, "kiln_ri0", nullptr, nullptr, var(best)}})) body.push_back(s);

  std::vector<Root> roots;
  std::vector<Stmt> stores;
  for (size_t i = 0; i < grp_.outputs.size(); ++i) {
    const Value* o = grp_.outputs[i];
    std::string ov = "kiln_o" + std::to_string(i);
    roots.push_back(Root{StmtKind::Let, ov, nullptr, nullptr, L_.value_at(o, Index::from_flat(o->shape(), outer_flat_expr_))});
    stores.push_back(store(k.outputs[i], outer_flat_expr_, var(ov, o->dtype())));
  }
  for (auto& s : finish(std::move(roots))) body.push_back(s);
  for (auto& s : stores) body.push_back(s);
  return body;
}

std::vector<Stmt> RowKernelBuilder::pool_row(const PoolSpec& p, const LoopKernel& k, const Expr& first, int64_t len,
                                             const std::string& jv, const std::string& tag) {
  const nn::WindowGeometry& g = p.g;
  const size_t w = p.nd - 1;  // the width: spatial dim w is dim 2 + w of x and y
  auto row = std::make_shared<Buffer>(Buffer{"kiln_prow" + tag, p.A, Shape{len}, Scope::Local});
  const std::string cnt = "kiln_pcnt" + tag;
  const Expr c = var(cnt);
  std::vector<Stmt> body;
  const std::string z = "kiln_pz" + tag;
  body.push_back(for_loop(z, int_imm(len), {store(row, var(z), p.init)}, ForKind::Vectorized));
  body.push_back(let(cnt, int_imm(0)));

  // The window dims but the width: loops, the window row's bounds tests, its clamped position.
  WindowRows rows = window_rows(g, outer_dims_, tag);
  const std::vector<std::pair<std::string, int64_t>>& wloops = rows.loops;
  const std::vector<Expr>& xd = rows.at;
  const Expr inb = rows.inb, inpad = rows.inpad;
  // Along the width, no test: output column first + j, window column kw. A short window row
  // (kernel[w] <= kMaxInnerWindow) runs inside the row loop, unrolled: one pass over the row per
  // window row instead of one per window position, each output's positions still in window order.
  const bool unrolled = g.kernel[w] <= kMaxInnerWindow;
  const std::string kwv = "kiln_k" + tag + std::to_string(w);
  auto value = [&](const Expr& j, const Expr& kw) {
    std::vector<Expr> at = xd;
    at.push_back(tap(g, w, add(first, j), kw).pos);
    return to_compute(L_.value_at(p.x, Index::from_dims(p.x->shape(), at)));
  };
  // row[j] = the accumulator after the window row's positions (or the one at `kw` when the window
  // row is not unrolled), starting from row[j], or with `seed` from the first position's value;
  // for j over the row, vectorized. The loop invariants (the window row's index arithmetic, a
  // prologue's per-row values) go ahead of it.
  using Update = std::function<Expr(Expr acc, Expr v)>;
  auto row_loop = [&](const std::string& jn, bool seed, const Update& update) {
    const Expr j = var(jn);
    const std::string acc = "kiln_pacc" + tag;
    const Expr a = var(acc, p.A);
    std::vector<Stmt> out;
    const Expr kw = unrolled ? int_imm(0) : g.kernel[w] > 1 ? var(kwv) : int_imm(0);
    const Expr start = seed ? value(j, kw) : load(row, j);
    std::vector<Stmt> loop = finish_in_loop({Root{StmtKind::Let, acc, nullptr, nullptr, start}}, {jn}, out);
    // The positions after the seed's: the window row's from..to-1 when unrolled, else `kw`'s.
    const int64_t from = seed ? 1 : 0, to = unrolled ? g.kernel[w] : 1;
    if (to > from) {
      const std::string kn = kwv + (seed ? "f" : "");
      const Expr k = to - from > 1 ? add(var(kn), int_imm(from)) : int_imm(from);
      const Expr next = update(a, value(j, unrolled ? k : kw));
      std::vector<Stmt> step = finish_in_loop({Root{StmtKind::Assign, acc, nullptr, nullptr, next}}, {jn, kn, acc}, out);
      if (to - from > 1) step = {for_loop(kn, int_imm(to - from), std::move(step), ForKind::Unrolled)};
      for (auto& st : step) loop.push_back(st);
    }
    loop.push_back(store(row, j, a));
    out.push_back(for_loop(jn, int_imm(len), std::move(loop), ForKind::Vectorized));
    return out;
  };
  std::vector<Stmt> update;
  if (p.is_max) {
    // The first in-input position of every window of the row is the same (the width adds none
    // outside the input), so "first" is one flag per row: the row takes it as is, later positions
    // when strictly greater (a NaN row value stays; a NaN position is skipped).
    const Update greater = [](Expr a, Expr v) { return select(bin(BinOp::Gt, v, a), v, a); };
    Expr is_first = bin(BinOp::Eq, c, int_imm(0));
    if (!unrolled && g.kernel[w] > 1) is_first = bin(BinOp::And, is_first, bin(BinOp::Eq, var(kwv), int_imm(0)));
    // In this order: each row_loop names its Lets from one counter, and the order in which a
    // call's arguments are evaluated is the compiler's (GCC and clang named them differently).
    std::vector<Stmt> first = row_loop("kiln_pf" + tag, true, greater);
    std::vector<Stmt> later = row_loop("kiln_pu" + tag, false, greater);
    update.push_back(if_then(is_first, std::move(first), std::move(later)));
  } else {
    const Update sum = [&](Expr a, Expr v) { return bin(BinOp::Add, a, cast(p.A, v)); };
    update = row_loop("kiln_pu" + tag, false, sum);
  }
  if (!unrolled && g.kernel[w] > 1) update = {for_loop(kwv, int_imm(g.kernel[w]), std::move(update))};
  // The window row counts kernel[w] positions where it is inside the input (inside the padded
  // input with count_include_pad); for Max the count only says whether a position was seen.
  std::vector<Stmt> window;
  Expr in_row;  // the window row's test, computed once (null: always inside)
  if (inb) {
    window = finish({Root{StmtKind::Let, "kiln_pin" + tag, nullptr, nullptr, inb}});
    in_row = var("kiln_pin" + tag, DType::Bool);
    window.push_back(if_then(in_row, std::move(update)));
  } else {
    window = std::move(update);
  }
  Expr add_count = int_imm(g.kernel[w]);
  if (p.include_pad && inpad) add_count = select(inpad, add_count, int_imm(0));
  if (!p.include_pad && in_row) add_count = select(in_row, add_count, int_imm(0));
  for (auto& s : finish({Root{StmtKind::Assign, cnt, nullptr, nullptr, bin(BinOp::Add, c, add_count)}}))
    window.push_back(s);
  for (auto& s : wrap(wloops, std::move(window), false)) body.push_back(s);

  // Finalise and store: output column first + j.
  Stmt out = finish_row(p, k, first, len, jv, {}, load(row, var(jv)), c, {}, body);
  body.push_back(out);
  return {allocate(row, std::move(body))};
}

bool RowKernelBuilder::separable(const PoolSpec& p, int64_t row_len) const {
  const nn::WindowGeometry& g = p.g;
  const size_t w = p.nd - 1;
  if (!reorder_sums_ || p.indices || p.nd < 2 || g.out[w - 1] < 2 || row_len > kPoolRow) return false;
  if (g.kernel[w] < 2 || g.kernel[w] > kMaxInnerWindow) return false;
  int64_t rows = 1;
  for (size_t d = 0; d < w; ++d) {
    rows *= g.kernel[d];
    // Max seeds each output with its window's first in-input position (pool_rows_separable):
    // along a dim with padding, the clamped start of the window is that position only without
    // dilation.
    if (p.is_max && g.dilation[d] != 1 && g.pad_begin[d] > 0) return false;
  }
  if (rows < 2 || rows > kMaxWindowRows) return false;
  // Profitability: vector reads per output. Unseparated, every window position is read along the
  // row; separated, each input column once per window row, its sum stored and read back once
  // per window column, plus Max's seed. A read with a stride along the row is two loads and a
  // permute (counted 3). Measured (1 thread): 3x3 stride 2 max 0.114 -> 0.085 ms over 64x111x111,
  // 3x3 stride 1 average 0.117 -> 0.067 over 192x35x35; 2x2 stride 2 windows, which overlap
  // nowhere, lose (max over 64x224x224 0.23 -> 0.26) and stay unseparated.
  const int64_t sw = g.stride[w], kw = g.kernel[w], gather = sw > 1 ? 3 : 1;
  const int64_t unseparated = rows * kw * gather;
  const int64_t separated = rows * sw + sw + kw * gather + (p.is_max && is_float(p.t) ? gather : 0);
  return separated < unseparated;
}

std::vector<Stmt> RowKernelBuilder::pool_rows_separable(const PoolSpec& p, const LoopKernel& k, int64_t lo, int64_t hi,
                                                        bool parallel) {
  const nn::WindowGeometry& g = p.g;
  const size_t w = p.nd - 1, hd = 2 + w - 1;  // the width; the height's dim in x and y
  const Shape& ys = p.y->shape();
  const int64_t kw = g.kernel[w], sw = g.stride[w], dw = g.dilation[w], len = hi - lo, out_h = g.out[w - 1];
  // Input columns base .. base + span - 1 hold every interior window of a row.
  const int64_t span = (len - 1) * sw + (kw - 1) * dw + 1;
  const Expr base = tap(g, w, int_imm(lo), int_imm(0)).pos;
  // Rows of column sums start at 64-byte boundaries (a misaligned vector load spans two cache lines).
  const int64_t esize = int64_t(dtype_size(p.A)), per_line = std::max<int64_t>(1, 64 / esize);
  const int64_t pitch = (span + per_line - 1) / per_line * per_line;
  const int64_t rows = pitch * esize >= kSeparableRowBytes ? 1 : std::clamp<int64_t>(kSeparableBytes / (pitch * esize), 1, out_h);
  using Fold = std::function<Expr(Expr acc, Expr v)>;
  const Fold update = p.is_max ? Fold([](Expr a, Expr v) { return select(bin(BinOp::Gt, v, a), v, a); })
                               : Fold([&](Expr a, Expr v) { return bin(BinOp::Add, a, cast(p.A, v)); });
  const Expr height = outer_dims_[hd];

  // One block of `n` output rows from row `row0`; `tag` names its loops and buffer.
  auto block = [&](const Expr& row0, int64_t n, const std::string& tag) {
    auto col = std::make_shared<Buffer>(Buffer{"kiln_pcol" + tag, p.A, Shape{n * pitch}, Scope::Local});
    // The window rows (every window dim but the width) of the output row at outer_dims_: their
    // loops, bounds tests and clamped positions; for Max also each dim's first in-input window
    // position and whether the window has one.
    std::vector<std::pair<std::string, int64_t>> wloops;
    std::vector<Expr> xd, first_at;
    Expr inb, inpad, any_in;
    auto window = [&]() {
      WindowRows r = window_rows(g, outer_dims_, tag);
      wloops = std::move(r.loops);
      xd = std::move(r.at);
      inb = r.inb;
      inpad = r.inpad;
      first_at = {outer_dims_[0], outer_dims_[1]};
      any_in = nullptr;
      for (size_t d = 0; d < w; ++d) {
        // The window's first and last positions; a test only where some window of the output
        // lies entirely in the begin (end) padding.
        const Tap t0 = tap(g, d, outer_dims_[2 + d], int_imm(0));
        const Tap tl = tap(g, d, outer_dims_[2 + d], int_imm(g.kernel[d] - 1));
        const bool before = (g.kernel[d] - 1) * g.dilation[d] - g.pad_begin[d] < 0;
        const bool after = (g.out[d] - 1) * g.stride[d] - g.pad_begin[d] > g.in[d] - 1;
        if (before) any_in = conj(any_in, bin(BinOp::Ge, tl.pos, int_imm(0)));
        if (after) any_in = conj(any_in, bin(BinOp::Lt, t0.pos, int_imm(g.in[d])));
        // Clamped, so that the load stays inside the input where there is no such position.
        first_at.push_back(after ? clamp(t0.pos, 0, g.in[d] - 1) : t0.ge0 ? bin(BinOp::Max, t0.pos, int_imm(0)) : t0.pos);
      }
    };
    std::vector<Stmt> body;

    // Pass 1, down the window rows, for every row of the block: col[r][u] = the window rows'
    // reduction at input column base + u, contiguous loads. A window row outside the input adds
    // the neutral value (-inf or 0); Max skips NaNs here (v > acc is false for them), the seed of
    // pass 2 restores the reference's rule.
    {
      const std::string r = "kiln_pr" + tag, u = "kiln_pc" + tag, acc = "kiln_pv" + tag;
      set_position(ys, hd, add(row0, var(r)));
      window();
      std::vector<Expr> at = xd;
      at.push_back(add(base, var(u)));
      Expr v = to_compute(L_.value_at(p.x, Index::from_dims(p.x->shape(), at)));
      if (inb) v = select(inb, v, p.init);
      std::set<std::string> vary = {u, acc};
      for (const auto& l : wloops) vary.insert(l.first);
      std::vector<Stmt> row;
      std::vector<Stmt> loop = finish_in_loop({Root{StmtKind::Let, acc, nullptr, nullptr, p.init}}, {u}, row);
      std::vector<Stmt> step =
          finish_in_loop({Root{StmtKind::Assign, acc, nullptr, nullptr, update(var(acc, p.A), v)}}, vary, row);
      for (size_t i = wloops.size(); i-- > 0;)
        step = {for_loop(wloops[i].first, int_imm(wloops[i].second), std::move(step), ForKind::Unrolled)};
      for (auto& st : step) loop.push_back(st);
      loop.push_back(store(col, add(mul(var(r), int_imm(pitch)), var(u)), var(acc, p.A)));
      row.push_back(for_loop(u, int_imm(span), std::move(loop), ForKind::Vectorized));
      body.push_back(for_loop(r, int_imm(n), std::move(row)));
    }

    // Pass 2, per output row of the block: the border outputs in the point form, and the
    // interior along the row: output j reduces col[r][j * stride + kw * dilation] over the window
    // row. Max starts from the window's first in-input position, so that a NaN there is the result
    // and a later one is skipped, as in the reference (equal values may resolve to the other
    // zero's sign). An average divides by kernel[w] per window row inside the input (inside the
    // padded input with count_include_pad).
    const std::string r = "kiln_pq" + tag;
    set_position(ys, hd, add(row0, var(r)));
    window();
    std::vector<Stmt> row;
    if (lo > 0) {
      set_position(ys, hd + 1, var("kiln_wl" + tag));
      row.push_back(for_loop("kiln_wl" + tag, int_imm(lo), pool_point(p, k, "l" + tag)));
    }
    const std::string cnt = "kiln_pcnt" + tag;
    if (!p.is_max) {
      row.push_back(let(cnt, int_imm(0)));
      Expr add_count = int_imm(kw);
      if (p.include_pad && inpad) add_count = select(inpad, add_count, int_imm(0));
      if (!p.include_pad && inb) add_count = select(inb, add_count, int_imm(0));
      std::vector<Stmt> count =
          finish({Root{StmtKind::Assign, cnt, nullptr, nullptr, bin(BinOp::Add, var(cnt), add_count)}});
      for (auto& s : wrap(wloops, std::move(count), false)) row.push_back(s);
    }
    const std::string jv = "kiln_pj" + tag, h = "kiln_ph" + tag, kv = "kiln_k" + tag + std::to_string(w);
    const Expr j = var(jv);
    Expr seed = p.init;
    if (p.is_max && is_float(p.t)) {
      std::vector<Expr> at = first_at;
      at.push_back(add(base, mul(j, int_imm(sw))));
      seed = to_compute(L_.value_at(p.x, Index::from_dims(p.x->shape(), at)));
      if (any_in) seed = select(any_in, seed, p.init);
    }
    std::vector<Stmt> head = finish_in_loop({Root{StmtKind::Let, h, nullptr, nullptr, seed}}, {jv}, row);
    const Expr at = add(mul(var(r), int_imm(pitch)), add(mul(j, int_imm(sw)), mul(var(kv), int_imm(dw))));
    std::vector<Stmt> step =
        finish_in_loop({Root{StmtKind::Assign, h, nullptr, nullptr, update(var(h, p.A), load(col, at))}}, {jv, kv, h}, row);
    head.push_back(for_loop(kv, int_imm(kw), std::move(step), ForKind::Unrolled));
    Stmt interior = finish_row(p, k, int_imm(lo), len, jv, std::move(head), var(h, p.A), var(cnt), {h}, row);
    row.push_back(interior);
    if (hi < g.out[w]) {
      set_position(ys, hd + 1, add(var("kiln_wr" + tag), int_imm(hi)));
      row.push_back(for_loop("kiln_wr" + tag, int_imm(g.out[w] - hi), pool_point(p, k, "r" + tag)));
    }
    body.push_back(for_loop(r, int_imm(n), std::move(row)));
    set_position(ys, hd, height);
    return allocate(col, std::move(body));
  };

  std::vector<Stmt> out;
  const int64_t blocks = out_h / rows, tail = out_h % rows;
  if (blocks == 1) {
    out.push_back(block(int_imm(0), rows, ""));
  } else {
    out.push_back(for_loop("kiln_hb", int_imm(blocks), {block(mul(var("kiln_hb"), int_imm(rows)), rows, "")},
                           parallel ? ForKind::Parallel : ForKind::Serial));
  }
  if (tail > 0) out.push_back(block(int_imm(blocks * rows), tail, "t"));
  return out;
}

Stmt RowKernelBuilder::finish_row(const PoolSpec& p, const LoopKernel& k, const Expr& first, int64_t len,
                                  const std::string& jv, std::vector<Stmt> head, const Expr& value, const Expr& count,
                                  const std::set<std::string>& vary, std::vector<Stmt>& before) {
  set_last_position(p.y->shape(), add(first, var(jv)));
  Expr fin = value;
  if (!p.is_max) {
    fin = bin(BinOp::Div, fin, cast(p.A, count));
    if (p.t != DType::Float64) fin = cast(DType::Float32, fin);
  }
  std::vector<Root> roots = {Root{StmtKind::Let, "kiln_r0", nullptr, nullptr, cast(p.ot, fin)}};
  std::vector<Stmt> stores;
  for (size_t i = 0; i < grp_.outputs.size(); ++i) {
    const Value* o = grp_.outputs[i];
    std::string ov = "kiln_o" + std::to_string(i);
    roots.push_back(Root{StmtKind::Let, ov, nullptr, nullptr, L_.value_at(o, Index::from_flat(o->shape(), outer_flat_expr_))});
    stores.push_back(store(k.outputs[i], outer_flat_expr_, var(ov, o->dtype())));
  }
  // kiln_r0 changes along the row although no index of it says so.
  std::set<std::string> varying = vary;
  varying.insert(jv);
  varying.insert("kiln_r0");
  for (auto& s : finish_in_loop(std::move(roots), varying, before)) head.push_back(s);
  for (auto& s : stores) head.push_back(s);
  return for_loop(jv, int_imm(len), std::move(head), ForKind::Vectorized);
}

}  // namespace kiln::loop::detail
