// Small helpers shared by the reference kernels: axis normalisation, multidirectional (numpy)
// broadcasting, and input checks that produce clear UserErrors.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln {

// Maps a possibly negative axis into [0, rank); UserError when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank);

// ONNX multidirectional broadcasting of several shapes; UserError when incompatible.
Shape broadcast_shapes(const std::vector<Shape>& shapes);

// Element strides of `in` viewed as `out` under broadcasting (0 on broadcast dims). `in` must be
// broadcastable to `out` (right-aligned).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Walks the elements of `out` in row-major order while tracking, for each of several inputs, the
// flat offset of the broadcast element: for (BroadcastIter it(out, {a, b}); !it.done(); it.next())
// uses it.offset(0), it.offset(1) and it.index() (the flat output index).
class BroadcastIter {
 public:
  BroadcastIter(const Shape& out, const std::vector<Shape>& ins);
  bool done() const { return index_ >= numel_; }
  void next();
  int64_t index() const { return index_; }
  int64_t offset(size_t k) const { return offsets_[k]; }

 private:
  Shape out_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int64_t> counter_, offsets_;
  int64_t index_ = 0, numel_ = 0;
};

// Checks on kernel inputs (throw UserError).
void expect_inputs(const std::vector<Tensor>& in, size_t min_count, size_t max_count);
void expect_same_dtype(const Tensor& a, const Tensor& b, const char* what);
void expect_float(const Tensor& t, const char* what);

// Product of dims in [begin, end).
int64_t dims_product(const Shape& s, int64_t begin, int64_t end);

}  // namespace kiln
