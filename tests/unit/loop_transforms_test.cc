// Schedule transforms (src/loop/loop_transforms.h) and the affine index analysis (affine.h):
// split, reorder, vectorize, unroll. Small kernels built by hand are transformed; each case checks
// the printed nest, that the kernel before and after gives bit-identical outputs in the loop
// interpreter and compiled through the C emitter and the JIT (extents not divisible by the factor
// included), and every refusal — with the kernel left as it was. parallelize, cache_read and the
// default policy are in loop_transforms_policy_test.cc.
#include <gtest/gtest.h>

#include "loop/affine.h"
#include "loop_transforms_test_util.h"

namespace kiln::sched_test {
namespace {

// ---------------------------------------------------------------- affine analysis

TEST(SchedAffine, LinearFormsOfIndices) {
  const AffineScope scope{{"i", "j"}, {}};
  // ((i * 3 + j) * 2 - (j - 5)) = 6i + j + 5
  Expr e = binary(BinOp::Sub, mul(lin("i", 3, "j"), I(2)), binary(BinOp::Sub, v("j"), I(5)));
  auto f = affine_form(e, scope);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->constant, 5);
  EXPECT_EQ(f->coef, (std::map<std::string, int64_t>{{"i", 6}, {"j", 1}}));
  EXPECT_EQ(print_expr(f->to_expr()), "(((i * 6) + j) + 5)");
  // j - j cancels; neg scales.
  f = affine_form(binary(BinOp::Sub, v("j"), v("j")), scope);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->coef.empty());
  f = affine_form(unary(UnOp::Neg, mul(v("i"), I(4))), scope);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->coef_of("i"), -4);
}

// Positions are compared as affine functions, never as printed text (STYLE.md 15).
TEST(SchedAffine, PositionKeysCompareAsMath) {
  // (i * 4 + j) * 2 and 2j + 8i + 0 are one position; i + 1 is another.
  Expr a = mul(lin("i", 4, "j"), I(2));
  Expr b = add(add(mul(v("j"), I(2)), mul(I(8), v("i"))), I(0));
  EXPECT_TRUE(same_position(a, b)) << position_key(a) << " vs " << position_key(b);
  EXPECT_FALSE(same_position(v("i"), add(v("i"), I(1))));
  // Non-linear parts are atoms whose operands are keyed the same way.
  Expr d1 = div_floor(lin("i", 4, "j"), I(3)), d2 = div_floor(add(v("j"), mul(v("i"), I(4))), I(3));
  EXPECT_TRUE(same_position(add(d1, v("j")), add(v("j"), d2)));
  EXPECT_FALSE(same_position(d1, mod(lin("i", 4, "j"), I(3))));
  auto table = gbuf("table", {8});
  EXPECT_TRUE(same_position(cast(DType::Int64, load(table, add(v("i"), v("j")))),
                            cast(DType::Int64, load(table, add(v("j"), v("i"))))));
}

TEST(SchedAffine, InvariantSubexpressionsAreAtoms) {
  auto table = gbuf("table", {8});
  const AffineScope scope{{"j"}, {}};
  // (i0 / 3) and table[i0] do not vary with j: atoms; their keys are the printed expressions.
  Expr e = add(add(mul(div_floor(v("i0"), I(3)), I(8)), cast(DType::Int64, load(table, v("i0")))), v("j"));
  auto f = affine_form(e, scope);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->coef, (std::map<std::string, int64_t>{{"(i0 / 3)", 8}, {"i64(table[i0])", 1}, {"j", 1}}));
  // A load from a buffer the region writes is never invariant.
  const AffineScope written{{"j"}, {table.get()}};
  std::string why;
  EXPECT_FALSE(affine_form(e, written, &why));
  EXPECT_TRUE(contains(why, "is not affine")) << why;
}

TEST(SchedAffine, NonLinearUsesOfLoopVariablesFail) {
  const AffineScope scope{{"i", "j"}, {}};
  const std::vector<std::pair<Expr, std::string>> bad = {
      {div_floor(v("i"), I(2)), "(i / 2)"},
      {mod(v("i"), I(4)), "(i % 4)"},
      {binary(BinOp::Min, v("i"), I(3)), "min(i, 3)"},
      {binary(BinOp::Max, v("i"), v("j")), "max(i, j)"},
      {select(binary(BinOp::Lt, v("i"), I(2)), v("i"), I(0)), "select("},
      {mul(v("i"), v("j")), "multiplies two varying terms"},
      {float_imm(1.5), "is not an integer"},
  };
  for (const auto& [e, msg] : bad) {
    std::string why;
    EXPECT_FALSE(affine_form(e, scope, &why)) << print_expr(e);
    EXPECT_TRUE(contains(why, msg)) << why;
  }
  std::string why;
  EXPECT_FALSE(affine_form(mul(mul(v("i"), I(INT64_MAX / 2 + 1)), I(2)), scope, &why));
  EXPECT_TRUE(contains(why, "overflows")) << why;
  EXPECT_FALSE(affine_form(add(mul(v("i"), I(INT64_MAX)), mul(v("i"), I(INT64_MAX))), scope, &why));
}

