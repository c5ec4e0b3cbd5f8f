// Loop partitioning (index-set splitting, TVM's LoopPartition): a loop whose body selects between
// values by a comparison affine in the loop's variable is split at the points where the
// comparison changes, so that inside each piece the comparison has one value for every iteration
// and simplify_indices folds the select (and the clamps guarding the unselected loads) away.
//
// Where the selects come from: Concat lowers to nested selects on the concatenated axis
// (`j < 96 ? a[j] : j < 192 ? b[min(max(j - 96, 0), 95)] : ...`), Pad to selects on the borders,
// torch.roll (Slice + Concat) to selects on the shifted axes. Without partitioning every element
// evaluates every part's clamped load and the selects (Swin-T's shifted-window roll + residual ran
// at 1.3 GB/s; its patch merging, a channel Concat of four strided slices before a LayerNorm, at
// 1.4 GB/s); split, each piece is a plain copy the C compiler vectorises.
//
// Legality: a piece is the same loop over a sub-range with the variable offset, so the iterations
// and their order are unchanged; no legality beyond the loop having a constant extent (a
// vectorized or parallel loop's pieces are so too: sub-ranges of independent iterations). What is
// split: loops that are not unrolled and do not call a micro-kernel (whose control flow the
// contraction lowerings chose), comparisons < <= > >=
// of Int64 expressions whose other terms are loop variables with known extents, at most
// `max_pieces` pieces per loop. Profitability: the pieces, each measured as simplify_indices
// leaves it (its decided selects folded), may add at most twice the kernel's size in all —
// statements and expression nodes, so that a loop over a 25-part Concat's channels, whose body
// holds all 25 parts' loads, splits into 25 pieces of one load each (DenseNet's concat + batch
// norm + ReLU kernels ran every element through all the parts' loads and selects, at 4-7 % of
// the bandwidth roof, until the budget counted statements only and refused the split). The
// splits inside the pieces draw on the budget longest piece first (the interior rows of a strided
// depthwise conv, not its first row).
#pragma once
#include "loop/loop_ir.h"

namespace kiln::loop {

// True when some loop was split. Conditions are read as they are: run simplify_indices first (a
// Concat part's `j % 32 < 16` with j in [0, 32) is then `j < 16`).
bool partition_loops(LoopKernel& k, int max_pieces = 64);

}  // namespace kiln::loop
