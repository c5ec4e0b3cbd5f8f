// Row reductions over the trailing axes of a contraction's output (MatMul + bias + residual +
// LayerNorm, MatMul + softmax, Conv + ReLU + GlobalAveragePool): the parts that are not the
// contraction's own nest. lower_contraction.cc builds, per outer position of the output,
//
//   allocate kiln_crow<k>[row]                    one row of each staged value (Scope::Local)
//     for each row element: acc = K loop; pre-reduction epilogue -> kiln_crow<k>, early outputs
//     the row kernel's passes (lower_reduction.cc) reading kiln_crow<k> instead of memory
//
// The passes are the row kernel of a synthetic group: the reductions, the members that depend on
// their results and those members' other producers, with every staged value (a pre-reduction
// epilogue value they read) as a group input. Its outer loops are peeled off (the contraction
// kernel has the same ones) and its loads of a staged input become loads of the local row at the
// offset within the row. That is only right when every such load is in the current row: all the
// pass members other than the reductions must be elementwise (or reshapes, which keep each
// element's flat offset) and the staged values have the
// contraction's output shape, so an element is read at its own position (the row kernel itself
// refuses reading a reduction result at another row).
#include <algorithm>
#include <set>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/lower_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

bool is_reduction(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::Reduction && n->domain().empty();
}

// The axes one reduction reduces (as its reference kernel reads them); refuses what is unusual.
std::vector<bool> reduced_axes(const Node& n) {
  if (!n.input(0) || n.num_outputs() != 1) refuse(cat(n.op_type(), " has an unexpected signature"));
  const size_t rank = n.input(0)->shape().size();
  std::vector<bool> red(rank, false);
  const std::string& op = n.op_type();
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (rank < 3) refuse(cat(op, " needs a rank >= 3 input"));
    for (size_t i = 2; i < rank; ++i) red[i] = true;
    return red;
  }
  if (is_windowed_reduction(n) || op.rfind("Reduce", 0) != 0)
    refuse(cat(op, " after a contraction is not lowered to loops yet"));
  const int64_t noop = n.attr_int("noop_with_empty_axes", 0);
  auto axes = constant_ints(n, 1, "axes");
  if (!axes || axes->empty()) {
    if (noop != 0) refuse(cat(op, " with no axes is an identity (noop_with_empty_axes)"));
    red.assign(rank, true);
    return red;
  }
  for (int64_t a : *axes) {
    if (a < -int64_t(rank) || a >= int64_t(rank)) refuse(cat(op, " axis ", a, " is out of range"));
    const size_t k = size_t(a < 0 ? a + int64_t(rank) : a);
    if (red[k]) refuse(cat(op, " axes repeat axis ", a));
    red[k] = true;
  }
  return red;
}

}  // namespace

