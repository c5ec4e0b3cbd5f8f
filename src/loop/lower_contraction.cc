// Lowering of contraction-anchored groups (one MatMul or Conv with its prologue and epilogue) to a
// loop nest. Float32 contractions with enough rows (or B read in place) take the tiled nest through
// the micro-kernel (lower_contraction_gemm.cc, lower_contraction_tiled.h); the others, and every
// type but float32, the untiled nest:
//
//   for output position (batch..., i, j) / (n, m, spatial...)   outermost Parallel when big
//     acc = 0                                                   (float32 for float16/bfloat16)
//     for k / (c, kernel position...)                           ascending, as the reference sums
//       acc = acc + A(.., i, k) * B(.., k, j)                   prologue recomputed in the loads
//     epilogue(acc) -> stores of the group's outputs
//
// The prologue (Transpose, Slice, Pad, a scale, ... feeding an operand) is built with the
// Lowerer's value_at at the operand position the K loop needs. The epilogue is built by the same
// machinery at the output position, with the contraction's output bound to a placeholder register
// buffer whose loads are then replaced by the accumulator (and Conv's bias); a placeholder load at
// any other position (an epilogue op that remaps the output, e.g. a Transpose) refuses the group.
//
// Conv padding: positions in the padding contribute 0 * w, as the reference's im2col (so a
// non-finite weight next to the border gives the same NaN); the input is read at a clamped
// position and the value replaced by 0 with a select, so no load is ever out of bounds.
//
// Row reductions over the trailing axes of the output (LayerNorm, softmax, a global pool after the
// contraction): per outer position, a first loop over the row stores the pre-reduction epilogue
// into a local row, then the row kernel's passes read it (build_rows, lower_contraction_rows.cc).
// The untiled nest above is the same builder with no row passes (no_rows).
// Groups with several contractions go to lower_contraction_siblings.cc / _chain.cc.
//
// Refused (LoweredGroup::reason; the runtime runs the reference kernels): reductions over other
// axes, Gemm (run_lowering turns it into MatMul), ConvTranspose, and anything the reference kernel
// would reject.
#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/affine.h"
#include "loop/contraction_lowering.h"
#include "loop/runtime_params.h"
#include "reference/kernel_util.h"
#include "support/error.h"

