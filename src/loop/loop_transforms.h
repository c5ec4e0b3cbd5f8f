// Schedule transforms on a LoopKernel's statement tree: split, reorder, vectorize, unroll,
// parallelize, cache_read, and the default policy that applies them from a Schedule (schedule.h).
//
// Loops are addressed by their variable name, which must name exactly one loop of the kernel. Each
// transform first proves its legality with the affine index analysis (affine.h) and refuses what
// it cannot prove by throwing ScheduleError with a one-line reason; the kernel is then unchanged.
// Transforms never mutate existing nodes: they rebuild the path from the kernel's root to the
// rewritten loop, so a copy of the kernel taken before a transform keeps the old nest.
//
// Legality rules, shared by reorder / vectorize / parallelize ("independent iterations"): for every
// buffer the region writes (except buffers allocated inside it), every load and store of it must be
// affine in the loop variables, all with the same coefficients on the loops concerned and the same
// invariant part, and those coefficients must separate distinct iterations by more than the span
// the inner loops cover (see `separates` in affine.h) — then no element is touched by two different
// iterations. A scalar Assign to a variable declared outside the region (a reduction) crosses
// iterations and is refused, as is a micro-kernel Call (its accesses are unknown).
#pragma once
#include <string>
#include <vector>

#include "loop/loop_ir.h"
#include "loop/schedule.h"
#include "support/error.h"

namespace kiln::loop {

// A transform refused (illegal, or not provable with the affine analysis); what() is one line.
// It is a UserError: a schedule is an input (the tuner's or a person's), not a kiln invariant.
class ScheduleError : public UserError {
 public:
  using UserError::UserError;
};

// Where the iterations past the last full tile go when the factor does not divide the extent.
enum class TailStrategy {
  Guard,          // ceil(extent / factor) outer iterations, the body under `if (index < extent)`
  RemainderLoop,  // extent / factor full tiles, then a serial loop over the rest (no predicate in
                  // the main body: what vectorization wants)
};

struct SplitLoops {
  std::string outer, inner;  // outer empty when no split was needed (inner is then the original)
  std::string tail;          // the remainder loop, empty when there is none
};

// for x in [0, E) → for x_o in [0, ⌈E/f⌉ or ⌊E/f⌋) { for x_i in [0, f) { body[x := x_o·f + x_i] } }
// plus the tail. Always legal (iterations keep their order). A parallel loop's kind moves to the
// outer loop, a vectorized or unrolled loop's to the inner one; the remainder loop is serial.
SplitLoops split(LoopKernel& k, const std::string& loop, int64_t factor, TailStrategy tail = TailStrategy::Guard);

// Reorders a perfect nest: `order` names its loops outermost first. Legal when the loops are
// perfectly nested (each body is exactly the next loop), no extent uses another of their variables,
// their iterations are independent (above), and no parallel or vectorized loop changes depth.
void reorder(LoopKernel& k, const std::vector<std::string>& order);

// Marks the loop Vectorized after splitting it by `width` with a remainder loop (when its extent is
// not a constant ≤ width). Legal for an innermost serial loop (no loop inside, no vectorized loop
// around) whose iterations are independent and whose every store index is affine with coefficient 1
// in the loop variable. A reduction (Assign to an outer scalar) is refused: a vector reduction
// would change the summation order.
SplitLoops vectorize(LoopKernel& k, const std::string& loop, int width);

// Marks the loop Unrolled when its extent is a constant ≤ factor; otherwise splits it by `factor`
// (a guard for the tail) and unrolls the inner loop. Legal for a serial loop.
SplitLoops unroll(LoopKernel& k, const std::string& loop, int factor);

// Marks the loop Parallel. Legal for a serial loop that is not inside another loop (the C emitter
// forks threads only at the outermost loop) and has no parallel loop inside, whose iterations are
// independent (above).
void parallelize(LoopKernel& k, const std::string& loop);

// Copies the tile of global buffer `buffer` that loop `at`'s body reads into a new Local buffer
// (allocated around the copy and the loop, just before the loop) and redirects those loads to it.
// Legal when the loop does not write the buffer and every load of it inside is affine in the
// loop variables with the same invariant part; the tile is a box over the buffer's dimensions.
// Returns the local buffer's name.
std::string cache_read(LoopKernel& k, const std::string& buffer, const std::string& at);

// Loads of a fixed element of a kernel input inside a loop (a Clip's bounds) become Lets at the
// start of the outermost loop that reads them (hoist_uniform_loads.cc): GCC does not always
// vectorise a loop whose selects read memory.
void hoist_uniform_loads(LoopKernel& k);

// Float divisions by a value the innermost loop around them does not change multiply by its
// reciprocal instead (reciprocal_divisors.cc: a constant's at compile time, a computed one's in a
// Let ahead of the loop, which then runs in two versions on whether that reciprocal is normal).
// Default numerics only: within 1.5 ulp of the division.
void reciprocal_divisors(LoopKernel& k);

// The policy for elementwise / reduction nests, on loops still Serial (lowerings mark some loops
// themselves): an innermost loop with a constant extent ≤ s.unroll is unrolled, another innermost
// loop vectorized to s.vector_width; then each outermost loop whose work (iterations × the
// statements they run) is ≥ s.parallel_min_work is parallelized. A transform that refuses leaves
// its loop as it was. Then the uniform loads are hoisted and, with s.reciprocal_divisors, the
// divisions rewritten (above).
void apply_default_schedule(LoopKernel& k, const Schedule& s);

}  // namespace kiln::loop
