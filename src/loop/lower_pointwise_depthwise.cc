// A pointwise (1x1) conv feeding a depthwise conv — the first half of MobileNet's inverted
// residual block — as one kernel, the expanded tensor never written to memory:
//
//   for (n, channel block [c0, c0 + rows)) of the expanded channels      Parallel when big
//     u[r][p] = Σ_k W[c0 + r][k] · x[n][k][p]      u: Local, rows × H·W; micro-kernel tiles
//                                                  (row_tile_product) from zero: A the weights
//                                                  in place, B the input in place
//     for m < rows: channel c = c0 + m, the depthwise stencil's body for (n, c)
//       (lower_conv_stencil.cc): its phase planes staged from u[m] + bias[c] through the
//       elementwise ops between the convs (Clip, HardSwish, SiLU: evaluated once per element
//       there), the window, the epilogue after the depthwise conv, the stores
//
// When the depthwise conv takes the channel-blocked stencil (rows narrower than
// Schedule::stencil_channel_blocks_below, lower_conv_stencil.cc), the per-channel loop above is
// one over blocks of 16 channels, each staging its 16 channels from u interleaved, and a block of
// expanded channels is whole 16-channel blocks.
//
// The 1x1 conv's output channel c feeds only depthwise channel c, so blocking the expanded
// channels needs no recomputation and no halo: a block is all its channels' whole planes. The
// block is as many micro-kernel row blocks of channels as Schedule::pointwise_depthwise_bytes
// holds (so u stays in L2 while the stencil reads it), fewer while there are less than four
// blocks for the threads or while fewer share them out more evenly (balanced_channel_block). The
// input image x[n] is read once per block, from L2 after the first.
// Apart, the expansion writes C·H·W floats and the depthwise conv reads them back: MobileNetV2's
// 16 -> 96 expansion over 112x112 writes 4.8 MB, about 0.3 ms each way at this machine's 16 GB/s.
//
// Numerics: the 1x1 conv's sums start from zero and the bias is added after them, as the reference
// does; the elementwise ops and the stencil run as they do apart. So the kernel follows the build's
// numerics mode: under --strict-fp (the strict micro-kernel, the stencil's reference order) it is
// bit-identical to the reference.
//
// Refused (the convs then stay separate kernels): a 1x1 conv that is not stride 1 without
// padding, group 1, float32 with constant weights read in place (no prologue); a depthwise conv
// with a channel multiplier, or one the stencil does not take; a member other than the two convs
// that is not elementwise; the expanded tensor (or a value computed from it before the depthwise
// conv) needed outside the kernel or at another shape; pointwise_depthwise_bytes 0.
#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/contraction_lowering.h"
#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

// The most channels one thread computes when the nb · ceil(ce / mb) blocks (each mb channels, the
// last of an image the rest) are shared out as OpenMP's static schedule does: contiguous ranges,
// the first (count mod threads) threads one block more.
int64_t busiest_thread(int64_t nb, int64_t ce, int64_t mb, int threads) {
  const int64_t blocks = (ce + mb - 1) / mb, n = nb * blocks, q = n / threads, r = n % threads;
  int64_t worst = 0, t0 = 0;
  for (int t = 0; t < threads && t0 < n; ++t) {
    const int64_t count = q + (t < r ? 1 : 0);
    int64_t sum = 0;
    for (int64_t i = t0; i < t0 + count; ++i) sum += std::min(mb, ce - (i % blocks) * mb);
    worst = std::max(worst, sum);
    t0 += count;
  }
  return worst;
}

// A channel block of at most `mb` channels (a multiple of `step`, or all of them) that the threads
// share as evenly as the blocks allow, the largest among equals, down to half of `mb`: with the
// largest block the budget holds, 240 expanded channels over 28x28 were blocks of 72, 72, 72 and
// 24, and on two threads one computed 144 channels while the other waited after 96; blocks of 40
// give each 120. (EfficientNet-B0's kernels of that kind ran 1.3-1.6x their --no-fusion parts at 2
// threads, bench/fusion_pays.py; MobileNetV2's ran 0.81-0.90 of their time after.)
int64_t balanced_channel_block(int64_t nb, int64_t ce, int64_t mb, int64_t step, int threads) {
  if (threads <= 1 || mb >= ce || mb <= step) return mb;
  int64_t best = mb, best_worst = busiest_thread(nb, ce, mb, threads);
  for (int64_t m = mb - step; m >= step && m * 2 >= mb; m -= step) {
    const int64_t w = busiest_thread(nb, ce, m, threads);
    if (w < best_worst) {
      best = m;
      best_worst = w;
    }
  }
  return best;
}

struct PointwiseDepthwise {
  const Node* p = nullptr;  // the 1x1 conv
  const Node* d = nullptr;  // the depthwise conv
};

