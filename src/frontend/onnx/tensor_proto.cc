// Placeholder until the frontend lands (this session).
#include "frontend/onnx/onnx_import.h"
