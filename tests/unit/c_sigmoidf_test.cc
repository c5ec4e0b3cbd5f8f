// The C prelude's kiln_sigmoidf, through the emitter and the JIT: float32 Sigmoid must be within
// 2 ulp of the correctly rounded 1 / (1 + e^-x) ((float) of the double formula) wherever that is a
// normal float, +0 where it is subnormal (no subnormal result), in [0, 1], with exact special cases (0 -> 0.5,
// +inf -> 1, -inf -> 0, NaN); float16 computes in float and rounds; float64 keeps the formula
// with libm's exp; --strict-fp's prelude is the reference's formula with libm's expf.
#include <gtest/gtest.h>

#include <cfloat>
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
constexpr int64_t kChunk = testing::kMathChunk;

struct SigmoidSpec {
  static constexpr const char* prefix = "sigmoid";
  static constexpr UnOp op = UnOp::Sigmoid;
};
class CSigmoidf : public testing::UnaryMathSuite<SigmoidSpec> {};

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Largest ulp distance over normal results; +0 where the correctly rounded result is subnormal; NaN
// for NaN.
int64_t check(const std::vector<float>& x, const std::vector<float>& y) {
  int64_t worst = 0;
  int failures = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = float(sigmoid(double(x[i]))), got = y[i];
    bool ok;
    if (std::isnan(x[i])) {
      ok = std::isnan(got);
    } else if (want < FLT_MIN) {
      ok = bits(got) == bits(0.0f);
    } else {
      const int64_t d = std::llabs(int64_t(bits(got)) - int64_t(bits(want)));
      worst = std::max(worst, d);
      ok = d <= 2 && got <= 1.0f;
    }
    if (!ok && ++failures <= 5) ADD_FAILURE() << "sigmoid(" << std::hexfloat << x[i] << ") = " << got << ", want " << want;
  }
  return worst;
}

TEST_F(CSigmoidf, Float32WithinTwoUlpOverTheWholeRange) {
  std::vector<float> x(static_cast<size_t>(kChunk)), y(static_cast<size_t>(kChunk));
  auto run = [&] {
    call("sigmoid_f32", x.data(), y.data());
    return check(x, y);
  };
  // Around the clamps of -x at -87 and 87.3365402 (both signs of x), then a dense sweep of [-20, 20].
  int64_t worst = testing::sweep_inputs(x, {87.0f, 0x1.5d589ep+6f}, run);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(-20.0 + 40.0 * double(i) / double(x.size()));
  worst = std::max(worst, run());
  RecordProperty("max_ulp", int(worst));

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f, -0.0f, inf, -inf, std::nanf(""), 100.0f, -100.0f, 1e-30f};
  std::fill(x.begin(), x.end(), 0.0f);
  std::copy(special.begin(), special.end(), x.begin());
  call("sigmoid_f32", x.data(), y.data());
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(bits(y[6]), bits(0.0f));  // 3.7e-44 correctly rounded, a subnormal: +0
  EXPECT_EQ(y[7], 0.5f);
}

TEST_F(CSigmoidf, Float64IsTheFormulaWithLibmExp) {
  std::vector<double> x(64), y(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -40.0 + 1.27 * double(i);
  call("sigmoid_f64", x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits(y[i]), bits(1.0 / (1.0 + std::exp(-x[i])))) << x[i];
}

TEST(CSigmoidfStrict, StrictPreludeIsTheReferenceFormula) {
  const std::string strict = codegen::detail::c_prelude(true);
  EXPECT_NE(strict.find("static inline float kiln_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }"),
            std::string::npos);
  EXPECT_NE(codegen::detail::c_prelude(false).find("z = under ? 0x1.5d589ep+6f : z;"), std::string::npos);
}

}  // namespace
}  // namespace kiln