TEST(SchedAffine, BoundsAndSeparation) {
  const AffineScope scope{{"i", "j"}, {}};
  auto f = affine_form(add(binary(BinOp::Sub, I(4), mul(v("i"), I(3))), v("j")), scope);  // 4 - 3i + j
  ASSERT_TRUE(f);
  auto b = affine_bounds(*f, {{"i", 5}, {"j", 2}});
  ASSERT_TRUE(b);
  EXPECT_EQ(b->lo, 4 - 12);
  EXPECT_EQ(b->hi, 4 + 1);
  EXPECT_FALSE(affine_bounds(*f, {{"i", 5}}));  // j's range unknown
  // Row-major 5x7: injective; windows of 7 overlap, of 6 (span) do not.
  EXPECT_TRUE(separates({{"i", {7, 5}}, {"j", {1, 7}}}, 0));
  EXPECT_FALSE(separates({{"i", {6, 5}}, {"j", {1, 7}}}, 0));
  EXPECT_TRUE(separates({{"i", {8, 5}}}, 7));
  EXPECT_FALSE(separates({{"i", {8, 5}}}, 8));
  EXPECT_FALSE(separates({{"i", {0, 5}}}, 0));  // the same element every iteration
  EXPECT_TRUE(separates({{"i", {0, 1}}}, 0));   // one iteration
  EXPECT_TRUE(separates({{"i", {-3, 4}}, {"j", {1, 3}}}, 0));
  EXPECT_TRUE(separates({{"i", {1, INT64_MAX}}}, 0));  // unknown extent of the largest term
}

// ---------------------------------------------------------------- split

TEST(SchedSplit, GuardAndRemainderGolden) {
  LoopKernel k = ew1d(10);
  LoopKernel g = k;
  auto n = split(g, "i", 4, TailStrategy::Guard);
  EXPECT_EQ(n.outer, "i_o");
  EXPECT_EQ(n.inner, "i_i");
  EXPECT_EQ(n.tail, "");
  EXPECT_EQ(print_stmt(g.body),
            "for i_o in [0, 3) {\n"
            "  for i_i in [0, 4) {\n"
            "    if (((i_o * 4) + i_i) < 10) {\n"
            "      y[((i_o * 4) + i_i)] = ((x[((i_o * 4) + i_i)] * 2.0f) + 1.0f)\n"
            "    }\n"
            "  }\n"
            "}\n");
  LoopKernel r = k;
  n = split(r, "i", 4, TailStrategy::RemainderLoop);
  EXPECT_EQ(n.tail, "i_t");
  EXPECT_EQ(print_stmt(r.body),
            "for i_o in [0, 2) {\n"
            "  for i_i in [0, 4) {\n"
            "    y[((i_o * 4) + i_i)] = ((x[((i_o * 4) + i_i)] * 2.0f) + 1.0f)\n"
            "  }\n"
            "}\n"
            "for i_t in [0, 2) {\n"
            "  y[(8 + i_t)] = ((x[(8 + i_t)] * 2.0f) + 1.0f)\n"
            "}\n");
  // A factor that divides the extent needs neither.
  LoopKernel d = ew1d(12);
  n = split(d, "i", 4, TailStrategy::RemainderLoop);
  EXPECT_EQ(n.tail, "");
  EXPECT_FALSE(contains(print_kernel(d), "if "));
  EXPECT_TRUE(contains(print_kernel(d), "for i_o in [0, 3) {"));
  // The original kernel is untouched (transforms copy the path they change).
  EXPECT_EQ(print_stmt(k.body), print_stmt(ew1d(10).body));
  expect_equivalent({{k, g}, {k, r}, {ew1d(12), d}}, "split1d");
}

