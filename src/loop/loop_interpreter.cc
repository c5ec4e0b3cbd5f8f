#include "loop/loop_interpreter.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_map>

#include "kernels/depthwise.h"
#include "kernels/microkernel.h"
#include "reference/ops/elementwise_internal.h"
#include "support/error.h"

namespace kiln::loop {
namespace {

// Numerics shared with the reference kernels (the interpreter must agree with them exactly).
using elementwise::nan_max;
using elementwise::nan_min;
using elementwise::round_to_odd_float;

// One scalar: float types keep their (exactly representable) value in f, integers and bool in i
// (uint64 as its bit pattern). The Expr's type says which.
struct Scalar {
  double f = 0;
  int64_t i = 0;
};

template <class T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The C++ type an element type computes in (float16/bfloat16 in float).
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

template <class T>
T get(const Scalar& s) {
  if constexpr (std::is_same_v<T, bool>) return s.i != 0;
  else if constexpr (std::is_integral_v<T>) return T(s.i);
  else if constexpr (is_half_v<T>) return T(float(s.f));
  else return T(s.f);
}

template <class T>
Scalar put(T v) {
  Scalar s;
  if constexpr (std::is_integral_v<T>) s.i = int64_t(v);
  else if constexpr (is_half_v<T>) s.f = double(float(v));
  else s.f = double(v);
  return s;
}

// Wrapping integer arithmetic in the unsigned type of at least int width.
template <class T>
using wide_unsigned_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Cast semantics (see the header): those of kiln's reference Cast op.
template <class From, class To>
To convert(From v) {
  if constexpr (is_half_v<To>) {
    if constexpr (std::is_same_v<From, float> || is_half_v<From>) return To(float(v));
    else return To(round_to_odd_float(double(v)));
  } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<From>) {
    return elementwise::saturate_int<To>(double(compute_t<From>(v)));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return To(compute_t<From>(v));
  }
}

class Interpreter {
 public:
  void bind(const BufferPtr& b, Tensor* t) {
    KILN_CHECK(t && t->dtype() == b->dtype && t->numel() == b->numel(), "buffer '", b->name, "' is ",
               dtype_name(b->dtype), shape_str(b->shape), ", bound to ",
               t ? std::string(dtype_name(t->dtype())) + shape_str(t->shape()) : std::string("nothing"));
    buffers_[b.get()] = t;
  }

  void exec(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::For: {
        const int64_t n = eval(s->extent).i;
        // As in the C emitter: an inner loop named like an enclosing one would capture its uses.
        KILN_CHECK(loops_.insert(s->var).second, "interpreter: loop variable '", s->var,
                   "' shadows an enclosing loop's");
        vars_.push_back({s->var, Scalar{}});
        const size_t slot = vars_.size() - 1;
        for (int64_t i = 0; i < n; ++i) {
          vars_[slot].second.i = i;
          exec_list(s->body);
        }
        vars_.pop_back();
        loops_.erase(s->var);
        break;
      }
      case StmtKind::Store: {
        KILN_CHECK(s->value->type == s->buffer->dtype, "store of a ", dtype_name(s->value->type), " value into ",
                   dtype_name(s->buffer->dtype), " buffer '", s->buffer->name, "'");
        Tensor* t = tensor(s->buffer);
        const int64_t idx = checked_index(s->buffer, eval(s->index).i);
        const Scalar v = eval(s->value);
        dispatch_dtype(t->dtype(), [&](auto tag) {
          using T = decltype(tag);
          t->data<T>()[idx] = get<T>(v);
        });
        break;
      }
      case StmtKind::Let: vars_.push_back({s->var, eval(s->value)}); break;
      case StmtKind::Assign: lookup(s->var) = eval(s->value); break;
      case StmtKind::Block: exec_list(s->body); break;
      case StmtKind::If: exec_list(eval(s->cond).i != 0 ? s->body : s->else_body); break;
      case StmtKind::Allocate: {
        Tensor local(s->buffer->dtype, s->buffer->shape);
        buffers_[s->buffer.get()] = &local;
        exec_list(s->body);
        buffers_.erase(s->buffer.get());
        break;
      }
      case StmtKind::Call: call_microkernel(*s); break;
      case StmtKind::Comment: break;
    }
  }

