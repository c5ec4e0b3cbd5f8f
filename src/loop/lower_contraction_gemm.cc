// The tiled nest of a contraction group (lower_contraction_tiled.h has the nest): the group seen
// as a batch of GEMMs — MatMul directly, with batch dims folded into the rows when B is one matrix;
// Conv per image and group with the im2col panel packed through column offset tables — operands
// read in place when they are plain (or affine) loads of kernel inputs, and the epilogue built by
// the same machinery as the untiled nest.
#include <algorithm>
#include <cmath>

#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/contraction_lowering.h"
#include "support/error.h"

namespace kiln::loop::detail {

// ---- the tiled nest (lower_contraction_tiled.h)

bool ContractionLowering::is_group_input(const Value* v) const {
  return std::find(grp_.inputs.begin(), grp_.inputs.end(), v) != grp_.inputs.end();
}

// Float32 contractions wide enough to fill a vector of columns go through the micro-kernel.
bool ContractionLowering::tiled() const {
  if (!sched_.tile_contractions || dtype_ != DType::Float32) return false;
  // An empty output (a Slice that selects nothing feeding it) has no tiles: the tile arithmetic
  // would divide by a zero row block. The untiled nest runs zero iterations.
  if (shape_numel(out_shape_) == 0) return false;
  // Fewer rows than a micro-kernel tile (a depthwise conv has one per group): packing costs
  // more than it saves, the direct nest with its short K loop per element is faster (10x on
  // MobileNetV2's depthwise convs). With B read in place there is no packing: a matrix-vector
  // product still gains from the micro-kernel's contiguous rows of B (MobileNetV2's classifier
  // 0.8 -> 0.2 ms).
  int64_t n = 1, m = 1;
  if (c_->op_type() == "MatMul") {
    n = b_vec_ ? 1 : c_->input(1)->shape().back();
    m = a_vec_ ? 1 : c_->input(0)->shape()[c_->input(0)->shape().size() - 2];
    if (fold_matmul_batch()) m *= shape_numel(batch_);
  } else {
    for (int64_t e : geo_.out) n *= e;
    m = c_->input(1)->shape()[0] / group_;
  }
  const bool b_in_place = c_->op_type() == "MatMul" ? is_group_input(c_->input(1)) && !b_vec_ : conv_in_place();
  // A conv over fewer positions (a squeeze-excitation's FCs over a 1x1 map: a matrix-vector
  // product) takes the implicit GEMM when it can: its weights are packed once, and each output
  // channel panel is whole vectors of multiply-adds. The direct nest summed each output in one
  // scalar chain (MobileNetV3-Small's 576 -> 144 FC 0.065 ms, 5 GB/s of weights).
  if (n < 4) return c_->op_type() == "Conv" && implicit_conv();
  // Fewer output channels than a tile's rows with a window: the implicit GEMM's one-vector panel
  // (implicit_conv), not the direct nest's scalar sums. (Under strict numerics the direct nest,
  // whose sums are the reference's.)
  return m >= sched_.contraction.mr || b_in_place || (sched_.reorder_sums && few_output_channels() && implicit_conv());
}

// A MatMul whose right operand is one matrix (no batch dims): the left operand's batch dims and
// rows form the rows of one GEMM ([128, 1, 768] x [768, 2304] is one 128-row GEMM, not 128
// one-row GEMMs).
bool ContractionLowering::fold_matmul_batch() const { return b_batch_.empty() && !a_vec_ && !b_vec_ && !batch_.empty(); }

LoopKernel ContractionLowering::build_tiled() {
  GemmView g = tiled_view();
  int next_let = 0;
  std::vector<Stmt> body = build_tiled_gemm(g, sched_, next_let);
  k_.body = block(std::move(body));
  return std::move(k_);
}

GemmView ContractionLowering::tiled_view() {
  const int64_t numel = shape_numel(out_shape_);
  const std::vector<size_t> padded = padded_outputs();
  for (size_t i = 0; i < grp_.outputs.size(); ++i)
    if (const Value* v = grp_.outputs[i];
        shape_numel(v->shape()) != numel && !std::count(padded.begin(), padded.end(), i))
      refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
  GemmView g = c_->op_type() == "MatMul" ? matmul_view() : implicit_conv() ? implicit_conv_view() : conv_view();
  read_in_place_when_affine(g.a, g.batch.size(), false);
  if (!g.b.packer) read_in_place_when_affine(g.b, g.batch.size(), true);
  // A MatMul over the prepacked weights takes K as one block where B's whole-K panel is at most
  // gemm_whole_k_bytes (schedule.h), as implicit convs do: no round trip of the accumulator tile
  // through memory per block (transformer projections with K 384-3072 at one thread, 0.974-0.981
  // of the time; in ViT-S and Swin-T 0.95-0.97). A computed A too, packed per row block over all
  // of K (a LayerNorm's tail before ViT-B's 768 -> 3072 MLP: 8 x 1920 tiles, 0.94). Not for fewer rows than a
  // micro-kernel tile: a classifier's matrix-vector product streams B once either way, and its
  // one K block took the short wide tiles (MobileNetV3-L's two FCs 1.24x and 1.44x slower).
  auto& cr = sched_.contraction;
  if (c_->op_type() == "MatMul" && g.b.panel_nr > 0 && g.k_segment == 0 && g.m >= cr.mr && g.k > cr.kc &&
      g.k * cr.nr * int64_t(sizeof(float)) <= cr.gemm_whole_k_bytes)
    cr.kc = g.k;
  return g;
}

// An operand computed in the group whose value is still a plain load of a kernel input at an
// index affine in (row, column) — a Reshape or Squeeze of an input — is read in place too
// instead of packed (the encoder's QKV projection reads its input through a Reshape). B needs
// contiguous columns.
void ContractionLowering::read_in_place_when_affine(GemmOperand& op, size_t batch_rank, bool unit_columns) {
  if (op.buffer) return;
  std::vector<Expr> bt;
  AffineScope scope;
  for (size_t d = 0; d < batch_rank; ++d) {
    bt.push_back(var("kiln_probe_b" + std::to_string(d)));
    scope.varying.insert("kiln_probe_b" + std::to_string(d));
  }
  scope.varying.insert({"kiln_probe_r", "kiln_probe_c"});
  Expr v;
  try {
    v = op.value(bt, var("kiln_probe_r"), var("kiln_probe_c"));
  } catch (const Refusal&) {
    return;
  }
  if (v->kind != ExprKind::Load || v->type != DType::Float32 || v->buffer->scope != Scope::Global ||
      std::find(k_.inputs.begin(), k_.inputs.end(), v->buffer) == k_.inputs.end())
    return;
  auto form = affine_form(v->args[0], scope);
  if (!form) return;
  const int64_t sr = form->coef_of("kiln_probe_r"), sc = form->coef_of("kiln_probe_c");
  if (sr < 0 || sc < 0 || (unit_columns && sc != 1)) return;
  op.buffer = v->buffer;
  op.stride_r = sr;
  op.stride_c = sc;
  auto value = op.value;
  const BufferPtr buf = v->buffer;
  op.base = [value, buf](const std::vector<Expr>& b) {
    Expr at = value(b, int_imm(0), int_imm(0));
    KILN_CHECK(at->kind == ExprKind::Load && at->buffer == buf, "operand read in place changed form at (0, 0)");
    return at->args[0];
  };
}

// A right operand that is a constant matrix (weights) and is read only by this contraction is
// read in the micro-kernel's panel layout, packed once when the kernel is bound (panel_layout.h):
// one 1024³ GEMM on one thread, 221 -> 250 GFLOP/s over B in place with K blocks (Zen 5).
void ContractionLowering::pack_constant_b(GemmOperand& op, const Value* b, int64_t k, int64_t n) {
  if (!b->is_constant() || b->dtype() != DType::Float32 || b->shape().size() != 2 || k < 1 || n < 1) return;
  if (!only_right_operand(grp_, c_, b)) return;
  op.buffer = pack_constant_weights(b, PanelLayout::row_major(1, k, n, sched_.contraction.nr));
  op.base = [](const std::vector<Expr>&) { return int_imm(0); };
  op.panel_nr = sched_.contraction.nr;
}

// The epilogue as the tiled nest needs it: the group's stores at `point` from the accumulator.
std::vector<TileStore> ContractionLowering::tile_stores(Index point, const Expr& acc, const Expr& channel) {
  std::vector<TileStore> r;
  auto stores = epilogue_stores(point, result(acc, channel));
  for (size_t i = 0; i < stores.size(); ++i) r.push_back({k_.outputs[i], stores[i].first, stores[i].second});
  return r;
}

GemmView ContractionLowering::matmul_view() {
  if (fold_matmul_batch()) return folded_matmul_view();
  const Value* a = c_->input(0);
  const Value* b = c_->input(1);
  GemmView g;
  g.batch = batch_;
  g.m = a_vec_ ? 1 : a->shape()[a->shape().size() - 2];
  g.n = b->shape().back();
  g.k = k_extents_[0];
  auto a_index = [this, a](const std::vector<Expr>& bt, Expr i, Expr k) {
    return Index::from_dims(a->shape(), matmul_index(a_batch_, a_vec_, std::move(i), std::move(k), bt));
  };
  auto b_index = [this, b](const std::vector<Expr>& bt, Expr k, Expr j) {
    return Index::from_dims(b->shape(), matmul_index(b_batch_, false, std::move(k), std::move(j), bt));
  };
  g.a.value = [this, a, a_index](const std::vector<Expr>& bt, Expr i, Expr k) {
    return to_compute(L_.value_at(a, a_index(bt, std::move(i), std::move(k))));
  };
  g.b.value = [this, b, b_index](const std::vector<Expr>& bt, Expr k, Expr j) {
    return to_compute(L_.value_at(b, b_index(bt, std::move(k), std::move(j))));
  };
  if (is_group_input(a)) {
    g.a.buffer = L_.input_buffers_.at(a);
    g.a.base = [this, a_index](const std::vector<Expr>& bt) {
      Index idx = a_index(bt, int_imm(0), int_imm(0));
      return L_.flat(idx);
    };
    g.a.stride_r = a_vec_ ? 0 : g.k;
    g.a.stride_c = 1;
  }
  if (is_group_input(b)) {
    g.b.buffer = L_.input_buffers_.at(b);
    g.b.base = [this, b_index](const std::vector<Expr>& bt) {
      Index idx = b_index(bt, int_imm(0), int_imm(0));
      return L_.flat(idx);
    };
    g.b.stride_r = g.n;
    g.b.stride_c = 1;
    if (b_batch_.empty()) pack_constant_b(g.b, b, g.k, g.n);
  }
  g.epilogue = [this](const std::vector<Expr>& bt, Expr i, Expr j, Expr acc) {
    std::vector<Expr> out = bt;
    if (!a_vec_) out.push_back(i);
    out.push_back(j);
    return tile_stores(Index::from_dims(out_shape_, out), acc, nullptr);
  };
  return g;
}

// fold_matmul_batch(): A is [rows, K] and the output [rows, N] in row-major order.
GemmView ContractionLowering::folded_matmul_view() {
  const Value* a = c_->input(0);
  const Value* b = c_->input(1);
  GemmView g;
  g.k = k_extents_[0];
  g.n = b->shape().back();
  g.m = shape_numel(a->shape()) / g.k;
  const int64_t k = g.k, n = g.n;
  g.a.value = [this, a, k](const std::vector<Expr>&, Expr i, Expr kk) {
    return to_compute(L_.value_at(a, Index::from_flat(a->shape(), add(mul(i, int_imm(k)), kk))));
  };
  g.b.value = [this, b](const std::vector<Expr>&, Expr kk, Expr j) {
    return to_compute(L_.value_at(b, Index::from_dims(b->shape(), {kk, j})));
  };
  if (is_group_input(a)) {
    g.a.buffer = L_.input_buffers_.at(a);
    g.a.base = [](const std::vector<Expr>&) { return int_imm(0); };
    g.a.stride_r = k;
    g.a.stride_c = 1;
  }
  if (is_group_input(b)) {
    g.b.buffer = L_.input_buffers_.at(b);
    g.b.base = [](const std::vector<Expr>&) { return int_imm(0); };
    g.b.stride_r = n;
    g.b.stride_c = 1;
    pack_constant_b(g.b, b, k, n);
  }
  // The output position as dims (row i unravelled over the batch dims and M, column j), so an
  // epilogue broadcast such as the bias indexes by j instead of `flat % N` per element.
  g.epilogue = [this](const std::vector<Expr>&, Expr i, Expr j, Expr acc) {
    const Shape rows_shape(out_shape_.begin(), out_shape_.end() - 1);
    std::vector<Expr> dims(rows_shape.size(), int_imm(0));
    size_t non_unit = 0;
    for (int64_t e : rows_shape) non_unit += e != 1;
    Expr r = i;
    for (size_t d = rows_shape.size(); d-- > 0;) {
      if (rows_shape[d] == 1) continue;
      --non_unit;
      dims[d] = non_unit == 0 ? r : mod(r, int_imm(rows_shape[d]));
      r = div_floor(r, int_imm(rows_shape[d]));
    }
    dims.push_back(j);
    return tile_stores(Index::from_dims(out_shape_, dims), acc, nullptr);
  };
  return g;
}

GemmView ContractionLowering::conv_view() {
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  const int64_t mg = ws[0] / group_, cg = xs[1] / group_;
  int64_t ks = 1, p = 1;
  for (int64_t e : geo_.kernel) ks *= e;
  for (int64_t e : geo_.out) p *= e;
  GemmView g;
  g.batch = {xs[0], group_};
  g.m = mg;
  g.n = p;
  g.k = cg * ks;
  // Unravels a flat offset over `extents` (row-major).
  auto unravel = [](Expr flat, const std::vector<int64_t>& extents) {
    std::vector<Expr> d(extents.size());
    for (size_t i = extents.size(); i-- > 0;) {
      d[i] = extents[i] == 1 ? int_imm(0) : (i == 0 ? flat : mod(flat, int_imm(extents[i])));
      flat = div_floor(flat, int_imm(extents[i]));
    }
    return d;
  };
  std::vector<int64_t> k_ext = {cg};
  k_ext.insert(k_ext.end(), geo_.kernel.begin(), geo_.kernel.end());
  g.a.value = [this, w, ws, mg, unravel, k_ext](const std::vector<Expr>& bt, Expr i, Expr k) {
    std::vector<Expr> wi = {add(mul(bt[1], int_imm(mg)), i)};
    for (auto& e : unravel(k, k_ext)) wi.push_back(e);
    return to_compute(L_.value_at(w, Index::from_dims(ws, std::move(wi))));
  };
  g.b.value = [this, cg, unravel, k_ext](const std::vector<Expr>& bt, Expr k, Expr j) {
    std::vector<Expr> kd = unravel(k, k_ext);
    Expr cin = add(mul(bt[1], int_imm(cg)), kd[0]);
    std::vector<int64_t> out_ext(geo_.out.begin(), geo_.out.end());
    return conv_input(bt[0], cin, unravel(j, out_ext), std::vector<Expr>(kd.begin() + 1, kd.end()));
  };
  // B in place: the input itself, or (a pointwise conv whose input the kernel computes) the input
  // staged once per call into a plain [N][C][positions] buffer with the prologue evaluated there —
  // instead of packing B per tile through its per-element value (EfficientNet-B0's
  // squeeze-excitation scale fused into the projection: 0.55 -> 0.16 ms).
  const auto scaled = channel_scaled_input();
  const bool staged = !scaled && !conv_in_place() && unit_window() && geo_.rank() == 2 && dtype_ == DType::Float32;
  if (is_group_input(x)) {
    g.b.packer = im2col_packer(g.n, mg, cg, L_.input_buffers_.at(x));
  } else if (!staged && !scaled && dtype_ == DType::Float32 && x->dtype() == DType::Float32) {
    // A windowed conv whose input the kernel computes (a Concat of a resize and a skip
    // connection, a normalisation): the prologue evaluated once per call into a buffer of the
    // input's shape, and the panels packed from it like from a kernel input. Packed through the
    // per-element value, the prologue ran once per kernel position and row block, with its
    // index arithmetic per element: U-Net's Concat-into-3x3-Conv ran 8x the Conv's time.
    const BufferPtr xb = stage_input();
    g.staging_locals.push_back(xb);
    g.staging.push_back(stage_input_fill(xb));
    g.b.packer = im2col_packer(g.n, mg, cg, xb);
  }
  if (scaled) {
    // The scale folded into the weights: W'[m][k] = W[m][k] · s[k] (channel_scaled_input), once
    // per call into a local [M × K], and B the scaled input's source X itself. (Batch 1, one group.)
    const BufferPtr wsc = std::make_shared<Buffer>(Buffer{"kiln_wsc", DType::Float32, {mg * cg}, Scope::Local});
    const Expr m = var("kiln_wm"), k = var("kiln_wk");
    const Expr sk = channel_scale_at(scaled->second, k);
    const Expr wmk = load(L_.input_buffers_.at(w), add(mul(m, int_imm(cg)), k));
    g.staging_locals.push_back(wsc);
    // Before the tiles, all threads at it where it is big (a second thread waited on one).
    g.staging.push_back(for_loop(
        "kiln_wm", int_imm(mg),
        {for_loop("kiln_wk", int_imm(cg), {store(wsc, add(mul(m, int_imm(cg)), k), mul(wmk, sk))}, ForKind::Vectorized)},
        mg > 1 && mg * cg >= sched_.parallel_min_work ? ForKind::Parallel : ForKind::Serial));
    g.a.buffer = wsc;
    g.a.base = [](const std::vector<Expr>&) { return int_imm(0); };
    g.a.stride_r = cg;
    g.a.stride_c = 1;
    g.a.value = [wsc, cg](const std::vector<Expr>&, Expr i, Expr kk) { return load(wsc, add(mul(i, int_imm(cg)), kk)); };
  } else if (is_group_input(w)) {
    g.a.buffer = L_.input_buffers_.at(w);
    const int64_t kk = g.k;
    g.a.base = [mg, kk](const std::vector<Expr>& bt) { return mul(bt[1], int_imm(mg * kk)); };
    g.a.stride_r = g.k;
    g.a.stride_c = 1;
  }
  if (scaled) {
    g.b.buffer = L_.input_buffers_.at(scaled->first);
    g.b.base = [](const std::vector<Expr>&) { return int_imm(0); };
    g.b.stride_r = p;
    g.b.stride_c = 1;
  } else if (conv_in_place() || staged) {
    if (staged) {
      const PhasePlanes ph = stage_phase_planes();  // a unit window: one phase, no border
      g.staging_locals.push_back(ph.buffer);
      g.staging.push_back(ph.fill);
      g.b.buffer = ph.buffer;
    } else {
      g.b.buffer = L_.input_buffers_.at(x);
    }
    const int64_t c = xs[1];
    g.b.base = [c, cg, p](const std::vector<Expr>& bt) {
      return mul(add(mul(bt[0], int_imm(c)), mul(bt[1], int_imm(cg))), int_imm(p));
    };
    g.b.stride_r = p;
    g.b.stride_c = 1;
  }
  const int64_t mtot = ws[0];
  g.epilogue = [this, mg, mtot, p](const std::vector<Expr>& bt, Expr i, Expr j, Expr acc) {
    Expr channel = add(mul(bt[1], int_imm(mg)), i);
    Expr flat = add(mul(add(mul(bt[0], int_imm(mtot)), channel), int_imm(p)), j);
    return tile_stores(Index::from_flat(out_shape_, flat), acc, channel);
  };
  return g;
}

// A pointwise conv's input computed as X · s, X a kernel input of the input's shape and s one value
// per input channel (squeeze-excitation's scale before the projection conv): {X, s}, where the
// scale can go into the weights instead (conv_view) — M · K products per call, against staging
// the scaled input, a pass over all P · K of it into a buffer of that size. Only where it is the
// smaller side (M < P), for batch 1 and one group, and not under --strict-fp (the reference
// rounds X · s before the products; reorder_sums is off there).
std::optional<std::pair<const Value*, const Value*>> ContractionLowering::channel_scaled_input() const {
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  const Shape& xs = x->shape();
  int64_t p = 1;
  for (int64_t e : geo_.out) p *= e;
  if (!sched_.reorder_sums || dtype_ != DType::Float32 || !unit_window() || conv_in_place() || is_group_input(x) ||
      xs.size() < 3 || xs[0] != 1 || group_ != 1 || !is_group_input(w) || w->shape()[0] >= p)
    return std::nullopt;
  const Node* m = x->producer();
  if (!m || m->op_type() != "Mul" || m->num_inputs() != 2 ||
      std::find(grp_.nodes.begin(), grp_.nodes.end(), m) == grp_.nodes.end())
    return std::nullopt;
  for (size_t i : {0, 1}) {
    const Value* src = m->input(i);
    const Value* s = m->input(1 - i);
    if (!is_group_input(src) || src->shape() != xs || src->dtype() != DType::Float32 || s->shape().size() > xs.size())
      continue;
    const Shape& ss = s->shape();
    bool per_channel = true;
    for (size_t d = 0; d < ss.size(); ++d)
      if (ss[d] != 1 && xs.size() - ss.size() + d != 1) per_channel = false;
    if (per_channel) return std::make_pair(src, s);
  }
  return std::nullopt;
}

// The scale s of channel_scaled_input at input channel k.
Expr ContractionLowering::channel_scale_at(const Value* s, const Expr& k) {
  std::vector<Expr> at(s->shape().size(), int_imm(0));
  for (size_t d = 0; d < at.size(); ++d)
    if (s->shape()[d] != 1) at[d] = k;  // the channel axis, the only one s varies along
  return to_compute(L_.value_at(s, Index::from_dims(s->shape(), std::move(at))));
}

// Replaces kernel input `w` (a constant) by its packing in `layout` (pack_kernel_input).
BufferPtr ContractionLowering::pack_constant_weights(const Value* w, const PanelLayout& layout) {
  return L_.input_buffers_[w] = pack_kernel_input(k_, L_.input_buffers_.at(w), layout);
}

bool only_right_operand(const FusionGroup& grp, const Node* c, const Value* w) {
  for (const Node* n : grp.nodes)
    for (size_t i = 0; i < n->num_inputs(); ++i)
      if (n->input(i) == w && !(n == c && i == 1)) return false;
  return true;
}

BufferPtr pack_kernel_input(LoopKernel& k, const BufferPtr& input, const PanelLayout& layout) {
  auto it = std::find(k.inputs.begin(), k.inputs.end(), input);
  KILN_CHECK(it != k.inputs.end(), "packed weights are not a kernel input");
  for (const PackedInput& p : k.packed_inputs)
    if (p.input == size_t(it - k.inputs.begin())) {  // packed already (a second nest of the kernel)
      KILN_CHECK(p.layout == layout, "weights packed in two layouts");
      return input;
    }
  auto packed = std::make_shared<Buffer>(Buffer{input->name, DType::Float32, {layout.packed_numel()}, Scope::Global});
  *it = packed;
  k.packed_inputs.push_back({size_t(it - k.inputs.begin()), layout, {}});
  return packed;
}

// The im2col panel of a conv whose input is a plain buffer, without per-element div/mod: per
// tile, each column's input window origin (pos<d> = o_d * stride - pad) and its flat offset go
// into small tables; per K row (channel, kernel position) the panel row is then
// valid ? x[base + off[jj]] : 0, a vectorisable gather. (The generic `value` path unravels the
// column and the K index per element, which cost five times the micro-kernel's time on
// ResNet-18's 3x3 convs.)
GemmOperand::Packer ContractionLowering::im2col_packer(int64_t ncols, int64_t mg, int64_t cg, const BufferPtr& xb) {
  const Value* x = c_->input(0);
  const Shape& xs = x->shape();
  const size_t rank = size_t(geo_.rank());
  const int64_t nr = sched_.contraction.nr;
  std::vector<int64_t> in_stride(rank, 1);
  for (size_t d = rank; d-- > 1;) in_stride[d - 1] = in_stride[d] * geo_.in[d];
  const int64_t plane = rank ? in_stride[0] * geo_.in[0] : 1, x_numel = shape_numel(xs);
  GemmOperand::Packer p;
  for (size_t d = 0; d < rank; ++d)
    p.locals.push_back(std::make_shared<Buffer>(Buffer{"kiln_cpos" + std::to_string(d), DType::Int64, {nr}, Scope::Local}));
  p.locals.push_back(std::make_shared<Buffer>(Buffer{"kiln_coff", DType::Int64, {nr}, Scope::Local}));
  const auto locals = p.locals;
  const auto geo = geo_;
  p.setup = [=](const std::vector<Expr>&, Expr j0, Expr nc) {
    // Column jj's output position (clamped to the last column: columns past nc are never
    // stored, their panel values are set to 0 below).
    const Expr jj = var("kiln_cj");
    Expr col = binary(BinOp::Min, add(j0, jj), int_imm(ncols - 1));
    std::vector<Expr> o(rank);
    for (size_t d = rank; d-- > 0;) {
      o[d] = d == 0 ? col : mod(col, int_imm(geo.out[d]));
      col = div_floor(col, int_imm(geo.out[d]));
    }
    std::vector<Stmt> body;
    Expr off = int_imm(0);
    for (size_t d = 0; d < rank; ++d) {
      Expr pos = sub(mul(o[d], int_imm(geo.stride[d])), int_imm(geo.pad_begin[d]));
      // A column past nc gets a position no kernel offset brings in range: its value is 0.
      if (d == 0) pos = select(binary(BinOp::Lt, jj, nc), pos, int_imm(-(int64_t(1) << 40)));
      body.push_back(store(locals[d], jj, pos));
      off = add(off, mul(load(locals[d], jj), int_imm(in_stride[d])));
    }
    body.push_back(store(locals[rank], jj, off));
    return std::vector<Stmt>{for_loop("kiln_cj", int_imm(nr), std::move(body))};
  };
  std::vector<int64_t> k_ext(k_extents_.begin(), k_extents_.end());
  p.pack = [=](const std::vector<Expr>& bt, Expr k0, Expr kc, const BufferPtr& bpack, int64_t ld, Expr col0,
               Expr width) {
    const Expr kk = var("kiln_ck"), jj = var("kiln_cj");
    Expr kf = add(k0, kk);
    std::vector<Expr> kd(k_ext.size());
    for (size_t i = k_ext.size(); i-- > 0;) {
      kd[i] = i == 0 ? kf : mod(kf, int_imm(k_ext[i]));
      kf = div_floor(kf, int_imm(k_ext[i]));
    }
    // Row kk: input channel kd[0], kernel position kd[1..]; the flat offset of the window origin
    // (0, 0, ..) of channel c, shifted by the kernel position.
    std::vector<Stmt> row;
    Expr base = mul(add(mul(bt[0], int_imm(xs[1])), add(mul(bt[1], int_imm(cg)), kd[0])), int_imm(plane));
    for (size_t d = 0; d < rank; ++d) {
      row.push_back(let("kiln_cd" + std::to_string(d), mul(kd[1 + d], int_imm(geo.dilation[d]))));
      base = add(base, mul(var("kiln_cd" + std::to_string(d)), int_imm(in_stride[d])));
    }
    row.push_back(let("kiln_cbase", base));
    Expr valid;
    for (size_t d = 0; d < rank; ++d) {
      Expr p = add(load(locals[d], jj), var("kiln_cd" + std::to_string(d)));
      Expr ok = binary(BinOp::And, binary(BinOp::Ge, p, int_imm(0)), binary(BinOp::Lt, p, int_imm(geo.in[d])));
      valid = valid ? binary(BinOp::And, valid, ok) : ok;
    }
    Expr idx = clamp(add(var("kiln_cbase"), load(locals[rank], jj)), 0, x_numel - 1);
    Expr val = to_compute(load(xb, idx));
    if (valid) val = select(valid, val, float_imm(0));
    row.push_back(
        for_loop("kiln_cj", width, {store(bpack, add(add(mul(kk, int_imm(ld)), col0), jj), val)}, ForKind::Vectorized));
    return std::vector<Stmt>{for_loop("kiln_ck", kc, std::move(row))};
  };
  (void)mg;
  return p;
}

}  // namespace kiln::loop::detail
