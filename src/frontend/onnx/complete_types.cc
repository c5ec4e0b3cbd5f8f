#include "frontend/onnx/complete_types.h"

#include <algorithm>

#include "reference/op_registry.h"

namespace kiln {

void complete_types(Graph& g, Node* n) {
  bool complete = std::all_of(n->outputs().begin(), n->outputs().end(),
                              [](Value* v) { return v->dtype() != DType::Undefined; });
  if (complete) return;
  const OpInfo* info = OpRegistry::global().find(n->op_type());
  if (!info) user_error("unsupported op");
  std::vector<Tensor> args;
  for (size_t i = 0; i < n->num_inputs(); ++i) {
    Value* v = n->input(i);
    if (!v) {
      args.emplace_back();
    } else if (v->is_constant()) {
      args.push_back(v->constant());
    } else {
      if (std::count(info->shape_inputs.begin(), info->shape_inputs.end(), int(i)))
        user_error("input ", i, " ('", v->name(), "') decides the output shape but is not a constant; ",
                   "kiln needs static shapes (fix input dims with --input-shape)");
      KILN_CHECK(v->dtype() != DType::Undefined, "input '", v->name(), "' of ", n->describe(), " has no type");
      args.emplace_back(v->dtype(), v->shape());
    }
  }
  std::vector<Tensor> outs = info->kernel(*n, args);
  KILN_CHECK(outs.size() >= n->num_outputs(), n->describe(), ": kernel returned too few outputs");
  for (size_t i = 0; i < n->num_outputs(); ++i) {
    Value* o = n->output(i);
    if (o->dtype() == DType::Undefined) {
      if (!outs[i].defined()) user_error("output ", i, " ('", o->name(), "') is not produced by kiln's kernel");
      o->set_type(TensorType{outs[i].dtype(), outs[i].shape()});
    }
  }
  (void)g;
}

}  // namespace kiln