 private:
  // kiln_mk_f32(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc) (src/kernels/microkernel.h), with every
  // element it touches checked to lie inside its buffer.
  void call_microkernel(const StmtNode& s) {
    if (s.text == kernels::kMicroKernelEpF32 || s.text == kernels::kMicroKernelSegEpF32) return call_epilogue_microkernel(s);
    if (s.text == kernels::kMicroKernelSegF32) return call_segmented_microkernel(s);
    if (s.text == kernels::kTransposeF32) return call_transpose(s);
    if (s.text == kernels::kDepthwiseF32) return call_depthwise(s);
    if (s.text == kernels::kDepthwiseBlockedF32) return call_depthwise_blocked(s);
    if (s.text == kernels::kGroupedConvF32) return call_grouped_conv(s);
    KILN_CHECK(s.text == kernels::kMicroKernelF32 && s.call_args.size() == 11, "the interpreter cannot run call ",
               s.text);
    const auto& a = s.call_args;
    auto i64 = [&](size_t k) { return eval(a[k]).i; };
    auto ptr = [&](size_t k, int64_t rows, int64_t row_stride, int64_t cols, int64_t col_stride) {
      return f32_block(s, k, rows, row_stride, cols, col_stride);
    };
    const int64_t mr = i64(0), nr = i64(1), kc = i64(2), as_i = i64(4), as_k = i64(5), bs_k = i64(7), ldc = i64(9);
    KILN_CHECK(mr >= 0 && nr >= 0 && kc >= 0 && as_i >= 0 && as_k >= 0 && bs_k >= 0 && ldc >= 0,
               "negative micro-kernel extent or stride");
    const float* pa = ptr(3, mr, as_i, kc, as_k);
    const float* pb = ptr(6, kc, bs_k, nr, 1);
    float* pc = ptr(8, mr, ldc, nr, 1);
    kernels::microkernel_f32(mr, nr, kc, pa, as_i, as_k, pb, bs_k, pc, ldc, i64(10) != 0);
  }

  // The epilogue forms (kernels/microkernel.h): the plain or segmented form on the first
  // arguments, then the epilogue over the tile.
  void call_epilogue_microkernel(const StmtNode& s) {
    const bool seg = s.text == kernels::kMicroKernelSegEpF32;
    const size_t n = seg ? 13 : 11;
    KILN_CHECK(s.call_args.size() == n + 7, s.text, " takes ", n + 7, " arguments");
    StmtNode plain = s;
    plain.text = seg ? kernels::kMicroKernelSegF32 : kernels::kMicroKernelF32;
    plain.call_args.resize(n);
    call_microkernel(plain);
    const auto& a = s.call_args;
    auto i64 = [&](size_t k) { return eval(a[k]).i; };
    auto f32 = [&](size_t k) {
      KILN_CHECK(a[k]->type == DType::Float32, s.text, " argument ", k, " is not float32");
      return float(eval(a[k]).f);
    };
    const int64_t mr = i64(0), nr = i64(1), ldc = i64(seg ? 11 : 9), ep = i64(n), nbias = i64(n + 2);
    KILN_CHECK(ep >= 0 && ep <= (kernels::kEpBias | kernels::kEpLow | kernels::kEpHigh | kernels::kEpResidual) && nbias >= 0,
               s.text, ": bad epilogue flags or bias count");
    if (mr <= 0 || nr <= 0) return;
    float* c = f32_block(s, seg ? 10 : 8, mr, ldc, nr, 1);
    const int64_t nb = std::min(nbias, nr), ldr = i64(n + 6);
    const float* bias = (ep & kernels::kEpBias) && nb > 0 ? f32_block(s, n + 1, 1, 0, nb, 1) : nullptr;
    const float* res = ep & kernels::kEpResidual ? f32_block(s, n + 5, mr, ldr, nr, 1) : nullptr;
    kernels::microkernel_epilogue_f32(mr, nr, c, ldc, ep, bias, nb, f32(n + 3), f32(n + 4), res, ldr);
  }

