// Private helpers of the indexing and generator reference kernels (index_*.cc): reading and bounds
// checking index tensors, and the element-wise combine step of the Scatter* reductions.
//
// The indexing ops (Gather*, Scatter* without reduction, Trilu, nearest Resize) never look at element
// values, so they move elements as raw bytes of dtype_size(); that keeps them exact for every dtype
// (int64 above 2^53, NaN payloads) with one code path.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "reference/op_registry.h"

namespace kiln {

// One registration function per file; register_index_ops (index_ops.cc) calls them all.
void register_gather_ops(OpRegistry& r);     // Gather, GatherElements, GatherND
void register_scatter_ops(OpRegistry& r);    // ScatterElements, ScatterND
void register_resize_ops(OpRegistry& r);     // Resize
void register_grid_sample_ops(OpRegistry& r);  // GridSample
void register_generator_ops(OpRegistry& r);  // OneHot, Trilu, EyeLike, Range, ConstantOfShape

namespace index_detail {

// All elements of an index tensor (int32 or int64, as ONNX's Tind allows); UserError otherwise.
std::vector<int64_t> read_indices(const Tensor& t, const char* what);

// Maps an index in [-dim, dim) to [0, dim); anything else is a UserError (models are untrusted, so
// an out-of-range index must never become an out-of-bounds memory access).
inline int64_t wrap_index(int64_t i, int64_t dim, const char* what) {
  if (i < -dim || i >= dim) user_error(what, " index ", i, " is out of range for a dimension of size ", dim);
  return i < 0 ? i + dim : i;
}

// Copies `count` elements of `elem_size` bytes (memcpy with nullptr is undefined even for 0 bytes,
// and empty tensors have no storage).
inline void copy_elems(void* dst, const void* src, int64_t count, size_t elem_size) {
  if (count > 0) std::memcpy(dst, src, size_t(count) * elem_size);
}

// ScatterElements / ScatterND `reduction` attribute. max/min are the opset-18 additions; they cost
// nothing here and keep the kernel ready for the next canonical form.
enum class Reduction { None, Add, Mul, Max, Min };
Reduction parse_reduction(const Node& node);

// dst = dst (op) src. Integers wrap like two's-complement hardware instead of hitting signed-overflow
// UB; bool add/mul are or/and (what ONNX Runtime does); half types compute in float.
template <class T>
void combine(T& dst, const T& src, Reduction r) {
  if constexpr (std::is_same_v<T, bool>) {
    if (r == Reduction::Add || r == Reduction::Max) dst = dst || src;
    else if (r == Reduction::Mul || r == Reduction::Min) dst = dst && src;
    else dst = src;
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    float a = float(dst), b = float(src);
    switch (r) {
      case Reduction::None: dst = src; break;
      case Reduction::Add: dst = T(a + b); break;
      case Reduction::Mul: dst = T(a * b); break;
      case Reduction::Max: dst = (a >= b || a != a) ? dst : src; break;
      case Reduction::Min: dst = (a <= b || a != a) ? dst : src; break;
    }
  } else if constexpr (std::is_integral_v<T>) {
    switch (r) {
      case Reduction::None: dst = src; break;
      case Reduction::Add: dst = T(uint64_t(dst) + uint64_t(src)); break;
      case Reduction::Mul: dst = T(uint64_t(dst) * uint64_t(src)); break;
      case Reduction::Max: dst = dst < src ? src : dst; break;
      case Reduction::Min: dst = src < dst ? src : dst; break;
    }
  } else {
    switch (r) {
      case Reduction::None: dst = src; break;
      case Reduction::Add: dst = dst + src; break;
      case Reduction::Mul: dst = dst * src; break;
      // NaN propagates (like numpy's maximum/minimum).
      case Reduction::Max: dst = (dst >= src || dst != dst) ? dst : src; break;
      case Reduction::Min: dst = (dst <= src || dst != dst) ? dst : src; break;
    }
  }
}

}  // namespace index_detail
}  // namespace kiln
