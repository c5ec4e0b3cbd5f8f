// The fusion partitioner.
//
// Algorithm: greedy merging by estimated benefit (the shape of XLA's priority fusion), rather than
// TVM's dominator-tree pattern. Why: kiln's fusions go beyond "an op into its dominator" —
// sibling kernels that share an input, a reduction's epilogue that is also the next reduction's
// prologue (LayerNorm), two chained contractions (attention) — and each is worth a different
// amount. One uniform loop, driven by the same cost model that will price kernels later, decides
// all of them and leaves a reason for every refusal.
//
//   start: one group per node (views are groups too; they cost nothing and count no kernel)
//   repeat:
//     candidates = every producer→consumer edge between groups (fuse by merging the two, or —
//                  for elementwise producers with other consumers — by recomputing the producer in
//                  the consumer), and every pair of independent groups reading the same tensor
//                  (siblings)
//     for each: cheap legality (fusion_legality.cc: no cycle, registers, arguments), then
//               benefit = est(separate) − est(fused), with est from the roofline cost model, then,
//               for a positive benefit only, the one analysis: the code generator is asked whether
//               it can build the fused kernel (codegen_analysis.h → loop::analyze_group)
//     take the candidate with the largest positive benefit (ties: earliest nodes first), apply it
//   until no candidate has a positive benefit, or --fusion-fuel fusions were made
//   finally: for every edge still crossing groups, record why (illegal, or not profitable), and
//            ask the analysis once more about every planned kernel exactly as it will be built:
//            it records the emitter; a refusal there is a compiler bug (an internal error)
//
// Before the loop, every node is asked about alone: one the code generator cannot build (an op
// with no loop spelling, e.g. an undecomposed composite) is a *library kernel*, never fused with
// anything, and listed as such by kiln explain and kiln run. Nothing else runs outside generated code.
//
//     a ──▶ b ──▶ c          a,b,c elementwise: {a,b,c} one kernel
//     conv ──▶ add ──▶ relu   conv with epilogue: {conv,add,relu}
//     x ──▶ mean ──▶ sub ◀── x   row kernel: {mean, sub, ...} as long as every member lives on the
//                                 same rows (or one value per row)
//
// Cost of evaluating: each round re-evaluates every candidate, O(E · group size); fine for the
// thousands of nodes of real models. Deterministic: no hashing order or host detection involved.
#include "fusion/partitioner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "fusion/codegen_analysis.h"
#include "fusion/fusion_legality.h"
#include "fusion/group_graph.h"
#include "fusion/op_kind.h"
#include "ir/printer.h"

namespace kiln {

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::View: return "view";
    case GroupKind::Elementwise: return "elementwise";
    case GroupKind::Reduction: return "reduction";
    case GroupKind::Contraction: return "contraction";
    case GroupKind::Opaque: return "opaque";
  }
  return "?";
}

int FusionPlan::kernel_count() const {
  int n = 0;
  for (const auto& g : groups) n += g.counts_as_kernel() ? 1 : 0;
  return n;
}

int FusionPlan::library_kernel_count() const {
  int n = 0;
  for (const auto& g : groups) n += g.is_library() ? 1 : 0;
  return n;
}

