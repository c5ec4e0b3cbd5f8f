// Chains of MatMuls in one group — attention (QKᵀ -> softmax -> ·V -> head merge), narrow MLPs
// (MatMul -> bias -> GELU -> MatMul -> bias -> residual -> LayerNorm) — as a row pipeline over
// the stages of plan_contraction_chain (lower_contraction_siblings.cc):
//
//   for kiln_r in tiles of T rows of the first MatMul's output (rows: all dims but the last;
//                 a tile lies within one batch position)                       Parallel when big
//     i<d> = the tile's batch position, kiln_m0 = its first row (Lets)
//     allocate the tile's local buffers (Scope::Local, 64 KiB at most in all)
//       stage 0: A rows (prologue computed once per element) -> kiln_atile
//                acc[T][N] = A·B, products added in k order from 0 as the reference does
//                per row: the epilogue per element -> the next stage's rows, the rows its
//                reductions read, the group's outputs; then the reductions' passes
//                (lower_contraction_rows.cc), which may produce the next stage's rows
//       stage 1: the same with A = those rows ...
//
// A·B: the micro-kernel (src/kernels/microkernel.h; T × nr tiles, float32) when B is in memory
// with rows contiguous along j — read in place (the affine index of B's load, view prologues
// such as attention's slice/reshape/transpose folded), or packed once per tile when small —
// else loops in the same order (acc[t][j] += a[t][k] * b[k][j]) or, when B is neither
// contiguous nor packable, per column along k (the dot form). All give every output element
// the reference's sequence of float operations: bit-identical results.
//
// A stage's epilogue is built forward from the accumulator, node by node: an elementwise node is
// lowered by the Lowerer at its operands' common position, each operand of the stage bound to a
// placeholder register buffer whose load is replaced by the operand's expression (a load at
// another position refuses); Transpose/Reshape-like nodes carry a value to its remapped
// position, so an output such as attention's head merge is stored where it belongs.
//
// Refused (LoweredGroup::reason): see plan_contraction_chain, plus epilogue ops other than
// elementwise and layout ones, values needed at another position than computed, and tiles whose
// local buffers exceed the budget even for one row.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "fusion/op_kind.h"
#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "loop/row_jam.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

constexpr const char* kAcc = "acc";

// Ops that move every element to one other position (a bijection): the epilogue carries values
// through them forward.
bool is_layout(const Node* n) {
  static const std::set<std::string> ops = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"};
  return ops.count(n->op_type()) && n->domain().empty();
}

// The index of the first load of a global buffer in e, or null.
Expr first_global_load_index(const Expr& e) {
  if (e->kind == ExprKind::Load && e->buffer->scope == Scope::Global) return e->args[0];
  for (const auto& a : e->args)
    if (Expr r = first_global_load_index(a)) return r;
  return nullptr;
}

}  // namespace

class RowPipeline {
 public:
  RowPipeline(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched) {}

  LoopKernel lower() {
    chain_ = plan_contraction_chain(grp_);
    for (const ChainStage& cs : chain_.stages) stages_.push_back(Stage(cs));
    bind();
    return build();
  }

 private:
  // A stage and how it is lowered.
  struct Stage : ChainStage {
    explicit Stage(const ChainStage& c) : ChainStage(c) {}
    bool pack = false, axpy = false, mk = false;  // how the right operand is read (choose_form)
    bool panel = false;                           // b_buf holds it in panels (prepack_weights)
    BufferPtr b_buf;                              // read in place: b_buf[b_base + k * b_stride + j]
    Expr b_base;
    int64_t b_stride = 0;
    std::vector<BufferPtr> staged_rows;  // plan->staged[i]'s tile rows
    BufferPtr row_in, row_out;           // this stage's left operand rows; `next`'s rows
    BufferPtr b_pack, acc;               // the packed right operand; the axpy accumulators
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

  int stage_of(const Value* v) const { return chain_.stage(v); }

