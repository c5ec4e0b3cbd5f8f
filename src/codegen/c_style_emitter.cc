#include "codegen/c_style_emitter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "kernels/microkernel.h"
#include "support/error.h"

namespace kiln::codegen {

using namespace loop;

namespace {

// ---------------------------------------------------------------- types

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

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
    // OpenCL C and CUDA C++ words the GPU targets print (a model value named `global` or `half`).
    for (const char* w : {"global", "local", "private", "constant", "kernel", "half", "uchar", "ushort", "uint",
                          "ulong", "rint", "new", "delete", "class", "template", "this", "namespace", "operator",
                          "private", "public", "protected", "virtual", "friend", "using", "typename", "try",
                          "catch", "throw", "explicit", "mutable", "asm", "export", "blockIdx", "threadIdx",
                          "blockDim", "gridDim", "warpSize"})
      s.insert(w);
    return s;
  }();
  return names;
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

bool wraps_by_helper(DType t, bool index_ctx) { return !index_ctx && (t == DType::Int32 || t == DType::Int64); }

std::string wrap_narrow(const std::string& s, const std::string& vt, DType t) {
  return is_narrow(t) ? "((" + vt + ")" + s + ")" : s;
}

bool is_safe_divisor(const Expr& b) {
  return b->kind == ExprKind::IntImm && b->int_value != 0 && b->int_value != -1;
}

}  // namespace

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

// The C spelling of an IR name. Reserved names and the prelude's `kiln_` namespace get a trailing
// underscore (no prelude helper ends in one).
std::string CStyleEmitter::ident(const std::string& name) {
  KILN_CHECK(is_identifier(name), "C emitter: '", name, "' is not a C identifier");
  if (reserved_names().count(name) || name.rfind("kiln_", 0) == 0 || name.rfind("__", 0) == 0) return name + "_";
  return name;
}

