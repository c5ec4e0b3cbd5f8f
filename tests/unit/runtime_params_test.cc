// Ops whose parameters are data (runtime_params.h): Slice with run-time starts/ends/axes/steps,
// Pad with run-time pads, Reduce* with run-time axes. Generated code must match the reference on
// every parameter set that gives the declared output shape, and report every other set as the
// node's one-line error (the kernel's guard), never a different answer. Also integer Pow, which the
// same issue moved from the reference kernel to generated code.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "fusion/partitioner.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "loop/loop_interpreter.h"
#include "loop/lower_group.h"
#include "reference/executor.h"
#include "runtime/executable.h"

namespace kiln {
namespace {

std::unique_ptr<Graph> ir(const std::string& body, const std::string& inputs, const std::string& outputs) {
  return parse_graph("graph main opset 18 (" + inputs + ") -> (" + outputs + ") {\n" + body + "}\n");
}

// The plan's one kernel, lowered (arguments in the group's input order).
struct Lowered {
  FusionPlan plan;
  loop::LoopKernel kernel;
};
Lowered lower_only_kernel(const Graph& g) {
  Lowered r{partition(g, FusionOptions{}), {}};
  size_t kernels = 0;
  for (const FusionGroup& grp : r.plan.groups) {
    if (!grp.counts_as_kernel()) continue;
    ++kernels;
    loop::LoweredGroup lg = loop::lower_group(grp, grp.name);
    EXPECT_TRUE(lg.kernel) << grp.name << ": " << lg.reason;
    if (lg.kernel) r.kernel = *lg.kernel;
  }
  EXPECT_EQ(kernels, 1u);
  return r;
}

const FusionGroup& only_group(const FusionPlan& p) {
  for (const FusionGroup& g : p.groups)
    if (g.counts_as_kernel()) return g;
  throw std::runtime_error("no kernel");
}

// Runs the lowered kernel on `inputs` (by graph-input name) in the loop interpreter.
Tensor interpret(const Lowered& l, const TensorMap& inputs, const Value* out) {
  std::vector<Tensor> in;
  for (const Value* v : only_group(l.plan).inputs) in.push_back(v->is_constant() ? v->constant() : inputs.at(v->name()));
  std::vector<Tensor*> ins;
  for (Tensor& t : in) ins.push_back(&t);
  Tensor y(out->dtype(), out->shape());
  std::vector<Tensor*> outs = {&y};
  loop::interpret(l.kernel, ins, outs);
  return y;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

void expect_guard_error(const std::function<void()>& f, const std::string& text, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "accepted: " << what;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

Tensor iota(const Shape& s) {
  Tensor t(DType::Float32, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(i) * 0.5f - 3;
  return t;
}

Tensor i64(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {int64_t(v.size())}); }

// numpy's slice(start, stop, step).indices(dim) length, written independently of kiln's code.
int64_t slice_len(int64_t start, int64_t stop, int64_t step, int64_t dim) {
  auto norm = [&](int64_t v, int64_t lo, int64_t hi) {
    if (v < 0) v = v < -dim ? lo : v + dim;
    return v < lo ? lo : v > hi ? hi : v;
  };
  int64_t n = 0;
  step = std::max<int64_t>(-dim, std::min<int64_t>(step, dim));  // a longer step visits only the start
  if (step > 0) {
    for (int64_t i = norm(start, 0, dim); i < norm(stop, 0, dim); i += step) ++n;
  } else {
    for (int64_t i = norm(start, -1, dim - 1); i > norm(stop, -1, dim - 1); i += step) ++n;
  }
  return n;
}

TEST(RuntimeParams, SliceMatchesTheReferenceOnEveryParameterSetOfTheDeclaredShape) {
  auto g = ir(R"(  %s: f32[2,3] = Slice(%x, %starts, %ends, %axes, %steps) name="sl"
  %y: f32[2,3] = Relu(%s) name="relu"
)", "%x: f32[4,5], %starts: i64[2], %ends: i64[2], %axes: i64[2], %steps: i64[2]", "%y");
  Lowered l = lower_only_kernel(*g);
  ASSERT_EQ(l.kernel.index_checks.size(), 1u);
  EXPECT_NE(l.kernel.index_checks[0].message.find("node 'sl' (Slice): the run-time starts/ends/axes/steps"),
            std::string::npos);
  const Tensor x = iota({4, 5});
  const std::vector<int64_t> bounds = {-7, -5, -2, -1, 0, 1, 2, 3, 4, 5, 6, INT64_MIN, INT64_MAX};
  int matched = 0, rejected = 0;
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0, 1}, {1, 0}, {-1, -2}})
    for (int64_t st0 : std::vector<int64_t>{-2, -1, 1, 2, INT64_MAX})
      for (int64_t st1 : {-3, -1, 1, 2})
        for (size_t b = 0; b < bounds.size(); b += 2)
          for (int64_t e0 : bounds)
            for (int64_t s1 : {-4, 0, 1, 4})
              for (int64_t e1 : {-9, -1, 4, 5, 9}) {
                const int64_t s0 = bounds[b];
                // entry 0 slices axes[0], entry 1 axes[1]
                const int64_t a0 = axes[0] < 0 ? axes[0] + 2 : axes[0];
                const std::vector<int64_t> dims = {4, 5};
                const int64_t n0 = slice_len(s0, e0, st0, dims[size_t(a0)]), n1 = slice_len(s1, e1, st1, dims[size_t(1 - a0)]);
                const bool fits = (a0 == 0 ? n0 : n1) == 2 && (a0 == 0 ? n1 : n0) == 3;
                TensorMap in{{"x", x}, {"starts", i64({s0, s1})}, {"ends", i64({e0, e1})}, {"axes", i64(axes)},
                             {"steps", i64({st0, st1})}};
                const std::string what = "starts " + std::to_string(s0) + "," + std::to_string(s1) + " ends " +
                                         std::to_string(e0) + "," + std::to_string(e1) + " steps " +
                                         std::to_string(st0) + "," + std::to_string(st1) + " axes " +
                                         std::to_string(axes[0]);
                if (fits) {
                  ++matched;
                  try {
                    expect_same(interpret(l, in, g->find_value("y")), run_reference(*g, in).at("y"), what);
                  } catch (const std::exception& e) {
                    ADD_FAILURE() << what << ": " << e.what();
                  }
                } else if (rejected++ % 7 == 0) {  // a sample of the rest: each is the node's error
                  expect_guard_error([&] { interpret(l, in, g->find_value("y")); }, "node 'sl' (Slice)", what);
                }
              }
  EXPECT_GT(matched, 50);
  // Invalid whatever the shape: a repeated axis, an axis out of range, a step of 0.
  for (const auto& bad : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{0, 0}, {1, 1}},
                           {{0, 2}, {1, 1}}, {{0, 1}, {0, 1}}}) {
    const TensorMap in{{"x", x}, {"starts", i64({0, 0})}, {"ends", i64({2, 3})}, {"axes", i64(bad.first)},
                       {"steps", i64(bad.second)}};
    expect_guard_error([&] { interpret(l, in, g->find_value("y")); }, "node 'sl' (Slice)", "invalid axes/steps");
  }
}

