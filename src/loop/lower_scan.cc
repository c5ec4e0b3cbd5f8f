// The scan and select emitters: CumSum and TopK over rows of any length as real loops. The
// elementwise emitter spells both out per output element (lower_injective.cc: every output sums
// or ranks its whole row, row length squared work), which fuses as a remap but only pays for
// short rows (kMaxScanLength, kMaxSelectLength); above those lengths the op is a kernel of its
// own, built here:
//
//   scan    CumSum: per row, a serial walk along the axis with a carried accumulator, in the
//           reference's order (reduction_cumsum.cc: the sum starts at 0 and adds the row's
//           elements one by one, reverse from the end; exclusive stores the sum before the
//           element), in its accumulator type (float for 16-bit floats, 64-bit wrapping
//           integers), so results are bit-equal to the reference in every numerics mode.
//             inner == 1:  for o (parallel) { acc = 0; for s { acc += x[o, s]; y[o, s] = acc } }
//             inner > 1:   for o (parallel) { run[inner] = 0; for s { for j (vector) {
//                            run[j] += x[o, s, j]; y[o, s, j] = run[j] } } }
//           — the second keeps every access contiguous (the axis is not the last one). A
//           run-time axis (checked like an index: the reference rejects one outside
//           [-rank, rank)) picks one such nest per axis with an If chain.
//   select  TopK: per row (parallel over rows), in the reference's order (best first: largest or
//           smallest, NaN the greatest, equal keys by ascending index, a total order). For k ≤ 16
//           the best k so far in a local buffer kept sorted, filled by insertion: an element
//           enters when the buffer is not full or it beats the last entry (one compare for most
//           elements when k ≪ n), then finds its place and shifts the worse entries down — O(n)
//           compares plus O(k) per entering element. For 16 < k ≤ n/8, a binary heap of the best
//           k with the worst at the root (O(n log k) at worst); for larger k, a stable bottom-up
//           merge sort of the row, O(n log n), and its first k. The values are re-read from the
//           input by the selected indices, so they are the input's bits.
//
// Fusion: none; a group with such a CumSum or TopK and anything else is refused here, with the
// reason (the partitioner asks this lowering).
#include <algorithm>

#include "loop/lower_internal.h"
#include "reference/kernel_util.h"

