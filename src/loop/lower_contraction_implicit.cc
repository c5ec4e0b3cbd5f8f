// The implicit GEMM of convolutions (positions x output channels over phase planes) and its
// channel-rows form (output channels x positions, staged im2col panels): the views
// ContractionLowering::tiled_view hands to the tiled nest (lower_contraction_tiled.h) for convs;
// the MatMul views and the generic im2col conv view are in lower_contraction_gemm.cc.
#include <algorithm>
#include <cmath>

#include "loop/contraction_lowering.h"
#include "support/error.h"

namespace kiln::loop::detail {
// ---- convolution as an implicit GEMM over (positions × output channels)
//
// A 2-D conv with one group and constant weights is computed as C(p, co) = Σ_k A(p, k) · B(k, co)
// with rows p the output positions, columns the output channels and K ordered (kernel position,
// input channel). For one kernel position (ky, kx), A(p, ci) is the input at a fixed offset from
// the window origin of position p: the micro-kernel broadcasts the activation in place — no
// im2col panel, no packing per call — and B is the weights, packed once into panels of output
// channels (panel_layout.h). So that this offset is affine in p over many output rows, the input
// is staged once per call (one pass) into zero-padded *phase planes*: for strides (sy, sx), phase
// (py, px) holds the padded input at rows ≡ py mod sy and columns ≡ px mod sx, so kernel position
// (ky, kx) reads phase ((ky·dy) mod sy, (kx·dx) mod sx) at offset (⌊ky·dy / sy⌋, ⌊kx·dx / sx⌋) with
// stride 1 — a strided conv becomes a stride-1 conv over phases. Rows are positions p = y · wq + x
// of a phase plane of width wq: the columns x ≥ Wo are computed and not stored, and one M block
// spans many output rows, reusing each weight panel. Only the phases some kernel position reads
// are staged; the fused prologue (a value computed in the group) is evaluated there once. A 1x1,
// stride-1, unpadded conv of a kernel input reads the input itself. K runs in another order than
// the reference's, so strict numerics (Schedule::reorder_sums false) keep the im2col form below.
//
// Over many output positions, and with few input channels, the output channels are the rows
// instead (window_channel_rows, staged_im2col_view): K in the reference's (ci, ky, kx) order, one
// segment, any numerics, and each tile's B panel packed from the same phase planes, one
// contiguous run of a plane per K row.

// Kernel position `kpos` (a loop expression) -> the constant table[kpos] (contraction_lowering.h;
// the tiled rows' panel packing looks up phase offsets with it too).
Expr table_lookup(const Expr& kpos, const std::vector<int64_t>& table) {
  Expr r = int_imm(table.back());
  for (size_t i = table.size() - 1; i-- > 0;) r = select(binary(BinOp::Eq, kpos, int_imm(int64_t(i))), int_imm(table[i]), r);
  return r;
}

bool ContractionLowering::implicit_conv() const {
  if (c_->op_type() != "Conv" || group_ != 1) return false;
  if (geo_.rank() != 2 && planar_fold() == PlanarFold::None) return false;
  // A pointwise conv over many positions with few input channels: the GEMM with output channels
  // as rows and the input read in place as B (conv_view) stores each output channel's positions
  // contiguously, where the implicit form's tile of positions × channels is stored transposed —
  // with K = 16 that store costs more than the products (MobileNetV2's 16 -> 96 expansion at
  // 112x112 + Clip: 0.82 -> 0.33 ms; ORT 0.37). With few positions the implicit form wins (a
  // 7x7 output leaves the channel-rows GEMM one full column tile and a 17-wide rest: 512 -> 2048
  // at 7x7 0.55 -> 2.5 ms while that rest ran the generic micro-kernel; models 1.00-1.04 still
  // with its specialisation). bench/kernel_sweep.py --set conv,mobile --only "k1 s1", 1 thread.
  // Over 14x14 and 28x28 outputs the implicit form, with row tiles fitted to the positions and
  // its transposing store (kernels::kTransposeF32), beats channel rows (which leave a 4-wide
  // column tile of 196 positions): 256 -> 1024 over 14x14 0.60 -> 0.51 ms, 512 -> 128 over 28x28
  // 0.68 -> 0.55, 112 -> 672 over 14x14 0.164 -> 0.150; 128 -> 512 over 28x28 (K = 128, the
  // few-K rule above) 0.63 as channel rows, 0.64 as positions. From a page of positions on, channel
  // rows (ContractionTile::channel_rows_positions: 56x56 outputs went both ways on two machines).
  // (A computed input — a fused prologue such as squeeze-excitation's channel scale — is staged
  // once into a plain buffer first, conv_view.)
  if (unit_window()) {
    const int64_t p = shape_numel(geo_.out), k = c_->input(0)->shape()[1];
    const auto& cr = sched_.contraction;
    if (p >= cr.channel_rows_positions || (p >= cr.channel_rows_positions_few_k && k <= cr.channel_rows_few_k))
      return false;
  }
  const bool rows_are_channels = window_channel_rows();
  if (!sched_.reorder_sums && !rows_are_channels && !patch_conv()) return false;
  const Value* w = c_->input(1);
  if (!is_group_input(w) || !w->is_constant() || w->dtype() != DType::Float32 || c_->input(0) == w) return false;
  for (const Node* m : grp_.nodes)
    if (m != c_)
      for (const Value* in : m->inputs())
        if (in == w) return false;
  if (shape_numel(c_->input(0)->shape()) == 0) return false;
  // Output channels are the rows (staged_im2col_view), any count of them.
  if (rows_are_channels) return true;
  // Output channels fill the micro-kernel's columns; fewer than nr with a window (a U-Net
  // decoder's 16-channel 3x3 convs, whose im2col form packs a gathered panel per tile) take a
  // panel as narrow as a whole number of vectors (narrow_panels). Fewer than one vector run
  // mostly zero columns, but only for the convs few_output_channels takes where the stencil
  // (stencil_conv, tried first) cannot hold the planes: the untiled nest ran a 64 -> 3 3x3 conv
  // over 256x256 at 1.9 GFLOP/s (120 ms), one vector of 3 live columns at 20. A narrow 1x1 conv
  // stays a GEMM with B in place (GoogLeNet's 192 -> 16 reductions over 28x28: 4 % slower as a
  // 16x16 implicit GEMM).
  const int64_t cout = w->shape()[0];
  return cout >= sched_.contraction.nr || (!unit_window() && (cout >= sched_.vector_width || few_output_channels()));
}

// A 2-D windowed conv with the output channels as rows and the positions as columns
// (staged_im2col_view): under strict numerics with few input channels (the implicit form's K
// order is not the reference's), else when its phase planes exceed
// ContractionTile::window_channel_rows_plane_bytes (the L2): the implicit form's micro-kernel
// broadcasts A from the planes, one line of a plane per K step, and beyond the L2 those come
// from L3 (128 -> 128 3x3 conv over 112x112: 23.2 ms as positions, 20.7 as channel rows). Up to
// it the implicit form with row tiles fitted to the output lines (position_rows) wins, Conv +
// ReLU at 1 thread (bench/ab_kernels.py, with the fitted tiles' K block and A prefetch): 64 -> 64
// over 56x56 1.31 -> 1.22 ms, 128 -> 128 over 28x28 1.29 -> 1.17, 256 -> 256 over 14x14 1.35 ->
// 1.06, 96 -> 128 over 28x28 0.96 -> 0.88 (stride 2 64 -> 128 over 56x56 and a 5x5 32 -> 64 over
// 56x56, which keep channel rows, within 3 % of the implicit form). Few input channels (a stem's
// 3) take the implicit form as well: the segmented micro-kernel keeps its accumulators in
// registers across the 3-term segments, where a channel-rows tile stored 64 rows of 32 positions
// through a per-row epilogue (inside the models, 1 thread: ResNet-50's 7x7 stem 2.83 -> 2.45 ms,
// SqueezeNet's 3x3 stride 2 0.92 -> 0.77, MobileNetV2's 0.53 -> 0.45, RegNetY's 0.63 -> 0.47).
// The K order is the reference's (ci, ky, kx), so --strict-fp keeps this form too. Lines much wider than the output's (a large
// dilation's padding) stay with the implicit form, which skips that padding per line.
bool ContractionLowering::window_channel_rows() const {
  if (c_->op_type() != "Conv" || group_ != 1 || geo_.rank() != 2 || unit_window() || patch_conv()) return false;
  const int64_t c = c_->input(0)->shape()[1];
  if (c < 16 && !sched_.reorder_sums) return true;
  const PhasePlanes ph = phase_geometry();
  // One image's planes: the implicit form's row tiles walk one image at a time, so the batch does
  // not make its A lines come from further away (lower_conv3d's frames as the batch: R3D-18's
  // 64 -> 64 convs over 8 frames of 56x56, 2.6 MB per frame, 59.5 ms as channel rows, 53.4 as
  // positions; bench/ab_schedule.py, 1 thread).
  const int64_t bytes = c * ph.slots * ph.plane * int64_t(sizeof(float));
  return bytes > sched_.contraction.window_channel_rows_plane_bytes &&
         c_->input(1)->shape()[0] >= sched_.contraction.window_channel_rows_min_cout && ph.wq * 4 <= geo_.out[1] * 5;
}

// Whether row tiles of mr rows take the phase planes' lines one by one (GemmOperand::line_rows):
// when they cover a line's outputs exactly, when the line's padding is wider than a tile, or when
// it is a tenth of the line or more and the outputs rounded up to whole tiles fit in the line
// (such a line computes at most mr - 1 of its padding instead of all of it). Inception-v3's 1x7
// convs over 17x17, 23-wide lines: 9-row tiles of 18 rows per line instead of 14-row tiles over
// 385 rows for 289 outputs, 1.81-1.89 -> 1.38 ms; its 5x5 convs over 35x35, 39-wide lines: 12-row
// tiles, 1.89 -> 1.74 (C harness). Narrower padding stays with exact tiles or none: SqueezeNet's
// 3x3 over 55x55 (57-wide lines) ran 2-3 % slower as 14-row tiles of 56 rows per line than as
// 11-row tiles of 55.
namespace {
bool tiles_by_line(bool direct, int64_t ho, int64_t wo, int64_t rs, int64_t mr) {
  const int64_t wpad = (wo + mr - 1) / mr * mr;
  return !direct && ho > 1 && (wpad == wo || rs >= wpad + mr || (wpad <= rs && 10 * (rs - wo) >= rs));
}
}  // namespace

// The implicit GEMM's rows are output positions: a 1x1 conv's read in place (m contiguous rows),
// else a phase plane's lines of rs positions, the first wo of each outputs. A row tile of mr
// rows that divides wo covers whole lines exactly (GemmOperand::line_rows = wo): no padding
// column is computed. Among the heights the registers allow (accumulator_registers / vectors
// per row, at most 16), the one with the fewest computed rows weighted by the tile's per-row
// overhead, (mr + 3) / mr — the B loads and call overhead a taller tile shares across more rows
// (14 rows ≈ 1.2 per row, 7 ≈ 1.4: 512 -> 512 3x3 over 7x7 1.39 ms as 14-row tiles over
// 9-wide lines, 1.20 as 7-row tiles of one line). Line tiles also skip the kernel rows that read
// only padding (segment_live), so their rows count by `live`, the fraction of (line, kernel row)
// pairs inside the image: ResNet-50's 512 -> 512 3x3 stride-2 conv to 7x7 (6 of 63 pairs dead)
// ran 2.34 ms as 14-row tiles over its 8-wide phase-plane lines, 1.93 as 7-row tiles of one
// line (C harness). Ties go to the taller tile.
//
// Where the best of those computes padding columns — flat tiles across lines with padding (a
// stride-2 conv's phase planes, a line wider than its outputs) or line tiles rounded up — for
// ContractionTile::split_line_waste_percent of its rows or more, and no height divides wo, each
// line is split instead into n tiles of balanced heights, mr = ⌈wo / n⌉ and mr − 1 (17 = 9 + 8;
// 71 = 5 · 7 + 6 · 6), n the fewest the registers allow (*split, the tiled GEMM's split line
// tiles): every computed row is an output. The per-tile overhead above predicted the split of
// Inception-v3's 17-wide lines to lose (9 + 8 against flat 14-row tiles over 18-wide lines: 391
// against 374); measured it won by about the rows it does not compute (one-node convs, 1 thread,
// bench/ab_kernels.py: 288 -> 384 3x3 stride 2 to 17x17, 6.6 % fewer rows, 0.947; 80 -> 192 3x3
// over 73x73, 2.9 %, 0.970; 32 -> 64 3x3 over 147x147, 1.4 %, 0.988), so waste decides it.
int ContractionLowering::position_rows(bool direct, int64_t ho, int64_t wo, int64_t rs, int64_t m, double live,
                                       bool* split) const {
  const auto& cr = sched_.contraction;
  const int64_t vw = std::max(1, sched_.vector_width), nv = std::max<int64_t>(1, cr.nr / vw);
  const int64_t top = std::clamp<int64_t>(cr.accumulator_registers / nv, 1, 16);
  int best = cr.mr;
  int64_t best_rows = 0;
  double best_cost = -1;
  for (int64_t mr = top; mr >= 1; --mr) {
    const bool lines = tiles_by_line(direct, ho, wo, rs, mr);
    const int64_t rows = lines ? ho * ((wo + mr - 1) / mr * mr) : (m + mr - 1) / mr * mr;
    const double cost = double(rows) * (lines ? live : 1.0) * double(mr + 3) / double(mr);
    if (best_cost < 0 || cost < best_cost - 1e-9) {
      best_cost = cost;
      best = int(mr);
      best_rows = rows;
    }
  }
  if (split) *split = false;
  const int64_t n = (wo + top - 1) / top, h = (wo + n - 1) / n;
  if (split && cr.split_line_waste_percent > 0 && !direct && ho > 1 && rs > wo && n > 1 && wo % h != 0 &&
      100 * (best_rows - ho * wo) >= cr.split_line_waste_percent * ho * wo) {
    *split = true;
    best = int(h);
  }
  return best;
}

// An implicit conv with fewer output channels than the micro-kernel's columns: panels of
// ceil(cout / vector) vectors, with proportionally more rows so the register tile keeps its
// accumulator count (8x32 -> 16x16). Packed through the im2col gather instead (conv_view), a
// 48 -> 16-channel 3x3 conv over 64x64 ran at 20 GFLOP/s, 2.9 ms, the model's slowest kernel.
void ContractionLowering::narrow_panels(int64_t cout) {
  auto& cr = sched_.contraction;
  const int64_t vw = std::max(1, sched_.vector_width);
  if (cout >= cr.nr || cr.nr < 1) return;
  set_panel_width(std::max<int64_t>(vw, (cout + vw - 1) / vw * vw));
}

// The register tile nr floats wide with as many accumulators as before (rows rescaled, 1 to 16).
void ContractionLowering::set_panel_width(int64_t nr) {
  auto& cr = sched_.contraction;
  cr.mr = int(std::min<int64_t>(16, std::max<int64_t>(1, int64_t(cr.mr) * cr.nr / nr)));
  cr.nr = int(nr);
}

// The implicit GEMM over channels-innermost planes with a wider register tile (nr floats, fewer
// rows: the accumulator count stays) where the output channels are at least two whole panels of
// it. A narrower last panel (96 or 208 channels in 64-wide panels) ran 1.13-1.33x the 32-wide
// tiles, one panel of 64 channels (fewer rows per tile, the same A reads) 1.00-1.08x.
void ContractionLowering::widen_panels(int64_t cout, int64_t nr) {
  auto& cr = sched_.contraction;
  const int64_t vw = std::max(1, sched_.vector_width);
  if (nr <= cr.nr || nr % vw != 0 || cr.nr < 1 || cout % nr != 0 || cout < 2 * nr) return;
  set_panel_width(nr);
}

// The implicit GEMM's panel width where the output channels are not whole panels of it: among
// whole vector counts up to the widest tile that still keeps 6 rows of accumulators, the width
// that pads the channels least (ties to the narrower). R(2+1)D-18's 64 -> 144 (1, 3, 3) convs
// over 8 frames of 56x56 ran 5 panels of 32, the last half empty: 43.3 ms as 14x32, 38.7 as 8x48
// (bench/ab_schedule.py, 1 thread).
void ContractionLowering::fit_panel_width(int64_t cout) {
  auto& cr = sched_.contraction;
  const int64_t vw = std::max(1, sched_.vector_width);
  if (!cr.fit_panel_width || cr.nr < vw || cout <= cr.nr || cout % cr.nr == 0) return;
  const int64_t widest = std::min<int64_t>(64, cr.accumulator_registers / 6 * vw);
  auto padded = [&](int64_t nr) { return (cout + nr - 1) / nr * nr; };
  int64_t best = cr.nr;
  for (int64_t nr = cr.nr + vw; nr <= widest; nr += vw)
    if (padded(nr) < padded(best)) best = nr;
  if (best != cr.nr) set_panel_width(best);
}

GemmView ContractionLowering::implicit_conv_view() {
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& xs = x->shape();
  const nn::WindowGeometry pg = planar_geometry();
  const int64_t nb = planar_images(), c = xs[1], h = pg.in[0], wd = pg.in[1], ho = pg.out[0], wo = pg.out[1];
  const int64_t kh = pg.kernel[0], kw = pg.kernel[1], sy = pg.stride[0], sx = pg.stride[1];
  const int64_t dy = pg.dilation[0], dx = pg.dilation[1], pt = pg.pad_begin[0], pl = pg.pad_begin[1];
  const int64_t cout = w->shape()[0], ks = kh * kw;
  // The padded input every window reads: hp × wp.
  const int64_t hp = (ho - 1) * sy + (kh - 1) * dy + 1, wp = (wo - 1) * sx + (kw - 1) * dx + 1;
  if (window_channel_rows()) return staged_im2col_view();
  narrow_panels(cout);
  if (patch_conv()) return patch_conv_view();
  // A channel scale of a kernel input X (channel_scaled_input) goes into the weights
  // (conv_weights_and_stores), and A is X in place.
  const auto scaled = channel_scaled_input();
  const bool direct =
      (is_group_input(x) || scaled) && ks == 1 && sy == 1 && sx == 1 && pt == 0 && pl == 0 && hp == h && wp == wd;
  // The share of kernel rows over input rows (not padding), for position_rows.
  int64_t live_rows = 0;
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t oy = 0; oy < ho; ++oy) live_rows += oy * sy + ky * dy - pt >= 0 && oy * sy + ky * dy - pt < h;
  const double live_share = double(live_rows) / double(std::max<int64_t>(1, ho * kh));
  // Skipping a kernel position where it reads only padding drops 0 · w from the sums: exact
  // unless a weight is infinite or NaN (0 · inf is NaN), then nothing is skipped.
  auto finite_weights = [&] {
    const float* wd0 = w->constant().data<float>();
    return std::all_of(wd0, wd0 + shape_numel(w->shape()), [](float f) { return std::isfinite(f); });
  };
  // A window along the lines only — a (k, 1, 1) temporal conv of a kernel input over (D, H·W)
  // (planar_fold MergeHW) — reads its input in place, with no phase planes: a line is a frame's
  // H·W positions, output line l reads input line l · sy + ky · dy − pt for kernel row ky (rows
  // of line l start l · sy lines in), channels a D·H·W plane apart. Its row tiles cover each
  // line exactly (mr divides H·W), and a tile skips the kernel rows over padding
  // (GemmOperand::segment_live, one segment per call), whose lines lie outside the input. S3D's
  // (7, 1, 1) stride-2 stem conv over 16 frames of 112x112 staged 70 MB of phase planes per
  // call.
  bool lines_in_place = !direct && planar_fold() == PlanarFold::MergeHW && is_group_input(x) && !scaled && kw == 1 &&
                        sx == 1 && pl == 0 && wp == wd && ho > 1 && sched_.contraction.fit_position_rows &&
                        finite_weights();
  // Staged planes with the channels innermost: a micro-kernel call's A rows are runs of kc
  // consecutive floats, not kc floats a plane apart each.
  const bool inner = !direct && !lines_in_place && sched_.contraction.implicit_channels_inner && channels_inner_staging();
  if (inner) {
    // The wider tile unless its row tiles, fitted to the lines, are 4 rows or fewer where the
    // narrow tile's hold as many accumulators: over Inception-v3's 8-wide lines 64 columns left
    // 4 rows (4x64) where 32 take 8 (8x32), and its 448 -> 384 3x3 conv over 8x8 ran 2.17 ms
    // against 1.61 (bench/ab_schedule.py, 1 thread); its convs over 8x8 0.55-0.83 in the model.
    // (7x64 over ResNet's lines beat 14x32; 5x64 over 5-wide lines keeps twice 5x32's
    // accumulators.)
    const auto narrow = sched_.contraction;
    widen_panels(cout, sched_.contraction.implicit_inner_nr);
    if (sched_.contraction.fit_position_rows && sched_.contraction.nr != narrow.nr) {
      const int64_t wq = phase_geometry().wq, m = (ho - 1) * wq + wo;
      const int wide_mr = position_rows(false, ho, wo, wq, m, live_share);
      if (wide_mr <= 4) {
        const auto wide = sched_.contraction;
        sched_.contraction = narrow;
        if (int64_t(position_rows(false, ho, wo, wq, m, live_share)) * narrow.nr < int64_t(wide_mr) * wide.nr)
          sched_.contraction = wide;
      }
    }
  }
  fit_panel_width(cout);
  // (Else its planes are staged, a plane per channel.)
  if (lines_in_place) lines_in_place = wo % position_rows(false, ho, wo, wd, (ho - 1) * wd + wo, live_share) == 0;
  const bool in_place = direct || lines_in_place;
  const PhasePlanes ph = in_place ? PhasePlanes{} : stage_phase_planes(inner);
  const int64_t nph = in_place ? 1 : ph.slots, plane = in_place ? h * wd : ph.plane, rs = in_place ? wd : ph.wq;
  // Element strides of a position and of a channel in A; floats per image.
  const int64_t pos_stride = inner ? ph.cstride : 1, chan_stride = inner ? 1 : nph * plane;
  const int64_t image = (inner ? ph.cstride : c) * nph * plane;
  GemmView g;
  g.batch = {nb};
  g.m = (ho - 1) * rs + wo;
  bool split = false;
  if (sched_.contraction.fit_position_rows)
    sched_.contraction.mr = position_rows(direct, ho, wo, rs, g.m, live_share, &split);
  g.n = cout;
  g.k = ks * c;
  // The K block, once the calls that read only padding are counted (dead of calls): a K longer
  // than one implicit_kc block is taken whole where B's whole-K panel streams from the L2 per row
  // tile (ContractionTile::implicit_whole_k_bytes), unless skipping such calls would save
  // dead_tile_min of them (a call that runs every kernel position skips none); else implicit_kc
  // blocks. Blocks skip calls only where a segment (the input channels) fills a block, one kernel
  // position per call (lower_contraction_tiled.cc).
  auto choose_k_block = [&](int64_t dead, int64_t calls) {
    auto& cr = sched_.contraction;
    const int64_t block = cr.implicit_kc > 0 ? std::min(cr.kc, cr.implicit_kc) : cr.kc;
    // Read in place over padded lines, a call over padding would read outside the input: one
    // segment per call at most, and those calls skipped.
    if (lines_in_place && dead > 0) {
      cr.kc = std::min(block, c);
      return;
    }
    const bool skips = c >= block && calls > 0 && double(dead) >= cr.dead_tile_min * double(calls);
    if (g.k > block && !skips && g.k * cr.nr * int64_t(sizeof(float)) <= cr.implicit_whole_k_bytes)
      cr.kc = g.k;
    else
      cr.kc = block;
  };
  g.k_segment = c;
  // (conv_weights_and_stores scales the weights whenever channel_scaled_input() holds: A must then be X.)
  KILN_CHECK(!scaled || direct, "a channel-scaled 1x1 conv without its input read in place");
  BufferPtr src = in_place ? L_.input_buffers_.at(scaled ? scaled->first : x) : ph.buffer;
  if (!in_place && ph.fill) {  // (planes a kernel input holds already have no fill: planes_in_place)
    g.staging_locals.push_back(ph.buffer);
    g.staging.push_back(ph.fill);
  }
  std::vector<int64_t> slot_of = in_place ? std::vector<int64_t>(size_t(ks), 0) : ph.slot_of;
  g.a.buffer = src;
  g.a.stride_r = pos_stride;
  g.a.stride_c = chan_stride;
  g.a.segment_base = [=](const std::vector<Expr>& bt, Expr s) {
    // Kernel position s = (ky, kx): its phase slot and offset within the phase plane, from a table
    // (the segment index is a loop variable).
    // (In place over lines: kernel row ky is ky · dy − pt lines from the output line's first
    // input line, before the input where it reads the padding above — those calls are skipped.)
    std::vector<int64_t> offset(static_cast<size_t>(ks), 0);
    for (int64_t kpos = 0; kpos < ks; ++kpos)
      offset[size_t(kpos)] =
          lines_in_place ? (kpos * dy - pt) * rs
                         : (slot_of[size_t(kpos)] * plane + ((kpos / kw) * dy / sy) * rs + (kpos % kw) * dx / sx) * pos_stride;
    return add(mul(bt[0], int_imm(image)), table_lookup(s, offset));
  };
  // In place and prepacked: the operands have no per-element value to pack.
  g.a.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("implicit conv: A is read in place"); };
  g.b.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("implicit conv: B is prepacked"); };
  // B(k = kpos · c + ci, co) = W[co][ci][kpos].
  PanelLayout layout = PanelLayout::row_major(1, g.k, cout, sched_.contraction.nr);
  layout.inner_rows = c;
  layout.inner_stride = ks;
  layout.outer_stride = 1;
  layout.col_stride = c * ks;
  layout.batch_stride = 0;
  // Rows are lines (output rows) of rs positions, the first wo of them outputs. Where row tiles
  // cover a line's outputs exactly (mr divides wo: position_rows), or a line has more padding
  // than a micro-kernel tile (rs ≥ wo rounded up to mr, plus mr: DeepLabV3's dilation-12 3x3 conv
  // over 14x14, rs = 38), each line computes only its whole tiles of outputs
  // (GemmOperand::line_rows): 16 of 38 rows per line there, 14 of 16 for a 3x3 conv over 14x14.
  // Split lines (position_rows): a line of wo rows is n tiles, the first wo − n · (mr − 1) of mr
  // rows, the rest of mr − 1 (the tiled GEMM's split line tiles).
  const int64_t mr = std::max(1, sched_.contraction.mr), wpad = split ? wo : (wo + mr - 1) / mr * mr;
  // The outputs o in [0, count) whose input o · stride + k · dilation − pad lies in [0, extent).
  auto live = [](int64_t count, int64_t stride, int64_t kd, int64_t pad, int64_t extent) {
    int64_t lo = 0;
    while (lo < count && lo * stride + kd - pad < 0) ++lo;
    int64_t hi = lo;
    while (hi < count && hi * stride + kd - pad < extent) ++hi;
    return hi > lo ? std::pair<int64_t, int64_t>{lo, hi} : std::pair<int64_t, int64_t>{0, 0};
  };
  if (split || tiles_by_line(direct, ho, wo, rs, mr)) {
    // A line's last tile computes wpad - wo positions past its outputs, whose windows reach as far
    // into the next line; the last line ends at its last output (m), so nothing reads past the planes.
    g.m = (ho - 1) * wpad + wo;
    g.a.line_rows = wpad;
    g.a.line_stride = lines_in_place ? sy * rs : rs;
    // Such padding comes from a large dilation, and a kernel position then reads the padding
    // over whole lines or line ends: its live output rows and columns (GemmOperand::
    // segment_live), for the tiles to skip it elsewhere.
    const int64_t line_tiles = (wpad + mr - 1) / mr, tall = wpad - line_tiles * (mr - 1);
    // Tile j's first row in its line (split: the tall tiles first).
    auto tile_row = [&](int64_t j) { return split ? std::min(j, tall) * mr + std::max<int64_t>(j - tall, 0) * (mr - 1) : j * mr; };
    int64_t dead = 0;
    if (finite_weights())
      for (int64_t kpos = 0; kpos < ks; ++kpos) {
        const auto [l0, l1] = live(ho, sy, (kpos / kw) * dy, pt, h);
        const auto [r0, r1] = live(wo, sx, (kpos % kw) * dx, pl, wd);
        g.a.segment_live.push_back({l0, l1, r0, r1});
        int64_t live_tiles = 0;
        for (int64_t j = 0; j < line_tiles; ++j) live_tiles += tile_row(j) < r1 && tile_row(j + 1) > r0;
        dead += ho * line_tiles - (l1 - l0) * live_tiles;
      }
    choose_k_block(dead, ho * line_tiles * ks);
    conv_weights_and_stores(g, w, layout, wpad, wo);
    return g;
  }
  KILN_CHECK(!lines_in_place, "implicit conv: a conv read in place over padded lines without line tiles");
  // Flat row tiles across lines: a kernel row that reads the padding above or below the input
  // (a 7x1 conv's outer rows) is skipped by the tiles that lie wholly in the output lines it
  // misses, when at least dead_tile_min of the (tile, kernel position) calls are such — their
  // tiles then lose the register epilogue and zero their accumulators first
  // (lower_contraction_tiled.cc), which costs more than skipping a few calls saves.
  if (!direct && ks > 1) {
    std::vector<std::array<int64_t, 4>> rows_live;
    const int64_t tiles = (g.m + mr - 1) / mr;
    int64_t dead = 0;
    for (int64_t kpos = 0; kpos < ks; ++kpos) {
      const auto [l0, l1] = live(ho, sy, (kpos / kw) * dy, pt, h);
      rows_live.push_back({l0, l1, 0, rs});
      for (int64_t t = 0; t < tiles; ++t)
        dead += std::min(g.m, (t + 1) * mr) <= l0 * rs || t * mr >= l1 * rs;
    }
    if (double(dead) >= sched_.contraction.dead_tile_min * double(tiles * ks) && finite_weights()) {
      g.a.segment_live = std::move(rows_live);
      g.a.segment_line = rs;
      choose_k_block(dead, tiles * ks);
    }
  }
  if (g.a.segment_live.empty()) choose_k_block(0, 0);
  conv_weights_and_stores(g, w, layout, rs, wo);
  return g;
}

