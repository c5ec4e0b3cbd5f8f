#include "kernels/depthwise.h"

#include <sstream>

namespace kiln::kernels {

void depthwise_f32(int64_t kh, int64_t kw, int64_t rows, int64_t cols, const float* in, int64_t ldi, const float* w,
                   float* out, int64_t ldo) {
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x) {
      float s = 0.0f;
      for (int64_t ky = 0; ky < kh; ++ky)
        for (int64_t kx = 0; kx < kw; ++kx) s = s + w[ky * kw + kx] * in[(y + ky) * ldi + x + kx];
      out[y * ldo + x] = s;
    }
}

void depthwise_blocked_f32(int64_t taps, const int64_t* off, int64_t rows, int64_t cols, const float* in, int64_t ldi,
                           const float* w, float* out, int64_t ldo) {
  constexpr int64_t L = kDepthwiseBlockLanes;
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x)
      for (int64_t l = 0; l < L; ++l) {
        float s = 0.0f;
        for (int64_t t = 0; t < taps; ++t) s = s + w[t * L + l] * in[(y * ldi + x + off[t]) * L + l];
        out[(y * ldo + x) * L + l] = s;
      }
}

void grouped_conv_f32(int64_t cg, int64_t mg, int64_t taps, const int64_t* off, int64_t len, const float* in,
                      int64_t ldi, const float* w, float* out, int64_t ldo) {
  for (int64_t m = 0; m < mg; ++m)
    for (int64_t j = 0; j < len; ++j) {
      float s = 0.0f;
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t t = 0; t < taps; ++t) s = s + w[(m * cg + ci) * taps + t] * in[ci * ldi + off[t] + j];
      out[m * ldo + j] = s;
    }
}

std::string depthwise_name(int64_t kh, int64_t kw) {
  return std::string(kDepthwiseF32) + "_" + std::to_string(kh) + "x" + std::to_string(kw);
}

