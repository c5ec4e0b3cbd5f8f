#include "codegen/c/c_prelude.h"

#include <sstream>

namespace kiln::codegen::detail {
namespace {

// The helpers reproduce the reference executor's semantics exactly (src/ir/dtype.cc for the
// float16/bfloat16 conversions, src/reference/ops/elementwise_* for min/max, integer division,
// pow and float→integer casts), so a compiled kernel can be compared with the oracle bit for bit
// — except kiln_expf and kiln_erff, which trade libm's bits (within 2 ulp) for vectorisation.

const char* kConversionsTitle = "/* float16 / bfloat16 storage: arithmetic happens in float; stores round to nearest even. */\n";
// How a target reinterprets a float's bits (C: memcpy; OpenCL as_float; CUDA __uint_as_float).
const char* kBitsC = R"(static inline float kiln_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t kiln_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
)";
const char* kConversions = R"(static inline float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (ex == 0x1fu) return kiln_bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (ex == 0) {  /* zero or subnormal: man * 2^-24 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return kiln_bits_to_f32(sign | ((ex + 112u) << 23) | (man << 13));
}
static inline uint16_t kiln_f32_to_f16(float f) {
  uint32_t x = kiln_f32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, ex = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (ex == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));  /* inf, quiet nan */
  int e = (int)ex - 112;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);  /* overflow to inf */
  if (e <= 0) {  /* subnormal half or zero */
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t hm = man >> shift, rem = man & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) hm++;
    return (uint16_t)(sign | hm);
  }
  uint32_t hm = man >> 13, rem = man & 0x1fffu;
  uint32_t v = sign | ((uint32_t)e << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u))) v++;  /* a carry into the exponent is right */
  return (uint16_t)v;
}
static inline float kiln_bf16_to_f32(uint16_t b) { return kiln_bits_to_f32((uint32_t)b << 16); }
static inline uint16_t kiln_f32_to_bf16(float f) {
  uint32_t x = kiln_f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  /* nan stays nan */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
)";

// exp for float32 (and float16/bfloat16, which compute in float): glibc's expf is a scalar call
// that GCC cannot vectorise without -ffast-math, and it bounded softmax and every exp-containing
// kernel (~2 ns per element). This one is branch-free (the clamps are selects), uses only + - *
// and integer bit manipulation, and vectorises inside `#pragma omp simd` loops. Measured over all
// 2^32 inputs: at most 1 ulp from the correctly rounded result wherever that is a normal float,
// with and without FMA contraction; +0 where it would be subnormal (why: below)
// (tests/unit/c_expf_test.cc checks both on a dense sample). Derivation in docs/codegen.md
// ("Numerics contract"); the coefficients are a Chebyshev-node fit of (e^r - 1 - r) / r^2.
const char* kExpf = R"(/* e^x = e^r * 2^k, k = round(x / ln2), |r| <= ln2/2: returns e^r; *t carries k in its low mantissa
   bits (k = bits(*t) - 0x4b400000). The steps kiln_expf, kiln_erff and kiln_sigmoidf share; each
   scales by 2^k as its range needs. */
static inline float kiln_exp_reduced(float x, float* t) {
  /* Adding 1.5 * 2^23 rounds x / ln2 to an integer, which lands in the low mantissa bits. */
  *t = x * 1.44269502f + 12582912.0f;
  const float kf = *t - 12582912.0f;
  /* ln2 = 0.693359375 - 2.12194442e-4: kf * 0.693359375 is exact (9 + 8 significant bits) and so
     is x minus it (kf = 0, or a multiple of x's ulp under 0.4), leaving one rounding in r. */
  const float r = (x - kf * 0.693359375f) + kf * 2.12194442e-4f;
  const float p = 0.5f + r * (0.166665733f + r * (0.0416665487f + r * (0.0083637787f + r * 0.00139269326f)));
  return 1.0f + (r + (r * r) * p);
}
/* exp(x) = 2^k * e^r (float32; <= 1 ulp where the result is normal, +0 where it would be
   subnormal; see docs/codegen.md). */
