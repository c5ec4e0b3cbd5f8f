// ONNX → kiln Graph IR.
//
// import_onnx() parses the model with the ONNX library, fixes symbolic input dimensions from
// ImportOptions::input_shapes, runs ONNX's shape inference, converts nodes, attributes and
// initializers (including external data files, which must lie inside the model's folder),
// canonicalises opset-dependent op forms to the newest ONNX form, and gives every value a static
// type. Any problem is a UserError of one line: "<file>: <node> (<op>, opset N): <reason>".
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "ir/graph.h"

namespace kiln {

struct ImportOptions {
  // Fixes the dims of graph inputs, e.g. {"input": {1, 3, 224, 224}}.
  std::map<std::string, Shape> input_shapes;
  // Told (one line, naming the file) about what the model declares and kiln does otherwise: a graph
  // output whose declared shape the graph contradicts gets the computed shape. Unset: silent.
  std::function<void(const std::string&)> warn;
};

std::unique_ptr<Graph> import_onnx(const std::string& path, const ImportOptions& opts = {});

// Reads a serialized onnx.TensorProto (the backend tests' input_N.pb / output_N.pb files).
// `name` receives the tensor's name when non-null.
Tensor read_tensor_proto_file(const std::string& path, std::string* name = nullptr);

}  // namespace kiln
