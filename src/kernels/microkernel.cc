#include "kernels/microkernel.h"

#include <sstream>

namespace kiln::kernels {

void microkernel_f32(int64_t mr, int64_t nr, int64_t kc, const float* a, int64_t as_i, int64_t as_k, const float* b,
                     int64_t bs_k, float* c, int64_t ldc, bool acc) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float s = acc ? c[i * ldc + j] : 0.0f;
      for (int64_t k = 0; k < kc; ++k) {
        const float p = a[i * as_i + k * as_k] * b[k * bs_k + j];
        s = s + p;
      }
      c[i * ldc + j] = s;
    }
}

void microkernel_seg_f32(int64_t mr, int64_t nr, int64_t nseg, int64_t seglen, const float* a, const int64_t* aoff,
                         int64_t as_i, int64_t as_k, const float* b, int64_t bs_k, float* c, int64_t ldc, bool acc) {
  if (nseg <= 0) return microkernel_f32(mr, nr, 0, a, as_i, as_k, b, bs_k, c, ldc, acc);  // no products: c or zeros
  for (int64_t s = 0; s < nseg; ++s)
    microkernel_f32(mr, nr, seglen, a + aoff[s], as_i, as_k, b + s * seglen * bs_k, bs_k, c, ldc, s > 0 || acc);
}

void microkernel_epilogue_f32(int64_t mr, int64_t nr, float* c, int64_t ldc, int64_t ep, const float* bias,
                             int64_t nbias, float lo, float hi, const float* res, int64_t ldr) {
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      float x = c[i * ldc + j];
      if (ep & kEpBias) x = x + (j < nbias ? bias[j] : 0.0f);
      if (ep & kEpResidual) x = x + res[i * ldr + j];
      if (ep & kEpLow) x = x < lo ? lo : x;
      if (ep & kEpHigh) x = x > hi ? hi : x;
      c[i * ldc + j] = x;
    }
}

std::string epilogue_loop_c_source() {
  return "  for (int64_t i = 0; i < mr; ++i)\n"
         "    for (int64_t j = 0; j < nr; ++j) {\n"
         "      float x = c[i * ldc + j];\n"
         "      if (ep & 1) x = x + (j < nbias ? bias[j] : 0.0f);\n"
         "      if (ep & 8) x = x + res[i * ldr + j];\n"
         "      if (ep & 2) x = x < lo ? lo : x;\n"
         "      if (ep & 4) x = x > hi ? hi : x;\n"
         "      c[i * ldc + j] = x;\n"
         "    }\n";
}

void transpose_f32(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];
}

std::string transpose_c_source() {
  // A 16x16 block: 16 rows loaded (columns past `cols` masked to zero), transposed with the
  // usual three rounds of lane shuffles (pairs of floats, pairs of pairs, 128-bit quarters), and
  // the first cn results stored as 16-position runs (positions past `rows` masked). It took a
  // quarter off a 64 -> 64 3x3 conv's epilogue, which read the tile one element at a time.
  return R"(/* Transposing copy (src/kernels/microkernel.h): dst[c*ldd + r] = src[r*lds + c]. */
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
static void kiln_transpose_f32(float* restrict dst, int64_t ldd, const float* restrict src, int64_t lds, int64_t rows,
    int64_t cols) {
#if defined(__AVX512F__)
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int cn = cols - c0 < 16 ? (int)(cols - c0) : 16;
    const __mmask16 cm = (__mmask16)((1u << cn) - 1u);
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      const int rn = rows - r0 < 16 ? (int)(rows - r0) : 16;
      const __mmask16 rm = (__mmask16)((1u << rn) - 1u);
      __m512 v[16], t[16];
      for (int i = 0; i < 16; ++i) v[i] = i < rn ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * lds + c0) : _mm512_setzero_ps();
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
      }
      for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        v[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        v[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
      }
      for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0xdd);
      }
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        v[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        v[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
      }
      for (int j = 0; j < cn; ++j) _mm512_mask_storeu_ps(dst + (c0 + j) * ldd + r0, rm, v[j]);
    }
  }
#else
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];
#endif
}
)";
}

bool has_specialisation(int64_t mr, int64_t nr) { return mr >= 1 && mr <= 16 && nr >= 1 && nr <= 64; }

