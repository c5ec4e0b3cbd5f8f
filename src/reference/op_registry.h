// The registry of operators kiln understands. Each entry carries the reference kernel (the oracle
// interpreter's implementation) and what the compiler needs to know about the op. Later stages add
// their per-op facts (OpKind for fusion, FLOP counting) to OpInfo so there is one table per op.
//
// Ops are canonicalised by the ONNX frontend to their newest ONNX form (e.g. Clip's min/max are
// inputs, Slice's starts/ends are inputs, Softmax has opset-13 semantics), so each kernel
// implements exactly one form.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln {

// Reference kernel: computes all outputs of `node` from its input tensors. inputs[i] is undefined
// (Tensor{}) for an omitted optional input. Kernels validate what they rely on and throw UserError
// (without node context; the executor adds it) for invalid attributes or shapes.
using KernelFn = std::function<std::vector<Tensor>(const Node& node, const std::vector<Tensor>& inputs)>;

struct OpInfo {
  std::string name;
  KernelFn kernel;
  // Inputs whose *values* (not just shapes) determine output shapes, e.g. Reshape's `shape` (1),
  // Slice's starts/ends/axes/steps (1,2,3,4). kiln needs static shapes, so these must be constant.
  std::vector<int> shape_inputs;
};

class OpRegistry {
 public:
  static const OpRegistry& global();
  void add(OpInfo info);
  // nullptr when op_type (default ONNX domain) is not supported.
  const OpInfo* find(const std::string& op_type) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<OpInfo> ops_;
};

// One registration function per ops file (explicit calls: static-initialiser registration would be
// dropped by the linker from a static library).
void register_elementwise_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_reduction_ops(OpRegistry& r);
void register_tensor_ops(OpRegistry& r);

}  // namespace kiln