static inline float kiln_expf(float x) {
  /* Below -87.3365402 (the first float whose exp is at least 2^-126) the result is +0, never a
     subnormal: x86 runs every operation that produces or reads a subnormal through a microcode
     assist (~100 cycles), so a softmax over a -100 attention mask (Swin's shifted windows) ran 5x
     slower, in this exp and in the products that read its output. The value is computed from x
     clamped there, so no intermediate is subnormal either. Above 89 the result is inf; NaN passes
     through both clamps and both selects. */
  const int under = x < -0x1.5d589ep+6f;
  float xc = under ? -0x1.5d589ep+6f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  float t;
  const float y = kiln_exp_reduced(xc, &t);
  /* 2^k as two factors 2^k1 * 2^k2: k is in [-126, 128], and 2^128 is not a float. */
  const int32_t k = (int32_t)(kiln_f32_to_bits(t) - 0x4b400000u);
  const int32_t k1 = k >> 1, k2 = k - k1;
  const float e = y * kiln_bits_to_f32((uint32_t)(k1 + 127) << 23) * kiln_bits_to_f32((uint32_t)(k2 + 127) << 23);
  return under ? 0.0f : e;
}
)";

// erf for float32 (and float16/bfloat16), for the same reason as kiln_expf: glibc's erff is a
// scalar call, and GELU's erf was the most expensive part of the encoder's FFN epilogue. Branch-free
// (both halves are computed and selected), only + - * /, selects, bit manipulation and kiln_expf's
// reduction without its clamps and two-factor scaling (kiln_expf_erfc: the same bits over the range
// erf reads, checked over all 2^32 inputs; 52 -> 38 cycles per 16-lane GELU, C harness).
// Measured over all 2^32 inputs: at most 1 ulp from the correctly rounded erf, with and without FMA
// contraction (tests/unit/c_erff_test.cc checks <= 2 ulp on a dense sample). Derivation in
// docs/codegen.md ("Numerics contract"); both polynomials are near-minimax fits (Lawson iterations
// on Chebyshev nodes), the second weighted by e^-x^2 since only erfc's absolute error matters there.
const char* kErff = R"(/* e^x where erf uses it, x = -a^2 in [-15.4, -1] (a in [1, 3.92]): the result is normal there, so
   2^k is one exact factor and needs no clamps — the same bits as kiln_expf. Elsewhere erf selects
   another value (unsigned arithmetic: any k is defined). */
static inline float kiln_expf_erfc(float x) {
  float t;
  const float y = kiln_exp_reduced(x, &t);
  return y * kiln_bits_to_f32((kiln_f32_to_bits(t) - 0x4b400000u + 127u) << 23);
}
/* erf(x) = sign(x) * (|x| < 1 ? |x| + |x| P(x^2) : 1 - e^-x^2 Q(1/|x|)), 1 from the first float
   whose correctly rounded erf is 1 (float32; <= 1 ulp, see docs/codegen.md). */
static inline float kiln_erff(float x) {
  const uint32_t sign = kiln_f32_to_bits(x) & 0x80000000u;
  const float a = kiln_bits_to_f32(kiln_f32_to_bits(x) ^ sign);
  const float u = a * a;
  /* erf(a) / a - 1 as a polynomial in a^2 on [0, 1]: the leading a is exact, so small inputs
     (subnormals included) keep their relative accuracy. */
  const float p = 0.128379166f + u * (-0.37612626f + u * (0.112835854f + u * (-0.0268538129f
                  + u * (0.00518832775f + u * (-0.000801019312f + u * 7.85385782e-05f)))));
  const float lo = a + a * p;
  /* Above 1, erfc(a) <= 0.16: e^(a^2) erfc(a) as a polynomial in 1/a on [1, 3.92], and its
     rounding errors shrink with erfc. e^-u with u rounded costs at most u * 2^-24 relative, which
     e^-u outweighs. For a = inf or NaN this half is NaN or 1 and the selects below decide. */
  const float t = 1.0f / a;
  const float q = -0.0016613194f + t * (0.577875137f + t * (-0.0339424461f + t * (-0.3099702f
                  + t * (0.308655858f + t * (-0.138751745f + t * 0.0253783371f)))));
  float c = kiln_expf_erfc(-u) * q;
  /* 3.91920567 is the last float whose erf rounds below 1: erfc(a) = 2^-25, where 1 - erfc rounds
     (ties to even) to 1, lies between it and the next float. Up to it erfc(a) > 2^-25, so c may be
     raised to the next float above 2^-25: 1 - c is then 1 - 2^-24 however c's error falls. */
  c = c < 0x1.000002p-25f ? 0x1.000002p-25f : c;
  float r = a < 1.0f ? lo : 1.0f - c;  /* NaN takes the second half, which keeps it NaN */
  r = a > 3.91920567f ? 1.0f : r;
  return kiln_bits_to_f32(kiln_f32_to_bits(r) | sign);
}
)";

