// Groups with several contractions: split into independent parts, lowered one by one, merged
// into one kernel.
//
// Parts: contractions connected by a dependency (a chain) form one component; every member
// that depends on exactly one component belongs to it (its epilogue), with the prologue members
// it reads (those depending on no contraction; recomputed in each part that needs them). A
// member depending on several components (an Add of two sibling convs) belongs to the trailing
// part, an elementwise nest run after the others. A component of one contraction is lowered by
// lower_contraction_group, a chain by lower_contraction_chain, the trailing part by lower_group.
//
// The merged kernel takes the group's buffers (inputs, then outputs); each part's kernel is
// spliced in with its buffers rebound (rebind_buffers.h) and its body in its own C scope, in
// order. A value a part hands to the trailing part that is not a group output lives in a local
// buffer of the kernel (kiln_mid<k>; the C emitter heap-allocates big ones).
#include <algorithm>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

bool is_contraction(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::Contraction && n->domain().empty();
}

struct Part {
  FusionGroup grp;
  std::unordered_set<const Node*> core;  // members assigned to this part (not recomputed prologue)
};

class MultiContraction {
 public:
  MultiContraction(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched) {}

  LoopKernel lower() {
    components();
    if (parts_.size() == 1 && trailing_.core.empty()) return lower_contraction_chain(grp_, name_, sched_);
    split();
    std::vector<LoopKernel> kernels;
    for (size_t i = 0; i < parts_.size(); ++i) kernels.push_back(lower_part(parts_[i], cat(name_, "_part", i)));
    if (!trailing_.core.empty()) {
      LoweredGroup lg = lower_group(trailing_.grp, cat(name_, "_tail"), sched_);
      if (!lg.kernel) refuse(lg.reason);
      kernels.push_back(std::move(*lg.kernel));
    }
    return merge(kernels);
  }

 private:
  bool member(const Node* n) const { return std::find(grp_.nodes.begin(), grp_.nodes.end(), n) != grp_.nodes.end(); }