  // Float32 argument k of call `s` (an Address), the block of rows × cols elements at the given
  // strides from it checked to lie inside its buffer (its first and last element).
  float* f32_block(const StmtNode& s, size_t k, int64_t rows, int64_t row_stride, int64_t cols, int64_t col_stride) {
    const Expr& e = s.call_args.at(k);
    KILN_CHECK(e->kind == ExprKind::Address, s.text, " argument ", k, " is not an address");
    Tensor* t = tensor(e->buffer);
    KILN_CHECK(t->dtype() == DType::Float32, s.text, " buffer '", e->buffer->name, "' is not float32");
    const int64_t base = eval(e->args[0]).i;
    if (rows > 0 && cols > 0) {
      checked_index(e->buffer, base);
      checked_index(e->buffer, base + (rows - 1) * row_stride + (cols - 1) * col_stride);
    }
    return t->data<float>() + base;
  }

  // kiln_dw_f32(kh, kw, rows, cols, in, ldi, w, out, ldo) (kernels/depthwise.h), the blocks it
  // reads and writes checked.
  void call_depthwise(const StmtNode& s) {
    KILN_CHECK(s.call_args.size() == 9, "kiln_dw_f32 takes 9 arguments");
    auto i64 = [&](size_t k) { return eval(s.call_args[k]).i; };
    const int64_t kh = i64(0), kw = i64(1), rows = i64(2), cols = i64(3), ldi = i64(5), ldo = i64(8);
    KILN_CHECK(kh >= 1 && kw >= 1 && rows >= 0 && cols >= 0 && ldi >= 0 && ldo >= 0, "bad depthwise micro-kernel extents");
    if (rows == 0 || cols == 0) return;
    const float* in = f32_block(s, 4, rows + kh - 1, ldi, cols + kw - 1, 1);
    const float* w = f32_block(s, 6, 1, 0, kh * kw, 1);
    float* out = f32_block(s, 7, rows, ldo, cols, 1);
    kernels::depthwise_f32(kh, kw, rows, cols, in, ldi, w, out, ldo);
  }

  // The `taps` offsets of a stencil micro-kernel's table (argument k, an int64 Address), each read
  // checked to lie in its buffer and to be non-negative.
  std::vector<int64_t> tap_offsets(const StmtNode& s, size_t k, int64_t taps) {
    const Expr& e = s.call_args.at(k);
    KILN_CHECK(e->kind == ExprKind::Address, s.text, " argument ", k, " is not an address");
    Tensor* t = tensor(e->buffer);
    KILN_CHECK(t->dtype() == DType::Int64, s.text, " offsets '", e->buffer->name, "' are not int64");
    const int64_t o0 = eval(e->args[0]).i;
    std::vector<int64_t> off(static_cast<size_t>(taps));
    for (int64_t i = 0; i < taps; ++i) {
      checked_index(e->buffer, o0 + i);
      off[size_t(i)] = t->data<int64_t>()[o0 + i];
      KILN_CHECK(off[size_t(i)] >= 0, s.text, ": negative tap offset");
    }
    return off;
  }

