// RNN, GRU and LSTM: decompose_recurrent's unrolled ops against the reference kernels
// (nn_recurrent.cc) over every attribute the ops have — direction, layout, clip, activations with
// alpha/beta, GRU's linear_before_reset, LSTM's peepholes and input_forget, initial states,
// sequence_lens as data, weights as constants or inputs — then a quarter of the graphs compiled (JIT), and the refusals that leave the op to a library kernel.
#include "lowering_test_util.h"
#include "lower_group_test_util.h"
#include "runtime/executable.h"
#include "transforms/decompose_recurrent.h"

#include <functional>

namespace kiln {
namespace {

using testing::check_pass_equivalence;
using testing::EquivalenceOptions;
using testing::op_types;
using testing::RandomConst;
using testing::with_constants;

struct Case {
  std::string op = "LSTM";
  int64_t seq = 3, batch = 2, input = 4, hidden = 5;
  std::string direction = "forward";
  int layout = 0;
  std::string extra;         // more attributes, e.g. `clip=1.5`
  bool bias = true, h0 = false, c0 = false, peep = false, lens = false;
  bool weights_constant = true;
  bool all_outputs = true;
};

std::string f32(const Shape& s) { return "f32" + shape_str(s); }

// The graph text of one recurrent node; its inputs are graph inputs or random constants.
std::string graph_of(const Case& c, std::mt19937& rng) {
  const int64_t g = c.op == "LSTM" ? 4 : c.op == "GRU" ? 3 : 1, d = c.direction == "bidirectional" ? 2 : 1;
  const int64_t t = c.seq, n = c.batch, h = c.hidden;
  const Shape x = c.layout ? Shape{n, t, c.input} : Shape{t, n, c.input};
  const Shape st = c.layout ? Shape{n, d, h} : Shape{d, n, h};
  const Shape y = c.layout ? Shape{n, t, d, h} : Shape{t, d, n, h};
  std::vector<RandomConst> consts;
  std::string inputs = "%x: " + f32(x);
  auto param = [&](const std::string& name, const Shape& s) {
    if (c.weights_constant) consts.push_back({name, DType::Float32, s, -0.6, 0.6});
    else inputs += ", %" + name + ": " + f32(s);
    return "%" + name;
  };
  std::vector<std::string> args = {"%x", param("w", {d, g * h, c.input}), param("r", {d, g * h, h})};
  args.push_back(c.bias ? param("b", {d, 2 * g * h}) : "_");
  if (c.lens) inputs += ", %lens: i32[" + std::to_string(n) + "]";
  args.push_back(c.lens ? "%lens" : "_");
  if (c.h0) inputs += ", %h0: " + f32(st);
  args.push_back(c.h0 ? "%h0" : "_");
  if (c.op == "LSTM") {
    if (c.c0) inputs += ", %c0: " + f32(st);
    args.push_back(c.c0 ? "%c0" : "_");
    args.push_back(c.peep ? param("p", {d, 3 * h}) : "_");
  }
  while (!args.empty() && args.back() == "_") args.pop_back();
  std::string outs = "%y: " + f32(y) + ", %yh: " + f32(st);
  std::string gouts = c.all_outputs ? "%y, %yh" : "%yh";
  if (c.op == "LSTM") {
    outs += ", %yc: " + f32(st);
    if (c.all_outputs) gouts += ", %yc";
  }
  std::string call = c.op + "(";
  for (size_t i = 0; i < args.size(); ++i) call += (i ? ", " : "") + args[i];
  call += ") {hidden_size=" + std::to_string(h) + ", direction=\"" + c.direction + "\", layout=" + std::to_string(c.layout) +
          (c.extra.empty() ? "" : ", " + c.extra) + "} name=\"rec\"";
  const std::string text = "graph main opset 14 (" + inputs + ") -> (" + gouts + ") {\n  " + outs + " = " + call + "\n}\n";
  return with_constants(text, consts, rng);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* op : {"RNN", "GRU", "LSTM"})
    for (const char* dir : {"forward", "reverse", "bidirectional"})
      for (int layout : {0, 1}) {
        Case c;
        c.op = op;
        c.direction = dir;
        c.layout = layout;
        c.h0 = c.c0 = layout == 1;
        c.weights_constant = std::string(dir) != "reverse";
        all.push_back(c);
      }
  Case c;
  c.op = "GRU";
  c.extra = "linear_before_reset=1";
  all.push_back(c);
  c.direction = "bidirectional";
  c.extra = "linear_before_reset=1, clip=0.7";
  c.h0 = true;
  all.push_back(c);
  c = Case{};
  c.op = "LSTM";
  c.peep = c.h0 = c.c0 = true;
  c.extra = "clip=0.9";
  all.push_back(c);
  c.extra = "input_forget=1";
  c.direction = "reverse";
  all.push_back(c);
  // Activations with alpha/beta, one list for both directions and one per direction.
  c = Case{};
  c.op = "LSTM";
  c.direction = "bidirectional";
  c.extra = "activations=[\"HardSigmoid\", \"ScaledTanh\", \"Affine\"], activation_alpha=[0.3, 0.8, 0.5], "
            "activation_beta=[0.45, 1.2, -0.1]";
  all.push_back(c);
  c.op = "GRU";
  c.extra = "activations=[\"Sigmoid\", \"LeakyRelu\", \"hardsigmoid\", \"Softsign\"], activation_alpha=[0.2, 0.25]";
  all.push_back(c);
  c.op = "RNN";
  c.direction = "forward";
  c.extra = "activations=[\"Relu\"]";
  all.push_back(c);
  c.extra = "activations=[\"Elu\"], activation_alpha=[0.7]";
  c.bias = false;
  all.push_back(c);
  c.extra = "activations=[\"Softplus\"]";
  all.push_back(c);
  c.extra = "activations=[\"ThresholdedRelu\"], activation_alpha=[0.1]";
  all.push_back(c);
  // sequence_lens as data (forward: the masks), and Y_h alone.
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    c = Case{};
    c.op = op;
    c.lens = true;
    c.seq = 4;
    c.batch = 3;
    all.push_back(c);
    c.all_outputs = false;
    c.layout = 1;
    all.push_back(c);
  }
  return all;
}