  void bind() {
    bind_kernel(grp_, name_, k_, {kAcc}, &input_buf_, &output_buf_);
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
      refuse(cat("'", v->name(), "' depends on a row reduction where the chain needs it per element (no emitter fuses this; its members stay separate kernels)"));
    At r;
    if (is_layout(n)) {
      At in = forward(cx, s, n->input(0));
      r.val = in.val;
      if (n->op_type() == "Transpose") {
        r.pos = transposed_position(cx.L, *n, in.pos);
      } else {
        r.pos = Index::from_flat(v->shape(), cx.L.flat(in.pos));
      }
    } else if (is_elementwise(n)) {
      bool have = false;
      Expr where;
      for (const Value* u : n->inputs()) {
        if (!u || stage_of(u) != int(s)) continue;
        if (u->shape() != v->shape())
          refuse(cat(name_of(n), " broadcasts a value computed from a chained contraction (no emitter fuses this; its members stay separate kernels)"));
        At a = forward(cx, s, u);
        Expr w = cx.L.flat(a.pos);
        if (!have) {
          r.pos = a.pos;
          where = w;
          have = true;
        } else if (!same_position(w, where)) {
          refuse(cat(name_of(n), " reads its operands at different positions (no emitter fuses this; its members stay separate kernels)"));
        }
      }
      KILN_CHECK(have, name_of(n), " has no operand from the chain");
      size_t slot = 0;
      while (n->output(slot) != v) ++slot;
      std::unordered_map<const ExprNode*, Expr> memo;
      r.val = substitute_placeholders(cx.L.lower_node(*n, slot, r.pos), placeholders(cx), memo);
      KILN_CHECK(r.val->type == v->dtype(), name_of(n), " lowered to ", dtype_name(r.val->type), ", expected ",
                 dtype_name(v->dtype()));
    } else {
      refuse(cat(n->op_type(), " after a chained contraction is not fused by any emitter (its members stay separate kernels)"));
    }
    cx.at[v] = r;
    return r;
  }

  // The stage values the placeholders stand for, at their positions (substitute_placeholders).
  PlaceholderLookup placeholders(Ctx& cx) {
    return [&cx](const Buffer* b) -> std::optional<PlaceholderValue> {
      auto p = cx.placeholder_of.find(b);
      if (p == cx.placeholder_of.end()) return std::nullopt;
      auto it = cx.at.find(p->second);
      KILN_CHECK(it != cx.at.end(), "placeholder of '", p->second->name(), "' read before it was computed");
      return PlaceholderValue{cx.L.flat(it->second.pos), it->second.val, cat("'", p->second->name(), "'")};
    };
  }

  // ---- operands

  void init_ctx(Ctx& cx, size_t s) {
    for (const Node* n : grp_.nodes) cx.L.members_.insert(n);
    for (const auto& [v, b] : input_buf_) cx.L.input_buffers_[v] = b;
    int ph = 0;
    auto bind_placeholder = [&](const Value* v) {
      auto b = std::make_shared<Buffer>(Buffer{cat("kiln_ph", ph++), v->dtype(), v->shape(), Scope::Register});
      cx.L.input_buffers_[v] = b;
      cx.placeholder_of[b.get()] = v;
    };
    bind_placeholder(stages_[s].c->output(0));
    for (const Node* n : stages_[s].nodes)
      for (const Value* o : n->outputs())
        if (o) bind_placeholder(o);
  }

  // A MatMul operand's position from the output's batch position (outer_) and (row, col).
  std::vector<Expr> matmul_index(const Shape& ob, Expr row, Expr col) const {
    std::vector<Expr> d;
    const size_t off = batch_ - ob.size();
    for (size_t i = 0; i < ob.size(); ++i) d.push_back(ob[i] == 1 ? int_imm(0) : outer_[off + i]);
    d.push_back(std::move(row));
    d.push_back(std::move(col));
    return d;
  }

  Expr b_at(Ctx& cx, size_t s, Expr kk, Expr j) {
    const Value* b = stages_[s].c->input(1);
    return cx.L.value_at(b, Index::from_dims(b->shape(), matmul_index(stages_[s].b_batch, std::move(kk), std::move(j))));
  }

  // The ranges of stage s's right-operand index variables (k < K, j < N, the batch positions),
  // with which fold_index_divmod takes a view's div/mod out of its index.
  std::map<std::string, int64_t> b_extents(size_t s, const std::string& K, const std::string& J) const {
    std::map<std::string, int64_t> e = {{K, stages_[s].k}, {J, stages_[s].n}};
    for (size_t d = 0; d < batch_; ++d) e[cat("i", d)] = stages_[0].out[d];
    return e;
  }

