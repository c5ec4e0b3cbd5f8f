#include "fusion/group_graph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "fusion/concat_in_place.h"
#include "fusion/op_kind.h"

namespace kiln {

GroupGraph::GroupGraph(const Graph& g) : g_(g), nodes_(g.nodes()) {
  node_groups_.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    groups_.push_back({int(i)});
    alive_.push_back(true);
    node_groups_[i].push_back(int(i));
    index_[nodes_[i]] = int(i);
    in_place_.push_back(concat_in_place(g, *nodes_[i]).ok());
  }
}

int GroupGraph::index(const Node* n) const {
  auto it = index_.find(n);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> GroupGraph::groups_of(int node) const {
  std::vector<int> r;
  for (int gid : node_groups_[size_t(node)])
    if (alive_[size_t(gid)]) r.push_back(gid);
  return r;
}

Members GroupGraph::unite(const Members& a, const Members& b) {
  Members r;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(r));
  return r;
}

std::vector<const Value*> GroupGraph::inputs_of(const Members& m) const {
  std::vector<const Value*> r;
  for (int i : m)
    for (const Value* v : nodes_[size_t(i)]->inputs()) {
      if (!v) continue;
      const Node* p = v->producer();
      if (p && std::binary_search(m.begin(), m.end(), index(p))) continue;
      if (std::find(r.begin(), r.end(), v) == r.end()) r.push_back(v);
    }
  return r;
}

std::vector<const Value*> GroupGraph::outputs_of(const Members& m, const std::vector<int>& replacing) const {
  std::vector<const Value*> r;
  for (int i : m) {
    for (const Value* v : nodes_[size_t(i)]->outputs()) {
      bool needed = g_.is_graph_output(v);
      for (auto [c, slot] : v->uses()) {
        if (needed) break;
        int ci = index(c);
        if (std::binary_search(m.begin(), m.end(), ci)) {
          // Computed here; but another group containing the consumer might still need it.
          for (int gid : groups_of(ci)) {
            if (std::count(replacing.begin(), replacing.end(), gid)) continue;
            const Members& gm = groups_[size_t(gid)];
            if (!std::binary_search(gm.begin(), gm.end(), i)) needed = true;
          }
          continue;
        }
        for (int gid : groups_of(ci)) {
          if (std::count(replacing.begin(), replacing.end(), gid)) continue;
          const Members& gm = groups_[size_t(gid)];
          if (!std::binary_search(gm.begin(), gm.end(), i)) needed = true;
        }
      }
      if (needed) r.push_back(v);
    }
  }
  return r;
}

GroupKind GroupGraph::kind_of(const Members& m) const {
  // A Concat built in place moves no data, like a view (it fuses with nothing: it stays alone).
  if (m.size() == 1 && in_place_[size_t(m[0])]) return GroupKind::View;
  bool all_views = true, reduction = false, contraction = false;
  for (int i : m) {
    const Node* n = nodes_[size_t(i)];
    OpKind k = op_kind(*n);
    if (k == OpKind::Opaque) return GroupKind::Opaque;
    all_views = all_views && is_view(*n);
    reduction = reduction || k == OpKind::Reduction;
    contraction = contraction || k == OpKind::Contraction;
  }
  if (contraction) return GroupKind::Contraction;
  if (reduction) return GroupKind::Reduction;
  return all_views ? GroupKind::View : GroupKind::Elementwise;
}

FusionGroup GroupGraph::as_group(const Members& m, const std::vector<int>& replacing) const {
  FusionGroup grp;
  grp.kind = kind_of(m);
  grp.in_place_concat = m.size() == 1 && in_place_[size_t(m[0])];
  for (int i : m) grp.nodes.push_back(nodes_[size_t(i)]);
  grp.inputs = inputs_of(m);
  grp.outputs = outputs_of(m, replacing);
  return grp;
}

