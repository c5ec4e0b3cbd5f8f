// The tiled GEMM's blocking (lower_contraction_tiled.h, TiledBlocking): how the nest of
// build_tiled_gemm cuts K into blocks (segments of a conv's kernel positions, several per
// micro-kernel call where they are short), M into blocks of rows (whole lines where lines are
// split into tiles of two heights) and N into column panels, and how those tiles are shared
// among the threads (tile_balance.cc). A pure decision from the view and the schedule; the nest
// builder reads it and emits.
#include <algorithm>

#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

TiledBlocking tiled_gemm_blocking(const GemmView& v, const Schedule& s) {
  const int64_t mr = std::max(1, s.contraction.mr), nr = std::max(1, s.contraction.nr);
  const bool pack_a = !v.a.buffer, pack_b = !v.b.buffer, panel_b = v.b.buffer && v.b.panel_nr > 0;
  KILN_CHECK(pack_b || panel_b || v.b.stride_c == 1, "tiled GEMM: B read in place must have contiguous columns");
  KILN_CHECK(!panel_b || v.b.panel_nr == nr, "tiled GEMM: B's panels are not the micro-kernel's width");
  // A packed B (per tile or prepacked) has whole panels of nr columns, zeros past column N.
  bool b_full_panels = pack_b || panel_b;
  // K blocks of kc, packed or not: the micro-kernel's B panel (kc × nr) must stay in L1 while
  // the tile's row blocks reuse it, and the M block of A (mc × kc) in L2 across column tiles. An
  // in-place B with one block over all of K streamed from L2/L3 on every call: a 1024³ GEMM on
  // one thread 170 -> 221 GFLOP/s with kc = 256 (Zen 5, 287 peak).
  // With segments (GemmView::k_segment), blocks restart at every segment: per_seg blocks each.
  const int64_t seg = v.k_segment > 0 ? v.k_segment : std::max<int64_t>(v.k, 1);
  KILN_CHECK(v.k_segment == 0 || v.k % v.k_segment == 0, "tiled GEMM: K is not a whole number of segments");
  KILN_CHECK(!v.a.segment_base || (v.a.buffer && v.k_segment > 0), "tiled GEMM: A's segments need k_segment");
  // Segments shorter than kc (a conv's kernel positions over few input channels): a K block is
  // nsb whole segments and one segmented micro-kernel call (kernels/microkernel.h), the
  // accumulators kept in registers across them; A's segment offsets come from a table filled
  // once. (One call per segment of 16 channels spent as long on its accumulators' loads and
  // stores as on its products.)
  const int64_t nsegs = v.k_segment > 0 ? v.k / seg : 0;
  // A segment of at most two thirds of kc goes two to a call rather than one: Inception-v3's
  // 80 -> 192 3x3 conv over 71x71 ran 13.52-13.70 ms with one 80-channel segment per call,
  // 13.20-13.32 with two (C harness).
  int64_t nsb = v.k_segment > 0 && v.a.segment_base && seg < s.contraction.kc ? s.contraction.kc / seg : 0;
  if (nsb == 1 && 3 * seg <= 2 * s.contraction.kc) nsb = 2;
  // Blocks of equal depth: K = 384 is two blocks of 192, not 256 + 128, so every block is a
  // constant kc and a packed A's index (row · K + k0 + k) keeps k0 + k provably below K, which is
  // what lets simplify_indices take its prologue's divisions by K out of the packing loop.
  const int64_t kc = nsb > 0 ? nsb * seg : ceil_div(seg, ceil_div(seg, std::clamp<int64_t>(s.contraction.kc, 1, seg)));
  const int64_t per_seg = ceil_div(seg, kc);
  const int64_t kblocks = nsb > 0 ? ceil_div(nsegs, nsb) : v.k_segment > 0 ? nsegs * per_seg : ceil_div(v.k, kc);
  // Segments that are zero over some lines or rows of a line (GemmOperand::segment_live): each row
  // tile asks a table of their live ranges, filled once per call, before a segment's micro-kernel
  // call. Only where a K block is one segment's (with several segments per call the micro-kernel
  // runs them all) and some segment is dead somewhere.
  bool skip_dead = false;
  const int64_t live_line = v.a.line_rows > 0 ? v.a.line_rows : v.a.segment_line;
  if (nsb == 0 && v.k_segment > 0 && live_line > 0 && !v.a.segment_live.empty()) {
    KILN_CHECK(int64_t(v.a.segment_live.size()) == nsegs, "tiled GEMM: segment_live has ", v.a.segment_live.size(),
               " entries for ", nsegs, " segments");
    const int64_t lines = ceil_div(v.m, live_line);
    for (const auto& l : v.a.segment_live)
      skip_dead = skip_dead || l[0] > 0 || l[1] < lines || (v.a.line_rows > 0 && (l[2] > 0 || l[3] < v.a.line_rows));
  }
  // M blocks bound the accumulator tile (and give the threads more tiles when N is narrow): 128
  // rows × nr columns of accumulators (16 KiB) stay in L1 beside the B panel while every K block
  // passes over them (256 rows: ResNet's 3x3 convs with 64-channel K segments 5 % slower).
  int64_t mc = std::min<int64_t>(v.m, std::max<int64_t>(mr, (128 / mr) * mr));
  // Split line tiles (lines of line_rows outputs that no tile height divides: tiles of mr and
  // mr - 1 rows, ContractionLowering::position_rows): M blocks of whole lines, so that every
  // block splits its lines alike.
  const int64_t line_rows = v.a.line_rows;
  const bool split = line_rows > 0 && line_rows % mr != 0;
  const int64_t line_tiles = split ? ceil_div(line_rows, mr) : 0, tall = line_rows - line_tiles * (mr - 1);
  KILN_CHECK(!split || (mr > 1 && tall >= 1 && v.a.buffer && v.m_block == 0 && v.m % line_rows == 0),
             "tiled GEMM: A's lines of ", line_rows, " rows do not split into tiles of ", mr, " and ", mr - 1, " rows");
  if (split) mc = std::min<int64_t>(v.m, std::max<int64_t>(1, 128 / line_rows) * line_rows);
  KILN_CHECK(!v.a.m_block_stride || (v.m_block > 0 && v.m_block % mr == 0 && v.a.buffer && !v.a.segment_base),
             "tiled GEMM: a blocked A needs the view's M block, a multiple of mr");
  if (v.m_block > 0) mc = std::min(v.m, v.m_block);
  const int64_t ntiles_n = ceil_div(v.n, nr), nbatch0 = shape_numel(v.batch);
  // A packed A (a computed operand: a prologue such as LayerNorm's tail, a remap) is packed once
  // per tile and K block; with one column tile per tile it would be recomputed N / nr times. So a
  // tile then spans a panel of q column tiles (ideally all of N) and reuses its packed A for each,
  // with the accumulators of the whole panel (mc × q·nr) within Schedule::rows_block_bytes: fewer
  // rows per tile, never fewer columns than needed. Swin-T's QKV projection after a fused
  // LayerNorm and window shift: A recomputed 36 times -> once.
  int64_t q = 1;
  if (pack_a && !v.b.packer && ntiles_n > 1) {
    const int64_t budget = std::max<int64_t>(s.rows_block_bytes / int64_t(sizeof(float)), mr * nr);
    int64_t rows = std::max<int64_t>(mr, (budget / (ntiles_n * nr)) / mr * mr);
    mc = std::min(mc, rows);
    q = std::clamp<int64_t>(budget / (mc * nr), 1, ntiles_n);
  } else if (!pack_a && !v.b.packer && ntiles_n > 1 && mc * v.k * int64_t(sizeof(float)) > s.contraction.a_reuse_bytes) {
    // An in-place A whose M block (mc × K) does not stay in L2 was streamed from L3 once per
    // column tile; a panel of q column tiles reads each K block of it once for all q (the
    // encoder's FFN2, [128 x 3072] x [3072 x 768]: A is 1.5 MiB). Rows stay mc; the panel's
    // accumulators within rows_block_bytes; at least 4 tiles remain for the threads.
    const int64_t budget = std::max<int64_t>(s.rows_block_bytes / int64_t(sizeof(float)), mr * nr);
    const int64_t mblocks0 = nbatch0 * ceil_div(v.m, mc);
    const int64_t keep = std::max<int64_t>(1, ceil_div(4, mblocks0));  // column panels needed for 4 tiles
    q = std::clamp<int64_t>(std::min(budget / (mc * nr), ntiles_n / keep), 1, ntiles_n);
  }
  // One K block and row-major stores (the tile's columns contiguous in each output row, not a
  // positions-as-rows conv's transposed stores): wide, short tiles (ContractionTile::store_run).
  // With one K block every column tile's B panel is read once either way, so fewer rows per tile
  // costs no reuse.
  int64_t q_min = 1;
  const bool row_stores = v.column_parts.empty() ? !v.line_epilogue : !v.column_parts[0].line_epilogue;
  if (q == 1 && !pack_a && !pack_b && v.m_block == 0 && kblocks == 1 && row_stores && s.contraction.store_run > nr &&
      v.n >= 2 * s.contraction.store_run) {
    const int64_t qx = std::min(ntiles_n, ceil_div(s.contraction.store_run, nr));
    const int64_t mcx = std::min(mc, std::max(mr, (s.contraction.store_tile_floats / (qx * nr)) / mr * mr));
    // Fewer rows per tile read each B panel more often: only for a K short enough that the
    // stores, not B's reads, bound the tile (ContractionTile::store_max_k); a short tile keeps
    // its rows and only widens.
    if (mcx == mc || v.k <= s.contraction.store_max_k) {
      q = qx;
      mc = mcx;
      // The threads' balance may narrow the tiles, to half the run at most (24 rows x 3136
      // columns: 25 tiles of 128 columns split 13 : 12 on two threads, 49 of 64 evenly).
      q_min = std::max<int64_t>(1, q / 2);
    }
  }
  if (v.m_block == 0)
    balance_tiles(v.m, v.n, nbatch0, split ? line_rows : mr, nr, s.threads, columns_outer_order(s, v), pack_a, mc, q, q_min);
  const int64_t nc = q * nr;  // columns of a tile's accumulators
  const int64_t mblocks = ceil_div(v.m, mc), ntiles = ceil_div(v.n, nc);
  // An in-place B whose K rows are a page or more apart (a 1x1 conv's input channels, one plane
  // each) is copied per tile and K block into a contiguous kc × nr panel when the tile's row
  // tiles reuse it: read in place, every micro-kernel call touched kc pages, more than the L1
  // TLB holds, and its B loads stalled on the page walks and on lines no prefetcher followed
  // (ResNet-50's 256 -> 128 1x1 conv over 56x56, `kiln bench --threads 1`: 1.44 -> 1.25 ms,
  // ONNX Runtime 1.41; with K = 64 copying was 5 % slower). The copy is one pass of constant-length runs; its last tile's columns past N are
  // zeros, so every call runs the whole-panel micro-kernel. ContractionTile::copy_b_min_k.
  const bool copy_b = !pack_b && !panel_b && s.contraction.copy_b_min_k > 0 && kc >= s.contraction.copy_b_min_k &&
                      v.b.stride_r * int64_t(sizeof(float)) >= 4096 && mc >= 2 * mr;
  if (copy_b) b_full_panels = true;
  const int64_t nbatch = shape_numel(v.batch);
  const int64_t tiles = nbatch * mblocks * ntiles;

  TiledBlocking r;
  r.mr = mr;
  r.nr = nr;
  r.pack_a = pack_a;
  r.pack_b = pack_b;
  r.panel_b = panel_b;
  r.b_full_panels = b_full_panels;
  r.seg = seg;
  r.nsegs = nsegs;
  r.nsb = nsb;
  r.kc = kc;
  r.per_seg = per_seg;
  r.kblocks = kblocks;
  r.skip_dead = skip_dead;
  r.mc = mc;
  r.line_rows = line_rows;
  r.split = split;
  r.line_tiles = line_tiles;
  r.tall = tall;
  r.q = q;
  r.nc = nc;
  r.mblocks = mblocks;
  r.ntiles = ntiles;
  r.copy_b = copy_b;
  r.nbatch = nbatch;
  r.tiles = tiles;
  return r;
}

}  // namespace kiln::loop::detail
