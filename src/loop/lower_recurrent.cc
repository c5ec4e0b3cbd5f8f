// The recurrent emitter: an ONNX RNN / GRU / LSTM as one kernel, the whole layer (every direction
// and every step), as ONNX Runtime runs it. Unrolled (transforms/decompose_recurrent.cc) a layer
// of T steps was T kernels — one dispatch, one fork and one pass over the state per step — where
// the step itself is a few microseconds of work.
//
// Per direction d (a parallel loop over the two directions of a bidirectional op):
//
//   xw[r, :] = Wb + Rb + X[r, :] · W_d^T              every step's input part at once: one GEMM of
//                                                      T·N rows through the micro-kernel, W_d packed
//                                                      once at build (rows r in X's storage order)
//   h, c = initial_h, initial_c (or 0)                 the state: local rows [N, H]
//   (with sequence_lens: the lengths checked, this direction's Y cleared)
//   for each step s (serial), t = s or T-1-s:
//     acc[n, :] = xw[row(t, n), :]
//     acc[n, :] += h[n, :] · R_d^T                     the recurrent product, R_d packed at build
//     gates, element by element (recurrent_spec.h's equations): h, c updated in place, Y[t] stored
//   Y_h, Y_c = h, c                                    (0 for an entry of length 0)
//
// sequence_lens (data or constants shorter than the sequence): entry n runs its first len_n
// steps, a backward direction from len_n - 1 down (t = len_n - 1 - s per entry: the rows of one
// step read the input part at their own positions); an entry that has ended keeps its state and
// stores nothing (its Y stays 0). As the reference kernel does, and ONNX Runtime.
//
// GRU keeps its h gate apart: its input part is read from xw after the product (r multiplies only
// the recurrent part), its accumulator starting at Rb_h; without linear_before_reset, (r ⊙ H')
// multiplies R_h in a second product after z and r. W and R are packed per gate (each gate's
// columns from a whole panel), so a product takes any run of gates.
//
// Sums: each pre-activation is (Wb + Rb) + Σ_k x_k w_k + Σ_k h_k r_k in ascending k, through the
// micro-kernel (FMA under default numerics, product-then-add in the strict order). The reference
// kernel (nn_recurrent.cc, double) is the oracle; results agree within the float tolerance, not
// bit for bit — so under --strict-fp the lowering unrolls the op instead (PipelineOptions::strict_fp).
//
// Refused (decompose_recurrent then unrolls the op into MatMuls and elementwise ops): other
// dtypes than float32, weights that are not constants (the products read them in packed panels).
#include <algorithm>
#include <functional>

#include "loop/lower_contraction_tiled.h"
#include "loop/lower_internal.h"
#include "reference/ops/recurrent_spec.h"

