// RowKernelBuilder's shared machinery (row_kernel.h): finishing statement lists (reduction
// results and staged rows substituted, per-row values hoisted, common subexpressions computed
// once), loop wrapping, the kernel's buffers and its outer loops. Used by the row kernels
// (lower_reduction.cc) and the windowed pools (lower_pool.cc).
#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "loop/affine.h"
#include "loop/row_kernel.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

// Common subexpressions of one statement list become Lets `t<k>` (pure index arithmetic stays
// inline, as in lower_group.cc).

int64_t emitted_size(const Expr& e) {
  int64_t n = 1;
  for (const auto& a : e->args) n += emitted_size(a);
  return n;
}

}  // namespace

RowKernelBuilder::RowKernelBuilder(const FusionGroup& grp, bool jam, int reduction_lanes, bool reorder_sums)
    : grp_(grp),
      L_(grp, /*flat_mode=*/false),
      jam_(jam),
      sum_lanes_(reduction_lanes > 1 ? reduction_lanes : 0),
      reorder_sums_(reorder_sums) {
  KILN_CHECK(sum_lanes_ == 0 || (sum_lanes_ <= 1024 && (sum_lanes_ & (sum_lanes_ - 1)) == 0),
             "Schedule::reduction_lanes must be 0, 1 or a power of two up to 1024, not ", reduction_lanes);
}

Expr RowKernelBuilder::subst(const Expr& e, std::unordered_map<const ExprNode*, Expr>& memo) {
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  Expr r = e;
  if (e->kind == ExprKind::Load) {
    if (auto it = results_.find(e->buffer.get()); it != results_.end()) {
      if (!it->second.defined || position_key(e->args[0]) != outer_flat_)
        refuse("a reduction result is read at another row than its own (a broadcast or remap across rows)");
      r = var(it->second.var, e->type);
    }
    if (auto it = staged_.find(e->buffer.get()); it != staged_.end()) {
      // A staged value at (row base + j) is element j of the local row: with only elementwise ops
      // in the group (stage_ok_), it is read nowhere but in the current row.
      const Expr& idx = e->args[0];
      const bool split = idx->kind == ExprKind::Binary && idx->bin == BinOp::Add &&
                         same_position(idx->args[0], row_base_);
      r = load(it->second, split ? idx->args[1] : sub(idx, row_base_));
    }
  }
  if (r == e && !e->args.empty()) {
    r = map_args(e, [&](const Expr& a) { return subst(a, memo); });
  }
  memo[e.get()] = r;
  return r;
}

namespace {

// Whether e changes from one iteration of the loop to the next: it reads a loop variable, a
// variable the loop body assigns (an accumulator), or a buffer the loop body stores to.
bool reads_any(const Expr& e, const std::set<std::string>& vars, const std::set<const Buffer*>& stored,
               std::unordered_map<const ExprNode*, bool>& memo) {
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  bool r = (e->kind == ExprKind::Var && vars.count(e->name)) ||
           (e->kind == ExprKind::Load && stored.count(e->buffer.get()));
  for (const auto& a : e->args) r = reads_any(a, vars, stored, memo) || r;
  memo[e.get()] = r;
  return r;
}

// Not worth a Let of its own: literals, variables, and index arithmetic without loads (the C
// compiler hoists that itself).
bool trivial(const Expr& e) {
  if (e->kind == ExprKind::IntImm || e->kind == ExprKind::FloatImm || e->kind == ExprKind::Var) return true;
  if (e->kind == ExprKind::Cast) return trivial(e->args[0]);
  if (e->kind == ExprKind::Load) return false;
  if (e->type != DType::Int64) return false;
  return std::all_of(e->args.begin(), e->args.end(), trivial);
}

}  // namespace

std::vector<Stmt> RowKernelBuilder::finish_in_loop(std::vector<Root> roots, const std::set<std::string>& loop_vars,
                                                   std::vector<Stmt>& before) {
  std::unordered_map<const ExprNode*, Expr> sub_memo, hoisted;
  std::unordered_map<const ExprNode*, bool> reads;
  // Besides the loop variables, what the body itself defines differs per iteration: an
  // accumulator `acc = acc + x` whose x does not depend on the loop (a row broadcast along the
  // reduced axis: Expand, Tile, Pad edge) must not be hoisted as if it were invariant.
  std::set<std::string> variant = loop_vars;
  std::set<const Buffer*> stored;
  for (const auto& r : roots) {
    if (r.kind == StmtKind::Store) stored.insert(r.buf.get());
    else variant.insert(r.var);
  }
  std::vector<Root> pre;
  std::function<Expr(const Expr&)> hoist = [&](const Expr& e) -> Expr {
    if (auto it = hoisted.find(e.get()); it != hoisted.end()) return it->second;
    Expr r = e;
    if (!reads_any(e, variant, stored, reads)) {
      if (!trivial(e)) {
        std::string name = "t" + std::to_string(next_let_++);
        pre.push_back(Root{StmtKind::Let, name, nullptr, nullptr, e});
        r = var(name, e->type);
      }
    } else if (!e->args.empty()) {
      r = map_args(e, [&](const Expr& a) { return hoist(a); });
    }
    hoisted[e.get()] = r;
    return r;
  };
  // Reduction results become their Lets first, so a per-row value reads as invariant.
  for (auto& r : roots) r.value = hoist(subst(r.value, sub_memo));
  for (auto& s : finish(std::move(pre))) before.push_back(s);
  return finish(std::move(roots));
}