  // The axpy form streams the right operand along j: in place when it is contiguous there, else
  // packed once per tile ([K][N], then read by every row of the tile) when it is small; the dot
  // form reads it along k otherwise. float32 stages with a right operand in memory (in place: a
  // buffer read at base + k * stride + j, or the packed copy) go through the micro-kernel.
  void choose_form(size_t s) {
    Stage& st = stages_[s];
    Ctx cx(grp_);
    init_ctx(cx, s);
    const std::string J = cat("kiln_c", s), K = cat("kiln_k", s);
    const Expr bkj = b_at(cx, s, var(K), var(J));
    // The first load's index (the value's own when it is a plain load) as k * stride + j + base.
    std::optional<AffineForm> f;
    if (Expr ix = first_global_load_index(bkj)) {
      AffineScope scope;
      scope.varying = {K, J};
      f = affine_form(fold_index_divmod(ix, b_extents(s, K, J)), scope);
    }
    const bool contiguous = f && f->coef_of(J) == 1;
    if (contiguous && bkj->kind == ExprKind::Load) {
      AffineForm base = f->filtered([&](const std::string& key) { return key != K && key != J; });
      base.constant = f->constant;
      st.b_buf = bkj->buffer;
      st.b_base = base.to_expr();
      st.b_stride = f->coef_of(K);
    }
    const int64_t pack_bytes = st.k * st.n * int64_t(dtype_size(st.c->input(1)->dtype()));
    // Every row tile reads each stage's right operand again. One that does not stay in L2 between
    // tiles makes the pipeline slower than its stages as separate kernels: the encoder's FFN
    // (768x3072 and 3072x768 weights) took 23.8 ms as one chain and 17.9 ms as two kernels (one
    // thread, kiln bench --kernels, 2026-12-01). Refused, so the partitioner keeps them apart.
    if (pack_bytes > sched_.chain.max_stream_bytes)
      refuse(cat("stage ", s + 1, " of the chain streams its right operand (", pack_bytes, " bytes) once per row tile; "
                 "more than the ", sched_.chain.max_stream_bytes, " that stay in cache between tiles"));
    st.pack = !st.b_buf && st.n > 1 && pack_bytes <= sched_.chain.max_pack_bytes;
    st.axpy = st.n > 1 && (contiguous || st.b_buf || st.pack);
    st.mk = sched_.tile_contractions && st.axpy && st.dtype == DType::Float32 && (st.b_buf || st.pack);
  }

  // A stage's constant right operand read in place as a plain [K, N] matrix by the micro-kernel
  // is read in its panel layout instead (panel_layout.h; packed once when the executable is
  // built, LoopKernel::packed_inputs), as the tiled GEMM reads weights: the micro-kernel then
  // streams B at stride nr. In place its rows lay N floats apart, and a 32-column panel of K rows
  // at a stride of 1.5 KiB (ConvNeXt's 96 x 384 MLP weights) maps to a few L1 sets, re-read from
  // L2 by every row block. Only weights nothing else in the kernel reads.
  void prepack_weights() {
    const int64_t nr = std::max(sched_.contraction.nr, 1);
    for (Stage& st : stages_) {
      if (!st.mk || st.pack || !st.b_buf || st.b_stride != st.n) continue;
      if (st.b_base->kind != ExprKind::IntImm || st.b_base->int_value != 0) continue;
      const Value* w = nullptr;
      for (const Value* v : grp_.inputs)
        if (input_buf_.count(v) && input_buf_.at(v) == st.b_buf) w = v;
      if (!w || !w->is_constant() || w->dtype() != DType::Float32 || shape_numel(w->shape()) != st.k * st.n) continue;
      if (!only_right_operand(grp_, st.c, w)) continue;
      st.b_buf = input_buf_[w] = pack_kernel_input(k_, st.b_buf, PanelLayout::row_major(1, st.k, st.n, nr));
      st.b_stride = nr;
      st.panel = true;
    }
  }

  // Bytes of local buffers with tiles of t rows.
  int64_t local_bytes(int64_t t) const {
    int64_t b = 0;
    for (size_t s = 0; s < stages_.size(); ++s) {
      const Stage& st = stages_[s];
      if (s == 0) b += t * st.k * int64_t(dtype_size(st.c->input(0)->dtype()));
      if (st.pack) b += st.k * st.n * int64_t(dtype_size(st.c->input(1)->dtype()));
      if (st.axpy) b += t * st.n * int64_t(dtype_size(compute_type(st.dtype)));
      if (st.next) b += t * st.n * int64_t(dtype_size(st.next->dtype()));
      if (st.plan)
        for (const Value* v : st.plan->staged) b += t * st.n * int64_t(dtype_size(v->dtype()));
    }
    return b;
  }

  // ---- one stage's statements for the current tile

  // `body` for each row t of the tile: i<batch> = kiln_m0 + t, skipped past the last row when
  // the tile size does not divide M.
  Stmt per_row(const std::string& t, std::vector<Stmt> body) const {
    std::vector<Stmt> b;
    if (m_ > 1) {
      const std::string m = cat("i", batch_);
      b.push_back(let(m, add(var("kiln_m0"), var(t))));
      if (m_ % tile_ != 0) body = {if_then(binary(BinOp::Lt, var(m), int_imm(m_)), std::move(body))};
    }
    for (auto& x : body) b.push_back(std::move(x));
    return for_loop(t, int_imm(tile_), std::move(b));
  }

