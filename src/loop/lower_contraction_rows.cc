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
#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/loop_transforms_internal.h"
#include "loop/register_epilogue.h"
#include "loop/contraction_lowering.h"
#include "loop/lower_internal.h"
#include "loop/rebind_buffers.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

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
    refuse(cat(op, " after a contraction is not fused by any emitter (its members stay separate kernels)"));
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
      if (!on_y) refuse("a reduction in a contraction group that does not read the contraction's output is not fused by any emitter (its members stay separate kernels)");
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
    else if (in != p.shape) refuse("reductions of different shapes after a contraction are not fused by any emitter (their members stay separate kernels)");
    if (!same)
      refuse(cat(n->op_type(), " reduces ", shape_str(n->input(0)->shape()), ", not the contraction's output shape (no emitter fuses this; its members stay separate kernels)"));
    std::vector<bool> r = reduced_axes(*n);
    if (red.empty()) red = r;
    else if (r != red) refuse("reductions of different rows after a contraction are not fused by any emitter (their members stay separate kernels)");
  }
  p.r0 = red.size();
  while (p.r0 > 0 && red[p.r0 - 1]) --p.r0;
  for (size_t i = 0; i < p.r0; ++i)
    if (red[i]) refuse("a reduction after a contraction over non-trailing axes is not fused by any emitter (its members stay separate kernels)");
  p.row = 1;
  if (p.r0 < p.shape.size() - out_shape.size())
    refuse("a reduction over the broadcast leading axes of a contraction's output is not fused by any emitter (its members stay separate kernels)");
  for (size_t i = p.r0; i < p.shape.size(); ++i) p.row *= p.shape[i];
  if (p.row < 2) refuse("a reduction over rows of one element after a contraction is not fused by any emitter (its members stay separate kernels)");

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
          refuse(cat(n->op_type(), " after a reduction in a contraction group is not fused by any emitter (its members stay separate kernels)"));
      }
    }
  // Inputs of the passes: the group's inputs they read, and the staged values.
  std::unordered_set<const Value*> seen;
  for (const Node* n : p.passes.nodes)
    for (const Value* v : n->inputs()) {
      if (!v || produced.count(v) || !seen.insert(v).second) continue;
      if (d_y.count(v)) {
        if (v->shape() != out_shape && v->shape() != p.shape)
          refuse(cat("the epilogue value '", v->name(), "' read by the row passes has shape ", shape_str(v->shape()), " (no emitter fuses this; its members stay separate kernels)"));
        p.staged.push_back(v);
      } else if (std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end()) {
        if (v->is_constant()) continue;  // read as immediates
        refuse(cat("the row passes read '", v->name(), "', neither a group input nor an epilogue value (no emitter fuses this; its members stay separate kernels)"));
      }
      p.passes.inputs.push_back(v);
    }
  for (const Value* o : grp.outputs) {
    if (produced.count(o)) p.passes.outputs.push_back(o);
    else if (d_y.count(o)) p.first_outputs.push_back(o);
    else refuse(cat("group output '", o->name(), "' is neither an epilogue nor a row-pass value (no emitter fuses this; its members stay separate kernels)"));
  }
  if (p.staged.empty()) refuse("row passes that read no epilogue value are not fused by any emitter (their members stay separate kernels)");
  p.passes.name = grp.name + "_rows";
  p.passes.kind = GroupKind::Reduction;
  return p;
}

std::vector<Stmt> contraction_row_passes(const ContractionRows& plan, const Shape& shape,
                                         const std::unordered_map<const Value*, BufferTarget>& targets,
                                         const std::vector<Expr>& outer, const std::string& name,
                                         const Schedule& sched) {
  LoweredGroup lg = lower_reduction_group(plan.passes, name, /*jam_rows=*/false, sched);
  if (!lg.kernel)
    refuse(lg.reason.find("separate kernels") == std::string::npos
               ? cat(lg.reason, " (row reductions after a contraction: no fused nest; its members stay separate kernels)")
               : lg.reason);
  const LoopKernel& rk = *lg.kernel;
  KILN_CHECK(rk.inputs.size() == plan.passes.inputs.size() && rk.outputs.size() == plan.passes.outputs.size(),
             "row kernel buffers do not match its group");
  // The flat offset of the current row: a staged value's full-tensor index minus it is its
  // index within the local row.
  Expr base = int_imm(0);
  for (size_t d = 0; d < shape.size(); ++d)
    base = add(mul(base, int_imm(shape[d])), d < plan.r0 ? outer[d] : int_imm(0));
  BufferMap map;
  std::set<std::string> avoid;
  for (const Expr& e : outer) collect_vars(e, avoid);
  // A local buffer holds rows (a staged row, a chain's next rows): indexed within the row.
  auto target = [&](const Buffer* b, const Value* v) {
    auto it = targets.find(v);
    KILN_CHECK(it != targets.end(), "row pass value '", v->name(), "' has no buffer");
    BufferTarget t = it->second;
    if (t.to->scope == Scope::Local) t.base = base;
    if (t.offset) collect_vars(t.offset, avoid);
    map[b] = t;
  };
  for (size_t i = 0; i < rk.inputs.size(); ++i) target(rk.inputs[i].get(), plan.passes.inputs[i]);
  for (size_t i = 0; i < rk.outputs.size(); ++i) target(rk.outputs[i].get(), plan.passes.outputs[i]);
  // The row kernel's outer loops are `i<d>` over the non-unit dims before the row axes, the same
  // variables the contraction kernel's outer loops use; peel them.
  std::vector<Stmt> body = rk.body->kind == StmtKind::Block ? rk.body->body : std::vector<Stmt>{rk.body};
  for (size_t d = 0; d < plan.r0; ++d) {
    if (shape[d] == 1) continue;
    if (body.size() != 1 || body[0]->kind != StmtKind::For || body[0]->var != "i" + std::to_string(d))
      refuse("the row kernel's outer loops are not the contraction's (internal)");
    body = body[0]->body;
  }
  // The row kernel was lowered on its own: its loops (kiln_t<pass> over a row's tail, ...) may be
  // named like the contraction kernel's loops around this point, which `outer` and the targets'
  // offsets read (the chain's row loop kiln_t<stage>). Renamed before the buffers are rebound, so
  // none captures them.
  body = rename_bound_vars(body, avoid);
  BufferRebinder rb(std::move(map));
  for (auto& st : body) st = rb.stmt(st);
  return body;
}

