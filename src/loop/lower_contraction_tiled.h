// A contraction seen as a batch of GEMMs, C[b](i, j) = Σ_k A[b](i, k) · B[b](k, j), and the tiled
// loop nest that computes it through the micro-kernel interface (src/kernels/microkernel.h):
//
//   parallel for tile (b, M block, N tile of nr columns)
//     allocate acc[mc × nr] = 0                         the tile's accumulators (Scope::Local)
//     for K block of kc                                 (one block when B is read in place)
//       [pack B(k, j) for the block into bpack[kc × nr]  when B is an expression: im2col, a
//                                                        prologue, padding; zero past column N]
//       [pack A(i, k) into apack[mc × kc]                when A is an expression]
//       for row tile of mr: kiln_mk_f32(mr, nr, kc, A, .., B, .., &acc[row·nr], nr)
//     epilogue: for i < mc, j < valid columns: the group's stores from acc[i·nr + j]
//
// MatMul maps directly (batch dims; i rows of A; j columns of B). Conv maps per (n, group): i the
// output channel within the group, j the flattened output position, k = (input channel, kernel
// position) flattened, A the weights (read in place: [M, K] row-major per group), B the im2col
// values of the input, packed (or read in place for a 1×1, stride-1, unpadded conv).
//
// Each output element still sums its products in ascending k with one accumulator, so the tiled
// nest gives bit-identical results to the naive one (tested against it).
#pragma once
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loop/loop_ir.h"
#include "loop/schedule.h"