// How many times a contraction reads each element of operand `slot` when its output is tiled the
// way its micro-kernel will tile it (64 columns of a MatMul, 16 output channels of a Conv): a
// prologue op folded into that operand runs this many times per element.
double operand_reuse(const Node& c, size_t slot, const Target& t) {
  const Shape& out = c.output(0)->shape();
  auto tiles = [](double n, double tile) { return std::max(1.0, std::ceil(n / tile)); };
  if (c.op_type() == "MatMul") {
    double n = out.empty() ? 1 : double(out.back());
    const Shape& a = c.input(0)->shape();
    double m = a.size() >= 2 ? double(a[a.size() - 2]) : 1;
    // A computed left operand is packed once per row block for a whole panel of columns
    // (lower_contraction_tiled.cc): it is recomputed once per panel, whose accumulators take
    // Schedule::rows_block_bytes for at least one micro-kernel's rows.
    if (slot == 0) {
      loop::Schedule s = loop::Schedule::for_target(t);
      double panel = double(s.rows_block_bytes) / double(sizeof(float)) / double(std::max(1, s.contraction.mr));
      return tiles(n, panel);
    }
    return tiles(m, 64);
  }
  if (c.op_type() == "Conv" && out.size() >= 3) {
    int64_t group = c.attr_int("group", 1);
    if (slot != 0) return tiles(double(shape_numel(out) / (out[0] * out[1])), 64);
    auto k = c.attr_ints("kernel_shape");
    auto st = c.attr_ints("strides");
    double window = 1;
    for (size_t i = 0; i < k.size(); ++i) window *= double(k[i]) / double(i < st.size() ? st[i] : 1);
    // A dense conv stages a computed input once per call (phase planes, or a plain copy the
    // im2col panels are packed from: lower_contraction_implicit.cc), except with few input channels,
    // whose transposed im2col holds each element once per kernel position.
    const Shape& in = c.input(0)->shape();
    if (group == 1) return in.size() >= 2 && in[1] < 16 ? std::max(1.0, window) : 1.0;
    return std::max(1.0, window) * tiles(double(out[1] / std::max<int64_t>(group, 1)), 16);
  }
  return 1;
}