// ---- ContractionLowering: the rows nest (tiled or not) around the passes above

// Row kernels whose rows are the columns of one GEMM per batch: a MatMul's last axis (LayerNorm,
// softmax; A and B read in place, B a plain [K, N] matrix, so all output rows form one GEMM) or
// an ungrouped Conv's spatial axes (a global pool after the conv; per image, W [M, K] times the
// im2col panel [K, P], read in place for a 1x1 conv, else packed once per image). The rows are
// computed a block of mr at a time into kiln_acc; the per-row passes then read it.
bool ContractionLowering::rows_tiled(const ContractionRows& plan, size_t lead) const {
  if (!sched_.tile_contractions || dtype_ != DType::Float32 || out_shape_.back() < 1) return false;
  if (sched_.contraction.mr < 1 || sched_.contraction.nr < 1) return false;
  if (c_->op_type() == "MatMul") {
    if (a_vec_ || b_vec_ || plan.r0 != plan.shape.size() - 1 || lead > plan.r0 || out_shape_.back() < 4) return false;
    // B packed per batch into a local buffer: bounded so that it stays in L2 beside the
    // accumulator (and A's packed rows, which rows_per_block bounds).
    return !rows_batched() || k_extents_[0] * out_shape_.back() * 4 <= sched_.rows_block_bytes;
  }
  return group_ == 1 && plan.r0 == lead + 2 && is_group_input(c_->input(1)) &&
         c_->input(1)->shape()[0] >= sched_.contraction.mr;
}

// A MatMul whose rows are not one GEMM: B has batch dims (attention's K^T per head, Swin's
// windows) or is computed in the kernel. Then every batch position is a GEMM of its own, B packed
// per batch (or read in place when it is a plain input with the output's batch dims).
bool ContractionLowering::rows_batched() const {
  if (c_->op_type() != "MatMul") return false;
  return !(is_group_input(c_->input(1)) && c_->input(1)->shape().size() == 2);
}

// A MatMul's A rows not read in place (computed in the kernel, or broadcast over batch dims):
// packed per block of rows, the prologue evaluated once per element.
bool ContractionLowering::rows_a_packed() const {
  return c_->op_type() == "MatMul" && !(is_group_input(c_->input(0)) && a_batch_ == batch_);
}

// The GEMMs of the tiled rows: an image each for a conv, a batch position each for a batched
// MatMul, else one.
int64_t ContractionLowering::rows_batches() const {
  if (c_->op_type() == "Conv") return c_->input(0)->shape()[0];
  return rows_batched() ? shape_numel(batch_) : 1;
}

// Is `v` computed by arithmetic or a remap in the group (not only a chain of views of an input)?
bool ContractionLowering::computed_by_members(const Value* v) const {
  for (const Node* p = v->producer(); p && std::count(grp_.nodes.begin(), grp_.nodes.end(), p);) {
    if (!is_view(*p)) return true;
    v = p->input(0);
    p = v ? v->producer() : nullptr;
  }
  return false;
}

// A 1x1, stride-1, unpadded conv whose input is a plain buffer: B is the input image itself.
bool ContractionLowering::unit_window() const {
  bool unit = c_->op_type() == "Conv";
  for (size_t d = 0; unit && d < size_t(geo_.rank()); ++d)
    unit = geo_.kernel[d] == 1 && geo_.stride[d] == 1 && geo_.pad_begin[d] == 0 && geo_.out[d] == geo_.in[d];
  return unit;
}

bool ContractionLowering::conv_in_place() const { return is_group_input(c_->input(0)) && unit_window(); }

// Where the tiled rows' conv gets its B panel (the im2col matrix [Cin x kernel positions, P] of
// one image, P the output positions):
//  - InPlace: a unit window (1x1, stride 1, unpadded) of a kernel input: the input image itself.
//  - Staged: a unit window of a computed input (a fused prologue such as a Concat): the input
//    staged once per image straight into the panel's rows (stage_channel_phases with one phase
//    and no border), the prologue evaluated once per element.
//  - Planes: any other 1-D or 2-D conv: each input channel staged once per image into
//    zero-padded phase planes (the implicit GEMM's staging, the prologue evaluated there once per
//    element), then its panel rows packed from them as contiguous runs, one phase-plane row per
//    output row, with no bounds select or clamped index per element. The gather through offset tables
//    (Gathered, im2col_packer) loaded each element through a select and a clamped index: it was
//    60% of the demo's last conv + ReLU + GlobalAveragePool (33 us at 1 thread, 13 us packed from
//    the planes; the same conv alone as the implicit GEMM: 14 us).
//  - Gathered: a 3-D conv of a kernel input (the phase planes are 1-D or 2-D).
//  - Generic: a 3-D conv of a computed input: every element through conv_input.
ContractionLowering::RowsConvB ContractionLowering::rows_conv_b() const {
  const bool input = is_group_input(c_->input(0)), planar = geo_.rank() == 1 || geo_.rank() == 2;
  if (unit_window() && input) return RowsConvB::InPlace;
  if (planar) return unit_window() ? RowsConvB::Staged : RowsConvB::Planes;
  return input ? RowsConvB::Gathered : RowsConvB::Generic;
}

