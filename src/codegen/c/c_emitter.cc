#include "codegen/c/c_emitter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "codegen/c/c_prelude.h"
#include "kernels/microkernel.h"
#include "support/error.h"

namespace kiln::codegen {

using namespace loop;

namespace {

// ---------------------------------------------------------------- types

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// Element type in memory: float16/bfloat16 are their bits.
const char* storage_type(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Float16:
    case DType::BFloat16: return "uint16_t";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::UInt8: return "uint8_t";
    case DType::UInt16: return "uint16_t";
    case DType::UInt32: return "uint32_t";
    case DType::UInt64: return "uint64_t";
    case DType::Bool: return "bool";
    case DType::Undefined: break;
  }
  KILN_CHECK(false, "C emitter: undefined dtype");
}

// Type of a value in registers: float16/bfloat16 compute in float.
const char* value_type(DType t) { return is_half(t) ? "float" : storage_type(t); }

// Suffix of the prelude helpers for values of type t.
const char* suffix(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return "f32";
    case DType::Float64: return "f64";
    case DType::Int8: return "i8";
    case DType::Int16: return "i16";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::UInt8: return "u8";
    case DType::UInt16: return "u16";
    case DType::UInt32: return "u32";
    case DType::UInt64: return "u64";
    case DType::Bool: return "b";
    case DType::Undefined: break;
  }
  KILN_CHECK(false, "C emitter: undefined dtype");
}

bool computes_in_float(DType t) { return t == DType::Float32 || is_half(t); }
bool is_int_like(DType t) { return is_integer(t) || t == DType::Bool; }
// Types narrower than int: C promotes them, so arithmetic results are converted back (wrapping).
bool is_narrow(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::UInt8 || t == DType::UInt16 || t == DType::Bool;
}

// ---------------------------------------------------------------- identifiers

// Names the emitted code or the prelude uses; a buffer or variable with one of these names would
// shadow it (a buffer named `log` in a float64 kernel) or not compile (`int`).
const std::set<std::string>& reserved_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s = {
        // C11 keywords and the macros of the included headers the emitted code relies on
        "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
        "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
        "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
        "volatile", "while", "bool", "true", "false", "NAN", "INFINITY", "isnan", "isinf", "memcpy",
        "malloc", "free", "args", "main", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
        "uint32_t", "uint64_t", "fmod", "fmodf", "pow", "powf", "fabs", "fabsf", "nearbyint", "nearbyintf"};
    for (const char* f : {"sqrt", "exp", "log", "erf", "tanh", "sin", "cos", "tan", "asin", "acos", "atan",
                          "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil"}) {
      s.insert(f);
      s.insert(std::string(f) + "f");
    }
    return s;
  }();
  return names;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// The C spelling of an IR name. Reserved names and the prelude's `kiln_` namespace get a trailing
// underscore (no prelude helper ends in one).
std::string ident(const std::string& name) {
  KILN_CHECK(is_identifier(name), "C emitter: '", name, "' is not a C identifier");
  if (reserved_names().count(name) || name.rfind("kiln_", 0) == 0 || name.rfind("__", 0) == 0)
    return name + "_";
  return name;
}

// Called functions are the prelude's, libm's or (later) micro-kernels: kiln's names, not the model's.
// A libm function called on float32 uses its float variant (log1p → log1pf), as the reference's
// std:: overloads do; anything else is called by its name.
std::string callee(const std::string& name, DType type) {
  KILN_CHECK(is_identifier(name), "C emitter: call to '", name, "', not a C identifier");
  static const char* libm[] = {"log1p", "expm1", "exp", "log", "sqrt", "pow", "fabs", "erf", "tanh", "sin", "cos",
                               "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor",
                               "ceil", "nearbyint", "fmod", "fmax", "fmin", "exp2", "log2", "cbrt", "hypot"};
  if (type == DType::Float32 || type == DType::Float16 || type == DType::BFloat16)
    for (const char* f : libm)
      if (name == f) return name + "f";
  return name;
}

// ---------------------------------------------------------------- literals