  // Components of contractions (union-find over dependencies) and each member's part.
  void components() {
    std::vector<const Node*> cs;
    std::unordered_map<const Node*, size_t> cid;
    for (const Node* n : grp_.nodes)
      if (is_contraction(n)) {
        cid[n] = cs.size();
        cs.push_back(n);
      }
    std::vector<size_t> parent(cs.size());
    std::iota(parent.begin(), parent.end(), size_t(0));
    auto find = [&](size_t x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    // up[v]: the contractions v depends on (within the group).
    std::unordered_map<const Value*, std::set<size_t>> up;
    for (const Node* n : grp_.nodes) {
      std::set<size_t> u;
      for (const Value* v : n->inputs())
        if (v && up.count(v)) u.insert(up[v].begin(), up[v].end());
      if (is_contraction(n)) {
        for (size_t c : u) parent[find(c)] = find(cid[n]);
        u.insert(cid[n]);
      }
      for (const Value* o : n->outputs())
        if (o) up[o] = u;
      node_up_[n] = u;
    }
    std::unordered_map<size_t, size_t> part_of_root;
    for (size_t c = 0; c < cs.size(); ++c)
      if (!part_of_root.count(find(c))) {
        part_of_root[find(c)] = parts_.size();
        parts_.emplace_back();
      }
    for (const Node* n : grp_.nodes) {
      std::set<size_t> ps;
      for (size_t c : node_up_[n]) ps.insert(part_of_root.at(find(c)));
      if (ps.size() == 1) parts_[*ps.begin()].core.insert(n);
      else if (ps.size() > 1) trailing_.core.insert(n);
    }
    // Outputs that depend on no contraction (a prologue value also needed outside) go to the
    // first part that recomputes their producer; none does: to the trailing part.
    for (const Value* v : grp_.outputs) {
      const Node* p = v->producer();
      if (!p || !node_up_[p].empty()) continue;
      bool done = false;
      for (auto& part : parts_)
        if (ancestors(part.core).count(p)) {
          part.core.insert(p);
          done = true;
          break;
        }
      if (!done) trailing_.core.insert(p);
    }
  }

  // The core and the prologue members (depending on no contraction) it reads, transitively.
  std::unordered_set<const Node*> ancestors(const std::unordered_set<const Node*>& core) {
    std::unordered_set<const Node*> all(core.begin(), core.end());
    std::vector<const Node*> todo(core.begin(), core.end());
    while (!todo.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      for (const Value* v : n->inputs()) {
        const Node* p = v ? v->producer() : nullptr;
        if (!p || all.count(p) || !member(p) || !node_up_[p].empty()) continue;
        all.insert(p);
        todo.push_back(p);
      }
    }
    return all;
  }

  // Each part's FusionGroup: members in group order, inputs as read, outputs (group outputs it
  // owns and the values the trailing part reads).
  void split() {
    std::unordered_set<const Value*> owned;  // group outputs already assigned to a part
    auto build = [&](Part& part, const std::string& name, GroupKind kind) {
      const auto nodes = ancestors(part.core);
      std::unordered_set<const Value*> produced;
      part.grp.name = name;
      part.grp.kind = kind;
      for (const Node* n : grp_.nodes)
        if (nodes.count(n)) {
          part.grp.nodes.push_back(n);
          for (const Value* o : n->outputs())
            if (o) produced.insert(o);
        }
      for (const Node* n : part.grp.nodes)
        for (const Value* v : n->inputs())
          if (v && !produced.count(v) &&
              std::find(part.grp.inputs.begin(), part.grp.inputs.end(), v) == part.grp.inputs.end())
            part.grp.inputs.push_back(v);
      for (const Value* v : grp_.outputs)
        if (part.core.count(v->producer()) && owned.insert(v).second) part.grp.outputs.push_back(v);
    };
    for (size_t i = 0; i < parts_.size(); ++i) build(parts_[i], cat(grp_.name, "_part", i), GroupKind::Contraction);
    if (!trailing_.core.empty()) {
      for (const Node* n : trailing_.core) {
        const auto k = op_kind_of_type(n->op_type());
        if (!k || (*k != OpKind::ElementWise && *k != OpKind::Injective))
          refuse(cat(n->op_type(), " after sibling contractions is not lowered to loops yet"));
      }
      build(trailing_, cat(grp_.name, "_tail"), GroupKind::Elementwise);
      // What the trailing part reads from the parts: their outputs too.
      for (const Value* v : trailing_.grp.inputs) {
        const Node* p = v->producer();
        if (!p || !member(p)) continue;
        for (auto& part : parts_)
          if (part.core.count(p)) {
            if (std::find(part.grp.outputs.begin(), part.grp.outputs.end(), v) == part.grp.outputs.end())
              part.grp.outputs.push_back(v);
            break;
          }
      }
    }
    for (const auto& part : parts_)
      if (part.grp.outputs.empty()) refuse("a sibling contraction whose results are not used (not lowered to loops yet)");
  }

  LoopKernel lower_part(const Part& part, const std::string& name) {
    size_t n = 0;
    for (const Node* m : part.grp.nodes) n += is_contraction(m);
    if (n > 1) return lower_contraction_chain(part.grp, name, sched_);
    LoweredGroup lg = lower_contraction_group(part.grp, name, sched_);
    if (!lg.kernel) refuse(lg.reason);
    return std::move(*lg.kernel);
  }

  LoopKernel merge(std::vector<LoopKernel>& kernels) {
    LoopKernel k;
    k.name = name_;
    for (const Node* n : grp_.nodes)
      if (!n->name().empty() && std::find(k.sources.begin(), k.sources.end(), n->name()) == k.sources.end())
        k.sources.push_back(n->name());
    std::set<std::string> used = {"acc"};
    std::unordered_map<const Value*, BufferPtr> where;
    for (const Value* v : grp_.inputs) {
      k.inputs.push_back(std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global}));
      where[v] = k.inputs.back();
    }
    for (const Value* v : grp_.outputs) {
      k.outputs.push_back(std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global}));
      where[v] = k.outputs.back();
    }
    std::vector<BufferPtr> mids;
    std::vector<const FusionGroup*> groups;
    for (const auto& part : parts_) groups.push_back(&part.grp);
    if (!trailing_.core.empty()) groups.push_back(&trailing_.grp);
    KILN_CHECK(groups.size() == kernels.size(), "one kernel per part");
    std::vector<Stmt> body;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const FusionGroup& g = *groups[i];
      const LoopKernel& sk = kernels[i];
      KILN_CHECK(sk.inputs.size() == g.inputs.size() && sk.outputs.size() == g.outputs.size(),
                 "part kernel buffers do not match its group");
      BufferMap m;
      for (size_t j = 0; j < g.outputs.size(); ++j) {
        const Value* v = g.outputs[j];
        if (!where.count(v)) {
          mids.push_back(std::make_shared<Buffer>(Buffer{cat("kiln_mid", mids.size()), v->dtype(), v->shape(), Scope::Local}));
          where[v] = mids.back();
        }
        m[sk.outputs[j].get()] = BufferTarget{where.at(v), nullptr};
      }
      for (size_t j = 0; j < g.inputs.size(); ++j) {
        auto it = where.find(g.inputs[j]);
        KILN_CHECK(it != where.end(), "part input '", g.inputs[j]->name(), "' is computed by no earlier part");
        m[sk.inputs[j].get()] = BufferTarget{it->second, nullptr};
      }
      body.push_back(scoped({rebind_buffers(sk.body, std::move(m))}));
    }
    for (size_t i = mids.size(); i-- > 0;) body = {allocate(mids[i], std::move(body))};
    k.body = body.size() == 1 ? body[0] : block(std::move(body));
    return k;
  }

  const FusionGroup& grp_;
  std::string name_;
  Schedule sched_;
  std::unordered_map<const Node*, std::set<size_t>> node_up_;
  std::vector<Part> parts_;
  Part trailing_;
};

}  // namespace

size_t contraction_count(const FusionGroup& grp) {
  return size_t(std::count_if(grp.nodes.begin(), grp.nodes.end(), is_contraction));
}

LoweredGroup lower_multi_contraction_group(const FusionGroup& grp, const std::string& kernel_name,
                                           const Schedule& sched) {
  LoweredGroup r;
  try {
    r.kernel = MultiContraction(grp, kernel_name, sched).lower();
  } catch (const Refusal& e) {
    r.reason = e.reason;
  } catch (const UserError& e) {
    // An invalid attribute or shape the reference kernel would report at run time.
    r.reason = e.what();
  }
  return r;
}

}  // namespace kiln::loop::detail