struct IntType {
  const char* c;       // C type
  const char* s;       // helper suffix
  const char* u;       // unsigned type of the same width
  bool is_signed;
  const char* lo;      // lowest value as a C expression
  const char* hi;      // highest value
  const char* dlo;     // lowest value as a double literal (exact)
  const char* dhi;     // highest value rounded to double (saturate at or above it)
};

const IntType kInts[] = {
    {"int8_t", "i8", "uint8_t", true, "INT8_MIN", "INT8_MAX", "-128.0", "127.0"},
    {"int16_t", "i16", "uint16_t", true, "INT16_MIN", "INT16_MAX", "-32768.0", "32767.0"},
    {"int32_t", "i32", "uint32_t", true, "INT32_MIN", "INT32_MAX", "-2147483648.0", "2147483647.0"},
    {"int64_t", "i64", "uint64_t", true, "INT64_MIN", "INT64_MAX", "-9223372036854775808.0",
     "9223372036854775808.0"},
    {"uint8_t", "u8", "uint8_t", false, "0", "UINT8_MAX", "0.0", "255.0"},
    {"uint16_t", "u16", "uint16_t", false, "0", "UINT16_MAX", "0.0", "65535.0"},
    {"uint32_t", "u32", "uint32_t", false, "0", "UINT32_MAX", "0.0", "4294967295.0"},
    {"uint64_t", "u64", "uint64_t", false, "0", "UINT64_MAX", "0.0", "18446744073709551616.0"},
};

void float_helpers(std::ostringstream& os, const char* t, const char* s) {
  // numpy.minimum/maximum: a NaN in either position wins (the first one when both are NaN).
  os << "static inline " << t << " kiln_min_" << s << "(" << t << " a, " << t
     << " b) { return isnan(a) ? a : isnan(b) ? b : (b < a ? b : a); }\n"
     << "static inline " << t << " kiln_max_" << s << "(" << t << " a, " << t
     << " b) { return isnan(a) ? a : isnan(b) ? b : (a < b ? b : a); }\n"
     << "static inline bool kiln_isnan_" << s << "(" << t << " x) { return isnan(x) != 0; }\n"
     << "static inline bool kiln_isinf_" << s << "(" << t << " x) { return isinf(x) != 0; }\n"
     // A float select with both values as arguments: both are evaluated (loop-IR expressions are
     // total), so no conditional load reaches the C compiler. GCC 12 at -O3 miscompiles the
     // if-converted, vectorized form of `acc + (c ? x : a[i])` in a reduction (wrong sums; -O2,
     // -fno-tree-loop-if-convert or clang are right): LayerNorm over a Where of a broadcast, found
     // by the random-graph tests (tests/fuzz/regressions/c8_layernorm_fused).
     << "static inline " << t << " kiln_select_" << s << "(bool c, " << t << " a, " << t
     << " b) { return c ? a : b; }\n";
}

