#include "fusion/cost_model.h"

#include <algorithm>

#include "fusion/op_kind.h"

namespace kiln {

CostEstimate estimate_time(double flops, int64_t bytes_read, int64_t bytes_written, int kernels, const Target& t) {
  CostEstimate c;
  c.flops = flops;
  c.bytes_read = bytes_read;
  c.bytes_written = bytes_written;
  c.compute_us = flops / (t.peak_gflops * 1e3);
  c.memory_us = double(bytes_read + bytes_written) / (t.dram_gbps * 1e3);
  c.launch_us = kernels * t.launch_overhead_us;
  return c;
}

int64_t value_bytes(const Value* v) { return shape_numel(v->shape()) * int64_t(dtype_size(v->dtype())); }

namespace {
double numel(const Value* v) { return v ? double(shape_numel(v->shape())) : 0.0; }
}  // namespace

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
    // Each output element: Cin/group * prod(kernel) multiply-adds, plus the bias add.
    const Shape& w = n.input(1)->shape();
    double per_out = 1;
    for (size_t i = 1; i < w.size(); ++i) per_out *= double(w[i]);
    return 2.0 * numel(out) * per_out + (n.input(2) ? numel(out) : 0.0);
  }
  if (op == "ConvTranspose") {
    const Shape& w = n.input(1)->shape();  // [Cin, Cout/group, k...]: every input element scatters
    double per_in = 1;
    for (size_t i = 1; i < w.size(); ++i) per_in *= double(w[i]);
    return 2.0 * numel(n.input(0)) * per_in;
  }
  if (op == "MaxPool" || op == "AveragePool") {
    double area = 1;
    for (int64_t k : n.attr_ints("kernel_shape")) area *= double(k);
    return numel(out) * area;
  }
  OpKind k = op_kind(n);
  if (k == OpKind::Reduction) return numel(n.input(0));
  if (k == OpKind::ElementWise || k == OpKind::Broadcast) {
    double inputs = 0;
    for (const Value* v : n.inputs()) inputs += v ? 1 : 0;
    return numel(out) * std::max(1.0, inputs - 1);  // a binary op is one FLOP per element
  }
  return 0;  // injective and opaque ops move data
}

}  // namespace kiln
