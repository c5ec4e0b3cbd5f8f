#include "fusion/fusion_legality.h"

#include <algorithm>
#include <set>

#include "fusion/op_kind.h"
#include "reference/kernel_util.h"

namespace kiln {

namespace {

std::string node_label(const Node* n) { return n->op_type() + " '" + n->name() + "'"; }

int64_t numel(const Value* v) { return shape_numel(v->shape()); }

// Rows of a tensor normalised along its last axis: numel / last dim.
int64_t rows(const Value* v) {
  const Shape& s = v->shape();
  return s.empty() || s.back() == 0 ? numel(v) : numel(v) / s.back();
}

// Reduced axes of a reduction node (sorted, normalised); its data input is input 0.
std::vector<int64_t> reduced_axes(const Node* n) {
  int64_t r = int64_t(n->input(0)->shape().size());
  std::vector<int64_t> axes;
  const std::string& op = n->op_type();
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    for (int64_t a = 2; a < r; ++a) axes.push_back(a);
  } else if (op == "ArgMax" || op == "ArgMin") {
    axes.push_back(normalize_axis(n->attr_int("axis", 0), r));
  } else if (n->input(1) && n->input(1)->is_constant() && n->input(1)->constant().numel() > 0) {
    for (int64_t a : n->input(1)->constant().to_int64_vector()) axes.push_back(normalize_axis(a, r));
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);  // all axes (noop_with_empty_axes=0)
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

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
    if (to == from) return false;
    std::vector<const Node*> stack{to};
    std::set<const Node*> seen;
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const Value* v : n->inputs()) {
        if (!v || !v->producer()) continue;
        const Node* p = v->producer();
        if (!std::binary_search(m_.begin(), m_.end(), gg_.index(p))) continue;
        if (p == from) return true;
        stack.push_back(p);
      }
    }
    return false;
  }

 private:
  const GroupGraph& gg_;
  const Members& m_;
};

FusionDecision check_reduction_group(const GroupGraph& gg, const Members& m, const std::vector<const Node*>& reds,
                                     const Within& within) {
  const Node* first = reds.front();
  for (const Node* r : reds)
    if (is_windowed_reduction(*r)) {
      if (reds.size() > 1)
        return FusionDecision::no(node_label(r) + " reduces sliding windows; it cannot share a loop nest with " +
                                  node_label(reds[0] == r ? reds[1] : reds[0]));
      for (int i : m) {
        const Node* n = gg.nodes()[size_t(i)];
        if (n == r) continue;
        if (within.depends(r, n) && windows_overlap(r))
          return FusionDecision::no(node_label(r) + " windows overlap (stride < kernel): fusing producer " +
                                    node_label(n) + " would recompute it for every window");
        if (within.depends(n, r) && numel(n->output(0)) != numel(r->output(0)))
          return FusionDecision::no(node_label(n) + " iterates over " + shape_str(n->output(0)->shape()) +
                                    ", not over the pool's output " + shape_str(r->output(0)->shape()));
      }
      return FusionDecision::yes();
    }
  // Row kernel: every reduction reduces the same axes of same-shaped inputs; every other member
  // lives either on whole rows (the reductions' input domain) or on one value per row.
  const Shape& in = first->input(0)->shape();
  auto axes = reduced_axes(first);
  int64_t full = shape_numel(in), row = 1;
  for (int64_t a : axes) row *= in[size_t(a)];
  int64_t outer = row ? full / row : 0;
  for (const Node* r : reds)
    if (r->input(0)->shape() != in || reduced_axes(r) != axes)
      return FusionDecision::no(node_label(r) + " reduces " + shape_str(r->input(0)->shape()) +
                                " over different axes than " + node_label(first) + " (" + shape_str(in) +
                                "); reductions share a kernel only over the same rows");
  for (int i : m) {
    const Node* n = gg.nodes()[size_t(i)];
    for (const Value* o : n->outputs()) {
      int64_t k = numel(o);
      if (k != full && k != outer)
        return FusionDecision::no(node_label(n) + " produces " + shape_str(o->shape()) +
                                  ", which is neither the reduced rows " + shape_str(in) + " nor one value per row");
    }
  }
  return FusionDecision::yes();
}