// A windowed conv with the output channels as rows (window_channel_rows): A = the weights in
// place, K in the reference's (ci, ky, kx) order, the positions as columns. The input is staged
// once per call into phase planes (small: the input's size); each tile packs its B panel — kc ×
// nr im2col values — from them, and its stores are contiguous runs of an output channel's
// positions. (The whole im2col staged once per call was K times the input — 7.4 MB for ResNet's
// stem — and went through L3/DRAM between the staging and the tiles: the stem took 2.0 ms inside
// the model against 1.15 ms alone.)
GemmView ContractionLowering::staged_im2col_view() {
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& xs = x->shape();
  const int64_t nb = xs[0], c = xs[1], ho = geo_.out[0], wo = geo_.out[1];
  const int64_t kh = geo_.kernel[0], kw = geo_.kernel[1];
  const int64_t cout = w->shape()[0], ks = kh * kw, m = ho * wo, kk = c * ks;
  const PhasePlanes ph = stage_phase_planes();
  const int64_t wq = ph.wq;
  GemmView g;
  g.batch = {nb};
  g.m = cout;
  // Columns are the positions y · wq + x of a phase plane's lines, the first wo of each line
  // outputs (GemmView::col_line): a K row of a tile's panel is then one contiguous run of a
  // plane. (Columns as output positions y · wo + x split a panel row at every output line into
  // short copies — library memmove calls — ResNet's 64-channel 3x3 convs over 56x56 1.76 ->
  // 1.58 ms.)
  g.n = (ho - 1) * wq + wo;
  g.k = kk;
  g.col_line = wq;
  g.col_line_valid = wo;
  g.staging_locals.push_back(ph.buffer);
  g.staging.push_back(ph.fill);
  // Row k = (ci, ky, kx) of image 0 starts at koff[k] = ci · slots · plane + offset(ky, kx) in
  // the planes (a table filled once per call: per tile and row it is one load, not a select
  // chain over the kernel positions).
  auto koff = std::make_shared<Buffer>(Buffer{"kiln_xkoff", DType::Int64, {kk}, Scope::Local});
  g.staging_locals.push_back(koff);
  const Expr xk = var("kiln_xk");
  g.staging.push_back(for_loop(
      "kiln_xk", int_imm(kk),
      {store(koff, xk, add(mul(div_floor(xk, int_imm(ks)), int_imm(ph.slots * ph.plane)), table_lookup(mod(xk, int_imm(ks)), ph.offset)))}));
  const BufferPtr planes = ph.buffer;
  const int64_t image = c * ph.slots * ph.plane;
  GemmOperand::Packer pk;
  pk.setup = [](const std::vector<Expr>&, Expr, Expr) { return std::vector<Stmt>{}; };
  // Columns jj < nc of the tile are plane positions j0 + jj: row k of the panel is the run
  // planes[image + koff[k] + j0 ..] (in bounds: the last column is an output's, whose window
  // lies in the planes).
  pk.pack = [=](const std::vector<Expr>& bt, Expr k0, Expr kc, const BufferPtr& bpack, int64_t ld, Expr col0, Expr width) {
    const Expr j0 = var("kiln_j0"), nc = var("kiln_nc");
    const Expr dst_row = add(mul(var("kiln_ck"), int_imm(ld)), col0);
    auto copy = [&](Expr count) {
      return for_loop("kiln_xe", std::move(count),
                      {store(bpack, add(dst_row, var("kiln_xe")), load(planes, add(var("kiln_xkb"), var("kiln_xe"))))},
                      ForKind::Vectorized);
    };
    std::vector<Stmt> row = {let("kiln_xkb", add(add(mul(bt[0], int_imm(image)), load(koff, add(k0, var("kiln_ck")))), j0))};
    // A whole panel row is a copy of constant length (with the tile's width a runtime value GCC
    // made every row a memmove call, 10 % of ResNet's stem); the last tile's columns past nc are
    // zeros: the micro-kernel reads whole panels.
    std::vector<Stmt> rest = {copy(nc), for_loop("kiln_xz", sub(width, nc), {store(bpack, add(add(dst_row, nc), var("kiln_xz")), float_imm(0))},
                                                 ForKind::Vectorized)};
    if (width->kind == ExprKind::IntImm)
      row.push_back(if_then(binary(BinOp::Eq, nc, width), {copy(width)}, std::move(rest)));
    else
      for (auto& st : rest) row.push_back(std::move(st));
    return std::vector<Stmt>{for_loop("kiln_ck", kc, std::move(row))};
  };
  g.b.packer = std::move(pk);
  g.b.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("staged im2col: B is packed from the phase planes"); };
  g.a.buffer = L_.input_buffers_.at(w);
  g.a.base = [](const std::vector<Expr>&) { return int_imm(0); };
  g.a.stride_r = kk;
  g.a.stride_c = 1;
  g.a.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("staged im2col: A is read in place"); };
  g.epilogue = [this, cout, m](const std::vector<Expr>& bt, Expr i, Expr j, Expr acc) {
    Expr flat = add(mul(add(mul(bt[0], int_imm(cout)), i), int_imm(m)), j);
    return tile_stores(Index::from_flat(out_shape_, flat), acc, i);
  };
  return g;
}

