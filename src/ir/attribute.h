// Node attributes: the ONNX attribute kinds kiln supports (subgraphs are rejected by the frontend).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/tensor.h"

namespace kiln {

using Attribute = std::variant<int64_t, float, std::string, Tensor, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>>;

// Ordered by name so printing is stable.
using AttributeMap = std::map<std::string, Attribute>;

const char* attribute_kind_name(const Attribute& a);  // "int", "float", "string", "tensor", "ints", "floats", "strings"

}  // namespace kiln
