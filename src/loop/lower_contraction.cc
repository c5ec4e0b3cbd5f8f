// Lowering of contraction-anchored groups (one MatMul or Conv with its prologue and epilogue) to a
// loop nest:
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
//
// Refused for now (LoweredGroup::reason; the runtime runs the reference kernels): several
// contractions in one group (siblings, chains), reductions over other axes, Gemm (run_lowering turns it into MatMul), ConvTranspose, and anything the
// reference kernel would reject.
#include <algorithm>
#include <unordered_set>

#include "fusion/op_kind.h"
#include <functional>

#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"
#include "support/error.h"

namespace kiln::loop::detail {

namespace {

constexpr const char* kAcc = "acc";

const std::initializer_list<DType> kMatMulTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                                   DType::Int32,   DType::Int64,   DType::UInt32,  DType::UInt64};
const std::initializer_list<DType> kConvTypes = {DType::Float32, DType::Float64, DType::Float16};

bool type_in(DType t, std::initializer_list<DType> set) { return std::find(set.begin(), set.end(), t) != set.end(); }

}  // namespace

class ContractionLowering {
 public:
  ContractionLowering(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched), L_(grp, false) {}

  LoopKernel lower() {
    find_contraction();
    bind();
    if (c_->op_type() == "MatMul") matmul_geometry();
    else conv_geometry();
    if (out_shape_ != c_->output(0)->shape())
      refuse(cat(c_->op_type(), " output is ", shape_str(c_->output(0)->shape()), ", expected ", shape_str(out_shape_)));
    if (has_reductions_) return build_rows();
    return tiled() ? build_tiled() : build();
  }

 private:
  // ---- analysis

  void find_contraction() {
    std::vector<const Node*> cs;
    for (const Node* n : grp_.nodes) {
      const auto kind = op_kind_of_type(n->op_type());
      if (kind && *kind == OpKind::Contraction && n->domain().empty()) cs.push_back(n);
      else if (kind && *kind == OpKind::Reduction && n->domain().empty())
        has_reductions_ = true;
    }
    if (cs.size() != 1)
      refuse(cat("groups of ", cs.size(), " contractions (siblings or chains) are not lowered to loops yet"));
    c_ = cs[0];
    const std::string& op = c_->op_type();
    if (op == "Gemm") refuse("Gemm is not lowered to loops yet (run_lowering turns it into MatMul)");
    if (op == "ConvTranspose") refuse("ConvTranspose is not lowered to loops yet");
    if (op != "MatMul" && op != "Conv") refuse(cat(op, " is not lowered to loops yet"));
    if (c_->num_outputs() != 1 || !c_->output(0)) refuse(cat(op, " must have one output"));
    for (const Node* n : grp_.nodes) {
      const auto kind = op_kind_of_type(n->op_type());
      if (n == c_ || (kind && *kind == OpKind::Reduction && n->domain().empty())) continue;  // row passes check them
      std::string why = unsupported_reason(*n);
      if (!why.empty()) refuse(why);
    }
    for (size_t i = 0; i < c_->num_inputs(); ++i)
      if (c_->input(i) && c_->input(i)->dtype() == DType::Undefined) refuse(cat(op, " has an untyped input"));
  }

