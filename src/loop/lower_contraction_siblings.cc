// Groups with several contractions: split into independent parts, lowered one by one, merged
// into one kernel; and the analysis of a chain of MatMuls into stages, which
// lower_contraction_chain.cc lowers as a row pipeline.
//
// Parts: contractions connected by a dependency (a chain) form one component; every member
// that depends on exactly one component belongs to it (its epilogue), with the prologue members
// it reads (those depending on no contraction; recomputed in each part that needs them). A
// member depending on several components (an Add of two sibling convs) belongs to the trailing
// part, an elementwise nest run after the others. Parts of one contraction that read the same
// left operand with constant weights are lowered together as one GEMM over their columns side by
// side (sibling_gemm.h: the common input and its prologue read once per tile); another component
// of one contraction is lowered by lower_contraction_group, a chain by lower_contraction_chain,
// the trailing part by lower_group.
//
// The merged kernel takes the group's buffers (inputs, then outputs); each part's kernel is
// spliced in with its buffers rebound (rebind_buffers.h) and its body in its own C scope, in
// order. A value a part hands to the trailing part that is not a group output lives in a local
// buffer of the kernel (kiln_mid<k>; the C emitter heap-allocates big ones).
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "loop/sibling_gemm.h"
#include "reference/kernel_util.h"
#include "support/error.h"

namespace kiln::loop::detail {

// lower_internal.h
FusionGroup subgroup(const FusionGroup& grp, const std::unordered_set<const Node*>& nodes, const std::string& name,
                     GroupKind kind) {
  FusionGroup g;
  g.name = name;
  g.kind = kind;
  std::unordered_set<const Value*> produced;
  for (const Node* n : grp.nodes)
    if (nodes.count(n)) {
      g.nodes.push_back(n);
      for (const Value* o : n->outputs())
        if (o) produced.insert(o);
    }
  for (const Node* n : g.nodes)
    for (const Value* v : n->inputs())
      if (v && !produced.count(v) && std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end()) g.inputs.push_back(v);
  return g;
}

namespace {

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
    join_siblings();
    std::vector<LoopKernel> kernels;
    std::vector<const FusionGroup*> groups;
    for (size_t i = 0; i < parts_.size(); ++i) {
      const int s = set_of_[i];
      if (s < 0) {
        kernels.push_back(lower_part(parts_[i], cat(name_, "_part", i)));
        groups.push_back(&parts_[i].grp);
      } else if (sets_[size_t(s)].front() == i) {
        kernels.push_back(gemms_.lower(sets_[size_t(s)], joined_[size_t(s)], cat(name_, "_part", i)));
        groups.push_back(&joined_[size_t(s)]);
      }
    }
    if (!trailing_.core.empty()) {
      LoweredGroup lg = lower_group(trailing_.grp, cat(name_, "_tail"), sched_);
      if (!lg.kernel) refuse(lg.reason);
      kernels.push_back(std::move(*lg.kernel));
      groups.push_back(&trailing_.grp);
    }
    return merge(kernels, groups);
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
      part.grp = subgroup(grp_, ancestors(part.core), name, kind);
      for (const Value* v : grp_.outputs)
        if (part.core.count(v->producer()) && owned.insert(v).second) part.grp.outputs.push_back(v);
    };
    for (size_t i = 0; i < parts_.size(); ++i) build(parts_[i], cat(grp_.name, "_part", i), GroupKind::Contraction);
    if (!trailing_.core.empty()) {
      for (const Node* n : trailing_.core) {
        const auto k = op_kind_of_type(n->op_type());
        if (!k || (*k != OpKind::ElementWise && *k != OpKind::Injective))
          refuse(cat(n->op_type(), " after sibling contractions is not fused by any emitter (its members stay separate kernels)"));
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
      if (part.grp.outputs.empty()) refuse("a sibling contraction whose results are not used (no emitter fuses this; its members stay separate kernels)");
  }

  // Parts of one contraction with the same left operand and constant weights become one GEMM
  // over their columns side by side (sibling_gemm.h): sets_ (indices into parts_), each with the
  // union of its parts as its group (joined_: members in group order, the parts' outputs in
  // order); set_of_ says which set a part is in (-1: lowered on its own).
  void join_siblings() {
    std::vector<const FusionGroup*> single;
    for (const Part& part : parts_)
      single.push_back(contraction_count(part.grp) == 1 ? &part.grp : nullptr);
    sets_ = gemms_.plan(single);
    set_of_.assign(parts_.size(), -1);
    joined_.reserve(sets_.size());
    for (size_t s = 0; s < sets_.size(); ++s) {
      std::unordered_set<const Node*> core;
      for (size_t i : sets_[s]) {
        set_of_[i] = int(s);
        core.insert(parts_[i].core.begin(), parts_[i].core.end());
      }
      joined_.push_back(subgroup(grp_, ancestors(core), cat(grp_.name, "_siblings", s), GroupKind::Contraction));
      for (size_t i : sets_[s])
        for (const Value* v : parts_[i].grp.outputs) joined_.back().outputs.push_back(v);
    }
  }

  LoopKernel lower_part(const Part& part, const std::string& name) {
    size_t n = 0;
    for (const Node* m : part.grp.nodes) n += is_contraction(m);
    if (n > 1) return lower_contraction_chain(part.grp, name, sched_);
    LoweredGroup lg = lower_contraction_group(part.grp, name, sched_);
    if (!lg.kernel) refuse(lg.reason);
    return std::move(*lg.kernel);
  }

  LoopKernel merge(std::vector<LoopKernel>& kernels, const std::vector<const FusionGroup*>& groups) {
    LoopKernel k;
    std::unordered_map<const Value*, BufferPtr> where;
    bind_kernel(grp_, name_, k, {"acc"}, &where, &where);
    std::vector<BufferPtr> mids;
    KILN_CHECK(groups.size() == kernels.size(), "one kernel per part");
    // Weights a part reads in panel layout become packed inputs of the merged kernel; every part
    // must then read them so (one argument per input). An input whose panels follow another's in
    // a joined sibling GEMM's argument (PackedInput::then) is not read by that part.
    auto merged_index = [&](const Value* v) {
      auto at = std::find(grp_.inputs.begin(), grp_.inputs.end(), v);
      KILN_CHECK(at != grp_.inputs.end(), "a part's packed input '", v->name(), "' is not an input of the group");
      return size_t(at - grp_.inputs.begin());
    };
    std::map<size_t, PackedInput> packed;  // merged input index -> packing (merged indices)
    std::set<size_t> row_major;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const FusionGroup& g = *groups[i];
      std::set<size_t> packed_here, unread;
      for (const PackedInput& p : kernels[i].packed_inputs) {
        PackedInput q{merged_index(g.inputs.at(p.input)), p.layout, {}};
        for (const PackedSource& t : p.then) {
          q.then.push_back({merged_index(g.inputs.at(t.input)), t.layout});
          unread.insert(t.input);
        }
        packed_here.insert(p.input);
        if (packed.count(q.input) && !(packed.at(q.input) == q))
          refuse(cat("two parts read '", g.inputs[p.input]->name(), "' in different panel layouts"));
        packed[q.input] = q;
      }
      for (size_t j = 0; j < g.inputs.size(); ++j)
        if (!packed_here.count(j) && !unread.count(j)) {
          auto at = std::find(grp_.inputs.begin(), grp_.inputs.end(), g.inputs[j]);
          if (at != grp_.inputs.end()) row_major.insert(size_t(at - grp_.inputs.begin()));
        }
    }
    for (const auto& [mi, p] : packed) {
      if (row_major.count(mi)) refuse(cat("'", grp_.inputs[mi]->name(), "' is read both packed and row-major"));
      k.inputs[mi] = std::make_shared<Buffer>(Buffer{k.inputs[mi]->name, DType::Float32, {p.packed_numel()}, Scope::Global});
      where[grp_.inputs[mi]] = k.inputs[mi];
      k.packed_inputs.push_back(p);
    }
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
  SiblingGemms gemms_{sched_};  // holds references to parts_' groups: parts_ does not change after split()
  std::vector<std::vector<size_t>> sets_;
  std::vector<FusionGroup> joined_;
  std::vector<int> set_of_;
};

// The chain's stages: which MatMul each member follows, each stage's geometry and row plan.
class ChainAnalysis {
 public:
  explicit ChainAnalysis(const FusionGroup& grp) : grp_(grp) {}

