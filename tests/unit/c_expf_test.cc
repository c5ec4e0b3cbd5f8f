// The C prelude's kiln_expf, through the emitter and the JIT: float32 Exp must be within 2 ulp of
// the correctly rounded exp (std::exp in double, rounded once) over the whole float range, with
// exact special cases (NaN, ±inf, overflow to inf, gradual underflow down to 0, exp(±0) = 1);
// float16 Exp computes in float (kiln_expf) and rounds; float64 Exp stays libm's exp, bit for bit.
// (Exhaustively over all 2^32 inputs kiln_expf is within 1 ulp; here a dense sample runs in well
// under a second.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "codegen/c/c_emitter.h"
#include "ir/dtype.h"
#include "loop/loop_ir.h"
#include "runtime/jit.h"
#include "c_math_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using namespace loop;

using testing::bits;
using testing::from_bits;
constexpr int64_t kChunk = testing::kMathChunk;

struct ExpSpec {
  static constexpr const char* prefix = "exp";
  static constexpr UnOp op = UnOp::Exp;
};
class CExpf : public testing::UnaryMathSuite<ExpSpec> {};

// Runs exp_f32 on `x` (kChunk values) and checks each result against the correctly rounded exp:
// NaN, infinity (overflow) and zero (underflow) exactly, +0 exactly where the correctly rounded
// result is subnormal (kiln_expf never returns one: the subnormal assists cost 5x on softmax),
// anything else within 2 ulp (results are non-negative, so the ulp distance is the distance of the
// bit patterns).
// Returns the largest distance seen.
int64_t check_chunk(const std::vector<float>& x, void (*run)(void*, void*)) {
  std::vector<float> y(static_cast<size_t>(kChunk), -1.0f);
  run(const_cast<float*>(x.data()), y.data());
  int64_t worst = 0;
  int failures = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = float(std::exp(double(x[i]))), got = y[i];
    bool ok;
    if (std::isnan(want) || std::isinf(want) || want < std::numeric_limits<float>::min()) {
      ok = std::isnan(want) ? std::isnan(got) : bits(got) == bits(std::isinf(want) ? want : 0.0f);
    } else {
      const int64_t d = std::llabs(int64_t(bits(got)) - int64_t(bits(want)));
      worst = std::max(worst, d);
      ok = d <= 2 && !std::signbit(got);
    }
    if (!ok && ++failures <= 5) ADD_FAILURE() << "exp(" << std::hexfloat << x[i] << ") = " << got << ", want " << want;
  }
  return worst;
}

