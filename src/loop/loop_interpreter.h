// A direct interpreter of the loop IR: lowering can be tested without a C compiler, and it is a
// second oracle for the emitters (C now, CUDA/OpenCL later).
//
// The interpreter *defines* what each loop-IR operation means; an emitter must produce the same
// values up to float rounding of its math library: the interpreter calls std:: functions, the C
// emitter libm's except for Exp and Erf computed in float (float32, float16, bfloat16), which are
// the prelude's vectorisable kiln_expf and kiln_erff: within 2 ulp of the correctly rounded exp
// and erf (measured ≤ 1), not std::exp's and std::erf's bits (docs/codegen.md "Numerics contract").
//
//  - Integers are two's complement: Add, Sub, Mul, Neg and Abs wrap (abs(INT_MIN) == INT_MIN).
//    Div truncates toward zero and Mod is C's `%`; both require a nonzero divisor and not
//    (INT_MIN, -1) — lowering guards them, the interpreter checks. Pow on integers is not allowed.
//  - float32 arithmetic and math happen in float, float64 in double; a float16/bfloat16-typed
//    operation computes in float and rounds to its type (lowering casts to float32 instead).
//  - Min/Max propagate NaN (numpy's minimum/maximum, as kiln's reference kernels do); Mod on
//    floats is fmod; Round rounds halves to even (nearbyint, not C's round()).
//  - Cast is kiln's Cast op: float → integer saturates and maps NaN to 0, anything → bool is
//    `!= 0`, integer → integer wraps, float64/integer → float16/bfloat16 is rounded once (correctly).
//  - Select evaluates all three operands: an emitter may compute both branches (vector blends), so
//    lowering only builds *total* expressions — no Load out of bounds and no trapping division even
//    in the branch not taken. The interpreter checks this: an out-of-bounds Load is an
//    InternalError whether or not its value is selected.
//  - Call functions: log1p(x) (float types) and kCheckedIndex (loop_ir.h), whose out-of-range
//    indices make interpret() throw the runtime's UserError after the kernel has run. Any other
//    name is an InternalError.
//  - For loops run their iterations in order whatever their ForKind; Let introduces a scalar that
//    lives until the end of the enclosing statement list.
#pragma once
#include <vector>

#include "ir/tensor.h"
#include "loop/loop_ir.h"

namespace kiln::loop {

// Runs `k` with inputs and outputs bound in argument order; each tensor must have its buffer's
// dtype and element count (shape may differ: buffers are flat). Outputs are written in place.
void interpret(const LoopKernel& k, const std::vector<Tensor*>& inputs, const std::vector<Tensor*>& outputs);

}  // namespace kiln::loop