// The implicit conv's B (the weights, packed in `layout`) and its stores: rows are output rows of
// `line` positions, the first `valid` of them outputs, columns the output channels.
void ContractionLowering::conv_weights_and_stores(GemmView& g, const Value* w, const PanelLayout& layout, int64_t line,
                                                  int64_t valid) {
  g.b.buffer = pack_constant_weights(w, layout);
  g.b.base = [](const std::vector<Expr>&) { return int_imm(0); };
  g.b.panel_nr = layout.nr;
  if (const auto scaled = channel_scaled_input()) {
    // The packed panels scaled per call, B(k, co) · s[k] (a 1x1 conv: k is the input channel),
    // into a local copy of the same layout.
    const BufferPtr wsc = std::make_shared<Buffer>(Buffer{"kiln_wsc", DType::Float32, {layout.packed_numel()}, Scope::Local});
    const Expr k = var("kiln_wk");
    const Expr at = add(mul(add(mul(var("kiln_wp"), int_imm(layout.rows)), k), int_imm(layout.nr)), var("kiln_wj"));
    g.staging_locals.push_back(wsc);
    g.staging.push_back(for_loop(
        "kiln_wp", int_imm(layout.panels()),
        {for_loop("kiln_wk", int_imm(layout.rows),
                  {for_loop("kiln_wj", int_imm(layout.nr),
                            {store(wsc, at, mul(load(g.b.buffer, at), channel_scale_at(scaled->second, k)))},
                            ForKind::Vectorized)})},
        layout.panels() > 1 && layout.packed_numel() >= sched_.parallel_min_work ? ForKind::Parallel : ForKind::Serial));
    g.b.buffer = wsc;
  }
  g.line = line;
  g.line_valid = valid;
  g.line_epilogue = [this](const std::vector<Expr>& bt, Expr y, Expr x, Expr j, Expr acc) {
    return tile_stores(planar_index(c_->output(0), bt[0], j, y, x), acc, j);
  };
}