namespace {

// The row counts of the blocks: as many blocks of the first as fit, then one of each other while
// rows remain (14 rows: 8 + 4 + 2).
constexpr int kBlockRows[] = {8, 4, 2, 1};

// One ISA's vector spelling: type, intrinsic prefix, lanes, and the (maybe masked) load and store.
struct Isa {
  std::string vt, p;
  int lanes;
  std::string mask_t;  // the mask argument's type; empty: full vectors, no mask
  std::string load(const std::string& ptr) const {
    if (mask_t.empty()) return p + "loadu_ps(" + ptr + ")";
    return lanes == 16 ? p + "maskz_loadu_ps(m, " + ptr + ")" : p + "maskload_ps(" + ptr + ", m)";
  }
  std::string store(const std::string& ptr, const std::string& v) const {
    if (mask_t.empty()) return p + "storeu_ps(" + ptr + ", " + v + ")";
    return lanes == 16 ? p + "mask_storeu_ps(" + ptr + ", m, " + v + ")" : p + "maskstore_ps(" + ptr + ", m, " + v + ")";
  }
};

// A block of R output rows × one vector of columns: per window column kx, its kh weights
// broadcast once, then each of the R + kh − 1 input rows loaded once and multiply-added into the
// rows of the block whose window reaches it. The loops have constant trips and are unrolled, so
// the accumulators and weights stay in registers (R + kh + 1 of them).
void block_function(std::ostringstream& os, const std::string& name, int64_t kh, int64_t kw, int r, const Isa& isa) {
  os << "static inline void " << name << "(const float* restrict in, int64_t ldi, const float* restrict w,\n"
     << "    float* restrict out, int64_t ldo" << (isa.mask_t.empty() ? "" : ", " + isa.mask_t + " m") << ") {\n"
     << "  " << isa.vt << " acc[" << r << "], wv[" << kh << "];\n"
     << "  #pragma GCC unroll 16\n"
     << "  for (int y = 0; y < " << r << "; ++y) acc[y] = " << isa.p << "setzero_ps();\n"
     << "  #pragma GCC unroll 1\n"
     << "  for (int kx = 0; kx < " << kw << "; ++kx) {\n"
     << "    #pragma GCC unroll 16\n"
     << "    for (int ky = 0; ky < " << kh << "; ++ky) wv[ky] = " << isa.p << "set1_ps(w[ky * " << kw << " + kx]);\n"
     << "    #pragma GCC unroll 32\n"
     << "    for (int i = 0; i < " << (r + kh - 1) << "; ++i) {\n"
     << "      const " << isa.vt << " v = " << isa.load("in + i * ldi + kx") << ";\n"
     << "      #pragma GCC unroll 16\n"
     << "      for (int ky = 0; ky < " << kh << "; ++ky)\n"
     << "        if (i - ky >= 0 && i - ky < " << r << ") acc[i - ky] = " << isa.p << "fmadd_ps(wv[ky], v, acc[i - ky]);\n"
     << "    }\n"
     << "  }\n"
     << "  #pragma GCC unroll 16\n"
     << "  for (int y = 0; y < " << r << "; ++y) " << isa.store("out + y * ldo", "acc[y]") << ";\n"
     << "}\n";
}

// The rows of one column vector in blocks of 8, 4, 2, 1 (`suffix` picks the full or masked blocks).
std::string rows_loop(const std::string& fn, const std::string& suffix, const std::string& args_tail) {
  std::ostringstream os;
  os << "    int64_t y = 0;\n";
  bool first = true;
  for (int r : kBlockRows) {
    const std::string call = fn + "_r" + std::to_string(r) + suffix + "(in + y * ldi + x0, ldi, w, out + y * ldo + x0, ldo" +
                             args_tail + ");";
    if (first) os << "    for (; y + " << r << " <= rows; y += " << r << ") " << call << "\n";
    else os << "    if (y + " << r << " <= rows) { " << call << " y += " << r << "; }\n";
    first = false;
  }
  return os.str();
}

void specialisation(std::ostringstream& os, int64_t kh, int64_t kw) {
  const std::string fn = depthwise_name(kh, kw);
  const Isa avx512{"__m512", "_mm512_", 16, "__mmask16"};
  const Isa avx2{"__m256", "_mm256_", 8, ""}, avx2_masked{"__m256", "_mm256_", 8, "__m256i"};
  os << "#if defined(__AVX512F__)\n";
  for (int r : kBlockRows) block_function(os, fn + "_r" + std::to_string(r), kh, kw, r, avx512);
  os << "#elif defined(__AVX2__) && defined(__FMA__)\n";
  for (int r : kBlockRows) {
    block_function(os, fn + "_r" + std::to_string(r), kh, kw, r, avx2);
    block_function(os, fn + "_r" + std::to_string(r) + "m", kh, kw, r, avx2_masked);
  }
  os << "#endif\n";
  os << "static void " << fn << "(int64_t rows, int64_t cols, const float* restrict in, int64_t ldi,\n"
     << "    const float* restrict w, float* restrict out, int64_t ldo) {\n"
     << "#if defined(__AVX512F__)\n"
     << "  for (int64_t x0 = 0; x0 < cols; x0 += 16) {\n"
     << "    const __mmask16 m = (__mmask16)(cols - x0 >= 16 ? 0xffffu : (1u << (cols - x0)) - 1u);\n"
     << rows_loop(fn, "", ", m")
     << "  }\n"
     << "#elif defined(__AVX2__) && defined(__FMA__)\n"
     << "  int64_t x0 = 0;\n"
     << "  for (; x0 + 8 <= cols; x0 += 8) {\n"
     << rows_loop(fn, "", "")
     << "  }\n"
     << "  if (x0 < cols) {\n"
     << "    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(cols - x0)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));\n"
     << rows_loop(fn, "m", ", m")
     << "  }\n"
     << "#else\n"
     << "  for (int64_t y = 0; y < rows; ++y)\n"
     << "    for (int64_t x = 0; x < cols; ++x) {\n"
     << "      float s = 0.0f;\n"
     << "      for (int64_t ky = 0; ky < " << kh << "; ++ky)\n"
     << "        for (int64_t kx = 0; kx < " << kw << "; ++kx) s += w[ky * " << kw << " + kx] * in[(y + ky) * ldi + x + kx];\n"
     << "      out[y * ldo + x] = s;\n"
     << "    }\n"
     << "#endif\n"
     << "}\n";
}

}  // namespace

