// MatMul and Gemm reference kernels, and matmul_strided, the matrix-product loop that every
// contraction kernel (these two, Conv, ConvTranspose) reduces to.
//
// matmul_strided picks between two loop orders, both of which sum each output element's products
// in k-ascending order starting from zero (so they agree bit for bit):
//  - i-k-j ("axpy" form) when b's rows are contiguous: the innermost loop streams one row of b into
//    one row of c. The j and k loops are blocked so the active block of b (kBlockK x kBlockN
//    elements) stays in L2 while every row of a passes over it.
//  - i-j-k ("dot" form) otherwise (b transposed, or a single output column), where the innermost
//    loop walks a column of b that is then contiguous.
#include <algorithm>

#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"

namespace kiln::nn {

namespace {
// 128 x 256 floats = 128 KiB of b per block: fits a typical 256 KiB-2 MiB L2 with room for c rows.
constexpr int64_t kBlockK = 128;
constexpr int64_t kBlockN = 256;
}  // namespace

template <class T>
void matmul_strided(const T* a, int64_t a_rs, int64_t a_cs, const T* b, int64_t b_rs, int64_t b_cs, T* c, int64_t m,
                    int64_t k, int64_t n) {
  if (b_cs == 1 && n > 1) {
    std::fill(c, c + m * n, T(0));
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t j1 = std::min(n, j0 + kBlockN);
      for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
        const int64_t k1 = std::min(k, k0 + kBlockK);
        for (int64_t i = 0; i < m; ++i) {
          T* crow = c + i * n;
          const T* arow = a + i * a_rs;
          for (int64_t kk = k0; kk < k1; ++kk) {
            const T av = arow[kk * a_cs];
            const T* brow = b + kk * b_rs;
            for (int64_t j = j0; j < j1; ++j) crow[j] += av * brow[j];
          }
        }
      }
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    const T* arow = a + i * a_rs;
    for (int64_t j = 0; j < n; ++j) {
      const T* bcol = b + j * b_cs;
      T sum = T(0);
      for (int64_t kk = 0; kk < k; ++kk) sum += arow[kk * a_cs] * bcol[kk * b_rs];
      c[i * n + j] = sum;
    }
  }
}

template void matmul_strided<float>(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                                    int64_t, int64_t);
template void matmul_strided<double>(const double*, int64_t, int64_t, const double*, int64_t, int64_t, double*, int64_t,
                                     int64_t, int64_t);
template void matmul_strided<uint32_t>(const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t, int64_t, uint32_t*,
                                       int64_t, int64_t, int64_t);
template void matmul_strided<uint64_t>(const uint64_t*, int64_t, int64_t, const uint64_t*, int64_t, int64_t, uint64_t*,
                                       int64_t, int64_t, int64_t);

namespace {

// The dtypes MatMul and Gemm accept (ONNX opset 13): float16/bfloat16 are widened to float first.
const std::initializer_list<DType> kMatMulTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                                   DType::Int32,   DType::Int64,   DType::UInt32,  DType::UInt64};

// Calls f(T{}) for the storage types that reach the product loops (after widening).
template <class F>
void dispatch_dot(DType dt, F&& f) {
  switch (dt) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::Int32:
      return f(int32_t{});
    case DType::Int64:
      return f(int64_t{});
    case DType::UInt32:
      return f(uint32_t{});
    case DType::UInt64:
      return f(uint64_t{});
    default:
      KILN_CHECK(false, "dispatch_dot: unexpected dtype ", dtype_name(dt));
  }
}

// Undoes widen_to_float on a kernel result.
Tensor narrow_to(const Tensor& t, DType dt) { return t.dtype() == dt ? t : t.cast(dt); }