namespace kiln::loop::detail {

namespace {

// Fresh loop and Let names for one kernel (i<k>, t<k>: names no buffer takes).
struct Names {
  int loops = 0, lets = 0;
  std::string loop() { return cat("i", loops++); }
  std::string let() { return cat("t", lets++); }
};

struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisSplit split_at(const Shape& s, int64_t axis) {
  AxisSplit r;
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    if (d < axis) r.outer *= s[size_t(d)];
    else if (d == axis) r.n = s[size_t(d)];
    else r.inner *= s[size_t(d)];
  }
  return r;
}

// A loop over [0, extent) around body, or body alone (the variable bound to 0) for extent 1.
std::vector<Stmt> loop_or_once(const std::string& v, int64_t extent, std::vector<Stmt> body, ForKind kind) {
  if (extent == 1) {
    body.insert(body.begin(), let(v, int_imm(0)));
    return {block(std::move(body))};
  }
  return {for_loop(v, int_imm(extent), std::move(body), kind)};
}

ForKind parallel_if(int64_t extent, int64_t work) {
  return extent > 1 && work >= 4096 ? ForKind::Parallel : ForKind::Serial;
}

// ---------------------------------------------------------------- CumSum

// The scan along `axis` of x into y.
Stmt cumsum_nest(const Node& n, const BufferPtr& x, const BufferPtr& y, int64_t axis, Names& nm) {
  const DType t = x->dtype;
  const DType acc_t = is_float(t) ? compute_type(t) : DType::UInt64;
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  const AxisSplit a = split_at(x->shape, axis);
  const std::string o = nm.loop(), s = nm.loop();
  // The position along the axis of scan step s.
  const Expr pos = reverse ? sub(int_imm(a.n - 1), var(s)) : var(s);
  const Expr row = add(mul(var(o), int_imm(a.n)), pos);
  std::vector<Stmt> per_row;
  if (a.inner == 1) {
    const std::string acc = nm.let(), v = nm.let(), next = nm.let();
    per_row.push_back(let(acc, imm(0, acc_t)));
    per_row.push_back(for_loop(s, int_imm(a.n),
                               {let(v, cast(acc_t, load(x, row))),
                                let(next, binary(BinOp::Add, var(acc, acc_t), var(v, acc_t))),
                                store(y, row, cast(t, var(exclusive ? acc : next, acc_t))),
                                assign(acc, var(next, acc_t))}));
  } else {
    auto run = std::make_shared<Buffer>(Buffer{cat("kiln_run", nm.lets++), acc_t, {a.inner}, Scope::Local});
    const std::string j0 = nm.loop(), j = nm.loop(), v = nm.let(), next = nm.let();
    const Expr at = add(mul(row, int_imm(a.inner)), var(j));
    std::vector<Stmt> in_run = {
        for_loop(j0, int_imm(a.inner), {store(run, var(j0), imm(0, acc_t))}),
        for_loop(s, int_imm(a.n),
                 {for_loop(j, int_imm(a.inner),
                           {let(v, cast(acc_t, load(x, at))),
                            let(next, binary(BinOp::Add, load(run, var(j)), var(v, acc_t))),
                            store(y, at, cast(t, exclusive ? load(run, var(j)) : var(next, acc_t))),
                            store(run, var(j), var(next, acc_t))})})};
    per_row.push_back(allocate(run, std::move(in_run)));
  }
  return block(loop_or_once(o, a.outer, std::move(per_row), parallel_if(a.outer, x->numel())));
}

LoopKernel lower_cumsum_scan(const FusionGroup& grp, const Node& n, const std::string& name) {
  LoopKernel k;
  std::unordered_map<const Value*, BufferPtr> ins, outs;
  bind_kernel(grp, name, k, {}, &ins, &outs);
  const BufferPtr x = ins.at(n.input(0)), y = outs.at(n.output(0));
  const int64_t rank = int64_t(x->shape.size());
  Names nm;
  const Value* axv = n.input(1);
  if (x->numel() == 0) {
    k.body = block({});
    return k;
  }
  if (axv->is_constant()) {
    const int64_t a = axv->constant().as_int64(0);
    k.body = cumsum_nest(n, x, y, a < 0 ? a + rank : a, nm);
    return k;
  }
  // A run-time axis: checked (the site is the group's only node), then one nest per axis.
  const std::string a = nm.let();
  Stmt chain = cumsum_nest(n, x, y, rank - 1, nm);
  for (int64_t d = rank - 2; d >= 0; --d)
    chain = if_then(binary(BinOp::Eq, var(a), int_imm(d)), {cumsum_nest(n, x, y, d, nm)}, {chain});
  k.body = block({let(a, checked_index(load(ins.at(axv), int_imm(0)), rank, 1)), chain});
  return k;
}

// ---------------------------------------------------------------- TopK

// What the TopK row bodies share: the row's geometry, the order, fresh names.
struct TopKRow {
  BufferPtr x, values, indices;
  AxisSplit a;
  int64_t k = 0;
  DType key_t = DType::Float32;
  bool largest = true;
  Expr o, j;  // the row: x[(o * n + m) * inner + j]; its outputs at [(o * k + q) * inner + j]
  Names* nm = nullptr;