bool member_of(const FusionGroup& grp, const Node* n) {
  return std::find(grp.nodes.begin(), grp.nodes.end(), n) != grp.nodes.end();
}

bool depends_in(const FusionGroup& grp, const Node* a, const Node* b) {
  return depends_through(a, b, [&](const Node* n) { return member_of(grp, n); });
}

// The two convs when the group has exactly two contractions, both Conv, the second a 2-D
// depthwise conv reading the first (through members), the first with a 1x1 kernel and group 1.
std::optional<PointwiseDepthwise> match(const FusionGroup& grp) {
  std::vector<const Node*> cs;
  for (const Node* n : grp.nodes)
    if (is_contraction(n)) cs.push_back(n);
  if (cs.size() != 2) return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    const Node* p = cs[size_t(first)];
    const Node* d = cs[size_t(1 - first)];
    if (p->op_type() != "Conv" || d->op_type() != "Conv" || !depends_in(grp, d, p)) continue;
    const Value* pw = p->num_inputs() > 1 ? p->input(1) : nullptr;
    const Value* dx = d->input(0);
    const Value* dw = d->num_inputs() > 1 ? d->input(1) : nullptr;
    if (!pw || !dx || !dw || pw->shape().size() != 4 || dw->shape().size() != 4 || dx->shape().size() != 4) continue;
    if (p->attr_int("group", 1) != 1 || pw->shape()[2] != 1 || pw->shape()[3] != 1) continue;
    const int64_t c = dx->shape()[1];
    if (d->attr_int("group", 1) != c || dw->shape()[0] != c || dw->shape()[1] != 1) continue;
    return PointwiseDepthwise{p, d};
  }
  return std::nullopt;
}

class PointwiseDepthwiseLowering {
 public:
  PointwiseDepthwiseLowering(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched) {}

  LoopKernel lower() {
    const auto m = match(grp_);
    KILN_CHECK(m, "pointwise-depthwise: the group is not a 1x1 conv feeding a depthwise conv");
    p_ = m->p;
    d_ = m->d;
    check();
    return build();
  }

 private:
  void check() {
    const std::string pl = p_->describe();
    if (sched_.pointwise_depthwise_bytes <= 0 || !sched_.tile_contractions)
      refuse(cat(pl, " feeding a depthwise conv: the schedule keeps them apart (pointwise_depthwise_bytes 0)"));
    const Value* x = p_->input(0);
    const Value* w = p_->input(1);
    const Value* b = p_->num_inputs() > 2 ? p_->input(2) : nullptr;
    for (const Value* v : {x, w, b})
      if (v && !is_input(v))
        refuse(cat(pl, " feeding a depthwise conv: its operand '", v->name(), "' is computed in the kernel; the fused "
                       "kernel reads the 1x1 conv's operands in place"));
    if (x->dtype() != DType::Float32 || w->dtype() != DType::Float32 || p_->output(0)->dtype() != DType::Float32)
      refuse(cat(pl, " feeding a depthwise conv: only float32 is fused"));
    if (!w->is_constant()) refuse(cat(pl, " feeding a depthwise conv: its weights are not constant"));
    for (int64_t s : p_->attr_ints("strides", {}))
      if (s != 1) refuse(cat(pl, " feeding a depthwise conv: a strided 1x1 conv is not fused with it"));
    for (int64_t pad : p_->attr_ints("pads", {}))
      if (pad != 0) refuse(cat(pl, " feeding a depthwise conv: a padded 1x1 conv is not fused with it"));
    const Shape& xs = x->shape();
    const Shape& ps = p_->output(0)->shape();
    if (xs.size() != 4 || ps.size() != 4 || xs[2] != ps[2] || xs[3] != ps[3] || xs[0] != ps[0])
      refuse(cat(pl, " feeding a depthwise conv: its output is not its input's positions"));
    if (shape_numel(ps) == 0) refuse(cat(pl, " has an empty output"));
    // Every member but the two convs is elementwise; what the depthwise conv reads from the 1x1
    // conv (its "expanded" values) stays inside the kernel and keeps the expanded shape, so each
    // such value at (n, c, y, x) needs only channel c of image n: the block in u.
    std::unordered_set<const Value*> expanded = {p_->output(0)};
    for (const Node* n : grp_.nodes) {
      if (n == p_) continue;
      if (n != d_) {
        const OpKind k = op_kind(*n);
        if (k != OpKind::ElementWise && k != OpKind::Broadcast)
          refuse(cat(n->describe(), " (", op_kind_name(k), ") with a 1x1 conv feeding a depthwise conv: only "
                                                            "elementwise ops are fused around them (its members stay separate kernels)"));
        if (depends_in(grp_, p_, n))
          refuse(cat(n->describe(), " computes an input of the 1x1 conv; the fused kernel reads that input in place"));
      }
      bool reads = false;
      for (const Value* v : n->inputs()) reads = reads || (v && expanded.count(v));
      if (!reads || n == d_) continue;
      for (const Value* o : n->outputs())
        if (o) {
          if (o->shape() != ps)
            refuse(cat(n->describe(), " gives the expanded values another shape; the fused kernel holds them per channel"));
          expanded.insert(o);
        }
    }
    for (const Value* o : grp_.outputs)
      if (expanded.count(o))
        refuse(cat("'", o->name(), "' (the 1x1 conv's channels before the depthwise conv) is needed outside the kernel; "
                   "fused, it would still be written"));
  }

