// The C emitter and the JIT, end to end: hand-built loop kernels are emitted, compiled with the
// system compiler, called on real buffers and checked against exact values (the reference
// executor's semantics: NaN-propagating min/max, saturating float→int casts, wrapping integers,
// x/0 = 0, float16/bfloat16 rounding to nearest even). All kernels share one translation unit so
// the suite runs the compiler only a few times.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "codegen/c/c_emitter.h"
#include "loop/loop_ir.h"
#include "runtime/jit.h"
#include "support/error.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using namespace loop;
using codegen::comment_safe;
using codegen::emit_c;
using runtime::CompileOptions;
using runtime::JitModule;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

BufferPtr buf(const std::string& name, DType t, Shape shape, Scope scope = Scope::Global) {
  auto b = std::make_shared<Buffer>();
  b->name = name;
  b->dtype = t;
  b->shape = std::move(shape);
  b->scope = scope;
  return b;
}

Expr i_var() { return var("i"); }
Expr ld(const BufferPtr& b) { return load(b, i_var()); }

// out[i] = value for i in [0, n).
Stmt map_loop(int64_t n, std::vector<Stmt> body, ForKind k = ForKind::Serial) {
  return for_loop("i", int_imm(n), std::move(body), k);
}

// ---------------------------------------------------------------- the kernels

// c = a + b over 1000 elements, in parallel. Its sources try to escape the header comment.
LoopKernel vec_add() {
  auto a = buf("a", DType::Float32, {1000}), b = buf("b", DType::Float32, {1000}), c = buf("c", DType::Float32, {1000});
  return {"vec_add", {"evil*/\n#include <no_such_header.h>", "x/*y", "line\r\nbreak"}, {a, b}, {c},
          map_loop(1000, {store(c, i_var(), binary(BinOp::Add, ld(a), ld(b)))}, ForKind::Parallel)};
}

// y[r] = sum_c x[r, c] with a Let accumulator; the row loop is parallel, the column loop unrolled.
LoopKernel row_sum() {
  auto x = buf("x", DType::Float32, {3, 4}), y = buf("y", DType::Float32, {3});
  Expr r = var("r"), c = var("c");
  auto inner = for_loop("c", int_imm(4),
                        {assign("acc", binary(BinOp::Add, var("acc", DType::Float32),
                                              load(x, add(mul(r, int_imm(4)), c))))},
                        ForKind::Unrolled);
  return {"row_sum", {"ReduceSum_0"}, {x}, {y},
          for_loop("r", int_imm(3), {let("acc", float_imm(0.0)), inner, store(y, r, var("acc", DType::Float32))},
                   ForKind::Parallel)};
}

// NaN-propagating min/max, select on a comparison, saturating cast, a libm call and constants.
LoopKernel float_ops() {
  auto a = buf("a", DType::Float32, {8}), b = buf("b", DType::Float32, {8});
  auto mn = buf("mn", DType::Float32, {8}), mx = buf("mx", DType::Float32, {8}), sel = buf("sel", DType::Float32, {8});
  auto ci = buf("ci", DType::Int32, {8}), cu = buf("cu", DType::UInt8, {8}), k = buf("k", DType::Float32, {8});
  auto cs = buf("cs", DType::Float32, {8});
  return {"float_ops", {}, {a, b}, {mn, mx, sel, ci, cu, k, cs},
          map_loop(8, {
              store(mn, i_var(), binary(BinOp::Min, ld(a), ld(b))),
              store(mx, i_var(), binary(BinOp::Max, ld(a), ld(b))),
              store(sel, i_var(), select(binary(BinOp::Lt, ld(a), ld(b)), ld(a), ld(b))),
              store(ci, i_var(), cast(DType::Int32, ld(a))),
              store(cu, i_var(), cast(DType::UInt8, ld(a))),
              // 0.1 must be the float nearest 0.1; -0.0 keeps its sign.
              store(k, i_var(), binary(BinOp::Add, float_imm(0.1), binary(BinOp::Mul, float_imm(-0.0), ld(b)))),
              store(cs, i_var(), call("copysignf", DType::Float32, {float_imm(1.0), ld(a)})),
          })};
}

