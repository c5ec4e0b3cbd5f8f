#include "transforms/decompose_recurrent.h"

#include "loop/lower_group.h"
#include "reference/kernel_util.h"
#include "reference/ops/recurrent_spec.h"
#include "support/error.h"
#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The ops of one rewrite, with the shape bookkeeping the equations need.
class Unroller {
 public:
  Unroller(NodeRewriter& rw, const RecurrentSpec& s) : rw_(rw), s_(s), dt_(rw.input(0)->dtype()) {}

  void run();

 private:
  // x[b:e] along `axis`.
  Value* slice(Value* x, int64_t axis, int64_t b, int64_t e, const std::string& tag) {
    Shape sh = x->shape();
    sh[size_t(axis)] = e - b;
    if (x->is_constant()) return rw_.constant(tag, slice_constant(x->constant(), axis, b, e));
    return rw_.emit("Slice", {x, rw_.ints(tag + "_b", {b}), rw_.ints(tag + "_e", {e}), rw_.ints(tag + "_ax", {axis})}, {dt_of(x), sh}, tag);
  }
  Value* transpose(Value* x, const std::vector<int64_t>& perm, const std::string& tag, Value* into = nullptr) {
    Shape sh;
    for (int64_t p : perm) sh.push_back(x->shape()[size_t(p)]);
    if (x->is_constant() && !into) return rw_.constant(tag, transpose_constant(x->constant(), perm));
    return rw_.emit("Transpose", {x}, {dt_of(x), sh}, tag, {{"perm", perm}}, into);
  }
  Value* reshape(Value* x, const Shape& sh, const std::string& tag, Value* into = nullptr) {
    if (!into) return rw_.reshape(x, sh, tag);
    return rw_.emit("Reshape", {x, rw_.ints(tag + "_shape", sh)}, {dt_of(x), sh}, tag, {}, into);
  }
  Value* concat(const std::vector<Value*>& xs, int64_t axis, const std::string& tag, Value* into = nullptr) {
    if (xs.size() == 1 && !into) return xs[0];
    Shape sh = xs[0]->shape();
    sh[size_t(axis)] = 0;
    for (Value* x : xs) sh[size_t(axis)] += x->shape()[size_t(axis)];
    return rw_.emit("Concat", xs, {dt_of(xs[0]), sh}, tag, {{"axis", axis}}, into);
  }
  Value* matmul(Value* a, Value* b, const std::string& tag) {
    Shape sh = a->shape();
    sh.back() = b->shape().back();
    return rw_.emit("MatMul", {a, b}, {dt_, sh}, tag);
  }
  Value* add(Value* a, Value* b, const std::string& tag) { return rw_.binary("Add", a, b, tag); }
  Value* mul(Value* a, Value* b, const std::string& tag) { return rw_.binary("Mul", a, b, tag); }
  Value* scalar(const std::string& tag, double v) { return rw_.scalar(tag, v, dt_); }
  Value* activate(const RecurrentActivation& a, Value* x, const std::string& tag);
  Value* clip(Value* x, const std::string& tag) {
    if (!s_.has_clip) return x;
    return rw_.emit("Clip", {x, scalar(tag + "_lo", -s_.clip), scalar(tag + "_hi", s_.clip)}, x->type(), tag);
  }
  static DType dt_of(const Value* v) { return v->dtype(); }
  static std::vector<double> sum(const Tensor& a, const Tensor& b) {
    std::vector<double> x = tensor_to_doubles(a), y = tensor_to_doubles(b);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    return x;
  }
  static Tensor slice_constant(const Tensor& t, int64_t axis, int64_t b, int64_t e);
  static Tensor transpose_constant(const Tensor& t, const std::vector<int64_t>& perm);

  // Direction d's initial state from input `i` (initial_h / initial_c), as [1, N, H]; zeros when
  // the input is absent.
  Value* initial_state(size_t i, int64_t d, const std::string& tag);

  NodeRewriter& rw_;
  const RecurrentSpec& s_;
  DType dt_;
};

