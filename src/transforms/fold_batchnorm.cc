#include "transforms/fold_batchnorm.h"

#include <cmath>

#include "reference/kernel_util.h"
#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

const char* kParamNames[] = {"scale", "B", "mean", "var"};

bool params_constant(const Node& bn) {
  for (size_t i = 1; i < 5; ++i)
    if (!bn.input(i)->is_constant()) return false;
  return true;
}

// BN as y * s + shift per channel, from constant parameters, in double.
struct Affine {
  std::vector<double> s, shift;
};

Affine affine_of(const Node& bn) {
  const double eps = bn.attr_float("epsilon", 1e-5f);
  const std::vector<double> scale = tensor_to_doubles(bn.input(1)->constant()), b = tensor_to_doubles(bn.input(2)->constant());
  const std::vector<double> mean = tensor_to_doubles(bn.input(3)->constant()), var = tensor_to_doubles(bn.input(4)->constant());
  Affine a;
  for (size_t c = 0; c < scale.size(); ++c) {
    a.s.push_back(scale[c] / std::sqrt(var[c] + eps));
    a.shift.push_back(b[c] - a.s.back() * mean[c]);
  }
  return a;
}

bool constant_or_absent(const Value* v) { return !v || v->is_constant(); }

// Why the producer of X cannot absorb the BN, or "".
std::string producer_refusal(const Node& p, int64_t channels) {
  const std::string& op = p.op_type();
  if (!p.domain().empty() || (op != "Conv" && op != "MatMul" && op != "Gemm"))
    return "X is produced by " + op + ", not Conv, MatMul or Gemm";
  const Value* w = p.input(1);
  if (!w || !w->is_constant()) return op + " weight is not constant";
  if (w->dtype() != p.output(0)->dtype()) return op + " weight dtype differs from its output";
  if (op == "Conv") {
    if (!constant_or_absent(p.input(2))) return "Conv bias is not constant";
    if (w->shape().empty() || w->shape()[0] != channels) return "Conv weight does not have BN's channel count";
    return "";
  }
  if (w->shape().size() != 2) return op + " weight is not a matrix";
  if (op == "MatMul") {
    if (!p.input(0) || p.input(0)->shape().size() != 2)
      return "MatMul output is not [batch, features], so axis 1 is not the feature axis";
    if (w->shape()[1] != channels) return "MatMul weight does not have BN's channel count";
    return "";
  }
  if (!constant_or_absent(p.input(2))) return "Gemm C is not constant";
  if (p.output(0)->shape().size() != 2 || p.output(0)->shape()[1] != channels)
    return "Gemm output does not have BN's channel count";
  return "";
}

// A parameter as a [C, 1, ..., 1] value of dtype dt (folded when constant).
Value* channel_param(NodeRewriter& rw, Value* p, const Shape& shape, DType dt, const std::string& suffix) {
  if (p->is_constant()) return rw.constant(suffix, p->constant().cast(dt).reshaped(shape));
  return rw.cast(rw.reshape(p, shape, suffix), dt, suffix + "_cast");
}

// Each element of w times s[channel], where channel = (flat index / inner) % s.size().
Tensor scale_channels(const Tensor& w, const std::vector<double>& s, int64_t inner) {
  std::vector<double> v = tensor_to_doubles(w);
  const int64_t channels = int64_t(s.size());
  for (int64_t i = 0; i < int64_t(v.size()); ++i) v[size_t(i)] *= s[size_t((i / inner) % channels)];
  return tensor_from_doubles(v, w.shape(), w.dtype());
}

Value* new_constant(Graph& g, const std::string& base, Tensor t) {
  return g.add_constant(g.unique_name(base), std::move(t));
}