// numpy.matmul: 1-D operands are promoted to matrices (a row for the first, a column for the
// second) and the added dim is removed again; dims before the last two broadcast as batch dims.
std::vector<Tensor> matmul_kernel(const Node&, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 2);
  expect_same_dtype(in[0], in[1], "MatMul");
  expect_dtype_in(in[0], kMatMulTypes, "MatMul input");
  if (in[0].rank() == 0 || in[1].rank() == 0)
    user_error("MatMul operands must have rank >= 1, got ", shape_str(in[0].shape()), " and ",
               shape_str(in[1].shape()));
  const Tensor a = widen_to_float(in[0]), b = widen_to_float(in[1]);
  Shape as = a.shape(), bs = b.shape();
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    user_error("MatMul inner dims differ: ", shape_str(in[0].shape()), " x ", shape_str(in[1].shape()));
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes({a_batch, b_batch});

  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  Tensor y(a.dtype(), out_shape);
  dispatch_dot(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using D = DotType<T>;
    const D* ad = reinterpret_cast<const D*>(a.data<T>());
    const D* bd = reinterpret_cast<const D*>(b.data<T>());
    D* yd = reinterpret_cast<D*>(y.data<T>());
    for (BroadcastIter it(batch, {a_batch, b_batch}); !it.done(); it.next())
      matmul_strided<D>(ad + it.offset(0) * m * k, k, 1, bd + it.offset(1) * k * n, n, 1, yd + it.index() * m * n, m, k,
                        n);
  });
  return {narrow_to(y, in[0].dtype())};
}

// Y = alpha * A' * B' + beta * C, with A' = transA ? A^T : A (likewise B'), C optional and
// unidirectionally broadcast to Y. For integer types alpha and beta are converted to the integer
// type (ONNX leaves this open; it is exact for the usual 1 and 0).
std::vector<Tensor> gemm_kernel(const Node& node, const std::vector<Tensor>& in) {
  expect_inputs(in, 2, 3);
  expect_same_dtype(in[0], in[1], "Gemm");
  expect_dtype_in(in[0], kMatMulTypes, "Gemm input");
  const bool has_c = in.size() > 2 && in[2].defined();
  if (has_c) expect_same_dtype(in[0], in[2], "Gemm");
  if (in[0].rank() != 2 || in[1].rank() != 2)
    user_error("Gemm operands A and B must be matrices, got ", shape_str(in[0].shape()), " and ",
               shape_str(in[1].shape()));
  const bool trans_a = node.attr_int("transA", 0) != 0, trans_b = node.attr_int("transB", 0) != 0;
  const float alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  const Tensor a = widen_to_float(in[0]), b = widen_to_float(in[1]);
  const Tensor c = has_c ? widen_to_float(in[2]) : Tensor{};

  const int64_t m = trans_a ? a.dim(1) : a.dim(0), k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0), n = trans_b ? b.dim(0) : b.dim(1);
  if (k != kb)
    user_error("Gemm inner dims differ: A", trans_a ? "^T " : " ", shape_str(in[0].shape()), " x B",
               trans_b ? "^T " : " ", shape_str(in[1].shape()));
  const Shape out_shape{m, n};
  std::vector<int64_t> c_strides;
  if (has_c) {
    if (c.rank() > 2 || broadcast_shapes({c.shape(), out_shape}) != out_shape)
      user_error("Gemm C ", shape_str(c.shape()), " does not broadcast to the output ", shape_str(out_shape));
    c_strides = broadcast_strides(c.shape(), out_shape);
  }

  Tensor y(a.dtype(), out_shape);
  dispatch_dot(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using D = DotType<T>;
    // Element (i, kk) of A' lives at i * rs + kk * cs of the stored matrix.
    const int64_t a_rs = trans_a ? 1 : k, a_cs = trans_a ? m : 1;
    const int64_t b_rs = trans_b ? 1 : n, b_cs = trans_b ? k : 1;
    D* yd = reinterpret_cast<D*>(y.data<T>());
    matmul_strided<D>(reinterpret_cast<const D*>(a.data<T>()), a_rs, a_cs, reinterpret_cast<const D*>(b.data<T>()),
                      b_rs, b_cs, yd, m, k, n);
    const D alpha_d = D(T(alpha)), beta_d = D(T(beta));
    const D* cd = has_c ? reinterpret_cast<const D*>(c.data<T>()) : nullptr;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        D v = alpha_d * yd[i * n + j];
        if (cd) v += beta_d * cd[i * c_strides[0] + j * c_strides[1]];
        yd[i * n + j] = v;
      }
  });
  return {narrow_to(y, in[0].dtype())};
}

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add({"MatMul", matmul_kernel, {}});
  r.add({"Gemm", gemm_kernel, {}});
}

}  // namespace kiln::nn