namespace kiln::loop::detail {

namespace {

// The input's value, or null when the node does not have it.
const Value* input_or_null(const Node& n, size_t i) { return i < n.num_inputs() ? n.input(i) : nullptr; }

Expr fimm(double v) { return float_imm(v, DType::Float32); }

// a applied to x (float), as recurrent_activate computes it.
Expr activation(const RecurrentActivation& a, const Expr& x) {
  const std::string& f = a.op;
  auto gt = [](Expr p, Expr q) { return binary(BinOp::Gt, std::move(p), std::move(q)); };
  auto ge = [](Expr p, Expr q) { return binary(BinOp::Ge, std::move(p), std::move(q)); };
  auto mulf = [](Expr p, Expr q) { return binary(BinOp::Mul, std::move(p), std::move(q)); };
  auto addf = [](Expr p, Expr q) { return binary(BinOp::Add, std::move(p), std::move(q)); };
  if (f == "Sigmoid") return unary(UnOp::Sigmoid, x);
  if (f == "Tanh") return unary(UnOp::Tanh, x);
  if (f == "Relu") return select(gt(x, fimm(0)), x, fimm(0));
  if (f == "Affine") return addf(mulf(fimm(a.alpha), x), fimm(a.beta));
  if (f == "LeakyRelu") return select(ge(x, fimm(0)), x, mulf(fimm(a.alpha), x));
  if (f == "ThresholdedRelu") return select(gt(x, fimm(a.alpha)), x, fimm(0));
  if (f == "ScaledTanh") return mulf(fimm(a.alpha), unary(UnOp::Tanh, mulf(fimm(a.beta), x)));
  if (f == "HardSigmoid")
    return binary(BinOp::Max, fimm(0), binary(BinOp::Min, fimm(1), addf(mulf(fimm(a.alpha), x), fimm(a.beta))));
  if (f == "Elu")
    return select(ge(x, fimm(0)), x, mulf(fimm(a.alpha), binary(BinOp::Sub, unary(UnOp::Exp, x), fimm(1))));
  if (f == "Softsign") return binary(BinOp::Div, x, addf(fimm(1), unary(UnOp::Abs, x)));
  if (f == "Softplus")
    return addf(call("log1p", DType::Float32, {unary(UnOp::Exp, unary(UnOp::Neg, unary(UnOp::Abs, x)))}),
                binary(BinOp::Max, x, fimm(0)));
  refuse(cat("the recurrent emitter has no activation ", f));
}

// Whether sequence_lens are constants that all run the whole sequence (no masks needed).
bool full_length(const Value& lens, const RecurrentSpec& s) {
  if (!lens.is_constant()) return false;
  for (int64_t b = 0; b < s.batch; ++b)
    if (lens.constant().as_int64(b) != s.seq) return false;
  return true;
}

// One kernel's buffers and geometry.
class RecurrentLowering {
 public:
  RecurrentLowering(const FusionGroup& grp, const Node& n, const Schedule& sched, const std::string& name)
      : n_(n), s_(recurrent_spec(n)), sched_(sched) {
    bind_kernel(grp, name, k_, {}, &ins_, &outs_);
    T_ = s_.seq, N_ = s_.batch, I_ = s_.input, H_ = s_.hidden, G_ = s_.gates, D_ = s_.dirs, GH_ = G_ * H_;
    mr_ = std::max(sched.contraction.mr, 1);
    nr_ = std::max(sched.contraction.nr, 1);
  }

  LoopKernel build() {
    x_ = in(0);
    w_ = pack_kernel_input(k_, in(1), gate_panels(I_));
    r_ = pack_kernel_input(k_, in(2), gate_panels(H_));
    b_ = in(3), h0_ = in(5);
    if (const Value* lens = input_or_null(n_, 4); lens && !full_length(*lens, s_)) lens_ = in(4);
    if (s_.kind == RecurrentKind::Lstm) c0_ = in(6), p_ = in(7);
    for (size_t i = 0; i < 3; ++i) y_[i] = out(i);
    if (D_ == 1) {
      k_.body = direction(0);
    } else {
      // The directions are independent: one each per thread. Each has its own code (its
      // activations, its order over the sequence).
      Stmt forward = direction(0);
      Stmt backward = direction(1);
      k_.body = for_loop("kiln_dir", int_imm(D_),
                         {if_then(binary(BinOp::Eq, var("kiln_dir"), int_imm(0)), {forward}, {backward})},
                         ForKind::Parallel);
    }
    return std::move(k_);
  }