std::string float_literal(double v, DType t) {
  const bool f = t != DType::Float64;
  if (f) {  // the value the type holds (which may overflow to inf)
    float x = float(v);
    if (t == DType::Float16) x = float(Half(x));
    if (t == DType::BFloat16) x = float(BFloat16(x));
    v = x;
  }
  if (std::isnan(v)) return f ? "NAN" : "((double)NAN)";
  if (std::isinf(v)) return std::string(v < 0 ? "(-" : "(") + (f ? "INFINITY" : "(double)INFINITY") + ")";
  char buf[64];
  // 9 significant digits round-trip every float, 17 every double.
  std::snprintf(buf, sizeof buf, f ? "%.9g" : "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (f) s += "f";
  return s[0] == '-' ? "(" + s + ")" : s;
}

std::string int_literal(int64_t v, DType t) {
  switch (t) {
    case DType::Bool: return v ? "true" : "false";
    case DType::Int64:
      if (v == INT64_MIN) return "INT64_MIN";
      break;
    case DType::Int32:
      v = int32_t(v);
      if (v == INT32_MIN) return "INT32_MIN";
      break;
    case DType::Int16: v = int16_t(v); break;
    case DType::Int8: v = int8_t(v); break;
    case DType::UInt8: return std::to_string(uint8_t(v));
    case DType::UInt16: return std::to_string(uint16_t(v));
    case DType::UInt32: return std::to_string(uint32_t(v)) + "u";
    case DType::UInt64: return std::to_string(uint64_t(v)) + "u";
    default: return float_literal(double(v), t);
  }
  return v < 0 ? "(" + std::to_string(v) + ")" : std::to_string(v);
}

// ---------------------------------------------------------------- expressions

// Signed int32/int64 data arithmetic wraps like the reference executor (C leaves overflow
// undefined, and GCC folds e.g. `a + b > a` to `b > 0`). Index arithmetic (load/store indices, loop
// extents) cannot overflow and stays plain C: readable, and the compiler keeps its no-wrap facts
// for vectorization.
enum class Ctx { Value, Index };

std::string emit_expr(const Expr& e, Ctx ctx = Ctx::Value);

bool wraps_by_helper(DType t, Ctx ctx) { return ctx == Ctx::Value && (t == DType::Int32 || t == DType::Int64); }

// `s` (a value of type `from`) converted to type `to`, as the reference executor's Tensor::cast
// does: float16/bfloat16 targets round, bool tests != 0, float→integer saturates (NaN → 0).
std::string convert(const std::string& s, DType from, DType to) {
  if (from == to) return s;
  const std::string f = computes_in_float(from) ? s : "(float)(" + s + ")";
  if (to == DType::Float16) return "kiln_f16_to_f32(kiln_f32_to_f16(" + f + "))";
  if (to == DType::BFloat16) return "kiln_bf16_to_f32(kiln_f32_to_bf16(" + f + "))";
  if (to == DType::Float32 && computes_in_float(from)) return s;  // float16/bfloat16 values are floats
  if (to == DType::Bool) return "((" + s + ") != 0)";
  if (is_integer(to) && is_float(from)) return std::string("kiln_sat_") + suffix(to) + "(" + s + ")";
  return std::string("((") + value_type(to) + ")(" + s + "))";
}

// A libm call in the precision of `t`; integer operands go through double and back.
std::string math_call(const char* fn, const std::string& a, DType t) {
  if (computes_in_float(t)) return std::string(fn) + "f(" + a + ")";
  if (t == DType::Float64) return std::string(fn) + "(" + a + ")";
  return std::string("((") + value_type(t) + ")" + fn + "((double)(" + a + ")))";
}

std::string wrap_narrow(const std::string& s, DType t) {
  return is_narrow(t) ? std::string("((") + value_type(t) + ")" + s + ")" : s;
}

std::string emit_unary(const ExprNode& e, Ctx ctx) {
  const DType t = e.args[0]->type;
  const std::string a = emit_expr(e.args[0], ctx);
  switch (e.un) {
    case UnOp::Neg:
      if (wraps_by_helper(t, ctx)) return std::string("kiln_neg_") + suffix(t) + "(" + a + ")";
      return wrap_narrow("(-" + a + ")", t);
    case UnOp::Not: return "(!" + a + ")";
    case UnOp::Abs:
      if (is_float(t)) return math_call("fabs", a, t);
      if (is_signed(t)) return std::string("kiln_abs_") + suffix(t) + "(" + a + ")";
      return a;  // unsigned, bool
    case UnOp::Floor:
    case UnOp::Ceil:
    case UnOp::Round:
      if (!is_float(t)) return a;
      return math_call(e.un == UnOp::Floor ? "floor" : e.un == UnOp::Ceil ? "ceil" : "nearbyint", a, t);
    case UnOp::IsNaN:
    case UnOp::IsInf:
      if (!is_float(t)) return "false";
      return std::string(e.un == UnOp::IsNaN ? "kiln_isnan_" : "kiln_isinf_") + suffix(t) + "(" + a + ")";
    case UnOp::Exp:
      // The prelude's kiln_expf vectorises where libm's expf is a scalar call; it is within 2 ulp
      // of the correctly rounded result, not libm's bits (docs/codegen.md "Numerics contract").
      // float64 keeps libm.
      if (computes_in_float(t)) return "kiln_expf(" + a + ")";
      break;
    case UnOp::Erf:
      // Likewise kiln_erff (GELU's erf): within 2 ulp of the correctly rounded erf; float64 keeps libm.
      if (computes_in_float(t)) return "kiln_erff(" + a + ")";
      break;
    case UnOp::Tanh:
      // Likewise kiln_tanhf (tanh-GELU, Tanh): within 3 ulp of the correctly rounded tanh.
      if (computes_in_float(t)) return "kiln_tanhf(" + a + ")";
      break;
    default: break;
  }
  // The remaining ops are libm functions of the same name as the IR's.
  return math_call(unop_name(e.un), a, t);
}

std::string emit_pow(const ExprNode& e, Ctx ctx) {
  const DType ta = e.args[0]->type, tb = e.args[1]->type;
  const std::string a = emit_expr(e.args[0], ctx), b = emit_expr(e.args[1], ctx);
  if (is_int_like(ta) && ta != DType::Bool && is_int_like(tb)) {
    if (is_signed(tb)) return std::string("kiln_pow_") + suffix(ta) + "(" + a + ", (int64_t)(" + b + "))";
    return std::string("kiln_powu_") + suffix(ta) + "(" + a + ", (uint64_t)(" + b + "))";
  }
  // float ** float in float, like numpy; every other mix in double, converted back.
  if (computes_in_float(ta) && computes_in_float(tb)) return "powf(" + a + ", " + b + ")";
  auto in_double = [](const std::string& s, DType t) { return t == DType::Float64 ? s : "(double)(" + s + ")"; };
  const std::string d = "pow(" + in_double(a, ta) + ", " + in_double(b, tb) + ")";
  return ta == DType::Float64 ? d : convert(d, DType::Float64, ta);
}

bool is_safe_divisor(const Expr& b) {
  return b->kind == ExprKind::IntImm && b->int_value != 0 && b->int_value != -1;
}

std::string emit_binary(const ExprNode& e, Ctx ctx) {
  const DType t = e.args[0]->type;
  if (e.bin == BinOp::Pow) return emit_pow(e, ctx);
  const std::string a = emit_expr(e.args[0], ctx), b = emit_expr(e.args[1], ctx);
  auto infix = [&](const char* op) { return "(" + a + " " + op + " " + b + ")"; };
  auto helper = [&](const char* fn) { return std::string("kiln_") + fn + "_" + suffix(t) + "(" + a + ", " + b + ")"; };
  auto arith = [&](const char* op, const char* fn) { return wraps_by_helper(t, ctx) ? helper(fn) : wrap_narrow(infix(op), t); };
  switch (e.bin) {
    case BinOp::Add: return arith("+", "add");
    case BinOp::Sub: return arith("-", "sub");
    case BinOp::Mul: return arith("*", "mul");
    case BinOp::Div:
      if (is_float(t)) return infix("/");
      // A constant divisor (index arithmetic) needs no zero / -1 guard and stays readable.
      return is_safe_divisor(e.args[1]) ? wrap_narrow(infix("/"), t) : helper("div");
    case BinOp::Mod:
      if (is_float(t)) return std::string(t == DType::Float64 ? "fmod(" : "fmodf(") + a + ", " + b + ")";
      return is_safe_divisor(e.args[1]) ? wrap_narrow(infix("%"), t) : helper("mod");
    case BinOp::Min: return helper("min");
    case BinOp::Max: return helper("max");
    case BinOp::Lt: return infix("<");
    case BinOp::Le: return infix("<=");
    case BinOp::Gt: return infix(">");
    case BinOp::Ge: return infix(">=");
    case BinOp::Eq: return infix("==");
    case BinOp::Ne: return infix("!=");
    case BinOp::And: return infix("&&");
    case BinOp::Or: return infix("||");
    case BinOp::Xor:
      if (t == DType::Bool && e.args[1]->type == DType::Bool) return infix("!=");
      return "((" + a + " != 0) != (" + b + " != 0))";
    case BinOp::Pow: break;
  }
  KILN_CHECK(false, "C emitter: unknown binary op ", int(e.bin));
}

std::string load_value(const Buffer& b, const std::string& index) {
  const std::string ref = ident(b.name) + "[" + index + "]";
  if (b.dtype == DType::Float16) return "kiln_f16_to_f32(" + ref + ")";
  if (b.dtype == DType::BFloat16) return "kiln_bf16_to_f32(" + ref + ")";
  return ref;
}

std::string emit_expr(const Expr& ep, Ctx ctx) {
  KILN_CHECK(ep, "C emitter: null expression");
  const ExprNode& e = *ep;
  switch (e.kind) {
    case ExprKind::IntImm: return int_literal(e.int_value, e.type);
    case ExprKind::FloatImm:
      if (is_float(e.type)) return float_literal(e.float_value, e.type);
      return convert(float_literal(e.float_value, DType::Float64), DType::Float64, e.type);
    case ExprKind::Var: return ident(e.name);
    case ExprKind::Load: return load_value(*e.buffer, emit_expr(e.args[0], Ctx::Index));
    case ExprKind::Unary: return emit_unary(e, ctx);
    case ExprKind::Binary: return emit_binary(e, ctx);
    case ExprKind::Select:
      if (is_float(e.type))  // kiln_select_*: see the prelude (a GCC -O3 miscompile of ?: with loads)
        return std::string("kiln_select_") + suffix(e.type) + "(" + emit_expr(e.args[0], ctx) + ", " +
               emit_expr(e.args[1], ctx) + ", " + emit_expr(e.args[2], ctx) + ")";
      return "(" + emit_expr(e.args[0], ctx) + " ? " + emit_expr(e.args[1], ctx) + " : " + emit_expr(e.args[2], ctx) + ")";
    case ExprKind::Cast: return convert(emit_expr(e.args[0], ctx), e.args[0]->type, e.type);
    case ExprKind::Address: return "(" + ident(e.buffer->name) + " + (" + emit_expr(e.args[0], Ctx::Index) + "))";
    case ExprKind::Call: {
      // A checked index also writes the kernel's status word (emit_kernel declares kiln_status).
      if (e.name == kCheckedIndex) {
        KILN_CHECK(e.args.size() == 3 && e.args[1]->kind == ExprKind::IntImm && e.args[2]->kind == ExprKind::IntImm,
                   "C emitter: malformed ", kCheckedIndex);
        return std::string(kCheckedIndex) + "(kiln_status, " + emit_expr(e.args[0]) + ", " +
               int_literal(e.args[1]->int_value, DType::Int64) + ", " + std::to_string(e.args[2]->int_value) + ")";
      }
      std::string s = callee(e.name, e.type) + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + emit_expr(e.args[i]);
      return s + ")";
    }
  }
  KILN_CHECK(false, "C emitter: unknown expression kind ", int(e.kind));
}

// ---------------------------------------------------------------- statements

// Local buffers above this size come from the per-thread scratch stack (kiln_scratch_push in the
// prelude): OpenMP worker threads have small stacks.
constexpr int64_t kMaxStackBytes = 64 * 1024;

class StmtEmitter {
 public:
  explicit StmtEmitter(std::ostringstream& os) : os_(os) {}

  void emit(const Stmt& s, int indent) {
    KILN_CHECK(s, "C emitter: null statement");
    const std::string pad(size_t(indent) * 2, ' ');
    switch (s->kind) {
      case StmtKind::For: emit_for(*s, indent); break;
      case StmtKind::Store: {
        const Buffer& b = *s->buffer;
        std::string v = emit_expr(s->value);
        if (is_half(b.dtype)) {
          if (!computes_in_float(s->value->type)) v = "(float)(" + v + ")";
          v = std::string(b.dtype == DType::Float16 ? "kiln_f32_to_f16(" : "kiln_f32_to_bf16(") + v + ")";
        } else {
          v = convert(v, s->value->type, b.dtype);
        }
        os_ << pad << ident(b.name) << "[" << emit_expr(s->index, Ctx::Index) << "] = " << v << ";\n";
        break;
      }
      case StmtKind::Let:
        os_ << pad << value_type(s->value->type) << " " << ident(s->var) << " = " << emit_expr(s->value) << ";\n";
        break;
      case StmtKind::Assign: os_ << pad << ident(s->var) << " = " << emit_expr(s->value) << ";\n"; break;
      case StmtKind::Block:  // a plain sequence, as in the printer: its Lets stay visible after it
        for (const auto& c : s->body) emit(c, indent);
        break;
      case StmtKind::If:
        os_ << pad << "if (" << emit_expr(s->cond) << ") {\n";
        body(s->body, indent + 1);
        if (!s->else_body.empty()) {
          os_ << pad << "} else {\n";
          body(s->else_body, indent + 1);
        }
        os_ << pad << "}\n";
        break;
      case StmtKind::Allocate: emit_allocate(*s, indent); break;
      case StmtKind::Call: {
        // A micro-kernel call with a constant tile goes to that tile's specialisation.
        const auto& a = s->call_args;
        size_t first = 0;
        std::string fn = callee(s->text, DType::Undefined);
        if (s->text == kernels::kMicroKernelF32 && a.size() == 10 && a[0]->kind == ExprKind::IntImm &&
            a[1]->kind == ExprKind::IntImm && kernels::has_specialisation(a[0]->int_value, a[1]->int_value)) {
          fn = kernels::specialisation_name(a[0]->int_value, a[1]->int_value);
          first = 2;
        }
        os_ << pad << fn << "(";
        for (size_t i = first; i < a.size(); ++i) os_ << (i > first ? ", " : "") << emit_expr(a[i]);
        os_ << ");\n";
        break;
      }
      case StmtKind::Comment: os_ << pad << "/* " << comment_safe(s->text) << " */\n"; break;
    }
  }

 private:
  void body(const std::vector<Stmt>& b, int indent) {
    for (const auto& c : b) emit(c, indent);
  }

  void emit_for(const StmtNode& s, int indent) {
    const std::string pad(size_t(indent) * 2, ' ');
    switch (s.for_kind) {
      case ForKind::Parallel:
        // Only the outermost loop forks threads; a nested parallel loop would oversubscribe.
        if (loop_depth_ == 0) os_ << pad << "#pragma omp parallel for\n";
        break;
      case ForKind::Vectorized: os_ << pad << "#pragma omp simd\n"; break;
      case ForKind::Unrolled:
        // GCC accepts unroll factors below 65535.
        if (s.extent->kind == ExprKind::IntImm && s.extent->int_value > 0 && s.extent->int_value < 65535)
          os_ << pad << "#pragma GCC unroll " << s.extent->int_value << "\n";
        break;
      case ForKind::Serial: break;
    }
    const std::string v = ident(s.var);
    // A loop variable that shadows an enclosing loop's captures every use of the outer one in
    // its body (a spliced row pass's tail loop named like the chain's row loop read the wrong
    // row): a lowering bug, never meant.
    KILN_CHECK(loops_.insert(v).second, "C emitter: loop variable '", s.var, "' shadows an enclosing loop's");
    os_ << pad << "for (int64_t " << v << " = 0; " << v << " < " << emit_expr(s.extent, Ctx::Index) << "; ++" << v << ") {\n";
    ++loop_depth_;
    body(s.body, indent + 1);
    --loop_depth_;
    loops_.erase(v);
    os_ << pad << "}\n";
  }

  void emit_allocate(const StmtNode& s, int indent) {
    const std::string pad(size_t(indent) * 2, ' ');
    const Buffer& b = *s.buffer;
    KILN_CHECK(b.scope != Scope::Global, "C emitter: global buffer ", b.name, " cannot be allocated in a kernel");
    const int64_t n = std::max<int64_t>(b.numel(), 1);  // C arrays cannot be empty
    const std::string name = ident(b.name), t = storage_type(b.dtype);
    // C resolves buffers by name, the IR (and the interpreter) by identity: a local that shadows a
    // live buffer of the same name would silently read the wrong one.
    KILN_CHECK(live_.insert(name).second, "C emitter: buffer '", b.name, "' is allocated while a buffer of that name is live");
    const bool heap = n * int64_t(dtype_size(b.dtype)) > kMaxStackBytes;
    os_ << pad << "{\n";
    if (heap)
      os_ << pad << "  " << t << "* restrict " << name << " = (" << t << "*)kiln_scratch_push(sizeof(" << t << ") * " << n
          << ");\n";
    else
      os_ << pad << "  " << t << " " << name << "[" << n << "];\n";
    body(s.body, indent + 1);
    if (heap) os_ << pad << "  kiln_scratch_pop(" << name << ", sizeof(" << t << ") * " << n << ");\n";
    os_ << pad << "}\n";
    live_.erase(name);
  }

  std::ostringstream& os_;
  int loop_depth_ = 0;
  std::set<std::string> live_;  // names of the buffers in scope (the kernel's arguments and locals)
  std::set<std::string> loops_;  // names of the enclosing loops' variables

 public:
  void declare(const std::string& name) { live_.insert(name); }
};

void emit_kernel(std::ostringstream& os, const LoopKernel& k) {
  KILN_CHECK(is_identifier(k.name) && !reserved_names().count(k.name) && k.name.rfind("kiln_", 0) != 0,
             "C emitter: kernel name '", k.name, "' is not a usable C function name");
  os << "/* kernel " << k.name << "\n";
  if (!k.sources.empty()) {
    os << " * from ONNX nodes:\n";
    for (const auto& src : k.sources) os << " *   " << comment_safe(src) << "\n";
  }
  os << " */\n";
  os << "void " << k.name << "(void* const* args) {\n";
  size_t arg = 0;
  for (const auto& b : k.inputs) {
    const std::string t = storage_type(b->dtype);
    os << "  const " << t << "* restrict " << ident(b->name) << " = (const " << t << "*)args[" << arg++ << "];\n";
  }
  for (const auto& b : k.outputs) {
    const std::string t = storage_type(b->dtype);
    os << "  " << t << "* restrict " << ident(b->name) << " = (" << t << "*)args[" << arg++ << "];\n";
  }
  // The status word of the index checks (LoopKernel::index_checks), after the outputs.
  if (!k.index_checks.empty()) os << "  int32_t* const kiln_status = (int32_t*)args[" << arg++ << "];\n";
  StmtEmitter em(os);
  for (const auto& b : k.inputs) em.declare(ident(b->name));
  for (const auto& b : k.outputs) em.declare(ident(b->name));
  if (k.body) em.emit(k.body, 1);
  os << "}\n\n";
}

// The (mr, nr) tiles of the micro-kernel calls in `s`: one specialisation is emitted for each.
void collect_tiles(const Stmt& s, std::set<std::pair<int64_t, int64_t>>& tiles, bool& any) {
  if (!s) return;
  if (s->kind == StmtKind::Call && s->text == kernels::kMicroKernelF32) {
    any = true;
    const auto& a = s->call_args;
    if (a.size() >= 2 && a[0]->kind == ExprKind::IntImm && a[1]->kind == ExprKind::IntImm)
      tiles.insert({a[0]->int_value, a[1]->int_value});
  }
  for (const auto& c : s->body) collect_tiles(c, tiles, any);
  for (const auto& c : s->else_body) collect_tiles(c, tiles, any);
}

}  // namespace

