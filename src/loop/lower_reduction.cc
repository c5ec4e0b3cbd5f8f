// Lowering of reduction-anchored groups to loop nests: row kernels (softmax, LayerNorm,
// GlobalAveragePool, Reduce*, ArgMax/ArgMin with their elementwise prologue and epilogue).
// Windowed pools (MaxPool, AveragePool) are dispatched from build() to lower_pool.cc; the statement
// machinery both use (finish, bind, outer_loops) is in row_kernel.cc (row_kernel.h).
//
// A row kernel's reductions all reduce the same axes of same-shaped inputs (the partitioner's
// rule); every other member produces either the whole domain or one value per row. The nest:
//
//   for each outer (non-reduced) position           -- outermost loop Parallel when big
//     per reduction, in topological order:
//       acc = identity; for each row element (row-major): acc = f(acc, element)
//       r = finalise(acc)                              -- a Let, visible to later passes
//     per-row outputs: computed into Lets here
//     final pass over the row: full-domain outputs, recomputed from the inputs
//     per-row stores
//
// Row elements and outputs are built by the elementwise Lowerer (value_at) at the position of
// the current pass; a reduction result is a fake Register buffer that value_at loads from, and
// each such load is replaced by the result's Let — only at the current row: a load anywhere else
// (a broadcast or remap across rows) refuses the group. Recomputing full-domain values in each
// pass instead of storing a row buffer keeps the kernel to one loop nest — except for a costly
// reduction input (an exp) that the output pass reads again, which its pass keeps in a local row.
// Values that do not change along a pass's loop (per-row values) are computed ahead of it, and
// rows of at least 128 elements run 8 at a time (unroll-and-jam, row_jam.h) so that 8 rows'
// accumulations overlap. None of this changes a result bit.
//
// Vector lanes. A pass over a row that is contiguous in memory (the reduced axes are the trailing
// ones) and at least 2 x L elements long (Max/Min take L/2 lanes below 2 x kLanes) accumulates in L partials, element j into partial j mod L
// in ascending j (the row % L tail included: element j still goes to partial j mod L), so that the
// C compiler keeps the partials in vector registers instead of a serial chain of one operation per
// element.
//  - Max/Min (the same value in any order; a zero maximum may take the other zero's sign, a NaN
//    another NaN's payload) and integer accumulation (wrapping arithmetic is associative):
//    L = kLanes = 32, the partials combined in the pairwise tree below. (Combined in lane order, a
//    serial loop of compares, a softmax row's max spent more time there than in its 197 elements:
//    a sixth of the attention kernel's non-GEMM time, ViT-B/16 shapes.)
//  - Float sums (Sum, Mean, L1, L2, SumSquare, LogSum, GlobalAveragePool's double sum, the sum of
//    exps of LogSumExp; float32, float64 and the half types, which add in float): L =
//    Schedule::reduction_lanes (16), each partial starting at 0, then combined in a fixed
//    pairwise tree: partial l += partial l + L/2 for l < L/2, then l + L/4 for l < L/4, ..., the
//    result partial 0. This is a summation order of its own, written out in the loop IR (a local
//    buffer of partials, vectorized loops over it), so the interpreter and the compiled C give the
//    same bits; it differs from the reference's row order by rounding only (docs/codegen.md,
//    "Numerics contract"). reduction_lanes = 0 or 1 keeps the reference's order (bit-identical),
//    which bounds a pass by the add latency: about one element per 2-3 cycles. Float products
//    keep the row order.
//
// Numerics otherwise follow src/reference/ops/reduction_ops.cc and nn_pool.cc formula by formula:
// float32 accumulates in float32, float16/bfloat16 in float, float64 in double, integers in
// 64 bits with wrapping and a final wrapping narrowing; Max/Min start from the row's first element
// (equal to the reference's identity start, NaN propagating; GlobalMaxPool as nn_pool.cc, which
// does not propagate a NaN after the first element); GlobalAveragePool sums in double under strict
// numerics (reduction_lanes 0 or 1), else in the input's compute type like the other float sums.
// ArgMax/ArgMin as reduction_select.cc (NaN greatest, ties to the first index unless
// select_last_index). Run-time axes: those the declared shapes decide (runtime_params.h), checked
// by the kernel's guard; where the shapes leave several sets open (ReduceSum of [3,2,2] to [3,2]),
// the rows are a view [output dims..., row] of the input read through the chosen set's index
// arithmetic (input_at), the reduction alone in its kernel. Refused: bool Max/Min, empty rows,
// noop reductions (remove_identity makes them copies).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "fusion/op_kind.h"
#include "loop/affine.h"
#include "loop/row_jam.h"
#include "loop/row_kernel.h"
#include "loop/runtime_params.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

