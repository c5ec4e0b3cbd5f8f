// Chains of MatMuls in one group — attention (QKᵀ -> softmax -> ·V -> head merge) and narrow MLPs
// (MatMul -> bias -> GELU -> MatMul -> bias -> residual -> LayerNorm) — lowered as a row pipeline:
//
//   for kiln_r in rows of the first MatMul's output (all dims but the last)    Parallel when big
//     i<d> = position of row kiln_r (Lets)
//     allocate the local rows (Scope::Local, 64 KiB at most in all)
//       stage 0: one output row of MatMul 0: per column j, acc over K ascending from 0 (as the
//                reference sums), operands through value_at (prologue recomputed in the loads);
//                its epilogue per element; its row reductions' passes (lower_contraction_rows.cc)
//                -> the local row that MatMul 1 reads as its left operand
//       stage 1: one output row of MatMul 1 with A = that row; epilogue and passes; stores
//       ...
//
// Each stage's contraction is either the dot form (per column j: acc over k; the right operand
// read along k) or the axpy form (a local accumulator row: for k, for j: acc[j] += a[k] * b[k, j],
// the right operand read along j, vectorised); both add every column's products in k order from
// 0, so they agree bit for bit with the reference. The form follows the right operand's stride.
//
// A stage's epilogue is built forward from the accumulator, node by node: an elementwise node is
// lowered by the Lowerer at its operands' common position with each operand of the stage bound to
// a placeholder register buffer whose load is then replaced by the operand's expression (a load
// at another position refuses); Transpose/Reshape-like nodes carry the value to a remapped
// position, so an output such as attention's head merge is stored where it belongs.
//
// Refused (LoweredGroup::reason): contractions other than MatMul, vector operands, a right operand
// or any node that reads rows of an earlier stage other than as the next MatMul's left operand,
// row reductions over other than the last axis, rows beyond the local budget, and epilogue ops
// other than elementwise and layout ones.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "reference/kernel_util.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

constexpr const char* kAcc = "acc";
constexpr int64_t kMaxRowBytes = 64 * 1024;

bool is_contraction(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::Contraction && n->domain().empty();
}

bool is_reduction(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::Reduction && n->domain().empty();
}

bool is_elementwise(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::ElementWise && n->domain().empty();
}

// Ops that move every element to one other position (a bijection): the epilogue carries values
// through them forward.
bool is_layout(const Node* n) {
  static const std::set<std::string> ops = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"};
  return ops.count(n->op_type()) && n->domain().empty();
}

// MatMul's dtypes (the reference kernel's, as lower_contraction.cc accepts them).
bool matmul_type(DType t) {
  for (DType u : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::UInt32, DType::UInt64})
    if (t == u) return true;
  return false;
}

// The value of an index expression with the named variables set (others 0); nullopt when it is
// not plain integer arithmetic (a load, a select).
std::optional<int64_t> eval_index(const Expr& e, const std::map<std::string, int64_t>& vars) {
  if (e->kind == ExprKind::IntImm) return e->int_value;
  if (e->kind == ExprKind::Var) {
    auto it = vars.find(e->name);
    return it == vars.end() ? 0 : it->second;
  }
  if (e->kind != ExprKind::Binary) return std::nullopt;
  auto a = eval_index(e->args[0], vars), b = eval_index(e->args[1], vars);
  if (!a || !b) return std::nullopt;
  switch (e->bin) {
    case BinOp::Add: return *a + *b;
    case BinOp::Sub: return *a - *b;
    case BinOp::Mul: return *a * *b;
    case BinOp::Div: return *b == 0 ? std::nullopt : std::optional<int64_t>(*a / *b);
    case BinOp::Mod: return *b == 0 ? std::nullopt : std::optional<int64_t>(*a % *b);
    case BinOp::Min: return std::min(*a, *b);
    case BinOp::Max: return std::max(*a, *b);
    default: return std::nullopt;
  }
}

// The index of the first load of a global buffer in e, or null.
Expr first_global_load_index(const Expr& e) {
  if (e->kind == ExprKind::Load && e->buffer->scope == Scope::Global) return e->args[0];
  for (const auto& a : e->args)
    if (Expr r = first_global_load_index(a)) return r;
  return nullptr;
}

