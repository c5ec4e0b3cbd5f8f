#include "fusion/op_kind.h"

#include <map>

namespace kiln {

namespace {

const std::map<std::string, OpKind>& table() {
  static const std::map<std::string, OpKind> t = [] {
    std::map<std::string, OpKind> m;
    auto add = [&](OpKind k, std::initializer_list<const char*> ops) {
      for (const char* o : ops) m[o] = k;
    };
    add(OpKind::ElementWise,
        {"Abs", "Neg", "Reciprocal", "Sqrt", "Exp", "Log", "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu",
         "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "ThresholdedRelu", "Shrink",
         "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil",
         "Round", "Sign", "Not", "IsNaN", "IsInf", "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum",
         "Mean", "PRelu", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or",
         "Xor", "Clip", "Cast", "CastLike"});
    add(OpKind::Injective,
        {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Concat", "Split",
         "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "DepthToSpace",
         "SpaceToDepth", "Resize", "Trilu", "EyeLike", "OneHot", "Range", "ConstantOfShape",
         // Not one read per output, but loop spellings of the same kind: each output sums (CumSum)
         // or ranks (TopK) its row, unrolled (loop/lower_injective.cc), so fusion treats them as
         // remaps.
         "CumSum", "TopK"});
    add(OpKind::Reduction,
        {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "GlobalAveragePool",
         "GlobalMaxPool", "MaxPool", "AveragePool"});
    add(OpKind::Contraction, {"MatMul", "Gemm", "Conv", "ConvTranspose"});
    // Composites are lowered before fusion (transforms/lowering); if one survives (e.g. a
    // LayerNormalization whose Mean output is used), it runs as its own kernel. ScatterElements
    // and ScatterND are generated code, but a kernel of their own (loop/lower_scatter.cc: a copy,
    // then the updates in order), which is what opaque tells fusion.
    add(OpKind::Opaque,
        {"ScatterElements", "ScatterND", "Einsum", "LRN", "Hardmax", "Softmax", "LogSoftmax",
         "LayerNormalization", "InstanceNormalization", "BatchNormalization", "MeanVarianceNormalization",
         "Shape", "Size", "Constant",
         // Decomposed before fusion (transforms/decompose_grid_sample); what that pass refuses
         // (an empty tensor) runs as a library kernel.
         "GridSample",
         // A kernel of their own, the whole layer (loop/lower_recurrent.cc); those that emitter
         // refuses are unrolled into MatMuls and elementwise ops by decompose_recurrent, and one
         // that pass refuses too runs as a library kernel.
         "RNN", "GRU", "LSTM"});
    return m;
  }();
  return t;
}

}  // namespace

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::ElementWise: return "elementwise";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Injective: return "injective";
    case OpKind::Reduction: return "reduction";
    case OpKind::Contraction: return "contraction";
    case OpKind::Opaque: return "opaque";
  }
  return "?";
}

std::optional<OpKind> op_kind_of_type(const std::string& op_type) {
  auto it = table().find(op_type);
  if (it == table().end()) return std::nullopt;
  return it->second;
}

OpKind op_kind(const Node& n) {
  if (!n.domain().empty()) return OpKind::Opaque;
  auto k = op_kind_of_type(n.op_type());
  if (!k) return OpKind::Opaque;
  if (*k == OpKind::ElementWise) {
    const Shape& out = n.output(0)->shape();
    for (Value* in : n.inputs())
      if (in && in->shape() != out) return OpKind::Broadcast;
  }
  return *k;
}

bool is_view(const Node& n) {
  const std::string& op = n.op_type();
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity") return true;
  // Inference Dropout without a used mask is an identity.
  return op == "Dropout" && (n.num_outputs() < 2 || n.output(1)->uses().empty());
}

bool is_windowed_reduction(const Node& n) { return n.op_type() == "MaxPool" || n.op_type() == "AveragePool"; }

}  // namespace kiln
