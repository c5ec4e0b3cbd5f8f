// A per-thread bound on tensor allocations (enforced by Tensor's constructor, tensor.cc).
#pragma once
#include <cstdint>

namespace kiln {

// While one is alive, this thread refuses to allocate a tensor above `max_bytes` (a UserError
// naming the shape and the limit). Type completion evaluates kernels on untrusted models: a
// 100-byte model whose Tile ONNX could not type must not allocate 3 GB to learn its shape.
class TensorSizeLimit {
 public:
  explicit TensorSizeLimit(uint64_t max_bytes);
  ~TensorSizeLimit();
  TensorSizeLimit(const TensorSizeLimit&) = delete;
  TensorSizeLimit& operator=(const TensorSizeLimit&) = delete;
  static uint64_t current();  // UINT64_MAX when no limit is in force

 private:
  uint64_t saved_;
};

}  // namespace kiln
