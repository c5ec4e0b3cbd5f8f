// Loop unswitching on selects: an innermost loop whose body selects by a condition that does not
// change inside the loop (it reads no variable the loop binds or assigns, and no memory) becomes
// `if (c) loop[c = true] else loop[c = false]`, the select replaced by its branch in each copy.
//
// partition_loops.h splits loops where a condition is affine in the loop's own variable; this
// takes the conditions that are constant in the loop but not affine outside it — Swin-T's
// window partition of a rolled, padded image packed as a GEMM's A: per packed row the source
// (which of the four rolled parts, or the zero padding) depends on the row through divisions, and
// every element of the row evaluated all four clamped loads and three selects (the QKV kernels
// spent most of their time packing A).
//
// Legality: the condition has one value for all iterations of the loop, so each copy computes
// exactly what the original did for that value; evaluating it once before the loop is safe
// because it reads no memory (it cannot fault or see a store of the loop). At most `max_conditions`
// conditions per loop (2^n copies), and a bounded growth of the kernel.
#pragma once
#include "loop/loop_ir.h"

namespace kiln::loop {

void unswitch_selects(LoopKernel& k, int max_conditions = 2);

}  // namespace kiln::loop
