// Grouped and depthwise 2-D convolutions as a vectorised stencil.
//
// A depthwise conv has one input channel per output channel: as a GEMM it is a 1-row product per
// group (nothing for a register tile to reuse), and the untiled nest — one output element at a
// time, its kernel window innermost — ran MobileNetV2's depthwise convs at 2-5 GFLOP/s. Here the
// window is unrolled and the output positions are the vector lanes:
//
//   for (n, g)                                           parallel over images × groups
//     stage the group's cg input channels into zero-padded phase planes (once; the fused
//     prologue is evaluated there; a strided conv becomes stride 1 over the phases)
//     for m < mg (output channel co = g·mg + m)
//       acc[j] = 0                                        j: positions y·wq + x of a phase plane
//       for ci < cg
//         acc[j] = acc[j] + Σ_taps w[co, ci, tap] · planes[ci][offset(tap) + j]   vectorised over j
//       for y < Ho, x < Wo                                vectorised over x
//         out(n, co, y, x) = epilogue(acc[y·wq + x] + bias[co])
//
// (A depthwise conv with stride and dilation 1 may sum its windows through the depthwise
// micro-kernel instead, a block of output rows at a time, each block's epilogue right after:
// kernels/depthwise.h, build_stencil below.)
//
// j runs over the whole plane as one contiguous range (the columns x ≥ Wo of each plane row are
// computed and dropped), so a 7x7 output is one loop of 61 lanes rather than seven of 7. The
// weights of a (co, ci) are Lets hoisted out of the j loop. Sums run in the reference's order
// (channel, then kernel position ascending, from 0; a padding position contributes 0 · w, as the
// reference's im2col does), so --strict-fp is bit-identical; the default numerics contract the
// multiply-adds into FMAs. The epilogue is applied in its own vectorised loop over an output row,
// so transcendental activations (SiLU after EfficientNet's depthwise convs) stay vectorised.
//
// Taken for float32 2-D convs with groups of at most Schedule::stencil_max_group_width input and
// output channels (depthwise, RegNet's and ResNeXt's group widths) when a group's staged planes and
// accumulator fit Schedule::stencil_bytes; wider groups take the tiled GEMM per group.
#include <set>

#include "kernels/depthwise.h"
#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/contraction_lowering.h"
#include "support/error.h"