std::optional<RKind> reduce_kind(const std::string& op) {
  static const std::map<std::string, RKind> m = {
      {"ReduceSum", RKind::Sum},       {"ReduceMean", RKind::Mean},     {"ReduceMax", RKind::Max},
      {"ReduceMin", RKind::Min},       {"ReduceProd", RKind::Prod},     {"ReduceL1", RKind::L1},
      {"ReduceL2", RKind::L2},         {"ReduceLogSum", RKind::LogSum}, {"ReduceLogSumExp", RKind::LogSumExp},
      {"ReduceSumSquare", RKind::SumSquare}, {"GlobalAveragePool", RKind::GlobalAvg},
      {"GlobalMaxPool", RKind::GlobalMax}, {"ArgMax", RKind::ArgMax}, {"ArgMin", RKind::ArgMin}};
  auto it = m.find(op);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

bool is_unsigned_int(DType t) {
  return t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

// The reference kernels' dtype sets (reduction_internal.h TypeSet::Reduce / ReduceMinMax,
// nn_pool.cc's global pools); bool Max/Min (opset 20) is not lowered.
bool accepts(RKind k, DType t) {
  if (k == RKind::ArgMax || k == RKind::ArgMin) return t != DType::Bool;  // TypeSet::Numeric
  if (k == RKind::GlobalAvg || k == RKind::GlobalMax)
    return t == DType::Float32 || t == DType::Float64 || t == DType::Float16;
  const bool base = is_float(t) || t == DType::Int32 || t == DType::Int64 || t == DType::UInt32 || t == DType::UInt64;
  if (k == RKind::Max || k == RKind::Min) return base || t == DType::Int8 || t == DType::UInt8;
  return base;
}

Expr bin(BinOp op, Expr a, Expr b) { return binary(op, std::move(a), std::move(b)); }

}  // namespace

std::vector<Expr> RowKernelBuilder::pass_dims(int pass, std::vector<std::pair<std::string, int64_t>>& loops) {
  std::vector<Expr> d = outer_dims_;
  for (size_t i = 0; i < in_.size(); ++i) {
    if (!reduced_[i] || in_[i] == 1) continue;
    std::string v = "kiln_j" + std::to_string(pass) + "_" + std::to_string(i);
    loops.push_back({v, in_[i]});
    d[i] = var(v);
  }
  return d;
}

void RowKernelBuilder::lower_reduction(const Node& r, RKind kind, int k, std::vector<Stmt>& out) {
  const DType t = r.input(0)->dtype();
  const DType ot = r.output(0)->dtype();
  const bool flt = is_float(t);
  // Accumulator and real-result types (reduction_internal.h Accum / RealOf).
  DType A = flt ? compute_type(t) : (is_unsigned_int(t) ? DType::UInt64 : DType::Int64);
  // GlobalAveragePool sums in double as the reference does only under strict numerics; by default
  // in the input's compute type, in lanes like every float sum (its rows are short: MobileNetV2's
  // 1280 rows of 49 spent 0.06 ms of a 0.41 ms conv + pool kernel in the double lanes, 0.03 in float).
  if (kind == RKind::GlobalAvg && (!flt || sum_lanes_ <= 1)) A = DType::Float64;
  const DType R = flt ? A : DType::Float64;
  const std::string acc = "kiln_acc" + std::to_string(k);
  auto zero = [&](DType d) { return imm(0, d); };

  // One pass: acc (of type `at`) = init; for the row: acc = update(acc, element, first). With a
  // `combine` (how two partial accumulators merge) and a long contiguous row, in lanes: `float_sum`
  // for a float sum (sum_lanes_ partials), else for Max/Min and integer passes, whose result no
  // order changes (kLanes partials); the partials combined in a pairwise tree.
  auto pass = [&](const std::string& name, DType at, Expr init, const Update& update, const Combine& combine,
                  bool float_sum = false) {
    // Order-free passes take half the lanes on a row too short for kLanes.
    const int64_t lanes = float_sum ? sum_lanes_ : row_ >= kMinLaneBlocks * kLanes ? kLanes : kLanes / 2;
    if (combine && lanes > 1 && contiguous_ && row_ >= kMinLaneBlocks * lanes) {
      for (auto& s : finish({Root{StmtKind::Let, name, nullptr, nullptr, init}})) out.push_back(s);
      lane_pass(r, name, at, init, update, combine, lanes, out);
      return;
    }
    std::vector<std::pair<std::string, int64_t>> loops;
    const int p = passes_++;
    std::vector<Expr> d = pass_dims(p, loops);
    Expr elem = input_at(r, Index::from_dims(in_, d));
    Expr rowflat = int_imm(0);
    for (size_t i = 0; i < in_.size(); ++i)
      if (reduced_[i] && in_[i] != 1) rowflat = add(mul(rowflat, int_imm(in_[i])), d[i]);
    Expr first = bin(BinOp::Eq, rowflat, int_imm(0));
    std::vector<Stmt> init_list = finish({Root{StmtKind::Let, name, nullptr, nullptr, init}});
    std::set<std::string> vars;
    for (const auto& lp : loops) vars.insert(lp.first);
    std::vector<Root> roots = {Root{StmtKind::Assign, name, nullptr, nullptr, update(var(name, at), elem, first)}};
    BufferPtr row = stage_row(r, elem);
    if (row) roots.push_back(Root{StmtKind::Store, "", row, rowflat, elem});
    std::vector<Stmt> body = finish_in_loop(std::move(roots), vars, init_list);
    for (auto& s : init_list) out.push_back(s);
    for (auto& s : wrap(loops, std::move(body), false)) out.push_back(s);
  };
  auto is_nan = [](const Expr& e) { return unary(UnOp::IsNaN, e); };
  // max_nan / min_nan from the first element on (equal to the reference's identity start).
  auto extreme = [&](BinOp cmp) {
    return [&, cmp](Expr a, Expr e, Expr first) {
      Expr v = cast(A, e);
      Expr better = bin(cmp, v, a);
      // GlobalMaxPool keeps the first NaN only (`x > best ? x : best`); Reduce* propagate NaN.
      if (flt && kind != RKind::GlobalMax) better = bin(BinOp::Or, better, is_nan(v));
      return select(bin(BinOp::Or, first, better), v, a);
    };
  };
  auto sum = [&](Expr a, Expr e, Expr) { return bin(BinOp::Add, a, cast(A, e)); };
  // Partial sums merge by addition: integer ones (exact in any order) in kLanes lanes, float ones
  // in the documented order of sum_lanes_ lanes.
  const Combine add_partials = [](Expr a, Expr b) { return bin(BinOp::Add, a, b); };
  // Max/Min partials merge as one more element would (NaN-propagating, strict comparison).
  auto merge_as = [](Update u) -> Combine { return [u](Expr a, Expr b) { return u(a, b, int_imm(0, DType::Bool)); }; };

  if (kind == RKind::ArgMax || kind == RKind::ArgMin) {
    // reduction_select.cc: keys compare with NaN greater than every number (NaNs equal); the first
    // element starts the row, a strictly better one moves the answer, a tie only with
    // select_last_index.
    const DType K = compute_type(t);
    const std::string best = acc + "_best", arg = acc, take = acc + "_take";
    std::vector<std::pair<std::string, int64_t>> loops;
    const int p = passes_++;
    std::vector<Expr> d = pass_dims(p, loops);
    Expr j = int_imm(0);
    for (size_t i = 0; i < in_.size(); ++i)
      if (reduced_[i]) j = d[i];
    Expr v = cast(K, input_at(r, Index::from_dims(in_, d)));
    Expr b = var(best, K);
    auto greater = [&](Expr x, Expr y) {
      Expr g = bin(BinOp::Gt, x, y);
      if (!is_float(K)) return g;
      return bin(BinOp::Or, bin(BinOp::And, is_nan(x), unary(UnOp::Not, is_nan(y))), g);
    };
    Expr vb = greater(v, b), bv = greater(b, v);
    Expr better = kind == RKind::ArgMax ? vb : bv;
    if (r.attr_int("select_last_index", 0) == 1)
      better = bin(BinOp::Or, better, bin(BinOp::And, unary(UnOp::Not, vb), unary(UnOp::Not, bv)));
    better = bin(BinOp::Or, bin(BinOp::Eq, j, int_imm(0)), better);
    for (auto& s : finish({Root{StmtKind::Let, best, nullptr, nullptr, imm(0, K)},
                           Root{StmtKind::Let, arg, nullptr, nullptr, int_imm(0)}}))
      out.push_back(s);
    std::vector<Stmt> body = finish({Root{StmtKind::Let, take, nullptr, nullptr, better},
                                     Root{StmtKind::Assign, arg, nullptr, nullptr, select(var(take, DType::Bool), j, var(arg))},
                                     Root{StmtKind::Assign, best, nullptr, nullptr, select(var(take, DType::Bool), v, b)}});
    for (auto& s : wrap(loops, std::move(body), false)) out.push_back(s);
    for (auto& s : finish({Root{StmtKind::Let, "kiln_r" + std::to_string(k), nullptr, nullptr, cast(ot, var(arg))}}))
      out.push_back(s);
    return;
  }

  Expr fin;  // the finalised value, in A or R
  switch (kind) {
    case RKind::Sum:
    case RKind::Mean:
    case RKind::LogSum:
    case RKind::GlobalAvg:
      pass(acc, A, zero(A), sum, add_partials, flt);
      break;
    case RKind::Max:
      pass(acc, A, zero(A), extreme(BinOp::Gt), merge_as(extreme(BinOp::Gt)));
      break;
    case RKind::GlobalMax:
      // nn_pool.cc ignores a NaN after the first element: lanes would keep one that starts a lane.
      pass(acc, A, zero(A), extreme(BinOp::Gt), nullptr);
      break;
    case RKind::Min:
      pass(acc, A, zero(A), extreme(BinOp::Lt), merge_as(extreme(BinOp::Lt)));
      break;
    case RKind::Prod:
      pass(acc, A, imm(1, A), [&](Expr a, Expr e, Expr) { return bin(BinOp::Mul, a, cast(A, e)); },
           flt ? Combine() : [](Expr a, Expr b) { return bin(BinOp::Mul, a, b); });
      break;
    case RKind::L1:
      pass(acc, A, zero(A), [&](Expr a, Expr e, Expr) {
        Expr v = cast(A, e);
        return bin(BinOp::Add, a, is_unsigned_int(t) ? v : unary(UnOp::Abs, v));
      }, add_partials, flt);
      break;
    case RKind::L2:
    case RKind::SumSquare:
      pass(acc, A, zero(A), [&](Expr a, Expr e, Expr) {
        Expr v = cast(A, e);
        return bin(BinOp::Add, a, bin(BinOp::Mul, v, v));
      }, add_partials, flt);
      break;
    case RKind::LogSumExp: {
      // log(sum(exp(x - m))) + m with m the NaN-propagating max; a non-finite m is the result.
      const std::string m = acc + "_max";
      const Update max_nan = [&](Expr a, Expr e, Expr first) {
        Expr v = cast(R, e);
        return select(bin(BinOp::Or, first, bin(BinOp::Or, bin(BinOp::Gt, v, a), is_nan(v))), v, a);
      };
      pass(m, R, zero(R), max_nan, merge_as(max_nan));
      Expr mv = var(m, R);
      pass(acc, R, zero(R), [&](Expr a, Expr e, Expr) {
        return bin(BinOp::Add, a, unary(UnOp::Exp, bin(BinOp::Sub, cast(R, e), mv)));
      }, add_partials, /*float_sum=*/true);
      Expr finite = bin(BinOp::And, unary(UnOp::Not, is_nan(mv)), unary(UnOp::Not, unary(UnOp::IsInf, mv)));
      fin = select(finite, bin(BinOp::Add, mv, unary(UnOp::Log, var(acc, R))), mv);
      break;
    }
  }
  Expr a = var(acc, A);
  switch (kind) {
    case RKind::Mean: fin = bin(BinOp::Div, a, flt ? imm(double(row_), A) : int_imm(row_, A)); break;
    case RKind::GlobalAvg: fin = bin(BinOp::Div, a, imm(double(row_), A)); break;
    case RKind::L2: fin = unary(UnOp::Sqrt, cast(R, a)); break;
    case RKind::LogSum: fin = unary(UnOp::Log, cast(R, a)); break;
    case RKind::LogSumExp: break;
    default: fin = a; break;
  }
  // Half types round once from float (the reference stores float results into them).
  if ((ot == DType::Float16 || ot == DType::BFloat16) && fin->type != DType::Float32) fin = cast(DType::Float32, fin);
  fin = cast(ot, fin);
  const std::string rv = "kiln_r" + std::to_string(k);
  for (auto& s : finish({Root{StmtKind::Let, rv, nullptr, nullptr, fin}})) out.push_back(s);
}

namespace {

// Worth keeping instead of computing again: transcendental functions and calls (an expf costs
// tens of cycles; a store and a load from a row in L1 a few).
bool expensive(const Expr& e) {
  if (e->kind == ExprKind::Call) return true;
  if (e->kind == ExprKind::Binary && e->bin == BinOp::Pow) return true;
  if (e->kind == ExprKind::Unary) switch (e->un) {
      case UnOp::Neg: case UnOp::Not: case UnOp::Abs: case UnOp::Floor: case UnOp::Ceil: case UnOp::Round:
      case UnOp::IsNaN: case UnOp::IsInf: case UnOp::Sqrt: break;
      default: return true;
    }
  return std::any_of(e->args.begin(), e->args.end(), expensive);
}

// Whether a vectorised loop of `body` loads a global buffer at a stride other than 0 or 1 along
// its variable, or at a position not affine in it: rows read across memory (a LayerNorm over the
// channels of an NCHW tensor, through the transposes that made them the rows). Unroll-and-jam
// must not run such rows side by side: GCC 12 vectorises the jammed copies' loads as one strided
// group, assembled element by element and fully unrolled (MobileViT's first LayerNorm over 144
// channels at a stride of 1024: 65,000 lines of assembly, 13 ms against 0.8 one row at a time).
bool strided_lane_loads(const std::vector<Stmt>& body, const std::string& lane = "") {
  std::function<bool(const Expr&)> expr = [&](const Expr& e) {
    if (!e) return false;
    if (e->kind == ExprKind::Load && !lane.empty() && e->buffer && e->buffer->scope == Scope::Global) {
      auto f = affine_form(e->args[0], AffineScope{{lane}, {}});
      if (!f) return true;
      const int64_t c = f->coef_of(lane);
      if (c != 0 && c != 1) return true;
    }
    return std::any_of(e->args.begin(), e->args.end(), expr);
  };
  for (const Stmt& st : body) {
    if (!st) continue;
    for (const Expr* e : {&st->extent, &st->index, &st->value, &st->cond})
      if (expr(*e)) return true;
    if (std::any_of(st->call_args.begin(), st->call_args.end(), expr)) return true;
    const std::string inner = st->kind == StmtKind::For && st->for_kind == ForKind::Vectorized ? st->var : lane;
    if (strided_lane_loads(st->body, inner) || strided_lane_loads(st->else_body, lane)) return true;
  }
  return false;
}

}  // namespace

BufferPtr RowKernelBuilder::stage_row(const Node& r, const Expr& elem) {
  const Value* v = r.input(0);
  if (!stage_ok_ || L_.input_buffers_.count(v) || !expensive(elem)) return nullptr;
  // Only for a value some other op of the group reads again (softmax's exp, read by the Div).
  const bool reread = std::any_of(v->uses().begin(), v->uses().end(), [&](const auto& u) {
    return u.first != &r && L_.members_.count(u.first);
  });
  if (!reread) return nullptr;
  const std::string k = std::to_string(rows_.size());
  auto row = std::make_shared<Buffer>(Buffer{"kiln_keep" + k, v->dtype(), Shape{row_}, Scope::Local});
  auto fake = std::make_shared<Buffer>(Buffer{"kiln_staged" + k, v->dtype(), in_, Scope::Local});
  rows_.push_back(row);
  staged_[fake.get()] = row;
  pending_stage_.push_back({v, fake});
  return row;
}

Expr RowKernelBuilder::input_at(const Node& r, const Index& at) {
  if (view_sets_.empty()) return L_.value_at(r.input(0), at);
  // `at` is a position of the view [output dims..., row]: for each axis set, the output dims are
  // the kept axes in order and the row position unravels over the reduced axes in order (the
  // reference's row-major walk over them), giving one flat index into the input per set.
  const std::vector<Expr>& d = *at.dims;
  const Shape& x = view_input_;
  std::vector<int64_t> stride(x.size(), 1);
  for (size_t k = x.size(); k-- > 1;) stride[k - 1] = stride[k] * x[k];
  // Size-1 axes hold position 0: the output's longer dims are the input's longer kept axes in order.
  std::vector<Expr> kept;
  for (size_t o = 0; o + 1 < at.shape.size(); ++o)
    if (at.shape[o] != 1) kept.push_back(d[o]);
  Expr flat;
  for (size_t c = view_sets_.size(); c-- > 0;) {
    const std::vector<bool>& red = view_sets_[c];
    Expr f = int_imm(0), row = d.back();
    size_t o = 0;
    for (size_t k = 0; k < x.size(); ++k)
      if (!red[k] && x[k] != 1) {
        KILN_CHECK(o < kept.size(), "run-time axes view: more kept axes than output dims");
        f = add(f, mul(kept[o++], int_imm(stride[k])));
      }
    KILN_CHECK(o == kept.size(), "run-time axes view: fewer kept axes than output dims");
    int64_t inner = 1;
    for (size_t k = x.size(); k-- > 0;) {
      if (!red[k] || x[k] == 1) continue;
      f = add(f, mul(mod(div_floor(row, int_imm(inner)), int_imm(x[k])), int_imm(stride[k])));
      inner *= x[k];
    }
    flat = flat ? select(binary(BinOp::Eq, runtime_param(view_site_, "set", 0), int_imm(int64_t(c))), f, flat) : f;
  }
  return L_.value_at(r.input(0), Index::from_flat(x, flat));
}

Index RowKernelBuilder::row_point(const Expr& j) {
  std::vector<Expr> d = outer_dims_;
  int64_t stride = 1;
  size_t first = in_.size();
  for (size_t i = 0; i < in_.size(); ++i)
    if (reduced_[i] && in_[i] != 1 && first == in_.size()) first = i;
  for (size_t i = in_.size(); i-- > 0;) {
    if (!reduced_[i] || in_[i] == 1) continue;
    Expr q = div_floor(j, int_imm(stride));
    d[i] = i == first ? q : mod(q, int_imm(in_[i]));
    stride *= in_[i];
  }
  return Index{in_, add(row_base_, j), std::move(d)};
}

// The lanes live in a local buffer of L accumulators:
//   lanes[l] = update(init, elem(l), first)                 l < L: each lane's first element
//   for b in [1, row / L): lanes[l] = update(lanes[l], elem(b * L + l))      (l vectorized)
//   lanes[l] = update(lanes[l], elem(row / L * L + l))    for the row % L tail
// then as a tree: for h = L/2, L/4, .., 1: lanes[l] = combine(lanes[l], lanes[l + h]) for
//                 l < h (vectorized); acc = lanes[0]
// A staged reduction input (stage_row) is stored to its local row as each lane loop reads it.
void RowKernelBuilder::lane_pass(const Node& r, const std::string& name, DType at, const Expr& init,
                                 const Update& update, const Combine& combine, int64_t L, std::vector<Stmt>& out) {
  KILN_CHECK(L >= 2 && row_ >= L && (L & (L - 1)) == 0, "lane_pass: ", L, " lanes over a row of ", row_);
  const std::string ps = std::to_string(passes_++);
  auto lanes = std::make_shared<Buffer>(Buffer{"kiln_lanes" + ps, at, Shape{L}, Scope::Local});
  const Expr yes = int_imm(1, DType::Bool), no = int_imm(0, DType::Bool);
  const int64_t blocks = row_ / L, tail = row_ % L;
  auto elem = [&](const Expr& j) { return input_at(r, row_point(j)); };
  const Expr elem0 = elem(int_imm(0));
  const BufferPtr row = stage_row(r, elem0);
  costly_lanes_ = costly_lanes_ || expensive(elem0);
  std::vector<Stmt> body;
  // One loop over lanes (inside `outer`, when given) whose invariants go ahead of it in `body`.
  auto lane_loop = [&](const std::string& v, int64_t extent, const Expr& block, bool seed, ForKind kind,
                       const std::string& outer = "", int64_t outer_extent = 0) {
    const Expr l = var(v);
    const Expr j = add(block, l);
    const Expr e = elem(j);
    Expr value = seed ? update(init, e, yes) : update(load(lanes, l), e, no);
    std::vector<Root> roots = {Root{StmtKind::Store, "", lanes, l, value}};
    if (row) roots.push_back(Root{StmtKind::Store, "", row, j, e});
    std::set<std::string> vars = {v};
    if (!outer.empty()) vars.insert(outer);
    Stmt loop = for_loop(v, int_imm(extent), finish_in_loop(std::move(roots), vars, body), kind);
    body.push_back(outer.empty() ? loop : for_loop(outer, int_imm(outer_extent), {loop}));
  };
  lane_loop("kiln_l" + ps, L, int_imm(0), true, ForKind::Vectorized);
  if (blocks > 1) {
    const std::string b = "kiln_b" + ps;
    lane_loop("kiln_l" + ps, L, mul(add(var(b), int_imm(1)), int_imm(L)), false, ForKind::Vectorized, b, blocks - 1);
  }
  if (tail > 0) lane_loop("kiln_t" + ps, tail, int_imm(blocks * L), false, ForKind::Serial);
  for (int64_t h = L / 2; h >= 1; h /= 2) {
    const Expr c = var("kiln_h" + ps + "_" + std::to_string(h));
    body.push_back(for_loop(c->name, int_imm(h), {store(lanes, c, combine(load(lanes, c), load(lanes, add(c, int_imm(h)))))},
                            h > 1 ? ForKind::Vectorized : ForKind::Serial));
  }
  body.push_back(assign(name, load(lanes, int_imm(0))));
  out.push_back(allocate(lanes, std::move(body)));
}

LoopKernel RowKernelBuilder::build(const std::string& name) {
  std::vector<std::pair<const Node*, RKind>> reds;
  for (const Node* n : grp_.nodes) {
    const auto ok = op_kind_of_type(n->op_type());
    if (ok && *ok == OpKind::Reduction && n->domain().empty()) {
      if (is_windowed_reduction(*n)) {
        for (const Node* o : grp_.nodes)
          if (o != n && is_windowed_reduction(*o)) refuse("two pools cannot share one loop nest");
        return build_pool(name, *n);
      }
      auto k = reduce_kind(n->op_type());
      if (!k) refuse(cat(n->op_type(), " has no row-kernel form"));
      reds.push_back({n, *k});
    } else {
      std::string why = unsupported_reason(*n);
      if (!why.empty()) refuse(why);
    }
  }
  if (reds.empty()) refuse("the reduction group has no reduction");

  // The reduced axes of each reduction, as its reference kernel reads them.
  std::vector<bool> reduced;
  for (const auto& [n, kind] : reds) {
    if (!n->input(0) || n->num_outputs() != 1) refuse(cat(n->op_type(), " has an unexpected signature"));
    const Shape& s = n->input(0)->shape();
    const DType t = n->input(0)->dtype();
    if (!accepts(kind, t)) refuse(cat(n->op_type(), " on ", dtype_name(t), " is not lowered to loops"));
    const int64_t rank = int64_t(s.size());
    std::vector<bool> red(s.size(), false);
    if (kind == RKind::GlobalAvg || kind == RKind::GlobalMax) {
      if (rank < 3) refuse(cat(n->op_type(), " needs a rank >= 3 input"));
      for (size_t i = 2; i < s.size(); ++i) red[i] = true;
    } else if (kind == RKind::ArgMax || kind == RKind::ArgMin) {
      const int64_t keep = n->attr_int("keepdims", 1), last = n->attr_int("select_last_index", 0);
      if ((keep != 0 && keep != 1) || (last != 0 && last != 1)) refuse(cat(n->op_type(), " has invalid attributes"));
      if (rank == 0) refuse(cat(n->op_type(), " of a scalar"));
      const int64_t a = n->attr_int("axis", 0);
      if (a < -rank || a >= rank) refuse(cat(n->op_type(), " axis ", a, " is out of range"));
      red[size_t(a < 0 ? a + rank : a)] = true;
    } else {
      const int64_t keep = n->attr_int("keepdims", 1), noop = n->attr_int("noop_with_empty_axes", 0);
      if ((keep != 0 && keep != 1) || (noop != 0 && noop != 1)) refuse(cat(n->op_type(), " has invalid attributes"));
      if (has_runtime_params(*n)) {
        // Axes read at run time: the shapes decide them, the kernel's guard checks the data agrees.
        if (std::string why = runtime_params_refusal(*n); !why.empty()) refuse(why);
        if (std::find(grp_.inputs.begin(), grp_.inputs.end(), n->input(1)) == grp_.inputs.end())
          refuse(cat(name_of(n), " axes computed in the same kernel are not lowered"));
        if (auto axes = runtime_reduced_axes(*n)) {
          red = *axes;
        } else {
          // The data chooses between several axis sets: the rows are a view of the input (one row
          // per output position, of the sets' common length) read through the chosen set's index
          // arithmetic (input_at). Its rows are not the input's, so nothing else shares them.
          if (grp_.nodes.size() != 1 || std::find(grp_.inputs.begin(), grp_.inputs.end(), n->input(0)) == grp_.inputs.end())
            refuse(cat(name_of(n), " reads its input through run-time chosen axes and runs in a kernel of its own"));
          view_sets_ = runtime_reduction_sets(*n);
          view_site_ = L_.index_check_site(*n);
          view_input_ = s;
          Shape rows = n->output(0)->shape();
          rows.push_back(shape_numel(s) / std::max<int64_t>(shape_numel(rows), 1));
          red.assign(rows.size(), false);
          red.back() = true;
          if (in_.empty() && reduced.empty()) {
            in_ = rows;
            reduced = red;
          }
          continue;
        }
      } else if (auto axes = constant_ints(*n, 1, "axes"); !axes || axes->empty()) {
        if (noop == 1) refuse(cat(n->op_type(), " with no axes is an identity (noop_with_empty_axes)"));
        red.assign(s.size(), true);
      } else {
        if (rank == 0) refuse(cat(n->op_type(), " of a scalar"));
        for (int64_t a : *axes) {
          if (a < -rank || a >= rank) refuse(cat(n->op_type(), " axis ", a, " is out of range"));
          const size_t k = size_t(a < 0 ? a + rank : a);
          if (red[k]) refuse(cat(n->op_type(), " axes repeat axis ", a));
          red[k] = true;
        }
      }
    }
    if (in_.empty() && reduced.empty()) {
      in_ = s;
      reduced = red;
    } else if (s != in_ || red != reduced) {
      refuse("the group's reductions reduce different rows");
    }
  }
  reduced_ = reduced;
  const int64_t full = shape_numel(in_);
  for (size_t i = 0; i < in_.size(); ++i)
    if (reduced_[i]) row_ *= in_[i];
  if (full == 0 || row_ == 0) refuse("empty reductions are not lowered to loops");
  const int64_t outer = full / row_;
  for (const Node* n : grp_.nodes)
    for (const Value* o : n->outputs())
      if (o && shape_numel(o->shape()) != full && shape_numel(o->shape()) != outer)
        refuse(cat(n->op_type(), " produces ", shape_str(o->shape()), ", neither the rows nor one value per row"));
  if (grp_.outputs.empty()) refuse("the group writes no outputs");

  LoopKernel k;
  k.name = name;
  std::vector<const Node*> rnodes;
  for (const auto& rd : reds) rnodes.push_back(rd.first);
  bind(k, rnodes);

  // The outer loops and the current row's flat index in a per-row value.
  Shape keep = in_;
  for (size_t i = 0; i < in_.size(); ++i)
    if (reduced_[i]) keep[i] = 1;
  std::vector<std::pair<std::string, int64_t>> outer_loops = this->outer_loops(keep);
  // Contiguous rows: no kept axis longer than 1 after the first reduced one.
  contiguous_ = true;
  for (size_t i = 0, seen = 0; i < in_.size(); ++i) {
    if (in_[i] == 1) continue;
    if (reduced_[i]) seen = 1;
    else if (seen) contiguous_ = false;
  }
  Index row_start = Index::from_dims(in_, outer_dims_);
  row_base_ = L_.flat(row_start);

  std::vector<Stmt> body;
  // Staging: a reduction input that is costly (an exp) and read again by the output pass is kept
  // in a local row as its reduction pass computes it, and read from there afterwards, instead of
  // being computed twice (the same value either way).
  stage_ok_ = contiguous_ && std::all_of(grp_.nodes.begin(), grp_.nodes.end(), [](const Node* n) {
    const auto ok = op_kind_of_type(n->op_type());
    return ok && (*ok == OpKind::ElementWise || *ok == OpKind::Reduction);
  });
  for (size_t i = 0; i < reds.size(); ++i) {
    lower_reduction(*reds[i].first, reds[i].second, int(i), body);
    results_[L_.input_buffers_.at(reds[i].first->output(0)).get()].defined = true;
    for (const auto& [v, fake] : pending_stage_) L_.input_buffers_[v] = fake;
    pending_stage_.clear();
  }

  // Per-row outputs into Lets now; full-domain outputs in a final pass; per-row stores last.
  std::vector<Root> per_row, full_roots;
  std::vector<Stmt> row_stores;
  for (size_t i = 0; i < grp_.outputs.size(); ++i) {
    const Value* o = grp_.outputs[i];
    if (shape_numel(o->shape()) != outer) continue;
    std::string v = "kiln_o" + std::to_string(i);
    per_row.push_back(Root{StmtKind::Let, v, nullptr, nullptr,
                           L_.value_at(o, Index::from_flat(o->shape(), outer_flat_expr_))});
    row_stores.push_back(store(k.outputs[i], outer_flat_expr_, var(v, o->dtype())));
  }
  for (auto& s : finish(std::move(per_row))) body.push_back(s);
  std::vector<std::pair<std::string, int64_t>> loops;
  Index at = Index::from_dims(in_, pass_dims(passes_++, loops));
  const Expr at_flat = L_.flat(at);
  for (size_t i = 0; i < grp_.outputs.size(); ++i) {
    const Value* o = grp_.outputs[i];
    if (shape_numel(o->shape()) == outer) continue;
    Index oi = o->shape() == in_ ? at : Index::from_flat(o->shape(), at_flat);
    full_roots.push_back(Root{StmtKind::Store, "", k.outputs[i], at_flat, L_.value_at(o, oi)});
  }
  if (!full_roots.empty()) {
    std::set<std::string> vars;
    for (const auto& lp : loops) vars.insert(lp.first);
    std::vector<Stmt> inner = finish_in_loop(std::move(full_roots), vars, body);
    for (auto& s : wrap(loops, std::move(inner), true)) body.push_back(s);
  }
  for (auto& s : row_stores) body.push_back(s);
  for (const BufferPtr& row : rows_) body = {allocate(row, std::move(body))};

  // Rows are independent: the outermost outer loop is parallel when there is enough work. Long
  // rows run kJamRows at a time (row_jam.h): a pass in the row order is one chain of dependent
  // operations per row, and a lane pass one vector chain per lane group, so several rows' chains
  // side by side keep the adders busy (LayerNorm with lanes: 6.4 ms jammed, 7.5 ms not, 1 thread,
  // x[4096,4096]). Not when a lane pass computes something costly per element (softmax's exp):
  // its vector body is already long enough to overlap the adds, and 8 copies of it spill
  // registers (softmax: 11.5 ms jammed, 9.3 ms not).
  for (size_t i = outer_loops.size(); i-- > 0;) {
    const ForKind fk = i == 0 && outer >= 8 && full >= 4096 ? ForKind::Parallel : ForKind::Serial;
    const auto& [v, extent] = outer_loops[i];
    if (i + 1 == outer_loops.size() && jam_ && !costly_lanes_ && row_ >= kJamMinRow && extent >= kJamRows &&
        !strided_lane_loads(body))
      body = jam_loop(v, extent, body, kJamRows, fk);
    else
      body = {for_loop(v, int_imm(extent), std::move(body), fk)};
  }
  k.body = body.size() == 1 ? body[0] : block(std::move(body));
  return k;
}

LoweredGroup lower_reduction_group(const FusionGroup& grp, const std::string& kernel_name, bool jam_rows,
                                   const Schedule& sched) {
  return lowered_or_refused([&] { return RowKernelBuilder(grp, jam_rows, sched.reduction_lanes, sched.reorder_sums).build(kernel_name); });
}

}  // namespace kiln::loop::detail
