#include "tune/fusion_search.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "analysis/kernel_timing.h"
#include "ir/printer.h"
#include "support/clock.h"
#include "support/error.h"
#include "tune/kernel_signature.h"

namespace kiln::tune {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Views ride along with a neighbour for a token benefit (partitioner.cc kViewBonusUs): not decisions.
constexpr double kTokenBenefitUs = 2e-3;

bool is_close(const AcceptedFusion& f, double close) {
  return f.benefit_us > kTokenBenefitUs && f.apart_us > 0 && f.benefit_us < close * f.apart_us;
}

// Per kernel signature: how many instances a plan has and their mean time in one profiling round.
struct Census {
  std::map<std::string, int> count;
  std::map<std::string, size_t> first_group;
};
Census census(const runtime::Executable& ex) {
  Census c;
  for (size_t i = 0; i < ex.plan().groups.size(); ++i) {
    const FusionGroup& grp = ex.plan().groups[i];
    if (!grp.counts_as_kernel()) continue;
    const std::string sig = kernel_signature(grp);
    if (!c.count[sig]++) c.first_group[sig] = i;
  }
  return c;
}

// Summed medians of the instances `mine` has beyond what `other` has (the multiset difference),
// each signature at its instances' mean time this round.
double excess_ms(const runtime::Executable& ex, const Census& mine, const Census& other, const std::vector<double>& med,
                 int* kernels) {
  std::map<std::string, std::pair<double, int>> by_sig;
  for (size_t i = 0; i < ex.plan().groups.size(); ++i) {
    const FusionGroup& grp = ex.plan().groups[i];
    if (!grp.counts_as_kernel()) continue;
    auto& [sum, n] = by_sig[kernel_signature(grp)];
    sum += i < med.size() ? med[i] : 0;
    ++n;
  }
  double ms = 0;
  int k = 0;
  for (const auto& [sig, n] : mine.count) {
    auto it = other.count.find(sig);
    const int extra = n - (it == other.count.end() ? 0 : it->second);
    if (extra <= 0) continue;
    const auto& [sum, cnt] = by_sig[sig];
    ms += extra * sum / cnt;
    k += extra;
  }
  if (kernels) *kernels = k;
  return ms;
}

std::string pair_key(const std::string& graph, const std::string& a, const std::string& b) {
  return graph + "\n" + a + "\n" + b;
}

}  // namespace