  // kiln_dwc_f32(taps, off, rows, cols, in, ldi, w, out, ldo) (kernels/depthwise.h), the offset
  // table and the blocks it reads and writes checked.
  void call_depthwise_blocked(const StmtNode& s) {
    KILN_CHECK(s.call_args.size() == 9, "kiln_dwc_f32 takes 9 arguments");
    const auto& a = s.call_args;
    auto i64 = [&](size_t k) { return eval(a[k]).i; };
    const int64_t taps = i64(0), rows = i64(2), cols = i64(3), ldi = i64(5), ldo = i64(8);
    constexpr int64_t L = kernels::kDepthwiseBlockLanes;
    KILN_CHECK(taps >= 0 && rows >= 0 && cols >= 0 && ldi >= 0 && ldo >= 0, "bad blocked depthwise micro-kernel extents");
    if (rows == 0 || cols == 0) return;
    const std::vector<int64_t> off = tap_offsets(s, 1, taps);
    const int64_t reach = taps ? *std::max_element(off.begin(), off.end()) : 0;
    const float* in = f32_block(s, 4, rows, ldi * L, (cols + reach) * L, 1);
    const float* w = f32_block(s, 6, 1, 0, taps * L, 1);
    float* out = f32_block(s, 7, rows, ldo * L, cols * L, 1);
    kernels::depthwise_blocked_f32(taps, off.data(), rows, cols, in, ldi, w, out, ldo);
  }

  // kiln_gcv_f32(cg, mg, taps, off, len, in, ldi, w, out, ldo) (kernels/depthwise.h), the offset
  // table and the blocks it reads and writes checked.
  void call_grouped_conv(const StmtNode& s) {
    KILN_CHECK(s.call_args.size() == 10, "kiln_gcv_f32 takes 10 arguments");
    const auto& a = s.call_args;
    auto i64 = [&](size_t k) { return eval(a[k]).i; };
    const int64_t cg = i64(0), mg = i64(1), taps = i64(2), len = i64(4), ldi = i64(6), ldo = i64(9);
    KILN_CHECK(cg >= 1 && mg >= 1 && taps >= 1 && len >= 0 && len % 32 == 0 && ldi >= 0 && ldo >= 0,
               "bad grouped-conv micro-kernel extents");
    if (len == 0) return;
    const std::vector<int64_t> off = tap_offsets(s, 3, taps);
    const int64_t reach = *std::max_element(off.begin(), off.end());
    const float* in = f32_block(s, 5, cg, ldi, reach + len, 1);
    const float* w = f32_block(s, 7, 1, 0, mg * cg * taps, 1);
    float* out = f32_block(s, 8, mg, ldo, len, 1);
    kernels::grouped_conv_f32(cg, mg, taps, off.data(), len, in, ldi, w, out, ldo);
  }

  // kiln_transpose_f32(dst, ldd, src, lds, rows, cols), every element it touches checked.
  void call_transpose(const StmtNode& s) {
    KILN_CHECK(s.call_args.size() == 6, "kiln_transpose_f32 takes 6 arguments");
    auto i64 = [&](size_t k) { return eval(s.call_args[k]).i; };
    const int64_t ldd = i64(1), lds = i64(3), rows = i64(4), cols = i64(5);
    KILN_CHECK(ldd >= 0 && lds >= 0, "negative transpose stride");
    if (rows <= 0 || cols <= 0) return;
    float* dst = f32_block(s, 0, cols, ldd, rows, 1);
    const float* src = f32_block(s, 2, rows, lds, cols, 1);
    kernels::transpose_f32(dst, ldd, src, lds, rows, cols);
  }

