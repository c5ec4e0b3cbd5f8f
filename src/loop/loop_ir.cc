#include "loop/loop_ir.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "support/error.h"

namespace kiln::loop {

const char* scope_name(Scope s) {
  switch (s) {
    case Scope::Global: return "global";
    case Scope::Local: return "local";
    case Scope::Register: return "register";
  }
  return "?";
}

const char* binop_name(BinOp op) {
  static const char* n[] = {"+", "-", "*", "/", "%", "min", "max", "pow", "<", "<=", ">", ">=", "==", "!=",
                            "&&", "||", "xor"};
  return n[int(op)];
}

const char* unop_name(UnOp op) {
  static const char* n[] = {"neg",  "not",  "abs",  "sqrt",  "exp",   "log",   "erf",   "tanh",
                            "sin",  "cos",  "tan",  "asin",  "acos",  "atan",  "sinh",  "cosh",
                            "asinh", "acosh", "atanh", "floor", "ceil", "round", "isnan", "isinf",
                            "sigmoid"};
  return n[int(op)];
}

const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial: return "serial";
    case ForKind::Parallel: return "parallel";
    case ForKind::Vectorized: return "vectorized";
    case ForKind::Unrolled: return "unrolled";
  }
  return "?";
}

namespace {
std::shared_ptr<ExprNode> node(ExprKind k, DType t) {
  auto e = std::make_shared<ExprNode>();
  e->kind = k;
  e->type = t;
  return e;
}
bool is_int(const Expr& e, int64_t v) { return e->kind == ExprKind::IntImm && e->int_value == v; }
bool is_comparison(BinOp op) {
  return op == BinOp::Lt || op == BinOp::Le || op == BinOp::Gt || op == BinOp::Ge || op == BinOp::Eq ||
         op == BinOp::Ne || op == BinOp::And || op == BinOp::Or || op == BinOp::Xor;
}
}  // namespace

Expr int_imm(int64_t v, DType t) {
  auto e = node(ExprKind::IntImm, t);
  e->int_value = v;
  return e;
}
Expr float_imm(double v, DType t) {
  auto e = node(ExprKind::FloatImm, t);
  e->float_value = v;
  return e;
}
Expr var(const std::string& name, DType t) {
  auto e = node(ExprKind::Var, t);
  e->name = name;
  return e;
}
Expr load(const BufferPtr& b, Expr index) {
  KILN_CHECK(b && index, "load needs a buffer and an index");
  auto e = node(ExprKind::Load, b->dtype);
  e->buffer = b;
  e->args = {std::move(index)};
  return e;
}
Expr unary(UnOp op, Expr a) {
  DType t = (op == UnOp::Not || op == UnOp::IsNaN || op == UnOp::IsInf) ? DType::Bool : a->type;
  auto e = node(ExprKind::Unary, t);
  e->un = op;
  e->args = {std::move(a)};
  return e;
}
Expr binary(BinOp op, Expr a, Expr b) {
  auto e = node(ExprKind::Binary, is_comparison(op) ? DType::Bool : a->type);
  e->bin = op;
  e->args = {std::move(a), std::move(b)};
  return e;
}
Expr select(Expr cond, Expr t, Expr f) {
  auto e = node(ExprKind::Select, t->type);
  e->args = {std::move(cond), std::move(t), std::move(f)};
  return e;
}
Expr cast(DType t, Expr a) {
  if (a->type == t) return a;
  auto e = node(ExprKind::Cast, t);
  e->args = {std::move(a)};
  return e;
}
Expr call(const std::string& fn, DType t, std::vector<Expr> args) {
  auto e = node(ExprKind::Call, t);
  e->name = fn;
  e->args = std::move(args);
  return e;
}

Expr checked_index(Expr i, int64_t dim, int64_t site) {
  KILN_CHECK(dim > 0 && site > 0, "checked_index: dim ", dim, ", site ", site);
  return call(kCheckedIndex, DType::Int64, {cast(DType::Int64, std::move(i)), int_imm(dim), int_imm(site)});
}

std::string index_error_message(const std::vector<IndexCheck>& checks, int64_t status) {
  for (const IndexCheck& c : checks)
    if (c.site == status) return c.message;
  throw InternalError(cat("index check status ", status, " names no check of the kernel"));
}

Expr address(const BufferPtr& b, Expr index) {
  auto e = node(ExprKind::Address, DType::Undefined);
  e->buffer = b;
  e->args = {std::move(index)};
  return e;
}

