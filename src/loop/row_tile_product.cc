// A row tile's product through the micro-kernel: the calls that compute rows × n of a tile
// already on chip (column panels, K blocks, row blocks of mr innermost), for the emitters that
// keep their tiles local (contraction chains, pointwise + depthwise, recurrent cells); and the
// widest panel a tail of columns may join (merged_panel_width). lower_contraction_tiled.cc builds
// the whole tiled GEMM nest around the same calls.
#include <algorithm>
#include <string>

#include "kernels/microkernel.h"
#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

std::vector<Stmt> row_tile_product(const RowTileProduct& p) {
  const int64_t mr = p.mr, nr = p.nr;
  KILN_CHECK(mr >= 1 && nr >= 1 && p.k >= 1 && p.kc >= 1 && p.kc <= p.k, "row tile product: bad blocking");
  const std::string jt = p.prefix + "jt", kb = p.prefix + "kb", kcn = p.prefix + "kc", rt = p.prefix + "rt";
  const Expr k0 = mul(var(kb), int_imm(p.kc)), kcv = var(kcn);
  const int64_t kblocks = (p.k + p.kc - 1) / p.kc;
  // zero_first: the first K block's calls start from zero, later ones add (the caller zeroes nothing).
  const Expr acc_in = !p.zero_first ? int_imm(1) : kblocks == 1 ? int_imm(0) : minimum(var(kb), int_imm(1));
  // The micro-kernel on rows [r, r + rows) of the tile, columns [j0, j0 + cols), K block k0.
  auto mk = [&](Expr rows, Expr cols, Expr j0, Expr r) {
    return call_stmt(kernels::kMicroKernelF32,
                     {std::move(rows), std::move(cols), kcv, address(p.a, p.a_at(r, k0)), int_imm(p.as_i), int_imm(1),
                      address(p.b, p.b_at(j0, k0)), int_imm(p.bs_k),
                      address(p.acc, add(mul(r, int_imm(p.ld)), p.acc_col ? add(p.acc_col, j0) : j0)),
                      int_imm(p.ld), acc_in});
  };
  const Expr r0 = mul(var(rt), int_imm(mr));
  // A constant row count (a chain's tiles when they divide M) needs no test for the rest.
  const bool fixed = p.rows->kind == ExprKind::IntImm;
  auto panel = [&](Expr cols, Expr j0) {
    std::vector<Stmt> kblock = {let(kcn, kblocks == 1 ? int_imm(p.k) : minimum(int_imm(p.kc), sub(int_imm(p.k), k0)))};
    if (fixed) {
      const int64_t rows = p.rows->int_value;
      if (rows / mr > 0) kblock.push_back(for_loop(rt, int_imm(rows / mr), {mk(int_imm(mr), cols, j0, r0)}));
      if (rows % mr) kblock.push_back(mk(int_imm(rows % mr), cols, j0, int_imm(rows / mr * mr)));
    } else {
      const Expr full = div_floor(p.rows, int_imm(mr)), rest = mul(full, int_imm(mr));
      kblock.push_back(for_loop(rt, full, {mk(int_imm(mr), cols, j0, r0)}));
      kblock.push_back(if_then(lt(rest, p.rows), {mk(sub(p.rows, rest), cols, j0, rest)}));
    }
    return for_loop(kb, int_imm(kblocks), std::move(kblock));
  };
  std::vector<Stmt> out;
  // Two column panels (a conv + global pool over a 7x7 map: 32 + 17 columns) and a big A: the
  // panels inside the row tiles, so each row tile's A block (mr × kc) is read once for both.
  // Panels outside read all of A once per panel (MobileNetV2's last 1x1 conv, 1280 x 320
  // weights: streamed twice per call, the fused kernel 0.58 ms against 0.34 ms for the conv and
  // the pool apart).
  if (p.panels_inside && p.n <= 2 * nr && p.n > nr && p.n > p.wide_nr) {
    auto both = [&](Expr rows, Expr r) {
      return std::vector<Stmt>{mk(rows, int_imm(nr), int_imm(0), r), mk(rows, int_imm(p.n - nr), int_imm(nr), r)};
    };
    std::vector<Stmt> kblock = {let(kcn, kblocks == 1 ? int_imm(p.k) : minimum(int_imm(p.kc), sub(int_imm(p.k), k0)))};
    if (fixed) {
      const int64_t rows = p.rows->int_value;
      if (rows / mr > 0) kblock.push_back(for_loop(rt, int_imm(rows / mr), both(int_imm(mr), r0)));
      if (rows % mr)
        for (Stmt& st : both(int_imm(rows % mr), int_imm(rows / mr * mr))) kblock.push_back(st);
    } else {
      const Expr full = div_floor(p.rows, int_imm(mr)), rest = mul(full, int_imm(mr));
      kblock.push_back(for_loop(rt, full, both(int_imm(mr), r0)));
      kblock.push_back(if_then(lt(rest, p.rows), both(sub(p.rows, rest), rest)));
    }
    out.push_back(for_loop(kb, int_imm(kblocks), std::move(kblock)));
    return out;
  }
  // The rest past the last whole panel joins that panel as one wider call when it may.
  const int64_t whole = p.n / nr, rest = p.n % nr;
  const bool merge = whole > 0 && rest > 0 && nr + rest <= p.wide_nr;
  const int64_t loop_panels = merge ? whole - 1 : whole;
  if (loop_panels > 0) out.push_back(for_loop(jt, int_imm(loop_panels), {panel(int_imm(nr), mul(var(jt), int_imm(nr)))}));
  if (merge) out.push_back(panel(int_imm(nr + rest), int_imm(loop_panels * nr)));
  else if (rest) out.push_back(panel(int_imm(rest), int_imm(whole * nr)));
  return out;
}

int64_t merged_panel_width(const Schedule& s, int64_t mr) {
  const int64_t vw = s.vector_width, nr = s.contraction.nr, extra = s.contraction.merge_tail_cols;
  if (vw < 16 || extra <= 0 || mr < 1) return 0;
  int64_t w = nr + extra;
  // Every accumulator in a register: mr rows of ceil(w / vw) vectors.
  while (w > nr && mr * ((w + vw - 1) / vw) > s.contraction.accumulator_registers) w -= vw;
  return w > nr ? w : 0;
}

}  // namespace kiln::loop::detail