Tensor Unroller::slice_constant(const Tensor& t, int64_t axis, int64_t b, int64_t e) {
  Shape sh = t.shape();
  const int64_t outer = dims_product(sh, 0, axis), inner = dims_product(sh, axis + 1, int64_t(sh.size()));
  const int64_t len = sh[size_t(axis)];
  sh[size_t(axis)] = e - b;
  std::vector<double> in = tensor_to_doubles(t), out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = b; j < e; ++j)
      for (int64_t k = 0; k < inner; ++k) out.push_back(in[size_t((o * len + j) * inner + k)]);
  return tensor_from_doubles(out, sh, t.dtype());
}

Tensor Unroller::transpose_constant(const Tensor& t, const std::vector<int64_t>& perm) {
  const Shape& in = t.shape();
  Shape sh;
  for (int64_t p : perm) sh.push_back(in[size_t(p)]);
  std::vector<int64_t> stride(in.size(), 1);
  for (size_t k = in.size(); k-- > 1;) stride[k - 1] = stride[k] * in[k];
  const std::vector<double> v = tensor_to_doubles(t);
  std::vector<double> out(v.size());
  std::vector<int64_t> idx(sh.size(), 0);
  for (size_t o = 0; o < out.size(); ++o) {
    int64_t src = 0;
    for (size_t k = 0; k < sh.size(); ++k) src += idx[k] * stride[size_t(perm[k])];
    out[o] = v[size_t(src)];
    for (size_t k = sh.size(); k-- > 0;) {
      if (++idx[k] < sh[k]) break;
      idx[k] = 0;
    }
  }
  return tensor_from_doubles(out, sh, t.dtype());
}

Value* Unroller::activate(const RecurrentActivation& a, Value* x, const std::string& tag) {
  const std::string& f = a.op;
  if (f == "Sigmoid" || f == "Tanh" || f == "Relu" || f == "Softsign" || f == "Softplus") return rw_.unary(f, x, tag);
  if (f == "LeakyRelu" || f == "ThresholdedRelu" || f == "Elu")
    return rw_.emit(f, {x}, x->type(), tag, {{"alpha", a.alpha}});
  if (f == "HardSigmoid") return rw_.emit(f, {x}, x->type(), tag, {{"alpha", a.alpha}, {"beta", a.beta}});
  if (f == "Affine") {
    Value* scaled = mul(x, scalar(tag + "_alpha", a.alpha), tag + "_scaled");
    return add(scaled, scalar(tag + "_beta", a.beta), tag);
  }
  if (f == "ScaledTanh") {
    Value* t = rw_.unary("Tanh", mul(x, scalar(tag + "_beta", a.beta), tag + "_in"), tag + "_tanh");
    return mul(t, scalar(tag + "_alpha", a.alpha), tag);
  }
  KILN_CHECK(false, "decompose_recurrent: activation ", f);
  return nullptr;
}

Value* Unroller::initial_state(size_t i, int64_t d, const std::string& tag) {
  const int64_t N = s_.batch, H = s_.hidden;
  Value* v = rw_.input(i);
  if (!v) return rw_.constant(tag, tensor_from_doubles(std::vector<double>(size_t(N * H), 0.0), {1, N, H}, dt_));
  if (!s_.batch_first) return slice(v, 0, d, d + 1, tag);
  return transpose(slice(v, 1, d, d + 1, tag + "_d"), {1, 0, 2}, tag);
}