EquivalenceOptions options(const Case& c) {
  EquivalenceOptions o;
  o.rel = 1e-5;
  if (c.lens) o.ranges["lens"] = {0, double(c.seq) + 0.99};  // every length from 0 to the whole sequence
  return o;
}

TEST(DecomposeRecurrent, MatchesTheReferenceKernelOnEveryAttribute) {
  std::mt19937 rng(5);
  for (const Case& c : cases()) {
    const std::string text = graph_of(c, rng);
    SCOPED_TRACE(text);
    DecomposeRecurrent unroll_all(/*unroll_all=*/true);
    auto g = check_pass_equivalence(text, unroll_all, options(c));
    EXPECT_FALSE(op_types(*g).count(c.op));
    EXPECT_TRUE(op_types(*g).count("MatMul"));
  }
}

// Random inputs for the graph of case c (sequence lengths from 0 to the whole sequence).
TensorMap inputs_of(const Graph& g, const Case& c, std::mt19937& rng) {
  TensorMap in;
  for (const Value* v : g.inputs()) {
    if (v->dtype() == DType::Int32) {
      Tensor t(DType::Int32, v->shape());
      for (int64_t k = 0; k < t.numel(); ++k) t.data<int32_t>()[k] = int32_t(rng() % uint32_t(c.seq + 1));
      in[v->name()] = t;
    } else {
      in[v->name()] = testing::random_tensor(v->dtype(), v->shape(), rng, -1, 1);
    }
  }
  return in;
}