// A patch embedding (ViT's 16x16 stride-16 conv, CLIP's 32x32 stride 32, Swin's and ConvNeXt's
// 4x4 stride-4 stems): kernel = stride along both axes, no padding, no dilation, so the windows
// tile the input. Its phase planes would be one per kernel position — 1,024 staged planes of 7x7
// for CLIP's, whose staging code the lowering refused (the conv then ran as a library kernel,
// 13 ms where ONNX Runtime takes 0.79) — and each plane is read by one kernel position only.
// Here A is the input itself: row (oy, ox) of K index (ci, ky, kx) is
// x[ci][oy·s + ky][ox·s + kx], so within a segment (ci, ky) the kx terms are consecutive floats
// (stride_c 1), rows along a line are s floats apart (stride_r) and lines s input rows apart;
// K is in the reference's order. Taken when a kernel row is longer than the channel count (the
// phase planes' segments: a stride-2 2x2 downsampling conv over 96 channels keeps the phase
// planes and their 96-term segments), and whenever there are more than 256 kernel positions (the
// staging code grows with the planes). Under --strict-fp too: each output sums its K terms in the
// reference's order (with the phase planes, CLIP's conv stayed a library kernel there).
bool ContractionLowering::patch_conv() const {
  if (c_->op_type() != "Conv" || group_ != 1 || geo_.rank() != 2) return false;
  for (size_t d = 0; d < 2; ++d)
    if (geo_.kernel[d] != geo_.stride[d] || geo_.dilation[d] != 1 || geo_.pad_begin[d] != 0 || geo_.pad_end[d] != 0)
      return false;
  // Lines start a whole number of A rows (kw floats) apart.
  const bool long_rows = geo_.kernel[1] >= c_->input(0)->shape()[1] || geo_.kernel[0] * geo_.kernel[1] > 256;
  return geo_.kernel[1] > 1 && long_rows && geo_.in[1] * geo_.kernel[0] % geo_.kernel[1] == 0;
}

