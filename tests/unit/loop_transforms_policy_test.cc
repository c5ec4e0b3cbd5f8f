// Schedule transforms, continued (see loop_transforms_test.cc): parallelize, cache_read, and the
// default policy apply_default_schedule — on hand-built kernels, on lowered fusion groups (checked
// against the reference executor through the JIT) and, opt-in, on every group of the public models.
//
// Knobs: KILN_PRINT_NESTS=1 prints each lowered kernel before and after the policy;
// SchedDefault.PublicModelsJit runs the public models (testing::public_models; KILN_LOWER_MODELS=1 adds the big ones).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "frontend/onnx/onnx_import.h"
#include "ir/parser.h"
#include "loop_transforms_test_util.h"
#include "lower_group_test_util.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln::sched_test {
namespace {

// ---------------------------------------------------------------- parallelize

TEST(SchedParallelize, RowsOfANestAndOfAReduction) {
  LoopKernel k = nest2d(9, 13);
  LoopKernel p = k;
  parallelize(p, "i");
  EXPECT_TRUE(contains(print_kernel(p), "for i in [0, 9) parallel {\n    for j in [0, 13) {")) << print_kernel(p);
  EXPECT_TRUE(contains(codegen::emit_c({p}), "#pragma omp parallel for\n  for (int64_t i = 0;"));
  // The accumulator is declared inside the row loop: rows are independent.
  LoopKernel r = rowsum(11, 7);
  LoopKernel rp = r;
  parallelize(rp, "i");
  // After a split the outer loop of tiles is parallel; its inner loops stay as they are.
  LoopKernel s = nest2d(9, 13);
  split(s, "i", 4, TailStrategy::Guard);
  vectorize(s, "j", 4);
  parallelize(s, "i_o");
  EXPECT_TRUE(contains(print_kernel(s), "for i_o in [0, 3) parallel {")) << print_kernel(s);
  // A staged local row written and read per row is private to the iteration (allocated inside).
  auto x = gbuf("x", {6, 5}), y = gbuf("y", {6, 5});
  auto row = std::make_shared<Buffer>(Buffer{"row", DType::Float32, {5}, Scope::Local});
  LoopKernel staged = kernel("staged", {x}, {y},
                             for_loop("i", I(6), {allocate(row, {for_loop("c", I(5), {store(row, v("c"), fmul(load(x, lin("i", 5, "c")), F(3)))}),
                                                                 for_loop("d", I(5), {store(y, lin("i", 5, "d"), load(row, binary(BinOp::Sub, I(4), v("d"))))})})}));
  LoopKernel sp = staged;
  parallelize(sp, "i");
  expect_equivalent({{k, p}, {r, rp}, {nest2d(9, 13), s}, {staged, sp}}, "parallel");
}

TEST(SchedParallelize, Refusals) {
  // A reduction loop: acc lives outside it.
  auto x = gbuf("x", {64}), s = gbuf("s", {1});
  LoopKernel red = kernel("red", {x}, {s},
                          block({let("acc", F(0)), for_loop("i", I(64), {assign("acc", fadd(fv("acc"), load(x, v("i"))))}), store(s, I(0), fv("acc"))}));
  expect_refused(red, [](LoopKernel& k) { parallelize(k, "i"); }, "accumulates into 'acc' across iterations (a reduction)");
  expect_refused(rowsum(4, 8), [](LoopKernel& k) { parallelize(k, "k"); }, "it is inside loop i");
  // Rows of 5 written with a stride of 4: neighbouring rows overlap.
  auto y = gbuf("y", {40});
  LoopKernel overlap = kernel("overlap", {x}, {y},
                              for_loop("i", I(6), {for_loop("j", I(5), {store(y, lin("i", 4, "j"), load(x, lin("i", 5, "j")))})}));
  expect_refused(overlap, [](LoopKernel& k) { parallelize(k, "i"); }, "different iterations of i may touch the same element of y");
  // A local buffer allocated outside and written by every iteration at the same place.
  auto tmp = std::make_shared<Buffer>(Buffer{"tmp", DType::Float32, {5}, Scope::Local});
  LoopKernel shared = kernel("shared", {x}, {y},
                             allocate(tmp, {for_loop("i", I(6), {for_loop("j", I(5), {store(tmp, v("j"), load(x, lin("i", 5, "j"))),
                                                                                     store(y, lin("i", 5, "j"), load(tmp, v("j")))})})}));
  expect_refused(shared, [](LoopKernel& k) { parallelize(k, "i"); }, "may touch the same element of tmp");
  LoopKernel twice = nest2d(4, 4);
  parallelize(twice, "i");
  expect_refused(twice, [](LoopKernel& k) { parallelize(k, "i"); }, "it is already parallel");
  LoopKernel nested = nest2d(4, 4);
  nested.body->body[0]->for_kind = ForKind::Parallel;  // a hand-built nest with a parallel inner loop
  expect_refused(nested, [](LoopKernel& k) { parallelize(k, "i"); }, "loop j inside it is parallel (one parallel level)");
}

// ---------------------------------------------------------------- cache_read

TEST(SchedCacheRead, RowOfAMatMulOperand) {
  LoopKernel k = matmul(4, 5, 6);
  LoopKernel c = k;
  EXPECT_EQ(cache_read(c, "a", "j"), "a_local");
  EXPECT_EQ(print_stmt(c.body),
            "for i in [0, 4) {\n"
            "  allocate a_local: f32[5] local {\n"
            "    for a_c1 in [0, 5) {\n"
            "      a_local[a_c1] = a[((i * 5) + a_c1)]\n"
            "    }\n"
            "    for j in [0, 6) {\n"
            "      f32 acc = 0.0f\n"
            "      for t in [0, 5) {\n"
            "        acc = (acc + (a_local[t] * w[((t * 6) + j)]))\n"
            "      }\n"
            "      y[((i * 6) + j)] = acc\n"
            "    }\n"
            "  }\n"
            "}\n");
  // The whole weight, at the outermost loop: a 5x6 tile, in bounds without a guard.
  LoopKernel w = k;
  cache_read(w, "w", "i");
  EXPECT_TRUE(contains(print_kernel(w), "allocate w_local: f32[5,6] local {")) << print_kernel(w);
  EXPECT_TRUE(contains(print_kernel(w), "w_local[((t * 6) + j)]")) << print_kernel(w);
  EXPECT_FALSE(contains(print_kernel(w), "if ")) << print_kernel(w);
  expect_equivalent({{k, c}, {k, w}}, "cache_mm");
}

TEST(SchedCacheRead, SlidingWindowAndGuardedTiles) {
  // A window of 3 + 4 - 1 inputs per tile of 4 outputs; the last tile passes the end of x.
  LoopKernel k = conv1d(10, 3);
  LoopKernel c = k;
  split(c, "o", 4, TailStrategy::Guard);
  cache_read(c, "x", "o_i");
  const std::string s = print_kernel(c);
  EXPECT_TRUE(contains(s, "allocate x_local: f32[6] local {")) << s;
  EXPECT_TRUE(contains(s, "x_local[x_c0] = x[((o_o * 4) + x_c0)]")) << s;
  EXPECT_TRUE(contains(s, "if (((o_o * 4) + x_c0) < 12) {")) << s;
  EXPECT_TRUE(contains(s, "x_local[(o_i + t)]")) << s;
  expect_equivalent({{k, c}}, "cache_conv");
}

TEST(SchedCacheRead, Refusals) {
  // The loop writes the buffer it would cache (an in-place update).
  auto y = gbuf("y", {4, 6});
  LoopKernel inplace = kernel("inplace", {}, {y}, for_loop("i", I(4), {for_loop("j", I(6), {store(y, lin("i", 6, "j"), fmul(load(y, lin("i", 6, "j")), F(2)))})}));
  expect_refused(inplace, [](LoopKernel& k) { cache_read(k, "y", "j"); }, "cannot cache y at loop j: the loop writes it");
  auto x = gbuf("x", {8}), o = gbuf("o", {16});
  LoopKernel half = kernel("half", {x}, {o}, for_loop("i", I(16), {store(o, v("i"), load(x, div_floor(v("i"), I(2))))}));
  expect_refused(half, [](LoopKernel& k) { cache_read(k, "x", "i"); }, "'(i / 2)' is not affine");
  auto z = gbuf("z", {4, 4, 2});
  Stmt body = store(z, add(mul(lin("i", 4, "q"), I(2)), v("j")), fadd(load(x, add(v("i"), v("j"))), load(x, add(v("q"), v("j")))));
  LoopKernel two = kernel("two", {x}, {z}, for_loop("i", I(4), {for_loop("q", I(4), {for_loop("j", I(2), {body})})}));
  expect_refused(two, [](LoopKernel& k) { cache_read(k, "x", "j"); }, "are at unrelated offsets");
  // Tiles of 8 over 10 elements: the box of both tiles (16) would exceed x.
  LoopKernel tiles = ew1d(10);
  split(tiles, "i", 8, TailStrategy::Guard);
  expect_refused(tiles, [](LoopKernel& k) { cache_read(k, "x", "i_o"); }, "its tile is larger than the buffer");
  expect_refused(matmul(2, 3, 4), [](LoopKernel& k) { cache_read(k, "y", "j"); }, "the loop writes it");
  expect_refused(matmul(2, 3, 4), [](LoopKernel& k) { cache_read(k, "nope", "j"); }, "has no global buffer 'nope'");
  auto b = gbuf("b", {4});
  LoopKernel unread = kernel("unread", {x, b}, {o}, for_loop("i", I(8), {store(o, v("i"), load(x, v("i")))}));
  expect_refused(unread, [](LoopKernel& k) { cache_read(k, "b", "i"); }, "loop i does not read b");
}

// ---------------------------------------------------------------- default policy

TEST(SchedDefault, ElementwiseNest) {
  Schedule sch;
  sch.vector_width = 16;
  sch.unroll = 4;
  sch.parallel_min_work = 32768;
  LoopKernel k = nest2d(300, 200);
  LoopKernel d = k;
  apply_default_schedule(d, sch);
  EXPECT_EQ(print_stmt(d.body),
            "for i in [0, 300) parallel {\n"
            "  for j_o in [0, 12) {\n"
            "    for j_i in [0, 16) vectorized {\n"
            "      y[((i * 200) + ((j_o * 16) + j_i))] = max((x[((i * 200) + ((j_o * 16) + j_i))] + b[((j_o * 16) + j_i)]), 0.0f)\n"
            "    }\n"
            "  }\n"
            "  for j_t in [0, 8) {\n"
            "    y[((i * 200) + (192 + j_t))] = max((x[((i * 200) + (192 + j_t))] + b[(192 + j_t)]), 0.0f)\n"
            "  }\n"
            "}\n");
  // Below the work threshold nothing forks; a flat loop's tiles are what gets parallelized.
  LoopKernel small = nest2d(3, 200);
  apply_default_schedule(small, sch);
  EXPECT_FALSE(contains(print_kernel(small), "parallel")) << print_kernel(small);
  LoopKernel flat = ew1d(40000), flatd = flat;
  apply_default_schedule(flatd, sch);
  EXPECT_TRUE(contains(print_kernel(flatd), "for i_o in [0, 2500) parallel {\n    for i_i in [0, 16) vectorized {")) << print_kernel(flatd);
  expect_equivalent({{k, d}, {flat, flatd}}, "default_ew");
}

// A flat loop whose body unravels its position, y[i] = x[i / 16] + b[i % 16] (a Flatten or
// Reshape read through), vectorized by 16: after the strip-mining the position is i_o·16 + i_i
// and the unravel is i_o and i_i, so no lane divides. The divided form is also what GCC 12.2
// miscompiled under AVX-512 (fuzz seed 317506, tests/fuzz/regressions/c12_cumsum_flatten_reducel1):
// nested selects on lane-varying int64 quotients.
TEST(SchedDefault, StripMinedUnravelIsLaneInvariant) {
  Schedule sch;
  sch.vector_width = 16;
  sch.unroll = 4;
  sch.parallel_min_work = 1 << 30;
  auto x = gbuf("x", {4}), b = gbuf("b", {16}), y = gbuf("y", {64});
  Expr q = binary(BinOp::Div, v("i"), I(16)), r = binary(BinOp::Mod, v("i"), I(16));
  LoopKernel k = kernel("unravel", {x, b}, {y}, for_loop("i", I(64), {store(y, v("i"), fadd(load(x, q), load(b, r)))}));
  LoopKernel d = k;
  apply_default_schedule(d, sch);
  EXPECT_EQ(print_stmt(d.body),
            "for i_o in [0, 4) {\n"
            "  for i_i in [0, 16) vectorized {\n"
            "    y[((i_o * 16) + i_i)] = (x[i_o] + b[i_i])\n"
            "  }\n"
            "}\n");
  expect_equivalent({{k, d}}, "default_unravel");
}

TEST(SchedDefault, ReductionsAndMarkedLoops) {
  Schedule sch;
  sch.vector_width = 8;
  sch.unroll = 4;
  sch.parallel_min_work = 64;
  // The k loop accumulates (stays serial); rows are parallel.
  LoopKernel r = rowsum(40, 9), rd = r;
  apply_default_schedule(rd, sch);
  EXPECT_TRUE(contains(print_kernel(rd), "for i in [0, 40) parallel {\n    f32 acc = 0.0f\n    for k in [0, 9) {")) << print_kernel(rd);
  // A short tap loop is unrolled.
  LoopKernel c = conv1d(50, 3), cd = c;
  apply_default_schedule(cd, sch);
  EXPECT_TRUE(contains(print_kernel(cd), "for o in [0, 50) parallel {")) << print_kernel(cd);
  EXPECT_TRUE(contains(print_kernel(cd), "for t in [0, 3) unrolled {")) << print_kernel(cd);
  // A whole-tensor reduction cannot be parallelized; the policy leaves it serial.
  auto x = gbuf("x", {4, 64}), s = gbuf("s", {1});
  LoopKernel red = kernel("red", {x}, {s},
                          block({let("acc", F(0)), for_loop("i", I(4), {for_loop("j", I(64), {assign("acc", fadd(fv("acc"), load(x, lin("i", 64, "j"))))})}),
                                 store(s, I(0), fv("acc"))}));
  LoopKernel redd = red;
  apply_default_schedule(redd, sch);
  EXPECT_EQ(print_kernel(redd), print_kernel(red));
  // Loops a lowering already marked are left alone.
  LoopKernel m = nest2d(64, 24);
  auto j = std::make_shared<StmtNode>(*m.body->body[0]);
  j->for_kind = ForKind::Unrolled;
  m.body = for_loop("i", I(64), {j});
  LoopKernel md = m;
  apply_default_schedule(md, sch);
  EXPECT_TRUE(contains(print_kernel(md), "for i in [0, 64) parallel {\n    for j in [0, 24) unrolled {")) << print_kernel(md);
  expect_equivalent({{r, rd}, {c, cd}, {m, md}}, "default_red");
}

// Lowered fusion groups (elementwise with broadcast, softmax rows, a column reduction) scheduled by
// the policy with small thresholds: the interpreter agrees before and after, and the compiled
// kernels match the reference executor.
TEST(SchedDefault, LoweredGroups) {
  const std::vector<std::string> graphs = {
      R"(graph main opset 17 (%x: f32[37,45], %b: f32[45]) -> (%y) {
  %s: f32[37,45] = Add(%x, %b) name="add"
  %y: f32[37,45] = Relu(%s) name="relu"
}
)",
      R"(graph main opset 17 (%x: f32[6,33]) -> (%y) {
  %ax = constant i64[1] [-1]
  %m: f32[6,1] = ReduceMax(%x, %ax) {keepdims=1} name="max"
  %s: f32[6,33] = Sub(%x, %m) name="sub"
  %e: f32[6,33] = Exp(%s) name="exp"
  %z: f32[6,1] = ReduceSum(%e, %ax) {keepdims=1} name="sum"
  %y: f32[6,33] = Div(%e, %z) name="div"
}
)",
      R"(graph main opset 17 (%x: f32[3,4,21]) -> (%y) {
  %ax = constant i64[1] [1]
  %y: f32[3,21] = ReduceSum(%x, %ax) {keepdims=0} name="sum"
}
)"};
  Schedule sch;
  sch.vector_width = 8;
  sch.unroll = 4;
  sch.parallel_min_work = 16;
  sch.reciprocal_divisors = false;  // a numerics choice, not a loop transform (reciprocal_divisors_test.cc)
  testing::KernelBatch batch;
  int changed = 0;
  for (size_t gi = 0; gi < graphs.size(); ++gi) {
    auto g = parse_graph(graphs[gi]);
    const TensorMap inputs = testing::random_inputs(*g, 5, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : partition(*g, {}).groups) {
      auto lg = lower_group(grp, "g" + std::to_string(gi) + "_" + grp.name);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      LoopKernel after = *lg.kernel;
      apply_default_schedule(after, sch);
      changed += print_kernel(after) != print_kernel(*lg.kernel);
      if (std::getenv("KILN_PRINT_NESTS")) std::cout << print_kernel(*lg.kernel) << print_kernel(after);
      std::vector<Tensor> ins, a, b;
      for (const Value* val : grp.inputs) ins.push_back(val->is_constant() ? val->constant() : values.at(val));
      for (const Value* val : grp.outputs) {
        a.emplace_back(val->dtype(), val->shape());
        b.emplace_back(val->dtype(), val->shape());
      }
      std::vector<Tensor*> ip, ap, bp;
      for (auto& t : ins) ip.push_back(&t);
      for (auto& t : a) ap.push_back(&t);
      for (auto& t : b) bp.push_back(&t);
      interpret(*lg.kernel, ip, ap);
      interpret(after, ip, bp);
      expect_same(b, a, "interpreted " + after.name);
      batch.add(std::move(after), grp, values);
    }
  }
  EXPECT_GE(changed, 2);
  batch.check("sched_lowered");
}