namespace {

enum class Mode { Merge, Recompute, Siblings };

struct Candidate {
  int a = -1, b = -1;  // producer/consumer, or the two siblings
  Mode mode = Mode::Merge;
  double benefit = 0;
  FusionDecision decision = FusionDecision::yes();
};

double est(const GroupGraph& gg, int gid, const Target& t) { return gg.cost_of(gg.members(gid), {}, t).total_us(); }

// What every evaluation needs: the groups, the target, the one analysis, and the nodes that run as
// library kernels (node index → why).
struct Ctx {
  const GroupGraph& gg;
  const Target& t;
  CodegenAnalysis& analysis;
  const std::map<int, std::string>& library;
  // kiln tune's keep-apart pairs for this graph, as node indices.
  std::vector<std::pair<int, int>> apart;
};

// A group holding both nodes of a keep-apart pair is never formed (kiln tune measured them faster
// as separate kernels).
FusionDecision apart_refusal(const Ctx& cx, const Members& m) {
  for (auto [x, y] : cx.apart)
    if (std::binary_search(m.begin(), m.end(), x) && std::binary_search(m.begin(), m.end(), y))
      return FusionDecision::no("kept apart: kiln tune measured '" + cx.gg.nodes()[size_t(x)]->name() + "' and '" +
                                cx.gg.nodes()[size_t(y)]->name() + "' faster as separate kernels (its records)");
  return FusionDecision::yes();
}

// A library node fuses with nothing: say so before anything else is computed.
FusionDecision library_refusal(const Ctx& cx, const Members& m) {
  for (int i : m)
    if (auto it = cx.library.find(i); it != cx.library.end()) {
      const Node* n = cx.gg.nodes()[size_t(i)];
      return FusionDecision::no(n->op_type() + " '" + n->name() + "' has no generated code (" + it->second +
                                "); it runs alone as a library kernel");
    }
  return FusionDecision::yes();
}

// The cheap checks first, then the benefit; only a profitable candidate asks the analysis, which
// builds the kernel. The plan it accepts may compute more than the ops (tile padding the emitter
// reports, KernelAnalysis::padding_flops): what the fused kernel pads beyond its parts is priced
// at the target's rate for its class and taken off the benefit (the pointwise-depthwise kernel
// over a 7x7 map computes 64 positions for 49: MobileNetV2's last three blocks ran 0.29 ms fused
// against 0.21 ms apart, their expanded tensor small enough to stay in L2 between the kernels).
void finish(const Ctx& cx, Candidate& c, const Members& merged, const std::vector<int>& replacing) {
  if (!c.decision.ok() || c.benefit <= 1e-9) return;
  const loop::KernelAnalysis& a = cx.analysis.analyze(merged, replacing);
  c.decision = CodegenAnalysis::decision(a);
  if (!c.decision.ok()) return;
  double padding = a.padding_flops;
  if (padding <= 0) return;  // (what the parts pad is not credited: only a penalty is priced)
  for (int r : replacing) {
    const loop::KernelAnalysis& part = cx.analysis.analyze(cx.gg.members(r), {});
    if (part.ok) padding -= part.padding_flops;
  }
  if (padding <= 0) return;
  std::vector<const Node*> nodes;
  for (int i : merged) nodes.push_back(cx.gg.nodes()[size_t(i)]);
  const double us = padding / (cx.t.peak_gflops * class_efficiency(cx.t, cost_class(nodes)).compute * 1e3);
  c.benefit -= us;
  if (c.benefit <= 1e-9)
    c.decision = FusionDecision::no(cat("not profitable: the fused kernel computes ", padding / 1e6,
                                        " MFLOP of tile padding (", us, " us), more than fusing saves (",
                                        c.benefit + us, " us by the cost model)"));
}

Candidate evaluate_edge(const Ctx& cx, int p, int c) {
  const GroupGraph& gg = cx.gg;
  const Target& t = cx.t;
  Members merged = GroupGraph::unite(gg.members(p), gg.members(c));
  Candidate best{p, c, Mode::Merge, 0, library_refusal(cx, merged)};
  if (best.decision.ok()) best.decision = apart_refusal(cx, merged);
  if (!best.decision.ok()) return best;
  double before = est(gg, p, t) + est(gg, c, t);
  GroupKind pk = gg.kind_of(gg.members(p));
  // A view costs nothing in either place, so the estimate sees no gain in moving it; but a view
  // left between two kernels hides their edge from each other. A tiny bonus (below any real
  // benefit) lets views ride along with a neighbour once the real fusions are done.
  constexpr double kViewBonusUs = 1e-3;
  const bool view = pk == GroupKind::View || gg.kind_of(gg.members(c)) == GroupKind::View;
  best.decision = can_fuse(gg, p, c, merged, {p, c}, t);
  if (best.decision.ok()) {
    best.benefit = before - gg.cost_of(merged, {p, c}, t).total_us();
    if (view) best.benefit = std::max(best.benefit, kViewBonusUs);
    finish(cx, best, merged, {p, c});
  }
  // Recompute an elementwise producer inside the consumer, keeping it for its other consumers.
  if ((pk == GroupKind::Elementwise || pk == GroupKind::View) && gg.consumer_groups(p).size() > 1) {
    Candidate r{p, c, Mode::Recompute, 0, can_fuse(gg, p, c, merged, {c}, t)};
    if (r.decision.ok()) {
      r.benefit = before - (est(gg, p, t) + gg.cost_of(merged, {c}, t).total_us());
      if (view) r.benefit = std::max(r.benefit, kViewBonusUs);
      if (!best.decision.ok() || r.benefit > best.benefit) {
        finish(cx, r, merged, {c});
        if (r.decision.ok()) best = r;
      }
    }
  }
  return best;
}

Candidate evaluate_siblings(const Ctx& cx, int a, int b) {
  const GroupGraph& gg = cx.gg;
  Members merged = GroupGraph::unite(gg.members(a), gg.members(b));
  Candidate cand{a, b, Mode::Siblings, 0, library_refusal(cx, merged)};
  if (cand.decision.ok()) cand.decision = apart_refusal(cx, merged);
  if (!cand.decision.ok()) return cand;
  cand.decision = can_fuse_siblings(gg, a, b, merged, cx.t);
  if (cand.decision.ok()) {
    cand.benefit = est(gg, a, cx.t) + est(gg, b, cx.t) - gg.cost_of(merged, {a, b}, cx.t).total_us();
    finish(cx, cand, merged, {a, b});
  }
  return cand;
}

std::vector<Candidate> candidates(const Ctx& cx) {
  const GroupGraph& gg = cx.gg;
  std::vector<Candidate> r;
  std::map<const Value*, std::vector<int>> readers;
  for (int gid = 0; gid < gg.num_groups(); ++gid) {
    if (!gg.alive(gid)) continue;
    for (int c : gg.consumer_groups(gid)) r.push_back(evaluate_edge(cx, gid, c));
    for (const Value* v : gg.inputs_of(gg.members(gid)))
      if (!v->is_constant()) readers[v].push_back(gid);
  }
  std::set<std::pair<int, int>> seen;
  for (auto& [v, gs] : readers)
    for (size_t i = 0; i < gs.size(); ++i)
      for (size_t j = i + 1; j < gs.size(); ++j) {
        auto key = std::minmax(gs[i], gs[j]);
        if (!seen.insert(key).second) continue;
        // Dependent pairs are producer→consumer candidates, not siblings.
        auto ca = gg.consumer_groups(key.first), cb = gg.consumer_groups(key.second);
        if (std::count(ca.begin(), ca.end(), key.second) || std::count(cb.begin(), cb.end(), key.first)) continue;
        // Horizontal fusion pays for kernels that stream the shared input through a loop nest of
        // their own (contractions, reductions). Elementwise and injective readers are better
        // absorbed into their consumers as prologues, which a sibling group could no longer be.
        GroupKind k = gg.kind_of(gg.members(key.first));
        if (k != GroupKind::Contraction && k != GroupKind::Reduction) continue;
        r.push_back(evaluate_siblings(cx, key.first, key.second));
      }
  return r;
}

// Alive groups that produce something group gid reads from memory.
std::vector<int> producer_groups(const GroupGraph& gg, int gid) {
  std::vector<int> r;
  for (const Value* v : gg.inputs_of(gg.members(gid))) {
    if (!v->producer()) continue;
    for (int p : gg.groups_of(gg.index(v->producer())))
      if (p != gid && std::find(r.begin(), r.end(), p) == r.end()) r.push_back(p);
  }
  return r;
}

// The candidates of the greedy loop, kept between rounds: after a fusion only the candidates of
// the groups it touched (the fused groups and their neighbours) are evaluated again, which makes
// partitioning near-linear in the model size instead of quadratic. The chosen candidate is always
// re-evaluated before it is applied, so a stale entry can cost a retry but never an illegal fusion.
class CandidateSet {
 public:
  explicit CandidateSet(const Ctx& cx) : cx_(cx), gg_(cx.gg) {}