std::string name_of(const Node* n) { return n->name().empty() ? n->op_type() : cat(n->op_type(), " '", n->name(), "'"); }

}  // namespace

class RowPipeline {
 public:
  RowPipeline(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched) {}

  LoopKernel lower() {
    analyse();
    bind();
    for (size_t s = 0; s < stages_.size(); ++s) geometry(s);
    for (size_t s = 0; s < stages_.size(); ++s) plan_rows(s);
    return build();
  }

 private:
  struct Stage {
    const Node* c = nullptr;
    std::vector<const Node*> nodes;  // members that depend on c and on no later contraction
    Shape out, a_batch, b_batch;
    int64_t k = 0, n = 0;
    DType dtype = DType::Float32;
    const Value* next = nullptr;  // the next MatMul's left operand, computed by this stage
    std::optional<ContractionRows> plan;
    std::vector<BufferPtr> staged_rows;  // plan->staged[i]'s local row
    BufferPtr row_in, row_out;           // this stage's left operand; `next`'s row
  };

  // A value of the current stage at its position in the row.
  struct At {
    Index pos;
    Expr val;
  };

  // Per-stage lowering context: a Lowerer whose stage values are placeholders.
  struct Ctx {
    Lowerer L;
    std::unordered_map<const Buffer*, const Value*> placeholder_of;
    std::unordered_map<const Value*, At> at;
    explicit Ctx(const FusionGroup& g) : L(g, false) {}
  };

  int stage_of(const Value* v) const {
    auto it = stage_.find(v);
    return it == stage_.end() ? -1 : it->second;
  }

  // ---- analysis: which contraction each member follows

  void analyse() {
    std::vector<const Node*> cs;
    for (const Node* n : grp_.nodes)
      if (is_contraction(n)) cs.push_back(n);
    KILN_CHECK(cs.size() >= 2, "a chain needs two contractions");
    stages_.resize(cs.size());
    for (const Node* n : grp_.nodes) {
      int s = -1;
      if (is_contraction(n)) {
        const size_t k = size_t(std::find(cs.begin(), cs.end(), n) - cs.begin());
        if (n->op_type() != "MatMul") refuse(cat(n->op_type(), " in a chain of contractions is not lowered to loops yet"));
        if (n->num_inputs() != 2 || !n->input(0) || !n->input(1) || n->num_outputs() != 1 || !n->output(0))
          refuse("MatMul needs two inputs and one output");
        if (stage_of(n->input(1)) != -1)
          refuse("a chained MatMul's right operand depends on another contraction (not lowered to loops yet)");
        if (stage_of(n->input(0)) != int(k) - 1)
          refuse("a chained MatMul's left operand is not computed from the previous contraction's rows (not lowered to loops yet)");
        s = int(k);
        stages_[k].c = n;
      } else {
        for (const Value* u : n->inputs())
          if (u) s = std::max(s, stage_of(u));
        for (const Value* u : n->inputs())
          if (u && stage_of(u) >= 0 && stage_of(u) != s)
            refuse(cat(name_of(n), " reads the results of two chained contractions (not lowered to loops yet)"));
        if (!is_reduction(n)) {
          const std::string why = unsupported_reason(*n);
          if (!why.empty()) refuse(why);
        } else if (s < 0) {
          refuse(cat(name_of(n), " before the contractions of a chain is not lowered to loops yet"));
        }
        if (s >= 0) stages_[size_t(s)].nodes.push_back(n);
      }
      for (const Value* o : n->outputs())
        if (o) stage_[o] = s;
    }
    for (const Value* v : grp_.outputs)
      if (stage_of(v) < 0)
        refuse(cat("group output '", v->name(), "' depends on no contraction of the chain (not lowered to loops yet)"));
    for (size_t s = 1; s < stages_.size(); ++s) stages_[s - 1].next = stages_[s].c->input(0);
  }