  ChainPlan run() {
    stages();
    for (size_t s = 0; s < p_.stages.size(); ++s) geometry(s);
    for (size_t s = 0; s < p_.stages.size(); ++s) rows(s);
    return std::move(p_);
  }

 private:
  void stages() {
    std::vector<const Node*> cs;
    for (const Node* n : grp_.nodes)
      if (is_contraction(n)) cs.push_back(n);
    KILN_CHECK(cs.size() >= 2, "a chain needs two contractions");
    p_.stages.resize(cs.size());
    for (const Node* n : grp_.nodes) {
      int s = -1;
      if (is_contraction(n)) {
        const size_t k = size_t(std::find(cs.begin(), cs.end(), n) - cs.begin());
        if (n->op_type() != "MatMul") refuse(cat(n->op_type(), " in a chain of contractions is not fused by any emitter (its members stay separate kernels)"));
        if (n->num_inputs() != 2 || !n->input(0) || !n->input(1) || n->num_outputs() != 1 || !n->output(0))
          refuse("MatMul needs two inputs and one output");
        if (p_.stage(n->input(1)) != -1)
          refuse("a chained MatMul's right operand depends on another contraction (no emitter fuses this; its members stay separate kernels)");
        if (p_.stage(n->input(0)) != int(k) - 1)
          refuse("a chained MatMul's left operand is not computed from the previous contraction's rows (no emitter fuses this; its members stay separate kernels)");
        s = int(k);
        p_.stages[k].c = n;
      } else {
        for (const Value* u : n->inputs())
          if (u) s = std::max(s, p_.stage(u));
        for (const Value* u : n->inputs())
          if (u && p_.stage(u) >= 0 && p_.stage(u) != s)
            refuse(cat(name_of(n), " reads the results of two chained contractions (no emitter fuses this; its members stay separate kernels)"));
        if (!is_reduction(n)) {
          const std::string why = unsupported_reason(*n);
          if (!why.empty()) refuse(why);
        } else if (s < 0) {
          refuse(cat(name_of(n), " before the contractions of a chain is not fused by any emitter (its members stay separate kernels)"));
        }
        if (s >= 0) p_.stages[size_t(s)].nodes.push_back(n);
      }
      for (const Value* o : n->outputs())
        if (o) p_.stage_of[o] = s;
    }
    for (const Value* v : grp_.outputs)
      if (p_.stage(v) < 0)
        refuse(cat("group output '", v->name(), "' depends on no contraction of the chain (no emitter fuses this; its members stay separate kernels)"));
    for (size_t s = 1; s < p_.stages.size(); ++s) p_.stages[s - 1].next = p_.stages[s].c->input(0);
  }

