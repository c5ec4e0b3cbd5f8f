// How the tiled GEMM's tiles are shared among the threads (lower_contraction_tiled.h:
// balance_tiles, columns_outer_order): the nest's tile order and the M block and column panel
// sizes that give every thread an even share under OpenMP's static schedule.
#include <algorithm>

#include "loop/lower_contraction_tiled.h"

namespace kiln::loop::detail {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The share of the busiest thread's work in an even split, for tiles of mc rows × nc columns
// (the last ones shorter) run under OpenMP's static schedule: thread t gets the tiles
// [t·chunk, (t + 1)·chunk), chunk = ⌈tiles / threads⌉, in the nest's order (batch, M block, column
// tile). 1 is a perfect split.
double static_balance(int64_t m, int64_t n, int64_t nbatch, int64_t mc, int64_t nc, int threads, bool cols_outer) {
  const int64_t mb = ceil_div(m, mc), nt = ceil_div(n, nc), tiles = nbatch * mb * nt;
  const int64_t chunk = ceil_div(tiles, threads);
  // With columns outermost (columns_outer_order) a thread's range runs down the M blocks of one
  // column panel, then the next.
  const bool by_columns = cols_outer && mb > 1 && nt > 1;
  double worst = 0;
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
    double w = 0;
    for (int64_t t = t0; t < std::min(tiles, t0 + chunk); ++t) {
      const int64_t mi = by_columns ? t % mb : (t / nt) % mb, jt = by_columns ? (t / mb) % nt : t % nt;
      w += double(std::min(mc, m - mi * mc)) * double(std::min(nc, n - jt * nc));
    }
    worst = std::max(worst, w);
  }
  return worst > 0 ? double(nbatch) * double(m) * double(n) / (threads * worst) : 1.0;
}

}  // namespace

// Whether the tile index runs down the M blocks of a column panel before the next panel (where
// there are several of each): columns where N > M, so that each thread reads the smaller operand
// whole (ContractionTile::columns_outer).
bool columns_outer_order(const Schedule& s, const GemmView& v) { return s.contraction.columns_outer != 0 && v.n > v.m; }

// Tiles the threads can share evenly. M blocks get equal heights (multiples of mr): a short rest
// block left the threads' static shares unequal (a 196-row GEMM as 128 + 68 rows kept one thread
// idle a third of the time). Then, when the busiest thread would still carry more than 5 % above
// an even share, smaller M blocks (up to twice as many) or narrower column panels (q) are tried
// and the best split kept, the largest tiles among equals: 7 M blocks of a 28x28 3x3 conv as
// panels of all 4 column tiles were 7 tiles, 4 : 3 on two threads; panels of 2 give 14.
void balance_tiles(int64_t m, int64_t n, int64_t nbatch, int64_t mr, int64_t nr, int threads, bool cols_outer, bool pack_a,
                   int64_t& mc, int64_t& q, int64_t q_min) {
  const int64_t mb0 = ceil_div(m, mc);
  if (mb0 > 1) mc = std::min(mc, ceil_div(ceil_div(m, mb0), mr) * mr);
  if (threads <= 1) return;
  double best = static_balance(m, n, nbatch, mc, q * nr, threads, cols_outer);
  if (best >= 0.95) return;
  const int64_t mc0 = mc, q0 = q;
  for (int64_t mb = mb0; mb <= 2 * mb0; ++mb) {
    const int64_t mcx = std::max(mr, ceil_div(ceil_div(m, mb), mr) * mr);
    if (mcx > mc0) continue;
    for (int64_t qx = q0; qx >= std::min(q_min, q0); --qx) {
      const double b = static_balance(m, n, nbatch, mcx, qx * nr, threads, cols_outer);
      // Among equal splits a packed A (a computed prologue, packed once per panel) takes the
      // wider panels: GPT's QKV projection after its LayerNorm as 4 blocks of 32 rows over all
      // 1152 columns, not 3 of 48 over two panels (those ran 1.05-1.08x).
      if (b > best + 0.01 || (pack_a && qx > q && b > best - 0.005)) {
        best = b;
        mc = mcx;
        q = qx;
      }
    }
  }
}


}  // namespace kiln::loop::detail