  void bind() {
    k_.name = name_;
    for (const Node* n : grp_.nodes) {
      L_.members_.insert(n);
      if (!n->name().empty() && std::find(k_.sources.begin(), k_.sources.end(), n->name()) == k_.sources.end())
        k_.sources.push_back(n->name());
    }
    std::set<std::string> used = {kAcc};
    for (const Value* v : grp_.inputs) {
      auto b = std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global});
      L_.input_buffers_[v] = b;
      k_.inputs.push_back(b);
    }
    for (const Value* v : grp_.outputs)
      k_.outputs.push_back(
          std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global}));
    if (grp_.outputs.empty()) refuse("the group writes no outputs");
    // The contraction's output as the epilogue sees it: loads of this placeholder become `acc`.
    const Value* y = c_->output(0);
    placeholder_ = std::make_shared<Buffer>(Buffer{"kiln_contraction", y->dtype(), y->shape(), Scope::Register});
    L_.input_buffers_[y] = placeholder_;
  }

  // ---- geometry (the reference kernels' checks: what they would reject is refused)

  void matmul_geometry() {
    const Value* a = c_->input(0);
    const Value* b = c_->num_inputs() > 1 ? c_->input(1) : nullptr;
    if (c_->num_inputs() != 2 || !a || !b) refuse("MatMul needs two inputs");
    dtype_ = a->dtype();
    if (b->dtype() != dtype_ || !type_in(dtype_, kMatMulTypes)) refuse(cat("MatMul does not accept ", dtype_name(dtype_)));
    Shape as = a->shape(), bs = b->shape();
    if (as.empty() || bs.empty()) refuse("MatMul operands must have rank >= 1");
    a_vec_ = as.size() == 1;
    b_vec_ = bs.size() == 1;
    if (a_vec_) as.insert(as.begin(), 1);
    if (b_vec_) bs.push_back(1);
    const int64_t k = as.back();
    if (bs[bs.size() - 2] != k) refuse("MatMul inner dims differ");
    a_batch_ = Shape(as.begin(), as.end() - 2);
    b_batch_ = Shape(bs.begin(), bs.end() - 2);
    batch_ = broadcast_shapes({a_batch_, b_batch_});
    out_shape_ = batch_;
    if (!a_vec_) out_shape_.push_back(as[as.size() - 2]);
    if (!b_vec_) out_shape_.push_back(bs.back());
    k_extents_ = {k};
  }

  void conv_geometry() {
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
  std::vector<Expr> matmul_index(const Shape& ob, bool vec, Expr row, Expr col, const std::vector<Expr>& out) {
    std::vector<Expr> d;
    const size_t off = batch_.size() - ob.size();
    for (size_t i = 0; i < ob.size(); ++i) d.push_back(ob[i] == 1 ? int_imm(0) : out[off + i]);
    if (!vec) d.push_back(row);
    d.push_back(col);
    return d;
  }

  Expr product(const std::vector<Expr>& out, const std::vector<Expr>& kv) {
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
  Expr conv_input(Expr n, Expr cin, const std::vector<Expr>& o, const std::vector<Expr>& kp) {
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

  // The contraction's output at the loop point, from the accumulator.
  // The K loop nest: `acc = acc + A·B` over the reduction extents (size-1 extents fold to index 0),
  // shared parts of the operand loads in Lets inside the loop. This is the innermost tile: the
  // scheduling issue replaces it with a src/kernels micro-kernel (register tile of accumulators,
  // epilogue applied on the tile) behind the same interface.
  Stmt k_loop_nest(const std::vector<Expr>& out, DType acc_t, const std::function<std::string(size_t)>& name,
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

  Expr result(const std::vector<Expr>& out, DType acc_t) { return result(var(kAcc, acc_t), bias_ ? out[1] : nullptr); }
  // The accumulated value plus Conv's bias at output channel `channel`, in the output type.
  Expr result(Expr acc, Expr channel) {
    Expr r = std::move(acc);
    if (bias_) r = binary(BinOp::Add, r, to_compute(L_.value_at(bias_, Index::from_dims(bias_->shape(), {channel}))));
    return r->type == dtype_ ? r : cast(dtype_, r);
  }

  // The stores of the group's outputs at `point` (the contraction's output position) when the
  // contraction's value there is `with`.
  std::vector<std::pair<Expr, Expr>> epilogue_stores(Index& point, const Expr& with) {
    const Value* y = c_->output(0);
    const Expr point_flat = L_.flat(point);
    const std::string at = print_expr(point_flat);
    std::unordered_map<const ExprNode*, Expr> memo;
    std::vector<std::pair<Expr, Expr>> stores;
    for (const Value* v : grp_.outputs) {
      Index idx = v->shape() == out_shape_ ? point : Index::from_flat(v->shape(), point_flat);
      Expr e = v == y ? with : substitute(L_.value_at(v, idx), at, with, memo);
      stores.push_back({L_.flat(idx), e});
    }
    return stores;
  }

  // e with every placeholder load replaced by `with`; refuses a load at another position.
  Expr substitute(const Expr& e, const std::string& at, const Expr& with, std::unordered_map<const ExprNode*, Expr>& memo) {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    Expr r = e;
    if (e->kind == ExprKind::Load && e->buffer == placeholder_) {
      if (print_expr(e->args[0]) != at)
        refuse(cat("an epilogue op reads the ", c_->op_type(), " output at another position (not lowered to loops yet)"));
      r = with;
    } else if (!e->args.empty()) {
      auto copy = std::make_shared<ExprNode>(*e);
      bool changed = false;
      for (auto& a : copy->args) {
        Expr na = substitute(a, at, with, memo);
        changed = changed || na != a;
        a = na;
      }
      if (changed) r = copy;
    }
    memo[e.get()] = r;
    return r;
  }

  // ---- the nest

  LoopKernel build() {
    const int64_t numel = shape_numel(out_shape_);
    for (const Value* v : grp_.outputs)
      if (shape_numel(v->shape()) != numel)
        refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
    const DType acc_t = compute_type(dtype_);

    struct Loop {
      std::string var;
      int64_t extent;
    };
    std::vector<Loop> out_loops;
    std::vector<Expr> out;
    int next_var = 0;
    for (int64_t e : out_shape_) {
      std::string v = "i" + std::to_string(next_var++);
      if (e == 1) {
        out.push_back(int_imm(0));
        continue;
      }
      out_loops.push_back({v, e});
      out.push_back(var(v));
    }
    Index point = Index::from_dims(out_shape_, out);
    int next_let = 0;
    Stmt kloop = k_loop_nest(out, acc_t, [&](size_t) { return "i" + std::to_string(next_var++); }, next_let);

    // The epilogue at the output position: the group's outputs from acc.
    std::vector<std::pair<Expr, Expr>> stores = epilogue_stores(point, result(out, acc_t));
    std::vector<Stmt> body = {let(kAcc, imm(0, acc_t)),
                              comment("innermost tile: src/kernels micro-kernels with epilogue plug in here"), kloop};
    SharedExprHoister h(next_let);
    for (auto& [index, value] : stores) {
      h.count(value);
      h.count(index);
    }
    if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
    for (auto& [index, value] : stores) {
      value = h.rewrite(value, body);
      index = h.rewrite(index, body);
    }
    append_stores(body, k_.outputs, std::move(stores), next_let);

    int64_t k_total = 1;
    for (int64_t e : k_extents_) k_total *= e;
    for (size_t i = out_loops.size(); i-- > 0;) {
      const bool parallel = i == 0 && out_loops[0].extent > 1 && numel * std::max<int64_t>(k_total, 1) >= sched_.parallel_min_work;
      body = {for_loop(out_loops[i].var, int_imm(out_loops[i].extent), std::move(body),
                       parallel ? ForKind::Parallel : ForKind::Serial)};
    }
    k_.body = body.size() == 1 ? body[0] : block(std::move(body));
    return std::move(k_);
  }

  // ---- the tiled nest (lower_contraction_tiled.h)

  bool is_group_input(const Value* v) const {
    return std::find(grp_.inputs.begin(), grp_.inputs.end(), v) != grp_.inputs.end();
  }

  // Float32 contractions wide enough to fill a vector of columns go through the micro-kernel.
  bool tiled() const {
    if (!sched_.tile_contractions || dtype_ != DType::Float32) return false;
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
    return n >= 4 && (m >= sched_.contraction.mr || b_in_place);
  }

  // A MatMul whose right operand is one matrix (no batch dims): the left operand's batch dims and
  // rows form the rows of one GEMM ([128, 1, 768] x [768, 2304] is one 128-row GEMM, not 128
  // one-row GEMMs).
  bool fold_matmul_batch() const { return b_batch_.empty() && !a_vec_ && !b_vec_ && !batch_.empty(); }

  LoopKernel build_tiled() {
    const int64_t numel = shape_numel(out_shape_);
    for (const Value* v : grp_.outputs)
      if (shape_numel(v->shape()) != numel)
        refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
    GemmView g = c_->op_type() == "MatMul" ? matmul_view() : conv_view();
    read_in_place_when_affine(g.a, g.batch.size(), false);
    if (!g.b.packer) read_in_place_when_affine(g.b, g.batch.size(), true);
    int next_let = 0;
    std::vector<Stmt> body = build_tiled_gemm(g, sched_, next_let);
    k_.body = block(std::move(body));
    return std::move(k_);
  }

  // An operand computed in the group whose value is still a plain load of a kernel input at an
  // index affine in (row, column) — a Reshape or Squeeze of an input — is read in place too
  // instead of packed (the encoder's QKV projection reads its input through a Reshape). B needs
  // contiguous columns.
  void read_in_place_when_affine(GemmOperand& op, size_t batch_rank, bool unit_columns) {
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

  // The epilogue as the tiled nest needs it: the group's stores at `point` from the accumulator.
  std::vector<TileStore> tile_stores(Index point, const Expr& acc, const Expr& channel) {
    std::vector<TileStore> r;
    auto stores = epilogue_stores(point, result(acc, channel));
    for (size_t i = 0; i < stores.size(); ++i) r.push_back({k_.outputs[i], stores[i].first, stores[i].second});
    return r;
  }

  GemmView matmul_view() {
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
  GemmView folded_matmul_view() {
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

  GemmView conv_view() {
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
    if (is_group_input(x)) g.b.packer = im2col_packer(g.n, mg, cg);
    if (is_group_input(w)) {
      g.a.buffer = L_.input_buffers_.at(w);
      const int64_t kk = g.k;
      g.a.base = [mg, kk](const std::vector<Expr>& bt) { return mul(bt[1], int_imm(mg * kk)); };
      g.a.stride_r = g.k;
      g.a.stride_c = 1;
    }
    if (conv_in_place()) {
      g.b.buffer = L_.input_buffers_.at(x);
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

  // Row kernels whose rows are the columns of one GEMM per batch: a MatMul's last axis (LayerNorm,
  // softmax; A and B read in place, B a plain [K, N] matrix, so all output rows form one GEMM) or
  // an ungrouped Conv's spatial axes (a global pool after the conv; per image, W [M, K] times the
  // im2col panel [K, P], read in place for a 1x1 conv, else packed once per image). The rows are
  // computed a block of mr at a time into kiln_acc; the per-row passes then read it.
  bool rows_tiled(const ContractionRows& plan, size_t lead) const {
    if (!sched_.tile_contractions || dtype_ != DType::Float32 || out_shape_.back() < 1) return false;
    if (sched_.contraction.mr < 1 || sched_.contraction.nr < 1) return false;
    if (c_->op_type() == "MatMul") {
      if (a_vec_ || b_vec_ || plan.r0 != plan.shape.size() - 1 || lead > plan.r0) return false;
      const Value* b = c_->input(1);
      return is_group_input(c_->input(0)) && is_group_input(b) && b->shape().size() == 2 && a_batch_ == batch_ &&
             out_shape_.back() >= 4;
    }
    return group_ == 1 && plan.r0 == lead + 2 && is_group_input(c_->input(1)) &&
           c_->input(1)->shape()[0] >= sched_.contraction.mr;
  }

  // A 1x1, stride-1, unpadded conv whose input is a plain buffer: B is the input image itself.
  bool conv_in_place() const {
    bool in_place = is_group_input(c_->input(0));
    for (size_t d = 0; d < size_t(geo_.rank()); ++d)
      in_place = in_place && geo_.kernel[d] == 1 && geo_.stride[d] == 1 && geo_.pad_begin[d] == 0 &&
                 geo_.out[d] == geo_.in[d];
    return in_place;
  }

  // The row stride of the tiled rows' accumulator (and packed panel): n, or n rounded up to whole
  // column tiles when the conv's im2col panel is packed through the offset tables.
  int64_t rows_ld(int64_t n) const {
    const int64_t nr = sched_.contraction.nr;
    const bool padded = c_->op_type() == "Conv" && !conv_in_place() && is_group_input(c_->input(0));
    return padded ? (n + nr - 1) / nr * nr : n;
  }

  // Rows per block of the tiled rows: every block reads all of B, so blocks are as large as the
  // accumulator budget allows (Schedule::rows_block_bytes) while leaving one block per thread;
  // a multiple of the micro-kernel's mr.
  int64_t rows_per_block(int64_t m, int64_t ld) const {
    const int64_t mr = sched_.contraction.mr;
    const int64_t threads = std::max(1, sched_.threads);
    const int64_t by_budget = (m * ld * 4 + sched_.rows_block_bytes - 1) / std::max<int64_t>(sched_.rows_block_bytes, 1);
    const int64_t blocks = std::max<int64_t>({threads, by_budget, 1});
    const int64_t per = (m + blocks - 1) / blocks;
    return std::max<int64_t>(mr, (per + mr - 1) / mr * mr);
  }

  // The block loops around the per-row statements `per_row` (which read row kiln_tr_row of kiln_acc and
  // use the outer loop variables `outer`, decoded here from the row index).
  std::vector<Stmt> tiled_row_blocks(const std::vector<std::pair<std::string, int64_t>>& outer, const BufferPtr& acc,
                                     std::vector<Stmt> per_row) {
    const int64_t mr = sched_.contraction.mr, nr = sched_.contraction.nr;
    const bool conv = c_->op_type() == "Conv";
    int64_t rows = 1;
    for (const auto& o : outer) rows *= o.second;
    // Per batch (an image for a conv; everything for a MatMul): m rows of n columns, K deep.
    const int64_t nb = conv ? c_->input(0)->shape()[0] : 1, m = rows / nb, n = shape_numel(out_shape_) / rows;
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
    const BufferPtr a = L_.input_buffers_.at(c_->input(conv ? 1 : 0));
    // B: in place (MatMul weights; a 1x1 conv's input image) or the packed im2col panel, whose rows
    // (and the accumulator rows) are padded to whole column tiles of zeros so that every
    // micro-kernel call is a full tile.
    const bool pointwise = !conv || conv_in_place();
    BufferPtr b = pointwise ? L_.input_buffers_.at(c_->input(conv ? 0 : 1))
                            : std::make_shared<Buffer>(Buffer{"kiln_bpack", DType::Float32, {k * ld}, Scope::Local});
    const Expr b_base = pointwise && conv ? mul(var("kiln_tr_img"), int_imm(k * n)) : int_imm(0);
    // The micro-kernel on rows [r, r + rows_e) of the block and columns [j0, j0 + cols).
    auto mk = [&](Expr rows_e, Expr cols, Expr j0, Expr r) {
      return call_stmt(kernels::kMicroKernelF32,
                       {std::move(rows_e), std::move(cols), int_imm(k),
                        address(a, mul(add(var("kiln_tr_first"), r), int_imm(k))), int_imm(k), int_imm(1),
                        address(b, add(b_base, j0)), int_imm(ld), address(acc, add(mul(r, int_imm(ld)), j0)), int_imm(ld)});
    };
    std::vector<Stmt> in_acc;
    in_acc.push_back(for_loop("kiln_tr_z", int_imm(mb * ld), {store(acc, var("kiln_tr_z"), float_imm(0))}, ForKind::Vectorized));
    // Column panels outside, row tiles inside: one panel of B (k x nr) serves the whole block
    // from cache.
    const Expr j0 = mul(var("kiln_tr_jt"), int_imm(nr)), r0 = mul(var("kiln_tr_rt"), int_imm(mr));
    const Expr full = div_floor(var("kiln_tr_count"), int_imm(mr)), rest = mul(full, int_imm(mr));
    auto panel = [&](Expr cols, Expr jj) {
      return std::vector<Stmt>{
          for_loop("kiln_tr_rt", full, {mk(int_imm(mr), cols, jj, r0)}),
          if_then(binary(BinOp::Lt, rest, var("kiln_tr_count")), {mk(sub(var("kiln_tr_count"), rest), cols, jj, rest)})};
    };
    in_acc.push_back(for_loop("kiln_tr_jt", int_imm(ld / nr), panel(int_imm(nr), j0)));
    if (ld % nr)
      for (auto& st : panel(int_imm(ld % nr), int_imm(ld / nr * nr))) in_acc.push_back(st);
    in_acc.push_back(for_loop("kiln_tr_row", var("kiln_tr_count"), std::move(row_body)));
    std::vector<Stmt> blk = {let("kiln_tr_first", mul(var("kiln_tr_blk"), int_imm(mb))),
                             let("kiln_tr_count", binary(BinOp::Min, int_imm(mb), sub(int_imm(m), var("kiln_tr_first")))),
                             allocate(acc, std::move(in_acc))};
    // One image's blocks run in parallel when there is one image; several images run in parallel
    // over the images, each image's loops serial (the emitter forks only at the outermost loop).
    const bool big = rows * n * k >= sched_.parallel_min_work;
    const bool parallel = nb == 1 && mblocks > 1 && big;
    std::vector<Stmt> per_batch;
    if (!pointwise && is_group_input(c_->input(0))) {
      // The im2col panel of image kiln_tr_img, nr columns at a time through the offset tables.
      GemmOperand::Packer pk = im2col_packer(n, m, k_extents_[0]);
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
                        " rows per block, micro-kernel ", mr, "x", nr, pointwise ? "" : ", B packed per batch")),
            body};
  }

  // The im2col panel of a conv whose input is a plain buffer, without per-element div/mod: per
  // tile, each column's input window origin (pos<d> = o_d * stride - pad) and its flat offset go
  // into small tables; per K row (channel, kernel position) the panel row is then
  // valid ? x[base + off[jj]] : 0, a vectorisable gather. (The generic `value` path unravels the
  // column and the K index per element, which cost five times the micro-kernel's time on
  // ResNet-18's 3x3 convs.)
  GemmOperand::Packer im2col_packer(int64_t ncols, int64_t mg, int64_t cg) {
    const Value* x = c_->input(0);
    const Shape& xs = x->shape();
    const BufferPtr xb = L_.input_buffers_.at(x);
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

  // ---- row reductions over trailing axes (lower_contraction_rows.cc has the plan and the passes)

  LoopKernel build_rows() {
    ContractionRows plan = plan_contraction_rows(grp_, c_, out_shape_);
    const Value* y = c_->output(0);
    const int64_t numel = shape_numel(out_shape_);
    const DType acc_t = compute_type(dtype_);
    std::unordered_map<const Value*, BufferPtr> buffers;
    for (size_t i = 0; i < grp_.inputs.size(); ++i) buffers[grp_.inputs[i]] = k_.inputs[i];
    for (size_t i = 0; i < grp_.outputs.size(); ++i) buffers[grp_.outputs[i]] = k_.outputs[i];
    const Shape row_shape(plan.shape.begin() + ptrdiff_t(plan.r0), plan.shape.end());
    // plan.shape is the output with `lead` leading 1s (a residual broadcast it to a higher rank).
    const size_t lead = plan.shape.size() - out_shape_.size();
    std::vector<BufferPtr> rows;
    int64_t bytes = 0;
    for (size_t i = 0; i < plan.staged.size(); ++i) {
      const Value* v = plan.staged[i];
      rows.push_back(std::make_shared<Buffer>(Buffer{"kiln_crow" + std::to_string(i), v->dtype(), row_shape, Scope::Local}));
      buffers[v] = rows.back();
      bytes += plan.row * int64_t(dtype_size(v->dtype()));
    }
    // OpenMP workers have small stacks (the emitter would heap-allocate; keep it bounded anyway).
    if (bytes > 64 * 1024)
      refuse(cat("a row of ", bytes, " bytes after a contraction exceeds the 64 KiB local row (not lowered to loops yet)"));

    // Outer loops i<d> (the row kernel's names), row loops kiln_c<d>, K loops kiln_k<j>.
    struct Loop {
      std::string var;
      int64_t extent;
    };
    std::vector<Loop> outer_loops, row_loops;
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
    const bool tiled_rows = rows_tiled(plan, lead);
    const int64_t row_len = tiled_rows ? rows_ld(plan.row) : plan.row;
    int64_t acc_rows_n = 1;
    if (tiled_rows) {
      int64_t rows = 1;
      for (size_t d = 0; d < out_shape_.size(); ++d)
        if (d + lead < plan.r0) rows *= out_shape_[d];
      const int64_t nb = c_->op_type() == "Conv" ? c_->input(0)->shape()[0] : 1;
      acc_rows_n = rows_per_block(rows / nb, row_len);
    }
    auto acc_rows = std::make_shared<Buffer>(Buffer{"kiln_acc", DType::Float32, {acc_rows_n * row_len}, Scope::Local});
    Stmt kloop = tiled_rows ? comment("products from the micro-kernel")
                            : k_loop_nest(out, acc_t, [](size_t j) { return "kiln_k" + std::to_string(j); }, next_let);

    // The first loop over the row: the staged values into the local rows, the pre-reduction
    // outputs into memory.
    struct St {
      BufferPtr buf;
      Expr index, value;
    };
    std::vector<St> stores;
    {
      Expr with = result(out, acc_t);
      const std::string at = print_expr(point_flat);
      std::unordered_map<const ExprNode*, Expr> memo;
      auto value = [&](const Value* v, Index& idx) { return v == y ? with : substitute(L_.value_at(v, idx), at, with, memo); };
      std::vector<Expr> lead_out(lead, int_imm(0));
      lead_out.insert(lead_out.end(), out.begin(), out.end());
      Index lead_point = Index::from_dims(plan.shape, lead_out);
      for (size_t i = 0; i < plan.staged.size(); ++i)
        stores.push_back({rows[i], row_flat, value(plan.staged[i], plan.staged[i]->shape() == out_shape_ ? point : lead_point)});
      for (const Value* v : plan.first_outputs) {
        if (shape_numel(v->shape()) != numel)
          refuse(cat("group output '", v->name(), "' has another size than the ", c_->op_type(), " output"));
        Index idx = v->shape() == out_shape_   ? point
                    : v->shape() == plan.shape ? lead_point
                                               : Index::from_flat(v->shape(), point_flat);
        Expr e = value(v, idx);
        const size_t o = size_t(std::find(grp_.outputs.begin(), grp_.outputs.end(), v) - grp_.outputs.begin());
        stores.push_back({k_.outputs.at(o), L_.flat(idx), e});
      }
    }
    std::vector<Stmt> body = {let(kAcc, tiled_rows ? load(acc_rows, add(mul(var("kiln_tr_row"), int_imm(row_len)), row_flat))
                                                    : imm(0, acc_t)),
                              kloop};
    SharedExprHoister h(next_let);
    for (auto& s : stores) {
      h.count(s.value);
      h.count(s.index);
    }
    if (h.dag_size() > kMaxExprNodes) refuse(cat("the fused epilogue has ", h.dag_size(), " nodes"));
    for (auto& s : stores) {
      s.value = h.rewrite(s.value, body);
      s.index = h.rewrite(s.index, body);
    }
    if (stores.size() > 1)
      for (auto& s : stores)
        if (s.value->kind != ExprKind::Var && s.value->kind != ExprKind::IntImm && s.value->kind != ExprKind::FloatImm) {
          std::string name = "t" + std::to_string(next_let++);
          body.push_back(let(name, s.value));
          s.value = var(name, s.value->type);
        }
    for (auto& s : stores) body.push_back(store(s.buf, s.index, s.value));
    for (size_t i = row_loops.size(); i-- > 0;)
      body = {for_loop(row_loops[i].var, int_imm(row_loops[i].extent), std::move(body))};

    // The reductions' passes over the local rows, then everything inside the outer loops.
    std::vector<Expr> outer(lead, int_imm(0));
    outer.insert(outer.end(), out.begin(), out.begin() + ptrdiff_t(plan.r0 - lead));
    for (auto& s : contraction_row_passes(plan, plan.shape, buffers, outer, name_ + "_rows", sched_)) body.push_back(s);
    for (size_t i = rows.size(); i-- > 0;) body = {allocate(rows[i], std::move(body))};
    if (tiled_rows) {
      std::vector<std::pair<std::string, int64_t>> outer_vars;
      for (const Loop& l : outer_loops) outer_vars.push_back({l.var, l.extent});
      k_.body = block(tiled_row_blocks(outer_vars, acc_rows, std::move(body)));
      return std::move(k_);
    }
    int64_t k_total = 1;
    for (int64_t e : k_extents_) k_total *= e;
    for (size_t i = outer_loops.size(); i-- > 0;) {
      const bool parallel = i == 0 && outer_loops[0].extent > 1 && numel * std::max<int64_t>(k_total, 1) >= sched_.parallel_min_work;
      body = {for_loop(outer_loops[i].var, int_imm(outer_loops[i].extent), std::move(body),
                       parallel ? ForKind::Parallel : ForKind::Serial)};
    }
    k_.body = body.size() == 1 ? body[0] : block(std::move(body));
    return std::move(k_);
  }

  const FusionGroup& grp_;
  std::string name_;
  Schedule sched_;
  Lowerer L_;
  bool has_reductions_ = false;
  LoopKernel k_;
  const Node* c_ = nullptr;
  BufferPtr placeholder_;
  DType dtype_ = DType::Float32;
  Shape out_shape_;
  std::vector<int64_t> k_extents_;
  // MatMul
  bool a_vec_ = false, b_vec_ = false;
  Shape a_batch_, b_batch_, batch_;
  // Conv
  const Value* bias_ = nullptr;
  int64_t group_ = 1;
  nn::WindowGeometry geo_;
};

LoweredGroup lower_contraction_group(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  LoweredGroup r;
  try {
    ContractionLowering cl(grp, kernel_name, sched);
    r.kernel = cl.lower();
  } catch (const Refusal& e) {
    r.reason = e.reason;
  } catch (const UserError& e) {
    // An invalid attribute or shape the reference kernel would report at run time.
    r.reason = e.what();
  }
  return r;
}

}  // namespace kiln::loop::detail
