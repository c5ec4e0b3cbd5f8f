// Runs one op through the reference executor for kernel unit tests.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "reference/executor.h"

namespace kiln::testing {

// Builds a one-node graph around `op` (inputs may be undefined Tensors for omitted optional inputs)
// and returns its outputs. Output types are left undefined so the kernel decides them.
inline std::vector<Tensor> run_op(const std::string& op, const std::vector<Tensor>& inputs, AttributeMap attrs = {},
                                  size_t num_outputs = 1) {
  Graph g;
  std::vector<Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i)
    ins.push_back(inputs[i].defined() ? g.add_constant("in" + std::to_string(i), inputs[i]) : nullptr);
  for (size_t i = 0; i < num_outputs; ++i) outs.push_back(g.add_value("out" + std::to_string(i), {}));
  Node* n = g.add_node(op, ins, outs, std::move(attrs), "test_" + op);
  std::vector<Tensor> args;
  for (Value* v : n->inputs()) args.push_back(v ? v->constant() : Tensor{});
  return run_node(*n, args);
}

// Short tensor literals for kernel tests: f32({1, 2, 3}, {3}).
inline Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, std::move(s)); }
inline Tensor i64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, std::move(s)); }
inline Tensor i32(std::vector<int32_t> v, Shape s) { return Tensor::from_vector<int32_t>(v, std::move(s)); }

template <class T>
std::vector<T> values(const Tensor& t) {
  const T* d = t.data<T>();
  return std::vector<T>(d, d + t.numel());
}

}  // namespace kiln::testing