namespace kiln::loop::detail {

// The analysis every nest starts from: the contraction, its buffers and its geometry.
void ContractionLowering::prepare() {
  find_contraction();
  bind();
  if (c_->op_type() == "MatMul") matmul_geometry();
  else conv_geometry();
  if (out_shape_ != c_->output(0)->shape())
    refuse(cat(c_->op_type(), " output is ", shape_str(c_->output(0)->shape()), ", expected ", shape_str(out_shape_)));
}

LoopKernel ContractionLowering::lower() {
  prepare();
  // An output padded by zero Pads (a channels-last value with the next conv's padding around it,
  // fusion/assign_layouts.h): the tiled nest stores its interior, row by row of the tile, and
  // loops after the nest zero its border. The other nests would leave the border unwritten.
  if (const std::vector<size_t> padded = padded_outputs(); !padded.empty()) {
    if (has_reductions_ || stencil_conv() || !tiled())
      refuse(cat("'", grp_.outputs[padded[0]]->name(), "' is padded: only the tiled ", c_->op_type(),
                 " nest stores a padded output"));
    std::vector<Stmt> zeros = zero_padding(padded);
    LoopKernel k = build_tiled();
    zeros.insert(zeros.begin(), k.body);
    k.body = block(std::move(zeros));
    return k;
  }
  if (has_reductions_) return build_rows(plan_contraction_rows(grp_, c_, out_shape_));
  if (stencil_conv()) return channel_block_stencil() ? build_channel_block_stencil() : build_stencil();
  if (tiled()) return build_tiled();
  // The untiled nest applies the epilogue per output element after its K loop, unvectorised: an
  // epilogue with a transcendental op (SiLU's sigmoid after a depthwise conv) then costs more than
  // the conv. EfficientNet-B0's depthwise conv + SiLU: 1.5 ms fused against about 0.7 ms as the
  // conv and a vectorised elementwise kernel (kiln bench --kernels, 2 threads, 2026-12-01). Above
  // small_kernel_work such a group is refused, so the partitioner keeps the activation apart.
  if (sched_.tile_contractions) {
    int64_t k = 1;
    for (int64_t e : k_extents_) k *= e;
    const int64_t work = shape_numel(out_shape_) * k;
    if (const Node* n = transcendental_member(); n && work >= sched_.small_kernel_work)
      refuse(cat(n->op_type(), " in the epilogue of the untiled ", c_->op_type(), " nest (", work,
                 " multiply-adds) would run per element, unvectorised; as its own kernel it vectorises"));
  }
  return build_rows(no_rows());
}

LoopKernel ContractionLowering::lower_stencil() {
  prepare();
  if (has_reductions_) refuse(cat(c_->op_type(), " with row reductions in the same kernel has its own nest"));
  if (!stencil_conv()) refuse(cat(c_->op_type(), " ", c_->name(), " does not take the stencil nest (its window, strides or working set)"));
  return channel_block_stencil() ? build_channel_block_stencil() : build_stencil();
}

// A member besides the contraction whose op is a transcendental function (or null).
const Node* ContractionLowering::transcendental_member() const {
  static const std::set<std::string> transcendental = {"Exp", "Log", "Sigmoid", "Tanh", "Erf", "Pow",
                                                        "Softplus", "Elu", "Selu", "Celu", "HardSwish"};
  for (const Node* n : grp_.nodes)
    if (n != c_ && transcendental.count(n->op_type())) return n;
  return nullptr;
}

// The same decisions as lower(), up to the tiled nest's view.
GemmView ContractionLowering::sibling_view() {
  prepare();
  if (!padded_outputs().empty()) refuse("a sibling with a padded output has its own nest");
  if (has_reductions_) refuse("a sibling with row reductions has its own nest");
  if (stencil_conv()) refuse("a sibling conv lowered as a stencil has its own nest");
  if (!tiled()) refuse("a sibling contraction that is not tiled has its own nest");
  return tiled_view();
}

// ---- analysis

void ContractionLowering::find_contraction() {
  std::vector<const Node*> cs;
  for (const Node* n : grp_.nodes) {
    if (is_contraction(n)) cs.push_back(n);
    else if (is_reduction(n)) has_reductions_ = true;
  }
  if (cs.size() != 1)
    refuse(cat("groups of ", cs.size(), " contractions (siblings or chains) are not fused by any emitter (their members stay separate kernels)"));
  c_ = cs[0];
  const std::string& op = c_->op_type();
  if (op == "Gemm") refuse("Gemm has no loop form of its own (run_lowering turns it into MatMul)");
  if (op == "ConvTranspose") refuse("ConvTranspose has no contraction nest (lower_conv_transpose turns it into Conv)");
  if (op != "MatMul" && op != "Conv") refuse(cat(op, " has no contraction nest"));
  if (c_->num_outputs() != 1 || !c_->output(0)) refuse(cat(op, " must have one output"));
  for (const Node* n : grp_.nodes) {
    if (n == c_ || is_reduction(n)) continue;  // row passes check them
    std::string why = unsupported_reason(*n);
    if (!why.empty()) refuse(why);
  }
  for (size_t i = 0; i < c_->num_inputs(); ++i)
    if (c_->input(i) && c_->input(i)->dtype() == DType::Undefined) refuse(cat(op, " has an untyped input"));
}

void ContractionLowering::bind() {
  for (const Node* n : grp_.nodes) L_.members_.insert(n);
  bind_kernel(grp_, name_, k_, {kAcc}, &L_.input_buffers_);
  // The contraction's output as the epilogue sees it: loads of this placeholder become `acc`.
  const Value* y = c_->output(0);
  placeholder_ = std::make_shared<Buffer>(Buffer{"kiln_contraction", y->dtype(), y->shape(), Scope::Register});
  L_.input_buffers_[y] = placeholder_;
}

// ---- geometry (the reference kernels' checks: what they would reject is refused)

MatMulGeometry matmul_geometry(const Node& c) {
  const Value* a = c.num_inputs() > 0 ? c.input(0) : nullptr;
  const Value* b = c.num_inputs() > 1 ? c.input(1) : nullptr;
  if (c.num_inputs() != 2 || !a || !b) refuse("MatMul needs two inputs");
  MatMulGeometry g;
  g.dtype = a->dtype();
  if (b->dtype() != g.dtype || !type_in(g.dtype, kMatMulTypes)) refuse(cat("MatMul does not accept ", dtype_name(g.dtype)));
  Shape as = a->shape(), bs = b->shape();
  if (as.empty() || bs.empty()) refuse("MatMul operands must have rank >= 1");
  g.a_vec = as.size() == 1;
  g.b_vec = bs.size() == 1;
  if (g.a_vec) as.insert(as.begin(), 1);
  if (g.b_vec) bs.push_back(1);
  g.k = as.back();
  g.n = bs.back();
  if (bs[bs.size() - 2] != g.k) refuse("MatMul inner dims differ");
  g.a_batch = Shape(as.begin(), as.end() - 2);
  g.b_batch = Shape(bs.begin(), bs.end() - 2);
  g.batch = broadcast_shapes({g.a_batch, g.b_batch});
  g.out = g.batch;
  if (!g.a_vec) g.out.push_back(as[as.size() - 2]);
  if (!g.b_vec) g.out.push_back(g.n);
  return g;
}

void ContractionLowering::matmul_geometry() {
  const MatMulGeometry g = detail::matmul_geometry(*c_);
  dtype_ = g.dtype;
  a_vec_ = g.a_vec;
  b_vec_ = g.b_vec;
  a_batch_ = g.a_batch;
  b_batch_ = g.b_batch;
  batch_ = g.batch;
  out_shape_ = g.out;
  k_extents_ = {g.k};
}

void ContractionLowering::conv_geometry() {
  const size_t ni = c_->num_inputs();
  if (ni < 2 || ni > 3 || !c_->input(0) || !c_->input(1)) refuse("Conv needs X and W");
  const Value* x = c_->input(0);
  const Value* w = c_->input(1);
  bias_ = ni > 2 ? c_->input(2) : nullptr;
  dtype_ = x->dtype();
  if (!type_in(dtype_, kConvTypes) || w->dtype() != dtype_ || (bias_ && bias_->dtype() != dtype_))
    refuse(cat("Conv does not accept ", dtype_name(dtype_), " (or its operands' types differ)"));
  const Shape& xs = x->shape();
  const Shape& ws = w->shape();
  if (xs.size() < 3 || ws.size() != xs.size()) refuse("Conv X and W must have the same rank >= 3");
  const Shape kernel(ws.begin() + 2, ws.end());
  if (c_->has_attr("kernel_shape") && c_->attr_ints("kernel_shape") != kernel) refuse("Conv kernel_shape does not match W");
  group_ = c_->attr_int("group", 1);
  if (group_ < 1 || ws[1] * group_ != xs[1] || ws[0] % group_ != 0) refuse("Conv group does not match X and W");
  if (bias_ && bias_->shape() != Shape{ws[0]}) refuse("Conv bias must have shape [M]");
  geo_ = nn::window_geometry(*c_, Shape(xs.begin() + 2, xs.end()), kernel, false);
  out_shape_ = {xs[0], ws[0]};
  out_shape_.insert(out_shape_.end(), geo_.out.begin(), geo_.out.end());
  k_extents_ = {ws[1]};
  k_extents_.insert(k_extents_.end(), kernel.begin(), kernel.end());
}

// ---- the product at one (output, K) position

// Operand position of a MatMul operand with batch dims `ob` (before promotion of a vector).
std::vector<Expr> ContractionLowering::matmul_index(const Shape& ob, bool vec, Expr row, Expr col, const std::vector<Expr>& out) {
  std::vector<Expr> d;
  const size_t off = batch_.size() - ob.size();
  for (size_t i = 0; i < ob.size(); ++i) d.push_back(ob[i] == 1 ? int_imm(0) : out[off + i]);
  if (!vec) d.push_back(row);
  d.push_back(col);
  return d;
}

std::vector<Expr> ContractionLowering::batch_position(const Expr& flat) const {
  std::vector<Expr> d(batch_.size());
  int64_t stride = 1;
  for (size_t i = batch_.size(); i-- > 0;) {
    d[i] = batch_[i] == 1 ? int_imm(0) : mod(div_floor(flat, int_imm(stride)), int_imm(batch_[i]));
    stride *= batch_[i];
  }
  return d;
}

Expr ContractionLowering::product(const std::vector<Expr>& out, const std::vector<Expr>& kv) {
  if (c_->op_type() == "MatMul") {
    Expr i = a_vec_ ? int_imm(0) : out[batch_.size()];
    Expr j = b_vec_ ? int_imm(0) : out.back();
    std::vector<Expr> ai = matmul_index(a_batch_, a_vec_, i, kv[0], out);
    std::vector<Expr> bi = b_vec_ ? std::vector<Expr>{kv[0]} : matmul_index(b_batch_, false, kv[0], j, out);
    Expr a = L_.value_at(c_->input(0), Index::from_dims(c_->input(0)->shape(), std::move(ai)));
    Expr b = L_.value_at(c_->input(1), Index::from_dims(c_->input(1)->shape(), std::move(bi)));
    return binary(BinOp::Mul, to_compute(a), to_compute(b));
  }
  // Conv: x[n, g*Cg + c, o*s + k*d - pad] (0 in the padding) times w[m, c, k].
  const Shape& xs = c_->input(0)->shape();
  const int64_t mg = c_->input(1)->shape()[0] / group_;
  Expr cin = kv[0];
  if (group_ > 1) cin = add(mul(div_floor(out[1], int_imm(mg)), int_imm(xs[1] / group_)), kv[0]);
  std::vector<Expr> wi = {out[1], kv[0]};
  for (size_t d = 0; d < size_t(geo_.rank()); ++d) wi.push_back(kv[1 + d]);
  Expr x = conv_input(out[0], cin, std::vector<Expr>(out.begin() + 2, out.end()), std::vector<Expr>(kv.begin() + 1, kv.end()));
  Expr w = to_compute(L_.value_at(c_->input(1), Index::from_dims(c_->input(1)->shape(), std::move(wi))));
  return binary(BinOp::Mul, x, w);
}

// The Conv input at output position `o` (spatial) and kernel position `kp` of input channel
// `cin`, 0 in the padding: the load is clamped in range and its value replaced by 0, which the
// caller still multiplies by the weight (0 * inf is NaN, as in the reference's im2col).
Expr ContractionLowering::conv_input(Expr n, Expr cin, const std::vector<Expr>& o, const std::vector<Expr>& kp) {
  const Shape& xs = c_->input(0)->shape();
  std::vector<Expr> xi = {std::move(n), std::move(cin)};
  Expr inside;
  for (size_t d = 0; d < size_t(geo_.rank()); ++d) {
    Expr pos = sub(add(mul(o[d], int_imm(geo_.stride[d])), mul(kp[d], int_imm(geo_.dilation[d]))),
                   int_imm(geo_.pad_begin[d]));
    // Statically in range for every output and kernel position: no predicate.
    const int64_t lo = -geo_.pad_begin[d];
    const int64_t hi = (geo_.out[d] - 1) * geo_.stride[d] + (geo_.kernel[d] - 1) * geo_.dilation[d] - geo_.pad_begin[d];
    const int64_t n = geo_.in[d];
    if (geo_.out[d] > 0 && geo_.kernel[d] > 0 && (lo < 0 || hi >= n)) {
      Expr ok = binary(BinOp::And, binary(BinOp::Ge, pos, int_imm(0)), binary(BinOp::Lt, pos, int_imm(n)));
      inside = inside ? binary(BinOp::And, inside, ok) : ok;
      pos = clamp(pos, 0, n - 1);
    }
    xi.push_back(pos);
  }
  Expr x = to_compute(L_.value_at(c_->input(0), Index::from_dims(xs, std::move(xi))));
  if (inside) x = select(inside, x, imm(0, x->type));
  return x;
}

// The K loop nest: `acc = acc + A·B` over the reduction extents (size-1 extents fold to index 0),
// shared parts of the operand loads in Lets inside the loop (the untiled nest's innermost loop;
// the tiled nests call the micro-kernel instead).
Stmt ContractionLowering::k_loop_nest(const std::vector<Expr>& out, DType acc_t, const std::function<std::string(size_t)>& name,
                                      int& next_let) {
  struct Loop {
    std::string var;
    int64_t extent;
  };
  std::vector<Loop> k_loops;
  std::vector<Expr> kv;
  for (size_t j = 0; j < k_extents_.size(); ++j) {
    std::string v = name(j);
    if (k_extents_[j] == 1) {
      kv.push_back(int_imm(0));
      continue;
    }
    k_loops.push_back({v, k_extents_[j]});
    kv.push_back(var(v));
  }
  std::vector<Stmt> kbody;
  Expr update = binary(BinOp::Add, var(kAcc, acc_t), product(out, kv));
  SharedExprHoister h(next_let);
  h.count(update);
  if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused operand loads have ", h.dag_size(), " nodes"));
  update = h.rewrite(update, kbody);
  kbody.push_back(assign(kAcc, update));
  Stmt kloop = k_loops.empty() ? block(std::move(kbody)) : nullptr;
  for (size_t i = k_loops.size(); i-- > 0;) {
    kloop = for_loop(k_loops[i].var, int_imm(k_loops[i].extent), std::move(kbody));
    kbody = {kloop};
  }
  return kloop;
}

Expr ContractionLowering::result(const std::vector<Expr>& out, DType acc_t) { return result(var(kAcc, acc_t), bias_ ? out[1] : nullptr); }

// The accumulated value plus Conv's bias at output channel `channel`, in the output type.
Expr ContractionLowering::result(Expr acc, Expr channel) {
  Expr r = std::move(acc);
  if (bias_) r = binary(BinOp::Add, r, to_compute(L_.value_at(bias_, Index::from_dims(bias_->shape(), {channel}))));
  return r->type == dtype_ ? r : cast(dtype_, r);
}

// Where group value v holds the contraction's output element at `point`: carried forward through
// the members between them — an elementwise op keeps the position of its operand from the
// contraction, a Transpose permutes it, a zero Pad shifts it by its leading pads. A value stored
// in another layout than the contraction's (ConvNeXt's depthwise conv transposed to channels-last
// for its LayerNorm; a conv's output channels-last with the next conv's padding around it,
// fusion/assign_layouts.h) is so stored at the element's own position, and its epilogue reads the
// contraction's value where it was computed. A value not on such a path (a Reshape-like view of
// the output) keeps the flat offset.
Index ContractionLowering::output_position(const Value* v, Index& point) {
  if (auto at = path_position(v, point)) return *at;
  return v->shape() == out_shape_ ? point : Index::from_flat(v->shape(), L_.flat(point));
}

std::optional<Index> ContractionLowering::path_position(const Value* u, Index& point) {
  // A point given as a flat offset only (the channel-rows forms: positions as one flat column)
  // has per-dimension indices only as div/mod of it, whose permutation the position check cannot
  // match to the flat offset again: no path through a Transpose there (the group is refused).
  if (u == c_->output(0)) return point;
  const Node* n = u->producer();
  if (!n || std::find(grp_.nodes.begin(), grp_.nodes.end(), n) == grp_.nodes.end()) return std::nullopt;
  if ((n->op_type() == "Transpose" || n->op_type() == "Pad") && n->domain().empty()) {
    if (!point.dims.has_value()) return std::nullopt;
    if (n->op_type() == "Pad" && !zero_pad_begin(*n)) return std::nullopt;
    auto in = path_position(n->input(0), point);
    if (!in) return std::nullopt;
    if (n->op_type() == "Transpose") return transposed_position(L_, *n, *in);
    const std::vector<int64_t> begin = *zero_pad_begin(*n);
    std::vector<Expr> d = L_.dims(*in);
    for (size_t i = 0; i < d.size(); ++i) d[i] = add(d[i], int_imm(begin[i]));
    return Index::from_dims(u->shape(), std::move(d));
  }
  if (is_elementwise(n))
    for (const Value* a : n->inputs())
      if (a && a->shape() == u->shape())
        if (auto in = path_position(a, point)) return in;
  return std::nullopt;
}

// The leading pads of a Pad that only surrounds its input with +0 (constant mode, constant
// non-negative pads over every axis, the default or a +0 value): its output holds the input at
// an offset, zeros elsewhere. nullopt for any other Pad.
std::optional<std::vector<int64_t>> ContractionLowering::zero_pad_begin(const Node& n) {
  if (n.op_type() != "Pad" || n.attr_string("mode", "constant") != "constant" || has_runtime_params(n)) return std::nullopt;
  if (n.num_inputs() > 3 && n.input(3) && shape_numel(n.input(3)->shape()) > 0) return std::nullopt;  // axes
  if (const Value* cv = n.input(2); cv && shape_numel(cv->shape()) > 0) {
    if (!cv->is_constant() || shape_numel(cv->shape()) != 1) return std::nullopt;
    const double f = cv->constant().as_double(0);
    if (f != 0.0 || std::signbit(f)) return std::nullopt;
  }
  const auto pads = constant_ints(n, 1, "pads");
  const size_t rank = n.input(0)->shape().size();
  if (!pads || pads->size() != 2 * rank) return std::nullopt;
  for (int64_t p : *pads)
    if (p < 0) return std::nullopt;
  return std::vector<int64_t>(pads->begin(), pads->begin() + int64_t(rank));
}

// The value whose element a group output holds at its own position: the output itself, or,
// through zero Pads on the contraction's path (path_position of the Pad's output: a point given
// as a flat offset has no path through a Pad, and such an output is refused, epilogue_stores),
// the padded value inside them.
const Value* ContractionLowering::unpadded_source(const Value* v, Index& point) {
  while (const Node* n = v->producer()) {
    if (std::find(grp_.nodes.begin(), grp_.nodes.end(), n) == grp_.nodes.end() || n->op_type() != "Pad" ||
        !zero_pad_begin(*n) || !path_position(v, point))
      break;
    v = n->input(0);
  }
  return v;
}

std::vector<size_t> ContractionLowering::padded_outputs() {
  std::vector<Expr> d;
  for (size_t i = 0; i < out_shape_.size(); ++i) d.push_back(var(cat("kiln_pp", i)));
  Index point = Index::from_dims(out_shape_, d);
  std::vector<size_t> r;
  for (size_t i = 0; i < grp_.outputs.size(); ++i)
    if (unpadded_source(grp_.outputs[i], point) != grp_.outputs[i]) r.push_back(i);
  return r;
}

// Zeros over the elements of `buf` (of shape s, from axis d on, starting at `base`) outside the
// box [begin, begin + inner): per axis, the runs before and after the box are whole blocks of the
// axes inside, one vectorised loop each; the box's rows recurse to the next axis.
namespace {
void zero_outside(const BufferPtr& buf, const Shape& s, const std::vector<int64_t>& begin, const Shape& inner, size_t d,
                  const Expr& base, std::vector<Stmt>& out) {
  bool padded_inside = false;
  for (size_t e = d; e < s.size(); ++e) padded_inside = padded_inside || inner[e] != s[e];
  if (!padded_inside) return;
  int64_t stride = 1;
  for (size_t e = d + 1; e < s.size(); ++e) stride *= s[e];
  const std::string z = cat("kiln_zr", d);
  auto run = [&](int64_t from, int64_t count) {
    if (count <= 0) return;
    out.push_back(for_loop(z, int_imm(count * stride),
                           {store(buf, add(add(base, int_imm(from * stride)), var(z)), imm(0, buf->dtype))},
                           ForKind::Vectorized));
  };
  run(0, begin[d]);
  run(begin[d] + inner[d], s[d] - begin[d] - inner[d]);
  std::vector<Stmt> body;
  const std::string v = cat("kiln_zp", d);
  zero_outside(buf, s, begin, inner, d + 1, add(base, mul(add(var(v), int_imm(begin[d])), int_imm(stride))), body);
  if (!body.empty()) out.push_back(for_loop(v, int_imm(inner[d]), std::move(body)));
}
}  // namespace

std::vector<Stmt> ContractionLowering::zero_padding(const std::vector<size_t>& outputs) {
  std::vector<Stmt> r;
  for (size_t i : outputs) {
    const Value* v = grp_.outputs[i];
    const Node* pad = v->producer();
    if (pad->input(0)->producer() && pad->input(0)->producer()->op_type() == "Pad")
      refuse(cat("'", v->name(), "' is padded twice in a row"));
    zero_outside(k_.outputs[i], v->shape(), *zero_pad_begin(*pad), pad->input(0)->shape(), 0, int_imm(0), r);
  }
  return r;
}

// The stores of the group's outputs at `point` (the contraction's output position) when the
// contraction's value there is `with`. An output padded by zero Pads is stored at its shifted
// position with the value inside the padding (its border is zeroed apart, zero_padding).
std::vector<std::pair<Expr, Expr>> ContractionLowering::epilogue_stores(Index& point, const Expr& with) {
  const Expr point_flat = L_.flat(point);
  std::unordered_map<const ExprNode*, Expr> memo;
  std::vector<std::pair<Expr, Expr>> stores;
  for (const Value* v : grp_.outputs) {
    Index idx = output_position(v, point);
    const Value* src = unpadded_source(v, point);
    if (src == v && v->producer() && v->producer()->op_type() == "Pad" &&
        std::count(grp_.nodes.begin(), grp_.nodes.end(), v->producer()) && !path_position(v, point))
      refuse(cat("'", v->name(), "' is a Pad of the ", c_->op_type(), " output that this nest stores by flat offset"));
    Index at = src == v ? idx : output_position(src, point);
    Expr e = epilogue_value(src, at, point_flat, with, memo);
    stores.push_back({L_.flat(idx), e});
  }
  return stores;
}

Expr ContractionLowering::epilogue_value(const Value* v, const Index& idx, const Expr& point_flat, const Expr& with,
                                         std::unordered_map<const ExprNode*, Expr>& memo) {
  if (v == c_->output(0)) return with;
  const std::string what = cat("the ", c_->op_type(), " output");
  auto lookup = [&](const Buffer* b) -> std::optional<PlaceholderValue> {
    if (b != placeholder_.get()) return std::nullopt;
    return PlaceholderValue{point_flat, with, what};
  };
  return substitute_placeholders(L_.value_at(v, idx), lookup, memo);
}

// ---- the nest

// The untiled nests' outer loops around `body`, the outermost Parallel when the work is big.
LoopKernel ContractionLowering::untiled_kernel(const LoopVars& loops, std::vector<Stmt> body) {
  int64_t k_total = 1;
  for (int64_t e : k_extents_) k_total *= e;
  const int64_t work = shape_numel(out_shape_) * std::max<int64_t>(k_total, 1);
  for (size_t i = loops.size(); i-- > 0;) {
    const bool parallel = i == 0 && loops[0].second > 1 && work >= sched_.parallel_min_work;
    body = {for_loop(loops[i].first, int_imm(loops[i].second), std::move(body), parallel ? ForKind::Parallel : ForKind::Serial)};
  }
  k_.body = body.size() == 1 ? body[0] : block(std::move(body));
  return std::move(k_);
}

LoweredGroup lower_contraction_group(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  return lowered_or_refused([&] { return ContractionLowering(grp, kernel_name, sched).lower(); });
}

}  // namespace kiln::loop::detail