// Integer division, remainder, min/max, pow and abs on int64 data; index arithmetic with
// constant divisors; int8/uint8 arithmetic that wraps.
LoopKernel int_ops() {
  auto p = buf("p", DType::Int64, {8}), q = buf("q", DType::Int64, {8});
  std::vector<BufferPtr> outs;
  for (const char* n : {"qd", "qm", "qmin", "qmax", "qpow", "qabs", "qidx"}) outs.push_back(buf(n, DType::Int64, {8}));
  auto s8 = buf("s8", DType::Int8, {8}), w8 = buf("w8", DType::Int8, {8}), neg8 = buf("neg8", DType::Bool, {8});
  auto u8 = buf("u8", DType::UInt8, {8});
  auto s32 = buf("s32", DType::Int32, {8}), w32 = buf("w32", DType::Int32, {8}), gt32 = buf("gt32", DType::Bool, {8});
  auto n32 = buf("n32", DType::Int32, {8}), m32 = buf("m32", DType::Int32, {8});
  Expr i = i_var();
  Expr plus1 = binary(BinOp::Add, ld(s32), int_imm(1, DType::Int32));
  return {"int_ops", {}, {p, q, s8, s32},
          {outs[0], outs[1], outs[2], outs[3], outs[4], outs[5], outs[6], w8, neg8, u8, w32, gt32, n32, m32},
          map_loop(8, {
              store(outs[0], i, binary(BinOp::Div, ld(p), ld(q))),
              store(outs[1], i, binary(BinOp::Mod, ld(p), ld(q))),
              store(outs[2], i, binary(BinOp::Min, ld(p), ld(q))),
              store(outs[3], i, binary(BinOp::Max, ld(p), ld(q))),
              store(outs[4], i, binary(BinOp::Pow, ld(p), ld(q))),
              store(outs[5], i, unary(UnOp::Abs, ld(p))),
              store(outs[6], i, add(mul(div_floor(i, int_imm(3)), int_imm(10)), mod(i, int_imm(3)))),
              store(w8, i, binary(BinOp::Add, ld(s8), ld(s8))),
              store(neg8, i, binary(BinOp::Lt, binary(BinOp::Add, ld(s8), ld(s8)), int_imm(0, DType::Int8))),
              store(u8, i, binary(BinOp::Sub, int_imm(0, DType::UInt8), cast(DType::UInt8, ld(s8)))),
              // int32 overflow wraps, and `x + 1 > x` must not be folded to true.
              store(w32, i, plus1),
              store(gt32, i, binary(BinOp::Gt, plus1, ld(s32))),
              store(n32, i, unary(UnOp::Neg, ld(s32))),
              store(m32, i, binary(BinOp::Mul, ld(s32), ld(s32))),
          })};
}

// float16 in and out, bfloat16 out, and a float16 round trip inside a float32 expression.
LoopKernel half_ops() {
  auto h = buf("h", DType::Float16, {6}), x = buf("x", DType::Float32, {6});
  auto o = buf("o", DType::Float16, {6}), ob = buf("ob", DType::BFloat16, {6}), rt = buf("rt", DType::Float32, {6});
  return {"half_ops", {}, {h, x}, {o, ob, rt},
          map_loop(6, {
              store(o, i_var(), binary(BinOp::Add, binary(BinOp::Mul, ld(h), float_imm(3.0, DType::Float16)),
                                       float_imm(0.1, DType::Float16))),
              store(ob, i_var(), binary(BinOp::Mul, cast(DType::Float32, ld(h)), float_imm(3.0))),
              store(rt, i_var(), cast(DType::Float32, cast(DType::Float16, ld(x)))),
          })};
}

// Bool outputs (and a bool input): predicates, Not, Xor, IsNaN, IsInf.
LoopKernel bool_ops() {
  auto a = buf("a", DType::Float32, {6}), f = buf("f", DType::Bool, {6});
  auto o1 = buf("o1", DType::Bool, {6}), o2 = buf("o2", DType::Bool, {6}), o3 = buf("o3", DType::Bool, {6});
  Expr pos = binary(BinOp::Gt, ld(a), float_imm(0.0));
  return {"bool_ops", {}, {a, f}, {o1, o2, o3},
          map_loop(6, {
              store(o1, i_var(), binary(BinOp::Or, unary(UnOp::IsNaN, ld(a)), pos)),
              store(o2, i_var(), binary(BinOp::Xor, ld(f), unary(UnOp::Not, unary(UnOp::IsInf, ld(a))))),
              store(o3, i_var(), binary(BinOp::And, ld(f), pos)),
          })};
}

