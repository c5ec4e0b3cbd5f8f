// partition_loops (src/loop/partition_loops.h) with simplify_indices: loops split where a select's
// condition changes, the selects and clamps then folded away; and unswitch_selects
// (src/loop/unswitch_selects.h): innermost loops specialised on conditions they do not change. The
// iterations and their results are unchanged (the interpreter gives the same bits before and
// after), loop names stay unique, and what cannot be decided or would copy too much is left alone.
#include <gtest/gtest.h>

#include <iterator>
#include <regex>
#include <sstream>

#include <cstring>
#include <random>
#include <set>

#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "loop/loop_ir.h"
#include "loop/loop_transforms.h"
#include "loop/lower_group.h"
#include "loop/partition_loops.h"
#include "loop/simplify_indices.h"
#include "loop/unswitch_selects.h"
#include "loop_transforms_test_util.h"
#include "lower_group_test_util.h"
#include "reference/executor.h"

namespace kiln::loop {
namespace {

using sched_test::kernel;

BufferPtr gbuf(const std::string& n, int64_t size) { return sched_test::gbuf(n, {size}); }

// The outputs of `k` in the interpreter on inputs of seeded random values.
std::vector<Tensor> run(const LoopKernel& k, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Tensor> in, out;
  std::vector<Tensor*> ip, op;
  for (const auto& b : k.inputs) {
    in.emplace_back(DType::Float32, b->shape);
    for (int64_t i = 0; i < in.back().numel(); ++i) in.back().data<float>()[i] = u(rng);
  }
  for (const auto& b : k.outputs) out.emplace_back(DType::Float32, b->shape);
  for (auto& t : in) ip.push_back(&t);
  for (auto& t : out) op.push_back(&t);
  interpret(k, ip, op);
  return out;
}

void expect_same_bits(const LoopKernel& a, const LoopKernel& b) {
  auto x = run(a, 5), y = run(b, 5);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(std::memcmp(x[i].raw(), y[i].raw(), x[i].nbytes()), 0) << "output " << i;
}

bool contains(const std::string& s, const std::string& t) { return s.find(t) != std::string::npos; }

LoopKernel partitioned(LoopKernel k) {
  partition_loops(k);
  simplify_indices(k);
  return k;
}

// y[i, j] = j < 5 ? a[i, min(j, 4)] : b[i, max(j - 5, 0)], as Concat lowers along its axis.
LoopKernel concat_kernel() {
  auto a = gbuf("a", 50), b = gbuf("b", 30), y = gbuf("y", 80);
  const Expr i = var("i"), j = var("j");
  Expr va = load(a, add(mul(i, int_imm(5)), binary(BinOp::Min, j, int_imm(4))));
  Expr vb = load(b, add(mul(i, int_imm(3)), binary(BinOp::Max, binary(BinOp::Sub, j, int_imm(5)), int_imm(0))));
  Stmt body = for_loop("i", int_imm(10),
                       {for_loop("j", int_imm(8), {store(y, add(mul(i, int_imm(8)), j), select(binary(BinOp::Lt, j, int_imm(5)), va, vb))})});
  return kernel("concat", {a, b}, {y}, body);
}

TEST(PartitionLoops, ConcatSelectSplitsTheLoopAndFolds) {
  LoopKernel k = concat_kernel(), p = partitioned(k);
  const std::string s = print_kernel(p);
  SCOPED_TRACE(s);
  EXPECT_FALSE(contains(s, "select")) << s;
  EXPECT_FALSE(contains(s, "min(")) << s;
  EXPECT_FALSE(contains(s, "max(")) << s;
  EXPECT_TRUE(contains(s, "for j in [0, 5)"));
  EXPECT_TRUE(contains(s, " in [0, 3)"));  // the second piece, under a name of its own
  expect_same_bits(k, p);
}

// A condition affine in the loop variable and an inner one: a block of 16 lanes of a row whose
// first 48 elements come from one part (Concat along a reduced axis read in lanes).
TEST(PartitionLoops, AffineConditionOverAnInnerLoopSplitsAtTheBlockBoundary) {
  auto a = gbuf("a", 48), b = gbuf("b", 80), y = gbuf("y", 128);
  const Expr pos = add(mul(var("blk"), int_imm(16)), var("l"));
  Expr va = load(a, binary(BinOp::Min, pos, int_imm(47)));
  Expr vb = load(b, binary(BinOp::Max, binary(BinOp::Sub, pos, int_imm(48)), int_imm(0)));
  LoopKernel k = kernel("lanes", {a, b}, {y},
                        for_loop("blk", int_imm(8),
                                 {for_loop("l", int_imm(16), {store(y, pos, select(binary(BinOp::Lt, pos, int_imm(48)), va, vb))},
                                           ForKind::Vectorized)}));
  LoopKernel p = partitioned(k);
  const std::string s = print_kernel(p);
  EXPECT_FALSE(contains(s, "select")) << s;
  EXPECT_TRUE(contains(s, "for blk in [0, 3)")) << s;
  EXPECT_TRUE(contains(s, " in [0, 5)")) << s;
  expect_same_bits(k, p);
}

TEST(PartitionLoops, UndecidableOrTooManyPiecesAreLeftAlone) {
  // The condition reads data: nothing to split at.
  auto x = gbuf("x", 64), y = gbuf("y", 64);
  const Expr i = var("i");
  LoopKernel data = kernel("data", {x}, {y},
                           for_loop("i", int_imm(64), {store(y, i, select(binary(BinOp::Lt, load(x, i), float_imm(0)), float_imm(0), load(x, i)))}));
  LoopKernel d = data;
  partition_loops(d);
  EXPECT_EQ(print_kernel(d), print_kernel(data));
  // Seven parts of a Concat: six split points, more than the five pieces allowed here.
  Expr v = load(x, i);
  for (int p = 6; p >= 1; --p) v = select(binary(BinOp::Lt, i, int_imm(p * 9)), float_imm(float(p)), v);
  LoopKernel many = kernel("many", {x}, {y}, for_loop("i", int_imm(64), {store(y, i, v)})), m = many;
  partition_loops(m, 5);
  EXPECT_EQ(print_kernel(m), print_kernel(many));
  // Within the defaults (64 pieces, pieces adding up to twice the kernel's size): split in seven.
  partition_loops(m);
  EXPECT_NE(print_kernel(m), print_kernel(many));
  // A select chain over 63 points: 64 pieces, each folded to a constant store, add little beyond
  // the chain they replace: split.
  Expr w = load(x, i);
  for (int p = 63; p >= 1; --p) w = select(binary(BinOp::Lt, i, int_imm(p)), float_imm(float(p)), w);
  LoopKernel chain = kernel("chain", {x}, {y}, for_loop("i", int_imm(64), {store(y, i, w)})), c = chain;
  partition_loops(c);
  EXPECT_NE(print_kernel(c), print_kernel(chain));
  // Pieces that each keep most of the body (the selects decide a small part of it): eight copies
  // of a sum of 21 loads are more than twice the kernel: left alone.
  Expr heavy = load(x, i);
  for (int q = 1; q <= 20; ++q) heavy = add(heavy, load(x, binary(BinOp::Mod, mul(i, int_imm(q)), int_imm(64))));
  Expr sel = load(x, i);
  for (int p = 7; p >= 1; --p) sel = select(binary(BinOp::Lt, i, int_imm(p * 8)), float_imm(float(p)), sel);
  LoopKernel big = kernel("big", {x}, {y}, for_loop("i", int_imm(64), {store(y, i, add(heavy, sel))})), b = big;
  partition_loops(b);
  EXPECT_EQ(print_kernel(b), print_kernel(big));
  // Loops that call a micro-kernel keep the control flow their lowering chose.
  LoopKernel mk = kernel("mk", {x}, {y},
                         for_loop("i", int_imm(64), {call_stmt("kiln_mk_f32", {}), store(y, i, select(binary(BinOp::Lt, i, int_imm(9)), float_imm(1), load(x, i)))}));
  LoopKernel mkp = mk;
  partition_loops(mkp);
  EXPECT_EQ(print_kernel(mkp), print_kernel(mk));
}

// The shared-expression hoisting names a Concat part's test (`bool t = i < 24`) and the select
// reads `t`: the loop splits there, and in each piece the Let is a constant the select folds on.
TEST(PartitionLoops, ConditionsNamedByBoolLetsSplit) {
  auto a = gbuf("a", 24), b = gbuf("b", 40), y = gbuf("y", 64);
  const Expr i = var("i");
  const Expr pick = select(var("t", DType::Bool), load(a, binary(BinOp::Min, i, int_imm(23))),
                           load(b, binary(BinOp::Max, binary(BinOp::Sub, i, int_imm(24)), int_imm(0))));
  LoopKernel k = kernel("named", {a, b}, {y},
                        for_loop("i", int_imm(64), {let("t", binary(BinOp::Lt, i, int_imm(24))), store(y, i, pick)}));
  ASSERT_TRUE(partition_loops(k));
  simplify_indices(k);
  const std::string text = print_kernel(k);
  EXPECT_FALSE(contains(text, "select")) << text;
  EXPECT_TRUE(contains(text, "for i in [0, 24)")) << text;
  EXPECT_FALSE(contains(text, "min(")) << text;
}

// Loop names stay unique after a split (the schedule transforms find loops by name): the second
// piece of i and its inner j are renamed.
TEST(PartitionLoops, PiecesBindNamesOfTheirOwn) {
  auto a = gbuf("a", 64), y = gbuf("y", 64);
  const Expr i = var("i"), j = var("j");
  Stmt body = for_loop("i", int_imm(8), {for_loop("j", int_imm(8), {store(y, add(mul(i, int_imm(8)), j),
                                                                          select(binary(BinOp::Lt, i, int_imm(3)), float_imm(0),
                                                                                 load(a, add(mul(i, int_imm(8)), j))))})});
  LoopKernel k = kernel("names", {a}, {y}, body), p = partitioned(k);
  const std::string s = print_kernel(p);
  EXPECT_TRUE(contains(s, "for i in [0, 3)")) << s;
  EXPECT_FALSE(contains(s, "for i in [0, 5)")) << s;  // the second piece has another name
  Schedule sched;
  sched.vector_width = 8;
  apply_default_schedule(p, sched);  // would refuse (and leave j serial) on duplicate names
  EXPECT_EQ(print_kernel(p).find("for j in [0, 8) {"), std::string::npos) << print_kernel(p);
  expect_same_bits(k, p);
}

// An innermost loop selecting by a condition on outer variables through a division (a window
// partition's source row): one copy of the loop per outcome, no select left inside.
TEST(UnswitchSelects, InvariantConditionsLeaveTheInnerLoop) {
  auto a = gbuf("a", 40 * 16), b = gbuf("b", 40 * 16), y = gbuf("y", 40 * 16);
  const Expr r = var("r"), c = var("c");
  const Expr at = add(mul(r, int_imm(16)), c);
  const Expr c1 = binary(BinOp::Lt, mod(div_floor(r, int_imm(7)), int_imm(3)), int_imm(2));
  const Expr c2 = binary(BinOp::Lt, mod(r, int_imm(7)), int_imm(5));
  Expr v = select(c1, select(c2, load(a, at), float_imm(0)), load(b, at));
  LoopKernel k = kernel("unswitch", {a, b}, {y}, for_loop("r", int_imm(40), {for_loop("c", int_imm(16), {store(y, at, v)})}));
  LoopKernel u = k;
  unswitch_selects(u);
  const std::string s = print_kernel(u);
  EXPECT_FALSE(contains(s, "select")) << s;
  EXPECT_TRUE(contains(s, "if ")) << s;
  std::set<std::string> names;
  for (size_t p = s.find("for "); p != std::string::npos; p = s.find("for ", p + 1))
    EXPECT_TRUE(names.insert(s.substr(p, s.find(' ', p + 4) - p)).second) << "duplicate loop in\n" << s;
  expect_same_bits(k, u);
  // A condition that reads memory or the loop's own variable stays inside.
  Expr w = select(binary(BinOp::Lt, load(a, at), float_imm(0)), float_imm(0), select(binary(BinOp::Lt, c, int_imm(4)), load(a, at), load(b, at)));
  LoopKernel keep = kernel("keep", {a, b}, {y}, for_loop("r", int_imm(40), {for_loop("c", int_imm(16), {store(y, at, w)})})), kk = keep;
  unswitch_selects(kk);
  EXPECT_EQ(print_kernel(kk), print_kernel(keep));
}

// The default schedule, serial (the interpreter runs the kernel).
void apply_serial_schedule(LoopKernel& k) {
  Schedule sched;
  sched.parallel_min_work = 1 << 30;
  apply_default_schedule(k, sched);
}

// `k`, the lowered and scheduled kernel of `grp`, interpreted on random inputs of `g`, gives the
// reference's bits.
void expect_reference_bits(const Graph& g, const FusionGroup& grp, const LoopKernel& k) {
  const TensorMap inputs = testing::random_inputs(g, 3, {}, false);
  auto values = run_reference_values(g, inputs);
  auto got = testing::interpret_group(k, grp, values);
  const Tensor& want = values.at(grp.outputs[0]);
  EXPECT_EQ(std::memcmp(got[0].raw(), want.raw(), want.nbytes()), 0);
}

// `g` partitioned into one group and lowered: the plan and the kernel as lowered (a failed
// expectation when it is not one group, or the group is not lowered).
struct OneGroup {
  FusionPlan plan;
  LoopKernel kernel;
};
OneGroup lower_one_group(const Graph& g, const std::string& name) {
  OneGroup r{partition(g, {}), {}};
  EXPECT_EQ(r.plan.groups.size(), 1u);
  if (r.plan.groups.empty()) return r;
  auto lg = lower_group(r.plan.groups[0], name);
  EXPECT_TRUE(lg.kernel) << lg.reason;
  if (lg.kernel) r.kernel = *lg.kernel;
  return r;
}

// torch.roll as exported (Slice + Concat on two axes) plus a residual, lowered, scheduled by the
// default policy and interpreted against the reference: no select is left.
TEST(PartitionLoops, RollThroughTheDefaultScheduleMatchesTheReference) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,8,8,4], %r: f32[1,8,8,4]) -> (%y) {
  %s0 = constant i64[1] [-3]
  %e0 = constant i64[1] [8]
  %s1 = constant i64[1] [0]
  %e1 = constant i64[1] [-3]
  %a1 = constant i64[1] [1]
  %a2 = constant i64[1] [2]
  %p: f32[1,3,8,4] = Slice(%x, %s0, %e0, %a1)
  %q: f32[1,5,8,4] = Slice(%x, %s1, %e1, %a1)
  %h: f32[1,8,8,4] = Concat(%p, %q) {axis=1}
  %u: f32[1,8,3,4] = Slice(%h, %s0, %e0, %a2)
  %v: f32[1,8,5,4] = Slice(%h, %s1, %e1, %a2)
  %w: f32[1,8,8,4] = Concat(%u, %v) {axis=2}
  %y: f32[1,8,8,4] = Add(%w, %r)
}
)");
  auto [plan, k] = lower_one_group(*g, "roll");
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(contains(print_kernel(k), "select")) << print_kernel(k);  // as lowered: Concat's selects
  apply_serial_schedule(k);
  const std::string s = print_kernel(k);
  EXPECT_FALSE(contains(s, "select")) << s;
  expect_reference_bits(*g, plan.groups[0], k);
}