std::string depthwise_c_source(const std::set<std::pair<int64_t, int64_t>>& windows) {
  std::ostringstream os;
  os << "/* Depthwise stencil micro-kernels (src/kernels/depthwise.h): out[y*ldo+x] = sum over the kh x kw\n"
        " * window of w[ky*kw+kx] * in[(y+ky)*ldi+x+kx], fused multiply-adds, window column by column. */\n"
        "#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))\n#include <immintrin.h>\n#endif\n";
  for (auto [kh, kw] : windows) specialisation(os, kh, kw);
  return os.str() + "\n";
}

std::string depthwise_blocked_c_source() {
  // A run of N positions (N = 1..8, a constant in each function so that the accumulators stay in
  // registers): per tap one weight vector, then N input vectors multiply-added.
  constexpr int kMaxRun = 8;
  std::ostringstream os;
  os << "/* The channel-blocked depthwise micro-kernel (src/kernels/depthwise.h): out[(y*ldo+x)*16+l] = sum over\n"
        " * taps t of w[t*16+l] * in[(y*ldi+x+off[t])*16+l], fused multiply-adds, taps ascending. */\n"
        "#if defined(__AVX512F__)\n#include <immintrin.h>\n";
  for (int n = 1; n <= kMaxRun; ++n)
    os << "static inline void kiln_dwc_f32_run" << n
       << "(int64_t taps, const int64_t* restrict off, const float* restrict in, const float* restrict w,\n"
       << "    float* restrict out) {\n"
       << "  __m512 acc[" << n << "];\n"
       << "  #pragma GCC unroll 8\n"
       << "  for (int j = 0; j < " << n << "; ++j) acc[j] = _mm512_setzero_ps();\n"
       << "  for (int64_t t = 0; t < taps; ++t) {\n"
       << "    const __m512 wv = _mm512_loadu_ps(w + t * 16);\n"
       << "    const float* restrict p = in + off[t] * 16;\n"
       << "    #pragma GCC unroll 8\n"
       << "    for (int j = 0; j < " << n << "; ++j) acc[j] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(p + j * 16), acc[j]);\n"
       << "  }\n"
       << "  #pragma GCC unroll 8\n"
       << "  for (int j = 0; j < " << n << "; ++j) _mm512_storeu_ps(out + j * 16, acc[j]);\n"
       << "}\n";
  os << "#endif\n"
     << "static void kiln_dwc_f32(int64_t taps, const int64_t* restrict off, int64_t rows, int64_t cols,\n"
     << "    const float* restrict in, int64_t ldi, const float* restrict w, float* restrict out, int64_t ldo) {\n"
     << "  for (int64_t y = 0; y < rows; ++y) {\n"
     << "    const float* restrict ir = in + y * ldi * 16;\n"
     << "    float* restrict orow = out + y * ldo * 16;\n"
     << "#if defined(__AVX512F__)\n"
     << "    int64_t x = 0;\n"
     << "    for (; x + " << kMaxRun << " <= cols; x += " << kMaxRun << ") kiln_dwc_f32_run" << kMaxRun
     << "(taps, off, ir + x * 16, w, orow + x * 16);\n"
     << "    switch (cols - x) {\n";
  for (int n = kMaxRun - 1; n >= 1; --n)
    os << "      case " << n << ": kiln_dwc_f32_run" << n << "(taps, off, ir + x * 16, w, orow + x * 16); break;\n";
  os << "      default: break;\n"
     << "    }\n"
     << "#else\n"
     << "    for (int64_t x = 0; x < cols; ++x)\n"
     << "      for (int64_t l = 0; l < 16; ++l) {\n"
     << "        float s = 0.0f;\n"
     << "        for (int64_t t = 0; t < taps; ++t) s += w[t * 16 + l] * ir[(x + off[t]) * 16 + l];\n"
     << "        orow[x * 16 + l] = s;\n"
     << "      }\n"
     << "#endif\n"
     << "  }\n"
     << "}\n\n";
  return os.str();
}