// A local buffer, a vectorized loop, If/else, a comment, and libm functions.
LoopKernel local_ops() {
  auto x = buf("x", DType::Float32, {8}), o = buf("o", DType::Float32, {8}), m = buf("m", DType::Float32, {8 * 4});
  auto tmp = buf("tmp", DType::Float32, {8}, Scope::Local);
  Expr i = i_var();
  auto fill = for_loop("i", int_imm(8), {store(tmp, i, binary(BinOp::Mul, ld(x), ld(x)))}, ForKind::Vectorized);
  auto pick = for_loop("i", int_imm(8),
                       {if_then(binary(BinOp::Lt, i, int_imm(4)),
                                {store(o, i, load(tmp, binary(BinOp::Sub, int_imm(7), i)))},
                                {store(o, i, unary(UnOp::Neg, load(tmp, i)))})});
  auto math = for_loop("i", int_imm(8), {
      store(m, i, unary(UnOp::Exp, ld(x))),
      store(m, add(i, int_imm(8)), unary(UnOp::Erf, ld(x))),
      store(m, add(i, int_imm(16)), unary(UnOp::Tanh, ld(x))),
      store(m, add(i, int_imm(24)), unary(UnOp::Round, ld(x))),
  });
  return {"local_ops", {}, {x}, {o, m}, block({comment("tmp = x*x */ evil"), allocate(tmp, {fill, pick}), math})};
}

// float64 with names that would shadow libm (`log`, `exp`) or be C keywords (`int`).
LoopKernel double_ops() {
  auto lg = buf("log", DType::Float64, {4}), ex = buf("exp", DType::Float64, {4});
  return {"double_ops", {}, {lg}, {ex},
          map_loop(4, {let("int", unary(UnOp::Log, ld(lg))),
                       store(ex, i_var(), binary(BinOp::Add, binary(BinOp::Pow, var("int", DType::Float64), float_imm(2.0, DType::Float64)),
                                                 binary(BinOp::Mod, ld(lg), float_imm(0.75, DType::Float64))))})};
}

std::vector<LoopKernel> all_kernels() {
  return {vec_add(), row_sum(), float_ops(), int_ops(), half_ops(), bool_ops(), local_ops(), double_ops()};
}

// ---------------------------------------------------------------- fixture: one compiled module

class CodegenJit : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_codegen_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    source_ = emit_c(all_kernels());
    module_ = JitModule::build(source_, opts());
  }
  static void TearDownTestSuite() {
    module_.reset();
    fs::remove_all(dir_);
  }
  static CompileOptions opts() {
    CompileOptions o;
    o.cache_dir = dir_.string();
    return o;
  }
  static void call(const char* name, std::vector<void*> args) { module_->get(name)(args.data()); }

  static inline fs::path dir_;
  static inline std::string source_;
  static inline std::unique_ptr<JitModule> module_;
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST_F(CodegenJit, VectorAddParallel) {
  std::vector<float> a(1000), b(1000), c(1000, -1.0f);
  for (int i = 0; i < 1000; ++i) a[i] = float(i), b[i] = 0.5f * float(i);
  call("vec_add", {a.data(), b.data(), c.data()});
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(c[i], 1.5f * float(i)) << i;
  EXPECT_NE(source_.find("#pragma omp parallel for"), std::string::npos);
}

TEST_F(CodegenJit, RowSumWithAccumulator) {
  std::vector<float> x(12), y(3, -1.0f);
  for (int i = 0; i < 12; ++i) x[i] = float(i + 1);
  call("row_sum", {x.data(), y.data()});
  EXPECT_EQ(y, (std::vector<float>{10, 26, 42}));
  EXPECT_NE(source_.find("#pragma GCC unroll 4"), std::string::npos);
}

TEST_F(CodegenJit, MinMaxSelectCastWithNaN) {
  std::vector<float> a = {1, kNaN, 3, kNaN, -0.0f, 0.0f, 1e10f, -kInf};
  std::vector<float> b = {2, 5, kNaN, kNaN, 0.0f, -0.0f, -1.5f, 2.5f};
  std::vector<float> mn(8), mx(8), sel(8), k(8), cs(8);
  std::vector<int32_t> ci(8);
  std::vector<uint8_t> cu(8);
  call("float_ops", {a.data(), b.data(), mn.data(), mx.data(), sel.data(), ci.data(), cu.data(), k.data(), cs.data()});
  EXPECT_EQ(mn[0], 1.0f);
  EXPECT_EQ(mx[0], 2.0f);
  for (int i : {1, 2, 3}) EXPECT_TRUE(std::isnan(mn[i]) && std::isnan(mx[i])) << i;
  // Equal operands: the first one wins, as in numpy (and the reference executor).
  EXPECT_EQ(bits(mn[4]), bits(-0.0f));
  EXPECT_EQ(bits(mn[5]), bits(0.0f));
  EXPECT_EQ(bits(mx[4]), bits(-0.0f));
  EXPECT_EQ(mn[6], -1.5f);
  EXPECT_EQ(mx[6], 1e10f);
  EXPECT_EQ(mn[7], -kInf);
  // Comparisons with NaN are false: select takes b.
  EXPECT_EQ(sel[0], 1.0f);
  EXPECT_EQ(sel[1], 5.0f);
  EXPECT_TRUE(std::isnan(sel[2]));
  EXPECT_EQ(sel[7], -kInf);
  // float → int32 saturates, NaN → 0, truncation toward zero.
  EXPECT_EQ(ci, (std::vector<int32_t>{1, 0, 3, 0, 0, 0, INT32_MAX, INT32_MIN}));
  EXPECT_EQ(cu, (std::vector<uint8_t>{1, 0, 3, 0, 0, 0, 255, 0}));
  EXPECT_EQ(bits(k[0]), bits(0.1f));  // 0.1f + (-0 * 2)
  EXPECT_TRUE(std::isnan(k[2]));
  EXPECT_EQ(cs[4], -1.0f);
  EXPECT_EQ(cs[5], 1.0f);
}