  // e's shared parts as Lets appended to `body`.
  Expr hoist(const Expr& e, std::vector<Stmt>& body, const char* what) {
    SharedExprHoister h(next_let_);
    h.count(e);
    if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused ", what, " have ", h.dag_size(), " nodes"));
    return h.rewrite(e, body);
  }

  std::vector<Stmt> stage_stmts(size_t s) {
    Stage& st = stages_[s];
    Ctx cx(grp_);
    init_ctx(cx, s);
    const std::string J = cat("kiln_c", s), K = cat("kiln_k", s), t = cat("kiln_t", s);
    const DType acc_t = compute_type(st.dtype);
    std::vector<Stmt> out;

    // The left operand: the previous stage's rows, or (stage 0) the operand with its prologue,
    // computed once per row into the tile.
    BufferPtr a_in = st.row_in;
    if (s == 0) {
      a_in = a_tile_;
      const Value* a = st.c->input(0);
      std::vector<Stmt> kb;
      Expr v = cx.L.value_at(a, Index::from_dims(a->shape(), matmul_index(st.a_batch, outer_[batch_], var(K))));
      v = hoist(v, kb, "operand loads");
      kb.push_back(store(a_in, add(mul(var(t), int_imm(st.k)), var(K)), v));
      out.push_back(per_row(t, {for_loop(K, int_imm(st.k), std::move(kb))}));
    }
    Expr a_tk = to_compute(load(a_in, add(mul(var(t), int_imm(st.k)), var(K))));
    Expr bkj = b_at(cx, s, var(K), var(J));
    if (st.pack) {
      std::vector<Stmt> jb;
      Expr v = hoist(bkj, jb, "operand loads");
      jb.push_back(store(st.b_pack, add(mul(var(K), int_imm(st.n)), var(J)), v));
      // Read the source along its contiguous axis: a transposed operand (attention's K^T, whose
      // k runs along memory) is packed column by column, others row by row. The index is asked
      // after the ranges fold its view's div/mod (a head sliced out of a fused QKV tensor and
      // reshaped: unfolded it was not affine, and the audio encoder's K^T, 24 x 399 per head,
      // was gathered element by element 288 floats apart, k outermost).
      bool k_contiguous = false;
      if (bkj->kind == ExprKind::Load) {
        bkj = fold_index_divmod(bkj, b_extents(s, K, J));
        AffineScope scope;
        scope.varying = {K, J};
        if (auto f = affine_form(bkj->args[0], scope))
          k_contiguous = std::abs(f->coef_of(K)) < std::abs(f->coef_of(J));
      }
      // A float32 operand read in place along k is one transposing copy (16x16 blocks in
      // registers): packed element by element, attention's K^T (197 x 64 per head) cost a tenth of
      // a ViT-B attention kernel in scalar strided loads.
      Stmt copy = k_contiguous ? transposed_copy(bkj, J, K, st.n, st.k, st.b_pack, int_imm(0), st.n) : nullptr;
      if (copy) out.push_back(copy);
      else out.push_back(k_contiguous ? for_loop(J, int_imm(st.n), {for_loop(K, int_imm(st.k), std::move(jb))})
                                      : for_loop(K, int_imm(st.k), {for_loop(J, int_imm(st.n), std::move(jb))}));
      bkj = load(st.b_pack, add(mul(var(K), int_imm(st.n)), var(J)));
    }
    const Expr row_j = add(mul(var(t), int_imm(st.n)), var(J));  // (t, j) in a tile's rows
    std::vector<Stmt> jbody;
    Expr acc_val;
    if (st.axpy) {
      // (The micro-kernel's first K block starts from zero: no zeroing pass.)
      const std::string x = cat("kiln_x", s);
      if (!st.mk) out.push_back(for_loop(x, int_imm(tile_ * st.n), {store(st.acc, var(x), imm(0, acc_t))}, ForKind::Vectorized));
      acc_val = cast(st.dtype, load(st.acc, row_j));
    }
    if (st.mk) {
      // The tile's product through the micro-kernel, in the tiled rows nest's loop
      // (row_tile_product: column panels, K blocks, row blocks of mr innermost so that a panel of
      // B stays in cache for all of them). B in place (rows b_stride apart, or in panels of nr
      // columns: the panel from j0 starts at j0 · K) or packed. A tile past M's end (the last one
      // when tile_ does not divide M) has fewer rows: its calls stop at its last row.
      const Expr base = st.pack ? int_imm(0) : st.b_base;
      const int64_t bs = st.pack ? st.n : st.b_stride, nr = std::max(sched_.contraction.nr, 1);
      RowTileProduct p;
      p.a = a_in;
      p.a_at = [&](Expr r, Expr k0) { return add(mul(r, int_imm(st.k)), k0); };
      p.as_i = st.k;
      p.b = st.pack ? st.b_pack : st.b_buf;
      p.b_at = [&](Expr j0, Expr k0) {
        return st.panel ? add(mul(j0, int_imm(st.k)), mul(k0, int_imm(nr))) : add(base, add(mul(k0, int_imm(bs)), j0));
      };
      p.bs_k = bs;
      p.acc = st.acc;
      p.ld = p.n = st.n;
      p.k = st.k;
      // One K block: the chain's stages read all of K per call as before. (Blocks of the
      // schedule's kc, as the tiled rows take them, measured 0.94-1.04 of the time on the
      // chains of BERT, ConvNeXt-T, Swin-T and mlp_ln, K = 384-1024, 1 thread: no gain;
      // docs/codegen.md, "Anchored emitters".)
      p.kc = std::max<int64_t>(st.k, 1);
      p.mr = mr_;
      p.nr = nr;
      p.prefix = cat("kiln_tr", s, "_");
      p.wide_nr = st.panel ? 0 : merged_panel_width(sched_, mr_);
      p.zero_first = true;
      auto product = [&](int64_t rows) {
        p.rows = int_imm(rows);
        return row_tile_product(p);
      };
      // Constant row counts, so that every call has a constant tile (the micro-kernel's
      // specialisations; a variable count of rows goes through its generic loop).
      if (m_ % tile_ == 0) {
        for (auto& x : product(tile_)) out.push_back(std::move(x));
      } else {
        out.push_back(if_then(binary(BinOp::Le, add(var("kiln_m0"), int_imm(tile_)), int_imm(m_)), product(tile_),
                              product(m_ % tile_)));
      }
    } else if (st.axpy) {
      // acc[t][j] += a[t][k] * b[k][j], k outermost: each row of b serves every row of the tile.
      if (st.b_buf) bkj = load(st.b_buf, add(st.b_base, add(mul(var(K), int_imm(st.b_stride)), var(J))));
      std::vector<Stmt> tb, inner;
      const std::string an = cat("t", next_let_++);
      tb.push_back(let(an, a_tk));
      Expr update = binary(BinOp::Add, load(st.acc, row_j), binary(BinOp::Mul, var(an, a_tk->type), to_compute(bkj)));
      update = hoist(update, inner, "operand loads");
      inner.push_back(store(st.acc, row_j, update));
      tb.push_back(for_loop(J, int_imm(st.n), std::move(inner), ForKind::Vectorized));
      out.push_back(for_loop(K, int_imm(st.k), {per_row(t, std::move(tb))}));
    } else {
      jbody.push_back(let(kAcc, imm(0, acc_t)));
      Expr update = binary(BinOp::Add, var(kAcc, acc_t), binary(BinOp::Mul, a_tk, to_compute(bkj)));
      std::vector<Stmt> kbody;
      update = hoist(update, kbody, "operand loads");
      kbody.push_back(assign(kAcc, update));
      jbody.push_back(for_loop(K, int_imm(st.k), std::move(kbody)));
      acc_val = cast(st.dtype, var(kAcc, acc_t));
    }
    Stmt transposed;
    epilogue(cx, s, acc_val, row_j, var(J), jbody, &transposed);
    out.push_back(per_row(t, {for_loop(J, int_imm(st.n), std::move(jbody), st.axpy ? ForKind::Vectorized : ForKind::Serial)}));
    if (transposed) out.push_back(transposed);
    if (st.plan) {
      // Short rows run sched_.chain.row_jam at a time (ChainTile::row_jam): each row keeps its
      // own order of operations, so the results are the same bits.
      Stmt rows = per_row(t, row_passes(s, t));
      const int64_t jam = sched_.chain.row_jam;
      if (jam >= 2 && st.n >= sched_.chain.row_jam_from && st.n < sched_.chain.row_jam_below && tile_ >= jam)
        for (auto& x : jam_loop(t, tile_, rows->body, int(jam), ForKind::Serial)) out.push_back(std::move(x));
      else
        out.push_back(std::move(rows));
    }
    return out;
  }

