// Data-movement primitives shared by the shape and layout kernels.
//
// Transpose, Slice, Split, Expand, Tile, DepthToSpace and SpaceToDepth are all "copy a strided view
// of the input into a fresh contiguous tensor", so they share one copy loop (materialize) instead of
// each walking elements its own way. The loop moves elements as opaque bytes of dtype_size: layout
// ops never look at values, so they work for every dtype without per-type dispatch.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/tensor.h"
#include "reference/op_registry.h"

namespace kiln {

// Element (i0, ..., in-1) of the view is element offset + sum(ik * strides[k]) of the source's
// row-major storage. Strides may be 0 (broadcast) or negative (reversed slices).
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// The identity view of a row-major tensor of `shape`.
StridedView contiguous_view(const Shape& shape);

// The row-major tensor of `shape` with its axes permuted: view axis i is source axis perm[i].
StridedView permuted_view(const Shape& shape, const std::vector<int64_t>& perm);

// Copies `view` of src's storage into a new contiguous tensor of src's dtype and view.shape.
// Contiguous inner runs are copied with memcpy, so slices and most transposes cost one memcpy per row.
Tensor materialize(const Tensor& src, const StridedView& view);

// Values of a shape-like input (Reshape's shape, Slice's starts, ...): an integer tensor of rank <= 1.
std::vector<int64_t> int_values(const Tensor& t, const char* what);

// Per-file registration, called from register_tensor_ops.
void register_layout_ops(OpRegistry& r);  // Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace, SpaceToDepth
void register_pad_op(OpRegistry& r);

}  // namespace kiln