// The row stride of the tiled rows' accumulator (and packed panel): n, or n rounded up to whole
// column tiles when the conv's im2col panel is gathered through the offset tables, which pack
// whole tiles. (Packed from the phase planes, P = 49 padded to 64 was no faster than the
// micro-kernel's partial tile: ResNet-18's last 3x3 conv + GAP 1.40 against 1.37 ms.)
int64_t ContractionLowering::rows_ld(int64_t n) const {
  const int64_t nr = sched_.contraction.nr;
  const bool padded = c_->op_type() == "Conv" && rows_conv_b() == RowsConvB::Gathered;
  return padded ? (n + nr - 1) / nr * nr : n;
}

// Rows per block of the tiled rows: every block reads all of B, so blocks are as large as the
// accumulator budget allows (Schedule::rows_block_bytes) while giving each thread as many blocks;
// a multiple of the micro-kernel's mr.
int64_t ContractionLowering::rows_per_block(int64_t m, int64_t ld) const {
  const int64_t mr = sched_.contraction.mr;
  // Several batches run in parallel over the batches (tiled_row_blocks), one block loop each.
  const int64_t threads = rows_batched() && rows_batches() > 1 ? 1 : std::max(1, sched_.threads);
  // A block's accumulator rows, and its packed A rows when A is packed.
  const int64_t row_bytes = (ld + (rows_a_packed() ? k_extents_[0] : 0)) * 4;
  const int64_t by_budget = (m * row_bytes + sched_.rows_block_bytes - 1) / std::max<int64_t>(sched_.rows_block_bytes, 1);
  // A whole number of blocks per thread: ViT-B/16's 197-row MLP-out + LayerNorm rows as 3 blocks
  // of 72 left one of two threads a third of the work (4 blocks of 56: 112 : 85 rows).
  const int64_t blocks = (std::max<int64_t>({threads, by_budget, 1}) + threads - 1) / threads * threads;
  const int64_t per = (m + blocks - 1) / blocks;
  return std::max<int64_t>(mr, (per + mr - 1) / mr * mr);
}

namespace {

// The loads of `e` whose index mentions one of `vars`.
void varying_loads(const Expr& e, const std::set<std::string>& vars, std::vector<Expr>& out) {
  if (!e) return;
  if (e->kind == ExprKind::Load && sched::mentions(e->args[0], vars)) out.push_back(e);
  for (const Expr& a : e->args) varying_loads(a, vars, out);
}

// `e` with every sub-expression structurally equal to `what` replaced by `with`.
Expr replace_expr(const Expr& e, const Expr& what, const Expr& with) {
  if (!e) return e;
  if (same_expr(e, what)) return with;
  auto copy = std::make_shared<ExprNode>(*e);
  bool changed = false;
  for (auto& a : copy->args) {
    Expr r = replace_expr(a, what, with);
    changed = changed || r != a;
    a = r;
  }
  return changed ? Expr(copy) : e;
}

}  // namespace

// A's packed rows (a[ar · k + ak] = x at row ar, column ak of the block) when x reads its operand
// transposed — a float32 kernel argument at ar · 1 + ak · lds, the one element of that argument x
// reads at the point (a MatMul after a Transpose of an NCHW tensor to tokens: SegFormer's Mix-FFN
// GELU after its depthwise conv) — as one transposing copy (kernels::kTransposeF32, 16x16 blocks
// in registers) and x's other operations applied in place, row by row (other inputs, such as a
// per-channel scale, read as before). Element by element, each row's k loads were a gather of
// lds-strided floats. Empty when x does not have that form.
std::vector<Stmt> ContractionLowering::transposed_a_pack(const Expr& x, const BufferPtr& a, int64_t k) const {
  if (x->type != DType::Float32) return {};
  std::vector<Expr> loads;
  varying_loads(x, {"kiln_tr_ar", "kiln_tr_ak"}, loads);
  AffineScope scope;
  scope.varying = {"kiln_tr_ar", "kiln_tr_ak"};
  Expr src;
  int64_t lds = 0;
  for (const Expr& l : loads) {
    if (l->type != DType::Float32 || l->buffer->scope != Scope::Global) continue;
    const auto f = affine_form(l->args[0], scope);
    if (f && f->coef_of("kiln_tr_ar") == 1 && f->coef_of("kiln_tr_ak") >= 2) {
      src = l;
      lds = f->coef_of("kiln_tr_ak");
      break;
    }
  }
  if (!src) return {};
  for (const Expr& l : loads)
    if (l->buffer == src->buffer && !same_expr(l, src)) return {};  // the copy holds one element per point
  const Expr at = add(mul(var("kiln_tr_ar"), int_imm(k)), var("kiln_tr_ak"));
  const Expr value = replace_expr(x, src, load(a, at));
  const Expr base = sched::substitute(src->args[0], {{"kiln_tr_ar", int_imm(0)}, {"kiln_tr_ak", int_imm(0)}});
  std::vector<Stmt> out = {call_stmt(kernels::kTransposeF32, {address(a, int_imm(0)), int_imm(k), address(src->buffer, base),
                                                              int_imm(lds), int_imm(k), var("kiln_tr_count")})};
  if (value->kind != ExprKind::Load)
    out.push_back(for_loop("kiln_tr_ar", var("kiln_tr_count"),
                           {for_loop("kiln_tr_ak", int_imm(k), {store(a, at, value)}, ForKind::Vectorized)}));
  return out;
}