  void refresh(const std::set<int>& dirty) {
    for (auto it = cands_.begin(); it != cands_.end();) {
      auto [a, b, sib] = it->first;
      bool stale = dirty.count(a) || dirty.count(b) || !gg_.alive(a) || !gg_.alive(b);
      it = stale ? cands_.erase(it) : std::next(it);
    }
    for (int g : dirty) {
      if (!gg_.alive(g)) continue;
      for (int c : gg_.consumer_groups(g)) put(evaluate_edge(cx_, g, c));
      for (int p : producer_groups(gg_, g)) {
        auto cs = gg_.consumer_groups(p);
        if (std::count(cs.begin(), cs.end(), g)) put(evaluate_edge(cx_, p, g));
      }
      add_siblings(g);
    }
  }

  void put(const Candidate& c) { cands_[{c.a, c.b, c.mode == Mode::Siblings}] = c; }

  const Candidate* best() const {
    const Candidate* best = nullptr;
    for (const auto& [key, c] : cands_) {
      if (!c.decision.ok() || c.benefit <= 1e-9) continue;
      if (!best || c.benefit > best->benefit + 1e-9) best = &c;
    }
    return best;
  }

 private:
  void add_siblings(int g) {
    GroupKind k = gg_.kind_of(gg_.members(g));
    if (k != GroupKind::Contraction && k != GroupKind::Reduction) return;
    for (const Value* v : gg_.inputs_of(gg_.members(g))) {
      if (v->is_constant()) continue;
      for (auto [user, slot] : v->uses())
        for (int h : gg_.groups_of(gg_.index(user))) {
          if (h == g || gg_.kind_of(gg_.members(h)) != k) continue;
          auto [a, b] = std::minmax(g, h);
          auto ca = gg_.consumer_groups(a), cb = gg_.consumer_groups(b);
          if (std::count(ca.begin(), ca.end(), b) || std::count(cb.begin(), cb.end(), a)) continue;
          if (cands_.count({a, b, true})) continue;
          put(evaluate_siblings(cx_, a, b));
        }
    }
  }