void int_helpers(std::ostringstream& os, const IntType& it) {
  const std::string t = it.c, s = it.s, u = it.u;
  const std::string fn = "static inline " + t + " kiln_";
  os << fn << "min_" << s << "(" << t << " a, " << t << " b) { return b < a ? b : a; }\n";
  os << fn << "max_" << s << "(" << t << " a, " << t << " b) { return a < b ? b : a; }\n";
  if (it.is_signed) {
    // Division by -1 negates with wrap-around (INT_MIN / -1 traps in C); x % -1 is 0.
    os << fn << "div_" << s << "(" << t << " a, " << t << " b) { return b == 0 ? 0 : b == -1 ? (" << t
       << ")(0u - (" << u << ")a) : (" << t << ")(a / b); }\n";
    os << fn << "mod_" << s << "(" << t << " a, " << t << " b) { return (b == 0 || b == -1) ? 0 : (" << t
       << ")(a % b); }\n";
    os << fn << "abs_" << s << "(" << t << " a) { return a < 0 ? (" << t << ")(0u - (" << u
       << ")a) : a; }\n";
  } else {
    os << fn << "div_" << s << "(" << t << " a, " << t << " b) { return b == 0 ? 0 : (" << t << ")(a / b); }\n";
    os << fn << "mod_" << s << "(" << t << " a, " << t << " b) { return b == 0 ? 0 : (" << t << ")(a % b); }\n";
  }
  if (it.is_signed && (t == "int32_t" || t == "int64_t")) {
    // Wrapping arithmetic through the unsigned type of the same width (signed overflow is UB in C;
    // narrower types promote to int and are converted back by the emitter instead).
    for (const char* op : {"add+", "sub-", "mul*"})
      os << fn << std::string(op, 3) << "_" << s << "(" << t << " a, " << t << " b) { return (" << t << ")((" << u
         << ")a " << op[3] << " (" << u << ")b); }\n";
    os << fn << "neg_" << s << "(" << t << " a) { return (" << t << ")(0u - (" << u << ")a); }\n";
  }
  // Integer power by repeated squaring in uint64_t (narrow types would promote to int and could
  // overflow it); the low bits of the product are those of the wrapping repeated multiplication.
  os << fn << "powu_" << s << "(" << t << " base, uint64_t e) {\n"
     << "  uint64_t r = 1, b = (uint64_t)base;\n"
     << "  for (; e > 0; e >>= 1) { if (e & 1u) r *= b; b *= b; }\n"
     << "  return (" << t << ")" << (it.is_signed ? "(" + u + ")" : "") << "r;\n}\n";
  // A negative exponent gives the truncated real result: 1 for base 1, ±1 for base -1, else 0.
  os << fn << "pow_" << s << "(" << t << " base, int64_t e) {\n"
     << "  if (e >= 0) return kiln_powu_" << s << "(base, (uint64_t)e);\n"
     << "  if (base == 1) return 1;\n";
  if (it.is_signed) os << "  if (base == -1) return (e & 1) ? -1 : 1;\n";
  os << "  return 0;\n}\n";
  os << fn << "sat_" << s << "(double v) { return v != v ? 0 : v >= " << it.dhi << " ? " << it.hi
     << " : v <= " << it.dlo << " ? " << it.lo << " : (" << t << ")v; }\n";
}

// tanh for float32 (and float16/bfloat16), for the same reason as kiln_expf: glibc's tanhf is a
// scalar call, and the tanh-GELU epilogue of a BERT/GPT FFN paid ~20 ns per element for it (the
// fused FFN1 + GELU kernel of a 2-layer BERT ran at 28 GFLOP/s). Branch-free: both halves are
// computed and one selected. On a = |x| (the sign is put back, so tanh is odd and tanh(-0) = -0):
// for a < 0.55, a + a^3 P(a^2), P of degree 4 fitted to (tanh(a) - a) / a^3 (Lawson-iterated least
// squares on Chebyshev nodes, max relative error 1.1e-9 in exact arithmetic), which keeps tiny and
// subnormal inputs exact; above, 1 - 2 / (e^(2a) + 1) through kiln_expf, which needs no clamp (e^(2a)
// = inf gives 1; NaN stays NaN). Error: within 3 ulp of the correctly rounded tanh, measured on
// 2^24 inputs spread over the range and dense around the switch point (tests/unit/c_tanhf_test.cc).
const char* kTanhf = R"(/* tanh(x) = sign(x) * (|x| < 0.55 ? |x| + |x|^3 P(x^2) : 1 - 2 / (e^(2|x|) + 1)) (float32; <= 3 ulp). */
static inline float kiln_tanhf(float x) {
  const uint32_t sign = kiln_f32_to_bits(x) & 0x80000000u;
  const float a = kiln_bits_to_f32(kiln_f32_to_bits(x) ^ sign);
  const float t = a * a;
  const float p = (((-0.0062873452f * t + 0.0210818108f) * t - 0.0538550504f) * t + 0.133326158f) * t - 0.333333194f;
  const float lo = a + a * (t * p);
  const float hi = 1.0f - 2.0f / (kiln_expf(a + a) + 1.0f);
  const float r = a < 0.55f ? lo : hi; /* NaN takes the second half, which keeps it NaN */
  return kiln_bits_to_f32(kiln_f32_to_bits(r) | sign);
}
)";