  Expr x_at(const Expr& m) const { return add(mul(add(mul(o, int_imm(a.n)), m), int_imm(a.inner)), j); }
  Expr out_at(const Expr& q) const { return add(mul(add(mul(o, int_imm(k)), q), int_imm(a.inner)), j); }
  Expr key(const Expr& m) const { return cast(key_t, load(x, x_at(m))); }
  // p > q with NaN the greatest (NaN > q for non-NaN q; nothing is greater than NaN).
  Expr greater(const Expr& p, const Expr& q) const {
    if (!is_float(key_t)) return binary(BinOp::Gt, p, q);
    return select(unary(UnOp::IsNaN, p), unary(UnOp::Not, unary(UnOp::IsNaN, q)), binary(BinOp::Gt, p, q));
  }
  // p comes strictly before q in the reference's order (keys only; equal keys: the lower index).
  Expr better(const Expr& p, const Expr& q) const { return largest ? greater(p, q) : greater(q, p); }
  // The outputs from the first k entries of `best` (indices into the row, best first); an output
  // nobody reads is not a kernel output (null) and is not written.
  Stmt write_outputs(const BufferPtr& best) const {
    const std::string q = nm->loop();
    std::vector<Stmt> st;
    if (values) st.push_back(store(values, out_at(var(q)), load(x, x_at(load(best, var(q))))));
    if (indices) st.push_back(store(indices, out_at(var(q)), load(best, var(q))));
    return for_loop(q, int_imm(k), std::move(st));
  }
};

// k small (or k² ≤ n): insertion into a sorted buffer of k. An element enters when the buffer is
// not full or it beats the last entry; it goes after the entries it does not beat (they are
// better, or equal and earlier) and the worse ones move down, the last dropping out when full.
std::vector<Stmt> topk_insertion_row(const TopKRow& r) {
  Names& nm = *r.nm;
  const int64_t kk = r.k;
  auto keys = std::make_shared<Buffer>(Buffer{"kiln_keys", r.key_t, {kk}, Scope::Local});
  auto best = std::make_shared<Buffer>(Buffer{"kiln_best", DType::Int64, {kk}, Scope::Local});
  const std::string cnt = nm.let(), v = nm.let(), p = nm.let();
  const std::string q0 = nm.loop(), m = nm.loop(), q1 = nm.loop(), s = nm.loop();
  const Expr cnt_v = var(cnt), v_v = var(v, r.key_t), p_v = var(p);
  Stmt place = for_loop(q1, int_imm(kk),
                        {assign(p, add(p_v, cast(DType::Int64, binary(BinOp::And, binary(BinOp::Lt, var(q1), cnt_v),
                                                                         unary(UnOp::Not, r.better(v_v, load(keys, var(q1))))))))});
  // Entries p .. min(cnt, k - 1) - 1 move down one slot, from the back.
  const Expr q = sub(int_imm(kk - 1), var(s));
  Stmt shift = for_loop(s, int_imm(kk - 1),
                        {if_then(binary(BinOp::And, binary(BinOp::Gt, q, p_v), binary(BinOp::Le, q, cnt_v)),
                                 {store(keys, q, load(keys, sub(q, int_imm(1)))),
                                  store(best, q, load(best, sub(q, int_imm(1))))})});
  std::vector<Stmt> insert = {let(p, int_imm(0)), place};
  if (kk > 1) insert.push_back(shift);
  insert.push_back(store(keys, p_v, v_v));
  insert.push_back(store(best, p_v, var(m)));
  insert.push_back(assign(cnt, binary(BinOp::Min, add(cnt_v, int_imm(1)), int_imm(kk))));
  const Expr enters = binary(BinOp::Or, binary(BinOp::Lt, cnt_v, int_imm(kk)), r.better(v_v, load(keys, int_imm(kk - 1))));
  std::vector<Stmt> row = {
      // Every slot written before it is read (the entry test reads the last one).
      for_loop(q0, int_imm(kk), {store(keys, var(q0), imm(0, r.key_t)), store(best, var(q0), int_imm(0))}),
      let(cnt, int_imm(0)),
      for_loop(m, int_imm(r.a.n), {let(v, r.key(var(m))), if_then(enters, std::move(insert))}),
      r.write_outputs(best)};
  return {allocate(keys, {allocate(best, std::move(row))})};
}

// 16 < k ≤ n / 8: a binary heap of the best k so far with the worst of them at the root. An
// element enters when the heap is not full (pushed, sifted up) or when it beats the root (which it
// replaces, sifted down); at the end the root is popped k times, worst first, filling the order
// from the back. The heap compares (key, index) pairs — the reference's total order — since a
// heap, unlike the merge, is not stable. O(n + entries · log k), at worst O(n log k).
std::vector<Stmt> topk_heap_row(const TopKRow& r) {
  Names& nm = *r.nm;
  const int64_t kk = r.k;
  int64_t height = 1;
  while ((int64_t(1) << height) <= kk) ++height;  // levels of a heap of k entries
  auto hk = std::make_shared<Buffer>(Buffer{"kiln_keys", r.key_t, {kk}, Scope::Local});
  auto hi = std::make_shared<Buffer>(Buffer{"kiln_idx", DType::Int64, {kk}, Scope::Local});
  auto order = std::make_shared<Buffer>(Buffer{"kiln_best", DType::Int64, {kk}, Scope::Local});
  auto last = [&](const Expr& e) { return binary(BinOp::Min, binary(BinOp::Max, e, int_imm(0)), int_imm(kk - 1)); };
  // Entry a is worse than entry b (comes after it in the reference's order).
  auto worse = [&](const Expr& a, const Expr& b) {
    const Expr ka = load(hk, a), kb = load(hk, b);
    return binary(BinOp::Or, r.better(kb, ka),
                  binary(BinOp::And, unary(UnOp::Not, r.better(ka, kb)), binary(BinOp::Gt, load(hi, a), load(hi, b))));
  };
  auto swap = [&](const Expr& a, const Expr& b) {
    const std::string tk = nm.let(), ti = nm.let();
    return std::vector<Stmt>{let(tk, load(hk, a)), let(ti, load(hi, a)), store(hk, a, load(hk, b)),
                             store(hi, a, load(hi, b)), store(hk, b, var(tk, r.key_t)), store(hi, b, var(ti))};
  };
  // The entry at 0 moved down while a child (within `size` entries) is worse.
  auto sift_down = [&](const Expr& size) {
    const std::string c = nm.let(), step = nm.loop(), wl = nm.let(), w = nm.let();
    const Expr l = add(mul(var(c), int_imm(2)), int_imm(1)), rr = add(l, int_imm(1));
    std::vector<Stmt> body = {
        let(wl, select(binary(BinOp::And, binary(BinOp::Lt, l, size), worse(last(l), var(c))), l, var(c))),
        let(w, select(binary(BinOp::And, binary(BinOp::Lt, rr, size), worse(last(rr), var(wl))), rr, var(wl)))};
    std::vector<Stmt> moved = swap(var(c), var(w));
    moved.push_back(assign(c, var(w)));
    body.push_back(if_then(binary(BinOp::Ne, var(w), var(c)), std::move(moved)));
    return std::vector<Stmt>{let(c, int_imm(0)), for_loop(step, int_imm(height), std::move(body))};
  };
  const std::string cnt = nm.let(), v = nm.let(), m = nm.loop();
  const Expr cnt_v = var(cnt), v_v = var(v, r.key_t);
  // Push at cnt, then up while the entry is worse than its parent.
  std::vector<Stmt> push;
  {
    const std::string c = nm.let(), step = nm.loop(), par = nm.let();
    std::vector<Stmt> moved = swap(var(c), var(par));
    moved.push_back(assign(c, var(par)));
    push = {store(hk, cnt_v, v_v), store(hi, cnt_v, var(m)), let(c, cnt_v),
            for_loop(step, int_imm(height),
                     {let(par, div_floor(last(sub(var(c), int_imm(1))), int_imm(2))),
                      if_then(binary(BinOp::And, binary(BinOp::Gt, var(c), int_imm(0)), worse(var(c), var(par))),
                              std::move(moved))}),
            assign(cnt, add(cnt_v, int_imm(1)))};
  }
  // A later element never ties its way in (its index is the larger): it must beat the root.
  std::vector<Stmt> replace = {store(hk, int_imm(0), v_v), store(hi, int_imm(0), var(m))};
  for (Stmt& st : sift_down(int_imm(kk))) replace.push_back(std::move(st));
  // Pop: the root is the worst remaining, for position q; the last entry takes its place.
  const std::string s = nm.loop();
  const Expr q = sub(int_imm(kk - 1), var(s));
  std::vector<Stmt> pop = {store(order, q, load(hi, int_imm(0))), store(hk, int_imm(0), load(hk, q)),
                           store(hi, int_imm(0), load(hi, q))};
  for (Stmt& st : sift_down(q)) pop.push_back(std::move(st));
  std::vector<Stmt> row = {
      let(cnt, int_imm(0)),
      for_loop(m, int_imm(r.a.n),
               {let(v, r.key(var(m))),
                if_then(binary(BinOp::Lt, cnt_v, int_imm(kk)), std::move(push),
                        {if_then(r.better(v_v, load(hk, int_imm(0))), std::move(replace))})}),
      for_loop(s, int_imm(kk), std::move(pop)),
      r.write_outputs(order)};
  return {allocate(hk, {allocate(hi, {allocate(order, std::move(row))})})};
}

// k large: a stable bottom-up merge sort of the whole row (keys and indices, ping-pong between
// two pairs of buffers), then its first k. Stable on keys (a merge takes the left run's element
// unless the right one is strictly better) is the reference's order: equal keys by index.
// ⌈log2 n⌉ passes of n steps: O(n log n) whatever k and the data.
std::vector<Stmt> topk_merge_row(const TopKRow& r) {
  Names& nm = *r.nm;
  const int64_t n = r.a.n;
  BufferPtr kb[2], ib[2];
  for (int h = 0; h < 2; ++h) {
    kb[h] = std::make_shared<Buffer>(Buffer{cat("kiln_keys", h), r.key_t, {n}, Scope::Local});
    ib[h] = std::make_shared<Buffer>(Buffer{cat("kiln_best", h), DType::Int64, {n}, Scope::Local});
  }
  std::vector<Stmt> row;
  const std::string m = nm.loop();
  row.push_back(for_loop(m, int_imm(n), {store(kb[0], var(m), r.key(var(m))), store(ib[0], var(m), var(m))}));
  int h = 0;
  for (int64_t w = 1; w < n; w *= 2, h ^= 1) {
    const BufferPtr &sk = kb[h], &si = ib[h], &dk = kb[h ^ 1], &di = ib[h ^ 1];
    // Pair b merges [lo, mid) and [mid, end) into dst[lo, end), cursors ca and cb.
    const std::string b = nm.loop(), t = nm.loop();
    const std::string mid = nm.let(), end = nm.let(), ca = nm.let(), cb = nm.let(), ka = nm.let(), kbv = nm.let(),
                      right = nm.let();
    const Expr lo = mul(var(b), int_imm(2 * w));
    const Expr last = int_imm(n - 1);
    const Expr at_a = binary(BinOp::Min, var(ca), last), at_b = binary(BinOp::Min, var(cb), last);
    const Expr take_right =
        binary(BinOp::And, binary(BinOp::Lt, var(cb), var(end)),
               binary(BinOp::Or, binary(BinOp::Ge, var(ca), var(mid)), r.better(var(kbv, r.key_t), var(ka, r.key_t))));
    std::vector<Stmt> step = {
        let(ka, load(sk, at_a)), let(kbv, load(sk, at_b)), let(right, take_right),
        store(dk, add(lo, var(t)), select(var(right, DType::Bool), var(kbv, r.key_t), var(ka, r.key_t))),
        store(di, add(lo, var(t)), select(var(right, DType::Bool), load(si, at_b), load(si, at_a))),
        assign(ca, add(var(ca), cast(DType::Int64, unary(UnOp::Not, var(right, DType::Bool))))),
        assign(cb, add(var(cb), cast(DType::Int64, var(right, DType::Bool))))};
    const int64_t pairs = (n + 2 * w - 1) / (2 * w), span = std::min(2 * w, n);
    row.push_back(for_loop(
        b, int_imm(pairs),
        {let(mid, binary(BinOp::Min, add(lo, int_imm(w)), int_imm(n))),
         let(end, binary(BinOp::Min, add(lo, int_imm(2 * w)), int_imm(n))), let(ca, lo), let(cb, var(mid)),
         for_loop(t, int_imm(span), {if_then(binary(BinOp::Lt, add(lo, var(t)), var(end)), std::move(step))})}));
  }
  row.push_back(r.write_outputs(ib[h]));
  return {allocate(kb[0], {allocate(ib[0], {allocate(kb[1], {allocate(ib[1], std::move(row))})})})};
}

LoopKernel lower_topk_select(const FusionGroup& grp, const Node& n, const std::string& name) {
  LoopKernel k;
  std::unordered_map<const Value*, BufferPtr> ins, outs;
  bind_kernel(grp, name, k, {}, &ins, &outs);
  TopKRow r;
  r.x = ins.at(n.input(0));
  auto output = [&](size_t i) {
    auto it = outs.find(n.output(i));
    return it == outs.end() ? nullptr : it->second;
  };
  r.values = output(0);
  r.indices = output(1);
  const int64_t rank = int64_t(r.x->shape.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  r.largest = n.attr_int("largest", 1) != 0;
  r.a = split_at(r.x->shape, axis);
  const Shape& out_shape = n.output(0)->shape();
  r.k = out_shape[size_t(axis)];
  r.key_t = compute_type(r.x->dtype);
  if (shape_numel(out_shape) == 0) {
    k.body = block({});
    return k;
  }
  Names nm;
  r.nm = &nm;
  const std::string o = nm.loop(), j = nm.loop();
  r.o = r.a.outer == 1 ? int_imm(0) : var(o);
  r.j = r.a.inner == 1 ? int_imm(0) : var(j);
  // Insertion costs n compares plus k per entering element (about k·ln(n/k) of them on random
  // data, all n on sorted data): for k ≤ 16 at most 16 n. The heap costs at most n·log2(k) plus
  // its pops, the merge sort n·log2(n) whatever the data but with the cheapest steps: the heap
  // pays where k is a small part of the row.
  std::vector<Stmt> per_row = r.k <= 16       ? topk_insertion_row(r)
                              : 8 * r.k <= r.a.n ? topk_heap_row(r)
                                                 : topk_merge_row(r);
  const int64_t work = r.a.outer * r.a.inner * r.a.n;
  std::vector<Stmt> inner_loop =
      loop_or_once(j, r.a.inner, std::move(per_row), r.a.outer == 1 ? parallel_if(r.a.inner, work) : ForKind::Serial);
  k.body = block(loop_or_once(o, r.a.outer, std::move(inner_loop), parallel_if(r.a.outer, work)));
  return k;
}

}  // namespace

bool needs_row_loop(const Node& n) {
  if (!n.domain().empty() || n.num_inputs() == 0 || !n.input(0)) return false;
  const Shape& xs = n.input(0)->shape();
  if (xs.empty()) return false;
  const int64_t r = int64_t(xs.size());
  if (n.op_type() == "CumSum") {
    const Value* ax = n.num_inputs() > 1 ? n.input(1) : nullptr;
    if (!ax) return false;
    if (!ax->is_constant()) {
      int64_t len = 0;
      for (int64_t d : xs) len += d;
      return len > kMaxScanLength;
    }
    if (ax->constant().numel() != 1) return false;
    const int64_t a = ax->constant().as_int64(0);
    return a >= -r && a < r && xs[size_t(a < 0 ? a + r : a)] > kMaxScanLength;
  }
  if (n.op_type() == "TopK") {
    const int64_t a = n.attr_int("axis", -1);
    return a >= -r && a < r && xs[size_t(a < 0 ? a + r : a)] > kMaxSelectLength;
  }
  return false;
}

std::string row_loop_reason(const Node& n) {
  const bool scan = n.op_type() == "CumSum";
  return cat(name_of(&n), scan ? " scans rows longer than " : " selects from rows longer than ",
             scan ? kMaxScanLength : kMaxSelectLength, " elements (where the unrolled spelling, which fuses, stops): "
             "a kernel of its own (the ", scan ? "scan" : "select", " emitter) that fuses with nothing");
}

LoweredGroup lower_row_loop_group(const FusionGroup& grp, const std::string& kernel_name) {
  return lowered_or_refused([&]() {
    const Node* n = nullptr;
    for (const Node* m : grp.nodes)
      if (needs_row_loop(*m)) n = m;
    KILN_CHECK(n, "lower_row_loop_group: group ", grp.name, " has no long CumSum or TopK");
    if (grp.nodes.size() != 1) refuse(row_loop_reason(*n));
    // The checks the elementwise spelling makes (types, attributes, outputs), but any length.
    std::string why = unsupported_injective(*n, /*any_length=*/true);
    if (!why.empty()) refuse(why);
    return n->op_type() == "CumSum" ? lower_cumsum_scan(grp, *n, kernel_name) : lower_topk_select(grp, *n, kernel_name);
  });
}

}  // namespace kiln::loop::detail