  const Ctx& cx_;
  const GroupGraph& gg_;
  std::map<std::tuple<int, int, bool>, Candidate> cands_;
};

std::string group_name(const GroupGraph& gg, const Members& m, int index) {
  std::string name = "fused";
  std::set<std::string> seen;
  int shown = 0;
  for (int i : m) {
    const Node* n = gg.nodes()[size_t(i)];
    if (is_view(*n)) continue;
    std::string op;
    for (char ch : n->op_type()) op += char(std::tolower(static_cast<unsigned char>(ch)));
    if (!seen.insert(op).second) continue;
    if (++shown > 4) {
      name += "_etc";
      break;
    }
    name += "_" + op;
  }
  if (shown == 0) name = "view";
  return name + "_" + std::to_string(index);
}

// Orders alive groups so that every group runs after the groups it reads from.
std::vector<int> execution_order(const GroupGraph& gg) {
  std::vector<int> alive;
  for (int gid = 0; gid < gg.num_groups(); ++gid)
    if (gg.alive(gid)) alive.push_back(gid);
  std::map<int, int> indeg;
  std::map<int, std::vector<int>> succ;
  for (int g : alive) indeg[g] = 0;
  for (int g : alive)
    for (int c : gg.consumer_groups(g)) {
      succ[g].push_back(c);
      indeg[c]++;
    }
  // Smallest first node first keeps the order close to the model's.
  auto first = [&](int g) { return gg.members(g).front(); };
  std::set<std::pair<int, int>> ready;
  for (int g : alive)
    if (indeg[g] == 0) ready.insert({first(g), g});
  std::vector<int> order;
  while (!ready.empty()) {
    int g = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(g);
    for (int c : succ[g])
      if (--indeg[c] == 0) ready.insert({first(c), c});
  }
  KILN_CHECK(order.size() == alive.size(), "fusion groups form a cycle");
  return order;
}

// Bytes of intermediates (not graph inputs/outputs or constants) written by `plan`'s kernels.
int64_t intermediate_bytes(const Graph& g, const std::vector<FusionGroup>& groups) {
  int64_t b = 0;
  for (const auto& grp : groups)
    if (grp.counts_as_kernel())
      for (const Value* v : grp.outputs)
        if (!g.is_graph_output(v)) b += value_bytes(v);
  return b;
}

// The plan: alive groups in execution order, each asked of the analysis exactly as it will be
// built (its emitter is recorded; a library node keeps its reason).
FusionPlan build_plan(const Ctx& cx) {
  const GroupGraph& gg = cx.gg;
  FusionPlan plan;
  plan.target = cx.t;
  std::map<const Value*, bool> written;
  for (int gid : execution_order(gg)) {
    const Members& m = gg.members(gid);
    FusionGroup grp = gg.as_group(m, {});
    // A value computed by several groups is written by the first of them.
    std::vector<const Value*> outs;
    for (const Value* v : grp.outputs)
      if (!written[v]) {
        outs.push_back(v);
        written[v] = true;
      }
    grp.outputs = std::move(outs);
    grp.cost = gg.cost_of(m, {}, cx.t);
    grp.name = group_name(gg, m, int(plan.groups.size()));
    if (grp.counts_as_kernel()) {
      if (m.size() == 1 && cx.library.count(m[0])) {
        grp.library_reason = cx.library.at(m[0]);
      } else {
        const loop::KernelAnalysis& a = cx.analysis.analyze(grp, m);
        KILN_CHECK(a.ok, "the fusion plan holds kernel ", grp.name, ", which code generation refuses: ", a.reason);
        grp.emitter = a.emitter;
        grp.placements = a.placements;
      }
    }
    plan.groups.push_back(std::move(grp));
  }
  return plan;
}

// Nodes the code generator cannot build even alone (node index → the lowering's reason). Views
// are not asked: a view that stays alone copies its input.
std::map<int, std::string> library_nodes(const GroupGraph& gg, CodegenAnalysis& analysis) {
  std::map<int, std::string> r;
  for (int i = 0; i < gg.num_groups(); ++i) {
    if (gg.kind_of({i}) == GroupKind::View) continue;
    const loop::KernelAnalysis& a = analysis.analyze({i}, {});
    if (!a.ok) r[i] = a.reason;
  }
  return r;
}

std::string first_name(const Node* n) { return n->name(); }

// A group's representative for the fusion log: its first node that is not a view (a view-only
// group: its first node).
const Node* side_node(const GroupGraph& gg, int gid) {
  for (int i : gg.members(gid))
    if (!is_view(*gg.nodes()[size_t(i)])) return gg.nodes()[size_t(i)];
  return gg.nodes()[size_t(gg.members(gid).front())];
}
std::string side_key(const GroupGraph& gg, int gid) {
  const Node* n = side_node(gg, gid);
  std::string k = n->op_type() + "(";
  for (const Value* v : n->inputs()) k += (v ? shape_str(v->shape()) : "_") + ",";
  return k + ")" + std::to_string(gg.members(gid).size());
}

}  // namespace