Expr add(Expr a, Expr b) {
  if (is_int(a, 0)) return b;
  if (is_int(b, 0)) return a;
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm) return int_imm(a->int_value + b->int_value);
  return binary(BinOp::Add, std::move(a), std::move(b));
}
Expr mul(Expr a, Expr b) {
  if (is_int(a, 0) || is_int(b, 0)) return int_imm(0);
  if (is_int(a, 1)) return b;
  if (is_int(b, 1)) return a;
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm) return int_imm(a->int_value * b->int_value);
  return binary(BinOp::Mul, std::move(a), std::move(b));
}
Expr div_floor(Expr a, Expr b) {
  if (is_int(b, 1)) return a;
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm && b->int_value != 0)
    return int_imm(a->int_value / b->int_value);
  return binary(BinOp::Div, std::move(a), std::move(b));
}
Expr mod(Expr a, Expr b) {
  if (is_int(b, 1)) return int_imm(0);
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm && b->int_value != 0)
    return int_imm(a->int_value % b->int_value);
  return binary(BinOp::Mod, std::move(a), std::move(b));
}
Expr minimum(Expr a, Expr b) {
  if (a->kind == ExprKind::IntImm && b->kind == ExprKind::IntImm) return int_imm(std::min(a->int_value, b->int_value));
  return binary(BinOp::Min, std::move(a), std::move(b));
}
Expr lt(Expr a, Expr b) { return binary(BinOp::Lt, std::move(a), std::move(b)); }

namespace {
std::shared_ptr<StmtNode> snode(StmtKind k) {
  auto s = std::make_shared<StmtNode>();
  s->kind = k;
  return s;
}
}  // namespace

Stmt for_loop(const std::string& v, Expr extent, std::vector<Stmt> body, ForKind k) {
  auto s = snode(StmtKind::For);
  s->var = v;
  s->extent = std::move(extent);
  s->body = std::move(body);
  s->for_kind = k;
  return s;
}
Stmt store(const BufferPtr& b, Expr index, Expr value) {
  auto s = snode(StmtKind::Store);
  s->buffer = b;
  s->index = std::move(index);
  s->value = std::move(value);
  return s;
}
Stmt let(const std::string& v, Expr value) {
  auto s = snode(StmtKind::Let);
  s->var = v;
  s->value = std::move(value);
  return s;
}
Stmt assign(const std::string& v, Expr value) {
  auto s = snode(StmtKind::Assign);
  s->var = v;
  s->value = std::move(value);
  return s;
}
Stmt block(std::vector<Stmt> body) {
  auto s = snode(StmtKind::Block);
  s->body = std::move(body);
  return s;
}
Stmt if_then(Expr cond, std::vector<Stmt> body, std::vector<Stmt> else_body) {
  auto s = snode(StmtKind::If);
  s->cond = std::move(cond);
  s->body = std::move(body);
  s->else_body = std::move(else_body);
  return s;
}
Stmt allocate(const BufferPtr& b, std::vector<Stmt> body) {
  auto s = snode(StmtKind::Allocate);
  s->buffer = b;
  s->body = std::move(body);
  return s;
}
Stmt call_stmt(const std::string& fn, std::vector<Expr> args) {
  auto s = snode(StmtKind::Call);
  s->text = fn;
  s->call_args = std::move(args);
  return s;
}
Stmt comment(const std::string& text) {
  auto s = snode(StmtKind::Comment);
  s->text = text;
  return s;
}

// ---------------------------------------------------------------- printer

std::string print_expr(const Expr& e) {
  switch (e->kind) {
    case ExprKind::IntImm: return std::to_string(e->int_value);
    case ExprKind::FloatImm: {
      char b[64];
      std::snprintf(b, sizeof b, "%.9g", e->float_value);
      std::string s = b;
      if (std::isfinite(e->float_value) && s.find_first_of(".en") == std::string::npos) s += ".0";
      return s + (e->type == DType::Float32 ? "f" : "");
    }
    case ExprKind::Var: return e->name;
    case ExprKind::Load: return e->buffer->name + "[" + print_expr(e->args[0]) + "]";
    case ExprKind::Address: return "&" + e->buffer->name + "[" + print_expr(e->args[0]) + "]";
    case ExprKind::Unary: return std::string(unop_name(e->un)) + "(" + print_expr(e->args[0]) + ")";
    case ExprKind::Binary: {
      BinOp op = e->bin;
      if (op == BinOp::Min || op == BinOp::Max || op == BinOp::Pow || op == BinOp::Xor)
        return std::string(binop_name(op)) + "(" + print_expr(e->args[0]) + ", " + print_expr(e->args[1]) + ")";
      return "(" + print_expr(e->args[0]) + " " + binop_name(op) + " " + print_expr(e->args[1]) + ")";
    }
    case ExprKind::Select:
      return "select(" + print_expr(e->args[0]) + ", " + print_expr(e->args[1]) + ", " + print_expr(e->args[2]) + ")";
    case ExprKind::Cast: return std::string(dtype_name(e->type)) + "(" + print_expr(e->args[0]) + ")";
    case ExprKind::Call: {
      std::string s = e->name + "(";
      for (size_t i = 0; i < e->args.size(); ++i) s += (i ? ", " : "") + print_expr(e->args[i]);
      return s + ")";
    }
  }
  return "?";
}