 private:
  BufferPtr in(size_t i) const {
    const Value* v = input_or_null(n_, i);
    return v ? ins_.at(v) : nullptr;
  }
  BufferPtr out(size_t i) const {
    const Value* v = i < n_.num_outputs() ? n_.output(i) : nullptr;
    auto it = v ? outs_.find(v) : outs_.end();
    return it == outs_.end() ? nullptr : it->second;
  }
  // W or R ([D, G·H, K]) as the micro-kernel's B(k, j) = input[d, g·H + j, k] per gate: batch
  // d·G + g of [K × H] in panels of nr columns, so that every gate's columns begin at a whole
  // panel (a product may take any set of gates: GRU's h gate on its own).
  PanelLayout gate_panels(int64_t k) const {
    PanelLayout l = PanelLayout::row_major(D_ * G_, k, H_, nr_);
    l.inner_stride = 1;  // k is the unit stride, a column H of them
    l.col_stride = k;
    l.batch_stride = H_ * k;
    return l;
  }
  // The direction whose code is being built.
  Expr dv() const { return int_imm(d_); }
  static Expr ld(const BufferPtr& b, Expr i) { return load(b, std::move(i)); }
  Expr at(std::initializer_list<Expr> idx, std::initializer_list<int64_t> dims) const {
    Expr e = int_imm(0);
    auto d = dims.begin();
    for (const Expr& i : idx) e = add(mul(e, int_imm(*d++)), i);
    return e;
  }
  // Row of X (and xw) of step position t, batch entry n.
  Expr x_row(const Expr& t, const Expr& n) const {
    return s_.batch_first ? add(mul(n, int_imm(T_)), t) : add(mul(t, int_imm(N_)), n);
  }
  // Y's element (t, d, n, j); the states' (d, n, j).
  Expr y_at(const Expr& t, const Expr& n, const Expr& j) const {
    return s_.batch_first ? at({n, t, dv(), j}, {1, T_, D_, H_}) : at({t, dv(), n, j}, {1, D_, N_, H_});
  }
  Expr state_at(const Expr& n, const Expr& j) const {
    return s_.batch_first ? at({n, dv(), j}, {1, D_, H_}) : at({dv(), n, j}, {1, N_, H_});
  }
  Expr clip(Expr v) const {
    if (!s_.has_clip) return v;
    return binary(BinOp::Max, fimm(-s_.clip), binary(BinOp::Min, fimm(s_.clip), std::move(v)));
  }
  Expr act(size_t i, Expr v) const { return activation(s_.act[size_t(d_)][i], clip(std::move(v))); }
  // B's element j of direction d: Wb (part 0) or Rb (part 1); 0 without B.
  Expr bias(int part, const Expr& j) const {
    if (!b_) return fimm(0);
    return ld(b_, add(mul(dv(), int_imm(2 * GH_)), add(int_imm(part * GH_), j)));
  }
  // acc[r, acc_col(g) + j] (+)= Σ_k A[r, k] · B_g(k, j) for gates g0 <= g < g1 (B packed as
  // gate_panels, depth k), rows `rows`; acc_col(g) = (g - g0) · H. The column panels of all the
  // gates are one parallel loop when the product is big enough to pay for a fork per call (the
  // C emitter forks at most one loop level).
  std::vector<Stmt> gate_products(const BufferPtr& a, int64_t k, const BufferPtr& b, int64_t g0, int64_t g1,
                                  const BufferPtr& acc, int64_t ld, int64_t rows) {
    const int64_t panels = (H_ + nr_ - 1) / nr_, full = H_ / nr_, rest = H_ % nr_, d = d_, G = G_, H = H_, nr = nr_;
    const bool parallel = rows * (g1 - g0) * H_ * k >= sched_.parallel_min_work;
    // One panel (or the rest) of gate g: jp its panel index.
    auto one = [&](const Expr& g, const Expr& jp, int64_t cols) {
      RowTileProduct p;
      p.a = a;
      p.a_at = [k](Expr r, Expr k0) { return add(mul(std::move(r), int_imm(k)), std::move(k0)); };
      p.as_i = k;
      p.b = b;
      p.b_at = [=](Expr j0, Expr k0) {
        // Batch d·G + g, panel jp + j0 / nr (j0 = 0 here: one panel per call), row k0.
        Expr panel = add(mul(add(int_imm(d * G), g), int_imm(panels)), add(jp, div_floor(j0, int_imm(nr))));
        return add(mul(panel, int_imm(k * nr)), mul(k0, int_imm(nr)));
      };
      p.bs_k = nr;
      p.acc = acc;
      p.ld = ld;
      p.acc_col = add(mul(sub(g, int_imm(g0)), int_imm(H)), mul(jp, int_imm(nr)));
      p.k = k;
      p.n = cols;
      p.kc = k;
      p.mr = mr_;
      p.nr = nr;
      p.rows = int_imm(rows);
      p.prefix = nm("kiln_p");
      return row_tile_product(p);
    };
    const ForKind kind = parallel ? ForKind::Parallel : ForKind::Serial;
    std::vector<Stmt> st;
    if (full > 0) {
      const std::string q = nm("kiln_q");
      const Expr g = add(int_imm(g0), div_floor(var(q), int_imm(full))), jp = mod(var(q), int_imm(full));
      st.push_back(for_loop(q, int_imm((g1 - g0) * full), one(g, jp, nr), kind));
    }
    if (rest > 0) {
      const std::string q = nm("kiln_q");
      st.push_back(for_loop(q, int_imm(g1 - g0), one(add(int_imm(g0), var(q)), int_imm(full), rest), kind));
    }
    return st;
  }