FusionSearchReport search_fusions(const Graph& g, const TensorMap& inputs, const FusionSearchOptions& opts,
                                  const std::vector<Record>& records) {
  const auto start = Clock::now();
  auto say = [&](const std::string& m) {
    if (opts.progress) opts.progress(m);
  };
  FusionSearchReport rep;
  rep.graph = graph_fingerprint(g);
  runtime::BuildOptions bo = opts.build;
  std::vector<std::pair<std::string, std::string>> apart = bo.fusion.keep_apart[rep.graph];

  std::map<std::string, const Record*> recorded;
  for (const Record& r : records)
    if (r.is_fusion() && r.graph == rep.graph) recorded[pair_key(r.graph, r.apart_a, r.apart_b)] = &r;

  say("building the model under the default plan");
  bo.fusion.keep_apart[rep.graph] = apart;
  std::unique_ptr<runtime::Executable> cur = runtime::Executable::build(g.clone(), bo);
  // A pair is recorded by node names, so only nodes whose name no other node has can be kept apart.
  std::map<std::string, int> names;
  for (const Node* n : g.nodes()) ++names[n->name()];
  std::vector<AcceptedFusion> close;
  for (const AcceptedFusion& f : cur->plan().accepted)
    if (is_close(f, opts.close) && names[f.a] == 1 && names[f.b] == 1) close.push_back(f);
  std::stable_sort(close.begin(), close.end(),
                   [](const AcceptedFusion& x, const AcceptedFusion& y) { return x.apart_us > y.apart_us; });

  double last_trial_s = 0;
  int i = 0;
  std::map<std::string, size_t> measured_key;  // shape_key -> the trial that measured it
  for (const AcceptedFusion& f : close) {
    ++i;
    FusionTrial t;
    t.fusion = f;
    if (auto it = recorded.find(pair_key(rep.graph, f.a, f.b)); it != recorded.end()) {
      t.from_records = true;
      t.apart = it->second->improved;
      t.fused_ms = it->second->default_ms;
      t.apart_ms = it->second->tuned_ms;
      t.note = "recorded";
      if (t.apart) apart.push_back({f.a, f.b});
      rep.trials.push_back(t);
      continue;
    }
    // The same decision elsewhere in the model (same ops and shapes on both sides): its result.
    if (auto it = measured_key.find(f.shape_key); it != measured_key.end()) {
      const FusionTrial& m = rep.trials[it->second];
      t.same_as = m.fusion.a + " + " + m.fusion.b;
      t.apart = m.apart;
      t.fused_ms = m.fused_ms;
      t.apart_ms = m.apart_ms;
      if (t.apart) apart.push_back({f.a, f.b});
      rep.trials.push_back(t);
      continue;
    }
    if (seconds_since(start) + last_trial_s > opts.budget_s) {
      t.note = "budget spent";
      rep.trials.push_back(t);
      continue;
    }
    const auto t0 = Clock::now();
    say("fusion " + std::to_string(i) + "/" + std::to_string(close.size()) + ": " + f.a + " + " + f.b);
    // Pairs decided apart since `cur` was built (recorded or shared results) are in `apart`
    // already; rebuild the incumbent when they changed it.
    runtime::BuildOptions with = bo, without = bo;
    with.fusion.keep_apart[rep.graph] = apart;
    if (cur->options().fusion.keep_apart.at(rep.graph) != apart) cur = runtime::Executable::build(g.clone(), with);
    without.fusion.keep_apart[rep.graph] = apart;
    without.fusion.keep_apart[rep.graph].push_back({f.a, f.b});
    std::unique_ptr<runtime::Executable> alt;
    try {
      alt = runtime::Executable::build(g.clone(), without);
    } catch (const UserError& e) {
      t.note = std::string("the split plan does not build: ") + e.what();
      rep.trials.push_back(t);
      continue;
    }
    const Census cc = census(*cur), ca = census(*alt);
    if (cc.count == ca.count) {
      t.note = "the plan does not change (another fusion joins the pair)";
      rep.trials.push_back(t);
      last_trial_s = seconds_since(t0);
      continue;
    }
    // Interleaved rounds (incumbent, split, split, incumbent, ...); the medians over rounds. A
    // split that wins is measured again, as many rounds, and must still win over all of them: a
    // record that keeps a fusion apart changes every later build, so one noisy round must not.
    std::vector<double> fused, split;
    auto measure_rounds = [&](int n) {
      for (int r = 0; r < n; ++r)
        for (int k = 0; k < 2; ++k) {
          const bool first = (r % 2 == 0) == (k == 0);
          runtime::Executable& ex = first ? *cur : *alt;
          const std::vector<double> med = analysis::time_runs(ex, inputs, opts.runs, 1, true).kernel_medians();
          if (first) fused.push_back(excess_ms(ex, cc, ca, med, &t.kernels_fused));
          else split.push_back(excess_ms(ex, ca, cc, med, &t.kernels_apart));
        }
    };
    auto wins = [&] { return analysis::median(split) < analysis::median(fused) * (1 - opts.min_gain); };
    measure_rounds(opts.rounds);
    if (wins()) measure_rounds(opts.rounds);
    t.measured = true;
    t.fused_ms = analysis::median(fused);
    t.apart_ms = analysis::median(split);
    t.apart = wins();
    if (t.apart) {
      apart.push_back({f.a, f.b});
      cur = std::move(alt);
    }
    measured_key[f.shape_key] = rep.trials.size();
    rep.trials.push_back(t);
    last_trial_s = seconds_since(t0);
  }
  rep.keep_apart = apart;
  rep.search_s = seconds_since(start);
  return rep;
}

std::vector<Record> fusion_records(const FusionSearchReport& rep, const MachineKey& machine, const std::string& target) {
  std::vector<Record> out;
  for (const FusionTrial& t : rep.trials) {
    if (!t.measured && t.same_as.empty()) continue;
    Record r;
    char hex[20];
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : pair_key(rep.graph, t.fusion.a, t.fusion.b)) h = (h ^ c) * 0x100000001b3ULL;
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    r.signature = std::string("apart-") + hex;
    r.ops = t.fusion.mode;
    r.emitter = "fusion";
    r.machine = machine;
    r.target = target;
    r.improved = t.apart;
    r.default_ms = t.fused_ms;
    r.tuned_ms = t.apart_ms;
    r.trials = 1;
    r.date = iso_utc_now();
    r.graph = rep.graph;
    r.apart_a = t.fusion.a;
    r.apart_b = t.fusion.b;
    out.push_back(std::move(r));
  }
  return out;
}

std::map<std::string, std::vector<std::pair<std::string, std::string>>> keep_apart_pairs(
    const std::vector<Record>& records, const MachineKey& machine, const std::string& target) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
  for (const Record& r : records)
    if (r.is_fusion() && r.improved && r.machine == machine && r.target == target)
      out[r.graph].push_back({r.apart_a, r.apart_b});
  return out;
}

}  // namespace kiln::tune