FusionPlan partition(const Graph& g, const FusionOptions& opts) {
  const Target& t = opts.target;
  GroupGraph gg(g);
  CodegenAnalysis analysis(gg, opts.schedule_or_default());
  const std::map<int, std::string> library = library_nodes(gg, analysis);
  Ctx cx{gg, t, analysis, library, {}};
  if (!opts.keep_apart.empty())
    if (auto it = opts.keep_apart.find(graph_fingerprint(g)); it != opts.keep_apart.end()) {
      // By name; a name two nodes share names neither (ONNX does not make names unique), so its
      // pairs are ignored rather than applied to the wrong node.
      std::map<std::string, int> index;
      for (int i = 0; i < gg.num_groups(); ++i) {
        auto [pos, fresh] = index.emplace(gg.nodes()[size_t(i)]->name(), i);
        if (!fresh) pos->second = -1;
      }
      for (const auto& [x, y] : it->second) {
        auto ix = index.find(x), iy = index.find(y);
        if (ix != index.end() && iy != index.end() && ix->second >= 0 && iy->second >= 0)
          cx.apart.push_back({ix->second, iy->second});
      }
    }
  // The unfused plan (for the before/after figures) is the state before any fusion.
  FusionPlan baseline = build_plan(cx);
  int64_t accepted = 0;
  std::vector<AcceptedFusion> accepted_log;
  bool fuel_out = false;
  CandidateSet cands(cx);
  if (opts.enabled) {
    std::set<int> all;
    for (int gid = 0; gid < gg.num_groups(); ++gid) all.insert(gid);
    cands.refresh(all);
  }
  while (opts.enabled) {
    if (opts.fuel >= 0 && accepted >= opts.fuel) {
      fuel_out = true;
      break;
    }
    const Candidate* best = cands.best();
    if (!best) break;
    Candidate chosen = *best;
    Candidate fresh = chosen.mode == Mode::Siblings ? evaluate_siblings(cx, chosen.a, chosen.b)
                                                     : evaluate_edge(cx, chosen.a, chosen.b);
    if (!fresh.decision.ok() || fresh.mode != chosen.mode || std::abs(fresh.benefit - chosen.benefit) > 1e-9) {
      cands.put(fresh);  // stale: correct it and choose again
      continue;
    }
    const double apart_us = est(gg, chosen.a, t) + est(gg, chosen.b, t);
    const char* mode = chosen.mode == Mode::Merge ? "merge" : chosen.mode == Mode::Recompute ? "recompute" : "siblings";
    AcceptedFusion af{side_node(gg, chosen.a)->name(), side_node(gg, chosen.b)->name(), mode, apart_us, chosen.benefit,
                      std::string(mode) + ":" + side_key(gg, chosen.a) + "+" + side_key(gg, chosen.b)};
    if (chosen.mode == Mode::Recompute) gg.recompute_into(chosen.a, chosen.b);
    else gg.merge(chosen.a, chosen.b);
    ++accepted;
    accepted_log.push_back(std::move(af));
    std::set<int> dirty{chosen.a, chosen.b};
    for (int g : {chosen.a, chosen.b}) {
      if (!gg.alive(g)) continue;
      for (int n : gg.consumer_groups(g)) dirty.insert(n);
      for (int n : producer_groups(gg, g)) dirty.insert(n);
    }
    cands.refresh(dirty);
  }

  FusionPlan plan = opts.enabled ? build_plan(cx) : baseline;
  plan.accepted_fusions = accepted;
  if (opts.enabled) plan.accepted = std::move(accepted_log);
  plan.intermediate_bytes_unfused = intermediate_bytes(g, baseline.groups);
  plan.intermediate_bytes_fused = intermediate_bytes(g, plan.groups);
  for (const auto& grp : baseline.groups) plan.est_us_unfused += grp.cost.total_us();
  plan.kernels_unfused = baseline.kernel_count();
  for (const auto& grp : plan.groups) plan.est_us_fused += grp.cost.total_us();

  // Why each remaining producer→consumer edge was not fused.
  if (opts.enabled) {
    std::set<std::pair<const Node*, const Node*>> reported;
    for (const auto& c : candidates(cx)) {
      if (c.mode == Mode::Siblings) {
        // Horizontal fusions considered and refused are reported by the groups' first nodes.
        if (c.decision.ok() && !fuel_out) continue;
        const Node* a = gg.nodes()[size_t(gg.members(c.a).front())];
        const Node* b = gg.nodes()[size_t(gg.members(c.b).front())];
        if (!reported.insert({a, b}).second) continue;
        plan.rejected.push_back({first_name(a), first_name(b),
                                 "siblings (they read the same tensor): " +
                                     (c.decision.ok() ? std::string("fusion fuel exhausted (--fusion-fuel)")
                                                      : c.decision.reason())});
        continue;
      }
      std::string why;
      if (fuel_out && c.decision.ok() && c.benefit > 0) why = "fusion fuel exhausted (--fusion-fuel)";
      else if (!c.decision.ok()) why = c.decision.reason();
      else {
        double apart = est(gg, c.a, t) + est(gg, c.b, t);
        why = cat("not profitable: the cost model estimates ", apart, " us as two kernels and ", apart - c.benefit,
                  " us fused");
      }
      // Name the pair by the nodes on the edge: a producer in a whose output a node of b reads.
      for (int i : gg.members(c.a)) {
        const Node* pn = gg.nodes()[size_t(i)];
        for (const Value* v : pn->outputs())
          for (auto [cn, slot] : v->uses()) {
            auto groups = gg.groups_of(gg.index(cn));
            if (std::find(groups.begin(), groups.end(), c.b) == groups.end()) continue;
            // A view inside a kernel is that kernel's business; a view left on its own between two
            // kernels is where the boundary is, and its refusals are the reason (a training-mode
            // Dropout kept Swin's softmax and P.V apart with nothing reported).
            const bool alone_a = gg.kind_of(gg.members(c.a)) == GroupKind::View;
            const bool alone_b = gg.kind_of(gg.members(c.b)) == GroupKind::View;
            if ((is_view(*pn) && !alone_a) || (is_view(*cn) && !alone_b)) continue;
            if (!reported.insert({pn, cn}).second) continue;
            plan.rejected.push_back({first_name(pn), first_name(cn), why});
          }
      }
    }
  }
  plan.analysis_calls = analysis.calls();
  plan.analysis_cache_hits = analysis.hits();
  plan.analysis_ms = analysis.ms();
  return plan;
}

}  // namespace kiln