TEST(SchedSplit, OuterLoopOfANestAndKinds) {
  LoopKernel k = nest2d(7, 5);
  LoopKernel r = k;
  split(r, "i", 3, TailStrategy::RemainderLoop);
  const std::string s = print_kernel(r);
  // The remainder copy's inner loop gets its own name: loops are addressed by name.
  EXPECT_TRUE(contains(s, "for i_t in [0, 1) {\n    for j_t in [0, 5) {")) << s;
  EXPECT_TRUE(contains(s, "y[(((6 + i_t) * 5) + j_t)]")) << s;
  // A parallel loop stays parallel outside; a vectorized one stays vectorized inside.
  LoopKernel p = k;
  parallelize(p, "i");
  split(p, "i", 2, TailStrategy::Guard);
  EXPECT_TRUE(contains(print_kernel(p), "for i_o in [0, 4) parallel {\n    for i_i in [0, 2) {")) << print_kernel(p);
  LoopKernel vk = k;
  vectorize(vk, "j", 8);
  split(vk, "j", 2, TailStrategy::Guard);
  EXPECT_TRUE(contains(print_kernel(vk), "for j_o in [0, 3) {\n      for j_i in [0, 2) vectorized {")) << print_kernel(vk);
  expect_equivalent({{k, r}, {k, p}, {k, vk}}, "split2d");
}

TEST(SchedSplit, NonConstantExtents) {
  LoopKernel k = triangle(9);
  LoopKernel g = k, r = k;
  split(g, "j", 4, TailStrategy::Guard);
  split(r, "j", 4, TailStrategy::RemainderLoop);
  EXPECT_TRUE(contains(print_kernel(g), "for j_o in [0, (((i + 1) + 3) / 4)) {")) << print_kernel(g);
  EXPECT_TRUE(contains(print_kernel(g), "if (((j_o * 4) + j_i) < (i + 1)) {")) << print_kernel(g);
  EXPECT_TRUE(contains(print_kernel(r), "for j_o in [0, ((i + 1) / 4)) {")) << print_kernel(r);
  EXPECT_TRUE(contains(print_kernel(r), "for j_t in [0, ((i + 1) - (((i + 1) / 4) * 4))) {")) << print_kernel(r);
  expect_equivalent({{k, g}, {k, r}}, "split_tri");
}

TEST(SchedSplit, Refusals) {
  expect_refused(ew1d(10), [](LoopKernel& k) { split(k, "i", 0); }, "must be >= 1");
  expect_refused(ew1d(10), [](LoopKernel& k) { split(k, "q", 2); }, "has no loop 'q'");
  // Two loops of one name cannot be addressed.
  LoopKernel two = ew1d(4);
  two.body = block({two.body, two.body});
  expect_refused(two, [](LoopKernel& k) { split(k, "i", 2); }, "is not unique");
}

// ---------------------------------------------------------------- reorder

TEST(SchedReorder, InterchangesAPerfectNest) {
  LoopKernel k = transpose(5, 7);
  LoopKernel r = k;
  reorder(r, {"j", "i"});
  EXPECT_EQ(print_stmt(r.body),
            "for j in [0, 7) {\n"
            "  for i in [0, 5) {\n"
            "    y[((i * 7) + j)] = x[((j * 5) + i)]\n"
            "  }\n"
            "}\n");
  // An in-place update at the same element, a Let and an inner loop inside the body are fine.
  auto y = gbuf("y", {4, 6}), x = gbuf("x", {4, 6, 3});
  Stmt inner = for_loop("c", I(3), {assign("s", fadd(fv("s"), load(x, add(mul(lin("i", 6, "j"), I(3)), v("c")))))});
  LoopKernel u = kernel("inplace", {x}, {y},
                        for_loop("i", I(4), {for_loop("j", I(6), {let("s", load(y, lin("i", 6, "j"))), inner,
                                                                   store(y, lin("i", 6, "j"), fv("s"))})}));
  LoopKernel ur = u;
  reorder(ur, {"j", "i"});
  EXPECT_TRUE(contains(print_kernel(ur), "for j in [0, 6) {\n    for i in [0, 4) {\n      f32 s = y[")) << print_kernel(ur);
  // Three loops, rotated.
  auto z = gbuf("z", {2, 3, 4}), w = gbuf("w", {2, 3, 4});
  LoopKernel t3 = kernel("rot", {w}, {z},
                         for_loop("a", I(2), {for_loop("b", I(3), {for_loop("c", I(4), {store(z, add(mul(lin("a", 3, "b"), I(4)), v("c")),
                                                                                               fmul(load(w, add(mul(lin("a", 3, "b"), I(4)), v("c"))), F(0.5)))})})}));
  LoopKernel t3r = t3;
  reorder(t3r, {"c", "a", "b"});
  EXPECT_TRUE(contains(print_kernel(t3r), "for c in [0, 4) {\n    for a in [0, 2) {\n      for b in [0, 3) {")) << print_kernel(t3r);
  expect_equivalent({{k, r}, {u, ur}, {t3, t3r}}, "reorder");
}