ContractionRows plan_contraction_rows(const FusionGroup& grp, const Node* c, const Shape& out_shape) {
  ContractionRows p;
  const Value* y = c->output(0);
  // Values depending on the contraction's output (d_y) and on a reduction result (d_r).
  std::unordered_set<const Value*> d_y = {y}, d_r;
  std::vector<const Node*> pre, post;
  for (const Node* n : grp.nodes) {
    if (n == c) continue;
    bool on_y = false, on_r = false;
    for (const Value* v : n->inputs()) {
      on_y = on_y || (v && d_y.count(v));
      on_r = on_r || (v && d_r.count(v));
    }
    if (is_reduction(n)) {
      if (!on_y) refuse("a reduction in a contraction group that does not read the contraction's output is not lowered to loops yet");
      on_r = true;
    }
    for (const Value* o : n->outputs()) {
      if (!o) continue;
      if (on_y) d_y.insert(o);
      if (on_r) d_r.insert(o);
    }
    if (on_r) post.push_back(n);
    else if (on_y) pre.push_back(n);
  }
  // Row axes: the same trailing axes for every reduction, of the contraction's output.
  std::vector<bool> red;
  for (const Node* n : post) {
    if (!is_reduction(n)) continue;
    const Shape& in = n->input(0)->shape();
    // The output itself, or broadcast to a higher rank by a residual [1, S, D] (same elements).
    const size_t lead = in.size() >= out_shape.size() ? in.size() - out_shape.size() : 0;
    const bool same = in.size() >= out_shape.size() && Shape(in.begin() + ptrdiff_t(lead), in.end()) == out_shape &&
                      std::all_of(in.begin(), in.begin() + ptrdiff_t(lead), [](int64_t e) { return e == 1; });
    if (p.shape.empty()) p.shape = in;
    else if (in != p.shape) refuse("reductions of different shapes after a contraction are not lowered to loops yet");
    if (!same)
      refuse(cat(n->op_type(), " reduces ", shape_str(n->input(0)->shape()), ", not the contraction's output shape (not lowered to loops yet)"));
    std::vector<bool> r = reduced_axes(*n);
    if (red.empty()) red = r;
    else if (r != red) refuse("reductions of different rows after a contraction are not lowered to loops yet");
  }
  p.r0 = red.size();
  while (p.r0 > 0 && red[p.r0 - 1]) --p.r0;
  for (size_t i = 0; i < p.r0; ++i)
    if (red[i]) refuse("a reduction after a contraction over non-trailing axes is not lowered to loops yet");
  p.row = 1;
  if (p.r0 < p.shape.size() - out_shape.size())
    refuse("a reduction over the broadcast leading axes of a contraction's output is not lowered to loops yet");
  for (size_t i = p.r0; i < p.shape.size(); ++i) p.row *= p.shape[i];
  if (p.row < 2) refuse("a reduction over rows of one element after a contraction is not lowered to loops yet");

  // The passes' nodes: post nodes and their producers in the group other than pre nodes and c.
  std::unordered_set<const Node*> pre_set(pre.begin(), pre.end()), in_passes;
  for (const Node* n : post) in_passes.insert(n);
  for (size_t i = grp.nodes.size(); i-- > 0;) {
    const Node* n = grp.nodes[i];
    if (!in_passes.count(n)) continue;
    for (const Value* v : n->inputs()) {
      const Node* q = v ? v->producer() : nullptr;
      if (!q || q == c || pre_set.count(q)) continue;
      if (std::find(grp.nodes.begin(), grp.nodes.end(), q) != grp.nodes.end()) in_passes.insert(q);
    }
  }
  std::unordered_set<const Value*> produced;
  for (const Node* n : grp.nodes)
    if (in_passes.count(n)) {
      p.passes.nodes.push_back(n);
      for (const Value* o : n->outputs())
        if (o) produced.insert(o);
      if (!is_reduction(n)) {
        // Reshapes keep every element at its flat offset, so the row stays where it was.
        static const std::set<std::string> reshapes = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity"};
        const auto k = op_kind_of_type(n->op_type());
        if ((!k || *k != OpKind::ElementWise) && !reshapes.count(n->op_type()))
          refuse(cat(n->op_type(), " after a reduction in a contraction group is not lowered to loops yet"));
      }
    }
  // Inputs of the passes: the group's inputs they read, and the staged values.
  std::unordered_set<const Value*> seen;
  for (const Node* n : p.passes.nodes)
    for (const Value* v : n->inputs()) {
      if (!v || produced.count(v) || !seen.insert(v).second) continue;
      if (d_y.count(v)) {
        if (v->shape() != out_shape && v->shape() != p.shape)
          refuse(cat("the epilogue value '", v->name(), "' read by the row passes has shape ", shape_str(v->shape()), " (not lowered to loops yet)"));
        p.staged.push_back(v);
      } else if (std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end()) {
        if (v->is_constant()) continue;  // read as immediates
        refuse(cat("the row passes read '", v->name(), "', neither a group input nor an epilogue value (not lowered to loops yet)"));
      }
      p.passes.inputs.push_back(v);
    }
  for (const Value* o : grp.outputs) {
    if (produced.count(o)) p.passes.outputs.push_back(o);
    else if (d_y.count(o)) p.first_outputs.push_back(o);
    else refuse(cat("group output '", o->name(), "' is neither an epilogue nor a row-pass value (not lowered to loops yet)"));
  }
  if (p.staged.empty()) refuse("row passes that read no epilogue value are not lowered to loops yet");
  p.passes.name = grp.name + "_rows";
  p.passes.kind = GroupKind::Reduction;
  return p;
}

namespace {

struct Rebind {
  std::unordered_map<const Buffer*, BufferPtr> global;  // the passes' buffer -> the kernel's
  std::unordered_map<const Buffer*, BufferPtr> local;   // a staged input -> its local row
  Expr row_base;                                         // flat offset of the current row
  std::unordered_map<const ExprNode*, Expr> memo;

