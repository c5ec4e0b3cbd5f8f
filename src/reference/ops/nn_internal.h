// Private helpers shared by the neural-network reference kernels (nn_*.cc): the per-file
// registration functions that register_nn_ops() calls, the one matrix-product loop every
// contraction (MatMul, Gemm, Conv, ConvTranspose) is built on, and the sliding-window geometry
// (strides, dilations, pads, auto_pad, ceil_mode) that Conv and the pools share.
//
// Numerics policy of these kernels (the oracle's contract, see ARCHITECTURE.md "Numerics"):
//  - Dot products accumulate in the storage type: float32 in float32 (what a float32 compiled kernel
//    does; double is not needed: every ONNX conformance test of these ops passes at rtol 1e-3, and
//    resnet18 / the BERT-style encoder match PyTorch to ~2e-6 relative), float64 in float64, and
//    integers with wrap-around (two's complement) arithmetic. float16/bfloat16 inputs are widened to
//    float32, computed as float32 and rounded once at the end.
//  - matmul_strided sums each output element k-ascending whichever loop order and blocking it picks,
//    so its result does not depend on them (a naive triple loop gives the same bits).
//  - Statistics (means, variances, averaging windows) accumulate in double: they sum up to N*H*W
//    elements and the ONNX references use numpy's pairwise summation, which a sequential float32
//    sum does not track.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"
#include "reference/op_registry.h"

namespace kiln::nn {

void register_matmul_ops(OpRegistry& r);  // MatMul, Gemm
void register_conv_ops(OpRegistry& r);    // Conv, ConvTranspose
void register_pool_ops(OpRegistry& r);    // MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
void register_norm_ops(OpRegistry& r);    // BatchNormalization, InstanceNormalization,
                                          // LayerNormalization, LRN, MeanVarianceNormalization
void register_einsum_ops(OpRegistry& r);  // Einsum
void register_recurrent_ops(OpRegistry& r);  // RNN, GRU, LSTM (nn_recurrent.cc)

// The type a dot product is computed in for storage type T (T itself for float/double; the unsigned
// type of the same width for integers, so overflow wraps instead of being undefined behaviour).
// Half/BFloat16 never get here: kernels widen them to float first (widen_to_float).
template <class T, bool = std::is_floating_point_v<T>>
struct DotTypeOf {
  using type = T;
};
template <class T>
struct DotTypeOf<T, false> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using DotType = typename DotTypeOf<T>::type;

// c[m x n] (contiguous, row-major) = a[m x k] * b[k x n], with a and b given by element strides
// (row stride, column stride), so transposed operands need no copy. Overwrites c. Instantiated for
// float, double, uint32_t and uint64_t (pass signed integer data reinterpreted as unsigned).
template <class T>
void matmul_strided(const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs, int64_t b_cs, T* c, int64_t m,
                    int64_t k, int64_t n);

// float16/bfloat16 tensors converted to float32; any other tensor (and undefined ones) unchanged.
Tensor widen_to_float(const Tensor& t);
bool is_half_like(DType dt);

// Throws UserError unless t's dtype is one of `allowed`; `what` names the operand.
void expect_dtype_in(const Tensor& t, std::initializer_list<DType> allowed, const char* what);

// Sliding-window geometry over the spatial dims (everything after N and C) of Conv and the pools.
struct WindowGeometry {
  Shape in, kernel, stride, dilation, pad_begin, pad_end, out;
  int64_t rank() const { return int64_t(in.size()); }
  // Extent of the dilated kernel along dim d: (k - 1) * dilation + 1.
  int64_t span(size_t d) const { return (kernel[d] - 1) * dilation[d] + 1; }
};

// Reads strides, dilations, pads and auto_pad from `node` (ONNX defaults: 1, 1, 0, NOTSET) and
// computes pads and output sizes for input spatial dims `in` and kernel `kernel`. ceil_mode (pools
// only) rounds the output size up, but like PyTorch and ONNX Runtime drops a last window that
// would start entirely inside the end padding. Throws UserError on bad attributes or an input
// smaller than the kernel.
WindowGeometry window_geometry(const Node& node, const Shape& in, const Shape& kernel, bool ceil_mode);

// Integer-list attribute `name` with exactly `count` values, each >= min (ONNX strides, dilations,
// pads, output_padding); absent means `count` copies of dflt.
std::vector<int64_t> per_dim_attr(const Node& node, const char* name, size_t count, int64_t dflt, int64_t min);

// Spatial dims of an N x C x D1 x ... tensor; UserError when rank < min_rank.
Shape spatial_dims(const Tensor& x, int64_t min_rank, const char* what);

}  // namespace kiln::nn