TEST_F(CodegenJit, Int64DivModMinMaxPowAbs) {
  std::vector<int64_t> p = {7, -7, 7, -7, 5, INT64_MIN, 3, -2};
  std::vector<int64_t> q = {2, 2, -2, -2, 0, -1, 4, 3};
  std::vector<int8_t> s8 = {100, -100, 1, -1, 64, -64, 127, 0};
  std::vector<std::vector<int64_t>> o(7, std::vector<int64_t>(8, 99));
  std::vector<int8_t> w8(8);
  bool neg8[8] = {};
  std::vector<uint8_t> u8(8);
  std::vector<int32_t> s32 = {INT32_MAX, INT32_MIN, -1, 0, 46341, 2, -3, 100000}, w32(8), n32(8), m32(8);
  bool gt32[8] = {};
  call("int_ops", {p.data(), q.data(), s8.data(), s32.data(), o[0].data(), o[1].data(), o[2].data(), o[3].data(),
                   o[4].data(), o[5].data(), o[6].data(), w8.data(), neg8, u8.data(), w32.data(), gt32, n32.data(),
                   m32.data()});
  // C truncation; x / 0 = 0; INT64_MIN / -1 wraps to INT64_MIN.
  EXPECT_EQ(o[0], (std::vector<int64_t>{3, -3, -3, 3, 0, INT64_MIN, 0, 0}));
  // C remainder (sign of the dividend); x % 0 = 0; x % -1 = 0.
  EXPECT_EQ(o[1], (std::vector<int64_t>{1, -1, 1, -1, 0, 0, 3, -2}));
  EXPECT_EQ(o[2], (std::vector<int64_t>{2, -7, -2, -7, 0, INT64_MIN, 3, -2}));
  EXPECT_EQ(o[3], (std::vector<int64_t>{7, 2, 7, -2, 5, -1, 4, 3}));
  // Negative exponents truncate (7^-2 = 0); INT64_MIN^-1 = 0.
  EXPECT_EQ(o[4], (std::vector<int64_t>{49, 49, 0, 0, 1, 0, 81, -8}));
  EXPECT_EQ(o[5], (std::vector<int64_t>{7, 7, 7, 7, 5, INT64_MIN, 3, 2}));
  EXPECT_EQ(o[6], (std::vector<int64_t>{0, 1, 2, 10, 11, 12, 20, 21}));
  // int8 wraps: 100 + 100 = -56, and the comparison sees the wrapped value.
  EXPECT_EQ(w8, (std::vector<int8_t>{-56, 56, 2, -2, -128, -128, -2, 0}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(neg8[i], w8[i] < 0) << i;
  EXPECT_EQ(u8, (std::vector<uint8_t>{156, 100, 255, 1, 192, 64, 129, 0}));
  EXPECT_EQ(w32, (std::vector<int32_t>{INT32_MIN, INT32_MIN + 1, 0, 1, 46342, 3, -2, 100001}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(gt32[i], i != 0) << i;
  EXPECT_EQ(n32, (std::vector<int32_t>{-INT32_MAX, INT32_MIN, 1, 0, -46341, -2, 3, -100000}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m32[i], int32_t(uint32_t(s32[i]) * uint32_t(s32[i]))) << i;
}

TEST_F(CodegenJit, Float16AndBFloat16) {
  std::vector<Half> h;
  for (float v : {1.0f, 0.5f, 65504.0f, 1e-7f, -2.5f, kNaN}) h.push_back(Half(v));
  std::vector<float> x = {0.1f, 1e-8f, 70000.0f, 1.0009765625f, 1.00048828125f, 1.00146484375f};
  std::vector<Half> o(6);
  std::vector<BFloat16> ob(6);
  std::vector<float> rt(6);
  call("half_ops", {h.data(), x.data(), o.data(), ob.data(), rt.data()});
  const float tenth = float(Half(0.1f));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(o[i].bits, Half(float(h[i]) * 3.0f + tenth).bits) << i;
    EXPECT_EQ(ob[i].bits, BFloat16(float(h[i]) * 3.0f).bits) << i;
    EXPECT_EQ(bits(rt[i]), bits(float(Half(x[i])))) << i;
  }
  EXPECT_EQ(o[2].bits, 0x7c00);  // 65504 * 3 overflows to inf
  EXPECT_EQ(o[5].bits & 0x7e00, 0x7e00);  // quiet NaN
  EXPECT_EQ(rt[2], kInf);
  EXPECT_EQ(rt[4], 1.0f);            // halfway: ties to even
  EXPECT_EQ(rt[5], 1.001953125f);    // halfway: ties to even (up)
}

TEST_F(CodegenJit, BoolOutputs) {
  std::vector<float> a = {1.0f, -1.0f, kNaN, kInf, -kInf, 0.0f};
  bool f[6] = {true, true, false, true, false, false};
  bool o1[6], o2[6], o3[6];
  call("bool_ops", {a.data(), f, o1, o2, o3});
  const bool e1[6] = {true, false, true, true, false, false};
  const bool e2[6] = {false, false, true, true, false, true};  // f xor !isinf(a)
  const bool e3[6] = {true, false, false, true, false, false};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(o1[i], e1[i]) << i;
    EXPECT_EQ(o2[i], e2[i]) << i;
    EXPECT_EQ(o3[i], e3[i]) << i;
  }
}

TEST_F(CodegenJit, LocalBufferIfAndLibm) {
  std::vector<float> x = {0.5f, -1.25f, 2.5f, 3.5f, -0.5f, 1.0f, -2.0f, 0.1f};
  std::vector<float> o(8), m(32);
  call("local_ops", {x.data(), o.data(), m.data()});
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(o[i], i < 4 ? x[7 - i] * x[7 - i] : -(x[i] * x[i])) << i;
    // float32 exp and erf are the prelude's vectorisable kiln_expf and kiln_erff: within 2 ulp of
    // libm, not its bits (tests/unit/c_expf_test.cc and c_erff_test.cc check the whole range).
    EXPECT_LE(std::abs(int64_t(bits(m[i])) - int64_t(bits(std::exp(x[i])))), 2) << i;
    EXPECT_LE(std::abs(int64_t(bits(m[8 + i])) - int64_t(bits(std::erf(x[i])))), 2) << i;
    EXPECT_EQ(bits(m[16 + i]), bits(std::tanh(x[i]))) << i;
  }
  // Round half to even; -0.5 rounds to -0.
  EXPECT_EQ(std::vector<float>(m.begin() + 24, m.end()), (std::vector<float>{0, -1, 2, 4, -0.0f, 1, -2, 0}));
  EXPECT_EQ(bits(m[28]), bits(-0.0f));
  EXPECT_NE(source_.find("#pragma omp simd"), std::string::npos);
  EXPECT_NE(source_.find("/* tmp = x*x  evil */"), std::string::npos);
}

TEST_F(CodegenJit, ReservedNamesAreRenamed) {
  std::vector<double> lg = {1.0, 2.0, 10.0, 0.3}, ex(4);
  call("double_ops", {lg.data(), ex.data()});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ex[i], std::pow(std::log(lg[i]), 2.0) + std::fmod(lg[i], 0.75)) << i;
  EXPECT_NE(source_.find("const double* restrict log_ = (const double*)args[0];"), std::string::npos);
  EXPECT_NE(source_.find("double int_ = log(log_[i]);"), std::string::npos);
}

TEST_F(CodegenJit, HostileSourceNamesStayInTheComment) {
  // The module compiled although a source name contains "*/" and a newline, so it did not
  // escape; the sanitised names are still listed.
  EXPECT_EQ(source_.find("\n#include <no_such_header.h>"), std::string::npos);
  EXPECT_NE(source_.find(" *   evil#include <no_such_header.h>\n"), std::string::npos);
  EXPECT_NE(source_.find(" *   xy\n"), std::string::npos);
}

TEST_F(CodegenJit, SecondBuildComesFromTheCache) {
  EXPECT_FALSE(module_->from_cache());
  EXPECT_EQ(fs::path(module_->library_path()).parent_path(), dir_);
  auto again = JitModule::build(source_, opts());
  EXPECT_TRUE(again->from_cache());
  EXPECT_EQ(again->library_path(), module_->library_path());
  std::vector<float> x(12, 1.0f), y(3);
  void* args[] = {x.data(), y.data()};
  again->get("row_sum")(args);
  EXPECT_EQ(y, (std::vector<float>{4, 4, 4}));
  // The source is kept next to the object.
  fs::path c = module_->library_path();
  EXPECT_TRUE(fs::exists(c.replace_extension(".c")));
}

TEST_F(CodegenJit, MissingKernelIsAUserError) {
  try {
    module_->get("no_such_kernel");
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "kernel no_such_kernel not found in " + module_->library_path());
  }
}

