// Rewrites ops imported from older opsets into their newest ONNX form, so that every later stage
// (kernels, fusion, codegen) handles exactly one form per op: attributes that became inputs move to
// constant inputs (Clip, Slice, Pad, Split, Squeeze, Unsqueeze, Reduce*, TopK, Dropout), legacy
// broadcast/axis attributes become explicit reshapes, pre-13 Softmax/LogSoftmax/Hardmax become
// reshape → op(axis=-1 or 1) → reshape, Upsample and opset-10 Resize become opset-13 Resize, and
// Scatter becomes ScatterElements.
// All Reduce* ops take their axes as input 1 (the opset-18 form), even where ONNX 1.12 still had an
// attribute, so the reduction kernels have one shape.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln {

// Op types that only exist in old opsets and that canonicalisation renames (e.g. "Upsample").
bool is_legacy_op(const std::string& op_type);

// Canonicalises node n of graph g imported at `opset`. Input types must be known. Returns the nodes
// whose output types must be completed, in topological order (n itself and any nodes inserted).
std::vector<Node*> canonicalize_opset(Graph& g, Node* n, int64_t opset);

}  // namespace kiln