void Unroller::run() {
  const int64_t T = s_.seq, N = s_.batch, I = s_.input, H = s_.hidden, G = s_.gates, D = s_.dirs;
  const bool lstm = s_.kind == RecurrentKind::Lstm, gru = s_.kind == RecurrentKind::Gru;
  Value* x = rw_.input(0);
  if (s_.batch_first) x = transpose(x, {1, 0, 2}, "x_time_major");
  Value* lens = rw_.input(4);
  if (lens && lens->is_constant()) {
    bool full = true;
    for (int64_t n = 0; n < N; ++n) full = full && lens->constant().as_int64(n) == T;
    if (full) lens = nullptr;  // every entry runs the whole sequence: no masks
  }
  Value* lens3 = lens ? reshape(lens, {1, N, 1}, "lens") : nullptr;

  std::vector<Value*> ys, hs, cs;
  for (int64_t d = 0; d < D; ++d) {
    const std::string dn = "d" + std::to_string(d);
    // W_d^T [I, G*H], R_d^T [H, G*H]; constants are sliced and transposed here.
    Value* wt = transpose(reshape(slice(rw_.input(1), 0, d, d + 1, dn + "_w"), {G * H, I}, dn + "_w2"), {1, 0}, dn + "_wt");
    Value* rt = transpose(reshape(slice(rw_.input(2), 0, d, d + 1, dn + "_r"), {G * H, H}, dn + "_r2"), {1, 0}, dn + "_rt");
    // The bias of the input part: Wb + Rb, except GRU's Rb_h under linear_before_reset, which r
    // multiplies (added to MatMul(H', R_h^T) per step instead).
    Value* xb = nullptr;
    Value* rbh = nullptr;
    if (Value* b = rw_.input(3)) {
      Value* bd = reshape(slice(b, 0, d, d + 1, dn + "_b"), {2 * G * H}, dn + "_b1");
      Value* wb = slice(bd, 0, 0, G * H, dn + "_wb");
      Value* rb = slice(bd, 0, G * H, 2 * G * H, dn + "_rb");
      if (gru && s_.linear_before_reset) {
        rbh = slice(rb, 0, 2 * H, 3 * H, dn + "_rbh");
        Value* zero = rw_.constant(dn + "_zero", tensor_from_doubles(std::vector<double>(size_t(H), 0.0), {H}, dt_));
        rb = concat({slice(rb, 0, 0, 2 * H, dn + "_rbzr"), zero}, 0, dn + "_rbx");
      }
      // Constant biases are summed here, at compile time.
      xb = wb->is_constant() && rb->is_constant()
               ? rw_.constant(dn + "_bias", tensor_from_doubles(sum(wb->constant(), rb->constant()), {G * H}, dt_))
               : add(wb, rb, dn + "_bias");
    }
    Value* xw = matmul(x, wt, dn + "_xw");  // [T, N, G*H]: every step's input part at once
    if (xb) xw = add(xw, xb, dn + "_xwb");
    // R^T per gate ([H, H] each): each step multiplies H' by every gate's block on its own, so
    // the step's products are sibling MatMuls of one left operand and the gate arithmetic their
    // common epilogue — one kernel per step (the siblings emitter). One MatMul over all gates
    // left the gates as slices of its output at other columns, which no epilogue can read: a
    // second kernel per step (an LSTM of 20 steps was 41 kernels where ONNX Runtime runs one).
    std::vector<Value*> rt_gate;
    for (int64_t g = 0; g < G; ++g)
      rt_gate.push_back(slice(rt, 1, g * H, (g + 1) * H, dn + "_rt" + std::to_string(g)));
    Value* p = lstm ? rw_.input(7) : nullptr;
    Value* pd = p ? reshape(slice(p, 0, d, d + 1, dn + "_p"), {3 * H}, dn + "_p1") : nullptr;
    Value* pi = pd ? slice(pd, 0, 0, H, dn + "_pi") : nullptr;
    Value* po = pd ? slice(pd, 0, H, 2 * H, dn + "_po") : nullptr;
    Value* pf = pd ? slice(pd, 0, 2 * H, 3 * H, dn + "_pf") : nullptr;
    const std::vector<RecurrentActivation>& act = s_.act[size_t(d)];

    Value* h = initial_state(5, d, dn + "_h0");
    Value* c = lstm ? initial_state(6, d, dn + "_c0") : nullptr;
    std::vector<Value*> y(static_cast<size_t>(T));
    for (int64_t step = 0; step < T; ++step) {
      const int64_t t = s_.backwards(d) ? T - 1 - step : step;
      const std::string tn = dn + "_t" + std::to_string(t);
      Value* xt = slice(xw, 0, t, t + 1, tn + "_x");  // [1, N, G*H]
      auto gate = [&](Value* v, int64_t g, const std::string& tag) { return slice(v, 2, g * H, (g + 1) * H, tag); };
      Value* hn = nullptr;
      Value* cn = nullptr;
      // H' times gate g's block of R^T.
      auto hr = [&](int64_t g, const std::string& tag) { return matmul(h, rt_gate[size_t(g)], tag); };
      if (s_.kind == RecurrentKind::Rnn) {
        Value* pre = add(xt, hr(0, tn + "_hr"), tn + "_pre");
        hn = activate(act[0], clip(pre, tn + "_clip"), tn + "_h");
      } else if (gru) {
        // One emitting call per statement throughout: the order of a call's arguments is the
        // compiler's, and the graph (its goldens) must not depend on it (GCC and clang differ).
        Value* xz = gate(xt, 0, tn + "_xz");
        Value* hz = hr(0, tn + "_hz");
        Value* z = activate(act[0], clip(add(xz, hz, tn + "_prez"), tn + "_clipz"), tn + "_z");
        Value* xr = gate(xt, 1, tn + "_xr");
        Value* hrr = hr(1, tn + "_hrr");
        Value* r = activate(act[0], clip(add(xr, hrr, tn + "_prer"), tn + "_clipr"), tn + "_r");
        Value* rh;
        if (s_.linear_before_reset) {
          Value* lin = hr(2, tn + "_hh");
          if (rbh) lin = add(lin, rbh, tn + "_hhb");
          rh = mul(r, lin, tn + "_reset");
        } else {
          rh = matmul(mul(r, h, tn + "_reset"), rt_gate[2], tn + "_hh");
        }
        Value* cand = activate(act[1], clip(add(gate(xt, 2, tn + "_xh"), rh, tn + "_preh"), tn + "_cliph"), tn + "_cand");
        // H = (1 - z) ⊙ h~ + z ⊙ H'
        Value* keep = rw_.binary("Sub", scalar(tn + "_one", 1.0), z, tn + "_1mz");
        Value* fresh = mul(keep, cand, tn + "_new");
        Value* old = mul(z, h, tn + "_old");
        hn = add(fresh, old, tn + "_h");
      } else {
        // Gates i, o, f, c: each its input part plus its own product.
        auto pre = [&](int64_t g, const std::string& tag) {
          Value* xg = gate(xt, g, tag + "_x");
          Value* hg = hr(g, tag + "_h");
          return add(xg, hg, tag);
        };
        Value* i = pre(0, tn + "_prei");
        if (pi) i = add(i, mul(pi, c, tn + "_peepi"), tn + "_prei_p");
        Value* ig = activate(act[0], clip(i, tn + "_clipi"), tn + "_i");
        Value* fg;
        if (s_.input_forget) {
          fg = rw_.binary("Sub", scalar(tn + "_one", 1.0), ig, tn + "_f");
        } else {
          Value* f = pre(2, tn + "_pref");
          if (pf) f = add(f, mul(pf, c, tn + "_peepf"), tn + "_pref_p");
          fg = activate(act[0], clip(f, tn + "_clipf"), tn + "_f");
        }
        Value* cg = activate(act[1], clip(pre(3, tn + "_prec"), tn + "_clipc"), tn + "_g");
        Value* fc = mul(fg, c, tn + "_fc");
        Value* icg = mul(ig, cg, tn + "_ig");
        cn = add(fc, icg, tn + "_c");
        Value* o = pre(1, tn + "_preo");
        if (po) o = add(o, mul(po, cn, tn + "_peepo"), tn + "_preo_p");
        Value* og = activate(act[0], clip(o, tn + "_clipo"), tn + "_o");
        hn = mul(og, activate(act[2], cn, tn + "_hc"), tn + "_h");
      }
      if (lens3) {
        // Entries whose sequence ended keep their state and output 0 (forward direction only).
        Value* tv = rw_.constant(tn + "_step", Tensor::from_vector<int32_t>({int32_t(t)}, {}).cast(lens->dtype()));
        Value* live = rw_.emit("Less", {tv, lens3}, {DType::Bool, {1, N, 1}}, tn + "_live");
        Value* zero = scalar(tn + "_zero", 0.0);
        y[size_t(t)] = rw_.emit("Where", {live, hn, zero}, hn->type(), tn + "_y");
        hn = rw_.emit("Where", {live, hn, h}, hn->type(), tn + "_hkept");
        if (cn) cn = rw_.emit("Where", {live, cn, c}, cn->type(), tn + "_ckept");
      } else {
        y[size_t(t)] = hn;
      }
      h = hn;
      if (cn) c = cn;
    }
    ys.push_back(concat(y, 0, dn + "_y"));  // [T, N, H]
    if (lens3) {
      // An entry of length 0 ends in zero states (the reference kernel's rule, ONNX Runtime's).
      Value* ran = rw_.emit("Less", {rw_.constant(dn + "_none", Tensor::from_vector<int32_t>({0}, {}).cast(lens->dtype())), lens3},
                            {DType::Bool, {1, N, 1}}, dn + "_ran");
      h = rw_.emit("Where", {ran, h, scalar(dn + "_hzero", 0.0)}, h->type(), dn + "_hlast");
      if (c) c = rw_.emit("Where", {ran, c, scalar(dn + "_czero", 0.0)}, c->type(), dn + "_clast");
    }
    hs.push_back(h);
    if (c) cs.push_back(c);
  }

  // Y [T, D, N, H] (layout 1: [N, T, D, H]); Y_h, Y_c [D, N, H] (layout 1: [N, D, H]).
  auto used = [&](size_t i) { return i < rw_.num_outputs() && rw_.output(i) && is_used(rw_.graph(), rw_.output(i)); };
  if (used(0)) {
    if (D == 1 && !s_.batch_first) {
      reshape(ys[0], {T, 1, N, H}, "y", rw_.output(0));
    } else {
      std::vector<Value*> y4;
      for (int64_t d = 0; d < D; ++d) y4.push_back(reshape(ys[size_t(d)], {T, 1, N, H}, "d" + std::to_string(d) + "_y4"));
      if (s_.batch_first) transpose(concat(y4, 1, "y"), {2, 0, 1, 3}, "y_batch_major", rw_.output(0));
      else concat(y4, 1, "y", rw_.output(0));
    }
  }
  auto state_out = [&](const std::vector<Value*>& st, size_t i, const std::string& tag) {
    if (!used(i)) return;
    if (s_.batch_first) transpose(concat(st, 0, tag + "_dirs"), {1, 0, 2}, tag, rw_.output(i));
    else if (D == 1) reshape(st[0], {D, N, H}, tag, rw_.output(i));
    else concat(st, 0, tag, rw_.output(i));
  };
  state_out(hs, 1, "y_h");
  if (lstm) state_out(cs, 2, "y_c");
}

}  // namespace