// Cost notes:
//  - bytes: every input read once, every output written once (caches are not modelled yet; the
//    roofline issue calibrates this);
//  - layout: a Transpose that reads memory and moves the innermost axis reads with a stride; its
//    input is charged twice, for the cache lines it wastes;
//  - recomputation: in an elementwise group a node whose output is smaller than the loop domain
//    (a broadcast operand) runs once per domain element; a node feeding a contraction's operand is
//    re-run for every read of the operand (operand_reuse).
CostEstimate GroupGraph::cost_of(const Members& m, const std::vector<int>& replacing, const Target& t) const {
  GroupKind kind = kind_of(m);
  auto ins = inputs_of(m);
  auto outs = outputs_of(m, replacing);
  int64_t read = 0, written = 0;
  for (const Value* v : ins) read += v->is_constant() && kind == GroupKind::View ? 0 : value_bytes(v);
  for (const Value* v : outs) written += value_bytes(v);
  if (kind == GroupKind::View) return estimate_time(0, 0, 0, 0, t);

  const Node* contraction = nullptr;
  for (int i : m)
    if (op_kind(*nodes_[size_t(i)]) == OpKind::Contraction) contraction = nodes_[size_t(i)];

  // How many times each inlined member is computed. A member computed inline runs once for every
  // element its member consumers compute: a consumer at the same positions (an elementwise op, a
  // reduction reading it once) shares the value, any other (a broadcast, a gather, a Concat's
  // slice) runs it again per element it reads, and a contraction reads its operand
  // operand_reuse times per element.
  // Reductions and contractions are staged (computed once per output element). Counting only a
  // contraction's direct operand (a Concat of two bilinear resizes feeding a Conv counted the
  // resizes once) priced a prologue that ran 36 times per element as free.
  std::map<const Node*, double> evaluations;
  std::function<double(const Node*)> evals = [&](const Node* n) -> double {
    if (auto it = evaluations.find(n); it != evaluations.end()) return it->second;
    const double out_numel = double(shape_numel(n->output(0)->shape()));
    const OpKind nk = op_kind(*n);
    if (nk == OpKind::Reduction || nk == OpKind::Contraction) return evaluations[n] = out_numel;
    double shared = 0, again = 0;
    for (const Value* o : n->outputs()) {
      if (o->uses().empty() || std::count(outs.begin(), outs.end(), o)) shared = std::max(shared, out_numel);
      for (auto [c, slot] : o->uses()) {
        const int ci = index(c);
        if (ci < 0 || !std::binary_search(m.begin(), m.end(), ci)) continue;
        const Value* in = c->input(size_t(slot));
        const double in_numel = double(shape_numel(in->shape())), c_numel = double(shape_numel(c->output(0)->shape()));
        const OpKind ck = op_kind(*c);
        if (c == contraction) again += out_numel * operand_reuse(*contraction, size_t(slot), t);
        else if (ck == OpKind::Contraction) again += out_numel;
        else if (ck == OpKind::Reduction)  // reads each element once per evaluation, at its position
          shared = std::max(shared, evals(c) * std::max(1.0, in_numel / std::max(1.0, c_numel)));
        else if (c->op_type() == "Concat") again += evals(c) * in_numel / std::max(1.0, c_numel);
        else if ((ck == OpKind::ElementWise || ck == OpKind::Broadcast) && in->shape() == c->output(0)->shape())
          shared = std::max(shared, evals(c));
        else again += evals(c);
      }
    }
    return evaluations[n] = std::max(shared + again, out_numel);
  };
  // 0 when `n` does not reach the contraction's operands through members (other contractions
  // stop the walk); else the largest operand_reuse of the operands it reaches. Memoised: each
  // member is walked once per cost_of call.
  std::map<const Node*, double> reach;
  std::function<double(const Node*)> reaches_contraction = [&](const Node* n) -> double {
    if (auto it = reach.find(n); it != reach.end()) return it->second;
    double reuse = 0;
    for (const Value* o : n->outputs())
      for (auto [c, slot] : o->uses()) {
        if (c == contraction) reuse = std::max(reuse, operand_reuse(*contraction, size_t(slot), t));
        const int ci = index(c);
        if (ci >= 0 && std::binary_search(m.begin(), m.end(), ci) && op_kind(*c) != OpKind::Contraction)
          reuse = std::max(reuse, reaches_contraction(c));
      }
    return reach[n] = reuse;
  };

  // Members downstream of a contraction member: in a chain or row pipeline they are a later
  // stage's operand, computed once per row block on chip; only an op feeding the contraction
  // directly is charged its reuse there (as before the transitive count).
  std::set<const Node*> after_contraction;
  {
    std::vector<const Node*> work;
    for (int i : m)
      if (op_kind(*nodes_[size_t(i)]) == OpKind::Contraction) work.push_back(nodes_[size_t(i)]);
    while (!work.empty()) {
      const Node* x = work.back();
      work.pop_back();
      for (const Value* o : x->outputs())
        for (auto [c, slot] : o->uses()) {
          const int ci = index(c);
          if (ci >= 0 && std::binary_search(m.begin(), m.end(), ci) && after_contraction.insert(c).second)
            work.push_back(c);
        }
    }
  }

  double flops = 0, recomputed = 0;
  for (int i : m) {
    const Node* n = nodes_[size_t(i)];
    double out_numel = double(shape_numel(n->output(0)->shape()));
    // An indexed load (Gather*) costs an index read and an address per element: one operation,
    // like an add. Inlined into an operand that is packed per tile (operand_reuse > 1) it also
    // keeps the packing loop scalar: every packed element then costs a vector's worth of lanes.
    const bool gather = n->op_type() == "Gather" || n->op_type() == "GatherElements" || n->op_type() == "GatherND";
    const double reuse = contraction && op_kind(*n) != OpKind::Contraction ? reaches_contraction(n) : 0;
    const bool prologue = reuse > 0;
    double f = gather ? out_numel * (reuse > 1 ? std::max(1, t.vector_lanes_f32) : 1) : node_flops(*n);
    double once = f;
    // A grouped or depthwise conv keeps the direct-feeder rule too: its stencil stages the
    // prologue per channel plane, and the window-area reuse charged to the op feeding it is what
    // makes an activation between two convs the first one's epilogue (docs/fusion.md).
    const bool grouped = contraction && contraction->op_type() == "Conv" && contraction->attr_int("group", 1) != 1;
    if (prologue && (after_contraction.count(n) || grouped)) {
      for (const Value* o : n->outputs())
        for (auto [c, slot] : o->uses())
          if (c == contraction) f *= operand_reuse(*contraction, size_t(slot), t);
    } else if ((kind == GroupKind::Elementwise || prologue) && out_numel > 0) {
      f *= evals(n) / out_numel;
    }
    recomputed += f - once;
    flops += f;
    if (n->op_type() == "Transpose" && n->input(0) && std::count(ins.begin(), ins.end(), n->input(0))) {
      auto perm = n->attr_ints("perm");
      int64_t r = int64_t(n->input(0)->shape().size());
      if (!perm.empty() && perm.back() != r - 1) read += value_bytes(n->input(0));
    }
  }
  std::vector<const Node*> nodes;
  for (int i : m) nodes.push_back(nodes_[size_t(i)]);
  CostEstimate c = estimate_time(flops, read, written, 1, t, cost_class(nodes));
  // Recomputed work runs at the class's compute rate.
  c.recompute_us = recomputed / (t.peak_gflops * class_efficiency(t, c.cost_class).compute * 1e3);
  return c;
}