TEST_F(CExpf, Float32WithinTwoUlpOverTheWholeRange) {
  auto run = [](void* x, void* y) { call("exp_f32", x, y); };
  std::vector<float> x(static_cast<size_t>(kChunk));
  int64_t worst = 0;
  // 2^24 bit patterns spread over all 2^32 (every 256th, the low byte varying): both signs, NaNs,
  // infinities, subnormal and huge inputs.
  for (uint32_t c = 0; c < 16; ++c) {
    for (uint32_t i = 0; i < uint32_t(kChunk); ++i) {
      const uint32_t j = c * uint32_t(kChunk) + i;
      x[i] = from_bits((j << 8) | ((j * 157u) & 0xffu));
    }
    worst = std::max(worst, check_chunk(x, run));
  }
  // Denser where the result scales out of the normal range: 2^19 inputs evenly through [-104, -87]
  // (the last normal results and the flush to 0 below -87.3365402), then every float from 88.6 to
  // ~92.6 (FLT_MAX and the overflow to inf above 88.72284).
  const uint32_t lo = bits(-87.0f), hi = bits(-104.0f);
  const size_t half = size_t(kChunk) / 2;
  for (size_t i = 0; i < half; ++i) x[i] = from_bits(lo + uint32_t((uint64_t(hi - lo) * i) / half));
  for (size_t i = half; i < x.size(); ++i) x[i] = from_bits(bits(88.6f) + uint32_t(i - half));
  worst = std::max(worst, check_chunk(x, run));
  RecordProperty("max_ulp", int(worst));  // 1 at the time of writing

  // The special cases, exactly. Results at or above 2^128 - 2^103 round to inf, below 2^-126 are
  // +0; each threshold lies strictly between two floats.
  const float inf = std::numeric_limits<float>::infinity();
  auto first_above = [](double t) {
    float f = float(t);
    return double(f) > t ? f : std::nextafter(f, std::numeric_limits<float>::infinity());
  };
  const float overflow = first_above(std::log(std::ldexp(1.0, 128) - std::ldexp(1.0, 103)));
  const float underflow = first_above(-126.0 * std::log(2.0));
  const std::vector<float> special = {0.0f, -0.0f, inf, -inf, std::nanf(""), -std::nanf(""), overflow,
                                      std::nextafter(overflow, 0.0f), underflow, std::nextafter(underflow, -inf)};
  std::fill(x.begin(), x.end(), 0.0f);
  std::copy(special.begin(), special.end(), x.begin());
  std::vector<float> y(static_cast<size_t>(kChunk));
  call("exp_f32", x.data(), y.data());
  EXPECT_EQ(bits(y[0]), bits(1.0f));
  EXPECT_EQ(bits(y[1]), bits(1.0f));
  EXPECT_EQ(y[2], inf);
  EXPECT_EQ(bits(y[3]), bits(0.0f));
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(std::isnan(y[5]));
  EXPECT_EQ(y[6], inf) << std::hexfloat << x[6];
  EXPECT_TRUE(std::isfinite(y[7])) << std::hexfloat << x[7];
  EXPECT_GT(y[7], 3.4e38f);
  EXPECT_GE(y[8], std::numeric_limits<float>::min()) << std::hexfloat << x[8];
  EXPECT_LT(y[8], std::numeric_limits<float>::min() * 1.0001f) << std::hexfloat << x[8];
  EXPECT_EQ(bits(y[9]), bits(0.0f)) << std::hexfloat << x[9];
}

// float16 computes in float through kiln_expf and rounds once more to half: every half input
// lands within one half-ulp of the correctly rounded exp, NaN/inf/0 exactly.
TEST_F(CExpf, Float16ThroughKilnExpf) {
  std::vector<uint16_t> x(65536), y(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = uint16_t(i);
  call("exp_f16", x.data(), y.data());
  int failures = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    Half h;
    h.bits = x[i];
    const Half want{float(std::exp(double(float(h))))};  // braces: clang reads parentheses as a function declaration
    const bool special = std::isnan(float(want)) || std::isinf(float(want)) || float(want) == 0.0f;
    const bool ok = std::isnan(float(want)) ? (y[i] & 0x7c00u) == 0x7c00u && (y[i] & 0x3ffu) != 0
                    : special                ? y[i] == want.bits
                                             : std::abs(int(y[i]) - int(want.bits)) <= 1;
    if (!ok && ++failures <= 5) ADD_FAILURE() << "exp(half " << float(h) << ") bits " << y[i] << ", want " << want.bits;
  }
}

// float64 keeps libm's exp (bit for bit); the float kernels call kiln_expf, never libm's expf.
TEST_F(CExpf, Float64KeepsLibmAndFloatNeverCallsExpf) {
  std::vector<double> x(64), y(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = -700.0 + 22.5 * i + 0.123;
  call("exp_f64", x.data(), y.data());
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(bits(y[i]), bits(std::exp(x[i]))) << x[i];
  size_t calls = 0;
  for (size_t p = source_.find("expf("); p != std::string::npos; p = source_.find("expf(", p + 1)) {
    EXPECT_EQ(source_.compare(p - 5, 5, "kiln_"), 0) << source_.substr(p - 20, 40);
    ++calls;
  }
  EXPECT_GE(calls, 3u);  // the definition and the two float kernels
  EXPECT_NE(source_.find("exp(x["), std::string::npos);
}

}  // namespace
}  // namespace kiln
