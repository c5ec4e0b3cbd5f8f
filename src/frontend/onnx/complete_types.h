// Gives static types to the outputs of a node that ONNX's shape inference left untyped (or typed
// with symbolic dims), by evaluating the node's reference kernel: inputs with known values (see
// below) as themselves, other inputs as zero tensors of their type. Inputs whose values decide
// output shapes (OpInfo::shape_inputs, e.g. Reshape's `shape`) must have known values — otherwise
// the shape is data-dependent and kiln, which compiles static shapes, rejects the model.
// Running a kernel on zeros costs its compute; ONNX infers almost every node, so this is rare.
//
// Known values: constants, plus the results of small computations on them and on static shapes
// (Shape, Size, and any node whose inputs are all known and small), tracked in a side table while
// the importer walks the graph. The graph itself is not changed; fold_constants does that later.
#pragma once
#include <unordered_map>

#include "ir/graph.h"

namespace kiln {

using KnownValues = std::unordered_map<const Value*, Tensor>;

// Types n's outputs where needed, then records n's outputs in `known` when they are computable.
void complete_types(Graph& g, Node* n, KnownValues& known);

}  // namespace kiln
