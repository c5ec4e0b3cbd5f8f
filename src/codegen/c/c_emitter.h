// The C-style emitter: one translation unit for a list of loop kernels. CUDA and OpenCL emitters
// (later) derive from the same base and differ in prefixes, intrinsics and thread indexing.
//
// Kernel ABI: `void NAME(void* const* args)` with args = inputs then outputs (LoopKernel order);
// each kernel casts its arguments to typed `restrict` pointers. Parallel loops use OpenMP
// (`#pragma omp parallel for`): it is in every GCC/Clang, its thread count is set per run by the
// runtime, and a kernel without a parallel loop needs none of it.
//
// Names from the model appear only as sanitised identifiers or inside comments with "*/" and
// newlines removed.
#pragma once
#include <string>
#include <vector>

#include "loop/loop_ir.h"

namespace kiln::codegen {

struct EmitOptions {
  // docs/codegen.md "Numerics contract". false (default): micro-kernels with fused multiply-adds
  // and the prelude's vectorised kiln_expf/kiln_erff; true: the reference's operations exactly
  // (products rounded before they are added, libm's expf/erff). runtime::BuildOptions::strict_fp
  // sets it (with the matching -ffp-contract flag and reduction order).
  bool strict_fp = false;
};

std::string emit_c(const std::vector<loop::LoopKernel>& kernels, const EmitOptions& opts = {});

// A model string made safe for a C comment: "*/", "/*" and control characters removed.
std::string comment_safe(const std::string& s);

}  // namespace kiln::codegen