TEST(RuntimeParams, PadInEveryModeWithCropsAndTheGuard) {
  for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
    SCOPED_TRACE(mode);
    auto g = ir(std::string("  %y: f32[5,6] = Pad(%x, %pads, %v) {mode=\"") + mode + "\"} name=\"pd\"\n",
                "%x: f32[3,4], %pads: i64[4], %v: f32[]", "%y");
    Lowered l = lower_only_kernel(*g);
    ASSERT_EQ(l.kernel.index_checks.size(), 1u);
    const Tensor x = iota({3, 4});
    const Tensor v = Tensor::scalar<float>(7.5f);
    int matched = 0;
    for (int64_t b0 = -2; b0 <= 4; ++b0)
      for (int64_t b1 = -2; b1 <= 4; ++b1)
        for (int64_t e1 = -2; e1 <= 4; ++e1) {
          const int64_t e0 = 5 - 3 - b0;  // the axis-0 pads that give 5 rows (crops included)
          TensorMap in{{"x", x}, {"pads", i64({b0, b1, e0, e1})}, {"v", v}};
          const bool fits = b1 + 4 + e1 == 6 && std::max<int64_t>(0, -b0) + std::max<int64_t>(0, -e0) <= 3 &&
                            std::max<int64_t>(0, -b1) + std::max<int64_t>(0, -e1) <= 4;
          const std::string what = "pads " + std::to_string(b0) + "," + std::to_string(b1) + "," + std::to_string(e0) +
                                   "," + std::to_string(e1);
          if (fits) {
            ++matched;
            expect_same(interpret(l, in, g->find_value("y")), run_reference(*g, in).at("y"), what);
          } else {
            expect_guard_error([&] { interpret(l, in, g->find_value("y")); }, "node 'pd' (Pad): the run-time pads", what);
          }
        }
    EXPECT_GT(matched, 10);
    expect_guard_error(
        [&] { interpret(l, {{"x", x}, {"pads", i64({INT64_MIN, 1, 4, 1})}, {"v", v}}, g->find_value("y")); },
        "node 'pd' (Pad)", "INT64_MIN");
  }
}