std::string DecomposeRecurrent::refusal(const Node& n, bool unroll_all) {
  const std::string& op = n.op_type();
  if ((op != "RNN" && op != "GRU" && op != "LSTM") || !n.domain().empty()) return "not a recurrent op";
  RecurrentSpec s;
  try {
    s = recurrent_spec(n);
  } catch (const UserError& e) {
    return e.what();
  }
  const DType dt = n.input(0)->dtype();
  if (dt != DType::Float32 && dt != DType::Float64) return cat(op, " on ", dtype_name(dt), " is not decomposed");
  for (size_t i = 1; i < n.num_inputs(); ++i)
    if (n.input(i) && i != 4 && n.input(i)->dtype() != dt) return cat(op, " inputs of mixed dtypes are not decomposed");
  if (s.seq == 0 || s.batch == 0) return cat(op, " over an empty sequence or batch is not decomposed");
  if (s.seq * s.dirs > kMaxSteps)
    return cat(op, " runs ", s.seq * s.dirs, " steps, more than the ", kMaxSteps, " decompose_recurrent unrolls");
  const Value* lens = n.num_inputs() > 4 ? n.input(4) : nullptr;
  if (lens && (s.reverse || s.dirs == 2)) {
    bool full = lens->is_constant();
    for (int64_t b = 0; full && b < s.batch; ++b) full = lens->constant().as_int64(b) == s.seq;
    if (!full) return cat(op, " runs backwards over sequence_lens that are data or shorter than the sequence");
  }
  for (size_t i = 0; i < n.num_outputs(); ++i) {
    const Value* o = n.output(i);
    if (o && o->dtype() != dt) return cat(op, " output ", i, " is not ", dtype_name(dt));
  }
  if (!unroll_all && loop::recurrent_kernel_refusal(n).empty())
    return cat(op, " is built whole by the recurrent emitter (one kernel for the layer)");
  return "";
}

bool DecomposeRecurrent::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [&](const Node& n) { return refusal(n, unroll_all_).empty(); },
      [&](Node* n) {
        const RecurrentSpec s = recurrent_spec(*n);
        NodeRewriter rw(g, n);
        Unroller(rw, s).run();
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