  // The epilogue at (row, j) from the contraction's value: the next stage's row, the staged rows,
  // this stage's group outputs (at their own, maybe remapped, positions).
  // `transposed` (when given): receives the transposing copy that follows the tile's rows when
  // the stage's store goes through the accumulator tile (transposed_store), else null.
  void epilogue(Ctx& cx, size_t s, const Expr& acc_val, const Expr& row_j, const Expr& j, std::vector<Stmt>& body,
                Stmt* transposed = nullptr) {
    Stage& st = stages_[s];
    std::vector<Expr> pd(outer_.begin(), outer_.end());
    pd.push_back(j);
    Index point = Index::from_dims(st.out, pd);
    const Expr point_at = cx.L.flat(point);
    cx.at[st.c->output(0)] = At{point, acc_val};
    std::vector<BufferPtr> bufs;
    std::vector<std::pair<Expr, Expr>> stores;
    auto row_value = [&](const Value* v) {
      At r = forward(cx, s, v);
      if (!same_position(cx.L.flat(r.pos), point_at))
        refuse(cat("'", v->name(), "' is not computed at its row position (no emitter fuses this; its members stay separate kernels)"));
      return r.val;
    };
    if (st.next && !pass_output(st, st.next)) {
      bufs.push_back(st.row_out);
      stores.push_back({row_j, row_value(st.next)});
    }
    if (st.plan)
      for (size_t i = 0; i < st.plan->staged.size(); ++i) {
        bufs.push_back(st.staged_rows[i]);
        stores.push_back({row_j, row_value(st.plan->staged[i])});
      }
    for (const Value* v : grp_.outputs) {
      if (stage_of(v) != int(s) || pass_output(st, v)) continue;
      At r = forward(cx, s, v);
      bufs.push_back(output_buf_.at(v));
      stores.push_back({cx.L.flat(r.pos), r.val});
    }
    if (transposed) *transposed = transposed_store(s, bufs, stores, row_j);
    append_hoisted_stores(body, bufs, std::move(stores), next_let_);
  }