// DenseNet's dense-block input: a Concat of 25 parts, batch norm (a per-channel scale and shift)
// and ReLU, lowered and scheduled by the default policy: the channel loop splits into one piece
// per part (the pieces fold to one part's load each; the budget counts what they keep), so no
// statement reads more than one part, and the result is the reference's.
TEST(PartitionLoops, ManyPartConcatSplitsIntoOnePiecePerPart) {
  std::string params, args;
  for (int p = 0; p < 25; ++p) {
    params += (p ? ", " : "") + std::string("%p") + std::to_string(p) + ": f32[1,4,3,3]";
    args += (p ? ", " : "") + std::string("%p") + std::to_string(p);
  }
  auto g = parse_graph("graph main opset 17 (" + params + ", %s: f32[1,100,1,1], %t: f32[1,100,1,1]) -> (%y) {\n"
                       "  %c: f32[1,100,3,3] = Concat(" + args + ") {axis=1}\n"
                       "  %m: f32[1,100,3,3] = Mul(%c, %s)\n  %a: f32[1,100,3,3] = Add(%m, %t)\n"
                       "  %y: f32[1,100,3,3] = Relu(%a)\n}\n");
  auto [plan, k] = lower_one_group(*g, "dense");
  ASSERT_FALSE(HasFailure());
  apply_serial_schedule(k);
  const std::string text = print_kernel(k);
  std::istringstream lines(text);
  const std::regex part(R"(\bp[0-9]+\[)");  // a load of a Concat part
  int pieces = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto loads = std::distance(std::sregex_iterator(line.begin(), line.end(), part), std::sregex_iterator());
    EXPECT_LE(loads, 1) << line;
    if (line.find_first_not_of(' ') != std::string::npos && line.compare(line.find_first_not_of(' '), 2, "y[") == 0) ++pieces;
  }
  EXPECT_EQ(pieces, 25) << text;
  expect_reference_bits(*g, plan.groups[0], k);
}

