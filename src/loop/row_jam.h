// Unroll-and-jam of an outer loop whose iterations are independent (the row loop of a row
// kernel): `copies` consecutive iterations run together, their statements interleaved at the
// innermost level of every inner loop. Each iteration keeps its own order of operations, so the
// results are bit-identical; what changes is that `copies` independent dependency chains (one
// row's running sum each) sit in one loop body, where the CPU overlaps them instead of waiting
// out one add's latency per element.
//
//   for i in [0, n) { B(i) }
// becomes
//   for i_b in [0, n / c) { i_r0 = i_b*c; ... i_r<c-1> = i_b*c + c-1; J }
//   for i_t in [0, n % c) { i = n / c * c + i_t; B(i) }          (when n % c != 0)
// where J is B with every statement list jammed: a loop appears once, its body jammed; any other
// statement appears `copies` times, copy k with the loop's variable and every variable and local
// buffer B declares renamed (suffix _r<k>), so the copies share nothing but loop variables and
// the kernel's global buffers.
#pragma once
#include <string>
#include <vector>

#include "loop/loop_ir.h"

namespace kiln::loop::detail {

// The statements replacing `for var in [0, extent) { body }` (the block loop of kind `kind`, then
// the serial tail loop when extent % copies != 0). Requires extent >= copies >= 2. The caller
// guarantees that iterations are independent (no iteration reads what another writes) and that
// `body` reads no variable it declares before declaring it.
std::vector<Stmt> jam_loop(const std::string& var, int64_t extent, const std::vector<Stmt>& body, int copies,
                           ForKind kind);

}  // namespace kiln::loop::detail