TEST_F(CodegenJit, CompilerErrorNamesTheKeptSource) {
  const std::string broken = emit_c({row_sum()}) + "\nthis is not C;\n";
  try {
    JitModule::build(broken, opts());
    FAIL() << "expected an InternalError";
  } catch (const InternalError& e) {  // kiln generated the source: not the user's mistake
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("internal error: C compiler failed (exit 1) on " + dir_.string() + "/kiln_", 0), 0u) << msg;
    EXPECT_NE(msg.find("error"), std::string::npos) << msg;
    const size_t c = msg.find(".c: "), log = msg.find("; full log: ");
    ASSERT_NE(c, std::string::npos);
    ASSERT_NE(log, std::string::npos);
    const std::string src = msg.substr(msg.find(dir_.string()), c + 2 - msg.find(dir_.string()));
    const std::string log_path = msg.substr(log + 12);
    std::ifstream in(src);
    std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(kept, broken);
    EXPECT_TRUE(fs::exists(log_path)) << log_path;
    EXPECT_EQ(log_path.substr(0, log_path.size() - 4), src.substr(0, src.size() - 2));
  }
  // No object was left behind for the broken source.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST_F(CodegenJit, MissingCompilerIsAUserError) {
  CompileOptions o = opts();
  o.compiler = "kiln-no-such-compiler";
  EXPECT_THROW(JitModule::build("int x;", o), UserError);
}