  // A stage whose one store is a group output laid out with the tile's rows along memory (its
  // flat position i · 1 + j · ldd: a head-merge or NCHW Transpose after the last MatMul) stores
  // element by element a scatter of ldd-strided floats, one row of the tile at a time (SegFormer's
  // MLP into NCHW for its depthwise conv: 128 channels 3136 floats apart). Instead the value goes
  // back into the accumulator tile at (t, j), in place — the store is the only one and reads the
  // accumulator at that point alone — and after the tile's rows one transposing copy
  // (kernels::kTransposeF32, 16x16 blocks in registers) writes the tile to the output. Returns
  // that copy, or null (and changes nothing) when the stage does not qualify.
  Stmt transposed_store(size_t s, std::vector<BufferPtr>& bufs, std::vector<std::pair<Expr, Expr>>& stores,
                        const Expr& row_j) {
    const Stage& st = stages_[s];
    if (!st.axpy || !st.acc || st.acc->dtype != DType::Float32 || stores.size() != 1 || m_ < 2 ||
        bufs[0]->dtype != DType::Float32 || bufs[0]->scope != Scope::Global)
      return nullptr;
    const std::string i = cat("i", batch_), J = cat("kiln_c", s);
    AffineScope scope;
    scope.varying = {i, J};
    const auto f = affine_form(stores[0].first, scope);
    if (!f || f->coef_of(i) != 1 || f->coef_of(J) < 2) return nullptr;
    const int64_t ldd = f->coef_of(J);
    const Expr dst = sched::substitute(stores[0].first, {{i, var("kiln_m0")}, {J, int_imm(0)}});
    const Expr rows = m_ % tile_ == 0 ? int_imm(tile_)
                                      : binary(BinOp::Min, int_imm(tile_), sub(int_imm(m_), var("kiln_m0")));
    Stmt copy = call_stmt(kernels::kTransposeF32, {address(bufs[0], dst), int_imm(ldd), address(st.acc, int_imm(0)),
                                                   int_imm(st.n), rows, int_imm(st.n)});
    bufs[0] = st.acc;
    stores[0].first = row_j;
    return copy;
  }