// Pad whose axes are data: which axis each pads entry applies to is read at run time. Every
// spelling of each axis choice the declared shape allows matches the reference (interpreted and
// compiled); axes out of range or named twice, and choices giving another shape, are the guard's.
TEST(RuntimeParams, PadWithRunTimeAxes) {
  for (const char* mode : {"constant", "reflect"}) {
    SCOPED_TRACE(mode);
    // [3,4,4] -> [3,6,4] or [3,4,6]: one axis padded by (1, 1), axis 1 or axis 2.
    auto g = ir(std::string("  %y: f32[3,6,4] = Pad(%x, %pads, %v, %axes) {mode=\"") + mode + "\"} name=\"pd\"\n",
                "%x: f32[3,4,4], %pads: i64[4], %v: f32[], %axes: i64[2]", "%y");
    Lowered l = lower_only_kernel(*g);
    const Tensor x = iota({3, 4, 4});
    const Tensor v = Tensor::scalar<float>(-2.5f);
    runtime::BuildOptions o;
    auto ex = runtime::Executable::build(parse_graph(print_graph(*g)), o);
    for (const auto& k : ex->kernels()) EXPECT_TRUE(k.generated) << k.name << ": " << k.reason;
    struct Choice {
      std::vector<int64_t> axes, pads;
      bool fits;
    };
    for (const Choice& c : {Choice{{1, 2}, {1, 0, 1, 0}, true}, Choice{{2, 1}, {0, 1, 0, 1}, true},
                            Choice{{-2, 0}, {2, 0, 0, 0}, true}, Choice{{0, -2}, {0, -1, 0, 3}, true},
                            Choice{{2, 0}, {1, 0, 1, 0}, false}, Choice{{1, 1}, {1, 0, 1, 0}, false},
                            Choice{{1, -2}, {1, 0, 1, 0}, false}, Choice{{1, 3}, {1, 0, 1, 0}, false},
                            Choice{{-4, 1}, {0, 1, 0, 1}, false}}) {
      TensorMap in{{"x", x}, {"pads", i64(c.pads)}, {"v", v}, {"axes", i64(c.axes)}};
      const std::string what = "axes " + shape_str(c.axes) + " pads " + shape_str(c.pads);
      if (c.fits) {
        const Tensor want = run_reference(*g, in).at("y");
        expect_same(interpret(l, in, g->find_value("y")), want, what);
        expect_same(ex->run(in).at("y"), want, what + " compiled");
      } else {
        expect_guard_error([&] { interpret(l, in, g->find_value("y")); }, "node 'pd' (Pad): the run-time pads", what);
        expect_guard_error([&] { ex->run(in); }, "node 'pd' (Pad): the run-time pads", what + " compiled");
      }
    }
  }
}

TEST(RuntimeParams, ReductionsWithRunTimeAxesTheShapesDecide) {
  struct Case {
    const char* op;
    const char* out;
    int keep;
    std::vector<int64_t> axes, bad;
  };
  for (const Case& c : {Case{"ReduceSum", "f32[3,1,4]", 1, {1}, {2}}, Case{"ReduceMax", "f32[1,2,1]", 1, {-1, 0}, {0, 1}},
                        Case{"ReduceMean", "f32[2]", 0, {2, 0}, {0, 1}}, Case{"ReduceL2", "f32[3,4]", 0, {-2}, {5}},
                        Case{"ReduceSum", "f32[1,1,1]", 1, {0, 2, 1}, {0, 2, 2}}}) {
    const std::string body = std::string("  %y: ") + c.out + " = " + c.op + "(%x, %axes) {keepdims=" +
                             std::to_string(c.keep) + "} name=\"r\"\n";
    SCOPED_TRACE(body);
    const std::string axes_t = "i64[" + std::to_string(c.axes.size()) + "]";
    auto g = ir(body, "%x: f32[3,2,4], %axes: " + axes_t, "%y");
    Lowered l = lower_only_kernel(*g);
    const Tensor x = iota({3, 2, 4});
    TensorMap in{{"x", x}, {"axes", i64(c.axes)}};
    const Tensor got = interpret(l, in, g->find_value("y")), want = run_reference(*g, in).at("y");
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < got.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 * (1 + std::abs(want.data<float>()[i])));
    expect_guard_error([&] { interpret(l, {{"x", x}, {"axes", i64(c.bad)}}, g->find_value("y")); },
                       "node 'r' (" + std::string(c.op) + "): the run-time axes", "bad axes");
  }
}

