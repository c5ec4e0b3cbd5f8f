// The micro-kernel's register epilogue (loop/register_epilogue.h, kernels/microkernel.h's
// epilogue forms): what the matcher accepts (the sum, a bias per column, Relu's and Clip's
// selects in the reference's order) and refuses (a residual, a bias per row, another activation,
// the clamps in the other order, a bound that varies); and positions-as-rows convs lowered with
// it — their transposing stores read the accumulator tile, no tile pass — against the reference,
// while an epilogue it refuses keeps the tile pass. (Strict builds lower windowed convs with the
// channels as rows, whose stores are not transposing copies; the epilogue forms' strict bits are
// MicroKernel.EpilogueFormsMatchTheInterface's.)
#include <gtest/gtest.h>

#include "kernels/microkernel.h"
#include "loop/loop_ir.h"
#include "loop/lower_internal.h"
#include "loop/register_epilogue.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using loop::add;
using loop::binary;
using loop::BinOp;
using loop::Buffer;
using loop::Expr;
using loop::float_imm;
using loop::int_imm;
using loop::load;
using loop::mul;
using loop::Scope;
using loop::select;
using loop::var;

struct Exprs {
  loop::BufferPtr acc = std::make_shared<Buffer>(Buffer{"kiln_acc", DType::Float32, {64}, Scope::Local});
  loop::BufferPtr bias = std::make_shared<Buffer>(Buffer{"b", DType::Float32, {32}, Scope::Global});
  loop::BufferPtr res = std::make_shared<Buffer>(Buffer{"r", DType::Float32, {2048}, Scope::Global});
  loop::BufferPtr lo = std::make_shared<Buffer>(Buffer{"lo", DType::Float32, {1}, Scope::Global});
  Expr a() const { return load(acc, add(mul(var("kiln_ei"), int_imm(32)), var("kiln_ej"))); }
  Expr b() const { return load(bias, add(var("kiln_j0"), var("kiln_ej"))); }
  static Expr relu(const Expr& x) { return select(binary(BinOp::Lt, x, float_imm(0)), float_imm(0), x); }
  static Expr upper(const Expr& x, const Expr& h) { return select(binary(BinOp::Gt, x, h), h, x); }
  static Expr lower(const Expr& x, const Expr& l) { return select(binary(BinOp::Lt, x, l), l, x); }
};

std::optional<loop::RegisterEpilogue> match(const Exprs& e, const Expr& value) {
  return loop::match_register_epilogue(value, e.a(), "kiln_ej", {"kiln_ei", "kiln_ln", "kiln_x"});
}

TEST(RegisterEpilogue, MatcherAcceptsTheSumBiasAndClamps) {
  Exprs e;
  using kernels::kEpBias;
  using kernels::kEpHigh;
  using kernels::kEpLow;
  auto flags = [&](const Expr& v) {
    auto m = match(e, v);
    return m ? m->flags : int64_t(-1);
  };
  EXPECT_EQ(flags(e.a()), 0);  // the sum itself: no epilogue call, the copies read the tile
  EXPECT_EQ(flags(add(e.a(), e.b())), kEpBias);
  EXPECT_EQ(flags(add(e.b(), e.a())), kEpBias);
  EXPECT_EQ(flags(Exprs::relu(add(e.a(), e.b()))), kEpBias | kEpLow);
  EXPECT_EQ(flags(Exprs::relu(e.a())), kEpLow);
  const Expr lo = load(e.lo, int_imm(0)), hi = float_imm(6);
  auto m = match(e, Exprs::upper(Exprs::lower(add(e.a(), e.b()), lo), hi));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->flags, kEpBias | kEpLow | kEpHigh);
  EXPECT_TRUE(loop::same_expr(m->lo, lo));
  EXPECT_TRUE(loop::same_expr(m->hi, hi));
  EXPECT_EQ(m->bias, e.bias);
  EXPECT_EQ(flags(Exprs::upper(e.a(), hi)), kEpHigh);

  // Refused: a residual, a bias per row, another activation, the clamps in the other order (min
  // before max is another function), a bound that varies per element, a select whose branches
  // are not the clamp's.
  EXPECT_EQ(flags(add(add(e.a(), e.b()), load(e.res, add(mul(var("kiln_ej"), int_imm(64)), var("kiln_x"))))), -1);
  EXPECT_EQ(flags(add(e.a(), load(e.bias, var("kiln_ei")))), -1);
  EXPECT_EQ(flags(loop::unary(loop::UnOp::Tanh, e.a())), -1);
  EXPECT_EQ(flags(Exprs::lower(Exprs::upper(e.a(), hi), lo)), -1);
  EXPECT_EQ(flags(Exprs::lower(e.a(), load(e.res, var("kiln_ej")))), -1);
  EXPECT_EQ(flags(select(binary(BinOp::Lt, e.a(), float_imm(0)), float_imm(0), e.b())), -1);
  EXPECT_EQ(flags(add(e.a(), load(e.bias, mul(var("kiln_ej"), int_imm(2))))), -1);  // not unit stride
}