  // The stage's row reductions and what follows them for row t of the tile, reading the staged
  // rows; `next` goes to its tile row. The passes address a staged row within the row and an
  // output by the full tensor's offset: both are placed at the tile's row t.
  std::vector<Stmt> row_passes(size_t s, const std::string& t) {
    Stage& st = stages_[s];
    const ContractionRows& plan = *st.plan;
    const Expr row0 = mul(var(t), int_imm(st.n));
    std::unordered_map<const Value*, BufferTarget> targets;
    for (const Value* v : plan.passes.inputs) {
      auto si = std::find(plan.staged.begin(), plan.staged.end(), v);
      if (si != plan.staged.end()) targets[v] = BufferTarget{st.staged_rows[size_t(si - plan.staged.begin())], row0};
      else if (input_buf_.count(v)) targets[v] = BufferTarget{input_buf_.at(v), nullptr};
      else refuse(cat("the row passes read '", v->name(), "', not a kernel input (no emitter fuses this; its members stay separate kernels)"));
    }
    for (const Value* v : plan.passes.outputs) {
      KILN_CHECK(output_buf_.count(v) || v == st.next, "row pass output '", v->name(), "' has no buffer");
      targets[v] = output_buf_.count(v) ? BufferTarget{output_buf_.at(v), nullptr} : BufferTarget{st.row_out, row0};
    }
    // (contraction_row_passes renames the passes' own loops away from the targets' offsets: a
    // tail loop kiln_t<pass> of pass 1 once captured kiln_t1, stage 1's row loop.)
    std::vector<Stmt> passes = contraction_row_passes(plan, plan.shape, targets, outer_, cat(name_, "_rows", s), sched_);
    std::vector<Stmt> r = {scoped(std::move(passes))};
    if (st.next && pass_output(st, st.next) && output_buf_.count(st.next)) {
      // `next` is a group output too: the passes stored it there (its row from flat offset
      // `base`); the next stage reads it back.
      Expr base = int_imm(0);
      for (size_t d = 0; d < st.out.size(); ++d) base = add(mul(base, int_imm(st.out[d])), d < plan.r0 ? outer_[d] : int_imm(0));
      const std::string j = cat("kiln_c", s);
      r.push_back(for_loop(j, int_imm(st.n),
                           {store(st.row_out, add(row0, var(j)), load(output_buf_.at(st.next), add(base, var(j))))}));
    }
    return r;
  }

  // ---- the kernel

