// The fixed part of every translation unit emit_c writes: includes and the static inline helpers
// the emitted expressions call. Internal to the C emitter.
#pragma once
#include <string>

namespace kiln::codegen::detail {

// Helper families (NAME_<suffix>, suffix from c_suffix in c_emitter.cc):
//   kiln_f16_to_f32 / kiln_f32_to_f16 / kiln_bf16_to_f32 / kiln_f32_to_bf16  (storage conversions)
//   kiln_min_S / kiln_max_S     f32 f64 (NaN-propagating) and every integer type and b (bool)
//   kiln_div_S / kiln_mod_S     integers and b: x/0 and x%0 give 0, INT_MIN / -1 wraps
//   kiln_abs_S kiln_add_S kiln_sub_S kiln_mul_S kiln_neg_S   signed integers, wrapping
//   kiln_pow_S(base, int64 e), kiln_powu_S(base, uint64 e)   integers (repeated squaring, wrapping)
//   kiln_sat_S(double)          float → integer: NaN → 0, out-of-range saturates
//   kiln_isnan_S / kiln_isinf_S f32 f64, returning bool
//   kiln_expf(float)            vectorisable exp for float32/float16/bfloat16, ≤ 1 ulp (not libm's bits)
//   kiln_erff(float)            vectorisable erf for float32/float16/bfloat16, ≤ 1 ulp (not libm's bits)
//   kiln_tanhf(float)           vectorisable tanh for float32/float16/bfloat16, ≤ 3 ulp (not libm's bits)
//   kiln_sigmoidf(float)        vectorisable 1 / (1 + exp(-x)), ≤ 2 ulp where normal (the formula under --strict-fp)
// strict_fp: kiln_expf / kiln_erff call libm's expf / erff (the reference's bits) instead of the
// vectorisable approximations.
std::string c_prelude(bool strict_fp = false);

// The helpers alone (every family above), shared by the C, OpenCL and CUDA preludes: `bits` defines
// kiln_bits_to_f32 / kiln_f32_to_bits in the target's spelling. Written with `static inline`
// and C's fixed-width integer names; a target without them (OpenCL, CUDA) defines the names
// first and may rewrite the qualifier (CUDA: __device__).
std::string prelude_helpers(const std::string& bits, bool strict_fp);
// kiln_checked_index (loop_ir.h kCheckedIndex) with the status word behind a pointer of type
// `status_ptr` ("int32_t*" in C and CUDA, "__global int32_t*" in OpenCL).
std::string checked_index_helper(const std::string& status_ptr);

}  // namespace kiln::codegen::detail