TEST_F(CodegenJit, UncreatableCacheDirFallsBackToTemp) {
  CompileOptions o = opts();
  o.cache_dir = "/proc/kiln_cannot_create_this";
  o.use_cache = false;  // build even when an earlier run left it in the fallback directory
  auto m = JitModule::build("void tiny(void* const* args) { *(int*)args[0] = 42; }\n", o);
  EXPECT_FALSE(m->from_cache());
  EXPECT_EQ(m->library_path().find("/proc/"), std::string::npos);
  int v = 0;
  void* args[] = {&v};
  m->get("tiny")(args);
  EXPECT_EQ(v, 42);
}

// ---------------------------------------------------------------- text only

TEST(CodegenText, CommentSafe) {
  EXPECT_EQ(comment_safe("plain name"), "plain name");
  EXPECT_EQ(comment_safe("a*/b\nc"), "abc");
  EXPECT_EQ(comment_safe("x/*y*/z"), "xyz");
  EXPECT_EQ(comment_safe("**//"), "");  // removing the inner "*/" forms another
  EXPECT_EQ(comment_safe("t\tab\r\x01\x7f"), "tab");
  EXPECT_EQ(comment_safe("*/\n#include <x.h>"), "#include <x.h>");
  EXPECT_EQ(comment_safe("a * b / c"), "a * b / c");
}