  // kiln_mk_f32_seg(mr, nr, nseg, seglen, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc): the plain call
  // per segment, each segment's elements checked.
  void call_segmented_microkernel(const StmtNode& s) {
    KILN_CHECK(s.call_args.size() == 13, "kiln_mk_f32_seg takes 13 arguments");
    const auto& a = s.call_args;
    auto i64 = [&](size_t k) { return eval(a[k]).i; };
    auto addr = [&](size_t k, DType t) {
      KILN_CHECK(a[k]->kind == ExprKind::Address, "micro-kernel argument ", k, " is not an address");
      Tensor* tn = tensor(a[k]->buffer);
      KILN_CHECK(tn->dtype() == t, "micro-kernel buffer '", a[k]->buffer->name, "' has the wrong type");
      return std::pair<Tensor*, int64_t>{tn, eval(a[k]->args[0]).i};
    };
    const int64_t mr = i64(0), nr = i64(1), nseg = i64(2), kc = i64(3), as_i = i64(6), as_k = i64(7), bs_k = i64(9),
                  ldc = i64(11);
    KILN_CHECK(mr >= 0 && nr >= 0 && nseg >= 0 && kc >= 0 && as_i >= 0 && as_k >= 0 && bs_k >= 0 && ldc >= 0,
               "negative micro-kernel extent or stride");
    auto [ta, a0] = addr(4, DType::Float32);
    auto [to, o0] = addr(5, DType::Int64);
    auto [tb, b0] = addr(8, DType::Float32);
    auto [tc, c0] = addr(10, DType::Float32);
    auto check = [&](const Expr& e, int64_t first, int64_t last) {
      checked_index(e->buffer, first);
      checked_index(e->buffer, last);
    };
    if (mr > 0 && nr > 0) check(a[10], c0, c0 + (mr - 1) * ldc + nr - 1);
    const bool acc = i64(12) != 0;
    if (nseg <= 0) kernels::microkernel_f32(mr, nr, 0, nullptr, 0, 0, nullptr, 0, tc->data<float>() + c0, ldc, acc);
    for (int64_t sg = 0; sg < nseg; ++sg) {
      checked_index(a[5]->buffer, o0 + sg);
      const int64_t off = to->data<int64_t>()[o0 + sg];
      const int64_t bs = b0 + sg * kc * bs_k;
      if (mr > 0 && nr > 0 && kc > 0) {
        check(a[4], a0 + off, a0 + off + (mr - 1) * as_i + (kc - 1) * as_k);
        check(a[8], bs, bs + (kc - 1) * bs_k + nr - 1);
      }
      kernels::microkernel_f32(mr, nr, kc, ta->data<float>() + a0 + off, as_i, as_k, tb->data<float>() + bs, bs_k,
                               tc->data<float>() + c0, ldc, sg > 0 || acc);
    }
  }

  void exec_list(const std::vector<Stmt>& body) {
    const size_t depth = vars_.size();
    for (const auto& c : body) exec(c);
    vars_.resize(depth);
  }

  Scalar& lookup(const std::string& name) {
    for (auto it = vars_.rbegin(); it != vars_.rend(); ++it)
      if (it->first == name) return it->second;
    KILN_CHECK(false, "variable '", name, "' is not defined");
  }

  Tensor* tensor(const BufferPtr& b) {
    auto it = buffers_.find(b.get());
    KILN_CHECK(it != buffers_.end(), "buffer '", b->name, "' is not bound");
    return it->second;
  }

  static int64_t checked_index(const BufferPtr& b, int64_t i) {
    KILN_CHECK(i >= 0 && i < b->numel(), "index ", i, " is outside buffer '", b->name, "' of ", b->numel(),
               " elements");
    return i;
  }

