#include "loop/lower_contraction_tiled.h"

#include <algorithm>
#include <functional>

#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/lower_internal.h"
#include "loop/register_epilogue.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::vector<Stmt> build_tiled_gemm(const GemmView& v, const Schedule& s, int& next_let) {
  // The blocking (lower_contraction_tiled_blocking.cc): K blocks and segments, M blocks, column
  // panels, the threads' share.
  const TiledBlocking bk = tiled_gemm_blocking(v, s);
  const int64_t mr = bk.mr, nr = bk.nr, seg = bk.seg, nsegs = bk.nsegs, nsb = bk.nsb, kc = bk.kc, per_seg = bk.per_seg;
  const int64_t kblocks = bk.kblocks, mc = bk.mc, q = bk.q, nc = bk.nc, mblocks = bk.mblocks, ntiles = bk.ntiles;
  const int64_t line_rows = bk.line_rows, line_tiles = bk.line_tiles, tall = bk.tall, nbatch = bk.nbatch, tiles = bk.tiles;
  const bool pack_a = bk.pack_a, pack_b = bk.pack_b, panel_b = bk.panel_b, b_full_panels = bk.b_full_panels;
  const bool skip_dead = bk.skip_dead, split = bk.split, copy_b = bk.copy_b;
  auto segtab = std::make_shared<Buffer>(Buffer{"kiln_segoff", DType::Int64, {std::max<int64_t>(nsegs, 1)}, Scope::Local});
  auto livetab = std::make_shared<Buffer>(Buffer{"kiln_seglive", DType::Int64, {std::max<int64_t>(4 * nsegs, 1)}, Scope::Local});

  auto acc = std::make_shared<Buffer>(Buffer{"kiln_acc", DType::Float32, {mc * nc}, Scope::Local});
  auto bpack = std::make_shared<Buffer>(Buffer{"kiln_bpack", DType::Float32, {kc * nr}, Scope::Local});
  auto apack = std::make_shared<Buffer>(Buffer{"kiln_apack", DType::Float32, {mc * kc}, Scope::Local});

  // Tile coordinates from the tile index.
  std::vector<Stmt> tile;
  const Expr t = var("kiln_t");
  // Within a batch, the dimension outermost is the one the threads divide (Schedule's
  // columns_outer): columns where N > M, so that each thread reads the smaller operand whole.
  const bool cols_outer = columns_outer_order(s, v) && mblocks > 1 && ntiles > 1;
  tile.push_back(let("kiln_bt", div_floor(t, int_imm(mblocks * ntiles))));
  if (cols_outer) {
    tile.push_back(let("kiln_jt", mod(div_floor(t, int_imm(mblocks)), int_imm(ntiles))));
    tile.push_back(let("kiln_mb", mod(t, int_imm(mblocks))));
  } else {
    tile.push_back(let("kiln_mb", mod(div_floor(t, int_imm(ntiles)), int_imm(mblocks))));
    tile.push_back(let("kiln_jt", mod(t, int_imm(ntiles))));
  }
  std::vector<Expr> batch;
  {
    int64_t stride = nbatch;
    for (int64_t e : v.batch) {
      stride /= e;
      batch.push_back(e == 1 ? int_imm(0) : mod(div_floor(var("kiln_bt"), int_imm(stride)), int_imm(e)));
    }
  }
  // kiln_j0 / kiln_nc: the column tile the micro-kernels and B's packing work on; with a panel
  // (q > 1) they are set per column tile inside the K block, and kiln_p0 / kiln_pn give the
  // panel's first column and width for the epilogue.
  const Expr m0 = mul(var("kiln_mb"), int_imm(mc)), p0 = mul(var("kiln_jt"), int_imm(nc));
  tile.push_back(let("kiln_m0", m0));
  tile.push_back(let(q > 1 ? "kiln_p0" : "kiln_j0", p0));
  tile.push_back(let("kiln_mc", minimum(int_imm(mc), sub(int_imm(v.m), var("kiln_m0")))));
  tile.push_back(let(q > 1 ? "kiln_pn" : "kiln_nc", minimum(int_imm(nc), sub(int_imm(v.n), var(q > 1 ? "kiln_p0" : "kiln_j0")))));
  const Expr panel0 = var(q > 1 ? "kiln_p0" : "kiln_j0"), panel_n = var(q > 1 ? "kiln_pn" : "kiln_nc");
  const Expr mcv = var("kiln_mc"), ncv = var("kiln_nc");

  // The column parts of the epilogue (without parts one, owning every column).
  std::vector<GemmView::ColumnPart> parts = v.column_parts;
  if (parts.empty()) parts.push_back({0, v.n, v.epilogue, v.line_epilogue});
  // The register epilogue (kernels/microkernel.h, the epilogue forms; register_epilogue.h): where
  // the tile's stores are transposing copies of one output (positions as rows) and its value is
  // the sum with a bias per output channel and a Relu or Clip, the last K block's micro-kernel
  // calls apply it from their registers and the copies read the accumulator tile: no pass over the
  // tile of its own. (MobileNetV2's stem, a 3x3 3 -> 32 conv over 224x224 with K = 27, in a C
  // harness: 0.2694 -> 0.2592 ms; with no epilogue at all 0.2485.) A value that is the sum itself
  // needs no epilogue call.
  std::optional<RegisterEpilogue> reg_ep;
  // With it, where the output's lines follow each other (row tiles fitted to whole lines) and
  // the tile is one column tile, each row tile's rows are stored by a transposing copy right
  // after the last K block's call that finished them (ContractionTile::store_per_call): stored
  // after the whole tile, the copy was one burst of nc output planes' runs that the store buffer
  // and the L1's sets could not absorb (planes a power-of-two multiple of 1 KiB apart alias),
  // with no multiply-add to overlap it. VGG's 64 -> 128 3x3 conv over 112x112, both kernels
  // alternated per call (bench/ab_schedule.py): 0.89; ResNet's 64 -> 64 over 56x56 0.97; inside
  // VGG-11 at 2 threads its convs 0.52-0.81.
  std::function<Stmt(Expr, Expr)> store_rows;  // (rows, first row of the tile); null: after the tile
  // Where the micro-kernel writes a row tile's results (its C and row stride) when not into the
  // accumulator tile: the output itself (a channels-last output, below).
  std::function<std::pair<Expr, Expr>(Expr)> direct_c;
  // With a residual in the registers: its element index at a call's first row (at the call's
  // first column) and its row stride.
  std::function<std::pair<Expr, Expr>(Expr)> res_rows;
  // Whether every call's rows lie within one output line, lines of no padding rows.
  const bool rows_in_lines = v.line > 0 && v.line == v.line_valid &&
                             (split ? v.line == line_rows && mc % line_rows == 0 : v.line % mr == 0 && mc % mr == 0);
  const Expr acc_col = q > 1 ? mul(var("kiln_q"), int_imm(nr)) : int_imm(0);
  if (parts.size() == 1 && parts[0].line_epilogue && parts[0].begin == 0 && parts[0].n == v.n && !skip_dead &&
      kblocks > 0) {
    const Expr acc_elem = load(acc, add(mul(var("kiln_ei"), int_imm(nc)), var("kiln_ej")));
    const std::vector<TileStore> st =
        parts[0].line_epilogue(batch, var("kiln_ln"), var("kiln_x"), add(panel0, var("kiln_ej")), acc_elem);
    if (st.size() == 1) reg_ep = match_register_epilogue(st[0].value, acc_elem, "kiln_ej", {"kiln_ln", "kiln_x", "kiln_ei"});
    AffineScope scope;
    scope.varying = {"kiln_x", "kiln_ej", "kiln_ln"};
    // A residual in the registers: a call's rows must be rows of it ldr floats apart (the call's
    // rows lie in one output line of no padding rows, its index's position stride ldr) and every
    // column of a call the output's (nothing past N is read). Else the tile pass adds it.
    if (reg_ep && (reg_ep->flags & kernels::kEpResidual)) {
      const auto rf = affine_form(reg_ep->res_index, scope);
      const bool whole_cols = !b_full_panels || v.n % nr == 0;
      if (rf && rf->coef_of("kiln_ej") == 1 && rf->coef_of("kiln_x") >= 1 && rows_in_lines && whole_cols) {
        const int64_t L = v.line;
        const Expr index = reg_ep->res_index;
        res_rows = [=](Expr r) -> std::pair<Expr, Expr> {
          const Expr g = add(var("kiln_m0"), std::move(r));
          return {sched::substitute(index, {{"kiln_x", mod(g, int_imm(L))}, {"kiln_ej", acc_col}, {"kiln_ln", div_floor(g, int_imm(L))}}),
                  int_imm(rf->coef_of("kiln_x"))};
        };
      } else {
        reg_ep.reset();
      }
    }
    const auto f = reg_ep && q == 1 && s.contraction.store_per_call && v.line > 0 &&
                           st[0].buffer->dtype == DType::Float32
                       ? affine_form(st[0].index, scope)
                       : std::nullopt;
    if (f && f->coef_of("kiln_x") == 1 && f->coef_of("kiln_ej") >= 1) {
      const TileStore out = st[0];
      const int64_t ldd = f->coef_of("kiln_ej"), L = v.line, valid = v.line_valid;
      // The tile's rows are one run of the output where lines have no padding rows and follow
      // each other there; else a row tile is copied per line it overlaps (at most two where
      // mr <= L), its valid rows only: a stem's phase plane lines one wider than its outputs.
      const bool run = L == valid && f->coef_of("kiln_ln") == L;
      store_rows = [=, &acc](Expr rows, Expr r) -> Stmt {
        auto copy_at = [&](Expr ln, Expr x, Expr row, Expr n) {
          const Expr dst = sched::substitute(out.index, {{"kiln_x", std::move(x)}, {"kiln_ej", int_imm(0)}, {"kiln_ln", std::move(ln)}});
          return call_stmt(kernels::kTransposeF32, {address(out.buffer, dst), int_imm(ldd), address(acc, mul(row, int_imm(nc))),
                                                    int_imm(nc), std::move(n), var("kiln_nc")});
        };
        Stmt copy;
        if (run) {
          copy = copy_at(int_imm(0), add(var("kiln_m0"), r), r, std::move(rows));
        } else {
          // Rows [g0, g0 + rows) of the tile's block; line sl-th from g0's: its rows [xa, xb).
          const Expr g0 = add(var("kiln_m0"), r), g1 = add(g0, rows), ln = var("kiln_sln");
          const Expr lines = add(sub(div_floor(sub(g1, int_imm(1)), int_imm(L)), div_floor(g0, int_imm(L))), int_imm(1));
          const Expr xa = var("kiln_sxa"), xb = var("kiln_sxb");
          copy = for_loop("kiln_sl", lines,
                          {let("kiln_sln", add(div_floor(g0, int_imm(L)), var("kiln_sl"))),
                           let("kiln_sxa", binary(BinOp::Max, sub(g0, mul(ln, int_imm(L))), int_imm(0))),
                           let("kiln_sxb", minimum(sub(g1, mul(ln, int_imm(L))), int_imm(valid))),
                           if_then(lt(xa, xb), {copy_at(ln, xa, sub(add(mul(ln, int_imm(L)), xa), var("kiln_m0")), sub(xb, xa))})});
        }
        return kblocks == 1 ? copy : if_then(binary(BinOp::Eq, var("kiln_kb"), int_imm(kblocks - 1)), {copy});
      };
    } else if (f && f->coef_of("kiln_ej") == 1 && f->coef_of("kiln_x") >= nc && kblocks == 1 && rows_in_lines &&
               v.n % nr == 0 && nc == nr && s.contraction.channels_last_direct) {
      // A channels-last output whose rows the micro-kernel can write itself: one K block (the
      // call starts from zero and applies the register epilogue), row tiles within one line of
      // no padding rows, whole column tiles. The call's C is the output at the tile's first
      // row, its row stride the output's position stride: no accumulator tile and no copy.
      const TileStore out = st[0];
      const int64_t L = v.line, ldc = f->coef_of("kiln_x");
      direct_c = [=](Expr r) -> std::pair<Expr, Expr> {
        const Expr g = add(var("kiln_m0"), std::move(r));
        const Expr dst = sched::substitute(
            out.index, {{"kiln_x", mod(g, int_imm(L))}, {"kiln_ej", int_imm(0)}, {"kiln_ln", div_floor(g, int_imm(L))}});
        return {address(out.buffer, dst), int_imm(ldc)};
      };
      store_rows = [](Expr, Expr) -> Stmt { return block({}); };
    } else if (f && f->coef_of("kiln_ej") == 1 && f->coef_of("kiln_x") > 1) {
      // A channels-last output (a conv's epilogue ending in a Transpose: output_position): the
      // tile's rows are output rows; each is copied as it is, vectorised along the channels.
      const TileStore out = st[0];
      const int64_t L = v.line, valid = v.line_valid;
      store_rows = [=, &acc](Expr rows, Expr r) -> Stmt {
        // Rows [g0, g0 + rows) of the tile's block: row g is (line g / L, position g % L),
        // stored where the position is valid.
        const Expr g = add(add(var("kiln_m0"), r), var("kiln_sr"));
        const Expr ln = div_floor(g, int_imm(L)), x = mod(g, int_imm(L));
        const Expr dst = sched::substitute(out.index, {{"kiln_x", var("kiln_sx")}, {"kiln_ej", var("kiln_sj")}, {"kiln_ln", var("kiln_sln")}});
        Stmt row = for_loop("kiln_sj", var("kiln_nc"),
                            {store(out.buffer, dst, load(acc, add(mul(add(r, var("kiln_sr")), int_imm(nc)), var("kiln_sj"))))},
                            ForKind::Vectorized);
        std::vector<Stmt> body = {let("kiln_sln", ln), let("kiln_sx", x)};
        body.push_back(L == valid ? row : if_then(lt(var("kiln_sx"), int_imm(valid)), {row}));
        Stmt copy = for_loop("kiln_sr", std::move(rows), std::move(body));
        return kblocks == 1 ? copy : if_then(binary(BinOp::Eq, var("kiln_kb"), int_imm(kblocks - 1)), {copy});
      };
    }
  }

  // The first K block's calls start their accumulators at zero (the micro-kernel's acc argument
  // 0), later blocks add to them, so no pass zeroes the tile first: every element the epilogue
  // reads is written by a call of the first block. Not when a call may be skipped (dead
  // segments) or there is no K block. (A 16 -> 96 1x1 conv over 112x112, K = 16: the zeroing
  // pass and the first loads of the tile were 8 % of the kernel in a C harness.)
  const bool zero_pass = skip_dead || kblocks == 0;
  const Expr acc_in = zero_pass ? int_imm(1) : kblocks == 1 ? int_imm(0) : minimum(var("kiln_kb"), int_imm(1));
  std::vector<Stmt> in_acc;
  if (zero_pass)
    in_acc.push_back(for_loop("kiln_z", int_imm(mc * nc), {store(acc, var("kiln_z"), float_imm(0))}, ForKind::Vectorized));

  // One K block: A packed once, then for each column tile of the panel B packed and the
  // micro-kernels run (a panel of one tile has no loop around it).
  std::vector<Stmt> kblock;
  if (nsb > 0) {
    // Block kb is segments [kb · nsb, kb · nsb + kiln_ns).
    kblock.push_back(let("kiln_sg", mul(var("kiln_kb"), int_imm(nsb))));
    kblock.push_back(let("kiln_ns", minimum(int_imm(nsb), sub(int_imm(nsegs), var("kiln_sg")))));
    kblock.push_back(let("kiln_k0", mul(var("kiln_sg"), int_imm(seg))));
    kblock.push_back(let("kiln_kc", mul(var("kiln_ns"), int_imm(seg))));
  } else if (v.k_segment > 0) {
    // Block kb is block (kb mod per_seg) of segment kb / per_seg.
    kblock.push_back(let("kiln_sg", div_floor(var("kiln_kb"), int_imm(per_seg))));
    kblock.push_back(let("kiln_ks", mul(mod(var("kiln_kb"), int_imm(per_seg)), int_imm(kc))));
    kblock.push_back(let("kiln_k0", add(mul(var("kiln_sg"), int_imm(seg)), var("kiln_ks"))));
    kblock.push_back(let("kiln_kc", minimum(int_imm(kc), sub(int_imm(seg), var("kiln_ks")))));
    if (skip_dead)
      for (int i = 0; i < 4; ++i)
        kblock.push_back(let(cat("kiln_sl", i), load(livetab, add(mul(var("kiln_sg"), int_imm(4)), int_imm(i)))));
  } else {
    kblock.push_back(let("kiln_k0", mul(var("kiln_kb"), int_imm(kc))));
    kblock.push_back(let("kiln_kc", minimum(int_imm(kc), sub(int_imm(v.k), var("kiln_k0")))));
  }
  const Expr k0v = var("kiln_k0"), kcv = var("kiln_kc");
  if (pack_a) {
    Expr val = v.a.value(batch, add(var("kiln_m0"), var("kiln_pi")), add(k0v, var("kiln_pk")));
    kblock.push_back(for_loop(
        "kiln_pi", mcv,
        {for_loop("kiln_pk", kcv, {store(apack, add(mul(var("kiln_pi"), int_imm(kc)), var("kiln_pk")), val)})}));
  }
  std::vector<Stmt> coltile;
  if (q > 1) {
    coltile.push_back(let("kiln_j0", add(var("kiln_p0"), mul(var("kiln_q"), int_imm(nr)))));
    coltile.push_back(let("kiln_nc", minimum(int_imm(nr), sub(int_imm(v.n), var("kiln_j0")))));
  }
  if (pack_b && v.b.packer) {
    for (auto& st : v.b.packer->pack(batch, k0v, kcv, bpack, nr, int_imm(0), int_imm(nr))) coltile.push_back(st);
  } else if (copy_b) {
    const Expr src = add(v.b.base(batch), add(mul(add(k0v, var("kiln_pk")), int_imm(v.b.stride_r)), var("kiln_j0")));
    auto copy = [&](Expr count) {
      return for_loop("kiln_pj", std::move(count),
                      {store(bpack, add(mul(var("kiln_pk"), int_imm(nr)), var("kiln_pj")), load(v.b.buffer, add(src, var("kiln_pj"))))},
                      ForKind::Vectorized);
    };
    // A whole panel row is a copy of constant length; the last column tile's rest is zeros.
    Stmt row = copy(int_imm(nr));
    if (v.n % nr != 0)
      row = if_then(binary(BinOp::Eq, ncv, int_imm(nr)), {row},
                    {copy(ncv), for_loop("kiln_pz", sub(int_imm(nr), ncv),
                                         {store(bpack, add(add(mul(var("kiln_pk"), int_imm(nr)), ncv), var("kiln_pz")), float_imm(0))},
                                         ForKind::Vectorized)});
    coltile.push_back(for_loop("kiln_pk", kcv, {row}));
  } else if (pack_b) {
    // Columns past N are zeros (their accumulators are never stored); the value is only read at a
    // clamped, in-range column so every load stays in bounds.
    const Expr j = add(var("kiln_j0"), var("kiln_pj"));
    Expr val = v.b.value(batch, add(k0v, var("kiln_pk")), minimum(j, int_imm(v.n - 1)));
    if (v.n % nr != 0) val = select(lt(var("kiln_pj"), ncv), val, float_imm(0));
    coltile.push_back(for_loop("kiln_pk", kcv,
                               {for_loop("kiln_pj", int_imm(nr),
                                         {store(bpack, add(mul(var("kiln_pk"), int_imm(nr)), var("kiln_pj")), val)})}));
  }
  // Micro-kernel arguments for the row tile starting at row `r` (relative to m0).
  const std::vector<Expr> batch0(batch.size(), int_imm(0));
  // Row tiles start at multiples of mr (mc is one, or the only M block), so with lines of whole
  // tiles no tile straddles two lines.
  KILN_CHECK(!v.a.line_rows || ((split || v.a.line_rows % mr == 0) && v.a.buffer),
             "tiled GEMM: A's lines of rows must be whole micro-kernel tiles");
  // The physical row of (virtual) row i: its line's start plus its place in the line.
  auto a_row = [&](Expr i) -> Expr {
    if (!v.a.line_rows) return i;
    return add(mul(div_floor(i, int_imm(v.a.line_rows)), int_imm(v.a.line_stride)), mod(i, int_imm(v.a.line_rows)));
  };
  auto a_args = [&](Expr r) -> std::vector<Expr> {
    if (pack_a) return {address(apack, mul(r, int_imm(kc))), int_imm(kc), int_imm(1)};
    if (nsb > 0) {
      // The batch's offset (segment_base less its batch-0 value) and the row; the segments'
      // offsets are in kiln_segoff.
      Expr off = add(sub(v.a.segment_base(batch, int_imm(0)), v.a.segment_base(batch0, int_imm(0))),
                     mul(a_row(add(var("kiln_m0"), r)), int_imm(v.a.stride_r)));
      return {address(v.a.buffer, off), address(segtab, var("kiln_sg")), int_imm(v.a.stride_r), int_imm(v.a.stride_c)};
    }
    if (v.a.segment_base) {
      Expr off = add(v.a.segment_base(batch, var("kiln_sg")),
                     add(mul(a_row(add(var("kiln_m0"), r)), int_imm(v.a.stride_r)), mul(var("kiln_ks"), int_imm(v.a.stride_c))));
      return {address(v.a.buffer, off), int_imm(v.a.stride_r), int_imm(v.a.stride_c)};
    }
    KILN_CHECK(!v.a.line_rows, "tiled GEMM: lines of rows need a segmented A");
    const Expr row0 = v.a.m_block_stride ? mul(var("kiln_mb"), int_imm(v.a.m_block_stride))
                                         : mul(var("kiln_m0"), int_imm(v.a.stride_r));
    Expr off = add(v.a.base(batch), add(add(row0, mul(r, int_imm(v.a.stride_r))), mul(k0v, int_imm(v.a.stride_c))));
    return {address(v.a.buffer, off), int_imm(v.a.stride_r), int_imm(v.a.stride_c)};
  };
  auto b_args = [&]() -> std::vector<Expr> {
    if (pack_b || copy_b) return {address(bpack, int_imm(0)), int_imm(nr)};
    // Panel layout: the column tile starts at panel j0 / nr, i.e. at (j0 / nr) · K · nr = j0 · K.
    if (panel_b) return {address(v.b.buffer, add(v.b.base(batch), add(mul(var("kiln_j0"), int_imm(v.k)), mul(k0v, int_imm(nr))))), int_imm(nr)};
    Expr off = add(v.b.base(batch), add(mul(k0v, int_imm(v.b.stride_r)), var("kiln_j0")));
    return {address(v.b.buffer, off), int_imm(v.b.stride_r)};
  };
  // The micro-kernel call on rows [r, r + rows) of the tile, `cols` columns.
  auto mk_call = [&](Expr rows, Expr cols, Expr r) {
    std::vector<Expr> args = {std::move(rows), std::move(cols)};
    if (nsb > 0) {
      args.push_back(var("kiln_ns"));
      args.push_back(int_imm(seg));
    } else {
      args.push_back(kcv);
    }
    for (auto& e : a_args(r)) args.push_back(e);
    for (auto& e : b_args()) args.push_back(e);
    if (direct_c) {
      auto [c, ldc] = direct_c(r);
      args.push_back(std::move(c));
      args.push_back(std::move(ldc));
    } else {
      args.push_back(address(acc, add(mul(r, int_imm(nc)), acc_col)));
      args.push_back(int_imm(nc));
    }
    args.push_back(acc_in);
    const bool ep = reg_ep && reg_ep->flags != 0;
    if (ep) {
      // The last K block's calls apply it; the bias from the call's first column, nc of its columns
      // valid (a packed panel's columns past N get no bias and are never stored).
      const Expr flags = int_imm(reg_ep->flags);
      args.push_back(kblocks == 1 ? flags : select(binary(BinOp::Eq, var("kiln_kb"), int_imm(kblocks - 1)), flags, int_imm(0)));
      args.push_back(reg_ep->bias ? address(reg_ep->bias, sched::substitute(reg_ep->bias_index, {{"kiln_ej", acc_col}}))
                                  : address(acc, int_imm(0)));
      args.push_back(ncv);
      args.push_back(reg_ep->lo ? reg_ep->lo : float_imm(0));
      args.push_back(reg_ep->hi ? reg_ep->hi : float_imm(0));
      if (res_rows) {
        auto [index, ldr] = res_rows(r);
        args.push_back(address(reg_ep->res, std::move(index)));
        args.push_back(std::move(ldr));
      } else {
        args.push_back(address(acc, int_imm(0)));
        args.push_back(int_imm(0));
      }
    }
    return call_stmt(nsb > 0 ? (ep ? kernels::kMicroKernelSegEpF32 : kernels::kMicroKernelSegF32)
                             : (ep ? kernels::kMicroKernelEpF32 : kernels::kMicroKernelF32),
                     std::move(args));
  };
  auto mk = [&](Expr rows, Expr cols, Expr r) {
    const Expr rows_arg = rows;
    Stmt call = mk_call(rows, cols, r);
    if (!skip_dead) return call;
    const Expr row = add(var("kiln_m0"), r);
    if (!v.a.line_rows) {
      // Flat rows: the tile's rows [row, row + rows) against the live lines' rows
      // [sl0 · L, sl1 · L).
      const Expr L = int_imm(v.a.segment_line);
      return if_then(binary(BinOp::And, lt(row, mul(var("kiln_sl1"), L)), lt(mul(var("kiln_sl0"), L), add(row, rows_arg))),
                     {std::move(call)});
    }
    // The tile's rows [x0, x0 + rows) of line ln (a tile lies within one line) against the
    // segment's live lines [sl0, sl1) and rows [sl2, sl3).
    const Expr ln = div_floor(row, int_imm(v.a.line_rows)), x0 = mod(row, int_imm(v.a.line_rows));
    Expr live = binary(BinOp::Ge, ln, var("kiln_sl0"));
    live = binary(BinOp::And, live, lt(ln, var("kiln_sl1")));
    live = binary(BinOp::And, live, lt(var("kiln_sl2"), add(x0, rows_arg)));
    live = binary(BinOp::And, live, lt(x0, var("kiln_sl3")));
    // A call covers one kernel position's segment (skip_dead has one segment per call): where
    // the position reads the input at no more than a quarter of the tile's rows, the call runs
    // those rows only — through the generic micro-kernel (the count is known at run time), so
    // only where it skips most of the work: a padded 3x3 conv's side taps read 13 of 14 rows, and
    // running those 13 generically made a 256 -> 256 conv over 14x14 3.5x slower. A dilated
    // window's side taps over a map narrower than the dilation read a few columns of each line:
    // DeepLabV3's ASPP, 3x3 with dilation 12 over 14x14, whose side taps read 2 of 14.
    const Expr lo = binary(BinOp::Max, x0, var("kiln_sl2")), hi = minimum(add(x0, rows_arg), var("kiln_sl3"));
    const Expr whole = binary(BinOp::Lt, rows_arg, mul(sub(hi, lo), int_imm(4)));
    Stmt part = mk_call(sub(hi, lo), cols, add(r, sub(lo, x0)));
    return if_then(live, {if_then(whole, {std::move(call)}, {std::move(part)})});
  };
  // The row tiles of an M block of `rows` rows: full tiles of mr, then the rest. A packed B always
  // has nr columns (zero padded), an in-place B may not. With a constant row count (every block
  // but the last has mc rows, the last M mod mc) the rest tile has a constant height too, so it
  // runs a specialised micro-kernel instead of the generic loop (a 61-row block: 7 tiles of 8 and
  // one of 5).
  // The calls `at(cols)` of a column tile with its width as a constant. Column tiles start at
  // multiples of nr, so the one narrower than nr (an in-place B's, whose panels are not padded) is
  // the last, N mod nr wide: a constant, for which the micro-kernel has a specialisation (its last
  // vector masked) where the generic loop carried each accumulator through memory from k to k.
  // MobileNet-style 1x1 convs over 14x14 (196 = 6·32 + 4 columns) spent 30 % of their time in
  // that one tile.
  auto by_width = [&](const std::function<Stmt(Expr)>& at) -> Stmt {
    if (b_full_panels || v.n % nr == 0) return at(int_imm(nr));
    return if_then(binary(BinOp::Eq, ncv, int_imm(nr)), {at(int_imm(nr))}, {at(int_imm(v.n % nr))});
  };
  // A row tile's call, and with store_rows its rows' stores once the last K block finished them.
  auto mk_rows = [&](Expr rows, Expr cols, Expr r) -> Stmt {
    Stmt call = mk(rows, cols, r);
    return store_rows ? block({std::move(call), store_rows(rows, r)}) : call;
  };
  auto row_tiles = [&](Expr rows) {
    std::vector<Stmt> out;
    if (split) {
      // Per line of the block: its tall tiles, then its short ones (rows is whole lines).
      KILN_CHECK(rows->kind == ExprKind::IntImm && rows->int_value % line_rows == 0, "tiled GEMM: a split M block of part lines");
      const Expr line0 = mul(var("kiln_rl"), int_imm(line_rows));
      std::vector<Stmt> line;
      line.push_back(by_width([&](Expr cols) {
        return for_loop("kiln_r", int_imm(tall), {mk_rows(int_imm(mr), cols, add(line0, mul(var("kiln_r"), int_imm(mr))))});
      }));
      if (line_tiles > tall)
        line.push_back(by_width([&](Expr cols) {
          return for_loop("kiln_r", int_imm(line_tiles - tall),
                          {mk_rows(int_imm(mr - 1), cols, add(line0, add(int_imm(tall * mr), mul(var("kiln_r"), int_imm(mr - 1)))))});
        }));
      out.push_back(for_loop("kiln_rl", int_imm(rows->int_value / line_rows), std::move(line)));
      return out;
    }
    const Expr full_rows = rows->kind == ExprKind::IntImm ? int_imm(rows->int_value / mr) : div_floor(rows, int_imm(mr));
    const Expr row = mul(var("kiln_r"), int_imm(mr));
    out.push_back(by_width([&](Expr cols) { return for_loop("kiln_r", full_rows, {mk_rows(int_imm(mr), cols, row)}); }));
    if (rows->kind == ExprKind::IntImm) {
      const int64_t rest = rows->int_value % mr;
      if (rest > 0)
        out.push_back(by_width([&](Expr cols) { return mk_rows(int_imm(rest), cols, int_imm(rows->int_value - rest)); }));
    } else if (v.m % mr != 0 || mc % mr != 0) {
      const Expr rest_row = mul(full_rows, int_imm(mr));
      out.push_back(if_then(lt(rest_row, rows), {by_width([&](Expr cols) { return mk_rows(sub(rows, rest_row), cols, rest_row); })}));
    }
    return out;
  };
  if (mblocks == 1 || v.m % mc == 0) {
    for (auto& st : row_tiles(int_imm(mblocks == 1 ? v.m : mc))) coltile.push_back(st);
  } else {
    coltile.push_back(if_then(binary(BinOp::Eq, mcv, int_imm(mc)), row_tiles(int_imm(mc)), row_tiles(int_imm(v.m % mc))));
  }
  if (q > 1) {
    const Expr cols = div_floor(add(var("kiln_pn"), int_imm(nr - 1)), int_imm(nr));
    kblock.push_back(for_loop("kiln_q", cols, std::move(coltile)));
  } else {
    for (auto& st : coltile) kblock.push_back(std::move(st));
  }
  Stmt kloop = for_loop("kiln_kb", int_imm(kblocks), std::move(kblock));
  if (pack_a) kloop = allocate(apack, {kloop});
  if (pack_b || copy_b) kloop = allocate(bpack, {kloop});
  in_acc.push_back(kloop);

  // The epilogue over the tile, per column part (without parts one, owning every column). A
  // part's columns within the tile's panel are [lo, lo + extent), stored when `cond` holds (null:
  // always): the panel's columns before the part's begin or past its end belong to another part
  // or are padding. A tile of one column tile (q = 1) lies within one part (parts start at whole
  // panels): its part's stores are guarded by that and keep the tile's width, a constant the C
  // compiler unrolls the stores by. `first` is the part's own column at tile column lo (null:
  // the view's column, panel0 + lo), a Let clamped to the part's columns so that simplify_indices
  // knows its range (as panel0 + lo − begin, a store index unravelled from it — a Reshape after
  // the sibling — kept a remainder per element).
  struct PartCols {
    Expr lo;  // null: 0
    Expr extent;
    Expr cond;
    Expr first;
  };
  const bool by_lines = bool(parts[0].line_epilogue);
  std::vector<PartCols> cols;
  for (size_t p = 0; p < parts.size(); ++p) {
    const GemmView::ColumnPart& pt = parts[p];
    KILN_CHECK(bool(pt.line_epilogue) == by_lines && (by_lines || pt.epilogue), "tiled GEMM: column parts' epilogues differ in kind");
    KILN_CHECK(pt.begin >= 0 && pt.n > 0 && pt.begin + pt.n <= v.n, "tiled GEMM: a column part lies outside the columns");
    if (pt.begin == 0 && pt.n == v.n) {
      cols.push_back({nullptr, panel_n, nullptr, nullptr});
      continue;
    }
    KILN_CHECK(pt.begin % nr == 0 && (b_full_panels || pt.n % nr == 0),
               "tiled GEMM: a column part does not start at a whole panel");
    const int64_t end = pt.begin + pt.n;
    // The part's own column at the first tile column it stores: max(panel0 − begin, 0), clamped
    // to the part's last panel (the value where no column is stored does not matter).
    const std::string first = cat("kiln_epc", p);
    const int64_t last_panel = (pt.n - 1) / nr * nr;
    in_acc.push_back(let(first, minimum(binary(BinOp::Max, sub(panel0, int_imm(pt.begin)), int_imm(0)), int_imm(last_panel))));
    if (q == 1) {
      // The tile's panel lies in the part or not at all.
      Expr cond = lt(panel0, int_imm(end));
      if (pt.begin > 0) cond = binary(BinOp::And, binary(BinOp::Ge, panel0, int_imm(pt.begin)), cond);
      const Expr extent = end % nr == 0 || end == v.n ? panel_n : minimum(panel_n, sub(int_imm(end), panel0));
      cols.push_back({nullptr, extent, cond, var(first)});
      continue;
    }
    const std::string lo = cat("kiln_elo", p), extent = cat("kiln_ecn", p);
    in_acc.push_back(let(lo, binary(BinOp::Max, sub(int_imm(pt.begin), panel0), int_imm(0))));
    in_acc.push_back(let(extent, binary(BinOp::Max, sub(minimum(sub(int_imm(end), panel0), panel_n), var(lo)), int_imm(0))));
    cols.push_back({var(lo), var(extent), lt(int_imm(0), var(extent)), var(first)});
  }
  auto guarded = [](const PartCols& c, Stmt s) { return c.cond ? if_then(c.cond, {std::move(s)}) : s; };
  auto tile_col = [](const PartCols& c, const Expr& e) { return c.lo ? add(c.lo, e) : e; };
  auto part_col = [&](const PartCols& c, const Expr& e) { return c.first ? add(c.first, e) : add(panel0, tile_col(c, e)); };
  if (by_lines) {
    // Tile rows are positions (line · L + x) and the output is stored per line: a store from the
    // row-major accumulator is a transposed copy. In one pass (per output channel, per line) the
    // epilogue ran per element, unvectorised — with a SiLU its expf per element cost more than
    // the products (EfficientNet-B0's 1x1 expansions). So two passes: the epilogue's values into
    // a local tile per output, vectorised along the tile's contiguous columns (output channels),
    // then a copy per output line, vectorised along the line.
    const Expr i = add(var("kiln_m0"), var("kiln_ei"));
    const Expr L = int_imm(v.line);
    std::vector<BufferPtr> tmps;
    std::vector<Stmt> value_loops, copies;
    for (size_t p = 0; p < parts.size(); ++p) {
      const PartCols& c = cols[p];
      const Expr ej = tile_col(c, var("kiln_ej"));
      std::vector<TileStore> stores = parts[p].line_epilogue(batch, var("kiln_ln"), var("kiln_x"), part_col(c, var("kiln_ej")),
                                                             load(acc, add(mul(var("kiln_ei"), int_imm(nc)), ej)));
      const size_t first = tmps.size();
      // The tile the copies read: the epilogue's values, or with the register epilogue the
      // accumulators themselves.
      auto src_tile = [&](size_t o) { return reg_ep ? acc : tmps[first + o]; };
      std::vector<Stmt> values_body;
      if (!reg_ep) {
        SharedExprHoister h(next_let);
        for (auto& st : stores) h.count(st.value);
        if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
        std::vector<std::pair<Expr, Expr>> pairs;
        std::vector<BufferPtr> part_tmps;
        for (size_t o = 0; o < stores.size(); ++o) {
          tmps.push_back(std::make_shared<Buffer>(
              Buffer{"kiln_etile" + std::to_string(tmps.size()), stores[o].buffer->dtype, {mc * nc}, Scope::Local}));
          part_tmps.push_back(tmps.back());
          pairs.push_back({add(mul(var("kiln_ei"), int_imm(nc)), ej), h.rewrite(stores[o].value, values_body)});
        }
        append_stores(values_body, part_tmps, std::move(pairs), next_let);
      }
      if (!reg_ep) value_loops.push_back(guarded(c, for_loop("kiln_ej", c.extent, std::move(values_body), ForKind::Vectorized)));
      // Lines l0..l1 overlap the block [m0, m0 + mc); in line ln the rows x in [xa, xb) are both
      // in the block and outputs.
      const Expr m0v = var("kiln_m0"), lnv = var("kiln_ln");
      const Expr lines = add(sub(div_floor(sub(add(m0v, mcv), int_imm(1)), L), div_floor(m0v, L)), int_imm(1));
      std::vector<Stmt> line_bounds = {
          let("kiln_ln", add(div_floor(m0v, L), var("kiln_el"))),
          let("kiln_xa", binary(BinOp::Max, sub(m0v, mul(lnv, L)), int_imm(0))),
          let("kiln_xb", minimum(sub(add(m0v, mcv), mul(lnv, L)), int_imm(v.line_valid)))};
      // Where every store is a float32 run along x (index coefficient 1) with a constant stride
      // between output channels, a line's copy is one transposing call over all the tile's
      // columns (kernels/microkernel.h: 16x16 blocks in registers on AVX-512), not a strided
      // read of the tile per element: the epilogue was a tenth of a 64 -> 64 3x3 conv over 56x56
      // (C harness), and the call took a quarter of it off. (The GPU emitters spell it as loops.)
      // Where lines have no padding rows (L = the valid width: row tiles fitted to the lines) and
      // the output's lines follow each other (the index's line coefficient is L), the block's rows
      // are one run of the output: one call for the block (16-row blocks, not one per 7-wide line).
      std::vector<int64_t> ldd;  // per store: its index's stride between output channels
      bool whole = v.line == v.line_valid;
      for (const TileStore& st : stores) {
        AffineScope scope;
        scope.varying = {"kiln_x", "kiln_ej", "kiln_ln"};
        const auto f = st.buffer->dtype == DType::Float32 ? affine_form(st.index, scope) : std::nullopt;
        if (!f || f->coef_of("kiln_x") != 1 || f->coef_of("kiln_ej") < 1) break;
        ldd.push_back(f->coef_of("kiln_ej"));
        whole = whole && f->coef_of("kiln_ln") == v.line;
      }
      if (ldd.size() == stores.size()) {
        // Per line: rows [xa, xb) of line ln; per block: row m0 + r is (line 0, position m0 + r).
        const Expr x0 = whole ? m0v : var("kiln_xa");
        const Expr row0 = whole ? int_imm(0) : sub(add(mul(lnv, L), var("kiln_xa")), m0v);
        const Expr rows = whole ? mcv : sub(var("kiln_xb"), var("kiln_xa"));
        std::map<std::string, Expr> at = {{"kiln_x", x0}, {"kiln_ej", int_imm(0)}};
        if (whole) at["kiln_ln"] = int_imm(0);
        std::vector<Stmt> calls = whole ? std::vector<Stmt>{} : line_bounds;
        for (size_t o = 0; o < stores.size(); ++o)
          calls.push_back(call_stmt(kernels::kTransposeF32,
                                    {address(stores[o].buffer, sched::substitute(stores[o].index, at)), int_imm(ldd[o]),
                                     address(src_tile(o), add(mul(row0, int_imm(nc)), tile_col(c, int_imm(0)))),
                                     int_imm(nc), rows, c.extent}));
        copies.push_back(guarded(c, whole ? block(std::move(calls)) : for_loop("kiln_el", lines, std::move(calls))));
        continue;
      }
      const Expr ei = sub(add(mul(lnv, L), var("kiln_x")), m0v);
      std::vector<Stmt> body;
      SharedExprHoister h(next_let);
      for (auto& st : stores) h.count(st.index);
      std::vector<std::pair<Expr, Expr>> pairs;
      std::vector<BufferPtr> bufs;
      for (size_t o = 0; o < stores.size(); ++o) {
        pairs.push_back({h.rewrite(stores[o].index, body), load(src_tile(o), add(mul(ei, int_imm(nc)), ej))});
        bufs.push_back(stores[o].buffer);
      }
      append_stores(body, bufs, std::move(pairs), next_let);
      // An output stored channels-last (every store's index has unit stride between output
      // channels: an epilogue ending in a Transpose): the tile's rows are the output's rows,
      // copied row by row, vectorised along the channels.
      bool channels_last = true;
      for (const TileStore& st : stores) {
        AffineScope scope;
        scope.varying = {"kiln_x", "kiln_ej", "kiln_ln"};
        const auto f = affine_form(st.index, scope);
        channels_last = channels_last && f && f->coef_of("kiln_ej") == 1 && f->coef_of("kiln_x") > 1;
      }
      if (channels_last) {
        std::vector<Stmt> per_line = line_bounds;
        per_line.push_back(for_loop("kiln_ex", sub(var("kiln_xb"), var("kiln_xa")),
                                    {let("kiln_x", add(var("kiln_xa"), var("kiln_ex"))),
                                     for_loop("kiln_ej", c.extent, std::move(body), ForKind::Vectorized)}));
        copies.push_back(guarded(c, for_loop("kiln_el", lines, std::move(per_line))));
        continue;
      }
      std::vector<Stmt> per_line = line_bounds;
      per_line.push_back(for_loop("kiln_ex", sub(var("kiln_xb"), var("kiln_xa")),
                                  {let("kiln_x", add(var("kiln_xa"), var("kiln_ex"))), block(std::move(body))},
                                  ForKind::Vectorized));
      copies.push_back(guarded(c, for_loop("kiln_ej", c.extent, {for_loop("kiln_el", lines, std::move(per_line))})));
    }
    // Rows past a line's valid positions are computed and not stored (nor are their epilogue
    // inputs read: a residual at such a position may lie outside its buffer).
    Stmt values = for_loop("kiln_ei", mcv,
                           {let("kiln_ln", div_floor(i, L)), let("kiln_x", mod(i, L)),
                            if_then(binary(BinOp::Lt, var("kiln_x"), int_imm(v.line_valid)), std::move(value_loops))});
    Stmt both = reg_ep ? block(std::move(copies)) : block({values, block(std::move(copies))});
    for (size_t o = tmps.size(); o-- > 0;) both = allocate(tmps[o], {both});
    if (!store_rows) in_acc.push_back(both);  // else each row tile stored itself
  } else if (v.col_line > 0) {
    // Columns are positions over padded lines: per row, each line's valid run within the panel,
    // stored contiguously; the padding columns are computed and dropped.
    KILN_CHECK(v.column_parts.empty() && v.col_line_valid > 0 && v.col_line_valid <= v.col_line,
               "tiled GEMM: column lines need one part and valid columns within a line");
    const Expr i = add(var("kiln_m0"), var("kiln_ei"));
    const Expr L = int_imm(v.col_line), lnv = var("kiln_ln"), x = var("kiln_x");
    std::vector<TileStore> stores = v.epilogue(batch, i, add(mul(lnv, int_imm(v.col_line_valid)), x),
                                               load(acc, add(mul(var("kiln_ei"), int_imm(nc)), sub(add(mul(lnv, L), x), panel0))));
    std::vector<Stmt> body;
    SharedExprHoister h(next_let);
    for (auto& st : stores) {
      h.count(st.value);
      h.count(st.index);
    }
    if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
    std::vector<BufferPtr> bufs;
    std::vector<std::pair<Expr, Expr>> pairs;
    for (auto& st : stores) {
      pairs.push_back({h.rewrite(st.index, body), h.rewrite(st.value, body)});
      bufs.push_back(st.buffer);
    }
    append_stores(body, bufs, std::move(pairs), next_let);
    std::vector<Stmt> per_line = {
        let("kiln_ln", add(div_floor(panel0, L), var("kiln_el"))),
        let("kiln_xa", binary(BinOp::Max, sub(panel0, mul(lnv, L)), int_imm(0))),
        let("kiln_xb", minimum(sub(add(panel0, panel_n), mul(lnv, L)), int_imm(v.col_line_valid))),
        for_loop("kiln_ex", sub(var("kiln_xb"), var("kiln_xa")), {let("kiln_x", add(var("kiln_xa"), var("kiln_ex"))), block(std::move(body))},
                 ForKind::Vectorized)};
    const Expr lines = add(sub(div_floor(sub(add(panel0, panel_n), int_imm(1)), L), div_floor(panel0, L)), int_imm(1));
    in_acc.push_back(for_loop("kiln_ei", mcv, {for_loop("kiln_el", lines, std::move(per_line))}));
  } else {
    const Expr i = add(var("kiln_m0"), var("kiln_ei"));
    for (size_t p = 0; p < parts.size(); ++p) {
      const PartCols& c = cols[p];
      std::vector<TileStore> stores = parts[p].epilogue(
          batch, i, part_col(c, var("kiln_ej")), load(acc, add(mul(var("kiln_ei"), int_imm(nc)), tile_col(c, var("kiln_ej")))));
      std::vector<Stmt> body;
      SharedExprHoister h(next_let);
      for (auto& st : stores) {
        h.count(st.value);
        h.count(st.index);
      }
      if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
      std::vector<BufferPtr> bufs;
      std::vector<std::pair<Expr, Expr>> pairs;
      for (auto& st : stores) {
        pairs.push_back({h.rewrite(st.index, body), h.rewrite(st.value, body)});
        bufs.push_back(st.buffer);
      }
      append_stores(body, bufs, std::move(pairs), next_let);
      // Each part's stores over the tile's rows in a loop of their own: one loop over the rows
      // with a column loop per part ran its column loops of unknown extent per row. Several
      // parts' column loops are marked vectorised here (their iterations store distinct
      // columns): the loop transforms leave a part's clamped extent serial, and an LSTM step's
      // gates then ran their sigmoid and tanh one lane at a time. One part's loop is split into
      // whole vectors and a rest by the loop transforms.
      in_acc.push_back(guarded(c, for_loop("kiln_ei", mcv, {for_loop("kiln_ej", c.extent, std::move(body),
                                                                    parts.size() > 1 ? ForKind::Vectorized : ForKind::Serial)})));
    }
  }
  if (pack_b && v.b.packer) {
    std::vector<Stmt> inner = v.b.packer->setup(batch, var("kiln_j0"), ncv);
    inner.push_back(allocate(acc, std::move(in_acc)));
    for (size_t i = v.b.packer->locals.size(); i-- > 0;) inner = {allocate(v.b.packer->locals[i], std::move(inner))};
    for (auto& st : inner) tile.push_back(st);
  } else {
    tile.push_back(allocate(acc, std::move(in_acc)));
  }

  const bool parallel = tiles > 1 && nbatch * v.m * v.n * std::max<int64_t>(v.k, 1) >= s.parallel_min_work;
  Stmt nest = for_loop("kiln_t", int_imm(tiles), std::move(tile), parallel ? ForKind::Parallel : ForKind::Serial);
  std::vector<Stmt> staging = v.staging;
  std::vector<BufferPtr> staging_locals = v.staging_locals;
  if (nsb > 0) {
    staging.push_back(for_loop("kiln_sgi", int_imm(nsegs), {store(segtab, var("kiln_sgi"), v.a.segment_base(batch0, var("kiln_sgi")))}));
    staging_locals.push_back(segtab);
  }
  if (skip_dead) {
    for (int64_t sg = 0; sg < nsegs; ++sg)
      for (int i = 0; i < 4; ++i)
        staging.push_back(store(livetab, int_imm(4 * sg + i), int_imm(v.a.segment_live[size_t(sg)][size_t(i)])));
    staging_locals.push_back(livetab);
  }
  if (!staging.empty()) {
    staging.push_back(nest);
    nest = block(std::move(staging));
    for (size_t i = staging_locals.size(); i-- > 0;) nest = allocate(staging_locals[i], {nest});
  }
  return {comment(cat("tiled contraction: ", nbatch, " x [", v.m, " x ", v.k, "] * [", v.k, " x ", v.n, "], tile ", mc,
                      "x", nc, ", micro-kernel ", mr, "x", nr, ", K block ", kc, (pack_a ? ", A packed" : ""),
                      (pack_b ? ", B packed" : ""), (copy_b ? ", B copied per tile" : ""), (panel_b ? ", B prepacked" : ""),
                      (v.k_segment > 0 ? cat(", K in segments of ", v.k_segment) : std::string()),
                      (skip_dead ? ", zero segments skipped per tile" : ""),
                      (nsb > 0 ? cat(", ", nsb, " segments per call") : std::string()),
                      (v.column_parts.empty() ? std::string() : cat(", columns of ", v.column_parts.size(), " siblings")))),
          nest};
}

}  // namespace kiln::loop::detail
