// The contraction micro-kernel interface: the innermost tile of every tiled MatMul/Conv goes
// through one call,
//
//   kiln_mk_f32(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc)
//     for i < mr, j < nr:   c[i*ldc + j] = (acc ? c[i*ldc + j] : +0) + Σ_{k < kc, ascending} a[i*as_i + k*as_k] * b[k*bs_k + j]
//
// a register tile of mr × nr accumulators loaded from `c` (acc ≠ 0: a later K block adds to the
// sums so far) or set to +0 (acc = 0: the first K block, so that no pass zeroes the tile first and
// the call does not read it; the same sums as a zeroed tile, bit for bit) and stored back to `c`
// (a local tile the epilogue then reads), A read with any strides (a weight row, a packed panel), B rows contiguous
// in j (a packed panel or a row-major operand). Every element sums its products in ascending k
// with one accumulator; how each product enters the sum is the build's numerics mode
// (docs/codegen.md "Numerics contract"):
//   - default (FMA): c = fma(a, b, c), one rounding per step, as MLAS and oneDNN do. The C source
//     has hand-written intrinsics for the ISA the object is compiled for, picked by the
//     preprocessor from the compiler's target macros (-march=native in the JIT, the bundle's
//     -march for AOT): AVX-512F (zmm accumulators, one broadcast of A per row and k), AVX2+FMA
//     (ymm), else GCC/Clang vector extensions that the compiler contracts into FMAs where the
//     target has them.
//   - strict (--strict-fp): the product is rounded, then added — the reference kernels' exact
//     sequence of operations, so a tiled contraction is bit-identical to the untiled one and to
//     the reference. Vector extensions only, compiled with -ffp-contract=off.
//
// Loop IR carries it as a Call statement named kMicroKernelF32 with mr and nr as its first two
// arguments; the C emitter calls the (mr, nr) specialisation when one is generated, else the
// generic loop.
//
// The segmented form, for an A whose address is affine in k only within segments (an implicit
// conv's kernel positions: each reads the input at its own offset),
//
//   kiln_mk_f32_seg(mr, nr, nseg, seglen, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc)
//     = kiln_mk_f32(mr, nr, seglen, a + aoff[s], as_i, as_k, b + s·seglen·bs_k, bs_k, c, ldc, s > 0 || acc)
//       for s = 0 .. nseg − 1 in order (no segments: a call with kc = 0),
//
// keeps the accumulators in registers across the segments: one call per K block instead of one
// per segment, whose accumulator loads and stores cost as much as 16 k steps (a conv of 16 input
// channels spent a third of its time there). The same sums in the same order as the calls one by
// one: bit-identical to them.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace kiln::kernels {

inline constexpr const char* kMicroKernelF32 = "kiln_mk_f32";
inline constexpr const char* kMicroKernelSegF32 = "kiln_mk_f32_seg";

// The epilogue forms: the same sums, then, before the single store, from the registers,
//
//   kiln_mk_f32_ep(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc, ep, bias, nbias, lo, hi, res, ldr)
//   kiln_mk_f32_seg_ep(mr, nr, nseg, seglen, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc, ep, bias, nbias, lo, hi, res, ldr)
//     for i < mr, j < nr, on the sum x:
//       ep & kEpBias:  x = x + (j < nbias ? bias[j] : 0)     a bias per column (the padding columns
//                                                            of a packed panel past nbias get none)
//       ep & kEpResidual: x = x + res[i*ldr + j]             a residual tile (every column read: only
//                                                            where all nr columns are the output's)
//       ep & kEpLow:   x = x < lo ? lo : x                   Relu / Clip's lower bound
//       ep & kEpHigh:  x = x > hi ? hi : x                   Clip's upper bound
//     then c[i*ldc + j] = x.
//
// The seed's "fused multiply-add-activation" intrinsic: a conv's bias and activation cost no pass
// over the accumulator tile (the last K block's calls pass them; earlier ones pass ep = 0). Each
// step is the reference's operation on the sum (the bias added after it, Clip's selects in its
// order, NaN kept), so strict builds stay bit-identical.
inline constexpr const char* kMicroKernelEpF32 = "kiln_mk_f32_ep";
inline constexpr const char* kMicroKernelSegEpF32 = "kiln_mk_f32_seg_ep";
inline constexpr int64_t kEpBias = 1, kEpLow = 2, kEpHigh = 4, kEpResidual = 8;

// The transposing copy of a tile whose rows are output positions into an output whose rows are
// channels (the implicit conv's epilogue, lower_contraction_tiled.cc), and of a conv input's
// channel planes into channels-innermost phase planes (lower_conv_staging.cc):
//
//   kiln_transpose_f32(dst, ldd, src, lds, rows, cols)
//     for r < rows, c < cols:   dst[c*ldd + r] = src[r*lds + c]
//
// On AVX-512 in 16x16 blocks transposed in registers (masked at the edges), else the plain loops.
// A pure copy: every target gives the same bits.
inline constexpr const char* kTransposeF32 = "kiln_transpose_f32";

// The interface's semantics in strict order (the loop interpreter runs this; the C
// implementations must agree: bitwise in strict mode, within the FMA contract otherwise).
void microkernel_f32(int64_t mr, int64_t nr, int64_t kc, const float* a, int64_t as_i, int64_t as_k, const float* b,
                     int64_t bs_k, float* c, int64_t ldc, bool acc);

// The segmented form's semantics (the calls one by one).
void microkernel_seg_f32(int64_t mr, int64_t nr, int64_t nseg, int64_t seglen, const float* a, const int64_t* aoff,
                         int64_t as_i, int64_t as_k, const float* b, int64_t bs_k, float* c, int64_t ldc, bool acc);

// The epilogue forms' last step, on a tile in memory (the interpreter runs the sums, then this).
void microkernel_epilogue_f32(int64_t mr, int64_t nr, float* c, int64_t ldc, int64_t ep, const float* bias,
                             int64_t nbias, float lo, float hi, const float* res, int64_t ldr);

// The same step as C statements over the tile in memory (mr, nr, c, ldc, ep, bias, nbias, lo, hi,
// res and ldr in scope): the portable kernels' and the GPU device functions' spelling.
std::string epilogue_loop_c_source();

// The transposing copy's semantics (the loop interpreter runs this).
void transpose_f32(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);
// Its C source (emitted once into a module that calls it).
std::string transpose_c_source();

// Whether a specialised implementation exists for this tile (mr ≤ 16, nr ≤ 64): AVX-512 kernels
// for every nr (the last vector masked), AVX2 for nr a multiple of 8, vector extensions for a
// multiple of 4, else the generic loop with constant extents.
bool has_specialisation(int64_t mr, int64_t nr);
// The C name of the (mr, nr) specialisation, e.g. kiln_mk_f32_6x32 (segmented: kiln_mk_f32_seg_6x32;
// with the epilogue: kiln_mk_f32_ep_6x32, kiln_mk_f32_seg_ep_6x32).
std::string specialisation_name(int64_t mr, int64_t nr, bool segmented = false, bool epilogue = false);
// C source: the generic implementations and one specialisation per tile in `tiles` (each in
// both forms), and the epilogue forms of the tiles in `ep_tiles`; `fma` selects the default
// numerics (fused multiply-adds, intrinsics per ISA), false the strict order.
std::string microkernel_c_source(const std::set<std::pair<int64_t, int64_t>>& tiles, bool fma,
                                 const std::set<std::pair<int64_t, int64_t>>& ep_tiles = {});

}  // namespace kiln::kernels