// A strided depthwise conv's untiled nest (window unrolled, input read in place, padding tested per
// tap): its pieces' own splits draw on the budget longest piece first, so the interior (7 of 8
// rows, 7 of 8 columns here) loses every select while the first row keeps some (before, the first row's splits
// used the budget up and the interior kept a select per tap: EfficientNet's 3x3 stride-2
// depthwise conv over 112x112, 0.27 -> 0.84 ms).
TEST(PartitionLoops, TheLongestPieceIsSplitFirst) {
  auto g = parse_graph(R"(graph main opset 17 (%x: f32[1,4,16,16]) -> (%y) {
  %w = constant f32[4,1,3,3] [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6, 2.7, 2.8, 2.9, 3, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6]
  %y: f32[1,4,8,8] = Conv(%x, %w) {kernel_shape=[3,3], strides=[2,2], pads=[1,1,1,1], group=4}
}
)");
  auto [plan, k] = lower_one_group(*g, "dw");
  ASSERT_FALSE(HasFailure());
  apply_serial_schedule(k);
  const std::string text = print_kernel(k);
  // The interior: in the loop of the 7 interior rows, the loop of their 7 interior columns, to
  // its closing brace.
  const size_t rows = text.find(" in [0, 7) {");
  ASSERT_NE(rows, std::string::npos) << text;
  const size_t at = text.find(" in [0, 7) {", rows + 1);
  ASSERT_NE(at, std::string::npos) << text;
  const size_t line = text.rfind('\n', at) + 1;
  const std::string indent = text.substr(line, text.find_first_not_of(' ', line) - line);
  const size_t end = text.find("\n" + indent + "}", at);
  ASSERT_NE(end, std::string::npos) << text;
  const std::string interior = text.substr(at, end - at);
  EXPECT_FALSE(contains(interior, "select")) << interior;
  expect_reference_bits(*g, plan.groups[0], k);
}

}  // namespace
}  // namespace kiln::loop