// 3x3 convs of 16 -> 48 channels over 7x9 (positions as rows, K in kernel-position segments, a
// last column panel of 16 of 32 columns): bias + Clip and bias + Relu take the register epilogue;
// bias + SiLU and a residual keep the tile pass.
TEST(RegisterEpilogue, ConvsMatchTheReference) {
  struct Case {
    std::string name, body, inputs;
    bool ep;
  };
  const std::string conv = "  %c: f32[1,48,7,9] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"conv\"\n";
  const std::vector<Case> cases = {
      {"clip", conv + "  %y: f32[1,48,7,9] = Clip(%c, %lo, %hi) name=\"clip\"\n", "%x: f32[1,16,7,9]", true},
      {"relu", conv + "  %y: f32[1,48,7,9] = Relu(%c) name=\"relu\"\n", "%x: f32[1,16,7,9]", true},
      {"bias_only", conv + "  %y: f32[1,48,7,9] = Identity(%c) name=\"id\"\n", "%x: f32[1,16,7,9]", true},
      {"silu", conv + "  %s: f32[1,48,7,9] = Sigmoid(%c) name=\"sig\"\n  %y: f32[1,48,7,9] = Mul(%c, %s) name=\"silu\"\n",
       "%x: f32[1,16,7,9]", false},
      {"residual", conv + "  %a: f32[1,48,7,9] = Add(%c, %r) name=\"res\"\n  %y: f32[1,48,7,9] = Relu(%a) name=\"relu\"\n",
       "%x: f32[1,16,7,9], %r: f32[1,48,7,9]", false},
  };
  testing::KernelBatch compiled;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto g = testing::graph_with_constants(c.inputs, "%y", c.body, {{"w", {48, 16, 3, 3}}, {"b", {48}}, {"lo", {}}, {"hi", {}}}, 7,
                                           0.3f, [](const std::string& n) { return n == "lo" ? "-0.25" : "0.5"; });
    FusionGroup grp = testing::whole_group(*g);
    grp.name = c.name;
    for (unsigned seed : {1u, 2u}) {
      // Seed 2 with NaN, inf and huge inputs.
      const TensorMap inputs = testing::random_inputs(*g, seed, {}, seed == 2);
      auto values = run_reference_values(*g, inputs);
      auto lg = loop::lower_group(grp, cat(c.name, "_", seed), loop::Schedule{});
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      ASSERT_NE(nest.find("kiln_transpose_f32"), std::string::npos) << "not the positions-as-rows form:\n" << nest;
      EXPECT_EQ(nest.find("_ep(") != std::string::npos, c.ep) << nest;
      EXPECT_EQ(nest.find("kiln_etile") != std::string::npos, !c.ep) << nest;
      auto got = testing::interpret_group(*lg.kernel, grp, values);
      for (size_t o = 0; o < got.size(); ++o)
        EXPECT_EQ(testing::within_max_magnitude(got[o], values.at(grp.outputs[o])), "");
      compiled.add(std::move(*lg.kernel), grp, values);
    }
  }
  compiled.check("register_epilogue", /*contract=*/true);
}

}  // namespace
}  // namespace kiln
