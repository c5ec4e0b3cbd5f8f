// The C prelude's kiln_tanhf, through the emitter and the JIT: float32 Tanh must be within 3 ulp of
// the correctly rounded tanh ((float)std::tanh in double) over the whole float range, odd (the
// sign of the input, -0 included), |tanh| <= 1, with exact special cases (±0, ±inf -> ±1, NaN) and
// exactly ±1 where the correctly rounded tanh is; float16 Tanh computes in float (kiln_tanhf) and
// rounds; float64 Tanh stays libm's tanh, bit for bit; --strict-fp's prelude is libm's tanhf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "c_math_test_util.h"
#include "codegen/c/c_prelude.h"
#include "ir/dtype.h"

namespace kiln {
namespace {

using namespace loop;
using testing::bits;
using testing::from_bits;
constexpr int64_t kChunk = testing::kMathChunk;

struct TanhSpec {
  static constexpr const char* prefix = "tanh";
  static constexpr UnOp op = UnOp::Tanh;
};
class CTanhf : public testing::UnaryMathSuite<TanhSpec> {};

TEST_F(CTanhf, Float32WithinThreeUlpOverTheWholeRange) {
  std::vector<float> x(static_cast<size_t>(kChunk)), y(static_cast<size_t>(kChunk));
  auto run = [&] {
    call("tanh_f32", x.data(), y.data());
    return testing::check_odd_bounded("tanh", std::tanh, 3, x, y);
  };
  // Around the switch point (0.55) and the saturation to 1 (9.010914); then a dense sweep of
  // [0, 1] where the polynomial and the exp form meet.
  int64_t worst = testing::sweep_inputs(x, {0.55f, 9.010914f}, run);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(double(i) / double(x.size()));
  worst = std::max(worst, run());
  RecordProperty("max_ulp", int(worst));

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f, -0.0f, inf, -inf, std::nanf(""), 9.010914f, -9.010914f, 1e30f,
                                      std::numeric_limits<float>::denorm_min(), 1e-20f};
  std::fill(x.begin(), x.end(), 0.0f);
  std::copy(special.begin(), special.end(), x.begin());
  call("tanh_f32", x.data(), y.data());
  EXPECT_EQ(bits(y[0]), bits(0.0f));
  EXPECT_EQ(bits(y[1]), bits(-0.0f));
  EXPECT_EQ(bits(y[2]), bits(1.0f));
  EXPECT_EQ(bits(y[3]), bits(-1.0f));
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], float(std::tanh(double(9.010914f))));
  EXPECT_EQ(y[6], -float(std::tanh(double(9.010914f))));
  EXPECT_EQ(bits(y[7]), bits(1.0f));
  EXPECT_EQ(bits(y[8]), bits(std::numeric_limits<float>::denorm_min()));  // tanh(x) = x for tiny x
  EXPECT_EQ(bits(y[9]), bits(1e-20f));
}

// float16 computes in float through kiln_tanhf and rounds to half: within one half-ulp of the
// correctly rounded tanh, with its sign.
TEST_F(CTanhf, Float16ThroughKilnTanhf) {
  std::vector<uint16_t> x(65536), y(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = uint16_t(i);
  call("tanh_f16", x.data(), y.data());
  int failures = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    Half h;
    h.bits = x[i];
    const Half want{float(std::tanh(double(float(h))))};
    const bool ok = std::isnan(float(want)) ? (y[i] & 0x7c00u) == 0x7c00u && (y[i] & 0x3ffu) != 0
                                            : (y[i] & 0x8000u) == (x[i] & 0x8000u) &&
                                                  std::abs(int(y[i]) - int(want.bits)) <= 1;
    if (!ok && ++failures <= 5) ADD_FAILURE() << "tanh(half " << float(h) << ") bits " << y[i] << ", want " << want.bits;
  }
}

// float64 keeps libm's tanh (bit for bit); the float kernels call kiln_tanhf, never libm's tanhf;
// the strict prelude's kiln_tanhf is libm's.
TEST_F(CTanhf, Float64KeepsLibmAndFloatNeverCallsTanhf) {
  std::vector<double> x(64), y(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = -6.0 + 0.1875 * i + 0.0123;
  call("tanh_f64", x.data(), y.data());
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(bits(y[i]), bits(std::tanh(x[i]))) << x[i];
  for (size_t p = source_.find("tanhf("); p != std::string::npos; p = source_.find("tanhf(", p + 1))
    EXPECT_EQ(source_.compare(p - 5, 5, "kiln_"), 0) << source_.substr(p - 20, 40);
  EXPECT_NE(source_.find("tanh(x["), std::string::npos);
  EXPECT_NE(codegen::detail::c_prelude(true).find("kiln_tanhf(float x) { return tanhf(x); }"), std::string::npos);
}

}  // namespace
}  // namespace kiln