TEST(SchedReorder, Refusals) {
  // Across a dependence: y[i, j] = y[i, j + 1] * 2 reads what another iteration writes.
  auto y = gbuf("y", {4, 6});
  LoopKernel dep = kernel("dep", {}, {y},
                          for_loop("i", I(4), {for_loop("j", I(5), {store(y, lin("i", 6, "j"), fmul(load(y, add(lin("i", 6, "j"), I(1))), F(2)))})}));
  expect_refused(dep, [](LoopKernel& k) { reorder(k, {"j", "i"}); }, "may touch the same element of y");
  // Every i writes the same y[j].
  auto x = gbuf("x", {4, 6}), o = gbuf("o", {6});
  LoopKernel same = kernel("same", {x}, {o}, for_loop("i", I(4), {for_loop("j", I(6), {store(o, v("j"), load(x, lin("i", 6, "j")))})}));
  expect_refused(same, [](LoopKernel& k) { reorder(k, {"j", "i"}); }, "may touch the same element of o");
  // Not a perfect nest: the Let sits between the loops.
  expect_refused(matmul(2, 3, 4), [](LoopKernel& k) { reorder(k, {"t", "j"}); }, "are not a perfect nest");
  // Extent of j depends on i.
  expect_refused(triangle(4), [](LoopKernel& k) { reorder(k, {"j", "i"}); }, "depends on another loop");
  // A reduction over the whole nest: its order is the summation order.
  auto s = gbuf("s", {1});
  LoopKernel red = kernel("red", {x}, {s},
                          block({let("acc", F(0)), for_loop("i", I(4), {for_loop("j", I(6), {assign("acc", fadd(fv("acc"), load(x, lin("i", 6, "j"))))})}),
                                 store(s, I(0), fv("acc"))}));
  expect_refused(red, [](LoopKernel& k) { reorder(k, {"j", "i"}); }, "accumulates into 'acc'");
  // A vectorized loop may not leave the innermost position.
  LoopKernel vk = transpose(3, 4);
  vectorize(vk, "j", 4);
  expect_refused(vk, [](LoopKernel& k) { reorder(k, {"j", "i"}); }, "cannot move loop j: it is vectorized");
  expect_refused(transpose(3, 4), [](LoopKernel& k) { reorder(k, {"i"}); }, "at least two loops");
  expect_refused(transpose(3, 4), [](LoopKernel& k) { reorder(k, {"i", "i"}); }, "names a loop twice");
}

// ---------------------------------------------------------------- vectorize

TEST(SchedVectorize, SplitsWithARemainderLoop) {
  LoopKernel k = nest2d(3, 37);
  LoopKernel vk = k;
  auto n = vectorize(vk, "j", 8);
  EXPECT_EQ(n.inner, "j_i");
  EXPECT_EQ(n.tail, "j_t");
  EXPECT_EQ(print_stmt(vk.body),
            "for i in [0, 3) {\n"
            "  for j_o in [0, 4) {\n"
            "    for j_i in [0, 8) vectorized {\n"
            "      y[((i * 37) + ((j_o * 8) + j_i))] = max((x[((i * 37) + ((j_o * 8) + j_i))] + b[((j_o * 8) + j_i)]), 0.0f)\n"
            "    }\n"
            "  }\n"
            "  for j_t in [0, 5) {\n"
            "    y[((i * 37) + (32 + j_t))] = max((x[((i * 37) + (32 + j_t))] + b[(32 + j_t)]), 0.0f)\n"
            "  }\n"
            "}\n");
  // A loop no longer than the width is only marked; a gather (non-contiguous loads) is fine.
  LoopKernel t = transpose(4, 6);
  LoopKernel tv = t;
  n = vectorize(tv, "j", 8);
  EXPECT_EQ(n.outer, "");
  EXPECT_TRUE(contains(print_kernel(tv), "for j in [0, 6) vectorized {")) << print_kernel(tv);
  // A width that divides the extent: no remainder loop.
  LoopKernel e32 = ew1d(32), e32v = e32;
  n = vectorize(e32v, "i", 8);
  EXPECT_EQ(n.tail, "");
  EXPECT_TRUE(contains(print_kernel(e32v), "for i_o in [0, 4) {\n    for i_i in [0, 8) vectorized {")) << print_kernel(e32v);
  LoopKernel e37 = ew1d(37), e37v = e37;
  vectorize(e37v, "i", 16);
  expect_equivalent({{k, vk}, {t, tv}, {e32, e32v}, {e37, e37v}}, "vectorize");
}