// Case c's graph compiled (after `prepare`, then the lowering pipeline): every kernel generated,
// outputs within 1e-4 of the reference kernel's; returns the emitters of the kernels.
std::vector<std::string> compile_and_compare(const Case& c, std::mt19937& rng, bool strict,
                                             const std::function<void(Graph&)>& prepare) {
  const std::string text = graph_of(c, rng);
  SCOPED_TRACE(text);
  auto g = parse_graph(text);
  std::mt19937 in_rng(7);
  const TensorMap in = inputs_of(*g, c, in_rng);
  const TensorMap want = run_reference(*g, in);
  prepare(*g);
  run_lowering(*g);
  runtime::BuildOptions o;
  o.strict_fp = strict;
  o.threads = 2;
  auto ex = runtime::Executable::build(g->clone(), o);
  std::vector<std::string> emitters;
  for (const auto& k : ex->kernels()) {
    const FusionGroup& grp = ex->plan().groups[k.group];
    if (!grp.counts_as_kernel()) continue;
    EXPECT_TRUE(k.generated) << k.name << ": " << k.reason;
    emitters.push_back(grp.emitter);
  }
  const TensorMap got = ex->run(in);
  for (const auto& [name, w] : want) {
    double mx = 0, diff = 0;
    for (int64_t k = 0; k < w.numel(); ++k) {
      mx = std::max(mx, std::fabs(w.as_double(k)));
      diff = std::max(diff, std::fabs(got.at(name).as_double(k) - w.as_double(k)));
    }
    EXPECT_LE(diff, 1e-4 * std::max(mx, 1e-3)) << name << (strict ? " strict" : "");
  }
  return emitters;
}

// The pipeline's compiled path (half the cases, default and --strict-fp in turn): the recurrent
// emitter builds each op with constant weights as one kernel (sequence_lens as data included),
// the other cases are unrolled; either way every kernel is generated and matches the reference
// kernel.
TEST(RecurrentEmitter, CompiledMatchesTheReference) {
  std::mt19937 rng(6);
  const std::vector<Case> all = cases();
  for (size_t i = 0; i < all.size(); i += 2) {
    const Case& c = all[i];
    const std::vector<std::string> emitters = compile_and_compare(c, rng, (i / 2) % 2 == 1, [](Graph&) {});
    const bool whole = c.weights_constant;
    EXPECT_EQ(std::count(emitters.begin(), emitters.end(), "recurrent"), whole ? 1 : 0) << c.op << " case " << i;
    if (whole) EXPECT_EQ(emitters.size(), 1u) << "the layer is one kernel";
  }
}

// The unrolled spelling compiled (the other half of the cases): decompose_recurrent rewrites every
// op first, the emitter's too.
TEST(DecomposeRecurrent, CompiledMatchesTheReference) {
  std::mt19937 rng(9);
  const std::vector<Case> all = cases();
  for (size_t i = 1; i < all.size(); i += 4) {
    const std::vector<std::string> emitters =
        compile_and_compare(all[i], rng, (i / 4) % 2 == 1, [](Graph& g) { DecomposeRecurrent(true).run(g); });
    EXPECT_EQ(std::count(emitters.begin(), emitters.end(), "recurrent"), 0);
  }
}

TEST(DecomposeRecurrent, Refusals) {
  std::mt19937 rng(8);
  auto refusal_of = [&](const Case& c) {
    auto g = parse_graph(graph_of(c, rng));
    for (const Node* n : g->nodes())
      if (n->op_type() == c.op) return DecomposeRecurrent::refusal(*n);
    return std::string("no node");
  };
  Case c;
  c.lens = true;
  c.direction = "reverse";
  EXPECT_NE(refusal_of(c).find("runs backwards over sequence_lens that are data"), std::string::npos);
  c.direction = "bidirectional";
  EXPECT_NE(refusal_of(c).find("runs backwards over sequence_lens"), std::string::npos);
  c = Case{};
  c.seq = 600;
  c.direction = "bidirectional";
  EXPECT_NE(refusal_of(c).find("runs 1200 steps, more than the 1024"), std::string::npos);
  c = Case{};
  c.extra = "activations=[\"Sigmoid\", \"Cosh\", \"Tanh\"]";
  EXPECT_NE(refusal_of(c).find("activation 'Cosh' is not supported"), std::string::npos);
  // An op both refuse (backwards over sequence_lens that are data, weights that are not
  // constants) is a library kernel, named as such.
  c = Case{};
  c.lens = true;
  c.direction = "reverse";
  c.weights_constant = false;
  auto g = parse_graph(graph_of(c, rng));
  run_lowering(*g);
  EXPECT_TRUE(op_types(*g).count("LSTM"));
  FusionPlan plan = partition(*g, FusionOptions{});
  size_t library = 0;
  for (const FusionGroup& grp : plan.groups) library += grp.is_library();
  EXPECT_EQ(library, 1u);
}

}  // namespace
}  // namespace kiln
