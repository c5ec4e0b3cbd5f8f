// The contraction micro-kernel interface: the innermost tile of every tiled MatMul/Conv goes
// through one call,
//
//   kiln_mk_f32(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc)
//     for i < mr, j < nr:   c[i*ldc + j] += Σ_{k < kc, ascending} a[i*as_i + k*as_k] * b[k*bs_k + j]
//
// a register tile of mr × nr accumulators loaded from and stored back to `c` (a local tile the
// epilogue then reads), A read with any strides (a weight row, a packed panel), B rows contiguous
// in j (a packed panel or a row-major operand). Each product is rounded, then added, in ascending
// k, one accumulator per element: the same sequence of float operations as the reference kernels,
// so a tiled contraction is bit-identical to the untiled one (no FMA unless the user allows
// contraction).
//
// Loop IR carries it as a Call statement named kMicroKernelF32 with mr and nr as its first two
// arguments; the C emitter picks an implementation: a specialisation for the (mr, nr) tile when
// one is generated (GCC/Clang vector extensions: plain C that keeps the tile in SIMD registers), or
// the generic loop. Hand-written intrinsics (AVX-512 FMA, NEON, CUDA mma) plug in at the same point.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace kiln::kernels {

inline constexpr const char* kMicroKernelF32 = "kiln_mk_f32";

// The interface's semantics (the loop interpreter runs this; the C implementations must agree).
void microkernel_f32(int64_t mr, int64_t nr, int64_t kc, const float* a, int64_t as_i, int64_t as_k, const float* b,
                     int64_t bs_k, float* c, int64_t ldc);

// Whether a specialised implementation exists for this tile (nr a multiple of 4, mr ≤ 16).
bool has_specialisation(int64_t mr, int64_t nr);
// The C name of the (mr, nr) specialisation, e.g. kiln_mk_f32_6x32.
std::string specialisation_name(int64_t mr, int64_t nr);
// C source: the generic implementation and one specialisation per tile in `tiles`.
std::string microkernel_c_source(const std::set<std::pair<int64_t, int64_t>>& tiles);

}  // namespace kiln::kernels
