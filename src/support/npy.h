// numpy .npy files (format version 1.0/2.0/3.0, little-endian, C order) ↔ Tensor.
#pragma once
#include <string>

#include "ir/tensor.h"

namespace kiln {

// Reads a .npy file; unsupported dtypes (strings, objects, complex, big-endian) and Fortran order
// are UserErrors naming the file.
Tensor read_npy(const std::string& path);

// Writes `t` to `path` atomically: the data goes to a temporary file in the same folder that is
// renamed into place, so a failure never leaves a half-written file.
void write_npy(const std::string& path, const Tensor& t);

// Serialises to the .npy byte format (header + data).
std::string encode_npy(const Tensor& t);

}  // namespace kiln
