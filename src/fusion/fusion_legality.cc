#include "fusion/fusion_legality.h"

#include <algorithm>
#include <set>

#include "fusion/assign_layouts.h"
#include "fusion/op_kind.h"

namespace kiln {

namespace {

std::string node_label(const Node* n) { return n->op_type() + " '" + n->name() + "'"; }

bool windows_overlap(const Node* pool) {
  auto k = pool->attr_ints("kernel_shape");
  auto s = pool->attr_ints("strides", std::vector<int64_t>(k.size(), 1));
  for (size_t i = 0; i < k.size(); ++i)
    if (i < s.size() && s[i] < k[i]) return true;
  return false;
}

// Member-internal reachability: does `to` depend on `from` through members of m?
class Within {
 public:
  Within(const GroupGraph& gg, const Members& m) : gg_(gg), m_(m) {}
  bool depends(const Node* to, const Node* from) const {
    return depends_through(to, from, [&](const Node* p) { return std::binary_search(m_.begin(), m_.end(), gg_.index(p)); });
  }

 private:
  const GroupGraph& gg_;
  const Members& m_;
};

// Recomputation the cost model does not price: a producer fused into an overlapping-window pool
// runs once per window that covers it, and a pool fused into a contraction's operand loads runs
// once per output tile. The code generator could build either; it would just be slow.
FusionDecision recompute_refusal(const GroupGraph& gg, const Members& m, const std::vector<const Node*>& contractions,
                                 const std::vector<const Node*>& reds, const Within& within) {
  for (const Node* r : reds) {
    if (!is_windowed_reduction(*r)) continue;
    for (const Node* c : contractions)
      if (within.depends(c, r))
        return FusionDecision::no(node_label(r) + " would have to be recomputed inside the contraction's operand "
                                  "loads, once per output tile; pools do not fuse as prologues");
    if (!windows_overlap(r)) continue;
    for (int i : m) {
      const Node* n = gg.nodes()[size_t(i)];
      if (n != r && within.depends(r, n))
        return FusionDecision::no(node_label(r) + " windows overlap (stride < kernel): fusing producer " +
                                  node_label(n) + " would recompute it for every window");
    }
  }
  return FusionDecision::yes();
}

// Live vector registers the kernel would need, the larger of its two phases:
//   K loop:   tiles × (accumulators + operand registers) + extra prologue streams
//             (siblings of one geometry share a tile)
//   epilogue: tiles × accumulators + one register per tensor the epilogue streams in + 2 temporaries
// Kernels without a contraction: one register per input stream, one per reduction accumulator, and
// 2 temporaries. Scalar constants are immediates and do not count.
int estimate_registers(const GroupGraph& gg, const Members& m, const std::vector<const Value*>& ins,
                       const std::vector<const Node*>& contractions, const Within& within, const Target& t) {
  // A tensor the kernel reads is an epilogue stream when some member reading it runs after the K
  // loop (it is neither a contraction nor upstream of one); otherwise it feeds operand loads.
  int streams = 0, operand_streams = 0;
  for (const Value* v : ins) {
    if (v->is_constant() && v->constant().numel() == 1) continue;
    bool epilogue = false;
    for (auto [user, slot] : v->uses()) {
      if (!std::binary_search(m.begin(), m.end(), gg.index(user))) continue;
      bool feeds_loop = op_kind(*user) == OpKind::Contraction;
      for (const Node* c : contractions) feeds_loop = feeds_loop || within.depends(c, user);
      epilogue = epilogue || !feeds_loop;
    }
    (epilogue ? streams : operand_streams) += 1;
  }
  // Independent contractions that read the same input with the same geometry are one contraction
  // with their weights concatenated along the output features (QKV): one tile. Others each keep a
  // tile of their own live.
  auto same_geometry = [](const Node* a, const Node* b) {
    if (a->op_type() != b->op_type() || a->input(0) != b->input(0)) return false;
    if (a->op_type() == "MatMul") return a->input(1)->shape().size() == 2 && b->input(1)->shape().size() == 2;
    for (const char* attr : {"kernel_shape", "strides", "pads", "dilations"})
      if (a->attr_ints(attr) != b->attr_ints(attr)) return false;
    return a->attr_int("group", 1) == 1 && b->attr_int("group", 1) == 1 &&
           a->attr_string("auto_pad", "NOTSET") == b->attr_string("auto_pad", "NOTSET");
  };
  std::vector<const Node*> tiles;
  for (const Node* c : contractions) {
    bool after_other = false;
    for (const Node* d : contractions) after_other = after_other || within.depends(c, d);
    if (after_other) continue;
    bool joins = false;
    for (const Node* tnode : tiles) joins = joins || same_geometry(tnode, c);
    if (!joins) tiles.push_back(c);
  }
  int reductions = 0;
  for (int i : m) reductions += op_kind(*gg.nodes()[size_t(i)]) == OpKind::Reduction ? 1 : 0;
  int n = int(tiles.size());
  if (n == 0) return streams + reductions + 2;
  // Each contraction reads two operands; prologue streams beyond those need a register each.
  int extra_operands = std::max(0, operand_streams - 2 * int(contractions.size()));
  int k_loop = n * (t.contraction_accumulators + t.contraction_operand_registers) + extra_operands;
  int epilogue = n * t.contraction_accumulators + streams + reductions + 2;
  return std::max(k_loop, epilogue);
}

}  // namespace

FusionDecision check_limits(const GroupGraph& gg, const Members& m, const std::vector<int>& replacing,
                            const Target& t) {
  std::vector<const Node*> contractions, reds;
  for (int i : m) {
    const Node* n = gg.nodes()[size_t(i)];
    OpKind k = op_kind(*n);
    if (k == OpKind::Contraction) contractions.push_back(n);
    if (k == OpKind::Reduction) reds.push_back(n);
  }
  auto ins = gg.inputs_of(m);
  auto outs = gg.outputs_of(m, replacing);
  Within within(gg, m);
  FusionDecision d = recompute_refusal(gg, m, contractions, reds, within);
  if (!d.ok()) return d;
  int regs = estimate_registers(gg, m, ins, contractions, within, t);
  if (regs > t.vector_registers)
    return FusionDecision::no("the kernel would need " + std::to_string(regs) + " live vector registers; target " +
                              t.name + " has " + std::to_string(t.vector_registers));
  int args = int(ins.size() + outs.size());
  if (args > t.max_kernel_args)
    return FusionDecision::no("the kernel would take " + std::to_string(args) + " buffers; target " + t.name +
                              " allows " + std::to_string(t.max_kernel_args));
  return FusionDecision::yes();
}

FusionDecision can_fuse(const GroupGraph& gg, int p, int c, const Members& merged, const std::vector<int>& replacing,
                        const Target& t) {
  // A Concat built in place costs nothing alone; fused, it would be a copy (and its parts'
  // producers could no longer write into its slices).
  for (int side : {p, c}) {
    const Members& m = gg.members(side);
    if (m.size() == 1 && gg.in_place_concat(m[0]))
      return FusionDecision::no("Concat '" + gg.nodes()[size_t(m[0])]->name() +
                                "' is built in place: each part's producer writes its slice of the output");
  }
  // A value assign_layouts gave a layout is stored by its producer's kernel and read by others:
  // fused through, the consumers would compute it in the model's layout again.
  for (auto [a, b] : {std::pair{p, c}, std::pair{c, p}})
    for (int i : gg.members(a)) {
      const Node* n = gg.nodes()[size_t(i)];
      if (!is_layout_boundary(*n)) continue;
      for (int j : gg.members(b))
        for (const Value* in : gg.nodes()[size_t(j)]->inputs())
          if (in == n->output(0))
            return FusionDecision::no("'" + in->name() + "' is stored channels-last (layout assignment) for " +
                                      node_label(gg.nodes()[size_t(j)]) + " to read in place");
    }
  int via = gg.path_via(p, c);
  if (via >= 0)
    return FusionDecision::no("fusing would create a cycle: the kernel with " +
                              node_label(gg.nodes()[size_t(gg.members(via).front())]) +
                              " needs the producer's result and produces an input of the consumer");
  return check_limits(gg, merged, replacing, t);
}

FusionDecision can_fuse_siblings(const GroupGraph& gg, int a, int b, const Members& merged, const Target& t) {
  auto ca = gg.consumer_groups(a), cb = gg.consumer_groups(b);
  if (std::count(ca.begin(), ca.end(), b) || std::count(cb.begin(), cb.end(), a) || gg.reachable_indirectly(a, b) ||
      gg.reachable_indirectly(b, a))
    return FusionDecision::no("one sibling depends on the other");
  GroupKind ka = gg.kind_of(gg.members(a)), kb = gg.kind_of(gg.members(b));
  if (ka != kb)
    return FusionDecision::no(std::string("siblings of different kinds (") + group_kind_name(ka) + ", " +
                              group_kind_name(kb) + ") cannot share one loop nest");
  return check_limits(gg, merged, {a, b}, t);
}

}  // namespace kiln