// sigmoid for float32 (and float16/bfloat16): 1 / (1 + e^-x), with e^-x written out here instead
// of calling kiln_expf, whose second scale factor and wide clamp keep subnormal exps exact: the sum
// 1 + e^-x never needs them. -x is clamped to [-87, 87.3365402]: below, e^-x < 2^-125 vanishes
// next to 1 (the result is 1, as it is exactly); above, the true value is below 2^-126 and the
// result is +0, never a subnormal (why: kiln_expf). So 2^k is one normal factor. NaN passes through
// the clamps and stays NaN. SiLU is x * sigmoid(x) in every EfficientNet-style block: this form took 13 % off the
// 16 -> 96 expansion conv + SiLU kernel of EfficientNet-B0 (0.575 -> 0.498 ms, 1 thread), whose
// epilogue cost as much as its products. Error: at most 2 ulp from the correctly rounded sigmoid
// wherever it is a normal float, and +0 where it would be subnormal, over all 2^32 inputs
// (measured exhaustively; tests/unit/c_sigmoidf_test.cc checks 2^24 of them).
const char* kSigmoidf = R"(/* sigmoid(x) = 1 / (1 + 2^k (1 + r + r^2 P(r))) for -x = k ln2 + r (float32; <= 2 ulp). */
static inline float kiln_sigmoidf(float x) {
  float z = -x;
  const int under = z > 0x1.5d589ep+6f; /* sigmoid(x) < 2^-126 */
  z = z < -87.0f ? -87.0f : z;
  z = under ? 0x1.5d589ep+6f : z;
  float t;
  const float y = kiln_exp_reduced(z, &t);
  const int32_t k = (int32_t)(kiln_f32_to_bits(t) - 0x4b400000u);
  const float s = 1.0f / (1.0f + y * kiln_bits_to_f32((uint32_t)(k + 127) << 23));
  return under ? 0.0f : s;
}
)";

}  // namespace

std::string prelude_helpers(const std::string& bits, bool strict_fp) {
  std::ostringstream os;
  os << kConversionsTitle << bits << kConversions << "\n"
     << (strict_fp ? "/* --strict-fp: libm's exp and erf, as the reference executor computes them. */\n"
                     "static inline float kiln_expf(float x) { return expf(x); }\n"
                     "static inline float kiln_erff(float x) { return erff(x); }\n"
                     "static inline float kiln_tanhf(float x) { return tanhf(x); }\n"
                     "static inline float kiln_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
                   : std::string(kExpf) + "\n" + kErff + "\n" + kTanhf + "\n" + kSigmoidf)
     << "\n"
     << "/* Floating point min/max (NaN-propagating) and classification. */\n";
  float_helpers(os, "float", "f32");
  float_helpers(os, "double", "f64");
  os << "\n/* Integers: wrap-around like the reference executor; x/0 and x%0 are 0. */\n";
  for (const IntType& it : kInts) int_helpers(os, it);
  os << "static inline bool kiln_min_b(bool a, bool b) { return a && b; }\n"
     << "static inline bool kiln_max_b(bool a, bool b) { return a || b; }\n"
     << "static inline bool kiln_div_b(bool a, bool b) { return b ? a : 0; }\n"
     << "static inline bool kiln_mod_b(bool a, bool b) { (void)a; (void)b; return 0; }\n\n";
  return os.str();
}

std::string checked_index_helper(const std::string& status_ptr) {
  return "/* A run-time index into an axis of dim elements: negative ones count from the end; one outside\n"
         " * [-dim, dim) records site in *status (reported by the caller after the kernel) and reads 0. */\n"
         "static inline int64_t kiln_checked_index(" + status_ptr + " status, int64_t i, int64_t dim, int32_t site) {\n"
         "  if (i < -dim || i >= dim) {\n    *status = site;\n    return 0;\n  }\n"
         "  return i < 0 ? i + dim : i;\n}\n\n";
}