  Scalar eval(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm: return Scalar{0, e->int_value};
      case ExprKind::FloatImm:
        return dispatch_dtype(e->type, [&](auto tag) -> Scalar {
          using T = decltype(tag);
          if constexpr (std::is_integral_v<T>) KILN_CHECK(false, "float immediate of integer type");
          else return put<T>(T(compute_t<T>(e->float_value)));
        });
      case ExprKind::Var: return lookup(e->name);
      case ExprKind::Load: {
        Tensor* t = tensor(e->buffer);
        const int64_t idx = checked_index(e->buffer, eval(e->args[0]).i);
        return dispatch_dtype(t->dtype(), [&](auto tag) {
          using T = decltype(tag);
          return put<T>(t->data<T>()[idx]);
        });
      }
      case ExprKind::Unary: return eval_unary(e);
      case ExprKind::Binary: return eval_binary(e);
      case ExprKind::Select: {
        // All operands are evaluated (see the header): the branch not taken must be total too.
        const Scalar c = eval(e->args[0]), t = eval(e->args[1]), f = eval(e->args[2]);
        KILN_CHECK(e->args[1]->type == e->args[2]->type, "select branches of different types");
        return c.i != 0 ? t : f;
      }
      case ExprKind::Cast: {
        const Scalar a = eval(e->args[0]);
        return dispatch_dtype(e->args[0]->type, [&](auto ftag) {
          using From = decltype(ftag);
          return dispatch_dtype(e->type, [&](auto ttag) {
            using To = decltype(ttag);
            return put<To>(convert<From, To>(get<From>(a)));
          });
        });
      }
      case ExprKind::Call: return eval_call(e);
      case ExprKind::Address: KILN_CHECK(false, "an address is only a micro-kernel argument");
    }
    KILN_CHECK(false, "unknown expression kind");
  }

  Scalar eval_unary(const Expr& e) {
    const Scalar a = eval(e->args[0]);
    const DType t = e->args[0]->type;
    return dispatch_dtype(t, [&](auto tag) -> Scalar {
      using T = decltype(tag);
      using C = compute_t<T>;
      const C x = C(get<T>(a));
      if constexpr (std::is_same_v<T, bool>) {
        KILN_CHECK(e->un == UnOp::Not, "unary ", unop_name(e->un), " on bool");
        return put<bool>(!x);
      } else if constexpr (std::is_integral_v<T>) {
        using U = wide_unsigned_t<T>;
        switch (e->un) {
          case UnOp::Neg: return put<T>(T(U(0) - U(x)));
          case UnOp::Abs:
            if constexpr (std::is_signed_v<T>) return put<T>(x < 0 ? T(U(0) - U(x)) : x);
            else return put<T>(x);
          case UnOp::Floor:
          case UnOp::Ceil:
          case UnOp::Round: return put<T>(x);
          default: KILN_CHECK(false, "unary ", unop_name(e->un), " on ", dtype_name(t));
        }
      } else {
        switch (e->un) {
          case UnOp::Neg: return put<T>(T(-x));
          case UnOp::Abs: return put<T>(T(std::abs(x)));
          case UnOp::Sqrt: return put<T>(T(std::sqrt(x)));
          case UnOp::Exp: return put<T>(T(std::exp(x)));
          case UnOp::Log: return put<T>(T(std::log(x)));
          case UnOp::Erf: return put<T>(T(std::erf(x)));
          case UnOp::Tanh: return put<T>(T(std::tanh(x)));
          case UnOp::Sigmoid: return put<T>(T(decltype(x)(1) / (decltype(x)(1) + std::exp(-x))));
          case UnOp::Sin: return put<T>(T(std::sin(x)));
          case UnOp::Cos: return put<T>(T(std::cos(x)));
          case UnOp::Tan: return put<T>(T(std::tan(x)));
          case UnOp::Asin: return put<T>(T(std::asin(x)));
          case UnOp::Acos: return put<T>(T(std::acos(x)));
          case UnOp::Atan: return put<T>(T(std::atan(x)));
          case UnOp::Sinh: return put<T>(T(std::sinh(x)));
          case UnOp::Cosh: return put<T>(T(std::cosh(x)));
          case UnOp::Asinh: return put<T>(T(std::asinh(x)));
          case UnOp::Acosh: return put<T>(T(std::acosh(x)));
          case UnOp::Atanh: return put<T>(T(std::atanh(x)));
          case UnOp::Floor: return put<T>(T(std::floor(x)));
          case UnOp::Ceil: return put<T>(T(std::ceil(x)));
          case UnOp::Round: return put<T>(T(std::nearbyint(x)));
          case UnOp::IsNaN: return put<bool>(std::isnan(x));
          case UnOp::IsInf: return put<bool>(std::isinf(x));
          case UnOp::Not: break;
        }
        KILN_CHECK(false, "unary ", unop_name(e->un), " on ", dtype_name(t));
      }
    });
  }

  // Integer base to an integer power (the exponent keeps its own type): the emitters'
  // kiln_pow_S, i.e. repeated squaring in uint64_t keeping the base type's low bits; a negative
  // exponent gives the truncated real result (1 for base 1, +-1 for base -1, else 0).
  Scalar eval_int_pow(const Expr& e, const Scalar& va, const Scalar& vb) {
    const DType tb = e->args[1]->type;
    const bool negative = is_signed(tb) && vb.i < 0;
    uint64_t ex = tb == DType::UInt64 ? uint64_t(vb.i) : negative ? uint64_t(0) - uint64_t(vb.i) : uint64_t(vb.i);
    return dispatch_dtype(e->args[0]->type, [&](auto tag) -> Scalar {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        const T base = get<T>(va);
        if (negative) {
          if (base == T(1)) return put<T>(T(1));
          if constexpr (std::is_signed_v<T>)
            if (base == T(-1)) return put<T>(T((ex & 1) ? -1 : 1));
          return put<T>(T(0));
        }
        uint64_t r = 1, b = uint64_t(base);
        for (; ex > 0; ex >>= 1) {
          if (ex & 1) r *= b;
          b *= b;
        }
        return put<T>(T(std::make_unsigned_t<T>(r)));
      } else {
        KILN_CHECK(false, "integer Pow of ", dtype_name(e->args[0]->type));
        return Scalar{};
      }
    });
  }

  Scalar eval_binary(const Expr& e) {
    const Scalar va = eval(e->args[0]), vb = eval(e->args[1]);
    const DType t = e->args[0]->type;
    if (e->bin == BinOp::Pow && is_integer(t) && is_integer(e->args[1]->type)) return eval_int_pow(e, va, vb);
    KILN_CHECK(t == e->args[1]->type, "binary ", binop_name(e->bin), " of ", dtype_name(t), " and ",
               dtype_name(e->args[1]->type));
    return dispatch_dtype(t, [&](auto tag) -> Scalar {
      using T = decltype(tag);
      using C = compute_t<T>;
      const C a = C(get<T>(va)), b = C(get<T>(vb));
      switch (e->bin) {
        case BinOp::Lt: return put<bool>(a < b);
        case BinOp::Le: return put<bool>(a <= b);
        case BinOp::Gt: return put<bool>(a > b);
        case BinOp::Ge: return put<bool>(a >= b);
        case BinOp::Eq: return put<bool>(a == b);
        case BinOp::Ne: return put<bool>(a != b);
        default: break;
      }
      if constexpr (std::is_same_v<T, bool>) {
        switch (e->bin) {
          case BinOp::And: return put<bool>(a && b);
          case BinOp::Or: return put<bool>(a || b);
          case BinOp::Xor: return put<bool>(a != b);
          case BinOp::Min: return put<bool>(a && b);
          case BinOp::Max: return put<bool>(a || b);
          default: KILN_CHECK(false, "binary ", binop_name(e->bin), " on bool");
        }
      } else if constexpr (std::is_integral_v<T>) {
        using U = wide_unsigned_t<T>;
        switch (e->bin) {
          case BinOp::Add: return put<T>(T(U(a) + U(b)));
          case BinOp::Sub: return put<T>(T(U(a) - U(b)));
          case BinOp::Mul: return put<T>(T(U(a) * U(b)));
          case BinOp::Div:
          case BinOp::Mod: {
            KILN_CHECK(b != 0, "integer ", binop_name(e->bin), " by zero (lowering must guard it)");
            if constexpr (std::is_signed_v<T>)
              KILN_CHECK(!(b == T(-1) && a == std::numeric_limits<T>::min()), "integer overflow in ",
                         binop_name(e->bin));
            return put<T>(e->bin == BinOp::Div ? T(a / b) : T(a % b));
          }
          case BinOp::Min: return put<T>(nan_min(a, b));
          case BinOp::Max: return put<T>(nan_max(a, b));
          default: KILN_CHECK(false, "binary ", binop_name(e->bin), " on ", dtype_name(t));
        }
      } else {
        switch (e->bin) {
          case BinOp::Add: return put<T>(T(a + b));
          case BinOp::Sub: return put<T>(T(a - b));
          case BinOp::Mul: return put<T>(T(a * b));
          case BinOp::Div: return put<T>(T(a / b));
          case BinOp::Mod: return put<T>(T(std::fmod(a, b)));
          case BinOp::Min: return put<T>(T(nan_min(a, b)));
          case BinOp::Max: return put<T>(T(nan_max(a, b)));
          case BinOp::Pow: return put<T>(T(std::pow(a, b)));
          default: KILN_CHECK(false, "binary ", binop_name(e->bin), " on ", dtype_name(t));
        }
      }
    });
  }

  Scalar eval_call(const Expr& e) {
    if (e->name == kCheckedIndex) {  // loop_ir.h: the index, wrapped; out of range: 0, and the site kept
      KILN_CHECK(e->args.size() == 3 && e->type == DType::Int64, "malformed ", kCheckedIndex);
      const int64_t i = eval(e->args[0]).i, dim = eval(e->args[1]).i;
      KILN_CHECK(dim > 0, kCheckedIndex, " on an axis of size ", dim);
      if (i < -dim || i >= dim) {
        status_ = eval(e->args[2]).i;
        return put<int64_t>(0);
      }
      return put<int64_t>(i < 0 ? i + dim : i);
    }
    KILN_CHECK(e->name == "log1p" && e->args.size() == 1 && is_float(e->type) && e->args[0]->type == e->type,
               "unknown call ", e->name, " of ", e->args.size(), " arguments");
    const Scalar a = eval(e->args[0]);
    return dispatch_dtype(e->type, [&](auto tag) -> Scalar {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        KILN_CHECK(false, "log1p of an integer");
      } else {
        using C = compute_t<T>;
        return put<T>(T(std::log1p(C(get<T>(a)))));
      }
    });
  }

  std::unordered_map<const Buffer*, Tensor*> buffers_;
  std::vector<std::pair<std::string, Scalar>> vars_;

 public:
  int64_t status_ = 0;  // the kernel's status word (kCheckedIndex)

 private:
  std::set<std::string> loops_;  // names of the enclosing loops
};

}  // namespace

