#include "fusion/cost_model.h"

#include <algorithm>

#include "fusion/op_kind.h"

namespace kiln {

ClassEfficiency class_efficiency(const Target& t, const std::string& cls) {
  auto it = t.efficiency.find(cls);
  if (it == t.efficiency.end()) it = t.efficiency.find("all");
  if (it != t.efficiency.end()) return it->second;
  ClassEfficiency plain;
  plain.overhead_us = t.launch_overhead_us;
  return plain;
}

CostEstimate estimate_time(double flops, int64_t bytes_read, int64_t bytes_written, int kernels, const Target& t,
                           const std::string& cls) {
  CostEstimate c;
  c.flops = flops;
  c.bytes_read = bytes_read;
  c.bytes_written = bytes_written;
  c.cost_class = cls;
  const ClassEfficiency e = class_efficiency(t, cls);
  c.compute_us = flops / (t.peak_gflops * e.compute * 1e3);
  c.memory_us = double(bytes_read + bytes_written) / (t.dram_gbps * e.memory * 1e3);
  c.launch_us = kernels * e.overhead_us;
  return c;
}

CostEstimate estimate_time(const CostEstimate& c, int kernels, const Target& t) {
  return estimate_time(c.flops, c.bytes_read, c.bytes_written, kernels, t, c.cost_class);
}

std::string cost_class(const std::vector<const Node*>& nodes) {
  bool conv = false, grouped = false, matmul = false, pool = false, reduction = false, arithmetic = false;
  for (const Node* n : nodes) {
    const std::string& op = n->op_type();
    if (op == "Conv" || op == "ConvTranspose") (n->attr_int("group", 1) > 1 ? grouped : conv) = true;
    else if (op == "MatMul" || op == "Gemm") matmul = true;
    else if (op == "MaxPool" || op == "AveragePool") pool = true;
    else if (op_kind(*n) == OpKind::Reduction) reduction = true;
    if (node_flops(*n) > 0) arithmetic = true;
  }
  // A kernel's heaviest part names it: a conv with a fused pool or reduction is priced as a conv.
  if (conv) return "conv";
  if (grouped) return "grouped_conv";
  if (matmul) return "matmul";
  if (pool) return "pool";
  if (reduction) return "reduction";
  return arithmetic ? "elementwise" : "movement";
}

int64_t value_bytes(const Value* v) { return shape_numel(v->shape()) * int64_t(dtype_size(v->dtype())); }

namespace {
double numel(const Value* v) { return v ? double(shape_numel(v->shape())) : 0.0; }

// Operations per input element of a reduction: the combine step (add, max, multiply...), plus the
// map applied before it where there is one (square, abs, exp).
double reduction_ops_per_element(const std::string& op) {
  if (op == "ReduceSumSquare" || op == "ReduceL2" || op == "ReduceL1" || op == "ReduceLogSumExp") return 2;
  return 1;
}
// Operations per output of a reduction, applied once to the combined value (a division for the
// means, a square root, a logarithm).
double reduction_ops_per_output(const std::string& op) {
  if (op == "ReduceMean" || op == "GlobalAveragePool" || op == "ReduceL2" || op == "ReduceLogSum" ||
      op == "ReduceLogSumExp")
    return 1;
  return 0;
}
}  // namespace

// Conventions (docs/roofline.md): a multiply-add is 2 FLOPs; every other arithmetic operation on
// one element is 1, transcendental ones included; a reduction combines every input element once
// (kiln's loops start from the identity, so summing N values into M outputs is N adds); windowed
// pools count every window position, padding included, as contractions count padded taps (the
// loops visit them); pure data movement (views, injective ops, casts) and ops kiln cannot see into
// (opaque) are 0.
double node_flops(const Node& n) {
  const std::string& op = n.op_type();
  const Value* out = n.output(0);
  if (op == "MatMul" || op == "Gemm") {
    // 2*M*N*K per output batch; K is A's last dim (or first when Gemm transposes A).
    const Shape& a = n.input(0)->shape();
    int64_t k = a.empty() ? 1 : (op == "Gemm" && n.attr_int("transA", 0) ? a.front() : a.back());
    double f = 2.0 * numel(out) * double(k);
    if (op == "Gemm" && n.input(2)) f += numel(out);
    return f;
  }
  if (op == "Conv") {
    // Each output element: Cin/group * prod(kernel) multiply-adds (W is [Cout, Cin/group, k...];
    // strides and dilations show in the output's size), plus the bias add.
    const Shape& w = n.input(1)->shape();
    double per_out = 1;
    for (size_t i = 1; i < w.size(); ++i) per_out *= double(w[i]);
    return 2.0 * numel(out) * per_out + (n.input(2) ? numel(out) : 0.0);
  }
  if (op == "ConvTranspose") {
    const Shape& w = n.input(1)->shape();  // [Cin, Cout/group, k...]: every input element scatters
    double per_in = 1;
    for (size_t i = 1; i < w.size(); ++i) per_in *= double(w[i]);
    return 2.0 * numel(n.input(0)) * per_in + (n.input(2) ? numel(out) : 0.0);
  }
  if (op == "MaxPool" || op == "AveragePool") {
    // Per output: one max or add per window position (an average's division stands in for the
    // first position's add, which starts from the identity).
    double area = 1;
    for (int64_t k : n.attr_ints("kernel_shape")) area *= double(k);
    return numel(out) * area;
  }
  if (op == "Cast" || op == "CastLike") return 0;  // a change of representation, not arithmetic
  OpKind k = op_kind(n);
  if (k == OpKind::Reduction)
    return numel(n.input(0)) * reduction_ops_per_element(op) + numel(out) * reduction_ops_per_output(op);
  if (k == OpKind::ElementWise || k == OpKind::Broadcast) {
    if (op == "Where") return numel(out);  // one select
    double inputs = 0;
    for (const Value* v : n.inputs()) inputs += v ? 1 : 0;
    // n-ary: n-1 binary ops (Sum, Max, Min; Clip's two bounds), plus Mean's division; unary: 1.
    return numel(out) * (std::max(1.0, inputs - 1) + (op == "Mean" ? 1 : 0));
  }
  return 0;  // injective and opaque ops move data
}

}  // namespace kiln