// The block loops around the per-row statements `per_row` (which read row kiln_tr_row of kiln_acc and
// use the outer loop variables `outer`, decoded here from the row index).
std::vector<Stmt> ContractionLowering::tiled_row_blocks(const LoopVars& outer, const BufferPtr& acc,
                                                        std::vector<Stmt> per_row) {
  const int64_t mr = sched_.contraction.mr, nr = sched_.contraction.nr;
  const bool conv = c_->op_type() == "Conv";
  int64_t rows = 1;
  for (const auto& o : outer) rows *= o.second;
  // Per batch (an image for a conv; everything for a MatMul): m rows of n columns, K deep.
  const int64_t nb = rows_batches(), m = rows / nb, n = shape_numel(out_shape_) / rows;
  int64_t k = k_extents_[0];
  for (size_t i = 1; i < k_extents_.size(); ++i) k *= k_extents_[i];
  const int64_t ld = rows_ld(n), mb = rows_per_block(m, ld);
  const int64_t mblocks = (m + mb - 1) / mb;
  std::vector<Stmt> row_body;
  {
    Expr r = add(add(mul(var("kiln_tr_img"), int_imm(m)), var("kiln_tr_first")), var("kiln_tr_row"));
    int64_t stride = rows;
    for (const auto& [name, extent] : outer) {
      stride /= extent;
      row_body.push_back(let(name, mod(div_floor(r, int_imm(stride)), int_imm(extent))));
    }
    for (auto& st : per_row) row_body.push_back(st);
  }
  // A: the conv's weights or the MatMul's left operand in place, or a MatMul's A rows of the block
  // packed (rows_a_packed).
  const bool a_packed = rows_a_packed(), batched = rows_batched();
  const BufferPtr a = a_packed ? std::make_shared<Buffer>(Buffer{"kiln_apack", DType::Float32, {mb * k}, Scope::Local})
                               : L_.input_buffers_.at(c_->input(conv ? 1 : 0));
  // B: MatMul weights packed once into the micro-kernel's panels (pack_constant_b), else in place
  // (MatMul activations; a 1x1 conv's input image; a batched MatMul's B with the output's batch
  // dims) or packed per batch: a conv's im2col panel (gathered through the offset tables, its
  // rows and the accumulator rows padded to whole column tiles of zeros, rows_ld), or a batched
  // MatMul's B computed in the kernel (attention's K^T) or broadcast.
  // A conv's B (rows_conv_b): in place, or per image staged into the panel, packed from phase
  // planes staged per image, gathered, or packed element by element.
  const RowsConvB how = conv ? rows_conv_b() : RowsConvB::Generic;
  const bool phased = conv && (how == RowsConvB::Planes || how == RowsConvB::Staged);
  const bool pointwise = conv ? how == RowsConvB::InPlace
                              : !batched || (is_group_input(c_->input(1)) && b_batch_ == batch_);
  GemmOperand weights;
  if (!conv && !batched) pack_constant_b(weights, c_->input(1), k, n);
  const bool panels = weights.panel_nr > 0;
  BufferPtr b = panels      ? weights.buffer
                : pointwise ? L_.input_buffers_.at(c_->input(conv ? 0 : 1))
                            : std::make_shared<Buffer>(Buffer{"kiln_bpack", DType::Float32, {k * ld}, Scope::Local});
  // The phase planes of one input channel (Planes), or for Staged the panel itself: a unit
  // window's one phase of n positions per channel.
  PhasePlanes ph;
  if (phased) {
    ph = phase_geometry();
    KILN_CHECK(how == RowsConvB::Planes || ph.plane == n, "a unit window's staged plane is not the panel's row");
    ph.buffer = how == RowsConvB::Staged
                    ? b
                    : std::make_shared<Buffer>(Buffer{"kiln_xph", DType::Float32, {ph.slots * ph.plane}, Scope::Local});
  }
  const Expr b_base = pointwise && (conv || batched) ? mul(var("kiln_tr_img"), int_imm(k * n)) : int_imm(0);
  // A's rows: a batched MatMul's A in place holds every batch's m rows one after the other.
  const Expr a_first = batched && !a_packed ? add(mul(var("kiln_tr_img"), int_imm(m)), var("kiln_tr_first"))
                                            : var("kiln_tr_first");
  // K blocks of kc: the B panel of a block (kc x nr) stays in L1 while the block's row tiles reuse
  // it (one block over K = 3072 streamed 393 KiB of B per row tile: the encoder's FFN2 + LayerNorm
  // ran at 32 GFLOP/s).
  const int64_t kc = std::clamp<int64_t>(sched_.contraction.kc, 1, std::max<int64_t>(k, 1));
  RowTileProduct prod;
  prod.a = a;
  prod.a_at = [&](Expr r, Expr k0) { return add(mul(a_packed ? r : add(a_first, r), int_imm(k)), k0); };
  prod.as_i = k;
  prod.b = b;
  prod.b_at = [&](Expr j0, Expr k0) {
    return panels ? add(mul(j0, int_imm(k)), mul(k0, int_imm(nr))) : add(b_base, add(mul(k0, int_imm(ld)), j0));
  };
  prod.bs_k = panels ? nr : ld;
  prod.wide_nr = panels ? 0 : merged_panel_width(sched_, mr);
  prod.acc = acc;
  prod.ld = prod.n = ld;
  prod.k = k;
  prod.kc = kc;
  prod.mr = mr;
  prod.nr = nr;
  prod.rows = var("kiln_tr_count");
  prod.prefix = "kiln_tr_";
  // A block of many rows against few columns (a 1x1 conv + global pool over 7x7: 640 weight rows
  // of 320, 49 columns): A's block is the stream, read once for both column panels.
  prod.panels_inside = mb > 4 * ld;
  // The product writes every row of the block and column of ld; the row body reads no other.
  prod.zero_first = true;
  std::vector<Stmt> in_acc;
  for (auto& st : row_tile_product(prod)) in_acc.push_back(std::move(st));
  in_acc.push_back(for_loop("kiln_tr_row", var("kiln_tr_count"), std::move(row_body)));
  std::vector<Stmt> blk = {let("kiln_tr_first", mul(var("kiln_tr_blk"), int_imm(mb))),
                           let("kiln_tr_count", binary(BinOp::Min, int_imm(mb), sub(int_imm(m), var("kiln_tr_first"))))};
  if (a_packed) {
    // The block's A rows, each element of the prologue evaluated once: global row g of the
    // [batch..., M] rows is batch position g / M, row g % M.
    const int64_t mm = out_shape_[batch_.size()];
    const Expr g = add(add(mul(var("kiln_tr_img"), int_imm(m)), var("kiln_tr_first")), var("kiln_tr_ar"));
    std::vector<Expr> bo = batch_position(var("kiln_tr_ab"));
    std::vector<Expr> ai = matmul_index(a_batch_, false, var("kiln_tr_ai"), var("kiln_tr_ak"), bo);
    Expr x = to_compute(L_.value_at(c_->input(0), Index::from_dims(c_->input(0)->shape(), std::move(ai))));
    std::vector<Stmt> copy;
    if (m == mm)  // the block lies within one batch position: row g % M is kiln_tr_first + kiln_tr_ar
      copy = transposed_a_pack(
          sched::substitute(x, {{"kiln_tr_ai", add(var("kiln_tr_first"), var("kiln_tr_ar"))}, {"kiln_tr_ab", var("kiln_tr_img")}}),
          a, k);
    if (!copy.empty())
      for (auto& st : copy) blk.push_back(std::move(st));
    else
      blk.push_back(for_loop("kiln_tr_ar", var("kiln_tr_count"),
                             {let("kiln_tr_ai", mod(g, int_imm(mm))), let("kiln_tr_ab", div_floor(g, int_imm(mm))),
                              for_loop("kiln_tr_ak", int_imm(k),
                                       {store(a, add(mul(var("kiln_tr_ar"), int_imm(k)), var("kiln_tr_ak")), x)})}));
  }
  blk.push_back(allocate(acc, std::move(in_acc)));
  if (a_packed) blk = {allocate(a, std::move(blk))};
  // One image's blocks run in parallel when there is one image; several images run in parallel
  // over the images, each image's loops serial (the emitter forks only at the outermost loop).
  const bool big = rows * n * k >= sched_.parallel_min_work;
  const bool parallel = nb == 1 && mblocks > 1 && big;
  std::vector<Stmt> per_batch;
  if (how == RowsConvB::Staged) {
    // Image kiln_tr_img's channels straight into the panel: channel ci's n positions are row ci.
    const Expr ci = var("kiln_tr_sc");
    per_batch.push_back(for_loop("kiln_tr_sc", int_imm(c_->input(0)->shape()[1]),
                                 stage_channel_phases(ph, b, var("kiln_tr_img"), ci, mul(ci, int_imm(ld))),
                                 parallel ? ForKind::Parallel : ForKind::Serial));
  } else if (how == RowsConvB::Planes) {
    // Per input channel ci of image kiln_tr_img: its phase planes (slot sl at sl * plane), then
    // its panel rows kk = ci * ks + kp (the reference's K order), each read from that channel's
    // planes only — so one channel's planes at a time, hot in L1 while its ks rows are packed.
    // Output row y's wo positions are a contiguous run of phase row y of kernel position kp's
    // phase from its offset (phase_geometry); when a phase row is exactly an output row (or there
    // is one row) the runs join into one.
    const nn::WindowGeometry pg = planar_geometry();
    const int64_t ks = pg.kernel[0] * pg.kernel[1], ho = pg.out[0], wo = pg.out[1], wq = ph.wq;
    const Expr ci = var("kiln_tr_sc"), kp = var("kiln_tr_pq"), src = var("kiln_tr_pb");
    const Expr row = mul(add(mul(ci, int_imm(ks)), kp), int_imm(ld));
    std::vector<Stmt> body = {let("kiln_tr_pb", table_lookup(kp, ph.offset))};
    auto run = [&](const Expr& dst, const Expr& at, int64_t len) {
      return for_loop("kiln_tr_px", int_imm(len),
                      {store(b, add(dst, var("kiln_tr_px")), load(ph.buffer, add(at, var("kiln_tr_px"))))}, ForKind::Vectorized);
    };
    if (wq == wo || ho == 1) {
      body.push_back(run(row, src, n));
    } else {
      const Expr y = var("kiln_tr_py");
      body.push_back(for_loop("kiln_tr_py", int_imm(ho), {run(add(row, mul(y, int_imm(wo))), add(src, mul(y, int_imm(wq))), wo)}));
    }
    std::vector<Stmt> chan = stage_channel_phases(ph, ph.buffer, var("kiln_tr_img"), ci, int_imm(0));
    chan.push_back(for_loop("kiln_tr_pq", int_imm(ks), std::move(body)));
    per_batch.push_back(for_loop("kiln_tr_sc", int_imm(c_->input(0)->shape()[1]), {allocate(ph.buffer, std::move(chan))},
                                 parallel ? ForKind::Parallel : ForKind::Serial));
  } else if (!conv && !pointwise) {
    // Batch kiln_tr_img's B: bpack[kk * ld + j], each element of its prologue evaluated once.
    std::vector<Expr> bi = matmul_index(b_batch_, false, var("kiln_tr_pk"), var("kiln_tr_pp"), batch_position(var("kiln_tr_img")));
    Expr x = to_compute(L_.value_at(c_->input(1), Index::from_dims(c_->input(1)->shape(), std::move(bi))));
    per_batch.push_back(for_loop(
        "kiln_tr_pk", int_imm(k),
        {for_loop("kiln_tr_pp", int_imm(n), {store(b, add(mul(var("kiln_tr_pk"), int_imm(ld)), var("kiln_tr_pp")), x)})}));
  } else if (!pointwise && is_group_input(c_->input(0))) {
    // The im2col panel of image kiln_tr_img, nr columns at a time through the offset tables.
    GemmOperand::Packer pk = im2col_packer(n, m, k_extents_[0], L_.input_buffers_.at(c_->input(0)));
    const std::vector<Expr> bt = {var("kiln_tr_img"), int_imm(0)};
    const Expr j0 = mul(var("kiln_tr_pj"), int_imm(nr));
    std::vector<Stmt> chunk = {let("kiln_tr_pnc", binary(BinOp::Min, int_imm(nr), sub(int_imm(n), j0)))};
    for (auto& st : pk.setup(bt, j0, var("kiln_tr_pnc"))) chunk.push_back(st);
    for (auto& st : pk.pack(bt, int_imm(0), int_imm(k), b, ld, j0, int_imm(nr))) chunk.push_back(st);
    for (size_t i = pk.locals.size(); i-- > 0;) chunk = {allocate(pk.locals[i], std::move(chunk))};
    per_batch.push_back(for_loop("kiln_tr_pj", int_imm(ld / nr), std::move(chunk),
                                 parallel ? ForKind::Parallel : ForKind::Serial));
  } else if (!pointwise) {
    // The im2col panel of image kiln_tr_img: bpack[kk * n + p] for every (input channel, kernel
    // position) kk and output position p.
    std::vector<int64_t> k_ext(k_extents_.begin(), k_extents_.end());
    std::vector<Expr> kd(k_ext.size()), od(geo_.out.size());
    Expr kf = var("kiln_tr_pk"), pf = var("kiln_tr_pp");
    for (size_t i = k_ext.size(); i-- > 0;) {
      kd[i] = i == 0 ? kf : mod(kf, int_imm(k_ext[i]));
      kf = div_floor(kf, int_imm(k_ext[i]));
    }
    for (size_t i = geo_.out.size(); i-- > 0;) {
      od[i] = i == 0 ? pf : mod(pf, int_imm(geo_.out[i]));
      pf = div_floor(pf, int_imm(geo_.out[i]));
    }
    Expr x = conv_input(var("kiln_tr_img"), kd[0], od, std::vector<Expr>(kd.begin() + 1, kd.end()));
    per_batch.push_back(for_loop(
        "kiln_tr_pk", int_imm(k),
        {for_loop("kiln_tr_pp", int_imm(n), {store(b, add(mul(var("kiln_tr_pk"), int_imm(n)), var("kiln_tr_pp")), x)})},
        parallel ? ForKind::Parallel : ForKind::Serial));
  }
  per_batch.push_back(
      for_loop("kiln_tr_blk", int_imm(mblocks), std::move(blk), parallel ? ForKind::Parallel : ForKind::Serial));
  if (!pointwise) per_batch = {allocate(b, std::move(per_batch))};
  Stmt body = nb == 1 ? block(std::move(per_batch))
                      : for_loop("kiln_tr_img", int_imm(nb), std::move(per_batch), big ? ForKind::Parallel : ForKind::Serial);
  if (nb == 1) body = block({let("kiln_tr_img", int_imm(0)), body});
  return {comment(cat("tiled rows: ", nb, " x [", m, " x ", k, "] * [", k, " x ", n, "], ", mb,
                      " rows per block, micro-kernel ", mr, "x", nr, ", K block ", kc,
                      panels                      ? ", B prepacked"
                      : pointwise                 ? ""
                      : how == RowsConvB::Planes  ? ", B packed per batch from phase planes"
                      : how == RowsConvB::Staged  ? ", B staged per image"
                                                  : ", B packed per batch",
                      a_packed ? ", A packed per block" : "")),
          body};
}

