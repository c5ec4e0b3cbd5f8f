// simplify_indices (src/loop/simplify_indices.h): the rewrites are identities over the loop ranges
// (random expressions checked exhaustively against their unsimplified value, with C's integer
// semantics as the emitted code has them), and they remove the divisions of a flatten / unravel
// round trip such as a channel shuffle's.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "loop/loop_ir.h"
#include "loop/simplify_indices.h"

namespace kiln::loop {
namespace {

using Vars = std::vector<std::pair<std::string, int64_t>>;

int64_t eval(const Expr& e, const std::map<std::string, int64_t>& env) {
  switch (e->kind) {
    case ExprKind::IntImm: return e->int_value;
    case ExprKind::Var: return env.at(e->name);
    case ExprKind::Select: return eval(e->args[0], env) ? eval(e->args[1], env) : eval(e->args[2], env);
    case ExprKind::Binary: {
      const int64_t a = eval(e->args[0], env), b = eval(e->args[1], env);
      switch (e->bin) {
        case BinOp::Add: return a + b;
        case BinOp::Sub: return a - b;
        case BinOp::Mul: return a * b;
        case BinOp::Div: return a / b;  // C truncation, as emitted
        case BinOp::Mod: return a % b;
        case BinOp::Min: return std::min(a, b);
        case BinOp::Max: return std::max(a, b);
        case BinOp::Lt: return a < b;
        case BinOp::Le: return a <= b;
        case BinOp::Gt: return a > b;
        case BinOp::Ge: return a >= b;
        case BinOp::Eq: return a == b;
        case BinOp::Ne: return a != b;
        case BinOp::And: return a && b;
        case BinOp::Or: return a || b;
        default: break;
      }
      break;
    }
    default: break;
  }
  ADD_FAILURE() << "unexpected node " << print_expr(e);
  return 0;
}

int count_divisions(const Expr& e) {
  int n = e->kind == ExprKind::Binary && (e->bin == BinOp::Div || e->bin == BinOp::Mod);
  for (const Expr& a : e->args) n += count_divisions(a);
  return n;
}

// Every assignment of the variables: f(env).
void for_all(const Vars& vars, const std::function<void(const std::map<std::string, int64_t>&)>& f) {
  std::map<std::string, int64_t> env;
  std::function<void(size_t)> rec = [&](size_t i) {
    if (i == vars.size()) return f(env);
    for (int64_t v = 0; v < vars[i].second; ++v) {
      env[vars[i].first] = v;
      rec(i + 1);
    }
  };
  rec(0);
}

TEST(SimplifyIndices, ChannelShuffleLosesItsDivisions) {
  // Output (c, y, x) of a [116, 28, 28] shuffle of two 58-channel halves: the flat position
  // unravelled as [2, 58, 28, 28] after a transpose, then flattened again.
  const Vars vars = {{"i1", 116}, {"i2", 28}, {"i3", 28}};
  const Expr flat = add(mul(add(mul(var("i1"), int_imm(28)), var("i2")), int_imm(28)), var("i3"));
  const Expr half = mod(div_floor(flat, int_imm(784)), int_imm(2));
  const Expr ch = add(mul(half, int_imm(58)), div_floor(flat, int_imm(1568)));
  const Expr src = add(mul(add(mul(ch, int_imm(28)), mod(div_floor(flat, int_imm(28)), int_imm(28))), int_imm(28)),
                       mod(flat, int_imm(28)));
  const Expr s = simplify_index(src, vars);
  EXPECT_EQ(count_divisions(s), 2) << print_expr(s);  // i1 % 2 and i1 / 2 remain
  for_all(vars, [&](const auto& env) { ASSERT_EQ(eval(s, env), eval(src, env)); });
}

TEST(SimplifyIndices, ClampsProvedRedundantGo) {
  const Vars vars = {{"i", 8}, {"j", 4}};
  const Expr e = binary(BinOp::Min, add(var("i"), var("j")), int_imm(10));  // ≤ 10 always
  EXPECT_EQ(print_expr(simplify_index(e, vars)), print_expr(add(var("i"), var("j"))));
  const Expr kept = binary(BinOp::Min, add(var("i"), var("j")), int_imm(9));
  EXPECT_EQ(print_expr(simplify_index(kept, vars)), print_expr(kept));
  // A variable without a known range keeps everything.
  const Expr unknown = div_floor(add(mul(var("n"), int_imm(4)), var("j")), int_imm(4));
  EXPECT_EQ(count_divisions(simplify_index(unknown, vars)), 1);
}

// Comparisons the ranges decide fold, and so do the selects on them; one quotient over a whole
// range is a constant.
TEST(SimplifyIndices, DecidedComparisonsAndSelectsFold) {
  const Vars vars = {{"i", 3}, {"j", 16}};
  const Expr i = var("i"), j = var("j");
  EXPECT_EQ(print_expr(simplify_index(select(binary(BinOp::Lt, i, int_imm(3)), j, i), vars)), "j");
  EXPECT_EQ(print_expr(simplify_index(select(binary(BinOp::Ge, add(i, int_imm(5)), int_imm(5)), j, i), vars)), "j");
  EXPECT_EQ(print_expr(simplify_index(select(binary(BinOp::Gt, j, int_imm(15)), j, i), vars)), "i");
  const Expr open = select(binary(BinOp::Lt, j, int_imm(8)), j, i);  // depends on j: stays
  EXPECT_EQ(print_expr(simplify_index(open, vars)), print_expr(open));
  EXPECT_EQ(print_expr(simplify_index(div_floor(add(i, int_imm(53)), int_imm(7)), vars)), "7");
  EXPECT_EQ(count_divisions(simplify_index(mod(add(i, int_imm(53)), int_imm(7)), vars)), 0);
}

// A division of a Let's variable sees the Let's value: t = (i * 16 + j) has t / 16 = i.
TEST(SimplifyIndices, LetValuesAreSeenThrough) {
  auto x = std::make_shared<Buffer>(Buffer{"x", DType::Float32, {48}, Scope::Global});
  auto y = std::make_shared<Buffer>(Buffer{"y", DType::Float32, {3}, Scope::Global});
  LoopKernel k;
  k.inputs = {x};
  k.outputs = {y};
  k.body = for_loop("i", int_imm(3), {for_loop("j", int_imm(16), {let("t", add(mul(var("i"), int_imm(16)), var("j"))),
                                                                   store(y, div_floor(var("t"), int_imm(16)), load(x, var("t")))})});
  simplify_indices(k);
  const std::string s = print_kernel(k);
  EXPECT_EQ(s.find("/ 16"), std::string::npos) << s;
  // A variable the Let reads bound anew by an inner loop: the Let's value no longer holds there
  // (seen through, t / 4 would become the inner i).
  LoopKernel r = k;
  r.body = for_loop("i", int_imm(3), {let("t", add(mul(var("i"), int_imm(4)), int_imm(1))),
                                      for_loop("i", int_imm(2), {store(y, div_floor(var("t"), int_imm(4)), float_imm(0))})});
  simplify_indices(r);
  EXPECT_NE(print_kernel(r).find("(t / 4)"), std::string::npos) << print_kernel(r);
}

// A position unravelled into dims and raveled again is the position: c·d·(e / d) + c·(e % d) is
// c·e whatever e's sign (a row of a reduction over a Concat's 7x7 parts read the element l of
// its row as ((ch·7 + l/7)·7 + l%7)).
TEST(SimplifyIndices, RavelOfUnravelIsThePosition) {
  const Vars vars = {{"ch", 4}, {"b", 3}, {"l", 16}};
  const Expr l = add(mul(var("b"), int_imm(16)), var("l"));
  const Expr src = add(mul(add(mul(var("ch"), int_imm(7)), div_floor(l, int_imm(7))), int_imm(7)), mod(l, int_imm(7)));
  const Expr s = simplify_index(src, vars);
  EXPECT_EQ(count_divisions(s), 0) << print_expr(s);
  for_all(vars, [&](const auto& env) { ASSERT_EQ(eval(s, env), eval(src, env)); });
  // Scaled pairs too; a dividend without a known range (n) as well, and a negative one.
  const Expr n = binary(BinOp::Sub, var("n"), var("l"));
  const Expr scaled = add(mul(div_floor(n, int_imm(5)), int_imm(15)), mul(mod(n, int_imm(5)), int_imm(3)));
  EXPECT_EQ(count_divisions(simplify_index(scaled, vars)), 0) << print_expr(simplify_index(scaled, vars));
  for (int64_t nv : {-23, -5, 0, 7, 40})
    for_all(vars, [&](auto env) {
      env["n"] = nv;
      ASSERT_EQ(eval(simplify_index(scaled, vars), env), eval(scaled, env));
    });
  // Coefficients that do not pair (7 and 2 for a divisor of 7) keep the divisions.
  const Expr odd = add(mul(div_floor(l, int_imm(7)), int_imm(7)), mul(mod(l, int_imm(7)), int_imm(2)));
  EXPECT_EQ(count_divisions(simplify_index(odd, vars)), 2);
}

// Multiples of the divisor leave a division whose remainder part reaches past the divisor:
// (28·l + 4·a + b) / 7 is 4·l + (4·a + b) / 7, and its % 4 is then (4·a + b) / 7 (a window
// partition composed with a grid partition, MaxViT: l is a LayerNorm row's channel, which must
// not stay inside a division).
TEST(SimplifyIndices, MultiplesOfTheDivisorLeaveTheDivision) {
  const Vars vars = {{"l", 16}, {"a", 6}, {"b", 4}};
  const Expr inner = add(add(mul(var("l"), int_imm(28)), mul(var("a"), int_imm(4))), var("b"));
  const Expr q = div_floor(inner, int_imm(7));
  const Expr src = add(mul(mod(q, int_imm(4)), int_imm(100)), mod(inner, int_imm(7)));
  const Expr s = simplify_index(src, vars);
  EXPECT_EQ(print_expr(s).find("(l * "), std::string::npos) << print_expr(s);
  EXPECT_EQ(count_divisions(s), 2) << print_expr(s);  // (4·a + b) / 7 and (4·a + b) % 7
  for_all(vars, [&](const auto& env) { ASSERT_EQ(eval(s, env), eval(src, env)); });
  EXPECT_EQ(print_expr(simplify_index(q, vars)), print_expr(add(mul(var("l"), int_imm(4)),
                                                              div_floor(add(mul(var("a"), int_imm(4)), var("b")), int_imm(7)))));
  // A remainder part that can be negative keeps the division (truncation is not floor there).
  const Expr neg = div_floor(binary(BinOp::Sub, mul(var("l"), int_imm(7)), var("b")), int_imm(7));
  EXPECT_EQ(print_expr(simplify_index(neg, vars)), print_expr(neg));
}

// Random index expressions over small ranges, checked at every point. Subtractions make some
// dividends negative, where the rules must not apply (truncation is not floor there).
TEST(SimplifyIndices, RandomExpressionsKeepTheirValues) {
  std::mt19937 rng(7);
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  int simplified = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const Vars vars = {{"a", 1 + pick(6)}, {"b", 1 + pick(6)}, {"c", 1 + pick(9)}};
    std::function<Expr(int)> gen = [&](int depth) -> Expr {
      if (depth == 0 || pick(4) == 0) {
        switch (pick(4)) {
          case 0: return int_imm(pick(7));
          default: return var(vars[size_t(pick(3))].first);
        }
      }
      const int64_t k = 1 + pick(12);
      switch (pick(10)) {
        case 9: {  // unravelled and raveled again, scaled
          const Expr x = gen(depth - 1);
          const int64_t c = 1 + pick(3);
          return add(mul(div_floor(x, int_imm(k)), int_imm(k * c)), mul(mod(x, int_imm(k)), int_imm(c)));
        }
        case 8: return add(mul(gen(depth - 1), int_imm(k)), gen(depth - 1));  // mixed radix, as unravelling builds
        case 0: return add(gen(depth - 1), gen(depth - 1));
        case 1: return binary(BinOp::Sub, gen(depth - 1), gen(depth - 1));
        case 2: return mul(gen(depth - 1), int_imm(k));
        case 3:
        case 4: return div_floor(gen(depth - 1), int_imm(k));
        case 5: return mod(gen(depth - 1), int_imm(k));
        case 6: return binary(pick(2) ? BinOp::Min : BinOp::Max, gen(depth - 1), gen(depth - 1));
        default: {
          static const BinOp cmp[] = {BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge, BinOp::Eq, BinOp::Ne};
          Expr c = binary(cmp[pick(6)], gen(depth - 1), int_imm(k));
          if (pick(3) == 0) c = binary(pick(2) ? BinOp::And : BinOp::Or, c, binary(cmp[pick(6)], gen(depth - 1), gen(depth - 1)));
          return select(c, gen(depth - 1), gen(depth - 1));
        }
      }
    };
    const Expr e = gen(5);
    const Expr s = simplify_index(e, vars);
    if (s != e) ++simplified;
    for_all(vars, [&](const auto& env) { ASSERT_EQ(eval(s, env), eval(e, env)) << print_expr(e) << "\n -> " << print_expr(s); });
  }
  EXPECT_GT(simplified, 2000);  // the rules do fire on this distribution
}

}  // namespace
}  // namespace kiln::loop