  Expr expr(const Expr& e) {
    if (!e) return e;
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    Expr r = e;
    if (e->kind == ExprKind::Load && local.count(e->buffer.get())) {
      r = load(local.at(e->buffer.get()), sub(expr(e->args[0]), row_base));
    } else {
      auto copy = std::make_shared<ExprNode>(*e);
      bool changed = false;
      if (e->kind == ExprKind::Load) {
        auto it = global.find(e->buffer.get());
        KILN_CHECK(it != global.end(), "row pass loads an unmapped buffer ", e->buffer->name);
        changed = it->second != e->buffer;
        copy->buffer = it->second;
      }
      for (auto& a : copy->args) {
        Expr na = expr(a);
        changed = changed || na != a;
        a = na;
      }
      if (changed) r = copy;
    }
    memo[e.get()] = r;
    return r;
  }

  Stmt stmt(const Stmt& s) {
    // A buffer the row kernel allocates itself (e.g. vector lanes of a reduction) stays as it is.
    if (s->kind == StmtKind::Allocate) global[s->buffer.get()] = s->buffer;
    auto c = std::make_shared<StmtNode>(*s);
    c->extent = expr(s->extent);
    c->index = expr(s->index);
    c->value = expr(s->value);
    c->cond = expr(s->cond);
    for (auto& a : c->call_args) a = expr(a);
    for (auto& b : c->body) b = stmt(b);
    for (auto& b : c->else_body) b = stmt(b);
    if (s->kind == StmtKind::Store) {
      auto it = global.find(s->buffer.get());
      KILN_CHECK(it != global.end() && !local.count(s->buffer.get()), "row pass stores to an unmapped buffer ",
                 s->buffer->name);
      c->buffer = it->second;
    }
    return c;
  }
};

}  // namespace

std::vector<Stmt> contraction_row_passes(const ContractionRows& plan, const Shape& shape,
                                         const std::unordered_map<const Value*, BufferPtr>& buffers,
                                         const std::vector<Expr>& outer, const std::string& name,
                                         const Schedule& sched) {
  LoweredGroup lg = lower_reduction_group(plan.passes, name, /*jam_rows=*/false, sched);
  if (!lg.kernel)
    refuse(lg.reason.find("not lowered to loops") == std::string::npos
               ? cat(lg.reason, " (row reductions after a contraction: not lowered to loops yet)")
               : lg.reason);
  const LoopKernel& rk = *lg.kernel;
  KILN_CHECK(rk.inputs.size() == plan.passes.inputs.size() && rk.outputs.size() == plan.passes.outputs.size(),
             "row kernel buffers do not match its group");
  Rebind rb;
  for (size_t i = 0; i < rk.inputs.size(); ++i) {
    const Value* v = plan.passes.inputs[i];
    const BufferPtr& to = buffers.at(v);
    if (std::find(plan.staged.begin(), plan.staged.end(), v) != plan.staged.end()) rb.local[rk.inputs[i].get()] = to;
    else rb.global[rk.inputs[i].get()] = to;
  }
  for (size_t i = 0; i < rk.outputs.size(); ++i) rb.global[rk.outputs[i].get()] = buffers.at(plan.passes.outputs[i]);
  // The row kernel's outer loops are `i<d>` over the non-unit dims before the row axes, the same
  // variables the contraction kernel's outer loops use; peel them.
  std::vector<Stmt> body = rk.body->kind == StmtKind::Block ? rk.body->body : std::vector<Stmt>{rk.body};
  for (size_t d = 0; d < plan.r0; ++d) {
    if (shape[d] == 1) continue;
    if (body.size() != 1 || body[0]->kind != StmtKind::For || body[0]->var != "i" + std::to_string(d))
      refuse("the row kernel's outer loops are not the contraction's (internal)");
    body = body[0]->body;
  }
  Expr base = int_imm(0);
  for (size_t d = 0; d < shape.size(); ++d)
    base = add(mul(base, int_imm(shape[d])), d < plan.r0 ? outer[d] : int_imm(0));
  rb.row_base = base;
  for (auto& s : body) s = rb.stmt(s);
  return body;
}

}  // namespace kiln::loop::detail