GemmView ContractionLowering::patch_conv_view() {
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& xs = x->shape();
  const int64_t nb = xs[0], c = xs[1], h = geo_.in[0], wd = geo_.in[1], ho = geo_.out[0], wo = geo_.out[1];
  const int64_t kh = geo_.kernel[0], kw = geo_.kernel[1];
  const int64_t cout = w->shape()[0];
  GemmView g;
  g.batch = {nb};
  // A computed input (a normalisation folded in as a prologue) is staged once into a plain copy.
  BufferPtr src;
  if (is_group_input(x)) {
    src = L_.input_buffers_.at(x);
  } else {
    src = stage_input();
    g.staging_locals.push_back(src);
    g.staging.push_back(stage_input_fill(src));
  }
  // Rows in lines of whole micro-kernel tiles, one line per output row: a line starts kh input
  // rows (wd rows of A, kw floats each) after the previous one.
  bool split = false;
  if (sched_.contraction.fit_position_rows) sched_.contraction.mr = position_rows(false, ho, wo, wd, ho * wo, 1.0, &split);
  // Split lines (position_rows): a line of wo rows is n tiles, the first wo − n · (mr − 1) of mr
  // rows, the rest of mr − 1 (the tiled GEMM's split line tiles).
  const int64_t mr = std::max(1, sched_.contraction.mr), wpad = split ? wo : (wo + mr - 1) / mr * mr;
  g.m = (ho - 1) * wpad + wo;  // the last line ends at its last output: nothing reads past the input
  g.n = cout;
  g.k = c * kh * kw;
  g.k_segment = kw;
  g.a.buffer = src;
  g.a.stride_r = kw;
  g.a.stride_c = 1;
  g.a.line_rows = wpad;
  g.a.line_stride = wd * kh / kw;  // whole rows: patch_conv()
  // Segment s = (ci, ky): x[n][ci][ky][0].
  g.a.segment_base = [=](const std::vector<Expr>& bt, Expr s) {
    return add(mul(bt[0], int_imm(c * h * wd)),
               add(mul(div_floor(s, int_imm(kh)), int_imm(h * wd)), mul(mod(s, int_imm(kh)), int_imm(wd))));
  };
  g.a.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("patch conv: A is read in place"); };
  g.b.value = [](const std::vector<Expr>&, Expr, Expr) -> Expr { refuse("patch conv: B is prepacked"); };
  // B(k, co) = W[co][k]: K is the weights' own (ci, ky, kx) order.
  PanelLayout layout = PanelLayout::row_major(1, g.k, cout, sched_.contraction.nr);
  layout.inner_rows = 1;
  layout.inner_stride = 0;
  layout.outer_stride = 1;
  layout.col_stride = g.k;
  layout.batch_stride = 0;
  conv_weights_and_stores(g, w, layout, wpad, wo);
  return g;
}

}  // namespace kiln::loop::detail
