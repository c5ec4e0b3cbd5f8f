// Reference kernels of RNN, GRU and LSTM (recurrent_spec.h has the equations), computed in double
// from the float inputs, step by step, per direction and batch entry: plain, obviously correct
// loops. The compiled path spells the same ops as MatMuls and elementwise ops
// (transforms/decompose_recurrent.cc).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "reference/kernel_util.h"
#include "reference/op_registry.h"
#include "reference/ops/nn_internal.h"
#include "reference/ops/recurrent_spec.h"
#include "support/error.h"

namespace kiln {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Canonical name, and the default alpha/beta of each activation ONNX allows in recurrent ops
// (those of the ONNX operator of the same name; Affine and ScaledTanh have none there: 1 and 0, 1
// and 1 as ONNX Runtime uses).
struct ActivationInfo {
  const char* name;
  bool takes_alpha, takes_beta;
  float alpha, beta;
};
const std::map<std::string, ActivationInfo>& activations() {
  static const std::map<std::string, ActivationInfo> m = {
      {"sigmoid", {"Sigmoid", false, false, 0, 0}},      {"tanh", {"Tanh", false, false, 0, 0}},
      {"relu", {"Relu", false, false, 0, 0}},            {"affine", {"Affine", true, true, 1.0f, 0.0f}},
      {"leakyrelu", {"LeakyRelu", true, false, 0.01f, 0}}, {"thresholdedrelu", {"ThresholdedRelu", true, false, 1.0f, 0}},
      {"scaledtanh", {"ScaledTanh", true, true, 1.0f, 1.0f}}, {"hardsigmoid", {"HardSigmoid", true, true, 0.2f, 0.5f}},
      {"elu", {"Elu", true, false, 1.0f, 0}},            {"softsign", {"Softsign", false, false, 0, 0}},
      {"softplus", {"Softplus", false, false, 0, 0}}};
  return m;
}

}  // namespace

RecurrentSpec recurrent_spec(const Node& n) {
  RecurrentSpec s;
  const std::string& op = n.op_type();
  s.kind = op == "LSTM" ? RecurrentKind::Lstm : op == "GRU" ? RecurrentKind::Gru : RecurrentKind::Rnn;
  s.gates = s.kind == RecurrentKind::Lstm ? 4 : s.kind == RecurrentKind::Gru ? 3 : 1;
  if (n.num_inputs() < 3 || !n.input(0) || !n.input(1) || !n.input(2)) user_error(op, " needs X, W and R");
  const Shape &x = n.input(0)->shape(), &w = n.input(1)->shape(), &r = n.input(2)->shape();
  if (x.size() != 3 || w.size() != 3 || r.size() != 3) user_error(op, " X, W and R must have rank 3");
  const std::string dir = n.attr_string("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    user_error(op, " direction '", dir, "' is not forward, reverse or bidirectional");
  s.dirs = dir == "bidirectional" ? 2 : 1;
  s.reverse = dir == "reverse";
  const int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) user_error(op, " layout ", layout, " is not 0 or 1");
  s.batch_first = layout == 1;
  s.seq = x[s.batch_first ? 1 : 0];
  s.batch = x[s.batch_first ? 0 : 1];
  s.input = x[2];
  s.hidden = n.attr_int("hidden_size", r[2]);
  if (s.hidden <= 0) user_error(op, " hidden_size ", s.hidden, " is not positive");
  if (w != Shape{s.dirs, s.gates * s.hidden, s.input})
    user_error(op, " W is ", shape_str(w), ", expected ", shape_str({s.dirs, s.gates * s.hidden, s.input}));
  if (r != Shape{s.dirs, s.gates * s.hidden, s.hidden})
    user_error(op, " R is ", shape_str(r), ", expected ", shape_str({s.dirs, s.gates * s.hidden, s.hidden}));
  if (n.has_attr("clip")) {
    s.has_clip = true;
    s.clip = n.attr_float("clip", 0);
    if (!(s.clip > 0)) user_error(op, " clip ", s.clip, " is not positive");
  }
  s.input_forget = s.kind == RecurrentKind::Lstm && n.attr_int("input_forget", 0) != 0;
  s.linear_before_reset = s.kind == RecurrentKind::Gru && n.attr_int("linear_before_reset", 0) != 0;

  // Activations: one list per direction (f, g, h as the op has them); a list for one direction
  // serves both of a bidirectional op, as ONNX Runtime allows. alpha/beta are consumed in order by
  // the activations that take them.
  const size_t per = s.kind == RecurrentKind::Lstm ? 3 : s.kind == RecurrentKind::Gru ? 2 : 1;
  std::vector<std::string> names = n.has_attr("activations") ? n.attr_strings("activations") : std::vector<std::string>{};
  if (names.empty()) {
    if (s.kind == RecurrentKind::Lstm) names = {"Sigmoid", "Tanh", "Tanh"};
    else if (s.kind == RecurrentKind::Gru) names = {"Sigmoid", "Tanh"};
    else names = {"Tanh"};
  }
  if (names.size() == per && s.dirs == 2) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != per * size_t(s.dirs))
    user_error(op, " has ", names.size(), " activations, expected ", per * size_t(s.dirs));
  const std::vector<float> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  s.act.assign(size_t(s.dirs), {});
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = activations().find(lower(names[i]));
    if (it == activations().end()) user_error(op, " activation '", names[i], "' is not supported");
    const ActivationInfo& info = it->second;
    RecurrentActivation a{info.name, info.alpha, info.beta};
    if (info.takes_alpha && ai < alphas.size()) a.alpha = alphas[ai++];
    if (info.takes_beta && bi < betas.size()) a.beta = betas[bi++];
    s.act[i / per].push_back(a);
  }
  return s;
}