std::string specialisation_name(int64_t mr, int64_t nr, bool segmented, bool epilogue) {
  const char* base = segmented ? (epilogue ? kMicroKernelSegEpF32 : kMicroKernelSegF32)
                               : (epilogue ? kMicroKernelEpF32 : kMicroKernelF32);
  return std::string(base) + "_" + std::to_string(mr) + "x" + std::to_string(nr);
}

namespace {

// The widest vector (in floats) that divides nr: one accumulator register per `width` columns.
int64_t vector_width(int64_t nr) {
  for (int64_t w : {16, 8, 4})
    if (nr % w == 0) return w;
  return 1;
}

}  // namespace

namespace {

// The portable specialisation: GCC/Clang vector extensions, mr × nv accumulator vectors kept in
// registers across the k loop (constant trip counts let the compiler unroll the i and v loops).
// `acc + aik * bv` is contracted into an FMA by -ffp-contract=fast (default numerics) and stays
// a rounded multiply then add under -ffp-contract=off (strict).
void vector_extension_kernel(std::ostringstream& os, int64_t mr, int64_t nr) {
  const int64_t w = vector_width(nr), nv = nr / w;
  const std::string v = "kiln_vf" + std::to_string(w);
  os << "static void " << specialisation_name(mr, nr)
     << "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
        "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n"
     << "  " << v << " acc[" << mr << "][" << nv << "];\n"
     << "  for (int i = 0; i < " << mr << "; ++i)\n"
     << "    for (int v = 0; v < " << nv << "; ++v) {\n"
     << "      if (acc_in) memcpy(&acc[i][v], c + i * ldc + v * " << w << ", sizeof(" << v << "));\n"
     << "      else acc[i][v] = (" << v << "){0};\n"
     << "    }\n"
     << "  for (int64_t k = 0; k < kc; ++k) {\n"
     << "    " << v << " bv[" << nv << "];\n"
     << "    for (int v = 0; v < " << nv << "; ++v) memcpy(&bv[v], b + k * bs_k + v * " << w << ", sizeof(" << v
     << "));\n"
     << "    for (int i = 0; i < " << mr << "; ++i) {\n"
     << "      const float aik = a[i * as_i + k * as_k];\n"
     << "      for (int v = 0; v < " << nv << "; ++v) acc[i][v] = acc[i][v] + aik * bv[v];\n"
     << "    }\n"
     << "  }\n"
     << "  for (int i = 0; i < " << mr << "; ++i)\n"
     << "    for (int v = 0; v < " << nv << "; ++v) memcpy(c + i * ldc + v * " << w << ", &acc[i][v], sizeof(" << v
     << "));\n"
     << "}\n";
}

// A hand-written FMA specialisation on x86 SIMD registers of `lanes` floats: per k, nv loads of
// B's row, then per row one broadcast of a(i, k) and nv fused multiply-adds into the row's
// accumulators (mr × nv registers: 8 × 2 zmm on AVX-512 leaves room for B and the broadcast, and
// covers the FMA latency × throughput of two pipes). Measured on Zen 5, one thread, a packed
// 1024³ GEMM: 8 × 32 250 GFLOP/s, 12 × 32 246, 14 × 32 237, 6 × 64 250, 8 × 48 257 of 287 peak.
void intrinsic_kernel(std::ostringstream& os, int64_t mr, int64_t nr, int lanes, bool seg, bool ep = false) {
  // AVX-512 covers any nr: the last vector of a row is loaded and stored under a lane mask (masked
  // lanes are neither read nor written, so a rest tile of a 49-wide row — a 7x7 conv's positions —
  // needs no padding and no generic loop; that loop ran MobileNetV2's last conv 4x slower).
  const int64_t nv = (nr + lanes - 1) / lanes, rest = nr % lanes;
  const std::string vt = lanes == 16 ? "__m512" : "__m256", p = lanes == 16 ? "_mm512_" : "_mm256_";
  auto ld = [&](const std::string& ptr, const std::string& v) {
    if (rest == 0) return p + "loadu_ps(" + ptr + ")";
    return "(" + v + " < " + std::to_string(nv - 1) + " ? " + p + "loadu_ps(" + ptr + ") : " + p + "maskz_loadu_ps(kiln_mask, " +
           ptr + "))";
  };
  auto st = [&](const std::string& ptr, const std::string& val) {
    if (rest == 0) return p + "storeu_ps(" + ptr + ", " + val + ")";
    return "if (v < " + std::to_string(nv - 1) + ") " + p + "storeu_ps(" + ptr + ", " + val + "); else " + p +
           "mask_storeu_ps(" + ptr + ", kiln_mask, " + val + ")";
  };
  os << "static KILN_MK_NOINLINE void " << specialisation_name(mr, nr, seg, ep)
     << (seg ? "(int64_t nseg, int64_t kc, const float* restrict a0, const int64_t* restrict aoff, int64_t as_i,\n"
               "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in"
             : "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
               "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in")
     << (ep ? ",\n    int64_t ep, const float* restrict bias, int64_t nbias, float lo, float hi, const float* res,\n"
              "    int64_t ldr) {\n"
            : ") {\n");
  if (rest != 0) os << "  const __mmask16 kiln_mask = (__mmask16)" << ((1 << rest) - 1) << ";\n";
  os << "  " << vt << " acc[" << mr << "][" << nv << "];\n"
     << "  for (int i = 0; i < " << mr << "; ++i)\n"
     << "    for (int v = 0; v < " << nv << "; ++v) acc[i][v] = acc_in ? "
     << ld("c + i * ldc + v * " + std::to_string(lanes), "v") << " : " << p << "setzero_ps();\n";
  // Segmented: segment s reads A from a0 + aoff[s] and the next kc rows of B.
  if (seg) os << "  for (int64_t s = 0; s < nseg; ++s, b += kc * bs_k) {\n  const float* restrict a = a0 + aoff[s];\n";
  os << "  for (int64_t k = 0; k < kc; ++k) {\n"
     << "    " << vt << " bv[" << nv << "];\n"
     // A packed panel (bs_k == nr) is one stream: 32 k ahead into L1, and the next K block (the
     // next kc rows, or the next tile's panel after the last block) into L2 while this one runs.
     // Weights read once per inference come from DRAM: without the far prefetch the first call
     // of every block waited for them (ResNet-50's 512 -> 2048 1x1 conv over 7x7, 4 MiB of
     // weights: 0.94 ms with them in cache, 1.05-1.11 ms cold, 1.01-1.03 cold with it; C harness).
     // Not in kernels of fewer than 4 rows: a matrix-vector product streams B at the bandwidth
     // roof anyway, and the second stream of prefetches slowed ResNet-50's classifier (1 x 2048 x
     // 1000) by 9 %.
     << "    if (bs_k == " << nr << ")\n"
     << "      for (int v = 0; v < " << nv << "; ++v) {\n"
     << "        _mm_prefetch((const char*)(b + (k + 32) * bs_k + v * " << lanes << "), _MM_HINT_T0);\n"
     << (mr >= 4 ? "        _mm_prefetch((const char*)(b + (k + kc) * bs_k + v * " + std::to_string(lanes) + "), _MM_HINT_T1);\n" : "")
     << "      }\n"
     // A B read in place whose rows lie 4 KiB or more apart (a 1x1 conv with the channels as rows:
     // each k is another input channel's plane) is kc streams at once, more than the hardware
     // prefetchers follow when the planes come from L3: each row 128 floats (four 32-wide column
     // tiles) ahead. EfficientNet-B0's 32 -> 16 projection over 112x112 in the model 0.76 of its
     // time, MobileNetV2's 0.77 and 0.89, the MobileNets' and EfficientNet's others 0.72-0.90;
     // kernels summed 0.965 (MobileNetV2), 0.993-1.000 (EfficientNet-B0, ResNet-50,
     // MobileNetV3-L) at 1 thread, 0.987-1.002 at 2 (bench/ab_kernels.py; 64 or 256 ahead no better).
     << "    else if (bs_k >= 1024)\n"
     << "      for (int v = 0; v < " << nv << "; ++v)\n"
     << "        _mm_prefetch((const char*)(b + k * bs_k + 128 + v * " << lanes << "), _MM_HINT_T0);\n"
     << "    for (int v = 0; v < " << nv << "; ++v) bv[v] = " << ld("b + k * bs_k + v * " + std::to_string(lanes), "v")
     << ";\n"
     // An A whose k steps lie a line or more apart (an implicit conv's phase planes: one plane per
     // input channel) is a new line per k, at a stride beyond what the L1's stride prefetcher
     // follows: its first and last row, a few steps ahead. (64 -> 64 3x3 conv over 56x56, 13 KiB
     // planes apart: 4 % of the kernel in a C harness; 1-6 % on single convs.)
     // Only within this call's kc steps: past them the address is the next input channel's plane,
     // which for the last channels lies outside the staged buffer. A stem's segments are 3
     // channels (kc = 3), so every step prefetched 4 planes on, into untouched pages: a page walk
     // each, and 21 % of ResNet-50's 7x7 stem went to that one prefetch (perf annotate).
     << "    if (as_k >= 16 && k + 4 < kc) {\n"
     << "      _mm_prefetch((const char*)(a + (k + 4) * as_k), _MM_HINT_T0);\n"
     << "      _mm_prefetch((const char*)(a + (k + 4) * as_k + " << (mr - 1) << " * as_i), _MM_HINT_T0);\n"
     << "    }\n"
     << "    for (int i = 0; i < " << mr << "; ++i) {\n"
     << "      const " << vt << " ai = " << p << "set1_ps(a[i * as_i + k * as_k]);\n"
     << "      for (int v = 0; v < " << nv << "; ++v) acc[i][v] = " << p << "fmadd_ps(ai, bv[v], acc[i][v]);\n"
     << "    }\n"
     << "  }\n"
     << (seg ? "  }\n" : "");
  if (ep) {
    // The epilogue on the registers: the bias row (zeros past nbias and past nr) as whole vectors,
    // then per accumulator the add, the residual's element (a row of the tile every ldr floats,
    // the last vector masked) and the clamps. max(lo, x) and min(hi, x) return x when either is
    // NaN or both are equal (the second operand), as the reference's selects do.
    const int64_t padded = nv * lanes;
    os << "  if (ep) {\n"
       << "    float kiln_bt[" << padded << "] __attribute__((aligned(64)));\n"
       << "    for (int j = 0; j < " << padded << "; ++j) kiln_bt[j] = (ep & 1) && j < nbias && j < " << nr
       << " ? bias[j] : 0.0f;\n"
       << "    const " << vt << " lov = " << p << "set1_ps(lo), hiv = " << p << "set1_ps(hi);\n"
       << "    for (int v = 0; v < " << nv << "; ++v) {\n"
       << "      const " << vt << " bv = " << p << "load_ps(kiln_bt + v * " << lanes << ");\n"
       << "      for (int i = 0; i < " << mr << "; ++i) {\n"
       << "        " << vt << " x = acc[i][v];\n"
       << "        if (ep & 1) x = " << p << "add_ps(x, bv);\n"
       << "        if (ep & 8) x = " << p << "add_ps(x, " << ld("res + i * ldr + v * " + std::to_string(lanes), "v") << ");\n"
       << "        if (ep & 2) x = " << p << "max_ps(lov, x);\n"
       << "        if (ep & 4) x = " << p << "min_ps(hiv, x);\n"
       << "        acc[i][v] = x;\n"
       << "      }\n"
       << "    }\n"
       << "  }\n";
  }
  os << "  for (int i = 0; i < " << mr << "; ++i)\n"
     << "    for (int v = 0; v < " << nv << "; ++v) " << st("c + i * ldc + v * " + std::to_string(lanes), "acc[i][v]")
     << ";\n"
     << "}\n";
}

// The plain form of a tile whose register kernel is the epilogue form: that kernel with ep = 0.
void plain_via_epilogue(std::ostringstream& os, int64_t mr, int64_t nr, bool seg) {
  os << "static inline void " << specialisation_name(mr, nr, seg)
     << (seg ? "(int64_t nseg, int64_t kc, const float* restrict a, const int64_t* restrict aoff, int64_t as_i,\n"
               "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n"
             : "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
               "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n")
     << "  " << specialisation_name(mr, nr, seg, true)
     << (seg ? "(nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc_in, 0, b, 0, 0.0f, 0.0f, b, 0);\n"
             : "(kc, a, as_i, as_k, b, bs_k, c, ldc, acc_in, 0, b, 0, 0.0f, 0.0f, b, 0);\n")
     << "}\n";
}

// The epilogue forms of a specialisation without a register epilogue (strict numerics, no AVX):
// the plain form, then the epilogue over the tile in memory.
void epilogue_wrapper(std::ostringstream& os, int64_t mr, int64_t nr, bool seg) {
  os << "static void " << specialisation_name(mr, nr, seg, true)
     << (seg ? "(int64_t nseg, int64_t kc, const float* restrict a, const int64_t* restrict aoff, int64_t as_i,\n"
               "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in,\n"
             : "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
               "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in,\n")
     << "    int64_t ep, const float* restrict bias, int64_t nbias, float lo, float hi, const float* res, int64_t ldr) {\n"
     << "  " << specialisation_name(mr, nr, seg)
     << (seg ? "(nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc_in);\n" : "(kc, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n")
     << "  kiln_mk_ep_apply(" << mr << ", " << nr << ", c, ldc, ep, bias, nbias, lo, hi, res, ldr);\n"
     << "}\n";
}

// A tile no vector width divides, where no masked kernel applies (strict numerics, or no
// AVX-512): the generic loop with the tile's constants, which the compiler unrolls.
void forwarding_kernel(std::ostringstream& os, int64_t mr, int64_t nr) {
  os << "static void " << specialisation_name(mr, nr)
     << "(int64_t kc, const float* restrict a, int64_t as_i, int64_t as_k,\n"
        "    const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n"
     << "  kiln_mk_f32(" << mr << ", " << nr << ", kc, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
     << "}\n";
}

// The segmented form of a specialisation without a fused one (strict numerics, no AVX): the
// plain specialisation once per segment, the accumulators through memory in between.
void segment_wrapper(std::ostringstream& os, int64_t mr, int64_t nr) {
  os << "static void " << specialisation_name(mr, nr, true)
     << "(int64_t nseg, int64_t kc, const float* restrict a, const int64_t* restrict aoff, int64_t as_i,\n"
        "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n"
     << "  if (nseg <= 0) " << specialisation_name(mr, nr) << "(0, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
     << "  for (int64_t s = 0; s < nseg; ++s)\n"
     << "    " << specialisation_name(mr, nr) << "(kc, a + aoff[s], as_i, as_k, b + s * kc * bs_k, bs_k, c, ldc, s > 0 || acc_in);\n"
     << "}\n";
}

}  // namespace