TEST(SchedVectorize, Refusals) {
  expect_refused(nest2d(3, 8), [](LoopKernel& k) { vectorize(k, "i", 8); }, "loop i: it is not innermost (loop j is inside)");
  // y[i, j] = x[j, i] vectorized along i stores with stride 6.
  LoopKernel by_column = transpose(4, 6);
  reorder(by_column, {"j", "i"});
  expect_refused(by_column, [](LoopKernel& k) { vectorize(k, "i", 4); },
                 "store y[((i * 6) + j)] is not contiguous in i (coefficient 6)");
  auto x = gbuf("x", {16}), y = gbuf("y", {32});
  LoopKernel strided = kernel("strided", {x}, {y}, for_loop("i", I(16), {store(y, mul(v("i"), I(2)), load(x, v("i")))}));
  expect_refused(strided, [](LoopKernel& k) { vectorize(k, "i", 4); }, "(coefficient 2)");
  LoopKernel clamp = kernel("clamp", {x}, {y}, for_loop("i", I(16), {store(y, binary(BinOp::Min, v("i"), I(9)), load(x, v("i")))}));
  expect_refused(clamp, [](LoopKernel& k) { vectorize(k, "i", 4); }, "min(i, 9)' is not affine in the loop variables");
  // The reduction loop of a row sum.
  expect_refused(rowsum(4, 32), [](LoopKernel& k) { vectorize(k, "k", 8); }, "accumulates into 'acc' across iterations");
  // y[i] = y[i + 1] + x[i]: reads what the next iteration... was to write before.
  auto z = gbuf("z", {17});
  LoopKernel shift = kernel("shift", {x}, {z}, for_loop("i", I(16), {store(z, v("i"), fadd(load(z, add(v("i"), I(1))), load(x, v("i"))))}));
  expect_refused(shift, [](LoopKernel& k) { vectorize(k, "i", 4); }, "may touch the same element of z");
  // The index depends on a scalar the loop computes.
  auto idx = std::make_shared<Buffer>(Buffer{"idx", DType::Int64, {16}, Scope::Global});
  LoopKernel scatter = kernel("scatter", {idx, x}, {y},
                              for_loop("i", I(16), {let("p", load(idx, v("i"))), store(y, add(v("p"), v("i")), load(x, v("i")))}));
  expect_refused(scatter, [](LoopKernel& k) { vectorize(k, "i", 4); }, "depends on scalar 'p' computed in the loop");
  LoopKernel par = ew1d(64);
  parallelize(par, "i");
  expect_refused(par, [](LoopKernel& k) { vectorize(k, "i", 8); }, "it is already parallel");
  expect_refused(ew1d(64), [](LoopKernel& k) { vectorize(k, "i", 1); }, "must be >= 2");
  LoopKernel outer = nest2d(4, 8);
  outer.body = for_loop("i", I(4), outer.body->body, ForKind::Vectorized);  // marked by hand
  expect_refused(outer, [](LoopKernel& k) { vectorize(k, "j", 4); }, "it is inside vectorized loop i");
  LoopKernel call = kernel("call", {x}, {y}, for_loop("i", I(16), {call_stmt("kiln_ukernel", {v("i")})}));
  expect_refused(call, [](LoopKernel& k) { vectorize(k, "i", 4); }, "calls a micro-kernel");
}

// ---------------------------------------------------------------- unroll

TEST(SchedUnroll, MarksShortLoopsAndSplitsLongOnes) {
  LoopKernel k = conv1d(10, 3);
  LoopKernel u = k;
  auto n = unroll(u, "t", 4);
  EXPECT_EQ(n.outer, "");
  EXPECT_TRUE(contains(print_kernel(u), "for t in [0, 3) unrolled {")) << print_kernel(u);
  LoopKernel l = k;
  n = unroll(l, "o", 4);
  EXPECT_EQ(n.inner, "o_i");
  const std::string s = print_kernel(l);
  EXPECT_TRUE(contains(s, "for o_o in [0, 3) {\n    for o_i in [0, 4) unrolled {\n      if (((o_o * 4) + o_i) < 10) {\n        f32 acc = 0.0f\n")) << s;
  const std::string c = codegen::emit_c({l});
  EXPECT_TRUE(contains(c, "#pragma GCC unroll 4\n")) << c;
  expect_refused(u, [](LoopKernel& k) { unroll(k, "t", 4); }, "it is already unrolled");
  expect_refused(k, [](LoopKernel& k) { unroll(k, "t", 0); }, "must be >= 1");
  expect_equivalent({{k, u}, {k, l}}, "unroll");
}

}  // namespace
}  // namespace kiln::sched_test