void interpret(const LoopKernel& k, const std::vector<Tensor*>& inputs, const std::vector<Tensor*>& outputs) {
  KILN_CHECK(inputs.size() == k.inputs.size() && outputs.size() == k.outputs.size(), "kernel ", k.name, " takes ",
             k.inputs.size(), " inputs and ", k.outputs.size(), " outputs, got ", inputs.size(), " and ",
             outputs.size());
  Interpreter in;
  // Packed inputs (weights in panel layout) are given row-major, like every input: pack them here.
  std::vector<Tensor> packed;
  std::vector<Tensor*> bound = inputs;
  if (!k.packed_inputs.empty()) {
    std::vector<Tensor> given;
    for (Tensor* t : inputs) given.push_back(*t);
    packed = kernel_arguments(k, std::move(given));
    for (const PackedInput& p : k.packed_inputs) bound[p.input] = &packed[p.input];
  }
  for (size_t i = 0; i < inputs.size(); ++i) in.bind(k.inputs[i], bound[i]);
  for (size_t i = 0; i < outputs.size(); ++i) in.bind(k.outputs[i], outputs[i]);
  if (k.body) in.exec(k.body);
  // As the runtime does after a compiled kernel: an index out of range is the user's error.
  if (in.status_) user_error(index_error_message(k.index_checks, in.status_));
}

}  // namespace kiln::loop
