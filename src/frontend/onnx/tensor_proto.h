// onnx.TensorProto ↔ kiln::Tensor. Internal to the ONNX frontend (it sees protobuf types).
#pragma once
#include <onnx/onnx_pb.h>

#include <string>

#include "ir/tensor.h"

namespace kiln {

// Converts a TensorProto. `model_dir` resolves external data; a location that escapes model_dir
// (absolute, "..", or a symlink out) is a UserError. `what` names the tensor in errors.
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& model_dir, const std::string& what);

// Maps an ONNX TypeProto tensor elem_type; UserError (naming `what`) for unsupported types.
DType dtype_from_onnx_checked(int32_t elem_type, const std::string& what);

}  // namespace kiln
