// The C target of the C-style emitter (codegen/c_style_emitter.h): one translation unit for a list
// of loop kernels, compiled by the system cc (runtime/jit.h) or shipped in an AOT bundle.
//
// Kernel ABI: `void NAME(void* const* args)` with args = inputs then outputs (LoopKernel order);
// each kernel casts its arguments to typed `restrict` pointers. Parallel loops use OpenMP
// (`#pragma omp parallel for`): it is in every GCC/Clang, its thread count is set per run by the
// runtime, and a kernel without a parallel loop needs none of it.
#pragma once
#include <string>
#include <vector>

#include "codegen/c_style_emitter.h"
#include "loop/loop_ir.h"

namespace kiln::codegen {

std::string emit_c(const std::vector<loop::LoopKernel>& kernels, const EmitOptions& opts = {});

}  // namespace kiln::codegen