double recurrent_activate(const RecurrentActivation& a, double x) {
  const std::string& f = a.op;
  if (f == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (f == "Tanh") return std::tanh(x);
  if (f == "Relu") return x > 0 ? x : 0.0;
  if (f == "Affine") return a.alpha * x + a.beta;
  if (f == "LeakyRelu") return x >= 0 ? x : a.alpha * x;
  if (f == "ThresholdedRelu") return x > a.alpha ? x : 0.0;
  if (f == "ScaledTanh") return a.alpha * std::tanh(a.beta * x);
  if (f == "HardSigmoid") return std::max(0.0, std::min(1.0, a.alpha * x + a.beta));
  if (f == "Elu") return x >= 0 ? x : a.alpha * (std::exp(x) - 1.0);
  if (f == "Softsign") return x / (1.0 + std::fabs(x));
  if (f == "Softplus") return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
  KILN_CHECK(false, "recurrent activation ", f);
  return 0;
}

namespace nn {
namespace {

std::vector<Tensor> recurrent_kernel(const Node& node, const std::vector<Tensor>& in) {
  const RecurrentSpec s = recurrent_spec(node);
  const bool lstm = s.kind == RecurrentKind::Lstm, gru = s.kind == RecurrentKind::Gru;
  expect_inputs(in, 3, lstm ? 8 : 6);
  for (size_t i : {0, 1, 2}) expect_float(in[i], "recurrent X/W/R");
  const int64_t T = s.seq, N = s.batch, I = s.input, H = s.hidden, G = s.gates, D = s.dirs;
  auto opt = [&](size_t i) -> const Tensor* { return i < in.size() && in[i].defined() ? &in[i] : nullptr; };
  auto doubles = [](const Tensor* t) {
    std::vector<double> v;
    if (t)
      for (int64_t i = 0; i < t->numel(); ++i) v.push_back(t->as_double(i));
    return v;
  };
  auto expect_shape = [&](const Tensor* t, const Shape& want, const char* what) {
    if (t && t->shape() != want) user_error(node.op_type(), " ", what, " is ", shape_str(t->shape()), ", expected ", shape_str(want));
  };
  const Tensor *b = opt(3), *lens = opt(4), *h0 = opt(5), *c0 = lstm ? opt(6) : nullptr, *p = lstm ? opt(7) : nullptr;
  expect_shape(b, {D, 2 * G * H}, "B");
  expect_shape(lens, {N}, "sequence_lens");
  const Shape state = s.batch_first ? Shape{N, D, H} : Shape{D, N, H};
  expect_shape(h0, state, "initial_h");
  expect_shape(c0, state, "initial_c");
  expect_shape(p, {D, 3 * H}, "P");
  const std::vector<double> X = doubles(&in[0]), W = doubles(&in[1]), R = doubles(&in[2]);
  const std::vector<double> B = doubles(b), H0 = doubles(h0), C0 = doubles(c0), P = doubles(p);
  std::vector<int64_t> len(size_t(N), T);
  for (int64_t n = 0; lens && n < N; ++n) {
    len[size_t(n)] = lens->as_int64(n);
    if (len[size_t(n)] < 0 || len[size_t(n)] > T)
      user_error(node.op_type(), " sequence_lens[", n, "] = ", len[size_t(n)], " is outside [0, ", T, "]");
  }
  // Offsets in the layouts of X, Y and the states.
  auto x_at = [&](int64_t t, int64_t n) { return (s.batch_first ? n * T + t : t * N + n) * I; };
  auto y_at = [&](int64_t t, int64_t d, int64_t n) { return (s.batch_first ? (n * T + t) * D + d : (t * D + d) * N + n) * H; };
  auto st_at = [&](int64_t d, int64_t n) { return (s.batch_first ? n * D + d : d * N + n) * H; };

  const DType dt = in[0].dtype();
  Tensor y(dt, s.batch_first ? Shape{N, T, D, H} : Shape{T, D, N, H}), yh(dt, state), yc(dt, state);
  std::vector<double> Y(size_t(y.numel()), 0.0), YH(size_t(yh.numel()), 0.0), YC(size_t(yc.numel()), 0.0);
  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), pre(static_cast<size_t>(G * H)), hr(static_cast<size_t>(H));
  auto clip = [&](double v) { return s.has_clip ? std::max(-double(s.clip), std::min(double(s.clip), v)) : v; };
  for (int64_t d = 0; d < D; ++d) {
    const double* w = W.data() + d * G * H * I;
    const double* r = R.data() + d * G * H * H;
    const std::vector<RecurrentActivation>& act = s.act[size_t(d)];
    auto wb = [&](int64_t j) { return B.empty() ? 0.0 : B[size_t(d * 2 * G * H + j)]; };
    auto rb = [&](int64_t j) { return B.empty() ? 0.0 : B[size_t(d * 2 * G * H + G * H + j)]; };
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t k = 0; k < H; ++k) {
        h[size_t(k)] = H0.empty() ? 0.0 : H0[size_t(st_at(d, n) + k)];
        c[size_t(k)] = C0.empty() ? 0.0 : C0[size_t(st_at(d, n) + k)];
      }
      const int64_t steps = len[size_t(n)];
      for (int64_t step = 0; step < steps; ++step) {
        const int64_t t = s.backwards(d) ? steps - 1 - step : step;
        const double* x = X.data() + x_at(t, n);
        // pre[j] = x·W_j + Wb_j (+ h·R_j + Rb_j, except GRU's h gate, which mixes r in first).
        for (int64_t j = 0; j < G * H; ++j) {
          double a = wb(j);
          for (int64_t k = 0; k < I; ++k) a += x[k] * w[j * I + k];
          const bool gru_h = gru && j >= 2 * H;
          if (!gru_h) {
            a += rb(j);
            for (int64_t k = 0; k < H; ++k) a += h[size_t(k)] * r[j * H + k];
          }
          pre[size_t(j)] = a;
        }
        if (s.kind == RecurrentKind::Rnn) {
          for (int64_t k = 0; k < H; ++k) h[size_t(k)] = recurrent_activate(act[0], clip(pre[size_t(k)]));
        } else if (gru) {
          std::vector<double> z(static_cast<size_t>(H)), rg(static_cast<size_t>(H));
          for (int64_t k = 0; k < H; ++k) {
            z[size_t(k)] = recurrent_activate(act[0], clip(pre[size_t(k)]));
            rg[size_t(k)] = recurrent_activate(act[0], clip(pre[size_t(H + k)]));
          }
          for (int64_t k = 0; k < H; ++k) {
            const int64_t j = 2 * H + k;
            double a = 0;
            if (s.linear_before_reset) {
              a = rb(j);
              for (int64_t q = 0; q < H; ++q) a += h[size_t(q)] * r[j * H + q];
              a *= rg[size_t(k)];
            } else {
              a = rb(j);
              for (int64_t q = 0; q < H; ++q) a += rg[size_t(q)] * h[size_t(q)] * r[j * H + q];
            }
            hr[size_t(k)] = recurrent_activate(act[1], clip(pre[size_t(j)] + a));
          }
          for (int64_t k = 0; k < H; ++k) h[size_t(k)] = (1 - z[size_t(k)]) * hr[size_t(k)] + z[size_t(k)] * h[size_t(k)];
        } else {
          const double* pp = P.empty() ? nullptr : P.data() + d * 3 * H;
          for (int64_t k = 0; k < H; ++k) {
            const double ck = c[size_t(k)];
            double i = pre[size_t(k)] + (pp ? pp[k] * ck : 0.0);
            double f = pre[size_t(2 * H + k)] + (pp ? pp[2 * H + k] * ck : 0.0);
            const double ig = recurrent_activate(act[0], clip(i));
            const double fg = s.input_forget ? 1.0 - ig : recurrent_activate(act[0], clip(f));
            const double cg = recurrent_activate(act[1], clip(pre[size_t(3 * H + k)]));
            const double cn = fg * ck + ig * cg;
            const double o = pre[size_t(H + k)] + (pp ? pp[H + k] * cn : 0.0);
            const double og = recurrent_activate(act[0], clip(o));
            c[size_t(k)] = cn;
            h[size_t(k)] = og * recurrent_activate(act[2], cn);
          }
        }
        for (int64_t k = 0; k < H; ++k) Y[size_t(y_at(t, d, n) + k)] = h[size_t(k)];
      }
      // An entry of length 0 ends in zero states, not its initial ones (ONNX Runtime's rule; the
      // spec does not say).
      for (int64_t k = 0; k < H && steps > 0; ++k) {
        YH[size_t(st_at(d, n) + k)] = h[size_t(k)];
        YC[size_t(st_at(d, n) + k)] = c[size_t(k)];
      }
    }
  }
  auto make = [&](const Tensor& like, const std::vector<double>& v) {
    return Tensor::from_vector<double>(v, like.shape()).cast(dt);
  };
  std::vector<Tensor> out = {make(y, Y), make(yh, YH)};
  if (lstm) out.push_back(make(yc, YC));
  out.resize(std::min(out.size(), node.num_outputs()));
  return out;
}

}  // namespace

void register_recurrent_ops(OpRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) r.add({op, recurrent_kernel, {}});
}

}  // namespace nn
}  // namespace kiln