  LoopKernel build() {
    const Shape& o0 = stages_[0].out;
    batch_ = o0.size() - 2;
    m_ = o0[batch_];
    outer_.clear();
    for (size_t d = 0; d <= batch_; ++d) outer_.push_back(o0[d] == 1 ? int_imm(0) : var(cat("i", d)));
    for (size_t s = 0; s < stages_.size(); ++s) choose_form(s);

    // Rows per micro-kernel call: at most the schedule's, a divisor of M when one is at least half
    // of that (no partial tiles). Rows per tile: a multiple of that dividing M (a packed operand
    // and the panels of B serve more rows), while the local buffers fit and there are at least
    // sched_.chain.min_tiles tiles to share among threads; fewer rows while the buffers exceed their budget.
    const int64_t tmax = std::min<int64_t>(std::max(sched_.contraction.mr, 1), m_);
    mr_ = tmax;
    for (int64_t t = tmax; 2 * t >= tmax; --t)
      if (m_ % t == 0) {
        mr_ = t;
        break;
      }
    tile_ = mr_;
    const int64_t rows = shape_numel(Shape(o0.begin(), o0.end() - 1));
    if (m_ % mr_ == 0)
      for (int64_t f = sched_.chain.max_row_blocks; f > 1; --f)
        if (m_ % (mr_ * f) == 0 && local_bytes(mr_ * f) <= sched_.chain.max_local_bytes && rows / (mr_ * f) >= sched_.chain.min_tiles) {
          tile_ = mr_ * f;
          break;
        }
    // No tile of several blocks divides M (ViT's 197 tokens, a prime): tiles of whole blocks and a
    // shorter last one, as few per batch position as max_row_blocks allows, of about equal
    // height. (Tiles of 8 rows there meant 25 tiles per head, each packing the head's K^T and V
    // again: the attention chain took 1.75 ms where its kernels apart take 0.6.)
    if (tile_ == mr_ && m_ > 2 * mr_) {
      const int64_t cap = mr_ * std::max<int64_t>(sched_.chain.max_row_blocks, 1);
      for (int64_t per = (m_ + cap - 1) / cap; per * mr_ < m_; ++per) {
        const int64_t t = ((m_ + per - 1) / per + mr_ - 1) / mr_ * mr_;
        if (local_bytes(t) <= sched_.chain.max_local_bytes && rows / t >= sched_.chain.min_tiles) {
          tile_ = t;
          break;
        }
      }
    }
    while (tile_ > 1 && local_bytes(tile_) > sched_.chain.max_local_bytes) mr_ = tile_ = tile_ - 1;
    // OpenMP workers have small stacks (the emitter would heap-allocate bigger buffers per tile).
    if (local_bytes(tile_) > sched_.chain.max_local_bytes)
      refuse(cat("the rows of a chain of contractions take ", local_bytes(tile_), " bytes, more than the ", sched_.chain.max_local_bytes,
                 " of local rows (no emitter fuses this; its members stay separate kernels)"));
    const int64_t per_batch = (m_ + tile_ - 1) / tile_;
    const int64_t tiles = shape_numel(Shape(o0.begin(), o0.begin() + ptrdiff_t(batch_))) * per_batch;

    // The tile's position: batch indices i<d> and its first row kiln_m0 (Lets); i<batch> per row.
    std::vector<Stmt> body;
    const Expr r = var("kiln_r");
    if (m_ > 1) body.push_back(let("kiln_m0", mul(per_batch > 1 ? mod(r, int_imm(per_batch)) : int_imm(0), int_imm(tile_))));
    {
      const Expr q = div_floor(r, int_imm(per_batch));
      size_t first = batch_;
      for (size_t d = 0; d < batch_ && first == batch_; ++d)
        if (o0[d] != 1) first = d;
      int64_t stride = 1;
      std::vector<Stmt> lets(batch_);
      for (size_t d = batch_; d-- > 0;) {
        if (o0[d] == 1) continue;
        Expr v = div_floor(q, int_imm(stride));
        lets[d] = let(cat("i", d), d == first ? v : mod(v, int_imm(o0[d])));
        stride *= o0[d];
      }
      for (auto& l : lets)
        if (l) body.push_back(l);
    }

    prepack_weights();
    std::vector<BufferPtr> locals;
    auto local = [&](const std::string& name, DType t, int64_t n) {
      locals.push_back(std::make_shared<Buffer>(Buffer{name, t, Shape{n}, Scope::Local}));
      return locals.back();
    };
    a_tile_ = local("kiln_atile", stages_[0].c->input(0)->dtype(), tile_ * stages_[0].k);
    for (size_t s = 0; s < stages_.size(); ++s) {
      Stage& st = stages_[s];
      if (st.pack) st.b_pack = local(cat("kiln_bpack", s), st.c->input(1)->dtype(), st.k * st.n);
      if (st.axpy) st.acc = local(cat("kiln_arow", s), compute_type(st.dtype), tile_ * st.n);
      if (st.next) {
        st.row_out = local(cat("kiln_prow", s), st.next->dtype(), tile_ * st.n);
        stages_[s + 1].row_in = st.row_out;
      }
      if (st.plan)
        for (size_t i = 0; i < st.plan->staged.size(); ++i)
          st.staged_rows.push_back(local(cat("kiln_srow", s, "_", i), st.plan->staged[i]->dtype(), tile_ * st.n));
    }
    std::vector<Stmt> stages;
    for (size_t s = 0; s < stages_.size(); ++s) stages.push_back(scoped(stage_stmts(s)));
    for (size_t i = locals.size(); i-- > 0;) stages = {allocate(locals[i], std::move(stages))};
    for (auto& st : stages) body.push_back(std::move(st));

    double flops = 0;
    for (const Stage& st : stages_) flops += double(shape_numel(st.out)) * double(st.k);
    const bool parallel = tiles > 1 && flops >= double(sched_.parallel_min_work);
    Stmt nest = for_loop("kiln_r", int_imm(tiles), std::move(body), parallel ? ForKind::Parallel : ForKind::Serial);
    // The operands' remapping views leave div/mod of loop indices that the ranges fold away.
    std::map<std::string, int64_t> extents;
    for (size_t d = 0; d <= batch_; ++d)
      if (o0[d] != 1) extents[cat("i", d)] = o0[d];
    k_.body = fold_index_divmod(nest, extents);
    return std::move(k_);
  }

  const FusionGroup& grp_;
  std::string name_;
  Schedule sched_;
  ChainPlan chain_;
  std::vector<Stage> stages_;
  std::unordered_map<const Value*, BufferPtr> input_buf_, output_buf_;
  LoopKernel k_;
  int next_let_ = 0;
  // The tile: rows of the first output's M dim, at batch position outer_[0..batch_).
  size_t batch_ = 0;
  int64_t m_ = 1, tile_ = 1, mr_ = 1;  // rows of M; rows per tile; rows per micro-kernel call
  std::vector<Expr> outer_;  // batch indices, then the row's M index
  BufferPtr a_tile_;         // stage 0's left operand rows
};

LoopKernel lower_contraction_chain(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  // A 1x1 conv into a depthwise conv is a chain over channel blocks, not rows.
  if (is_pointwise_depthwise(grp)) return lower_pointwise_depthwise(grp, kernel_name, sched);
  return RowPipeline(grp, kernel_name, sched).lower();
}

}  // namespace kiln::loop::detail