  bool is_input(const Value* v) const { return std::count(grp_.inputs.begin(), grp_.inputs.end(), v) > 0; }

  LoopKernel build() {
    const Value* pout = p_->output(0);
    const Shape& ps = pout->shape();
    const int64_t nb = ps[0], ce = ps[1], hw = ps[2] * ps[3], kin = p_->input(0)->shape()[1];
    const int64_t mr = std::max(1, sched_.contraction.mr), nr = std::max(1, sched_.contraction.nr);

    // The depthwise stencil over the 1x1 conv's output as an input: every member but the 1x1 conv.
    std::unordered_set<const Node*> rest;
    for (const Node* n : grp_.nodes)
      if (n != p_) rest.insert(n);
    FusionGroup sg = subgroup(grp_, rest, cat(grp_.name, "_depthwise"), GroupKind::Contraction);
    sg.outputs = grp_.outputs;
    ContractionLowering cl(sg, cat(name_, "_depthwise"), sched_);
    LoopKernel sk = cl.lower_stencil();
    // The stencil's outer loop runs over channels, or over blocks of 16 (the channel-blocked
    // stencil of narrow rows): a block of the expanded channels is then whole 16-channel blocks.
    const int64_t per_dt = cl.stencil_in_channel_blocks() ? 16 : 1;
    KILN_CHECK(sk.packed_inputs.empty(), "pointwise-depthwise: the stencil reads packed weights");
    const StmtNode& outer = *sk.body;
    KILN_CHECK(outer.kind == StmtKind::For && outer.var == "kiln_dt", "pointwise-depthwise: unexpected stencil nest");

    // The channel block: whole micro-kernel row blocks in the budget (at least one), at least four
    // blocks (per image) to share among threads where the channels allow, then the block that
    // shares the channels most evenly among the threads (balanced_channel_block).
    const int64_t per_channel = hw * int64_t(sizeof(float));
    const int64_t step = std::lcm<int64_t>(mr, per_dt);
    int64_t mb = std::max<int64_t>(1, sched_.pointwise_depthwise_bytes / per_channel) / step * step;
    mb = std::max(mb, step);
    while (mb > step && nb * ((ce + mb - 1) / mb) < 4) mb -= step;
    mb = balanced_channel_block(nb, ce, std::min(mb, ce), step, sched_.threads);
    const int64_t blocks = (ce + mb - 1) / mb;

    LoopKernel k;
    k.vector_bits = sk.vector_bits;  // the stencil's rows in whole vectors want them wide
    k.no_tree_pre = sk.no_tree_pre;
    std::unordered_map<const Value*, BufferPtr> where;
    bind_kernel(grp_, name_, k, {"acc"}, &where, &where);
    auto u = std::make_shared<Buffer>(Buffer{"kiln_pu", DType::Float32, {mb * hw}, Scope::Local});

    const Expr t = var("kiln_pt"), n = var("kiln_pn"), c0 = var("kiln_pc0"), rows = var("kiln_prows");
    std::vector<Stmt> body = {let("kiln_pn", div_floor(t, int_imm(blocks))),
                              let("kiln_pc0", mul(mod(t, int_imm(blocks)), int_imm(mb))),
                              let("kiln_prows", binary(BinOp::Min, int_imm(mb), sub(int_imm(ce), c0)))};
    // The stencil per channel of the block, its reads of the 1x1 conv's output from u. The 1x1
    // conv's bias is added where the stencil reads u — it stages each element once, through the
    // elementwise ops between the convs — so the product starts from zero, and the bias comes after
    // the sum as in the reference. (Filling u with the bias first cost a pass over u and made the
    // micro-kernels load the tile they now start at zero: EfficientNet-B0's 16 -> 96 expansion over
    // 112x112 in a C harness, the expansion 0.475 -> 0.355 ms of a 1.09 ms kernel.)
    const Value* b = p_->num_inputs() > 2 ? p_->input(2) : nullptr;
    BufferMap map;
    for (size_t j = 0; j < sg.inputs.size(); ++j) {
      const Value* v = sg.inputs[j];
      // Channel kiln_dt of all at u's row kiln_pm: the base in terms of kiln_dt, so that the
      // affine index folds to kiln_pm · H·W + position (with the block's first channel as a
      // separate term GCC saw a "complicated access pattern" and staged unvectorised:
      // MobileNetV2's 24 -> 144 pair over 56x56 0.68 -> ... ms).
      if (v == pout) {
        BufferTarget to{u, nullptr, mul(sub(var("kiln_dt"), var("kiln_pm")), int_imm(per_dt * hw))};
        // u's row (index / H·W, folded below) is the channel's place in the block.
        if (b)
          to.on_load = [bias = where.at(b), c0, hw](Expr ld, const Expr& index) {
            return add(std::move(ld), load(bias, add(c0, div_floor(index, int_imm(hw)))));
          };
        map[sk.inputs[j].get()] = to;
      } else {
        map[sk.inputs[j].get()] = BufferTarget{where.at(v), nullptr};
      }
    }
    for (size_t j = 0; j < sg.outputs.size(); ++j) map[sk.outputs[j].get()] = BufferTarget{where.at(sg.outputs[j]), nullptr};
    // kiln_dt: the stencil's channel (block) — (n · ce + c0) / per_dt + kiln_pm.
    const Expr first = add(mul(n, int_imm(ce)), c0);
    std::vector<Stmt> channel = {let("kiln_dt", add(per_dt == 1 ? first : div_floor(first, int_imm(per_dt)), var("kiln_pm")))};
    const std::map<std::string, int64_t> extents = {{"kiln_pm", mb / per_dt}, {"kiln_dt", nb * ce / per_dt}};
    BufferRebinder rebind(std::move(map));
    for (const Stmt& st : outer.body) channel.push_back(fold_index_divmod(rebind.stmt(st), extents));
    KILN_CHECK(!rebind.addressed(), "pointwise-depthwise: the stencil passes the expanded rows' address on; the bias is "
                                    "added where it loads them");

    // u = W[c0.., :] · x[n] from zero: A the weights in place (rows K apart), B the image in place.
    std::vector<Stmt> inner;
    {
      RowTileProduct prod;
      prod.a = where.at(p_->input(1));
      prod.a_at = [c0, kin](Expr r, Expr k0) { return add(mul(add(c0, std::move(r)), int_imm(kin)), std::move(k0)); };
      prod.as_i = kin;
      prod.b = where.at(p_->input(0));
      prod.b_at = [n, kin, hw](Expr j0, Expr k0) { return add(mul(add(mul(n, int_imm(kin)), std::move(k0)), int_imm(hw)), std::move(j0)); };
      prod.bs_k = hw;
      prod.acc = u;
      prod.ld = hw;
      prod.k = kin;
      prod.n = hw;
      prod.kc = kin;
      prod.mr = mr;
      prod.nr = nr;
      prod.rows = mb == ce ? int_imm(ce) : rows;
      prod.prefix = "kiln_pw";
      prod.wide_nr = merged_panel_width(sched_, mr);
      prod.zero_first = true;
      for (Stmt& s : row_tile_product(prod)) inner.push_back(std::move(s));
    }
    inner.push_back(for_loop("kiln_pm", per_dt == 1 ? rows : div_floor(rows, int_imm(per_dt)), {scoped(std::move(channel))}));
    body.push_back(allocate(u, std::move(inner)));
    const int64_t window = d_->input(1)->shape()[2] * d_->input(1)->shape()[3];
    const int64_t work = nb * ce * hw * (kin + window);
    const bool parallel = nb * blocks > 1 && work >= sched_.parallel_min_work;
    k.body = for_loop("kiln_pt", int_imm(nb * blocks), std::move(body), parallel ? ForKind::Parallel : ForKind::Serial);
    // The expansion's columns are the positions in panels of whole vectors (the last one masked,
    // at the cost of a whole one): 64 computed for a 7x7 map's 49.
    const int64_t vw = std::max(1, sched_.vector_width);
    k.padding_flops = 2.0 * double(nb * ce * kin) * double((hw + vw - 1) / vw * vw - hw);
    return k;
  }

  const FusionGroup& grp_;
  std::string name_;
  const Schedule& sched_;
  const Node* p_ = nullptr;
  const Node* d_ = nullptr;
};

}  // namespace

bool is_pointwise_depthwise(const FusionGroup& grp) { return match(grp).has_value(); }

LoopKernel lower_pointwise_depthwise(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  return PointwiseDepthwiseLowering(grp, kernel_name, sched).lower();
}

}  // namespace kiln::loop::detail