FusionDecision check_contraction_group(const GroupGraph& gg, const Members& m,
                                       const std::vector<const Node*>& contractions,
                                       const std::vector<const Node*>& reds, const std::vector<const Value*>& outs,
                                       const Within& within, const Target& t) {
  const Node* a1 = contractions.front();
  const Node* last = contractions.back();
  std::vector<const Node*> dependents;
  for (const Node* c : contractions)
    for (const Node* d : contractions)
      if (within.depends(c, d)) {
        dependents.push_back(c);
        break;
      }
  bool chained = !dependents.empty();
  if (chained) {
    for (const Node* d : dependents)
      for (const Node* c : contractions)
        if (within.depends(d, c) && (c->op_type() != "MatMul" || d->op_type() != "MatMul"))
          return FusionDecision::no("only MatMul→MatMul chains (attention) fuse; " + node_label(c) + " → " +
                                    node_label(d) + " is not one");
  }
  if (chained && contractions.size() > 2)
    return FusionDecision::no("a kernel holds at most two chained contractions; this would hold " +
                              std::to_string(contractions.size()));
  if (!chained) {
    // Siblings: one tile loop can feed several contractions only if they read the same input the
    // same way and produce the same output domain (rows for MatMul, positions for Conv).
    for (const Node* a2 : contractions) {
      if (a2 == a1) continue;
      if (a1->op_type() != a2->op_type() || a1->input(0) != a2->input(0))
        return FusionDecision::no("independent contractions " + node_label(a1) + " and " + node_label(a2) +
                                  " read different inputs; one kernel streams one input");
      const Shape &o1 = a1->output(0)->shape(), &o2 = a2->output(0)->shape();
      bool same_domain =
          o1.size() == o2.size() && o1.size() >= 2 &&
          (a1->op_type() == "Conv" ? (o1[0] == o2[0] && std::equal(o1.begin() + 2, o1.end(), o2.begin() + 2))
                                   : std::equal(o1.begin(), o1.end() - 1, o2.begin()));
      if (!same_domain)
        return FusionDecision::no("sibling contractions " + node_label(a1) + " and " + node_label(a2) +
                                  " produce different output domains " + shape_str(o1) + " and " + shape_str(o2));
    }
  }
  if (chained) {
    if (a1->op_type() != "MatMul" || last->op_type() != "MatMul")
      return FusionDecision::no("only MatMul→MatMul chains (attention) fuse; " + node_label(a1) + " → " +
                                node_label(last) + " is not one");
    const Value* lhs = last->input(0);
    if (!lhs->producer() || !(lhs->producer() == a1 || within.depends(lhs->producer(), a1)))
      return FusionDecision::no(node_label(last) + " reads " + node_label(a1) +
                                "'s result as its right operand; only the left operand can stream rows");
    if (last->input(1)->producer() &&
        (last->input(1)->producer() == a1 || within.depends(last->input(1)->producer(), a1)))
      return FusionDecision::no(node_label(last) + "'s right operand depends on " + node_label(a1));
    int64_t row = a1->output(0)->shape().back();
    if (lhs->shape().back() != row)
      return FusionDecision::no("the chained rows of " + node_label(a1) + " are not " + node_label(last) +
                                "'s contraction axis");
    // A tile keeps rows_per_tile rows in flight, or all of them when there are fewer (batch 1).
    int64_t tile_rows = std::min<int64_t>(t.rows_per_tile, row ? numel(lhs) / row : 0);
    int64_t row_bytes = row * int64_t(dtype_size(lhs->dtype())) * tile_rows;
    if (row_bytes > t.onchip_budget_bytes())
      return FusionDecision::no("the intermediate rows between " + node_label(a1) + " and " + node_label(last) +
                                " (" + std::to_string(tile_rows) + " x " + std::to_string(row) + " elements, " +
                                std::to_string(row_bytes) + " bytes) do not fit on chip; target " + t.name +
                                " has " + std::to_string(t.onchip_budget_bytes()));
    for (const Value* o : outs)
      if (o->producer() && (o->producer() == a1 || within.depends(o->producer(), a1)) &&
          !(o->producer() == last || within.depends(o->producer(), last)))
        return FusionDecision::no("the intermediate '" + o->name() + "' between " + node_label(a1) + " and " +
                                  node_label(last) + " is needed outside, so it would still be written");
  }
  // Row reductions: over trailing axes (the "row") of a contraction's output (epilogue: softmax,
  // LayerNorm, a global pool after a conv) or over the last axis of a MatMul's left operand
  // (prologue), with Target::rows_per_tile rows kept on chip.
  for (const Node* r : reds) {
    if (is_windowed_reduction(*r)) {
      bool after = false;
      for (const Node* c : contractions) after = after || within.depends(r, c);
      if (after)
        return FusionDecision::no(node_label(r) + " reads overlapping windows of the contraction's output "
                                  "(halo); tile-level fusion of pools is not implemented");
      return FusionDecision::no(node_label(r) + " would have to be recomputed inside the contraction's operand "
                                "loads, once per output tile; pools do not fuse as prologues");
    }
    const Value* in = r->input(0);
    const Shape& is = in->shape();
    int64_t rank = int64_t(is.size());
    auto axes = reduced_axes(r);
    bool trailing = !axes.empty() && axes.back() == rank - 1 && axes.front() == rank - int64_t(axes.size());
    if (!trailing)
      return FusionDecision::no(node_label(r) + " reduces leading or inner axes; only reductions over trailing "
                                "axes (rows) fuse with a contraction");
    int64_t row = 1;
    for (int64_t a : axes) row *= is[size_t(a)];
    auto same_row = [&](const Value* v) {
      const Shape& vs = v->shape();
      if (numel(v) != numel(in) || vs.size() < axes.size()) return false;
      return std::equal(is.end() - int64_t(axes.size()), is.end(), vs.end() - int64_t(axes.size()));
    };
    bool fits_a_row = false;
    for (const Node* c : contractions) {
      if (same_row(c->output(0))) fits_a_row = true;
      if (c->op_type() == "MatMul" && axes.size() == 1 && same_row(c->input(0))) fits_a_row = true;
    }
    if (!fits_a_row)
      return FusionDecision::no(node_label(r) + " reduces rows of " + shape_str(is) +
                                ", which are not the rows of a contraction in the kernel");
    int64_t tile_rows = std::min<int64_t>(t.rows_per_tile, row ? numel(in) / row : 0);
    int64_t row_bytes = row * int64_t(dtype_size(in->dtype())) * tile_rows;
    if (row_bytes > t.onchip_budget_bytes())
      return FusionDecision::no(node_label(r) + ": " + std::to_string(tile_rows) + " rows of " +
                                std::to_string(row) + " elements need " +
                                std::to_string(row_bytes) + " bytes on chip; target " + t.name + " has " +
                                std::to_string(t.onchip_budget_bytes()));
  }
  // Epilogue members compute on the last contraction's output tile (or one value per row).
  const Value* o = last->output(0);
  for (int i : m) {
    const Node* n = gg.nodes()[size_t(i)];
    if (op_kind(*n) == OpKind::Contraction) continue;
    bool downstream = within.depends(n, last) || (chained && within.depends(n, a1) && !within.depends(last, n));
    bool upstream = false;
    for (const Node* c : contractions) upstream = upstream || within.depends(c, n);
    if (upstream) {
      for (const Value* out : outs)
        if (out->producer() == n)
          return FusionDecision::no("prologue value '" + out->name() + "' of " + node_label(n) +
                                    " is needed outside the kernel, and a contraction reads its operands tile by "
                                    "tile, so it cannot be stored from there");
      continue;
    }
    const Value* ref = downstream && chained && !within.depends(n, last) ? a1->output(0) : o;
    int64_t k = numel(n->output(0));
    bool per_row = k == rows(ref);
    for (const Node* r : reds) per_row = per_row || k == numel(r->output(0));
    if (downstream && k != numel(ref) && !per_row)
      return FusionDecision::no(node_label(n) + " produces " + shape_str(n->output(0)->shape()) +
                                ", not the contraction's output tile " + shape_str(ref->shape()));
    if (!downstream && k > numel(o))
      return FusionDecision::no(node_label(n) + " produces " + shape_str(n->output(0)->shape()) +
                                ", larger than the kernel's output " + shape_str(o->shape()));
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

FusionDecision check_loop_nest(const GroupGraph& gg, const Members& m, const std::vector<int>& replacing,
                               const Target& t) {
  std::vector<const Node*> contractions, reds;
  for (int i : m) {
    const Node* n = gg.nodes()[size_t(i)];
    OpKind k = op_kind(*n);
    if (k == OpKind::Opaque)
      return FusionDecision::no(node_label(n) + " is opaque: kiln has no loop nest to fuse into, it runs as a "
                                "library kernel");
    if (k == OpKind::Contraction) contractions.push_back(n);
    if (k == OpKind::Reduction) reds.push_back(n);
  }
  auto ins = gg.inputs_of(m);
  auto outs = gg.outputs_of(m, replacing);
  Within within(gg, m);
  FusionDecision d = FusionDecision::yes();
  if (!contractions.empty()) {
    d = check_contraction_group(gg, m, contractions, reds, outs, within, t);
  } else if (!reds.empty()) {
    d = check_reduction_group(gg, m, reds, within);
  } else {
    for (const Value* o : outs)
      if (numel(o) != numel(outs.front()))
        return FusionDecision::no("outputs '" + outs.front()->name() + "' " + shape_str(outs.front()->shape()) +
                                  " and '" + o->name() + "' " + shape_str(o->shape()) +
                                  " differ in size; one elementwise loop cannot write both");
  }
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
  int via = gg.path_via(p, c);
  if (via >= 0)
    return FusionDecision::no("fusing would create a cycle: the kernel with " +
                              node_label(gg.nodes()[size_t(gg.members(via).front())]) +
                              " needs the producer's result and produces an input of the consumer");
  return check_loop_nest(gg, merged, replacing, t);
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
  return check_loop_nest(gg, merged, {a, b}, t);
}

}  // namespace kiln