  // The reference kernel's checks, and rows: stage s's left operand is stage s-1's output, and
  // its batch dims are the output's (the right operand broadcasts, not the left).
  void geometry(size_t s) {
    ChainStage& st = p_.stages[s];
    const MatMulGeometry g = matmul_geometry(*st.c);
    if (g.a_vec || g.b_vec) refuse("a chained MatMul with a vector operand is not fused by any emitter (its members stay separate kernels)");
    st.dtype = g.dtype;
    st.k = g.k;
    st.n = g.n;
    st.a_batch = g.a_batch;
    st.b_batch = g.b_batch;
    st.out = g.out;
    if (st.out != st.c->output(0)->shape())
      refuse(cat("MatMul output is ", shape_str(st.c->output(0)->shape()), ", expected ", shape_str(st.out)));
    if (shape_numel(st.out) == 0 || st.k == 0) refuse("an empty MatMul in a chain is not fused by any emitter (its members stay separate kernels)");
    if (s > 0) {
      if (st.c->input(0)->shape() != p_.stages[s - 1].out)
        refuse("a chained MatMul's left operand does not have the previous MatMul's output shape (no emitter fuses this; its members stay separate kernels)");
      if (g.batch != st.a_batch)
        refuse("a chained MatMul that broadcasts its left operand over batches is not fused by any emitter (its members stay separate kernels)");
    }
  }

  // Row reductions of a stage: lower_contraction_rows.cc's plan for a group of the stage's
  // members, its MatMul and the prologue members they read; outputs: the group's outputs of this
  // stage and `next`.
  void rows(size_t s) {
    ChainStage& st = p_.stages[s];
    if (std::none_of(st.nodes.begin(), st.nodes.end(), is_reduction)) return;
    std::unordered_set<const Node*> keep(st.nodes.begin(), st.nodes.end());
    keep.insert(st.c);
    std::vector<const Node*> todo(st.nodes.begin(), st.nodes.end());
    while (!todo.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      for (const Value* u : n->inputs()) {
        const Node* q = u ? u->producer() : nullptr;
        if (!q || p_.stage(u) != -1 || keep.count(q)) continue;
        if (std::find(grp_.nodes.begin(), grp_.nodes.end(), q) == grp_.nodes.end()) continue;
        keep.insert(q);
        todo.push_back(q);
      }
    }
    FusionGroup syn = subgroup(grp_, keep, cat(grp_.name, "_stage", s), GroupKind::Contraction);
    for (const Value* v : grp_.outputs)
      if (p_.stage(v) == int(s)) syn.outputs.push_back(v);
    if (st.next && std::find(syn.outputs.begin(), syn.outputs.end(), st.next) == syn.outputs.end())
      syn.outputs.push_back(st.next);
    st.plan = plan_contraction_rows(syn, st.c, st.out);
    if (st.plan->shape != st.out || st.plan->r0 + 1 != st.out.size())
      refuse("row reductions in a chain of contractions over other than the last axis are not fused by any emitter (their members stay separate kernels)");
  }

  const FusionGroup& grp_;
  ChainPlan p_;
};

}  // namespace

ChainPlan plan_contraction_chain(const FusionGroup& grp) { return ChainAnalysis(grp).run(); }

size_t contraction_count(const FusionGroup& grp) {
  return size_t(std::count_if(grp.nodes.begin(), grp.nodes.end(), is_contraction));
}

LoweredGroup lower_multi_contraction_group(const FusionGroup& grp, const std::string& kernel_name,
                                           const Schedule& sched) {
  return lowered_or_refused([&] { return MultiContraction(grp, kernel_name, sched).lower(); });
}

}  // namespace kiln::loop::detail