void fold_into_producer(Graph& g, Node* bn) {
  Node* p = bn->input(0)->producer();
  const Affine a = affine_of(*bn);
  const int64_t channels = int64_t(a.s.size());
  const std::string op = p->op_type(), pname = p->name();
  const AttributeMap pattrs = p->attrs();
  Value* x = p->input(0);
  Value* w = p->input(1);
  Value* bias = p->input(2);
  Value* p_out = p->output(0);
  const DType dt = w->dtype();
  const bool trans_b = op == "Gemm" && p->attr_int("transB", 0) != 0;
  const double beta = op == "Gemm" ? p->attr_float("beta", 1.0f) : 1.0;

  NodeRewriter rw(g, bn);
  g.remove_node(p);
  Value* y = rw.output(0);
  const Tensor& wt = w->constant();

  if (op == "Conv") {
    // Output channel m of Conv is weight slice m (dim 0).
    Value* w2 = new_constant(g, w->name() + "/folded", scale_channels(wt, a.s, wt.numel() / channels));
    std::vector<double> b2(a.shift);
    const std::vector<double> b = bias ? tensor_to_doubles(bias->constant()) : std::vector<double>(a.s.size(), 0.0);
    for (size_t c = 0; c < b2.size(); ++c) b2[c] += a.s[c] * b[c];
    Value* bias2 = new_constant(g, (bias ? bias->name() : w->name()) + "/folded" + (bias ? "" : "_bias"),
                                tensor_from_doubles(b2, {channels}, dt));
    rw.insert("Conv", {x, w2, bias2}, {y}, pattrs, pname);
    return;
  }

  if (op == "MatMul") {
    // W is [K, N]: column n feeds feature n.
    Value* w2 = new_constant(g, w->name() + "/folded", scale_channels(wt, a.s, 1));
    rw.insert("MatMul", {x, w2}, {p_out}, pattrs, pname);  // p_out is free again: its producer is gone
    Value* shift = new_constant(g, w->name() + "/folded_bias", tensor_from_doubles(a.shift, {channels}, dt));
    rw.insert("Add", {p_out, shift}, {y}, {}, rw.node_name());
    return;
  }

  // Gemm: Y = alpha * A'B' + beta * C; BN(Y) = alpha * A'(B' s) + (s * beta * C + shift).
  // B' = B^T when transB: then feature n is row n of B, otherwise column n.
  Value* w2 = new_constant(g, w->name() + "/folded", scale_channels(wt, a.s, trans_b ? wt.shape()[1] : 1));
  Shape c_shape = bias ? bias->shape() : Shape{};
  Shape out_shape = broadcast_shapes({c_shape, Shape{channels}});
  std::vector<double> c2(size_t(shape_numel(out_shape)));
  const std::vector<double> c = bias ? tensor_to_doubles(bias->constant()) : std::vector<double>{0.0};
  for (BroadcastIter it(out_shape, {c_shape, Shape{channels}}); !it.done(); it.next()) {
    const size_t n = size_t(it.offset(1));
    c2[size_t(it.index())] = a.s[n] * beta * c[size_t(it.offset(0))] + a.shift[n];
  }
  Value* bias2 = new_constant(g, (bias ? bias->name() : w->name()) + "/folded" + (bias ? "" : "_bias"),
                              tensor_from_doubles(c2, out_shape, dt));
  AttributeMap attrs = pattrs;
  attrs["beta"] = 1.0f;
  rw.insert("Gemm", {x, w2, bias2}, {y}, std::move(attrs), pname);
}

void lower_to_affine(Graph& g, Node* bn) {
  Value* x = bn->input(0);
  const DType dt = x->dtype();
  const int64_t rank = int64_t(x->shape().size()), channels = x->shape()[1];
  Shape cshape(size_t(rank - 1), 1);  // [C, 1, ..., 1]: aligns C with axis 1 under numpy broadcasting
  cshape[0] = channels;

  if (params_constant(*bn)) {
    const Affine a = affine_of(*bn);
    NodeRewriter rw(g, bn);
    Value* s = rw.constant("scale", tensor_from_doubles(a.s, cshape, dt));
    Value* shift = rw.constant("shift", tensor_from_doubles(a.shift, cshape, dt));
    rw.binary("Add", rw.binary("Mul", x, s, "scaled"), shift, "shifted", rw.output(0));
    return;
  }

  const double eps = bn->attr_float("epsilon", 1e-5f);
  NodeRewriter rw(g, bn);
  Value* p[4];
  for (size_t i = 0; i < 4; ++i) p[i] = channel_param(rw, rw.input(i + 1), cshape, dt, kParamNames[i]);
  Value* centered = rw.binary("Sub", x, p[2], "centered");
  Value* std = rw.unary("Sqrt", rw.binary("Add", p[3], rw.scalar("epsilon", eps, dt), "var_eps"), "std");
  Value* normalized = rw.binary("Div", centered, std, "normalized");
  rw.binary("Add", rw.binary("Mul", normalized, p[0], "scaled"), p[1], "shifted", rw.output(0));
}

}  // namespace

std::string FoldBatchNorm::refusal(const Graph& g, const Node& n) {
  if (n.op_type() != "BatchNormalization" || !n.domain().empty()) return "not a BatchNormalization";
  if (n.attr_int("training_mode", 0) != 0) return "training_mode=1 normalizes with batch statistics";
  if (n.num_inputs() != 5) return "expects 5 inputs";
  for (size_t i = 0; i < 5; ++i)
    if (!n.input(i)) return "an input is omitted";
  for (size_t i = 1; i < n.num_outputs(); ++i)
    if (is_used(g, n.output(i))) return "the running mean/var outputs are used";
  const Value* x = n.input(0);
  if (!is_float(x->dtype()) || x->shape().size() < 2) return "X is not a floating-point tensor of rank >= 2";
  for (size_t i = 1; i < 5; ++i)
    if (!is_float(n.input(i)->dtype()) || n.input(i)->shape() != Shape{x->shape()[1]})
      return std::string(kParamNames[i - 1]) + " is not a floating-point vector of X's channel count";
  return "";
}

std::string FoldBatchNorm::fold_refusal(const Graph& g, const Node& n) {
  if (!params_constant(n)) return "the parameters are not constant";
  const Value* x = n.input(0);
  const Node* p = x->producer();
  if (!p) return "X is not computed by a node";
  if (x->uses().size() != 1 || g.is_graph_output(x)) return "X has other consumers";
  return producer_refusal(*p, x->shape()[1]);
}

bool FoldBatchNorm::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [&](const Node& n) { return refusal(g, n).empty(); },
      [&](Node* n) {
        if (fold_refusal(g, *n).empty()) fold_into_producer(g, n);
        else lower_to_affine(g, n);
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