// Shapes that leave the axes open: [3,2,2] -> [3,2] reduces axis 1 or axis 2, and which one is
// data. The kernel reads its input through the chosen set's view (lower_reduction.cc input_at):
// every axis spelling of every set the shapes allow must match the reference, interpreted and
// compiled (default numerics within the contract, --strict-fp bit for bit, 1 and 2 threads), and
// every other set is the node's guard error.
TEST(RuntimeParams, ReductionsWithRunTimeAxesTheShapesLeaveOpen) {
  struct Case {
    const char* op;
    const char* dtype;
    Shape in;
    const char* out;
    std::vector<std::vector<int64_t>> axes, bad;
  };
  const std::vector<Case> cases = {
      {"ReduceSum", "f32", {3, 2, 2}, "f32[3,2]", {{1}, {2}, {-1}, {-2}}, {{0}, {3}, {-4}}},
      // Three sets of two axes: {0,1}, {1,2}, {2,3}, in either order and counted from either end.
      {"ReduceMean", "f32", {2, 3, 2, 3}, "f32[2,3]", {{0, 1}, {1, 0}, {1, 2}, {-2, 1}, {2, 3}, {3, -2}},
       {{0, 2}, {1, 3}, {0, 3}, {1, 1}}},
      // A size-1 axis reduces nothing: {1,2} and {1,3} are the sets {2} and {3}.
      {"ReduceMax", "f32", {3, 1, 4, 4}, "f32[3,4]", {{1, 2}, {3, 1}, {2, -3}}, {{0, 1}, {2, 3}}},
      // Long rows (lane passes in default numerics) along a leading or trailing axis.
      {"ReduceSum", "f32", {4, 64, 64}, "f32[4,64]", {{1}, {2}}, {{0}}},
      {"ReduceProd", "i32", {2, 5, 5}, "i32[2,5]", {{1}, {2}}, {{0}}},
  };
  for (const Case& c : cases) {
    const std::string body = std::string("  %y: ") + c.out + " = " + c.op + "(%x, %axes) {keepdims=0} name=\"r\"\n";
    const std::string inputs = std::string("%x: ") + c.dtype + shape_str(c.in) + ", %axes: i64[" +
                               std::to_string(c.axes[0].size()) + "]";
    SCOPED_TRACE(body);
    auto g = ir(body, inputs, "%y");
    Lowered l = lower_only_kernel(*g);
    Tensor x(std::string(c.dtype) == "i32" ? DType::Int32 : DType::Float32, c.in);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype() == DType::Int32) x.data<int32_t>()[i] = int32_t(i % 7) - 2;
      else x.data<float>()[i] = float((i * 37) % 101) * 0.03125f - 1.5f;
    }
    std::vector<std::unique_ptr<runtime::Executable>> exes;
    for (bool strict : {false, true})
      for (int threads : {1, 2}) {
        runtime::BuildOptions o;
        o.threads = threads;
        o.strict_fp = strict;
        exes.push_back(runtime::Executable::build(parse_graph(print_graph(*g)), o));
        for (const auto& k : exes.back()->kernels()) EXPECT_TRUE(k.generated) << k.name << ": " << k.reason;
      }
    for (const std::vector<int64_t>& axes : c.axes) {
      TensorMap in{{"x", x}, {"axes", i64(axes)}};
      const Tensor want = run_reference(*g, in).at("y");
      const std::string what = "axes " + shape_str(axes);
      const Tensor got = interpret(l, in, g->find_value("y"));
      ASSERT_EQ(got.shape(), want.shape()) << what;
      for (size_t e = 0; e < exes.size(); ++e) {
        const Tensor y = exes[e]->run(in).at("y");
        if (e >= 2 || x.dtype() == DType::Int32) {
          expect_same(y, want, what + " compiled strict");
          continue;
        }
        float mx = 0;
        for (int64_t i = 0; i < want.numel(); ++i) mx = std::max(mx, std::abs(want.data<float>()[i]));
        for (int64_t i = 0; i < want.numel(); ++i)
          ASSERT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-4 * mx) << what << " compiled, element " << i;
      }
      if (x.dtype() == DType::Int32) {
        expect_same(got, want, what + " interpreted");
        continue;
      }
      for (int64_t i = 0; i < got.numel(); ++i)
        EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 * (1 + std::abs(want.data<float>()[i]))) << what;
    }
    for (const std::vector<int64_t>& bad : c.bad) {
      TensorMap in{{"x", x}, {"axes", i64(bad)}};
      const std::string what = "bad axes " + shape_str(bad);
      expect_guard_error([&] { interpret(l, in, g->find_value("y")); }, "node 'r' (" + std::string(c.op) + "): the run-time axes", what);
      expect_guard_error([&] { exes[0]->run(in); }, "node 'r' (" + std::string(c.op) + "): the run-time axes", what);
    }
  }
  // No set of the axes' count gives the declared shape: refused with that reason.
  auto none = ir("  %y: f32[5] = ReduceSum(%x, %axes) {keepdims=0} name=\"r\"\n", "%x: f32[3,2,2], %axes: i64[1]", "%y");
  FusionPlan plan = partition(*none, FusionOptions{});
  const FusionGroup& grp = only_group(plan);
  EXPECT_NE(grp.library_reason.find("no set of 1 axes of [3,2,2] gives the declared output [5]"), std::string::npos)
      << grp.library_reason;
}