  Stmt direction(int64_t d);
  std::vector<Stmt> lstm_gates(const BufferPtr& acc, const BufferPtr& h, const BufferPtr& c);
  std::vector<Stmt> gru_gates(const BufferPtr& acc, const BufferPtr& xw, const BufferPtr& h, const BufferPtr& rh,
                              const BufferPtr& acch);
  // for r < rows, lo <= j < hi: body(r, j) (names unique in the kernel; no loop of one trip).
  Stmt rows_cols(int64_t rows, int64_t lo, int64_t hi, const std::function<std::vector<Stmt>(const Expr&, const Expr&)>& body) {
    const std::string rv = nm("kiln_n"), jv = nm("kiln_j");
    const Expr r = rows == 1 ? int_imm(0) : var(rv);
    const Expr j = lo == 0 ? var(jv) : add(var(jv), int_imm(lo));
    Stmt inner = for_loop(jv, int_imm(hi - lo), body(r, j));
    return rows == 1 ? inner : for_loop(rv, int_imm(rows), {inner});
  }
  // A fresh name: `base`, the direction, a counter.
  std::string nm(const char* base) { return cat(base, d_, "_", names_++); }
  std::string nm_let() { return nm("kiln_v"); }
  std::vector<Stmt> rnn_gates(const BufferPtr& acc, const BufferPtr& h);
  // The step's position in the sequence for entry n: the step's t, or with sequence_lens going
  // backwards len_n - 1 - s (0 once the entry has ended, where nothing is stored).
  Expr t_of(const Expr& n) const {
    if (!len_ || !s_.backwards(d_)) return t_var_;
    return binary(BinOp::Max, int_imm(0), sub(sub(ld(len_, n), int_imm(1)), s_var_));
  }
  // rows_cols over the entries still running at this step (all of them without sequence_lens).
  Stmt live_rows(int64_t rows, int64_t lo, int64_t hi,
                 const std::function<std::vector<Stmt>(const Expr&, const Expr&)>& body) {
    if (!len_) return rows_cols(rows, lo, hi, body);
    return rows_cols(rows, lo, hi, [&](const Expr& n, const Expr& j) {
      return std::vector<Stmt>{if_then(binary(BinOp::Lt, s_var_, ld(len_, n)), body(n, j))};
    });
  }
  // Stores of the new state element h[n, j] = v: the local row and Y[t].
  void store_h(std::vector<Stmt>& st, const BufferPtr& h, const Expr& n, const Expr& j, const Expr& v) const {
    st.push_back(store(h, add(mul(n, int_imm(H_)), j), v));
    if (y_[0]) st.push_back(store(y_[0], y_at(t_of(n), n, j), v));
  }