std::string grouped_conv_c_source() {
  // Up to 8 output channels (a constant per function, so that their 2 x 8 accumulators stay in
  // registers) over 32 positions per step; each (input channel, tap) loads two input vectors and
  // broadcasts one weight per output channel.
  constexpr int kMaxChannels = 8;
  std::ostringstream os;
  os << "/* The grouped-conv stencil micro-kernel (src/kernels/depthwise.h): out[m*ldo+j] = sum over input\n"
        " * channels ci and taps t of w[(m*cg+ci)*taps+t] * in[ci*ldi+off[t]+j], fused multiply-adds. */\n"
        "#if defined(__AVX512F__)\n#include <immintrin.h>\n";
  for (int n = 1; n <= kMaxChannels; ++n)
    os << "static inline void kiln_gcv_f32_m" << n
       << "(int64_t cg, int64_t taps, const int64_t* restrict off, int64_t len, const float* restrict in,\n"
       << "    int64_t ldi, const float* restrict w, float* restrict out, int64_t ldo) {\n"
       << "  const int64_t ws = cg * taps;\n"
       << "  for (int64_t j = 0; j < len; j += 32) {\n"
       << "    __m512 a[" << n << "][2];\n"
       << "    #pragma GCC unroll 8\n"
       << "    for (int m = 0; m < " << n << "; ++m) a[m][0] = a[m][1] = _mm512_setzero_ps();\n"
       << "    for (int64_t ci = 0; ci < cg; ++ci)\n"
       << "      for (int64_t t = 0; t < taps; ++t) {\n"
       << "        const float* restrict p = in + ci * ldi + off[t] + j;\n"
       << "        const __m512 x0 = _mm512_loadu_ps(p), x1 = _mm512_loadu_ps(p + 16);\n"
       << "        const float* restrict wp = w + ci * taps + t;\n"
       << "        #pragma GCC unroll 8\n"
       << "        for (int m = 0; m < " << n << "; ++m) {\n"
       << "          const __m512 wv = _mm512_set1_ps(wp[m * ws]);\n"
       << "          a[m][0] = _mm512_fmadd_ps(wv, x0, a[m][0]);\n"
       << "          a[m][1] = _mm512_fmadd_ps(wv, x1, a[m][1]);\n"
       << "        }\n"
       << "      }\n"
       << "    #pragma GCC unroll 8\n"
       << "    for (int m = 0; m < " << n << "; ++m) {\n"
       << "      _mm512_storeu_ps(out + m * ldo + j, a[m][0]);\n"
       << "      _mm512_storeu_ps(out + m * ldo + j + 16, a[m][1]);\n"
       << "    }\n"
       << "  }\n"
       << "}\n";
  os << "#endif\n"
     << "static void kiln_gcv_f32(int64_t cg, int64_t mg, int64_t taps, const int64_t* restrict off, int64_t len,\n"
     << "    const float* restrict in, int64_t ldi, const float* restrict w, float* restrict out, int64_t ldo) {\n"
     << "#if defined(__AVX512F__)\n"
     << "  for (int64_t m0 = 0; m0 < mg; m0 += " << kMaxChannels << ") {\n"
     << "    const float* restrict wm = w + m0 * cg * taps;\n"
     << "    float* restrict om = out + m0 * ldo;\n"
     << "    switch (mg - m0 < " << kMaxChannels << " ? mg - m0 : " << kMaxChannels << ") {\n";
  for (int n = kMaxChannels; n >= 1; --n)
    os << "      case " << n << ": kiln_gcv_f32_m" << n << "(cg, taps, off, len, in, ldi, wm, om, ldo); break;\n";
  os << "      default: break;\n"
     << "    }\n"
     << "  }\n"
     << "#else\n"
     << "  for (int64_t m = 0; m < mg; ++m)\n"
     << "    for (int64_t j = 0; j < len; ++j) {\n"
     << "      float s = 0.0f;\n"
     << "      for (int64_t ci = 0; ci < cg; ++ci)\n"
     << "        for (int64_t t = 0; t < taps; ++t) s += w[(m * cg + ci) * taps + t] * in[ci * ldi + off[t] + j];\n"
     << "      out[m * ldo + j] = s;\n"
     << "    }\n"
     << "#endif\n"
     << "}\n\n";
  return os.str();
}

}  // namespace kiln::kernels
