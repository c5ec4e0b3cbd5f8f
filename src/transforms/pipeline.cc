#include "transforms/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "transforms/eliminate_common_subexpressions.h"
#include "transforms/eliminate_dead_code.h"
#include "transforms/fold_constants.h"
#include "transforms/lowering.h"
#include "transforms/remove_identity.h"

namespace kiln {

Pass::~Pass() = default;

std::vector<std::unique_ptr<Pass>> simplification_pipeline() {
  std::vector<std::unique_ptr<Pass>> p;
  // Identity/Dropout first, so later passes need not see through them (CSE would otherwise treat
  // Relu(Identity(x)) and Relu(x) as different expressions).
  p.push_back(std::make_unique<RemoveIdentity>());
  // Before folding, so no time is spent evaluating (and no model is rejected for) constant
  // subgraphs whose results are never used.
  p.push_back(std::make_unique<EliminateDeadCode>());
  p.push_back(std::make_unique<FoldConstants>());
  // After folding: folded shape computations become equal constants that CSE can merge, and
  // nodes reading them become identical.
  p.push_back(std::make_unique<EliminateCommonSubexpressions>());
  // Last: folding and CSE leave constants and nodes without consumers behind.
  p.push_back(std::make_unique<EliminateDeadCode>());
  // One round suffices: none of these passes creates work for an earlier one (CSE and DCE only
  // remove nodes; folding only turns nodes into constants).
  return p;
}

namespace {
std::vector<std::string> names_of(const std::vector<std::unique_ptr<Pass>>& passes) {
  std::set<std::string> names;
  for (const auto& p : passes) names.insert(p->name());
  return {names.begin(), names.end()};
}

std::string join(const std::vector<std::string>& names) {
  std::string r;
  for (const std::string& n : names) r += (r.empty() ? "" : ", ") + n;
  return r;
}

std::string format_ms(double ms) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f ms", ms);
  return buf;
}
}  // namespace

std::vector<std::string> pass_names() { return names_of(simplification_pipeline()); }

std::unique_ptr<Pass> create_pass(const std::string& name) {
  for (auto& p : simplification_pipeline())
    if (p->name() == name) return std::move(p);
  for (auto& p : lowering_pipeline())  // golden tests run the lowering passes by name too
    if (p->name() == name) return std::move(p);
  user_error("unknown pass '", name, "'; valid passes: ", join(pass_names()));
}

void run_pipeline(Graph& g, const PipelineOptions& opts) { run_passes(g, simplification_pipeline(), opts); }

void run_passes(Graph& g, const std::vector<std::unique_ptr<Pass>>& passes, const PipelineOptions& opts) {
  std::vector<std::string> names = names_of(passes);
  auto known = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  if (!opts.dump_after.empty() && opts.dump_after != "all" && !known(opts.dump_after))
    user_error("unknown pass '", opts.dump_after, "' to dump after; valid names: ", join(names), ", all");
  for (const std::string& d : opts.disabled)
    if (!known(d)) user_error("unknown pass '", d, "' to disable; valid passes: ", join(names));
  std::ostream& out = opts.dump ? *opts.dump : std::cerr;

  // Blame the right party: invalid IR on entry is the frontend's bug, not the first pass's.
  std::string problems = verify_graph_message(g);
  if (!problems.empty()) throw InternalError("IR verification failed before the first pass:\n" + problems);

  using Clock = std::chrono::steady_clock;
  double total_ms = 0;
  for (const auto& pass : passes) {
    const std::string name = pass->name();
    if (opts.disabled.count(name)) continue;
    auto start = Clock::now();
    bool changed = pass->run(g);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    total_ms += ms;
    if (changed) {
      problems = verify_graph_message(g);
      if (!problems.empty()) throw InternalError("IR verification failed after pass '" + name + "':\n" + problems);
    }
    if (opts.time_passes) out << "// time " << name << ": " << format_ms(ms) << "\n";
    if (opts.dump_after == "all" || opts.dump_after == name) {
      if (changed) out << "// after " << name << "\n" << print_graph(g, opts.print_options);
      else out << "// after " << name << " (unchanged)\n";
    }
  }
  if (opts.time_passes) out << "// time total: " << format_ms(total_ms) << "\n";
}

}  // namespace kiln
