// ONNX shape inference where a crash cannot take kiln down.
//
// libonnx's inference functions dereference null type pointers and divide by attribute values on
// malformed models (14 distinct crashes in 5.5 M fuzzed executions). validate_nodes.h rejects the
// known causes first; this runs the inference itself in a forked child process, which sends the
// inferred types (graph value_info and outputs, a few bytes per value) back through a pipe. When
// the child dies from a signal, the first node whose inference crashes is found by bisection over
// node prefixes (each in its own child) and reported as a user error naming it.
#pragma once
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <functional>
#include <string>

namespace kiln {

// Runs onnx::shape_inference::InferShapes on `model` and copies the inferred value_info and output
// types into it. An exception from the inference is rethrown as UserError("ONNX shape inference
// failed: ..."); a crash is UserError("<node_ctx(i)>: ONNX shape inference crashes on this node
// (signal)..."). `node_ctx(i)` describes node i for messages.
void infer_shapes_sandboxed(onnx::ModelProto& model, const onnx::ShapeInferenceOptions& options,
                            const std::function<std::string(int)>& node_ctx);

}  // namespace kiln