  const Node& n_;
  RecurrentSpec s_;
  const Schedule& sched_;
  LoopKernel k_;
  std::unordered_map<const Value*, BufferPtr> ins_, outs_;
  int64_t d_ = 0;
  int names_ = 0;
  int64_t T_ = 0, N_ = 0, I_ = 0, H_ = 0, G_ = 0, D_ = 0, GH_ = 0, mr_ = 8, nr_ = 32;
  BufferPtr x_, w_, r_, b_, h0_, c0_, p_, lens_;
  BufferPtr len_;       // the current direction's checked lengths (null without sequence_lens)
  Expr s_var_, t_var_;  // the current direction's step and its position
  BufferPtr y_[3];
};


// ---------------------------------------------------------------- one direction

Stmt RecurrentLowering::direction(int64_t d) {
  d_ = d;
  const bool lstm = s_.kind == RecurrentKind::Lstm, gru = s_.kind == RecurrentKind::Gru;
  const bool gru_apart = gru && !s_.linear_before_reset;  // R_h multiplies r ⊙ H' in a second product
  const int64_t M = T_ * N_;
  auto local = [&](const char* what, int64_t numel) {
    return std::make_shared<Buffer>(Buffer{nm(what), DType::Float32, {numel}, Scope::Local});
  };
  const BufferPtr xw = local("kiln_xw", M * GH_), h = local("kiln_h", N_ * H_), acc = local("kiln_acc", N_ * GH_);
  const BufferPtr c = lstm ? local("kiln_c", N_ * H_) : nullptr;
  const BufferPtr rh = gru_apart ? local("kiln_rh", N_ * H_) : nullptr, acch = gru_apart ? local("kiln_acch", N_ * H_) : nullptr;

  std::vector<Stmt> st;
  // sequence_lens: entry n runs its first len_n steps (backwards from len_n - 1); Y is 0 past
  // them, so this direction's Y is cleared first. The lengths are checked as the reference
  // checks them (an error outside [0, T]).
  const BufferPtr len = lens_ ? std::make_shared<Buffer>(Buffer{nm("kiln_len"), DType::Int64, {N_}, Scope::Local}) : nullptr;
  len_ = len;
  if (len) {
    const std::string n = nm("kiln_n");
    const Expr v = cast(DType::Int64, ld(lens_, var(n)));
    // A negative length maps to T + 1, outside the checked range [-(T + 1), T + 1).
    const Expr checked = checked_index(select(binary(BinOp::Lt, v, int_imm(0)), int_imm(T_ + 1), v), T_ + 1, 1);
    st.push_back(for_loop(n, int_imm(N_), {store(len, var(n), checked)}));
    if (y_[0])
      st.push_back(rows_cols(T_ * N_, 0, H_, [&](const Expr& r, const Expr& j) {
        const Expr t = div_floor(r, int_imm(N_)), n = mod(r, int_imm(N_));
        return std::vector<Stmt>{store(y_[0], y_at(t, n, j), fimm(0))};
      }));
  }
  // Every step's input part: the biases, then X · W^T.
  const int64_t hcol = gru ? 2 * H_ : GH_;  // GRU's h gate takes Wb alone (Rb_h enters with r)
  st.push_back(rows_cols(M, 0, hcol, [&](const Expr& r, const Expr& j) {
    return std::vector<Stmt>{store(xw, add(mul(r, int_imm(GH_)), j), binary(BinOp::Add, bias(0, j), bias(1, j)))};
  }));
  if (gru)
    st.push_back(rows_cols(M, hcol, GH_, [&](const Expr& r, const Expr& j) {
      return std::vector<Stmt>{store(xw, add(mul(r, int_imm(GH_)), j), bias(0, j))};
    }));
  for (Stmt& p : gate_products(x_, I_, w_, 0, G_, xw, GH_, M)) st.push_back(p);
  // The initial state.
  st.push_back(rows_cols(N_, 0, H_, [&](const Expr& n, const Expr& j) {
    std::vector<Stmt> b = {store(h, add(mul(n, int_imm(H_)), j), h0_ ? ld(h0_, state_at(n, j)) : fimm(0))};
    if (c) b.push_back(store(c, add(mul(n, int_imm(H_)), j), c0_ ? ld(c0_, state_at(n, j)) : fimm(0)));
    return b;
  }));

  // The steps.
  const std::string sv = nm("kiln_s"), tv = nm("kiln_t");
  s_var_ = var(sv);
  t_var_ = var(tv);
  std::vector<Stmt> step = {let(tv, s_.backwards(d) ? sub(int_imm(T_ - 1), var(sv)) : var(sv))};
  const int64_t from_xw = gru ? 2 * H_ : GH_;
  step.push_back(rows_cols(N_, 0, from_xw, [&](const Expr& n, const Expr& j) {
    return std::vector<Stmt>{
        store(acc, add(mul(n, int_imm(GH_)), j), ld(xw, add(mul(x_row(t_of(n), n), int_imm(GH_)), j)))};
  }));
  if (gru && s_.linear_before_reset)
    step.push_back(rows_cols(N_, from_xw, GH_, [&](const Expr& n, const Expr& j) {
      return std::vector<Stmt>{store(acc, add(mul(n, int_imm(GH_)), j), bias(1, j))};
    }));
  for (Stmt& p : gate_products(h, H_, r_, 0, gru_apart ? 2 : G_, acc, GH_, N_)) step.push_back(p);
  std::vector<Stmt> gates = lstm ? lstm_gates(acc, h, c) : gru ? gru_gates(acc, xw, h, rh, acch) : rnn_gates(acc, h);
  for (Stmt& g : gates) step.push_back(g);
  st.push_back(for_loop(sv, int_imm(T_), std::move(step)));

  // The last state.
  // (Named copies, not a structured binding: a lambda may not capture one before clang 16.)
  for (const auto& out_from : {std::pair{y_[1], h}, std::pair{y_[2], c}}) {
    const BufferPtr out = out_from.first, from = out_from.second;
    if (!out || !from) continue;
    st.push_back(rows_cols(N_, 0, H_, [&](const Expr& n, const Expr& j) {
      Expr v = ld(from, add(mul(n, int_imm(H_)), j));
      // An entry of length 0 ends in zero states (the reference's rule, ONNX Runtime's).
      if (len) v = select(binary(BinOp::Lt, int_imm(0), ld(len, n)), v, fimm(0));
      return std::vector<Stmt>{store(out, state_at(n, j), v)};
    }));
  }
  Stmt body = block(std::move(st));
  for (const BufferPtr& b : {acch, rh, c, acc, h, xw, len})
    if (b) body = allocate(b, {body});
  return body;
}

std::vector<Stmt> RecurrentLowering::rnn_gates(const BufferPtr& acc, const BufferPtr& h) {
  return {live_rows(N_, 0, H_, [&](const Expr& n, const Expr& j) {
    std::vector<Stmt> b;
    const std::string hv = nm_let();
    b.push_back(let(hv, act(0, ld(acc, add(mul(n, int_imm(GH_)), j)))));
    store_h(b, h, n, j, var(hv, DType::Float32));
    return b;
  })};
}

std::vector<Stmt> RecurrentLowering::lstm_gates(const BufferPtr& acc, const BufferPtr& h, const BufferPtr& c) {
  return {live_rows(N_, 0, H_, [&](const Expr& n, const Expr& j) {
    std::vector<Stmt> b;
    auto pre = [&](int64_t g) { return ld(acc, add(mul(n, int_imm(GH_)), add(int_imm(g * H_), j))); };
    auto peep = [&](int64_t g, const Expr& state, Expr v) {
      if (!p_) return v;
      return binary(BinOp::Add, std::move(v),
                    binary(BinOp::Mul, ld(p_, add(int_imm(d_ * 3 * H_ + g * H_), j)), state));
    };
    auto f32 = [](const std::string& v) { return var(v, DType::Float32); };
    const Expr at = add(mul(n, int_imm(H_)), j);
    const std::string ck = nm_let(), ig = nm_let(), fg = nm_let(), cg = nm_let(), cn = nm_let(), og = nm_let(), hv = nm_let();
    b.push_back(let(ck, ld(c, at)));
    b.push_back(let(ig, act(0, peep(0, f32(ck), pre(0)))));
    b.push_back(let(fg, s_.input_forget ? binary(BinOp::Sub, fimm(1), f32(ig)) : act(0, peep(2, f32(ck), pre(2)))));
    b.push_back(let(cg, act(1, pre(3))));
    b.push_back(let(cn, binary(BinOp::Add, binary(BinOp::Mul, f32(fg), f32(ck)), binary(BinOp::Mul, f32(ig), f32(cg)))));
    b.push_back(let(og, act(0, peep(1, f32(cn), pre(1)))));
    b.push_back(let(hv, binary(BinOp::Mul, f32(og), activation(s_.act[size_t(d_)][2], f32(cn)))));
    b.push_back(store(c, at, f32(cn)));
    store_h(b, h, n, j, f32(hv));
    return b;
  })};
}

std::vector<Stmt> RecurrentLowering::gru_gates(const BufferPtr& acc, const BufferPtr& xw, const BufferPtr& h,
                                               const BufferPtr& rh, const BufferPtr& acch) {
  auto f32 = [](const std::string& v) { return var(v, DType::Float32); };
  auto pre = [&](const Expr& n, int64_t g, const Expr& j) { return ld(acc, add(mul(n, int_imm(GH_)), add(int_imm(g * H_), j))); };
  auto x_h = [&](const Expr& n, const Expr& j) {
    return ld(xw, add(mul(x_row(t_of(n), n), int_imm(GH_)), add(int_imm(2 * H_), j)));
  };
  // H = (1 - z) ⊙ h~ + z ⊙ H'
  auto update = [&](std::vector<Stmt>& b, const Expr& n, const Expr& j, const Expr& z, const Expr& cand) {
    const std::string hv = nm_let();
    const Expr old = ld(h, add(mul(n, int_imm(H_)), j));
    b.push_back(let(hv, binary(BinOp::Add, binary(BinOp::Mul, binary(BinOp::Sub, fimm(1), z), cand), binary(BinOp::Mul, z, old))));
    store_h(b, h, n, j, f32(hv));
  };
  if (s_.linear_before_reset)
    return {live_rows(N_, 0, H_, [&](const Expr& n, const Expr& j) {
      std::vector<Stmt> b;
      const std::string z = nm_let(), r = nm_let(), cand = nm_let();
      b.push_back(let(z, act(0, pre(n, 0, j))));
      b.push_back(let(r, act(0, pre(n, 1, j))));
      b.push_back(let(cand, act(1, binary(BinOp::Add, x_h(n, j), binary(BinOp::Mul, f32(r), pre(n, 2, j))))));
      update(b, n, j, f32(z), f32(cand));
      return b;
    })};
  // z and r first (z kept in acc's z columns), r ⊙ H' into rh; then (r ⊙ H') R_h^T + Rb_h.
  std::vector<Stmt> st;
  st.push_back(rows_cols(N_, 0, H_, [&](const Expr& n, const Expr& j) {
    const Expr at = add(mul(n, int_imm(H_)), j);
    return std::vector<Stmt>{store(acc, add(mul(n, int_imm(GH_)), j), act(0, pre(n, 0, j))),
                             store(rh, at, binary(BinOp::Mul, act(0, pre(n, 1, j)), ld(h, at))),
                             store(acch, at, bias(1, add(int_imm(2 * H_), j)))};
  }));
  for (Stmt& p : gate_products(rh, H_, r_, 2, 3, acch, H_, N_)) st.push_back(p);
  st.push_back(live_rows(N_, 0, H_, [&](const Expr& n, const Expr& j) {
    std::vector<Stmt> b;
    const std::string cand = nm_let();
    b.push_back(let(cand, act(1, binary(BinOp::Add, x_h(n, j), ld(acch, add(mul(n, int_imm(H_)), j))))));
    update(b, n, j, pre(n, 0, j), f32(cand));
    return b;
  }));
  return st;
}

}  // namespace

bool is_recurrent(const Node& n) {
  const std::string& op = n.op_type();
  return n.domain().empty() && (op == "RNN" || op == "GRU" || op == "LSTM");
}

std::string recurrent_refusal(const Node& n) {
  if (!is_recurrent(n)) return "not a recurrent op";
  RecurrentSpec s;
  try {
    s = recurrent_spec(n);
  } catch (const UserError& e) {
    return e.what();
  }
  const std::string& op = n.op_type();
  for (size_t i = 0; i < n.num_inputs(); ++i) {
    const Value* v = n.input(i);
    if (v && i != 4 && v->dtype() != DType::Float32) return cat(op, " input ", i, " is ", dtype_name(v->dtype()), ", not float32");
  }
  if (const Value* lens = input_or_null(n, 4); lens && lens->dtype() != DType::Int32 && lens->dtype() != DType::Int64)
    return cat(op, " sequence_lens are ", dtype_name(lens->dtype()), ", not integers");
  for (size_t i = 0; i < n.num_outputs(); ++i)
    if (n.output(i) && n.output(i)->dtype() != DType::Float32) return cat(op, " output ", i, " is not float32");
  if (s.seq == 0 || s.batch == 0) return cat(op, " over an empty sequence or batch");
  if (!n.input(1)->is_constant() || !n.input(2)->is_constant())
    return cat(op, " weights W and R are not constants (the products read them in packed panels)");
  return "";
}

LoweredGroup lower_recurrent_group(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched) {
  return lowered_or_refused([&]() {
    const Node* n = nullptr;
    for (const Node* m : grp.nodes)
      if (is_recurrent(*m)) n = m;
    KILN_CHECK(n, "lower_recurrent_group: group ", grp.name, " holds no recurrent op");
    if (grp.nodes.size() != 1)
      refuse(cat(name_of(n), " is a kernel of its own (the recurrent emitter: the layer's steps in one loop); it fuses "
                             "with nothing"));
    if (std::string why = recurrent_refusal(*n); !why.empty()) refuse(why);
    return RecurrentLowering(grp, *n, sched, kernel_name).build();
  });
}

}  // namespace kiln::loop::detail

namespace kiln::loop {

std::string recurrent_kernel_refusal(const Node& n) { return detail::recurrent_refusal(n); }

}  // namespace kiln::loop