TEST(RuntimeParams, CompiledSliceAndPadReportBadParameters) {
  auto g = ir(R"(  %s: f32[2,3] = Slice(%x, %starts, %ends) name="sl"
  %y: f32[4,5] = Pad(%s, %pads) name="pd"
)", "%x: f32[4,5], %starts: i64[2], %ends: i64[2], %pads: i64[4]", "%y");
  auto want_g = ir(R"(  %s: f32[2,3] = Slice(%x, %starts, %ends) name="sl"
  %y: f32[4,5] = Pad(%s, %pads) name="pd"
)", "%x: f32[4,5], %starts: i64[2], %ends: i64[2], %pads: i64[4]", "%y");
  for (int threads : {1, 2}) {
    runtime::BuildOptions o;
    o.threads = threads;
    auto ex = runtime::Executable::build(parse_graph(print_graph(*g)), o);
    for (const auto& k : ex->kernels()) EXPECT_TRUE(k.generated) << k.name << ": " << k.reason;
    TensorMap in{{"x", iota({4, 5})}, {"starts", i64({1, -4})}, {"ends", i64({3, 4})}, {"pads", i64({1, 0, 1, 2})}};
    expect_same(ex->run(in).at("y"), run_reference(*want_g, in).at("y"), "compiled");
    in["starts"] = i64({0, 0});  // 4 rows and 5 columns, not 2 and 3
    expect_guard_error([&] { ex->run(in); }, "node 'sl' (Slice): the run-time starts/ends/axes/steps", "compiled");
    in["starts"] = i64({1, -4});
    in["pads"] = i64({1, 0, 1, 1});
    expect_guard_error([&] { ex->run(in); }, "node 'pd' (Pad): the run-time pads", "compiled");
  }
}

TEST(RuntimeParams, IntegerPowIsGeneratedAndExact) {
  for (const char* types : {"i32[6], %e: i32[6]", "i64[6], %e: i32[6]", "i32[6], %e: i64[6]"}) {
    SCOPED_TRACE(types);
    const std::string t = std::string(types).substr(0, 3);
    auto g = ir("  %y: " + t + "[6] = Pow(%x, %e) name=\"p\"\n", std::string("%x: ") + types, "%y");
    runtime::BuildOptions o;
    auto ex = runtime::Executable::build(parse_graph(print_graph(*g)), o);
    for (const auto& k : ex->kernels()) EXPECT_TRUE(k.generated) << k.name << ": " << k.reason;
    Lowered l = lower_only_kernel(*g);
    auto vec = [&](std::vector<int64_t> v, const std::string& ty) {
      Tensor a = Tensor::from_vector<int64_t>(v, {6});
      return ty == "i64" ? a : a.cast(DType::Int32);
    };
    const std::string te = std::string(types).substr(std::string(types).size() - 6, 3);
    // Wrapping powers, negative exponents (1 for base 1, +-1 for base -1, else 0), zero.
    for (const auto& [xs, es] : {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{3, -2, 7, 0, 1, -1}, {4, 3, 40, 0, -5, -3}},
                                  {{2, 5, -1, 1, 0, 13}, {31, -1, 6, 99, 3, 17}}}) {
      TensorMap in{{"x", vec(xs, t)}, {"e", vec(es, te)}};
      const Tensor want = run_reference(*g, in).at("y");
      expect_same(ex->run(in).at("y"), want, "compiled");
      expect_same(interpret(l, in, g->find_value("y")), want, "interpreter");
    }
  }
}

}  // namespace
}  // namespace kiln