std::string print_stmt(const Stmt& s, int indent) {
  std::string pad(size_t(indent) * 2, ' ');
  std::ostringstream os;
  auto body = [&](const std::vector<Stmt>& b) {
    for (const auto& c : b) os << print_stmt(c, indent + 1);
  };
  switch (s->kind) {
    case StmtKind::For:
      os << pad << "for " << s->var << " in [0, " << print_expr(s->extent) << ")"
         << (s->for_kind == ForKind::Serial ? "" : std::string(" ") + for_kind_name(s->for_kind)) << " {\n";
      body(s->body);
      os << pad << "}\n";
      break;
    case StmtKind::Store:
      os << pad << s->buffer->name << "[" << print_expr(s->index) << "] = " << print_expr(s->value) << "\n";
      break;
    case StmtKind::Let:
      os << pad << dtype_name(s->value->type) << " " << s->var << " = " << print_expr(s->value) << "\n";
      break;
    case StmtKind::Assign: os << pad << s->var << " = " << print_expr(s->value) << "\n"; break;
    case StmtKind::Block:
      for (const auto& c : s->body) os << print_stmt(c, indent);  // a block adds no nesting level
      break;
    case StmtKind::If:
      os << pad << "if " << print_expr(s->cond) << " {\n";
      body(s->body);
      if (!s->else_body.empty()) {
        os << pad << "} else {\n";
        body(s->else_body);
      }
      os << pad << "}\n";
      break;
    case StmtKind::Allocate:
      os << pad << "allocate " << s->buffer->name << ": " << dtype_name(s->buffer->dtype) << shape_str(s->buffer->shape)
         << " " << scope_name(s->buffer->scope) << " {\n";
      body(s->body);
      os << pad << "}\n";
      break;
    case StmtKind::Call: {
      os << pad << s->text << "(";
      for (size_t i = 0; i < s->call_args.size(); ++i) os << (i ? ", " : "") << print_expr(s->call_args[i]);
      os << ")\n";
      break;
    }
    case StmtKind::Comment: os << pad << "// " << s->text << "\n"; break;
  }
  return os.str();
}

int64_t PackedInput::packed_numel() const {
  int64_t n = layout.packed_numel();
  for (const PackedSource& s : then) n += s.layout.packed_numel();
  return n;
}

std::vector<float> pack_argument(const PackedInput& p, const std::function<const float*(size_t input)>& source) {
  std::vector<float> out = pack_panels(source(p.input), p.layout);
  out.reserve(size_t(p.packed_numel()));
  for (const PackedSource& s : p.then) {
    const std::vector<float> more = pack_panels(source(s.input), s.layout);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::vector<Tensor> kernel_arguments(const LoopKernel& k, std::vector<Tensor> inputs) {
  // Sources are read from the row-major tensors as given (an input packed into another's
  // argument may itself be a packed argument).
  const std::vector<Tensor> given = inputs;
  auto source = [&](size_t i) {
    KILN_CHECK(i < given.size(), "kernel ", k.name, ": packed input ", i, " is not given");
    return given[i].data<float>();
  };
  for (const PackedInput& p : k.packed_inputs) {
    std::vector<PackedSource> all = {{p.input, p.layout}};
    all.insert(all.end(), p.then.begin(), p.then.end());
    for (const PackedSource& s : all) {
      KILN_CHECK(s.input < given.size(), "kernel ", k.name, ": packed input ", s.input, " is not given");
      const Tensor& src = given[s.input];
      KILN_CHECK(src.dtype() == DType::Float32 && src.numel() == s.layout.batch * s.layout.rows * s.layout.cols,
                 "kernel ", k.name, ": packed input ", s.input, " does not match its layout");
    }
    inputs[p.input] = Tensor::from_vector(pack_argument(p, source), {p.packed_numel()});
  }
  return inputs;
}

std::string print_kernel(const LoopKernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << "(";
  bool first = true;
  for (const auto* list : {&k.inputs, &k.outputs})
    for (const auto& b : *list) {
      os << (first ? "" : ", ") << (list == &k.inputs ? "in " : "out ") << b->name << ": " << dtype_name(b->dtype)
         << shape_str(b->shape);
      first = false;
    }
  os << ") {\n";
  for (const PackedInput& p : k.packed_inputs) {
    os << "  // " << k.inputs[p.input]->name << " packed: " << p.layout.str();
    for (const PackedSource& s : p.then) os << ", then " << k.inputs[s.input]->name << ": " << s.layout.str();
    os << "\n";
  }
  if (!k.sources.empty()) {
    os << "  // from:";
    for (const auto& s : k.sources) os << " " << s;
    os << "\n";
  }
  os << print_stmt(k.body, 1) << "}\n";
  return os.str();
}

}  // namespace kiln::loop
