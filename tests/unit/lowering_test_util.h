// Numeric equivalence checks for the lowering passes: a small graph (IR text with random
// constants spliced in) runs through the reference executor before and after one pass, on random
// inputs, and the outputs must agree. The lowered graph must also consist of registered
// default-domain ONNX ops only, so the reference executor (and later the fusion engine) can run it.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "reference/executor.h"
#include "reference/op_registry.h"
#include "transforms/pipeline.h"

namespace kiln::testing {

struct RandomConst {
  std::string name;
  DType dtype;
  Shape shape;
  double lo = -2, hi = 2;
};

inline Tensor random_tensor(DType dt, const Shape& shape, std::mt19937& rng, double lo = -2, double hi = 2) {
  Tensor d(DType::Float64, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = u(rng);
  if (is_integer(dt)) {
    for (int64_t i = 0; i < d.numel(); ++i) d.data<double>()[i] = std::round(d.data<double>()[i]);
  }
  return dt == DType::Float64 ? d : d.cast(dt);
}

// `text` with a "%name = constant ..." line per entry of `consts` inserted after the header line.
inline std::string with_constants(const std::string& text, const std::vector<RandomConst>& consts, std::mt19937& rng) {
  std::string lines;
  for (const RandomConst& c : consts)
    lines += "  %" + c.name + " = constant " + print_tensor(random_tensor(c.dtype, c.shape, rng, c.lo, c.hi), {-1}) + "\n";
  size_t at = text.find("{\n");
  return text.substr(0, at + 2) + lines + text.substr(at + 2);
}

struct EquivalenceOptions {
  double rel = 1e-5;  // max |after - before| <= rel * max(1, max |before|), per output
  // Input value ranges by graph-input name (default [-2, 2]).
  std::map<std::string, std::pair<double, double>> ranges;
  unsigned seed = 1;
  bool expect_change = true;
};

inline std::set<std::string> op_types(const Graph& g) {
  std::set<std::string> ops;
  for (const Node* n : g.nodes()) ops.insert(n->op_type());
  return ops;
}

// Runs `pass` on the graph in `text`, checks validity and the op set, and compares reference
// outputs on random inputs. Returns the lowered graph for further checks.
inline std::unique_ptr<Graph> check_pass_equivalence(const std::string& text, Pass& pass_object,
                                                     const EquivalenceOptions& opts = {}) {
  const std::string pass = pass_object.name();
  std::unique_ptr<Graph> g = parse_graph(text);
  EXPECT_EQ(verify_graph_message(*g), "") << text;
  std::mt19937 rng(opts.seed);
  TensorMap inputs;
  for (const Value* in : g->inputs()) {
    auto r = opts.ranges.count(in->name()) ? opts.ranges.at(in->name()) : std::pair<double, double>{-2, 2};
    inputs[in->name()] = random_tensor(in->dtype(), in->shape(), rng, r.first, r.second);
  }
  const TensorMap before = run_reference(*g, inputs);
  const std::set<std::string> ops_before = op_types(*g);
  const bool changed = pass_object.run(*g);
  EXPECT_EQ(changed, opts.expect_change) << pass << " on\n" << text;
  EXPECT_EQ(verify_graph_message(*g), "") << print_graph(*g);
  for (const Node* n : g->nodes()) {
    EXPECT_TRUE(n->domain().empty() && OpRegistry::global().find(n->op_type())) << print_node(*n);
  }
  const TensorMap after = run_reference(*g, inputs);
  EXPECT_EQ(after.size(), before.size());
  for (const auto& [name, ref] : before) {
    if (!after.count(name)) {
      ADD_FAILURE() << "output " << name << " disappeared";
      continue;
    }
    const Tensor& got = after.at(name);
    if (got.dtype() != ref.dtype() || got.shape() != ref.shape()) {
      ADD_FAILURE() << "output " << name << " changed type";
      continue;
    }
    double max_ref = 0, max_diff = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      max_ref = std::max(max_ref, std::abs(ref.as_double(i)));
      max_diff = std::max(max_diff, std::abs(got.as_double(i) - ref.as_double(i)));
    }
    EXPECT_TRUE(std::isfinite(max_ref)) << name;
    EXPECT_LE(max_diff, opts.rel * std::max(1.0, max_ref))
        << "output " << name << " of " << pass << ", max |ref| " << max_ref << "\n"
        << print_graph(*g, {-1});
  }
  return g;
}

// The same for the pipeline's pass of that name.
inline std::unique_ptr<Graph> check_pass_equivalence(const std::string& text, const std::string& pass,
                                                     const EquivalenceOptions& opts = {}) {
  return check_pass_equivalence(text, *create_pass(pass), opts);
}

}  // namespace kiln::testing
