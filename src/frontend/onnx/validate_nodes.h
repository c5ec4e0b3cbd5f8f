// kiln's own checks of an ONNX node, run before the node is handed to ONNX's shape inference.
//
// libonnx's inference functions trust their input: a Conv with strides=0 divides by zero
// (convPoolShapeInference), an attribute of the wrong kind or a missing input type is a null
// dereference. ONNX's checker does not catch these either. So before inference, every node's
// attributes are checked against its schema (kind) and against the ranges the op defines (strides,
// dilations and kernel sizes >= 1, pads >= 0, ...), and its inputs must name values defined
// earlier. What is left is caught by running the inference in a child process (sandboxed_inference.h).
#pragma once
#include <onnx/onnx_pb.h>

#include <set>
#include <string>

namespace kiln {

// Throws UserError("<ctx>: what is wrong") for the first problem found. `defined` holds the names
// available before this node (graph inputs, initializers, earlier nodes' outputs); the node's own
// outputs are added to it.
void validate_node(const onnx::NodeProto& n, int64_t opset, const std::string& ctx, std::set<std::string>& defined);

}  // namespace kiln