std::vector<Stmt> RowKernelBuilder::finish(std::vector<Root> roots) {
  std::unordered_map<const ExprNode*, Expr> memo;
  SharedExprHoister h(next_let_);
  for (auto& r : roots) {
    r.value = subst(r.value, memo);
    h.count(r.value);
    if (r.index) {
      r.index = subst(r.index, memo);
      h.count(r.index);
    }
  }
  std::vector<Stmt> body, stores;
  for (auto& r : roots) {
    Expr v = h.rewrite(r.value, body);
    if (r.kind == StmtKind::Let) body.push_back(let(r.var, v));
    else if (r.kind == StmtKind::Assign) body.push_back(assign(r.var, v));
    else {
      // Every load of an iteration precedes its stores (in-place reuse of an input is safe).
      Expr idx = h.rewrite(r.index, body);
      if (v->kind != ExprKind::Var && v->kind != ExprKind::IntImm && v->kind != ExprKind::FloatImm) {
        std::string name = "t" + std::to_string(next_let_++);
        body.push_back(let(name, v));
        v = var(name, v->type);
      }
      stores.push_back(store(r.buf, idx, v));
    }
  }
  for (auto& s : stores) body.push_back(s);
  int64_t emitted = 0;
  for (const Stmt& st : body) emitted += emitted_size(st->value) + (st->index ? emitted_size(st->index) : 0);
  if (emitted > kMaxEmittedNodes)
    refuse(cat("the fused row loop would have ", emitted, " expression nodes (limit ", kMaxEmittedNodes, ")"));
  return body;
}

std::vector<Stmt> RowKernelBuilder::wrap(const std::vector<std::pair<std::string, int64_t>>& loops,
                                         std::vector<Stmt> body, bool vectorize) {
  for (size_t i = loops.size(); i-- > 0;) {
    const ForKind k = vectorize && i + 1 == loops.size() ? ForKind::Vectorized : ForKind::Serial;
    body = {for_loop(loops[i].first, int_imm(loops[i].second), std::move(body), k)};
  }
  return body;
}

void RowKernelBuilder::bind(LoopKernel& k, const std::vector<const Node*>& reds) {
  for (const Node* n : grp_.nodes) {
    L_.members_.insert(n);
    if (!n->name().empty() && std::find(k.sources.begin(), k.sources.end(), n->name()) == k.sources.end())
      k.sources.push_back(n->name());
  }
  std::set<std::string> used;
  auto buffer = [&](const Value* v, Scope scope) {
    std::string base = "b_" + sanitize_identifier(v->name()), n = base;
    for (int i = 1; used.count(n); ++i) n = base + "_" + std::to_string(i);
    used.insert(n);
    return std::make_shared<Buffer>(Buffer{n, v->dtype(), v->shape(), scope});
  };
  for (const Value* v : grp_.inputs) {
    auto b = buffer(v, Scope::Global);
    L_.input_buffers_[v] = b;
    k.inputs.push_back(b);
  }
  for (const Value* v : grp_.outputs) k.outputs.push_back(buffer(v, Scope::Global));
  for (size_t i = 0; i < reds.size(); ++i) {
    const Value* v = reds[i]->output(0);
    if (L_.input_buffers_.count(v)) refuse("a reduction result is also a kernel input");
    auto b = buffer(v, Scope::Register);
    L_.input_buffers_[v] = b;
    results_[b.get()] = Result{"kiln_r" + std::to_string(i), false};
  }
}

std::vector<std::pair<std::string, int64_t>> RowKernelBuilder::outer_loops(const Shape& shape) {
  std::vector<std::pair<std::string, int64_t>> loops;
  outer_dims_.clear();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) {
      outer_dims_.push_back(int_imm(0));
    } else {
      std::string v = "i" + std::to_string(i);
      loops.push_back({v, shape[i]});
      outer_dims_.push_back(var(v));
    }
  }
  Index idx = Index::from_dims(shape, outer_dims_);
  outer_flat_expr_ = L_.flat(idx);
  outer_flat_ = position_key(outer_flat_expr_);
  return loops;
}

}  // namespace kiln::loop::detail