  void bind() {
    k_.name = name_;
    for (const Node* n : grp_.nodes)
      if (!n->name().empty() && std::find(k_.sources.begin(), k_.sources.end(), n->name()) == k_.sources.end())
        k_.sources.push_back(n->name());
    std::set<std::string> used = {kAcc};
    for (const Value* v : grp_.inputs) {
      auto b = std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global});
      input_buf_[v] = b;
      k_.inputs.push_back(b);
    }
    for (const Value* v : grp_.outputs) {
      auto b = std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global});
      output_buf_[v] = b;
      k_.outputs.push_back(b);
    }
    if (grp_.outputs.empty()) refuse("the group writes no outputs");
  }

  // ---- geometry: rows of every stage are the rows of the first MatMul's output

  void geometry(size_t s) {
    Stage& st = stages_[s];
    const Value* a = st.c->input(0);
    const Value* b = st.c->input(1);
    st.dtype = a->dtype();
    if (b->dtype() != st.dtype || !matmul_type(st.dtype)) refuse(cat("MatMul does not accept ", dtype_name(st.dtype)));
    const Shape& as = a->shape();
    const Shape& bs = b->shape();
    if (as.size() < 2 || bs.size() < 2) refuse("a chained MatMul with a vector operand is not lowered to loops yet");
    st.k = as.back();
    st.n = bs.back();
    if (bs[bs.size() - 2] != st.k) refuse("MatMul inner dims differ");
    st.a_batch = Shape(as.begin(), as.end() - 2);
    st.b_batch = Shape(bs.begin(), bs.end() - 2);
    const Shape batch = broadcast_shapes({st.a_batch, st.b_batch});
    st.out = batch;
    st.out.push_back(as[as.size() - 2]);
    st.out.push_back(st.n);
    if (st.out != st.c->output(0)->shape())
      refuse(cat("MatMul output is ", shape_str(st.c->output(0)->shape()), ", expected ", shape_str(st.out)));
    if (shape_numel(st.out) == 0 || st.k == 0) refuse("an empty MatMul in a chain is not lowered to loops yet");
    if (s > 0) {
      if (as != stages_[s - 1].out)
        refuse("a chained MatMul's left operand does not have the previous MatMul's output shape (not lowered to loops yet)");
      if (batch != st.a_batch)
        refuse("a chained MatMul that broadcasts its left operand over batches is not lowered to loops yet");
    }
  }

  // ---- row reductions of a stage: the plan of lower_contraction_rows.cc on the stage's members

  void plan_rows(size_t s) {
    Stage& st = stages_[s];
    if (std::none_of(st.nodes.begin(), st.nodes.end(), is_reduction)) return;
    // The stage's members, the contraction, and the prologue members they read (recomputed).
    std::unordered_set<const Node*> keep(st.nodes.begin(), st.nodes.end());
    keep.insert(st.c);
    std::vector<const Node*> todo(st.nodes.begin(), st.nodes.end());
    while (!todo.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      for (const Value* u : n->inputs()) {
        const Node* p = u ? u->producer() : nullptr;
        if (!p || stage_of(u) != -1 || keep.count(p)) continue;
        if (std::find(grp_.nodes.begin(), grp_.nodes.end(), p) == grp_.nodes.end()) continue;
        keep.insert(p);
        todo.push_back(p);
      }
    }
    FusionGroup syn;
    syn.name = cat(grp_.name, "_stage", s);
    syn.kind = GroupKind::Contraction;
    std::unordered_set<const Value*> produced;
    for (const Node* n : grp_.nodes)
      if (keep.count(n)) {
        syn.nodes.push_back(n);
        for (const Value* o : n->outputs())
          if (o) produced.insert(o);
      }
    for (const Node* n : syn.nodes)
      for (const Value* u : n->inputs())
        if (u && !produced.count(u) && std::find(syn.inputs.begin(), syn.inputs.end(), u) == syn.inputs.end())
          syn.inputs.push_back(u);
    for (const Value* v : grp_.outputs)
      if (stage_of(v) == int(s)) syn.outputs.push_back(v);
    if (st.next && std::find(syn.outputs.begin(), syn.outputs.end(), st.next) == syn.outputs.end())
      syn.outputs.push_back(st.next);
    st.plan = plan_contraction_rows(syn, st.c, st.out);
    if (st.plan->shape != st.out || st.plan->r0 + 1 != st.out.size())
      refuse("row reductions in a chain of contractions over other than the last axis are not lowered to loops yet");
  }

  bool pass_output(const Stage& st, const Value* v) const {
    if (!st.plan) return false;
    const auto& o = st.plan->passes.outputs;
    return std::find(o.begin(), o.end(), v) != o.end();
  }

  // ---- the epilogue, forward from the accumulator

  At forward(Ctx& cx, size_t s, const Value* v) {
    if (auto it = cx.at.find(v); it != cx.at.end()) return it->second;
    const Node* n = v->producer();
    KILN_CHECK(n && stage_of(v) == int(s), "value '", v->name(), "' is not of stage ", s);
    if (std::find(stages_[s].nodes.begin(), stages_[s].nodes.end(), n) == stages_[s].nodes.end() || is_reduction(n))
      refuse(cat("'", v->name(), "' depends on a row reduction where the chain needs it per element (not lowered to loops yet)"));
    At r;
    if (is_layout(n)) {
      At in = forward(cx, s, n->input(0));
      r.val = in.val;
      if (n->op_type() == "Transpose") {
        const size_t rank = in.pos.shape.size();
        std::vector<int64_t> perm(rank);
        for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(rank - 1 - i);
        if (n->has_attr("perm")) perm = n->attr_ints("perm");
        std::vector<bool> seen(rank, false);
        if (perm.size() != rank) refuse("Transpose perm does not match the input rank");
        for (int64_t p : perm) {
          if (p < 0 || p >= int64_t(rank) || seen[size_t(p)]) refuse("Transpose perm is not a permutation");
          seen[size_t(p)] = true;
        }
        const std::vector<Expr> d = cx.L.dims(in.pos);
        std::vector<Expr> od(rank);
        for (size_t i = 0; i < rank; ++i) od[i] = d[size_t(perm[i])];
        r.pos = Index::from_dims(v->shape(), std::move(od));
      } else {
        r.pos = Index::from_flat(v->shape(), cx.L.flat(in.pos));
      }
    } else if (is_elementwise(n)) {
      bool have = false;
      std::string where;
      for (const Value* u : n->inputs()) {
        if (!u || stage_of(u) != int(s)) continue;
        if (u->shape() != v->shape())
          refuse(cat(name_of(n), " broadcasts a value computed from a chained contraction (not lowered to loops yet)"));
        At a = forward(cx, s, u);
        const std::string w = print_expr(cx.L.flat(a.pos));
        if (!have) {
          r.pos = a.pos;
          where = w;
          have = true;
        } else if (w != where) {
          refuse(cat(name_of(n), " reads its operands at different positions (not lowered to loops yet)"));
        }
      }
      KILN_CHECK(have, name_of(n), " has no operand from the chain");
      size_t slot = 0;
      while (n->output(slot) != v) ++slot;
      std::unordered_map<const ExprNode*, Expr> memo;
      r.val = substitute(cx, cx.L.lower_node(*n, slot, r.pos), memo);
      KILN_CHECK(r.val->type == v->dtype(), name_of(n), " lowered to ", dtype_name(r.val->type), ", expected ",
                 dtype_name(v->dtype()));
    } else {
      refuse(cat(n->op_type(), " after a chained contraction is not lowered to loops yet"));
    }
    cx.at[v] = r;
    return r;
  }

  // e with each placeholder load replaced by its value's expression (at that value's position).
  Expr substitute(Ctx& cx, const Expr& e, std::unordered_map<const ExprNode*, Expr>& memo) {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    Expr r = e;
    if (e->kind == ExprKind::Load && cx.placeholder_of.count(e->buffer.get())) {
      const Value* u = cx.placeholder_of.at(e->buffer.get());
      auto it = cx.at.find(u);
      KILN_CHECK(it != cx.at.end(), "placeholder of '", u->name(), "' read before it was computed");
      if (print_expr(e->args[0]) != print_expr(cx.L.flat(it->second.pos)))
        refuse(cat("an epilogue op reads '", u->name(), "' at another position (not lowered to loops yet)"));
      r = it->second.val;
    } else if (!e->args.empty()) {
      auto copy = std::make_shared<ExprNode>(*e);
      bool changed = false;
      for (auto& a : copy->args) {
        Expr na = substitute(cx, a, memo);
        changed = changed || na != a;
        a = na;
      }
      if (changed) r = copy;
    }
    memo[e.get()] = r;
    return r;
  }

  // ---- one stage's statements for the current row

  std::vector<Expr> matmul_index(const Shape& ob, size_t batch, Expr row, Expr col, const std::vector<Expr>& outer) {
    std::vector<Expr> d;
    const size_t off = batch - ob.size();
    for (size_t i = 0; i < ob.size(); ++i) d.push_back(ob[i] == 1 ? int_imm(0) : outer[off + i]);
    d.push_back(std::move(row));
    d.push_back(std::move(col));
    return d;
  }

  std::vector<Stmt> stage_stmts(size_t s, const std::vector<Expr>& outer, int64_t& local_bytes) {
    Stage& st = stages_[s];
    Ctx cx(grp_);
    for (const Node* n : grp_.nodes) cx.L.members_.insert(n);
    for (const auto& [v, b] : input_buf_) cx.L.input_buffers_[v] = b;
    int ph = 0;
    auto bind_placeholder = [&](const Value* v) {
      auto b = std::make_shared<Buffer>(Buffer{cat("kiln_ph", ph++), v->dtype(), v->shape(), Scope::Register});
      cx.L.input_buffers_[v] = b;
      cx.placeholder_of[b.get()] = v;
    };
    bind_placeholder(st.c->output(0));
    for (const Node* n : st.nodes)
      for (const Value* o : n->outputs())
        if (o) bind_placeholder(o);

    const std::string J = cat("kiln_c", s), K = cat("kiln_k", s);
    const DType acc_t = compute_type(st.dtype);
    const size_t batch = st.out.size() - 2;
    const Value* a = st.c->input(0);
    const Value* b = st.c->input(1);
    auto a_at = [&](Expr kk) -> Expr {
      if (st.row_in) return load(st.row_in, kk);
      return cx.L.value_at(a, Index::from_dims(a->shape(), matmul_index(st.a_batch, batch, outer[batch], kk, outer)));
    };
    Expr bkj = cx.L.value_at(b, Index::from_dims(b->shape(), matmul_index(st.b_batch, batch, var(K), var(J), outer)));

    // The axpy form when the right operand is contiguous along the output row.
    bool axpy = false;
    if (Expr ix = first_global_load_index(bkj)) {
      auto i0 = eval_index(ix, {}), i1 = eval_index(ix, {{J, 1}});
      axpy = st.n > 1 && i0 && i1 && *i1 - *i0 == 1;
    }

    std::vector<Stmt> out, jbody;
    Expr acc_val;
    BufferPtr acc_row;
    if (axpy) {
      acc_row = std::make_shared<Buffer>(Buffer{cat("kiln_arow", s), acc_t, Shape{st.n}, Scope::Local});
      local_bytes += st.n * int64_t(dtype_size(acc_t));
      out.push_back(for_loop(J, int_imm(st.n), {store(acc_row, var(J), imm(0, acc_t))}, ForKind::Vectorized));
      std::vector<Stmt> kbody, inner;
      const std::string an = cat("t", next_let_++);
      Expr av = to_compute(a_at(var(K)));
      kbody.push_back(let(an, av));
      Expr update = binary(BinOp::Add, load(acc_row, var(J)), binary(BinOp::Mul, var(an, av->type), to_compute(bkj)));
      SharedExprHoister h(next_let_);
      h.count(update);
      if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused operand loads have ", h.dag_size(), " nodes"));
      update = h.rewrite(update, inner);
      inner.push_back(store(acc_row, var(J), update));
      kbody.push_back(for_loop(J, int_imm(st.n), std::move(inner), ForKind::Vectorized));
      out.push_back(for_loop(K, int_imm(st.k), std::move(kbody)));
      acc_val = cast(st.dtype, load(acc_row, var(J)));
    } else {
      jbody.push_back(let(kAcc, imm(0, acc_t)));
      Expr update = binary(BinOp::Add, var(kAcc, acc_t), binary(BinOp::Mul, to_compute(a_at(var(K))), to_compute(bkj)));
      std::vector<Stmt> kbody;
      SharedExprHoister h(next_let_);
      h.count(update);
      if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused operand loads have ", h.dag_size(), " nodes"));
      update = h.rewrite(update, kbody);
      kbody.push_back(assign(kAcc, update));
      jbody.push_back(for_loop(K, int_imm(st.k), std::move(kbody)));
      acc_val = cast(st.dtype, var(kAcc, acc_t));
    }

    // The epilogue at (row, j): next row, staged rows, the group's outputs of this stage.
    std::vector<Expr> pd(outer.begin(), outer.end());
    pd.push_back(var(J));
    Index point = Index::from_dims(st.out, pd);
    const std::string point_at = print_expr(cx.L.flat(point));
    cx.at[st.c->output(0)] = At{point, acc_val};
    std::vector<BufferPtr> bufs;
    std::vector<std::pair<Expr, Expr>> stores;
    auto row_value = [&](const Value* v) {
      At r = forward(cx, s, v);
      if (print_expr(cx.L.flat(r.pos)) != point_at)
        refuse(cat("'", v->name(), "' is not computed at its row position (not lowered to loops yet)"));
      return r.val;
    };
    if (st.next && !pass_output(st, st.next)) {
      bufs.push_back(st.row_out);
      stores.push_back({var(J), row_value(st.next)});
    }
    if (st.plan)
      for (size_t i = 0; i < st.plan->staged.size(); ++i) {
        bufs.push_back(st.staged_rows[i]);
        stores.push_back({var(J), row_value(st.plan->staged[i])});
      }
    for (const Value* v : grp_.outputs) {
      if (stage_of(v) != int(s) || pass_output(st, v)) continue;
      At r = forward(cx, s, v);
      bufs.push_back(output_buf_.at(v));
      stores.push_back({cx.L.flat(r.pos), r.val});
    }
    SharedExprHoister h(next_let_);
    for (auto& [index, value] : stores) {
      h.count(value);
      h.count(index);
    }
    if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
    for (auto& [index, value] : stores) {
      value = h.rewrite(value, jbody);
      index = h.rewrite(index, jbody);
    }
    append_stores(jbody, bufs, std::move(stores), next_let_);
    out.push_back(for_loop(J, int_imm(st.n), std::move(jbody), axpy ? ForKind::Vectorized : ForKind::Serial));

    if (st.plan) {
      for (auto& p : row_passes(s, outer)) out.push_back(std::move(p));
    }
    if (acc_row) out = {allocate(acc_row, std::move(out))};
    return out;
  }

  // The stage's row reductions and what follows them, reading the staged local rows; `next`
  // goes to its local row (through a stand-in buffer of the full shape, rebound at the row's
  // offset).
  std::vector<Stmt> row_passes(size_t s, const std::vector<Expr>& outer) {
    Stage& st = stages_[s];
    const ContractionRows& plan = *st.plan;
    std::unordered_map<const Value*, BufferPtr> buffers;
    for (const Value* v : plan.passes.inputs) {
      auto si = std::find(plan.staged.begin(), plan.staged.end(), v);
      if (si != plan.staged.end()) buffers[v] = st.staged_rows[size_t(si - plan.staged.begin())];
      else if (input_buf_.count(v)) buffers[v] = input_buf_.at(v);
      else refuse(cat("the row passes read '", v->name(), "', not a kernel input (not lowered to loops yet)"));
    }
    BufferPtr stand_in;
    for (const Value* v : plan.passes.outputs) {
      if (output_buf_.count(v)) buffers[v] = output_buf_.at(v);
      else if (v == st.next) {
        stand_in = std::make_shared<Buffer>(Buffer{cat("kiln_next", s), v->dtype(), v->shape(), Scope::Global});
        buffers[v] = stand_in;
      } else {
        KILN_CHECK(false, "row pass output '", v->name(), "' has no buffer");
      }
    }
    std::vector<Stmt> passes = contraction_row_passes(plan, plan.shape, buffers, outer, cat(name_, "_rows", s));
    Expr base = int_imm(0);
    for (size_t d = 0; d < st.out.size(); ++d) base = add(mul(base, int_imm(st.out[d])), d < plan.r0 ? outer[d] : int_imm(0));
    if (stand_in) {
      BufferMap m;
      m[stand_in.get()] = BufferTarget{st.row_out, base};
      for (auto& p : passes) p = rebind_buffers(p, m);
    }
    std::vector<Stmt> r = {scoped(std::move(passes))};
    if (st.next && pass_output(st, st.next) && output_buf_.count(st.next)) {
      // `next` is also a group output: the passes stored it there; the next stage reads it as a row.
      const std::string j = cat("kiln_c", s);
      r.push_back(for_loop(j, int_imm(st.n), {store(st.row_out, var(j), load(output_buf_.at(st.next), add(base, var(j))))}));
    }
    return r;
  }

  // ---- the kernel

  LoopKernel build() {
    const Shape& o0 = stages_[0].out;
    const size_t rank = o0.size();
    const Shape rows_shape(o0.begin(), o0.end() - 1);
    const int64_t rows = shape_numel(rows_shape);

    // i<d>: the row's position, from the flat row loop (one parallel loop balances better than
    // the leading dims alone; the row passes use these names).
    std::vector<Stmt> body;
    std::vector<Expr> outer(rank - 1);
    {
      size_t first = rank;
      for (size_t d = 0; d + 1 < rank; ++d)
        if (o0[d] != 1 && first == rank) first = d;
      int64_t stride = 1;
      std::vector<Stmt> lets(rank - 1);
      for (size_t d = rank - 1; d-- > 0;) {
        if (o0[d] == 1) {
          outer[d] = int_imm(0);
          continue;
        }
        Expr q = div_floor(var("kiln_r"), int_imm(stride));
        lets[d] = let(cat("i", d), d == first ? q : mod(q, int_imm(o0[d])));
        outer[d] = var(cat("i", d));
        stride *= o0[d];
      }
      for (auto& l : lets)
        if (l) body.push_back(l);
    }

    std::vector<BufferPtr> locals;
    int64_t bytes = 0;
    for (size_t s = 0; s < stages_.size(); ++s) {
      Stage& st = stages_[s];
      if (st.next) {
        st.row_out = std::make_shared<Buffer>(Buffer{cat("kiln_prow", s), st.next->dtype(), Shape{st.n}, Scope::Local});
        stages_[s + 1].row_in = st.row_out;
        locals.push_back(st.row_out);
        bytes += st.n * int64_t(dtype_size(st.next->dtype()));
      }
      if (st.plan)
        for (size_t i = 0; i < st.plan->staged.size(); ++i) {
          const Value* v = st.plan->staged[i];
          st.staged_rows.push_back(
              std::make_shared<Buffer>(Buffer{cat("kiln_srow", s, "_", i), v->dtype(), Shape{st.n}, Scope::Local}));
          locals.push_back(st.staged_rows.back());
          bytes += st.n * int64_t(dtype_size(v->dtype()));
        }
    }
    std::vector<Stmt> stages;
    for (size_t s = 0; s < stages_.size(); ++s) stages.push_back(scoped(stage_stmts(s, outer, bytes)));
    // OpenMP workers have small stacks; the emitter would heap-allocate bigger rows per row.
    if (bytes > kMaxRowBytes)
      refuse(cat("the rows of a chain of contractions take ", bytes, " bytes, more than the ", kMaxRowBytes,
                 " of local rows (not lowered to loops yet)"));
    for (size_t i = locals.size(); i-- > 0;) stages = {allocate(locals[i], std::move(stages))};
    for (auto& st : stages) body.push_back(std::move(st));

    double flops = 0;
    for (const Stage& st : stages_) flops += double(shape_numel(st.out)) * double(st.k);
    const bool parallel = rows > 1 && flops >= double(sched_.parallel_min_work);
    Stmt nest = for_loop("kiln_r", int_imm(rows), std::move(body), parallel ? ForKind::Parallel : ForKind::Serial);
    // The operands' remapping views leave div/mod of loop indices that the ranges fold away.
    std::map<std::string, int64_t> extents;
    for (size_t d = 0; d + 1 < rank; ++d)
      if (o0[d] != 1) extents[cat("i", d)] = o0[d];
    k_.body = fold_index_divmod(nest, extents);
    return std::move(k_);
  }

  const FusionGroup& grp_;
  std::string name_;
  Schedule sched_;
  std::vector<Stage> stages_;
  std::unordered_map<const Value*, int> stage_;
  std::unordered_map<const Value*, BufferPtr> input_buf_, output_buf_;
  LoopKernel k_;
  int next_let_ = 0;
};

LoopKernel lower_contraction_chain(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  return RowPipeline(grp, kernel_name, sched).lower();
}

}  // namespace kiln::loop::detail
