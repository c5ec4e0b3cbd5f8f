// Concatenation in place: a Concat whose parts are each written by their producer straight into
// their slice of the output, so that no kernel copies them (GoogLeNet's inception outputs, an
// SPPF block's pools). The Concat then runs nothing: it is a group of its own that fuses with
// nothing (its producers keep their epilogues, e.g. the branch's ReLU, instead of handing them to a
// copy kernel), and the memory planner places each part at its slice's offset inside the
// Concat's slot (runtime/memory_plan.cc).
//
// Legality, one place, asked by the partitioner (which keeps the Concat apart) and the memory
// planner (which does the aliasing):
//   - the slices are contiguous: every axis before the concatenation axis has size 1 (a channel
//     concat at batch 1 in NCHW; a batched one would need strided stores in the producers);
//   - the output is an intermediate (a graph output lives in the caller's buffer);
//   - every part is an intermediate computed by an op that is a kernel of its own anyway
//     (elementwise, contraction, reduction): a part that is a slice, a transpose or a view of
//     another tensor would become a copy kernel of its own, more traffic than the one concat;
//   - no part is a part of another Concat or twice of this one (a tensor has one place), and the
//     output is not a part of another Concat (no nesting).
#pragma once
#include <cstdint>
#include <vector>

#include "fusion/fusion_plan.h"

namespace kiln {

// Yes when `n` is a Concat built in place; otherwise why not (kiln explain's wording).
FusionDecision concat_in_place(const Graph& g, const Node& n);

// Byte offset of each part's slice in the output (requires concat_in_place(g, n).ok()).
std::vector<int64_t> concat_part_offsets(const Node& n);

}  // namespace kiln