std::string microkernel_c_source(const std::set<std::pair<int64_t, int64_t>>& tiles, bool fma,
                                 const std::set<std::pair<int64_t, int64_t>>& ep_tiles) {
  std::ostringstream os;
  os << "/* Contraction micro-kernels (src/kernels/microkernel.h): c[i*ldc+j] = (acc_in ? c[i*ldc+j] : 0) +\n"
     << " * sum_k a[i*as_i+k*as_k] *\n"
     << (fma ? " * b[k*bs_k+j], k ascending, one accumulator per element, fused multiply-adds. */\n"
             : " * b[k*bs_k+j], k ascending, one accumulator per element, product rounded then added (strict:\n"
               " * bit-identical to the reference). */\n");
  // Generic: any tile. i, then k, then j innermost (contiguous in b and c: vectorisable); each
  // element still sums its products in ascending k.
  os << "static void kiln_mk_f32(int64_t mr, int64_t nr, int64_t kc, const float* restrict a, int64_t as_i,\n"
        "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in) {\n"
        "  for (int64_t i = 0; i < mr; ++i) {\n"
        "    if (!acc_in)\n"
        "      for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = 0.0f;\n"
        "    for (int64_t k = 0; k < kc; ++k) {\n"
        "      const float aik = a[i * as_i + k * as_k];\n"
        "      const float* restrict bk = b + k * bs_k;\n"
        "      float* restrict ci = c + i * ldc;\n"
        "      for (int64_t j = 0; j < nr; ++j) ci[j] = ci[j] + aik * bk[j];\n"
        "    }\n"
        "  }\n"
        "}\n"
        "static void kiln_mk_f32_seg(int64_t mr, int64_t nr, int64_t nseg, int64_t kc, const float* restrict a,\n"
        "    const int64_t* restrict aoff, int64_t as_i, int64_t as_k, const float* restrict b, int64_t bs_k,\n"
        "    float* restrict c, int64_t ldc, int64_t acc_in) {\n"
        "  if (nseg <= 0) kiln_mk_f32(mr, nr, 0, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
        "  for (int64_t s = 0; s < nseg; ++s)\n"
        "    kiln_mk_f32(mr, nr, kc, a + aoff[s], as_i, as_k, b + s * kc * bs_k, bs_k, c, ldc, s > 0 || acc_in);\n"
        "}\n"
        // The epilogue forms (any tile): the sums, then the epilogue over the tile.
        "static void kiln_mk_ep_apply(int64_t mr, int64_t nr, float* restrict c, int64_t ldc, int64_t ep,\n"
        "    const float* restrict bias, int64_t nbias, float lo, float hi, const float* res, int64_t ldr) {\n" +
        epilogue_loop_c_source() +
        "}\n"
        "static void kiln_mk_f32_ep(int64_t mr, int64_t nr, int64_t kc, const float* restrict a, int64_t as_i,\n"
        "    int64_t as_k, const float* restrict b, int64_t bs_k, float* restrict c, int64_t ldc, int64_t acc_in,\n"
        "    int64_t ep, const float* restrict bias, int64_t nbias, float lo, float hi, const float* res, int64_t ldr) {\n"
        "  kiln_mk_f32(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
        "  kiln_mk_ep_apply(mr, nr, c, ldc, ep, bias, nbias, lo, hi, res, ldr);\n"
        "}\n"
        "static void kiln_mk_f32_seg_ep(int64_t mr, int64_t nr, int64_t nseg, int64_t kc, const float* restrict a,\n"
        "    const int64_t* restrict aoff, int64_t as_i, int64_t as_k, const float* restrict b, int64_t bs_k,\n"
        "    float* restrict c, int64_t ldc, int64_t acc_in, int64_t ep, const float* restrict bias, int64_t nbias,\n"
        "    float lo, float hi, const float* res, int64_t ldr) {\n"
        "  kiln_mk_f32_seg(mr, nr, nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
        "  kiln_mk_ep_apply(mr, nr, c, ldc, ep, bias, nbias, lo, hi, res, ldr);\n"
        "}\n";
  std::set<int64_t> widths;
  bool any = false;
  for (auto [mr, nr] : tiles)
    if (has_specialisation(mr, nr)) {
      if (nr % 4 == 0) widths.insert(vector_width(nr));
      any = true;
    }
  if (!any) return os.str() + "\n";
  for (int64_t w : widths)
    os << "typedef float kiln_vf" << w << " __attribute__((vector_size(" << 4 * w << "), aligned(4)));\n";
  if (fma) os << "#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))\n#include <immintrin.h>\n#endif\n";
  // The intrinsic kernels are never inlined. Whether GCC inlined one into a kernel's unrolled row
  // loop depended on the rest of the translation unit (its growth limits), and inlined three
  // times over it ran slower: EfficientNet-B0's 192 -> 1152 1x1 conv over 7x7 took 0.22 ms
  // calling the 13x32 kernel and 0.29 ms with it inlined, the kernel's own code unchanged, after
  // an unrelated kernel was added to the model's source. A call per micro-tile is a few cycles
  // against its mr x nr x kc multiply-adds.
  if (fma) os << "#define KILN_MK_NOINLINE __attribute__((noinline))\n";
  for (const auto& tile : tiles) {
    // Plain variables, not a structured binding: clang 14 (the sanitizer build) cannot capture
    // a binding in the lambda below.
    const int64_t mr = tile.first, nr = tile.second;
    if (!has_specialisation(mr, nr)) continue;
    auto fallback = [&] {
      if (nr % 4 == 0) vector_extension_kernel(os, mr, nr);
      else forwarding_kernel(os, mr, nr);
    };
    const bool ep = ep_tiles.count(tile) > 0;
    auto wrappers = [&] {
      segment_wrapper(os, mr, nr);
      if (ep) {
        epilogue_wrapper(os, mr, nr, false);
        epilogue_wrapper(os, mr, nr, true);
      }
    };
    if (!fma) {
      fallback();
      wrappers();
      continue;
    }
    // The ISA is the compiler's target (-march): the preprocessor picks the kernel.
    // A tile used with the epilogue gets the epilogue forms only, its plain forms calling them with
    // ep = 0 (one branch per call): two more register kernels per tile took ResNet-50's compile
    // without a cache from 8.6 to 10.9 s.
    auto intrinsics = [&](int lanes) {
      intrinsic_kernel(os, mr, nr, lanes, false, ep);
      intrinsic_kernel(os, mr, nr, lanes, true, ep);
      if (ep) {
        plain_via_epilogue(os, mr, nr, false);
        plain_via_epilogue(os, mr, nr, true);
      }
    };
    os << "#if defined(__AVX512F__)\n";
    intrinsics(16);
    if (nr % 8 == 0) {
      os << "#elif defined(__AVX2__) && defined(__FMA__)\n";
      intrinsics(8);
    }
    os << "#else\n";
    fallback();
    wrappers();
    os << "#endif\n";
  }
  return os.str() + "\n";
}

}  // namespace kiln::kernels
