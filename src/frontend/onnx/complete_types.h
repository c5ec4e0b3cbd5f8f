// Gives static types to the outputs of a node that ONNX's shape inference left untyped (or typed
// with symbolic dims), by evaluating the node's reference kernel: constant inputs with their
// values, other inputs as zero tensors of their type. Inputs whose values decide output shapes
// (OpInfo::shape_inputs, e.g. Reshape's `shape`) must then be constants — otherwise the shape is
// data-dependent and kiln, which compiles static shapes, rejects the model with a UserError.
// Running a kernel on zeros costs its compute; ONNX infers almost every node, so this is rare.
#pragma once
#include "ir/graph.h"

namespace kiln {

void complete_types(Graph& g, Node* n);

}  // namespace kiln