std::string CStyleEmitter::storage_type(DType t) const {
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

std::string CStyleEmitter::value_type(DType t) const {
  if (is_half(t)) return "float";
  if (t == DType::Bool) return "bool";  // a target may store bools in bytes; values are bool
  return storage_type(t);
}

std::string CStyleEmitter::math_fn(const std::string& base, DType t) const {
  return computes_in_float(t) ? base + "f" : base;
}

// Called functions are the prelude's, libm's or micro-kernels: kiln's names, not the model's.
// A libm function called on float32 uses its float variant (log1p → log1pf), as the reference's
// std:: overloads do; anything else is called by its name.
std::string CStyleEmitter::callee(const std::string& name, DType type) const {
  KILN_CHECK(is_identifier(name), "C emitter: call to '", name, "', not a C identifier");
  static const char* libm[] = {"log1p", "expm1", "exp", "log", "sqrt", "pow", "fabs", "erf", "tanh", "sin", "cos",
                               "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor",
                               "ceil", "nearbyint", "fmod", "fmax", "fmin", "exp2", "log2", "cbrt", "hypot"};
  if (type == DType::Float32 || type == DType::Float16 || type == DType::BFloat16 || type == DType::Float64)
    for (const char* f : libm)
      if (name == f) return math_fn(name, type);
  return name;
}

// ---------------------------------------------------------------- expressions

// `s` (a value of type `from`) converted to type `to`, as the reference executor's Tensor::cast
// does: float16/bfloat16 targets round, bool tests != 0, float→integer saturates (NaN → 0).
std::string CStyleEmitter::convert(const std::string& s, DType from, DType to) const {
  if (from == to) return s;
  const std::string f = computes_in_float(from) ? s : "(float)(" + s + ")";
  if (to == DType::Float16) return "kiln_f16_to_f32(kiln_f32_to_f16(" + f + "))";
  if (to == DType::BFloat16) return "kiln_bf16_to_f32(kiln_f32_to_bf16(" + f + "))";
  if (to == DType::Float32 && computes_in_float(from)) return s;  // float16/bfloat16 values are floats
  if (to == DType::Bool) return "((" + s + ") != 0)";
  if (is_integer(to) && is_float(from)) return std::string("kiln_sat_") + suffix(to) + "(" + s + ")";
  return "((" + value_type(to) + ")(" + s + "))";
}

// A libm call in the precision of `t`; integer operands go through double and back.
std::string CStyleEmitter::math_call(const char* fn, const std::string& a, DType t) const {
  if (computes_in_float(t) || t == DType::Float64) return math_fn(fn, t) + "(" + a + ")";
  return "((" + value_type(t) + ")" + math_fn(fn, DType::Float64) + "((double)(" + a + ")))";
}

std::string CStyleEmitter::emit_unary(const ExprNode& e, Ctx ctx) {
  const DType t = e.args[0]->type;
  const std::string a = expr(e.args[0], ctx);
  switch (e.un) {
    case UnOp::Neg:
      if (wraps_by_helper(t, ctx == Ctx::Index)) return std::string("kiln_neg_") + suffix(t) + "(" + a + ")";
      return wrap_narrow("(-" + a + ")", value_type(t), t);
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
    case UnOp::Sigmoid:
      // kiln_sigmoidf (SiLU, Swish, gates): within 2 ulp where the result is normal; the
      // reference's 1 / (1 + exp(-x)) under --strict-fp. float64: that formula with libm's exp.
      if (computes_in_float(t)) return "kiln_sigmoidf(" + a + ")";
      return "(1.0 / (1.0 + " + math_fn("exp", DType::Float64) + "(-(" + a + "))))";
    default: break;
  }
  // The remaining ops are libm functions of the same name as the IR's.
  return math_call(unop_name(e.un), a, t);
}

std::string CStyleEmitter::emit_pow(const ExprNode& e, Ctx ctx) {
  const DType ta = e.args[0]->type, tb = e.args[1]->type;
  const std::string a = expr(e.args[0], ctx), b = expr(e.args[1], ctx);
  if (is_int_like(ta) && ta != DType::Bool && is_int_like(tb)) {
    if (is_signed(tb)) return std::string("kiln_pow_") + suffix(ta) + "(" + a + ", (int64_t)(" + b + "))";
    return std::string("kiln_powu_") + suffix(ta) + "(" + a + ", (uint64_t)(" + b + "))";
  }
  // float ** float in float, like numpy; every other mix in double, converted back.
  if (computes_in_float(ta) && computes_in_float(tb)) return math_fn("pow", DType::Float32) + "(" + a + ", " + b + ")";
  auto in_double = [](const std::string& s, DType t) { return t == DType::Float64 ? s : "(double)(" + s + ")"; };
  const std::string d = math_fn("pow", DType::Float64) + "(" + in_double(a, ta) + ", " + in_double(b, tb) + ")";
  return ta == DType::Float64 ? d : convert(d, DType::Float64, ta);
}

std::string CStyleEmitter::emit_binary(const ExprNode& e, Ctx ctx) {
  const DType t = e.args[0]->type;
  if (e.bin == BinOp::Pow) return emit_pow(e, ctx);
  const std::string a = expr(e.args[0], ctx), b = expr(e.args[1], ctx);
  const std::string vt = value_type(t);
  auto infix = [&](const char* op) { return "(" + a + " " + op + " " + b + ")"; };
  auto helper = [&](const char* fn) { return std::string("kiln_") + fn + "_" + suffix(t) + "(" + a + ", " + b + ")"; };
  auto arith = [&](const char* op, const char* fn) {
    return wraps_by_helper(t, ctx == Ctx::Index) ? helper(fn) : wrap_narrow(infix(op), vt, t);
  };
  switch (e.bin) {
    case BinOp::Add: return arith("+", "add");
    case BinOp::Sub: return arith("-", "sub");
    case BinOp::Mul: return arith("*", "mul");
    case BinOp::Div:
      if (is_float(t)) return infix("/");
      // A constant divisor (index arithmetic) needs no zero / -1 guard and stays readable.
      return is_safe_divisor(e.args[1]) ? wrap_narrow(infix("/"), vt, t) : helper("div");
    case BinOp::Mod:
      if (is_float(t)) return math_fn("fmod", t == DType::Float64 ? t : DType::Float32) + "(" + a + ", " + b + ")";
      return is_safe_divisor(e.args[1]) ? wrap_narrow(infix("%"), vt, t) : helper("mod");
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

std::string CStyleEmitter::load_value(const Buffer& b, const std::string& index) const {
  const std::string ref = ident(b.name) + "[" + index + "]";
  if (b.dtype == DType::Float16) return "kiln_f16_to_f32(" + ref + ")";
  if (b.dtype == DType::BFloat16) return "kiln_bf16_to_f32(" + ref + ")";
  return ref;
}

std::string CStyleEmitter::expr(const Expr& ep, Ctx ctx) {
  KILN_CHECK(ep, "C emitter: null expression");
  const ExprNode& e = *ep;
  switch (e.kind) {
    case ExprKind::IntImm: return int_literal(e.int_value, e.type);
    case ExprKind::FloatImm:
      if (is_float(e.type)) return float_literal(e.float_value, e.type);
      return convert(float_literal(e.float_value, DType::Float64), DType::Float64, e.type);
    case ExprKind::Var: return ident(e.name);
    case ExprKind::Load: return load_value(*e.buffer, expr(e.args[0], Ctx::Index));
    case ExprKind::Unary: return emit_unary(e, ctx);
    case ExprKind::Binary: return emit_binary(e, ctx);
    case ExprKind::Select:
      if (is_float(e.type))  // kiln_select_*: see the prelude (a GCC -O3 miscompile of ?: with loads)
        return std::string("kiln_select_") + suffix(e.type) + "(" + expr(e.args[0], ctx) + ", " +
               expr(e.args[1], ctx) + ", " + expr(e.args[2], ctx) + ")";
      return "(" + expr(e.args[0], ctx) + " ? " + expr(e.args[1], ctx) + " : " + expr(e.args[2], ctx) + ")";
    case ExprKind::Cast: return convert(expr(e.args[0], ctx), e.args[0]->type, e.type);
    case ExprKind::Address: return "(" + ident(e.buffer->name) + " + (" + expr(e.args[0], Ctx::Index) + "))";
    case ExprKind::Call: {
      // A checked index also writes the kernel's status word (each target's kernel signature
      // declares kiln_status when LoopKernel::index_checks is not empty).
      if (e.name == kCheckedIndex) {
        KILN_CHECK(e.args.size() == 3 && e.args[1]->kind == ExprKind::IntImm && e.args[2]->kind == ExprKind::IntImm,
                   "C emitter: malformed ", kCheckedIndex);
        return std::string(kCheckedIndex) + "(kiln_status, " + expr(e.args[0]) + ", " +
               int_literal(e.args[1]->int_value, DType::Int64) + ", " + std::to_string(e.args[2]->int_value) + ")";
      }
      std::string s = callee(e.name, e.type) + "(";
      for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + expr(e.args[i]);
      return s + ")";
    }
  }
  KILN_CHECK(false, "C emitter: unknown expression kind ", int(e.kind));
}

// ---------------------------------------------------------------- statements

void CStyleEmitter::stmt(std::ostream& os, const Stmt& s, int indent) {
  KILN_CHECK(s, "C emitter: null statement");
  const std::string pad(size_t(indent) * 2, ' ');
  switch (s->kind) {
    case StmtKind::For: emit_for(os, *s, indent); break;
    case StmtKind::Store: {
      const Buffer& b = *s->buffer;
      std::string v = expr(s->value);
      if (is_half(b.dtype)) {
        if (!computes_in_float(s->value->type)) v = "(float)(" + v + ")";
        v = std::string(b.dtype == DType::Float16 ? "kiln_f32_to_f16(" : "kiln_f32_to_bf16(") + v + ")";
      } else {
        v = convert(v, s->value->type, b.dtype);
      }
      os << pad << ident(b.name) << "[" << expr(s->index, Ctx::Index) << "] = " << v << ";\n";
      break;
    }
    case StmtKind::Let: {
      // An index Let in plain arithmetic (no signed overflow is possible for an index into a
      // buffer that exists): with the wrapping helpers GCC cannot prove the index affine in the
      // loop variable and turns contiguous vector stores into scatters.
      const bool index = is_index_arithmetic(s->value);
      if (index) index_lets_.insert(s->var);
      else index_lets_.erase(s->var);
      os << pad << value_type(s->value->type) << " " << ident(s->var) << " = "
         << (index ? expr(s->value, Ctx::Index) : expr(s->value)) << ";\n";
      break;
    }
    case StmtKind::Assign: os << pad << ident(s->var) << " = " << expr(s->value) << ";\n"; break;
    case StmtKind::Block:  // a plain sequence, as in the printer: its Lets stay visible after it
      for (const auto& c : s->body) stmt(os, c, indent);
      break;
    case StmtKind::If: {
      // A binary condition prints parenthesised already: `if ((a == 0))` makes clang (PoCL's
      // OpenCL compiler) warn about extraneous parentheses, a line on the user's stderr.
      std::string c = expr(s->cond);
      const bool wrapped = c.size() >= 2 && c.front() == '(' && c.back() == ')' && [&] {
        int depth = 0;
        for (size_t i = 0; i + 1 < c.size(); ++i) {
          depth += c[i] == '(' ? 1 : c[i] == ')' ? -1 : 0;
          if (depth == 0) return false;  // the first '(' closes before the end: not one group
        }
        return true;
      }();
      os << pad << "if " << (wrapped ? c : "(" + c + ")") << " {\n";
      body(os, s->body, indent + 1);
      if (!s->else_body.empty()) {
        os << pad << "} else {\n";
        body(os, s->else_body, indent + 1);
      }
      os << pad << "}\n";
      break;
    }
    case StmtKind::Allocate: {
      const Buffer& b = *s->buffer;
      KILN_CHECK(b.scope != Scope::Global, "C emitter: global buffer ", b.name, " cannot be allocated in a kernel");
      emit_allocate(os, *s, indent);
      break;
    }
    case StmtKind::Call: {
      const auto& a = s->call_args;
      auto [fn, first] = microkernel_call(*s);
      os << pad << fn << "(";
      for (size_t i = first; i < a.size(); ++i) os << (i > first ? ", " : "") << expr(a[i]);
      os << ");\n";
      break;
    }
    case StmtKind::Comment: os << pad << "/* " << comment_safe(s->text) << " */\n"; break;
  }
}

void CStyleEmitter::body(std::ostream& os, const std::vector<Stmt>& b, int indent) {
  for (const auto& c : b) stmt(os, c, indent);
}

std::pair<std::string, size_t> CStyleEmitter::microkernel_call(const StmtNode& s) {
  return {callee(s.text, DType::Undefined), 0};
}

void CStyleEmitter::emit_for_header(std::ostream&, const StmtNode&, const std::string&, int) {}

bool CStyleEmitter::is_index_arithmetic(const Expr& e) const {
  if (e->type != DType::Int64) return false;
  switch (e->kind) {
    case ExprKind::IntImm: return true;
    case ExprKind::Var: return loops_.count(ident(e->name)) > 0 || index_lets_.count(e->name) > 0;
    case ExprKind::Binary:
      switch (e->bin) {
        case BinOp::Add:
        case BinOp::Sub:
        case BinOp::Mul:
        case BinOp::Min:
        case BinOp::Max: return is_index_arithmetic(e->args[0]) && is_index_arithmetic(e->args[1]);
        case BinOp::Div:
        case BinOp::Mod:  // by a positive constant only: no zero or -1 divisor to guard
          return is_index_arithmetic(e->args[0]) && e->args[1]->kind == ExprKind::IntImm && e->args[1]->int_value > 0;
        default: return false;
      }
    default: return false;
  }
}

void CStyleEmitter::emit_for(std::ostream& os, const StmtNode& s, int indent) {
  const std::string pad(size_t(indent) * 2, ' ');
  emit_for_header(os, s, pad, parallel_depth_);
  const std::string v = ident(s.var);
  // A loop variable that shadows an enclosing loop's captures every use of the outer one in
  // its body (a spliced row pass's tail loop named like the chain's row loop read the wrong
  // row): a lowering bug, never meant.
  KILN_CHECK(loops_.insert(v).second, "C emitter: loop variable '", s.var, "' shadows an enclosing loop's");
  os << pad << "for (int64_t " << v << " = 0; " << v << " < " << expr(s.extent, Ctx::Index) << "; ++" << v << ") {\n";
  const int inside = s.for_kind == ForKind::Parallel ? 1 : 0;
  parallel_depth_ += inside;
  body(os, s.body, indent + 1);
  parallel_depth_ -= inside;
  loops_.erase(v);
  os << pad << "}\n";
}

void CStyleEmitter::claim_buffer(const std::string& name, const std::string& ir_name) {
  // C resolves buffers by name, the IR (and the interpreter) by identity: a local that shadows a
  // live buffer of the same name would silently read the wrong one.
  KILN_CHECK(live_.insert(name).second, "C emitter: buffer '", ir_name,
             "' is allocated while a buffer of that name is live");
}

// A plain array for the scope of the body (targets override: C moves large ones off the stack).
void CStyleEmitter::emit_allocate(std::ostream& os, const StmtNode& s, int indent) {
  const std::string pad(size_t(indent) * 2, ' ');
  const Buffer& b = *s.buffer;
  const int64_t n = std::max<int64_t>(b.numel(), 1);  // C arrays cannot be empty
  const std::string name = ident(b.name);
  claim_buffer(name, b.name);
  os << pad << "{\n" << pad << "  " << storage_type(b.dtype) << " " << name << "[" << n << "];\n";
  body(os, s.body, indent + 1);
  os << pad << "}\n";
  release_buffer(name);
}

void CStyleEmitter::begin_kernel(const LoopKernel& k) {
  KILN_CHECK(is_identifier(k.name) && !reserved_names().count(k.name) && k.name.rfind("kiln_", 0) != 0,
             "C emitter: kernel name '", k.name, "' is not a usable C function name");
  live_.clear();
  loops_.clear();
  parallel_depth_ = 0;
  for (const auto& b : k.inputs) live_.insert(ident(b->name));
  for (const auto& b : k.outputs) live_.insert(ident(b->name));
}

void CStyleEmitter::kernel_comment(std::ostream& os, const LoopKernel& k) const {
  os << "/* kernel " << k.name << "\n";
  if (!k.sources.empty()) {
    os << " * from ONNX nodes:\n";
    for (const auto& src : k.sources) os << " *   " << comment_safe(src) << "\n";
  }
  os << " */\n";
}

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

}  // namespace kiln::codegen