TEST(CodegenText, PreludeAndFmaPragma) {
  const std::string plain = emit_c({});
  for (const char* inc : {"#include <math.h>", "#include <stdint.h>", "#include <stdbool.h>", "#include <string.h>"})
    EXPECT_NE(plain.find(inc), std::string::npos) << inc;
  EXPECT_NE(plain.find("#pragma STDC FP_CONTRACT ON"), std::string::npos);
  codegen::EmitOptions strict;
  strict.strict_fp = true;
  EXPECT_NE(emit_c({}, strict).find("#pragma STDC FP_CONTRACT OFF"), std::string::npos);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(CodegenText, OnlyTheOutermostParallelLoopForks) {
  auto x = buf("x", DType::Float32, {4, 4});
  auto inner = for_loop("j", int_imm(4), {store(x, add(mul(var("i"), int_imm(4)), var("j")), float_imm(1.0))},
                        ForKind::Parallel);
  LoopKernel k{"nested", {}, {}, {x}, for_loop("i", int_imm(4), {inner}, ForKind::Parallel)};
  const std::string src = emit_c({k});
  EXPECT_EQ(count(src, "#pragma omp parallel for"), 1u);
  EXPECT_NE(src.find("void nested(void* const* args) {\n  float* restrict x = (float*)args[0];\n"
                     "  #pragma omp parallel for\n  for (int64_t i = 0; i < 4; ++i) {\n"
                     "    for (int64_t j = 0; j < 4; ++j) {\n      x[((i * 4) + j)] = 1.0f;\n"),
            std::string::npos)
      << src;
}

// An accumulation inside two loops that reads at a negative stride along the inner one (a reversed
// Slice under a ReduceSum over two axes) is compiled without loop vectorization: GCC 12 -O3
// vectorized the outer loop of that nest and summed the wrong elements (fuzz regression
// c11_reversed_slice_reducel1). The same nest at a positive stride, or a reversed read outside an
// accumulation, keeps it.
TEST(CodegenText, ReversedAccumulationNestIsNotLoopVectorized) {
  auto x = buf("x", DType::Float32, {28, 18}), y = buf("y", DType::Float32, {1});
  auto nest = [&](int64_t sign) {
    Expr idx = add(mul(var("a"), int_imm(18)), sign < 0 ? add(int_imm(17), mul(var("b"), int_imm(-1))) : add(int_imm(8), var("b")));
    auto inner = for_loop("b", int_imm(10), {assign("acc", binary(BinOp::Add, var("acc", DType::Float32), load(x, idx)))});
    return block({let("acc", float_imm(0.0)), for_loop("a", int_imm(28), {inner}), store(y, int_imm(0), var("acc", DType::Float32))});
  };
  const std::string src = emit_c({LoopKernel{"reversed", {}, {x}, {y}, nest(-1)}, LoopKernel{"forward", {}, {x}, {y}, nest(1)}});
  EXPECT_NE(src.find("KILN_NO_LOOP_VECTORIZE void reversed("), std::string::npos) << src;
  EXPECT_NE(src.find("\nvoid forward("), std::string::npos) << src;
  auto z = buf("z", DType::Float32, {28, 18});
  LoopKernel flip{"flip", {}, {x}, {z},
                  for_loop("a", int_imm(28), {for_loop("b", int_imm(18), {store(z, add(mul(var("a"), int_imm(18)), var("b")),
                                                                                    load(x, add(mul(var("a"), int_imm(18)), add(int_imm(17), mul(var("b"), int_imm(-1))))))})})};
  EXPECT_NE(emit_c({flip}).find("\nvoid flip("), std::string::npos);
}

// A parallel loop inside serial loops only (a recurrent layer's column panels inside its step
// loop) forks once per iteration of theirs; one inside a parallel loop never does.
TEST(CodegenText, AParallelLoopInsideSerialLoopsForks) {
  auto x = buf("x", DType::Float32, {4, 4});
  auto inner = [&](const char* j) {
    return for_loop(j, int_imm(4), {store(x, add(mul(var("s"), int_imm(4)), var(j)), float_imm(1.0))}, ForKind::Parallel);
  };
  LoopKernel k{"steps", {}, {}, {x}, for_loop("s", int_imm(4), {inner("j")})};
  const std::string src = emit_c({k});
  EXPECT_EQ(count(src, "#pragma omp parallel for"), 1u);
  EXPECT_NE(src.find("  for (int64_t s = 0; s < 4; ++s) {\n    #pragma omp parallel for\n    for (int64_t j = 0;"),
            std::string::npos)
      << src;
  LoopKernel both{"both", {}, {}, {x},
                  for_loop("d", int_imm(2), {for_loop("s", int_imm(4), {inner("j")})}, ForKind::Parallel)};
  EXPECT_EQ(count(emit_c({both}), "#pragma omp parallel for"), 1u);
}

TEST(CodegenText, UnrollNeedsAConstantExtent) {
  auto x = buf("x", DType::Int64, {8});
  LoopKernel k{"unroll", {}, {}, {x},
               block({for_loop("i", var("n"), {store(x, var("i"), var("i"))}, ForKind::Unrolled),
                      for_loop("i", int_imm(8), {store(x, var("i"), int_imm(-3))}, ForKind::Unrolled)})};
  const std::string src = emit_c({k});
  EXPECT_EQ(count(src, "#pragma GCC unroll"), 1u);
  EXPECT_NE(src.find("#pragma GCC unroll 8\n"), std::string::npos);
  EXPECT_NE(src.find("x[i] = (-3);"), std::string::npos);
}

TEST(CodegenText, StatementForms) {
  auto x = buf("x", DType::Float32, {4}), big = buf("big", DType::Float64, {100000}, Scope::Local);
  auto small = buf("small", DType::Float16, {4}, Scope::Register);
  LoopKernel k{"forms", {}, {}, {x},
               block({allocate(small, {store(small, int_imm(0), float_imm(1.5, DType::Float16))}),
                      allocate(big, {store(big, int_imm(0), float_imm(2.0, DType::Float64))}),
                      call_stmt("micro_kernel", {int_imm(1), float_imm(0.5)}),
                      let("t", binary(BinOp::Mul, float_imm(2.0), float_imm(3.0))),
                      assign("t", binary(BinOp::Pow, var("t", DType::Float32), float_imm(2.0))),
                      store(x, int_imm(0), var("t", DType::Float32))})};
  const std::string src = emit_c({k});
  // Local arrays are 64-byte aligned by request, not by the C compiler's own placement (see
  // RuntimeRegression.AttentionOf399PositionsWithHeadsOf24).
  EXPECT_NE(src.find("  {\n    uint16_t small[4] __attribute__((aligned(64)));\n    small[0] = kiln_f32_to_f16(1.5f);\n  }\n"),
            std::string::npos)
      << src;
  // 800 KB would overflow an OpenMP worker's stack: it comes from the per-thread scratch stack.
  EXPECT_NE(src.find("double* restrict big = (double*)kiln_scratch_push(sizeof(double) * 100000);"), std::string::npos)
      << src;
  EXPECT_NE(src.find("kiln_scratch_pop(big, sizeof(double) * 100000);"), std::string::npos);
  EXPECT_NE(src.find("micro_kernel(1, 0.5f);"), std::string::npos);
  EXPECT_NE(src.find("float t = (2.0f * 3.0f);"), std::string::npos);
  EXPECT_NE(src.find("t = powf(t, 2.0f);"), std::string::npos);
}

TEST(CodegenText, Literals) {
  auto x = buf("x", DType::Float32, {8}), d = buf("d", DType::Float64, {4}), h = buf("h", DType::Float16, {2});
  auto n = buf("n", DType::Int64, {2}), u = buf("u", DType::UInt32, {2});
  LoopKernel k{"lits", {}, {}, {x, d, h, n, u},
               block({store(x, int_imm(0), float_imm(1e300)),  // beyond float: inf, not "inff"
                      store(x, int_imm(1), float_imm(-kInf)), store(x, int_imm(2), float_imm(kNaN)),
                      store(x, int_imm(3), float_imm(-0.0)), store(x, int_imm(4), float_imm(1e-3)),
                      store(d, int_imm(0), float_imm(0.1, DType::Float64)),
                      store(d, int_imm(1), float_imm(-2.0, DType::Float64)),
                      store(h, int_imm(0), float_imm(70000.0, DType::Float16)),
                      store(n, int_imm(0), int_imm(INT64_MIN)), store(n, int_imm(1), int_imm(-5)),
                      store(u, int_imm(0), int_imm(4000000000, DType::UInt32))})};
  const std::string src = emit_c({k});
  for (const char* line : {"x[0] = (INFINITY);", "x[1] = (-INFINITY);", "x[2] = NAN;", "x[3] = (-0.0f);",
                           "x[4] = 0.00100000005f;", "d[0] = 0.10000000000000001;", "d[1] = (-2.0);",
                           "h[0] = kiln_f32_to_f16((INFINITY));", "n[0] = INT64_MIN;", "n[1] = (-5);",
                           "u[0] = 4000000000u;"})
    EXPECT_NE(src.find(std::string("  ") + line + "\n"), std::string::npos) << line << "\n" << src;
}

TEST(CodegenText, KernelNameMustBeUsable) {
  LoopKernel k{"exp", {}, {}, {}, block({})};
  EXPECT_THROW(emit_c({k}), InternalError);
  k.name = "not an identifier";
  EXPECT_THROW(emit_c({k}), InternalError);
}

TEST(JitCacheDir, FollowsXdgThenHome) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/some/cache", 1);
  EXPECT_EQ(runtime::default_cache_dir(), "/some/cache/kiln");
  ::setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  const char* home = std::getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(runtime::default_cache_dir(), (fs::path(home) / ".cache" / "kiln").string());
  }
  if (old_xdg) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else ::unsetenv("XDG_CACHE_HOME");
}

}  // namespace
}  // namespace kiln