std::vector<int> GroupGraph::consumer_groups(int gid) const {
  std::vector<int> r;
  const Members& m = groups_[size_t(gid)];
  for (int i : m)
    for (const Value* v : nodes_[size_t(i)]->outputs())
      for (auto [c, slot] : v->uses())
        for (int cg : groups_of(index(c))) {
          if (cg == gid) continue;
          const Members& cm = groups_[size_t(cg)];
          if (std::binary_search(cm.begin(), cm.end(), i)) continue;  // recomputes it
          if (std::find(r.begin(), r.end(), cg) == r.end()) r.push_back(cg);
        }
  return r;
}

int GroupGraph::path_via(int from, int to) const {
  // Depth-first from each consumer of `from` except `to`; remember which first step led to `to`.
  std::vector<bool> seen(groups_.size(), false);
  for (int first : consumer_groups(from)) {
    if (first == to) continue;
    std::vector<int> stack{first};
    while (!stack.empty()) {
      int g = stack.back();
      stack.pop_back();
      if (g == to) return first;
      if (seen[size_t(g)]) continue;
      seen[size_t(g)] = true;
      for (int c : consumer_groups(g)) stack.push_back(c);
    }
  }
  return -1;
}

void GroupGraph::merge(int p, int c) {
  for (int i : groups_[size_t(p)])
    if (!std::binary_search(groups_[size_t(c)].begin(), groups_[size_t(c)].end(), i)) node_groups_[size_t(i)].push_back(c);
  groups_[size_t(c)] = unite(groups_[size_t(c)], groups_[size_t(p)]);
  alive_[size_t(p)] = false;
}

void GroupGraph::recompute_into(int p, int c) {
  for (int i : groups_[size_t(p)])
    if (!std::binary_search(groups_[size_t(c)].begin(), groups_[size_t(c)].end(), i)) node_groups_[size_t(i)].push_back(c);
  groups_[size_t(c)] = unite(groups_[size_t(c)], groups_[size_t(p)]);
  if (!needed(p)) alive_[size_t(p)] = false;
}

bool GroupGraph::needed(int gid) const {
  const Members& m = groups_[size_t(gid)];
  for (int i : m) {
    for (const Value* v : nodes_[size_t(i)]->outputs()) {
      if (g_.is_graph_output(v)) {
        // Written by the first alive group containing the producer.
        if (groups_of(i).front() == gid) return true;
        continue;
      }
      for (auto [c, slot] : v->uses())
        for (int cg : groups_of(index(c))) {
          const Members& cm = groups_[size_t(cg)];
          if (!std::binary_search(cm.begin(), cm.end(), i)) {
            // Someone reads it from memory; needed here unless another group also computes it.
            if (groups_of(i).size() == 1) return true;
          }
        }
    }
  }
  return false;
}

}  // namespace kiln
