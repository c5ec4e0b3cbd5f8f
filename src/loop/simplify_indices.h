// Index simplification with value ranges: integer division and remainder by a constant, and
// min/max clamps, rewritten away where the ranges of the loop variables prove them redundant.
//
// Reshape, Flatten, Transpose, Concat and Split are lowered by flattening an output position and
// unravelling it again in the producer's shape, so a channel shuffle reads
// `x[(((i1·784 + i2·28 + i3) / 1568) · 28 + ...) % 28 ...]` — a division and a remainder per element
// that keep the compiler from vectorising the copy (ShuffleNetV2's shuffles ran at 2 GB/s). With
// i2 ∈ [0, 28) and i3 ∈ [0, 28) the same index is `(i1 / 2) · 784 + i2 · 28 + i3`. The rules (floor
// division; they apply only where the dividend is provably ≥ 0 and every bound fits in int64):
//
//   e = d·Q + R with R ∈ [0, d)              →  e / d = Q,  e % d = R
//   e = c·E + R with c | d and R ∈ [0, c)     →  e / d = E / (d/c),  e % d = c·(E % (d/c)) + R
//   min(a, b) with hi(a) ≤ lo(b)             →  a            (max likewise)
//   e with lo(e)/d = hi(e)/d                 →  e / d = lo(e)/d,  e % d = e - d·(lo(e)/d)
//   a < b (<=, >, >=, ==, !=) decided by the range of a - b  →  true / false; select(true, x, y) → x
//   c·d·(e / d) + c·(e % d) among a sum's terms  →  c·e         (any e: an unravel raveled again)
//   a Bool Let decided to a constant             →  that constant where it is read
//
// where Q, E and R are sums of terms of e's linear form (loop variables and non-linear atoms, each
// with its range: a loop variable [0, extent), a division or remainder by a constant from its
// operand's range). Only Int64 expressions change; every rewrite is an identity for every value
// the ranges allow, so it needs no other legality. The variable of an Int64 Let that is never
// reassigned is seen through to its value (the lowerings name shared index parts t0, t1, ...).
#pragma once
#include "loop/loop_ir.h"

namespace kiln::loop {

// Simplifies every Int64 expression of `k` (indices, extents, integer values) in place.
void simplify_indices(LoopKernel& k);

// One expression, with the given loop variable extents (exposed for tests).
Expr simplify_index(const Expr& e, const std::vector<std::pair<std::string, int64_t>>& extents);

}  // namespace kiln::loop