namespace kiln::loop::detail {

struct GemmOperand {
  // Set when the operand is a plain buffer read in place: element (r, c) of batch b is at
  // base(b) + r * stride_r + c * stride_c (B: stride_c must be 1).
  BufferPtr buffer;
  std::function<Expr(const std::vector<Expr>& batch)> base;
  int64_t stride_r = 0, stride_c = 0;
  // A only, read in place: the address of A(i, k) is affine in k only within segments of
  // GemmView::k_segment terms (a conv's kernel positions); segment_base(batch, s) is the offset of
  // A(0, s · k_segment), and A(i, k) = segment_base + i · stride_r + (k mod k_segment) · stride_c.
  std::function<Expr(const std::vector<Expr>& batch, Expr segment)> segment_base;
  // A only, read in place: the operand is stored in blocks of GemmView::m_block rows, block mb at
  // base + mb · m_block_stride, row r of a block at r · stride_r (0: not blocked).
  int64_t m_block_stride = 0;
  // A only, read in place: rows come in lines of line_rows (a multiple of the micro-kernel's mr),
  // line l starting at row offset l · line_stride: row i is at (i / line_rows) · line_stride +
  // i mod line_rows (0: rows are uniform). A conv's padded phase plane whose lines are much
  // wider than its outputs computes only whole micro-kernel tiles of each line's outputs.
  int64_t line_rows = 0, line_stride = 0;
  // A only, with lines: segment s is zero (reads only padding) outside lines [l0, l1) and outside
  // rows [r0, r1) of a line, segment_live[s] = {l0, l1, r0, r1}; a row tile there skips the
  // segment's micro-kernel calls. A dilated conv's outer kernel positions over a small plane
  // (DeepLabV3's dilation-12 3x3 conv over 14x14: a tap 12 rows up reads 2 of 14 rows) were 5x
  // the useful products. Empty: every segment is live everywhere.
  std::vector<std::array<int64_t, 4>> segment_live;
  // A only, without lines (line_rows 0), with segment_live: the rows are a conv's positions over
  // its padded plane, lines of segment_line rows; a row tile whose rows all lie outside segment
  // s's live lines [l0, l1) skips the segment's micro-kernel calls (r0, r1 unused). A 7x1 conv
  // over 17x17 with 14-row tiles: 13 of its 147 (tile, kernel row) calls read only padding.
  int64_t segment_line = 0;
  // B only: the buffer holds B in the micro-kernel's panel layout (panel_layout.h) with panels of
  // panel_nr columns (the schedule's nr); base(b) is the batch's offset, strides are unused.
  int64_t panel_nr = 0;
  // The operand's value (float32) at (batch, r, c): A(i, k) or B(k, j). Used to pack it.
  std::function<Expr(const std::vector<Expr>& batch, Expr r, Expr c)> value;
  // Optional (B only): a packer that does better than evaluating `value` per element (a conv's
  // im2col from per-column offset tables). `setup` runs once per tile, with `locals` allocated
  // around the tile; `pack` fills bpack[kk * ld + col0 + jj] for jj < width and the K block
  // [k0, k0 + kc) (columns of the tile past nc get zeros).
  struct Packer {
    std::vector<BufferPtr> locals;
    std::function<std::vector<Stmt>(const std::vector<Expr>& batch, Expr j0, Expr nc)> setup;
    std::function<std::vector<Stmt>(const std::vector<Expr>& batch, Expr k0, Expr kc, const BufferPtr& bpack,
                                    int64_t ld, Expr col0, Expr width)>
        pack;
  };
  std::optional<Packer> packer;
};

struct TileStore {
  BufferPtr buffer;
  Expr index, value;
};

struct GemmView {
  Shape batch;  // batch extents (MatMul: the broadcast batch dims; Conv: {N, groups})
  int64_t m = 1, n = 1, k = 1;
  GemmOperand a, b;
  // The group's stores at output (batch, i, j) given the accumulated value (float32).
  std::function<std::vector<TileStore>(const std::vector<Expr>& batch, Expr i, Expr j, Expr acc)> epilogue;
  // K blocks never straddle a multiple of k_segment (0: no segments); see GemmOperand::segment_base.
  int64_t k_segment = 0;
  // The M block (rows per tile) the operands were laid out for (0: the schedule's choice); a
  // multiple of the micro-kernel's mr.
  int64_t m_block = 0;
  // Optional, instead of `epilogue`: the rows are lines of `line` rows of which the first
  // `line_valid` are outputs (a conv's positions over a padded plane: the padding columns are
  // computed to keep A's row stride uniform, not stored). The epilogue then walks, per column,
  // each line's valid rows innermost — contiguous stores along x, no division per element —
  // given the line and the position x within it.
  int64_t line = 0, line_valid = 0;
  std::function<std::vector<TileStore>(const std::vector<Expr>& batch, Expr line, Expr x, Expr j, Expr acc)>
      line_epilogue;
  // Optional, with `epilogue` (and no column parts): the columns are lines of `col_line` columns
  // of which the first `col_line_valid` are outputs (a conv with the output channels as rows and
  // its positions over a padded phase plane as columns, so that B's rows are contiguous runs of
  // the plane). The epilogue is called with j = line · col_line_valid + x, the output position,
  // and only the valid columns are stored, as contiguous runs per line.
  int64_t col_line = 0, col_line_valid = 0;
  // Statements run once before the tiles (staging an operand), with the buffers they fill
  // allocated around the whole nest.
  std::vector<BufferPtr> staging_locals;
  std::vector<Stmt> staging;
  // Optional: the columns are several contractions' side by side (sibling contractions of one A
  // lowered as one GEMM, lower_contraction_siblings.cc). Part p owns columns [begin, begin + n)
  // and has its own epilogue (or line_epilogue), given the part's own column j − begin; the
  // columns between parts (padding to whole panels) are computed and never stored. Empty: the
  // view's epilogue / line_epilogue owns [0, n).
  struct ColumnPart {
    int64_t begin = 0, n = 0;
    std::function<std::vector<TileStore>(const std::vector<Expr>& batch, Expr i, Expr j, Expr acc)> epilogue;
    std::function<std::vector<TileStore>(const std::vector<Expr>& batch, Expr line, Expr x, Expr j, Expr acc)>
        line_epilogue;
  };
  std::vector<ColumnPart> column_parts;
};

// The tiled nest (statements of the kernel body). Lets are numbered from next_let.
std::vector<Stmt> build_tiled_gemm(const GemmView& v, const Schedule& s, int& next_let);

// The nest's blocking, decided before it is built (lower_contraction_tiled_blocking.cc).
struct TiledBlocking {
  int64_t mr = 1, nr = 1;                             // the micro-kernel's register tile
  bool pack_a = false, pack_b = false, panel_b = false;  // A packed per tile; B packed per tile; B prepacked
  bool b_full_panels = false;                          // B's column tiles are whole panels (zeros past N)
  int64_t seg = 1, nsegs = 0;                          // K segment length; segments (0: none)
  int64_t nsb = 0;                                     // segments per micro-kernel call (0: one block of one)
  int64_t kc = 1, per_seg = 1, kblocks = 0;            // K block depth; blocks per segment; K blocks
  bool skip_dead = false;                              // calls over a segment's dead lines are skipped
  int64_t mc = 1;                                      // rows per M block
  int64_t line_rows = 0;                               // A's lines of rows (GemmOperand::line_rows)
  bool split = false;                                  // lines split into line_tiles tiles: tall of mr, then mr - 1
  int64_t line_tiles = 0, tall = 0;
  int64_t q = 1, nc = 1;                               // column tiles per panel; columns per tile (q · nr)
  int64_t mblocks = 1, ntiles = 1;                     // M blocks and column panels per batch
  bool copy_b = false;                                 // an in-place B copied per tile into a panel
  int64_t nbatch = 1, tiles = 1;                       // batches; tiles in all
};
TiledBlocking tiled_gemm_blocking(const GemmView& v, const Schedule& s);

// Whether the nest's tile index runs down the M blocks of a column panel before the next panel
// (where there are several of each): columns where N > M (tile_balance.cc).
bool columns_outer_order(const Schedule& s, const GemmView& v);
// M blocks of equal heights (multiples of mr) and, when the busiest thread of `threads` would carry
// more than 5 % above an even share, the M block height mc and panel width q (column tiles of nr)
// that share the tiles most evenly (tile_balance.cc).
void balance_tiles(int64_t m, int64_t n, int64_t nbatch, int64_t mr, int64_t nr, int threads, bool cols_outer, bool pack_a,
                   int64_t& mc, int64_t& q, int64_t q_min = 1);

// The product of a row tile (docs/codegen.md, "Anchored emitters"): `rows` rows of A times B into
// a local accumulator acc[r · ld + j] (zeroed by the caller), through the micro-kernel —
//
//   for column panel of nr (then the rest of the n columns):
//     for K block of kc (the last one shorter): kc_var = its depth
//       for row tile of mr: kiln_mk_f32(mr, ..); then one call of the rows left, if any
//
// Column panels outside and row tiles inside, so a panel of B (kc × nr) serves every row tile of
// the block from L1 (with RowTileProduct::panels_inside and two panels, both inside each row
// tile instead, so that a big A's block is read once). The row count is an expression: the last
// tile of a row loop may be shorter.
// Used by the tiled rows nest (lower_contraction_rows.cc, a block of whole rows before the row
// passes) and by every stage of the chain (lower_contraction_chain.cc): one loop structure.
struct RowTileProduct {
  BufferPtr a;                                // A(r, k) at a[a_at(r, k0) + k - k0], rows as_i apart
  std::function<Expr(Expr r, Expr k0)> a_at;  // offset of A(r, k0)
  int64_t as_i = 0;
  BufferPtr b;                                 // B(k, j) at b[b_at(j0, k0) + (k - k0) · bs_k + j - j0]
  std::function<Expr(Expr j0, Expr k0)> b_at;  // offset of B(k0, j0) (j0 a multiple of nr)
  int64_t bs_k = 0;
  BufferPtr acc;
  int64_t ld = 0;  // acc's row stride
  Expr acc_col;    // acc's column of B's column 0 (null: 0): C(r, j) at acc[r · ld + acc_col + j]
  int64_t k = 0, n = 0, kc = 0;  // K, the columns computed, the K block (at most k)
  int64_t mr = 0, nr = 0;        // the micro-kernel's tile
  Expr rows;
  std::string prefix;  // the loop variables: <prefix>jt, <prefix>kb, <prefix>kc, <prefix>rt
  // With two column panels (nr < n ≤ 2·nr): both inside each row tile, so A's block is read once
  // (the caller's choice: when A's rows far outnumber B's columns).
  bool panels_inside = false;
  // The first K block overwrites the accumulators (every one of the rows and columns computed),
  // so the caller need not zero them; else every call adds to them.
  bool zero_first = false;
  // The widest call the last column panel may grow to, taking in the columns past the last whole
  // panel (0: nr, no merging). Only where B(k, j) is at b_at(0, k0) + j for every j (not panels).
  int64_t wide_nr = 0;
};
std::vector<Stmt> row_tile_product(const RowTileProduct& p);
// RowTileProduct::wide_nr for this schedule (0 when the target's kernels do not take it).
int64_t merged_panel_width(const Schedule& s, int64_t mr);

}  // namespace kiln::loop::detail