std::string c_prelude(bool strict_fp) {
  std::ostringstream os;
  os << "/* Generated by kiln. C11; kernels take `void* const* args` (inputs, then outputs, then a status word where they check indices). */\n"
     << "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
     << "#include <string.h>\n\n"
     << prelude_helpers(kBitsC, strict_fp)
     // kCheckedIndex (loop_ir.h): a run-time index of Gather, GatherElements or GatherND. Only
     // kernels with such indices call it (and take the status word); the others pay nothing. The
     // store is a plain one: threads that find bad indices at once all write a valid site, and the
     // runtime reads the word after the parallel loop has joined.
     << checked_index_helper("int32_t*")
     // The runtime sets the thread count of the module's parallel loops through this entry point,
     // so kiln itself need not link OpenMP.
     << "#ifdef _OPENMP\n#include <omp.h>\n#endif\n"
     << "void kiln_set_num_threads(int n) {\n#ifdef _OPENMP\n  omp_set_num_threads(n);\n#else\n  (void)n;\n#endif\n}\n\n"
     // Local buffers too big for a worker's stack come from a per-thread scratch stack: one
     // reservation per thread on first use, then a bump pointer (buffers are scoped, so they are
     // released in reverse order). Steady-state runs allocate nothing, and no buffer pays for
     // fresh pages (a malloc above glibc's mmap threshold would, on every call). Past the
     // reservation a buffer falls back to malloc.
     // A kernel whose loops run in whole 16-lane vectors (LoopKernel::vector_bits) asks GCC to
     // vectorise it with 512-bit registers, which its tuning for several AVX-512 cores does not
     // prefer under -march=native. Other compilers keep their choice.
     << "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)\n"
     << "#define KILN_PREFER_512 __attribute__((target(\"prefer-vector-width=512\")))\n"
     << "#else\n#define KILN_PREFER_512\n#endif\n"
     // GCC 12 at -O3 vectorizes an outer loop whose inner loop accumulates reads of a negative
     // stride into a scalar wrongly (docs/codegen.md "A GCC 12 miscompile"); kernels with such a
     // nest (c_emitter.cc, reversed_accumulation) are compiled without loop vectorization.
     << "#if defined(__GNUC__) && !defined(__clang__)\n"
     << "#define KILN_NO_LOOP_VECTORIZE __attribute__((optimize(\"no-tree-loop-vectorize\")))\n"
     << "#else\n#define KILN_NO_LOOP_VECTORIZE\n#endif\n"
     // Stencil kernels (LoopKernel::no_tree_pre): GCC's PRE turns a row loop's sliding-window
     // loads into values carried across iterations, and the loop is then not vectorized.
     << "#if defined(__GNUC__) && !defined(__clang__)\n"
     << "#define KILN_NO_TREE_PRE __attribute__((optimize(\"no-tree-pre\")))\n"
     << "#else\n#define KILN_NO_TREE_PRE\n#endif\n\n"
     << "#define KILN_SCRATCH_BYTES ((size_t)256 << 20)\n"
     << "static _Thread_local unsigned char* kiln_scratch_base_;\n"
     << "static _Thread_local size_t kiln_scratch_top_;\n"
     << "static void* kiln_scratch_push(size_t bytes) {\n"
     << "  bytes = (bytes + 63) & ~(size_t)63;\n"
     << "  if (!kiln_scratch_base_) kiln_scratch_base_ = (unsigned char*)aligned_alloc(64, KILN_SCRATCH_BYTES);\n"
     << "  if (!kiln_scratch_base_ || kiln_scratch_top_ + bytes > KILN_SCRATCH_BYTES) return malloc(bytes);\n"
     << "  void* p = kiln_scratch_base_ + kiln_scratch_top_;\n"
     << "  kiln_scratch_top_ += bytes;\n"
     << "  return p;\n"
     << "}\n"
     << "static void kiln_scratch_pop(void* p, size_t bytes) {\n"
     << "  unsigned char* q = (unsigned char*)p;\n"
     << "  if (kiln_scratch_base_ && q >= kiln_scratch_base_ && q < kiln_scratch_base_ + KILN_SCRATCH_BYTES)\n"
     << "    kiln_scratch_top_ -= (bytes + 63) & ~(size_t)63;\n"
     << "  else\n"
     << "    free(p);\n"
     << "}\n\n";
  return os.str();
}

}  // namespace kiln::codegen::detail