// Every group of the public models lowered, scheduled by the policy (small thresholds, so most
// nests are transformed) and compiled: outputs must match the reference executor (demo and
// mlp_ln; KILN_LOWER_MODELS=1 adds resnet18, mobilenet_v2 and the encoder).
TEST(SchedDefault, PublicModelsJit) {
  Schedule sch;
  sch.vector_width = 8;
  sch.parallel_min_work = 256;
  for (auto& [m, g] : testing::public_models(testing::public_model_names())) {
    SCOPED_TRACE(m);
    const TensorMap inputs = testing::random_inputs(*g, 13, {}, false);
    auto values = run_reference_values(*g, inputs);
    testing::KernelBatch batch;
    int lowered = 0, changed = 0;
    for (const auto& grp : partition(*g).groups) {
      auto lg = lower_group(grp, std::string(m) + "_" + grp.name);
      if (!lg.kernel) continue;
      ++lowered;
      LoopKernel after = *lg.kernel;
      apply_default_schedule(after, sch);
      changed += print_kernel(after) != print_kernel(*lg.kernel);
      if (std::getenv("KILN_PRINT_NESTS")) std::cout << print_kernel(*lg.kernel) << print_kernel(after);
      batch.add(std::move(after), grp, values);
    }
    std::cout << "[ schedule ] " << m << ": " << changed << " of " << lowered << " lowered kernels rescheduled\n";
    // The groups are lowered under the default numerics (reordered conv sums, FMA micro-kernels):
    // compared within the contract, not bit for bit.
    batch.check(std::string("sched_") + m, /*contract=*/true);
  }
}

}  // namespace
}  // namespace kiln::sched_test