std::string comment_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) out += c;  // control characters (newlines included) go
  }
  // Removing one delimiter can join its neighbours into another ("*/*//" → "*/"): repeat until none.
  for (bool changed = true; changed;) {
    changed = false;
    for (const char* d : {"*/", "/*"})
      for (size_t p; (p = out.find(d)) != std::string::npos; changed = true) out.erase(p, 2);
  }
  // The emitter always puts a space between this text and its own "/*" and "*/".
  return out;
}

std::string emit_c(const std::vector<LoopKernel>& kernels, const EmitOptions& opts) {
  std::ostringstream os;
  os << detail::c_prelude(opts.strict_fp);
  // The C flags decide contraction (-ffp-contract=fast by default, =off under strict_fp); the
  // pragma is for compilers that honour it instead.
  os << (opts.strict_fp ? "#pragma STDC FP_CONTRACT OFF\n\n" : "#pragma STDC FP_CONTRACT ON\n\n");
  std::set<std::pair<int64_t, int64_t>> tiles;
  bool any_microkernel = false;
  for (const auto& k : kernels) collect_tiles(k.body, tiles, any_microkernel);
  if (any_microkernel) os << kernels::microkernel_c_source(tiles, !opts.strict_fp);
  for (const auto& k : kernels) emit_kernel(os, k);
  return os.str();
}

}  // namespace kiln::codegen
