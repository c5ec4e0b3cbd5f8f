// The depthwise stencil micro-kernel: one channel's stride-1 window sum over a zero-padded plane,
//
//   kiln_dw_f32(kh, kw, rows, cols, in, ldi, w, out, ldo)
//     for y < rows, x < cols:
//       out[y*ldo + x] = Σ_{ky < kh, kx < kw} w[ky*kw + kx] * in[(y + ky)*ldi + x + kx]
//
// (`in` at the window's top-left tap of output (0, 0); the padding is in the plane). Loop IR
// carries it as a Call statement named kDepthwiseF32; the C emitter calls the (kh, kw)
// specialisation, kiln_dw_f32_<kh>x<kw>(rows, cols, in, ldi, w, out, ldo).
//
// Why a hand-written kernel: written as one sum per output vector, each of the kh·kw multiply-adds
// needs its own input load and a weight broadcast, and with 49 taps (ConvNeXt's 7x7) GCC also
// spills the weights: three loads per multiply-add, a third of the FMA rate. Here a block of R
// output rows is computed at once, window column by window column: the kh weights of column kx
// are broadcast once, and each of the R + kh − 1 input rows is loaded once and feeds every output
// row of the block whose window covers it (up to kh multiply-adds per load). AVX-512: R = 8 rows of
// 16 columns in registers (the last vector masked), blocks of 8, then 4, 2 and 1 rows for the rest;
// AVX2 + FMA: whole 8-column vectors, the rest of a row masked (maskload / maskstore); otherwise
// the plain loops.
//
// Numerics: fused multiply-adds, each output's taps summed window column by window column (kx
// outer, ky inner) — not the reference's order, so the lowering takes this kernel only under the
// default numerics contract (tolerance), never with --strict-fp. The semantics function below
// sums in the reference's order (ky, then kx, from 0); implementations agree within the FMA
// contract.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace kiln::kernels {

inline constexpr const char* kDepthwiseF32 = "kiln_dw_f32";

// The interface's semantics (the loop interpreter runs this).
void depthwise_f32(int64_t kh, int64_t kw, int64_t rows, int64_t cols, const float* in, int64_t ldi, const float* w,
                   float* out, int64_t ldo);

// The C name of the (kh, kw) specialisation: kiln_dw_f32_7x7.
std::string depthwise_name(int64_t kh, int64_t kw);

// C source: one specialisation per window in `windows` (kh, kw), for the ISA the object is
// compiled for (the preprocessor picks AVX-512, AVX2 + FMA or plain loops).
std::string depthwise_c_source(const std::set<std::pair<int64_t, int64_t>>& windows);

// The channel-blocked form: 16 channels per vector, the taps at any offsets (phase planes of a
// strided or dilated window),
//
//   kiln_dwc_f32(taps, off, rows, cols, in, ldi, w, out, ldo)
//     for y < rows, x < cols, l < 16:
//       out[(y*ldo + x)*16 + l] = Σ_{t < taps, ascending, from +0} w[t*16 + l] * in[(y*ldi + x + off[t])*16 + l]
//
// (`off`: int64 offsets in positions; `in` and `out` interleave 16 channels per position, `w` the
// 16 channels' weights per tap). Why: the channel-blocked stencil's sum written per output vector
// loads a weight vector and an input vector per multiply-add (two loads per FMA, and GCC keeps
// nothing across positions); here a run of up to 8 output positions of a row is summed at once,
// each tap's weights loaded once for the run. EfficientNet-B0's 5x5 depthwise conv + ReLU over 7x7
// (1152 channels), hand-written prototypes in a C harness: 0.080 -> 0.052 ms with the gathers and
// scatters kept, 0.042 with transposing copies instead; the emitted kernel with its SiLU 0.128 ->
// 0.069 (lower_conv_stencil.cc).
// AVX-512: the run's accumulators in zmm registers; otherwise plain loops. The sums are in the
// reference's order (tap ascending, from 0), with fused multiply-adds: the lowering calls it only
// under the default numerics contract.
inline constexpr const char* kDepthwiseBlockedF32 = "kiln_dwc_f32";
inline constexpr int64_t kDepthwiseBlockLanes = 16;

// The blocked form's semantics (the loop interpreter runs this).
void depthwise_blocked_f32(int64_t taps, const int64_t* off, int64_t rows, int64_t cols, const float* in, int64_t ldi,
                           const float* w, float* out, int64_t ldo);

// Its C source (emitted once into a module that calls it).
std::string depthwise_blocked_c_source();

// The grouped-conv stencil micro-kernel: every output channel of one group over the group's
// phase planes, the positions in lanes,
//
//   kiln_gcv_f32(cg, mg, taps, off, len, in, ldi, w, out, ldo)
//     for m < mg, j < len (a multiple of 32):
//       out[m*ldo + j] = Σ_{ci < cg} Σ_{t < taps} w[(m*cg + ci)*taps + t] * in[ci*ldi + off[t] + j]
//                        (ci, then t ascending, from +0: the reference's order)
//
// Why: the plane stencil (lower_conv_stencil.cc) sums one output channel at a time, adding each
// input channel's window into an accumulator plane that it stores and reloads per input channel.
// Here 32 positions of up to 8 output channels are summed at once in 16 zmm registers, each input
// vector loaded once for all of them (RegNetY-400MF's 8-channel groups, 3x3 stride 2 over 112x112:
// 0.48-0.52 -> 0.283 ms, one-node model, 1 thread). AVX-512 intrinsics (fused multiply-adds), otherwise plain loops:
// the lowering calls it only under the default numerics contract.
inline constexpr const char* kGroupedConvF32 = "kiln_gcv_f32";

// The grouped form's semantics (the loop interpreter runs this).
void grouped_conv_f32(int64_t cg, int64_t mg, int64_t taps, const int64_t* off, int64_t len, const float* in,
                      int64_t ldi, const float* w, float* out, int64_t ldo);

// Its C source (emitted once into a module that calls it).
std::string grouped_conv_c_source();

}  // namespace kiln::kernels