// ---- the element / rows nest: row reductions over trailing axes (the plan and the passes above),
// or, with a plan of no row passes, the untiled nest (every output stored from the element loop)

ContractionRows ContractionLowering::no_rows() const {
  ContractionRows p;
  p.shape = out_shape_;
  p.r0 = out_shape_.size();
  p.first_outputs = grp_.outputs;
  return p;
}

LoopKernel ContractionLowering::build_rows(const ContractionRows& plan) {
  const bool passes = !plan.passes.nodes.empty();
  const int64_t numel = shape_numel(out_shape_);
  const DType acc_t = compute_type(dtype_);
  std::unordered_map<const Value*, BufferTarget> buffers;
  for (size_t i = 0; i < grp_.inputs.size(); ++i) buffers[grp_.inputs[i]] = BufferTarget{k_.inputs[i], nullptr};
  for (size_t i = 0; i < grp_.outputs.size(); ++i) buffers[grp_.outputs[i]] = BufferTarget{k_.outputs[i], nullptr};
  const Shape row_shape(plan.shape.begin() + ptrdiff_t(plan.r0), plan.shape.end());
  // plan.shape is the output with `lead` leading 1s (a residual broadcast it to a higher rank).
  const size_t lead = plan.shape.size() - out_shape_.size();
  std::vector<BufferPtr> rows;
  int64_t bytes = 0;
  for (size_t i = 0; i < plan.staged.size(); ++i) {
    const Value* v = plan.staged[i];
    rows.push_back(std::make_shared<Buffer>(Buffer{"kiln_crow" + std::to_string(i), v->dtype(), row_shape, Scope::Local}));
    buffers[v] = BufferTarget{rows.back(), nullptr};
    bytes += plan.row * int64_t(dtype_size(v->dtype()));
  }
  // OpenMP workers have small stacks (the emitter would heap-allocate; keep it bounded anyway).
  if (bytes > 64 * 1024)
    refuse(cat("a row of ", bytes, " bytes after a contraction exceeds the 64 KiB local row (no emitter fuses this; its members stay separate kernels)"));

  // Outer loops i<d> (the row kernel's names), row loops kiln_c<d>, K loops kiln_k<j> (i<d> after
  // the outer loops' in the untiled nest).
  LoopVars outer_loops, row_loops;
  std::vector<Expr> out;
  Expr row_flat = int_imm(0);
  for (size_t d = 0; d < out_shape_.size(); ++d) {
    const int64_t e = out_shape_[d];
    const bool outer = d + lead < plan.r0;
    std::string v = (outer ? "i" : "kiln_c") + std::to_string(d + lead);
    Expr x = e == 1 ? int_imm(0) : var(v);
    if (e != 1) (outer ? outer_loops : row_loops).push_back({v, e});
    out.push_back(x);
    if (!outer) row_flat = add(mul(row_flat, int_imm(e)), x);
  }
  Index point = Index::from_dims(out_shape_, out);
  const Expr point_flat = L_.flat(point);
  int next_let = 0;
  // Tiled: the products of a block of rows come from the micro-kernel into kiln_acc (see
  // rows_tiled); the untiled nest computes each element's K loop in place.
  const bool tiled_rows = passes && rows_tiled(plan, lead);
  // The untiled nest is a dot product per element, reading B down its columns: fine for the
  // small or oddly shaped contractions it exists for, 30-100x slower than the micro-kernel on a
  // real layer. A group that is untiled only because fusion made an operand computed (a prologue
  // in the loads) is refused, so the partitioner keeps the prologue apart instead of planning a
  // slow kernel (swin_t's LayerNorm tail -> patch-merging MatMul -> LayerNorm: 45 ms untiled).
  // (A remapped B, attention's K^T, is read along K in that nest and stays accepted: the chain
  // it grows into is tiled.)
  if (passes && !tiled_rows && sched_.tile_contractions && dtype_ == DType::Float32 && c_->op_type() == "MatMul" &&
      is_group_input(c_->input(1)) && computed_by_members(c_->input(0))) {
    const int64_t k = c_->input(0)->shape().back();
    if (numel * k >= sched_.small_kernel_work)
      refuse(cat("the row passes after MatMul would need the untiled dot-product nest (", numel * k,
                 " multiply-adds, B read down its columns) because its left operand is computed in the kernel; the "
                 "tiled rows read it in place"));
  }
  // A grouped or depthwise Conv with row passes (squeeze-excitation's global pool after the
  // depthwise conv) has no tiled rows form, and its untiled rows nest ran 2-3x slower than the
  // conv's own direct nest plus a separate pool kernel (EfficientNet-B0's first block: 1.96 ms
  // fused against about 0.8 ms apart, kiln bench --kernels, 2 threads, 2026-12-01).
  // A conv the stencil nest takes (lower_conv_stencil.cc) is refused at every size: the untiled
  // rows nest also recomputes a fused prologue per kernel tap (EfficientNet-B0's SiLU of the
  // expansion inside a 3x3 depthwise conv + SiLU + global pool: 1.55 ms; as the stencil with the
  // prologue staged once, and a separate pool kernel, 0.1 ms).
  // (An ungrouped conv with few output channels takes the stencil too; its row passes are
  // refused below by size only.)
  if (passes && group_ > 1 && stencil_conv())
    refuse(cat("the row passes after a Conv with ", group_,
               " groups would need the untiled rows nest; the stencil nest and a separate row kernel are faster"));
  if (passes && !tiled_rows && sched_.tile_contractions && dtype_ == DType::Float32 && c_->op_type() == "Conv") {
    const int64_t k = shape_numel(c_->input(1)->shape()) / std::max<int64_t>(c_->input(1)->shape()[0], 1);
    if (numel * k >= sched_.small_kernel_work)
      refuse(cat("the row passes after a Conv with ", group_, " groups would need the untiled rows nest (",
                 numel * k, " multiply-adds); its own direct nest and a separate row kernel are faster"));
  }
  // A conv's tiled rows have the output channels as GEMM rows and the positions as columns, in
  // whole vectors: a short row of positions leaves much of the last vector idle (7x7 = 49 of 64
  // lanes). The conv alone takes the implicit GEMM then (positions as rows, no idle lanes) and the
  // pool is a separate small kernel: MobileNetV2's 320 -> 1280 1x1 conv + ReLU6 + global pool over
  // 7x7, fused 0.41 ms, apart 0.34 (kiln bench --compare, 1 thread).
  // (Small convs keep the fused form: a kernel launch costs more than the lanes.)
  if (tiled_rows && c_->op_type() == "Conv") {
    const int64_t vw = std::max(1, sched_.vector_width), cols = (plan.row + vw - 1) / vw * vw;
    const int64_t k = shape_numel(c_->input(1)->shape()) / std::max<int64_t>(c_->input(1)->shape()[0], 1);
    if (numel * k >= sched_.small_kernel_work && plan.row * 100 < cols * sched_.contraction.rows_min_column_percent)
      refuse(cat("the row passes after a Conv over ", plan.row, " positions would use ", plan.row, " of ", cols,
                 " vector lanes per row (the tiled rows' columns); the conv's own implicit GEMM and a separate row "
                 "kernel are faster"));
    // Above a small conv's work the tiled rows lose to the conv's implicit GEMM and a separate
    // row kernel however full their lanes (ContractionTile::conv_rows_max_work).
    if (numel * k > sched_.contraction.conv_rows_max_work)
      refuse(cat("the row passes after a Conv of ", numel * k, " multiply-adds would take the tiled rows (the output "
                 "channels as rows, the input in place); above ", sched_.contraction.conv_rows_max_work,
                 " the conv's own implicit GEMM and a separate row kernel are faster"));
  }
  const int64_t row_len = tiled_rows ? rows_ld(plan.row) : plan.row;
  int64_t acc_rows_n = 1;
  if (tiled_rows) {
    int64_t rows = 1;
    for (size_t d = 0; d < out_shape_.size(); ++d)
      if (d + lead < plan.r0) rows *= out_shape_[d];
    acc_rows_n = rows_per_block(rows / rows_batches(), row_len);
  }
  auto acc_rows = std::make_shared<Buffer>(Buffer{"kiln_acc", DType::Float32, {acc_rows_n * row_len}, Scope::Local});
  const size_t rank = out_shape_.size();
  Stmt kloop = tiled_rows ? comment("products from the micro-kernel")
                          : k_loop_nest(out, acc_t, [passes, rank](size_t j) {
                              return passes ? "kiln_k" + std::to_string(j) : "i" + std::to_string(rank + j);
                            }, next_let);

  // The first loop over the row: the staged values into the local rows, the pre-reduction
  // outputs into memory (the one epilogue builder: epilogue_value, append_hoisted_stores).
  std::vector<BufferPtr> bufs;
  std::vector<std::pair<Expr, Expr>> stores;
  {
    Expr with = result(out, acc_t);
    std::unordered_map<const ExprNode*, Expr> memo;
    std::vector<Expr> lead_out(lead, int_imm(0));
    lead_out.insert(lead_out.end(), out.begin(), out.end());
    Index lead_point = Index::from_dims(plan.shape, lead_out);
    for (size_t i = 0; i < plan.staged.size(); ++i) {
      bufs.push_back(rows[i]);
      stores.push_back({row_flat, epilogue_value(plan.staged[i], plan.staged[i]->shape() == out_shape_ ? point : lead_point,
                                                 point_flat, with, memo)});
    }
    for (const Value* v : plan.first_outputs) {
      if (shape_numel(v->shape()) != numel)
        refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
      Index idx = v->shape() == out_shape_   ? point
                  : v->shape() == plan.shape ? lead_point
                                             : Index::from_flat(v->shape(), point_flat);
      Expr e = epilogue_value(v, idx, point_flat, with, memo);
      const size_t o = size_t(std::find(grp_.outputs.begin(), grp_.outputs.end(), v) - grp_.outputs.begin());
      bufs.push_back(k_.outputs.at(o));
      stores.push_back({L_.flat(idx), e});
    }
  }
  std::vector<Stmt> body = {let(kAcc, tiled_rows ? load(acc_rows, add(mul(var("kiln_tr_row"), int_imm(row_len)), row_flat))
                                                  : imm(0, acc_t)),
                            kloop};
  append_hoisted_stores(body, bufs, std::move(stores), next_let);
  for (size_t i = row_loops.size(); i-- > 0;)
    body = {for_loop(row_loops[i].first, int_imm(row_loops[i].second), std::move(body))};

  // The reductions' passes over the local rows, then everything inside the outer loops.
  std::vector<Expr> outer(lead, int_imm(0));
  outer.insert(outer.end(), out.begin(), out.begin() + ptrdiff_t(plan.r0 - lead));
  if (passes)
    for (auto& s : contraction_row_passes(plan, plan.shape, buffers, outer, name_ + "_rows", sched_)) body.push_back(s);
  for (size_t i = rows.size(); i-- > 0;) body = {allocate(rows[i], std::move(body))};
  if (!tiled_rows) return untiled_kernel(outer_loops, std::move(body));
  k_.body = block(tiled_row_blocks(outer_loops, acc_rows, std::move(body)));
  return std::move(k_);
}

}  // namespace kiln::loop::detail