namespace kiln::loop::detail {
namespace {

bool mentions_any(const Expr& e, const std::set<std::string>& names) {
  if (!e) return false;
  if (e->kind == ExprKind::Var && names.count(e->name)) return true;
  for (const Expr& a : e->args)
    if (mentions_any(a, names)) return true;
  return false;
}

// Whether `e` loads a buffer outside the kernel's locals at an index that mentions `names`.
bool loads_global_at(const Expr& e, const std::set<std::string>& names) {
  if (!e) return false;
  if (e->kind == ExprKind::Load && e->buffer->scope != Scope::Local && mentions_any(e->args[0], names)) return true;
  for (const Expr& a : e->args)
    if (loads_global_at(a, names)) return true;
  return false;
}

// An epilogue row body (Lets and Stores, append_hoisted_stores) run over whole vectors: the
// lanes past `wo` compute from the staged planes and are not stored. Null when the body reads a
// kernel input at an index that moves with x (a residual): those lanes would read past the row,
// past the buffer's end on the last one.
std::vector<Stmt> masked_row(std::vector<Stmt> body, const Expr& x, int64_t wo) {
  std::set<std::string> along = {x->name};
  for (const Stmt& st : body)
    if (st->kind == StmtKind::Let) along.insert(st->var);
  for (const Stmt& st : body) {
    if (st->kind != StmtKind::Let && st->kind != StmtKind::Store) return {};
    if (loads_global_at(st->value, along) || (st->kind == StmtKind::Store && loads_global_at(st->index, along)))
      return {};
  }
  // Only the stores are guarded, their values computed before the condition: a value under it
  // would make GCC mask its loads, and a masked load of a uniform value (the bias) keeps the loop
  // from vectorising at all (a depthwise conv without activation: 4x slower).
  std::vector<Stmt> out;
  int n = 0;
  for (Stmt& st : body) {
    if (st->kind != StmtKind::Store) {
      out.push_back(std::move(st));
      continue;
    }
    const std::string v = "kiln_dsv" + std::to_string(n++);
    out.push_back(let(v, st->value));
    out.push_back(if_then(binary(BinOp::Lt, x, int_imm(wo)), {store(st->buffer, st->index, var(v, st->value->type))}));
  }
  return out;
}

}  // namespace

bool ContractionLowering::stencil_conv() const {
  if (c_->op_type() != "Conv" || geo_.rank() != 2 || dtype_ != DType::Float32) return false;
  if (!sched_.tile_contractions || shape_numel(out_shape_) == 0) return false;
  const Shape& xs = c_->input(0)->shape();
  const int64_t cg = xs[1] / group_, mg = c_->input(1)->shape()[0] / group_;
  // An ungrouped windowed conv with fewer output channels than a vector is one group of the
  // stencil: the implicit GEMM's panels would be mostly zero columns (implicit_conv) and the
  // weights-as-rows tiles mostly zero rows over an im2col panel each input element of which
  // feeds only mg products, so neither GEMM form takes it, and the untiled nest summed each
  // output in one scalar chain. RAFT's flow head (128 -> 2, 3x3 over 16x16): 0.62 ms, 1.9
  // GFLOP/s; its encoder's 8 -> 8 3x3 convs over 2 x 64x64 at 15 GFLOP/s.
  if (group_ == 1 && !few_output_channels()) return false;
  // Up to groups of 64 channels the stencil is as fast as or faster than a GEMM per group (the
  // tiled path's per-call im2col panel): 8 groups of 8 channels, 3x3 at 28x28, 0.30 -> 0.065 ms;
  // of 16: 0.65 -> 0.26; of 32: 1.57 -> 0.99; of 64: 4.0 both (kiln bench, 1 thread). RegNetY-400MF
  // (group width 8): 11.1 -> 6.7 ms summed over its kernels.
  if (group_ > 1 && (cg > sched_.stencil_max_group_width || mg > sched_.stencil_max_group_width)) return false;
  // A strided depthwise conv of a kernel input runs faster as the untiled nest (its window
  // unrolled, the output positions vectorised with strided loads of the input in place) than as
  // the stencil, whose phase planes it writes and reads again: MobileNetV2's stride-2 3x3
  // depthwise convs at 112, 56 and 28 (1 thread, kiln tune) 0.39 -> 0.22, 0.095 -> 0.080 and
  // 0.034 -> 0.029 ms. Not with a transcendental epilogue, which that nest would not vectorise
  // (lower(), EfficientNet's SiLU), nor with a computed input it would evaluate per tap. Only 3x3
  // windows: partition_loops splits a 3x3 window's padded border off cleanly, a 5x5 one with
  // stride 2 over 14x14 not (MnasNet's: 0.057 -> 0.52 ms, the interior rows kept a select per tap).
  if (!sched_.stencil_strided_depthwise && cg == 1 && mg == 1 && (geo_.stride[0] > 1 || geo_.stride[1] > 1) &&
      geo_.kernel[0] <= 3 && geo_.kernel[1] <= 3 && is_group_input(c_->input(0)) && !transcendental_member())
    return false;
  const PhasePlanes ph = phase_geometry();
  const int64_t len = (geo_.out[0] - 1) * ph.wq + geo_.out[1];
  const int64_t bytes = (cg * ph.slots * ph.plane + len) * int64_t(sizeof(float));
  return bytes <= sched_.stencil_bytes;
}

// An ungrouped windowed conv with fewer output channels than a vector, big enough that the
// untiled nest's scalar sums would cost (Schedule::stencil_few_outputs_min_work): the stencil's,
// else the implicit GEMM's with a one-vector panel (tiled()).
bool ContractionLowering::few_output_channels() const {
  if (c_->op_type() != "Conv" || group_ != 1 || unit_window()) return false;
  const Shape& ws = c_->input(1)->shape();
  return ws[0] < sched_.vector_width &&
         shape_numel(out_shape_) * (shape_numel(ws) / std::max<int64_t>(1, ws[0])) >= sched_.stencil_few_outputs_min_work;
}

// The conv's output size, refusing a group output of another size (the stencils store every
// output at the conv's output positions).
int64_t ContractionLowering::conv_sized_outputs() {
  const int64_t numel = shape_numel(out_shape_);
  for (const Value* v : grp_.outputs)
    if (shape_numel(v->shape()) != numel)
      refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
  return numel;
}

LoopKernel ContractionLowering::build_stencil() {
  const int64_t numel = conv_sized_outputs();
  const Value* w = c_->input(1);
  const Shape& xs = c_->input(0)->shape();
  const Shape& ws = w->shape();
  const int64_t nb = xs[0], cg = xs[1] / group_, mg = ws[0] / group_;
  const int64_t ho = geo_.out[0], wo = geo_.out[1], kh = geo_.kernel[0], kw = geo_.kernel[1], taps = kh * kw;
  const PhasePlanes ph = phase_geometry();
  const int64_t per_channel = ph.slots * ph.plane, len = (ho - 1) * ph.wq + wo;
  // The j loop in blocks of four vectors: each weight broadcast then feeds four multiply-adds.
  // Lanes past `len` compute positions nobody stores; the planes get a zeroed tail so that their
  // reads stay inside the buffer (and never meet a stale NaN or denormal).
  // On 16-lane targets the epilogue's rows run in whole vectors (Schedule::stencil_whole_vectors):
  // x up to wo_p, the lanes past wo computed from the planes' (zeroed) columns and accumulator
  // entries past the row, their stores masked. The j loop and the zeroed tail then cover the
  // reads of the last row's extra lanes too.
  // Rows that would fill less than three quarters of their vectors keep their width: a 7-wide row
  // as a masked 16-lane vector made EfficientNet's 5x5 depthwise convs over 7x7 1.4x slower.
  const int64_t wo_v = (wo + 15) / 16 * 16;
  const bool wide = sched_.stencil_whole_vectors != 0 && sched_.vector_width == 16 && 4 * wo >= 3 * wo_v;
  const bool whole = wide && wo_v != wo;
  const int64_t wo_p = whole ? wo_v : wo, read_len = len + (wo_p - wo);
  const int64_t lanes = 4 * std::max(1, sched_.vector_width), blocks = (read_len + lanes - 1) / lanes;
  const int64_t len_p = blocks * lanes;
  if (taps > int64_t(kMaxExprNodes / 4)) refuse(cat("a ", kh, "x", kw, " window has too many taps to unroll"));
  // Groups of many channels (RegNetX's 16-channel groups, ResNeXt's 4-channel ones stay below):
  // each group a small implicit GEMM under the default numerics — rows the flat plane positions
  // y·wq + x in tiles of mr, columns the group's mg output channels (whole vectors), K =
  // (kernel position, input channel) as the segmented micro-kernel's segments over the staged
  // planes (the taps' offsets from a table), the weights packed per group once at build time
  // (panel_layout.h) — into a position-major tile, transposed into the accumulator planes the
  // epilogue below reads. The grouped-conv micro-kernel instead runs the positions as lanes, 8
  // output channels at a time, a 7x7 output's 63 flat positions padded to 64 lanes.
  const int64_t vw = std::max(1, sched_.vector_width);
  const bool group_gemm = sched_.reorder_sums && sched_.stencil_group_gemm_min_channels > 0 &&
                          cg >= sched_.stencil_group_gemm_min_channels && mg % vw == 0 && mg <= 64 &&
                          is_group_input(w) && L_.input_buffers_.count(w) && ws.size() == 4 && w->is_constant() &&
                          w->dtype() == DType::Float32 && only_right_operand(grp_, c_, w);
  const int64_t gemm_mr = std::clamp<int64_t>(sched_.contraction.accumulator_registers / std::max<int64_t>(1, mg / vw), 1, 16);
  // Every position the epilogue reads (read_len: a whole-vector row's lanes past wo too).
  const int64_t gemm_rows = (read_len + gemm_mr - 1) / gemm_mr * gemm_mr;
  // The planes' zeroed tail covers every position a lane or a row tile reads past len.
  const int64_t tail = std::max(len_p, group_gemm ? gemm_rows : 0) - len;

  auto planes = std::make_shared<Buffer>(Buffer{"kiln_dph", DType::Float32, {cg * per_channel + tail}, Scope::Local});
  auto acc = std::make_shared<Buffer>(Buffer{"kiln_dacc", DType::Float32, {len_p}, Scope::Local});
  const Expr t = var("kiln_dt");
  const Expr n = div_floor(t, int_imm(group_)), g = mod(t, int_imm(group_));

  // Stage the group's input channels.
  std::vector<Stmt> stage = stage_channel_phases(ph, planes, n, add(mul(g, int_imm(cg)), var("kiln_dc")),
                                                 mul(var("kiln_dc"), int_imm(per_channel)));
  Stmt fill = for_loop("kiln_dc", int_imm(cg), std::move(stage));
  Stmt zero_tail = tail == 0 ? nullptr
                             : for_loop("kiln_dz", int_imm(tail),
                                        {store(planes, add(int_imm(cg * per_channel), var("kiln_dz")), float_imm(0))});

  // Per output channel: the accumulator plane, then the epilogue per output row.
  const Expr co = add(mul(g, int_imm(mg)), var("kiln_dm"));
  const Expr j = add(mul(var("kiln_djo"), int_imm(lanes)), var("kiln_dj"));
  auto over_j = [&](std::vector<Stmt> body) {
    return for_loop("kiln_djo", int_imm(blocks), {for_loop("kiln_dj", int_imm(lanes), std::move(body), ForKind::Vectorized)});
  };
  // One input channel per group (depthwise) and output rows of at least stencil_direct_min_width
  // positions: the window's sum goes straight into the epilogue's row loop, with no accumulator
  // plane to zero, store and read back (the same operations in the same order: bit-identical).
  // Narrower rows keep the plane-wide loop, whose lanes run across rows (7x7: 61 lanes, not 7x7).
  //
  // A stride-1 window over one input plane per output channel, under the default numerics, with
  // rows of at least Schedule::stencil_kernel_min_width positions: the depthwise micro-kernel
  // (kernels/depthwise.h) writes the accumulator plane — blocks of output rows, each input vector
  // loaded once for all the rows its window reaches, where the sums below load one per
  // multiply-add and GCC spills a 7x7 window's 49 weights. ConvNeXt-T's 7x7 depthwise convs in
  // the model (kiln bench --kernels, 1 thread): 56x56 x 96 channels 0.80 -> 0.41 ms, 28x28 0.37 ->
  // 0.18, 14x14 0.26 -> 0.10. Its sums run window column by window column (not the reference's
  // order): never under --strict-fp (Schedule::reorder_sums).
  // A 3x3 window over rows wide enough for the direct sum keeps it: its nine loads per vector
  // are few, and the sum fused into the epilogue's pass saves the accumulator rows' store and
  // load (in-model, 1 thread, through the kernel: MobileNetV2's 3x3 depthwise convs over 112x112
  // and 56x56 — the latter in a pointwise-depthwise kernel — 1.06x and 1.11x, EfficientNet-B0's
  // over 56x56 1.08x; only its 112x112 one, with a SiLU, 0.93x).
  const bool direct_ok = cg == 1 && wo >= sched_.stencil_direct_min_width;
  bool dw_kernel = cg == 1 && sched_.reorder_sums && sched_.stencil_kernel_min_width > 0 &&
                   wo >= sched_.stencil_kernel_min_width && (taps > 9 || !direct_ok) && ph.slots == 1 &&
                   is_group_input(w) && L_.input_buffers_.count(w) && ws.size() == 4 && ws[1] == 1;
  for (int64_t tap = 0; dw_kernel && tap < taps; ++tap)
    dw_kernel = ph.offset[size_t(tap)] == ph.offset[0] + (tap / kw) * ph.wq + tap % kw;  // stride and dilation 1
  const bool direct = !dw_kernel && direct_ok;
  // Groups of several channels (or a channel multiplier), under the default numerics, with the
  // weights read in place: every output channel of the group at once through the grouped-conv
  // micro-kernel (kernels/depthwise.h) into one accumulator plane per output channel, in the same
  // order as the loops below (input channel, then kernel position, from 0) — where those load an
  // input vector and the accumulator per multiply-add and store it back per input channel.
  // RegNetY-400MF's 8-channel groups (3x3 stride 2 over 112x112, one-node model, kiln bench, 1
  // thread): 0.48-0.52 -> 0.283 ms.
  const bool grouped_kernel = !group_gemm && !dw_kernel && !direct && sched_.reorder_sums && cg * mg > 1 && len_p % 32 == 0 &&
                              is_group_input(w) && L_.input_buffers_.count(w) && ws.size() == 4 &&
                              w->dtype() == DType::Float32;
  auto gacc = std::make_shared<Buffer>(Buffer{"kiln_dga", DType::Float32, {mg * len_p}, Scope::Local});
  auto goffs = std::make_shared<Buffer>(Buffer{"kiln_dgo", DType::Int64, {taps}, Scope::Local});
  Expr direct_sum;
  std::vector<Stmt> per_channel_body;
  const bool plane_sums = grouped_kernel || group_gemm;  // every output channel's plane in kiln_dga
  if (dw_kernel || plane_sums) {
    // Filled by the call below, once the epilogue's row width (the columns it reads) is known.
  } else if (direct) {
    const Expr jd = add(mul(var("kiln_dy"), int_imm(ph.wq)), var("kiln_dx"));
    direct_sum = float_imm(0);
    for (int64_t tap = 0; tap < taps; ++tap) {
      const std::string wname = "kiln_dw" + std::to_string(tap);
      Expr wv = to_compute(L_.value_at(w, Index::from_dims(ws, {co, int_imm(0), int_imm(tap / kw), int_imm(tap % kw)})));
      per_channel_body.push_back(let(wname, wv));
      const Expr xv = load(planes, add(int_imm(ph.offset[size_t(tap)]), jd));
      direct_sum = binary(BinOp::Add, direct_sum, binary(BinOp::Mul, var(wname, DType::Float32), xv));
    }
  } else {
    per_channel_body.push_back(over_j({store(acc, j, float_imm(0))}));
  }
  if (!direct && !dw_kernel && !plane_sums) {
    std::vector<Stmt> per_ci;
    const Expr ci = cg == 1 ? int_imm(0) : var("kiln_dci");
    Expr sum = load(acc, j);
    for (int64_t tap = 0; tap < taps; ++tap) {
      const std::string wname = "kiln_dw" + std::to_string(tap);
      Expr wv = to_compute(L_.value_at(w, Index::from_dims(ws, {co, ci, int_imm(tap / kw), int_imm(tap % kw)})));
      per_ci.push_back(let(wname, wv));
      const Expr xv = load(planes, add(add(mul(ci, int_imm(per_channel)), int_imm(ph.offset[size_t(tap)])), j));
      sum = binary(BinOp::Add, sum, binary(BinOp::Mul, var(wname, DType::Float32), xv));
    }
    per_ci.push_back(over_j({store(acc, j, sum)}));
    if (cg == 1) {
      for (auto& s : per_ci) per_channel_body.push_back(std::move(s));
    } else {
      per_channel_body.push_back(for_loop("kiln_dci", int_imm(cg), std::move(per_ci)));
    }
  }
  // The micro-kernel's accumulator rows: blocks of kDwKernelRows output rows, each followed by
  // their epilogue while they are in L1 (a 112x114 plane at once, 51 KiB, went through L2 and
  // made MobileNetV2's first depthwise conv 1.25x slower than the plane-free direct sum). The
  // block's last row may spill up to a vector past its end (row > wq, below).
  constexpr int64_t kDwKernelRows = 16;
  const int64_t dw_rows = std::min(ho, kDwKernelRows), dw_blocks = (ho + dw_rows - 1) / dw_rows;
  auto dw_acc = std::make_shared<Buffer>(Buffer{"kiln_dacc", DType::Float32, {dw_rows * ph.wq + 16}, Scope::Local});
  {
    const Expr y = var("kiln_dy"), x = var("kiln_dx");
    Index point = Index::from_dims(out_shape_, {n, co, y, x});
    const Expr a = direct           ? direct_sum
                   : dw_kernel      ? load(dw_acc, add(mul(var("kiln_dr"), int_imm(ph.wq)), x))
                   : plane_sums     ? load(gacc, add(mul(var("kiln_dm"), int_imm(len_p)), add(mul(y, int_imm(ph.wq)), x)))
                                    : load(acc, add(mul(y, int_imm(ph.wq)), x));
    std::vector<std::pair<Expr, Expr>> stores = epilogue_stores(point, result(a, bias_ ? co : nullptr));
    std::vector<Stmt> body;
    int next_let = 0;
    append_hoisted_stores(body, k_.outputs, std::move(stores), next_let);
    int64_t row = wo;
    if (whole) {
      std::vector<Stmt> masked = masked_row(body, x, wo);
      if (!masked.empty()) body = std::move(masked), row = wo_p;
    }
    if (dw_kernel) {
      // Every column the epilogue reads (row: the lanes past wo too, from the zeroed columns and
      // tail of the plane, as the plane-wide loop computes them). With row > wq a row's last
      // lanes are the next row's first positions: the kernel addresses input and output by the
      // same flat position y·wq + x and sums each position's taps in one order, so both writes
      // of such a position store the same bits.
      const Expr y0 = mul(var("kiln_dyb"), int_imm(dw_rows));
      const Expr count = ho % dw_rows == 0 ? int_imm(dw_rows) : binary(BinOp::Min, int_imm(dw_rows), sub(int_imm(ho), y0));
      Stmt call = call_stmt(kernels::kDepthwiseF32,
                            {int_imm(kh), int_imm(kw), count, int_imm(row),
                             address(planes, add(int_imm(ph.offset[0]), mul(y0, int_imm(ph.wq)))), int_imm(ph.wq),
                             address(L_.input_buffers_.at(w), mul(co, int_imm(taps))), address(dw_acc, int_imm(0)),
                             int_imm(ph.wq)});
      Stmt rows = for_loop("kiln_dr", count,
                           {let("kiln_dy", add(y0, var("kiln_dr"))),
                            for_loop("kiln_dx", int_imm(row), std::move(body), ForKind::Vectorized)});
      per_channel_body.push_back(for_loop("kiln_dyb", int_imm(dw_blocks), {std::move(call), std::move(rows)}));
    } else {
      per_channel_body.push_back(
          for_loop("kiln_dy", int_imm(ho), {for_loop("kiln_dx", int_imm(row), std::move(body), ForKind::Vectorized)}));
    }
  }
  Stmt channels = for_loop("kiln_dm", int_imm(mg), std::move(per_channel_body));

  const int64_t work = numel * cg * taps;
  const bool parallel = nb * group_ > 1 && work >= sched_.parallel_min_work;
  Stmt compute = direct ? channels : allocate(dw_kernel ? dw_acc : acc, {channels});
  if (grouped_kernel) {
    std::vector<Stmt> sums;
    for (int64_t tap = 0; tap < taps; ++tap) sums.push_back(store(goffs, int_imm(tap), int_imm(ph.offset[size_t(tap)])));
    sums.push_back(call_stmt(kernels::kGroupedConvF32,
                             {int_imm(cg), int_imm(mg), int_imm(taps), address(goffs, int_imm(0)), int_imm(len_p),
                              address(planes, int_imm(0)), int_imm(per_channel),
                              address(L_.input_buffers_.at(w), mul(g, int_imm(mg * cg * taps))), address(gacc, int_imm(0)),
                              int_imm(len_p)}));
    sums.push_back(channels);
    compute = allocate(gacc, {allocate(goffs, std::move(sums))});
  }
  if (group_gemm) {
    // B of group g: rows k = tap · cg + ci, columns the group's output channels, one panel.
    PanelLayout layout;
    layout.batch = group_;
    layout.rows = taps * cg;
    layout.cols = layout.nr = mg;
    layout.inner_rows = cg;
    layout.inner_stride = taps;
    layout.outer_stride = 1;
    layout.col_stride = cg * taps;
    layout.batch_stride = mg * cg * taps;
    const BufferPtr wp = pack_constant_weights(w, layout);
    auto tile = std::make_shared<Buffer>(Buffer{"kiln_dgt", DType::Float32, {gemm_rows * mg}, Scope::Local});
    std::vector<Stmt> sums;
    for (int64_t tap = 0; tap < taps; ++tap) sums.push_back(store(goffs, int_imm(tap), int_imm(ph.offset[size_t(tap)])));
    const Expr r0 = mul(var("kiln_dgr"), int_imm(gemm_mr));
    sums.push_back(for_loop(
        "kiln_dgr", int_imm(gemm_rows / gemm_mr),
        {call_stmt(kernels::kMicroKernelSegF32,
                   {int_imm(gemm_mr), int_imm(mg), int_imm(taps), int_imm(cg), address(planes, r0), address(goffs, int_imm(0)),
                    int_imm(1), int_imm(per_channel), address(wp, mul(g, int_imm(taps * cg * mg))), int_imm(mg),
                    address(tile, mul(r0, int_imm(mg))), int_imm(mg), int_imm(0)})}));
    // The planes of the positions the epilogue reads (at most len_p of them).
    sums.push_back(call_stmt(kernels::kTransposeF32, {address(gacc, int_imm(0)), int_imm(len_p), address(tile, int_imm(0)),
                                                      int_imm(mg), int_imm(std::min(gemm_rows, len_p)), int_imm(mg)}));
    sums.push_back(channels);
    compute = allocate(gacc, {allocate(goffs, {allocate(tile, std::move(sums))})});
  }
  if (wide) k_.vector_bits = 512;
  k_.no_tree_pre = true;
  k_.body = for_loop("kiln_dt", int_imm(nb * group_), {allocate(planes, zero_tail ? std::vector<Stmt>{fill, zero_tail, compute}
                                                               : std::vector<Stmt>{fill, compute})},
                     parallel ? ForKind::Parallel : ForKind::Serial);
  return std::move(k_);
}


// A depthwise conv whose output rows are narrower than a vector, 16 channels per vector.
//
// The plane-per-channel stencil above runs a 7x7 output as one loop over the 73 positions of a
// padded 11x11 phase plane (5x5 window): 128 lanes computed for 49 stored, per channel, each tap
// an unaligned load. With the channels as the lanes every load is one aligned vector and no lane
// is wasted — the channel-blocked (NCHWc) kernels ONNX Runtime and oneDNN run — while the tensors
// stay NCHW outside: the block's channels are staged into planes interleaved by channel and the
// outputs transposed back.
//
//   for (n, block of 16 channels c0..)                    parallel over images × blocks
//     planes[(slot · plane + r · wq + q) · 16 + l] = 0, then the interior from x[n][c0 + l] (the
//       fused prologue evaluated there once per element; a plain input's rows are transposed in,
//       one kiln_transpose_f32 call per row, where the window's stride along x is 1)
//     wb[tap · 16 + l] = w[c0 + l][0][tap]                (one transposing call for constant weights)
//     default numerics: sums[(y · Wo + x) · 16 + l] = kiln_dwc_f32(planes, wb) (kernels/depthwise.h)
//     for y < Ho, x < Wo, l < 16 (vectorised)
//       out(n, c0 + l, y, x) = epilogue(Σ_taps wb[tap · 16 + l] · planes[(offset(tap) + y · wq + x) · 16 + l]
//                                       + bias[c0 + l])    (the sum: sums[...] or, strict, spelled out)
//     — into a local tile per output, then one transposing call per output into its NCHW plane
//       where the output's positions are contiguous; otherwise a store per element (a scatter)
//
// The sum keeps the plane stencil's order (kernel position ascending, from 0; a padding position
// contributes 0 · w), so --strict-fp stays bit-identical. Taken (channel_block_stencil) for
// depthwise convs with a multiple of 16 channels and rows narrower than
// Schedule::stencil_channel_blocks_below, on 16-lane targets (AVX-512's gathers and scatters).
// EfficientNet-B0's 5x5 depthwise conv + SiLU over 7x7 (1152 channels): 0.20 -> 0.095 ms (ONNX Runtime
// 0.064-0.076), 576 channels 3x3: 0.051 -> 0.030 (0.032); kiln bench, 1 thread. The micro-kernel
// and the transposing copies (gathers and scatters of 16 channels a plane apart before): the 5x5
// conv + SiLU, emitted kernel in a C harness, 0.128 -> 0.069 ms (docs/benchmarks.md, eighth session).
bool ContractionLowering::channel_block_stencil() const {
  const Shape& xs = c_->input(0)->shape();
  const int64_t cg = xs[1] / group_, mg = c_->input(1)->shape()[0] / group_;
  return cg == 1 && mg == 1 && group_ % 16 == 0 && sched_.vector_width == 16 &&
         geo_.out[1] < sched_.stencil_channel_blocks_below;
}

Stmt transposed_copy(const Expr& val, const std::string& l, const std::string& q, int64_t rows, int64_t cols,
                     const BufferPtr& dst, const Expr& dst_off, int64_t ldd) {
  if (val->kind != ExprKind::Load || val->type != DType::Float32 || val->buffer->scope == Scope::Local) return nullptr;
  AffineScope scope;
  scope.varying = {l, q};
  const auto f = affine_form(val->args[0], scope);
  if (!f || f->coef_of(q) != 1 || f->coef_of(l) < 1) return nullptr;
  const Expr src = sched::substitute(val->args[0], {{l, int_imm(0)}, {q, int_imm(0)}});
  return call_stmt(kernels::kTransposeF32, {address(dst, dst_off), int_imm(ldd), address(val->buffer, src),
                                            int_imm(f->coef_of(l)), int_imm(rows), int_imm(cols)});
}

LoopKernel ContractionLowering::build_channel_block_stencil() {
  const int64_t numel = conv_sized_outputs();
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& ws = w->shape();
  constexpr int64_t lanes = kernels::kDepthwiseBlockLanes;
  const int64_t nb = x->shape()[0], blocks = group_ / lanes;
  const int64_t ho = geo_.out[0], wo = geo_.out[1], kw = geo_.kernel[1], taps = geo_.kernel[0] * kw;
  if (taps > int64_t(kMaxExprNodes / 4)) refuse(cat("a ", geo_.kernel[0], "x", kw, " window has too many taps to unroll"));
  const PhasePlanes ph = phase_geometry();
  const int64_t positions = ph.slots * ph.plane;
  // Under the default numerics the window sums go through the blocked micro-kernel; --strict-fp
  // spells them out in the epilogue's loop (the same order, no fused multiply-adds).
  const bool micro = sched_.reorder_sums;

  auto planes = std::make_shared<Buffer>(Buffer{"kiln_dbp", DType::Float32, {positions * lanes}, Scope::Local});
  auto wb = std::make_shared<Buffer>(Buffer{"kiln_dbw", DType::Float32, {taps * lanes}, Scope::Local});
  auto sums = std::make_shared<Buffer>(Buffer{"kiln_dbs", DType::Float32, {ho * wo * lanes}, Scope::Local});
  auto offs = std::make_shared<Buffer>(Buffer{"kiln_dbo", DType::Int64, {taps}, Scope::Local});
  const Expr t = var("kiln_dt"), l = var("kiln_dl");
  const Expr n = div_floor(t, int_imm(blocks)), co = add(mul(mod(t, int_imm(blocks)), int_imm(lanes)), l);
  auto over_lanes = [&](std::vector<Stmt> body) { return for_loop("kiln_dl", int_imm(lanes), std::move(body), ForKind::Vectorized); };

  std::vector<Stmt> block;
  // Zero planes (their padding), the weights of the block's channels, then the planes' interior.
  block.push_back(for_loop("kiln_dz", int_imm(positions), {over_lanes({store(planes, add(mul(var("kiln_dz"), int_imm(lanes)), l), float_imm(0))})}));
  {
    const Expr tap = var("kiln_dk");
    // By flat offset (co · taps + tap): affine in the lane and the tap, for the transposing copy.
    Expr wv = to_compute(L_.value_at(w, Index::from_flat(ws, add(mul(co, int_imm(taps)), tap))));
    Stmt copy = transposed_copy(wv, "kiln_dl", "kiln_dk", lanes, taps, wb, int_imm(0), lanes);
    block.push_back(copy ? copy : for_loop("kiln_dk", int_imm(taps), {over_lanes({store(wb, add(mul(tap, int_imm(lanes)), l), wv)})}));
  }
  const nn::WindowGeometry g = planar_geometry();
  const int64_t h = g.in[0], wd = g.in[1], sy = g.stride[0], sx = g.stride[1], pt = g.pad_begin[0], pl = g.pad_begin[1];
  for (int64_t sl = 0; sl < ph.slots; ++sl) {
    const auto [py, px] = ph.phases[size_t(sl)];
    const auto [r0, r1] = phase_interior(sy, py, pt, h, ph.hq);
    const auto [q0, q1] = phase_interior(sx, px, pl, wd, ph.wq);
    if (r1 <= r0 || q1 <= q0) continue;
    const Expr r = add(var("kiln_xy"), int_imm(r0)), q = add(var("kiln_xx"), int_imm(q0));
    const Expr y = sub(add(mul(r, int_imm(sy)), int_imm(py)), int_imm(pt));
    const Expr xx = sub(add(mul(q, int_imm(sx)), int_imm(px)), int_imm(pl));
    const Expr val = to_compute(L_.value_at(x, planar_index(x, n, co, y, xx)));
    const Expr row_at = add(int_imm(sl * ph.plane), add(mul(r, int_imm(ph.wq)), int_imm(q0)));
    if (Stmt copy = transposed_copy(val, "kiln_dl", "kiln_xx", lanes, q1 - q0, planes, mul(row_at, int_imm(lanes)), lanes)) {
      block.push_back(for_loop("kiln_xy", int_imm(r1 - r0), {copy}));
      continue;
    }
    const Expr at = add(mul(add(int_imm(sl * ph.plane), add(mul(r, int_imm(ph.wq)), q)), int_imm(lanes)), l);
    block.push_back(for_loop("kiln_xy", int_imm(r1 - r0), {for_loop("kiln_xx", int_imm(q1 - q0), {over_lanes({store(planes, at, val)})})}));
  }
  const Expr y = var("kiln_dy"), xo = var("kiln_dx");
  const Expr pos = add(mul(y, int_imm(ph.wq)), xo);
  const Expr tile_at = add(mul(add(mul(y, int_imm(wo)), xo), int_imm(lanes)), l);
  Expr sum;
  if (micro) {
    for (int64_t tap = 0; tap < taps; ++tap) block.push_back(store(offs, int_imm(tap), int_imm(ph.offset[size_t(tap)])));
    block.push_back(call_stmt(kernels::kDepthwiseBlockedF32,
                              {int_imm(taps), address(offs, int_imm(0)), int_imm(ho), int_imm(wo), address(planes, int_imm(0)),
                               int_imm(ph.wq), address(wb, int_imm(0)), address(sums, int_imm(0)), int_imm(wo)}));
    sum = load(sums, tile_at);
  } else {
    sum = float_imm(0);
    for (int64_t tap = 0; tap < taps; ++tap) {
      const Expr wv = load(wb, add(int_imm(tap * lanes), l));
      const Expr xv = load(planes, add(mul(add(int_imm(ph.offset[size_t(tap)]), pos), int_imm(lanes)), l));
      sum = binary(BinOp::Add, sum, binary(BinOp::Mul, wv, xv));
    }
  }
  Index point = Index::from_dims(out_shape_, {n, co, y, xo});
  std::vector<std::pair<Expr, Expr>> stores = epilogue_stores(point, result(sum, bias_ ? co : nullptr));
  // Each output's positions one run (x coefficient 1, y coefficient Wo) and its channels a
  // constant stride apart: the epilogue's values go to a local tile, then one transposing copy
  // per output.
  std::vector<int64_t> ldd;
  for (size_t o = 0; o < stores.size(); ++o) {
    AffineScope scope;
    scope.varying = {"kiln_dy", "kiln_dx", "kiln_dl"};
    const auto f = k_.outputs[o]->dtype == DType::Float32 ? affine_form(stores[o].first, scope) : std::nullopt;
    if (!f || f->coef_of("kiln_dx") != 1 || f->coef_of("kiln_dy") != wo || f->coef_of("kiln_dl") < 1) break;
    ldd.push_back(f->coef_of("kiln_dl"));
  }
  std::vector<Stmt> body;
  int next_let = 0;
  std::vector<BufferPtr> tiles;
  if (ldd.size() == stores.size()) {
    std::vector<std::pair<Expr, Expr>> to_tiles;
    for (size_t o = 0; o < stores.size(); ++o) {
      tiles.push_back(std::make_shared<Buffer>(
          Buffer{"kiln_dbt" + std::to_string(o), DType::Float32, {ho * wo * lanes}, Scope::Local}));
      to_tiles.push_back({tile_at, stores[o].second});
    }
    append_hoisted_stores(body, tiles, std::move(to_tiles), next_let);
  } else {
    append_hoisted_stores(body, k_.outputs, std::move(stores), next_let);
  }
  block.push_back(for_loop("kiln_dy", int_imm(ho), {for_loop("kiln_dx", int_imm(wo), {over_lanes(std::move(body))})}));
  for (size_t o = 0; o < tiles.size(); ++o) {
    const Expr dst = sched::substitute(stores[o].first, {{"kiln_dy", int_imm(0)}, {"kiln_dx", int_imm(0)}, {"kiln_dl", int_imm(0)}});
    block.push_back(call_stmt(kernels::kTransposeF32, {address(k_.outputs[o], dst), int_imm(ldd[o]), address(tiles[o], int_imm(0)),
                                                       int_imm(lanes), int_imm(ho * wo), int_imm(lanes)}));
  }
  Stmt body_all = allocate(planes, {allocate(wb, std::move(block))});
  for (const BufferPtr& tb : tiles) body_all = allocate(tb, {body_all});
  if (micro) body_all = allocate(sums, {allocate(offs, {body_all})});
  const int64_t work = numel * taps;
  const bool parallel = nb * blocks > 1 && work >= sched_.parallel_min_work;
  k_.body = for_loop("kiln_dt", int_imm(nb * blocks), {body_all}, parallel ? ForKind::Parallel : ForKind::Serial);
  k_.vector_bits = 512;
  k_.no_tree_pre = true;
  return std::move(k_);
}

}  // namespace kiln::loop::detail
