#include "loop/register_epilogue.h"

#include <cmath>

#include "kernels/microkernel.h"
#include "loop/affine.h"

namespace kiln::loop {

bool same_expr(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->type != b->type || a->args.size() != b->args.size()) return false;
  switch (a->kind) {
    case ExprKind::IntImm:
      if (a->int_value != b->int_value) return false;
      break;
    case ExprKind::FloatImm:
      // Bitwise: +0 and -0 are different bounds.
      if (std::signbit(a->float_value) != std::signbit(b->float_value) || !(a->float_value == b->float_value)) return false;
      break;
    case ExprKind::Var:
    case ExprKind::Call:
      if (a->name != b->name) return false;
      break;
    case ExprKind::Binary:
      if (a->bin != b->bin) return false;
      break;
    case ExprKind::Unary:
      if (a->un != b->un) return false;
      break;
    case ExprKind::Load:
    case ExprKind::Address:
      if (a->buffer != b->buffer) return false;
      break;
    default: break;
  }
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!same_expr(a->args[i], b->args[i])) return false;
  return true;
}

namespace {

// A float32 value the same for every element of the tile: a constant, or a load of a kernel input
// at a constant index.
bool uniform_float(const Expr& e) {
  if (!e || e->type != DType::Float32) return false;
  if (e->kind == ExprKind::FloatImm) return true;
  return e->kind == ExprKind::Load && e->buffer && e->buffer->scope == Scope::Global && e->args[0]->kind == ExprKind::IntImm;
}

// select(x OP bound, bound, x) with OP `op`: x, and the bound in *bound.
Expr clamp_of(const Expr& e, BinOp op, Expr* bound) {
  if (!e || e->kind != ExprKind::Select) return nullptr;
  const Expr& c = e->args[0];
  if (c->kind != ExprKind::Binary || c->bin != op) return nullptr;
  const Expr &x = c->args[0], &b = c->args[1];
  if (!uniform_float(b) || !same_expr(e->args[1], b) || !same_expr(e->args[2], x)) return nullptr;
  *bound = b;
  return x;
}

}  // namespace

std::optional<RegisterEpilogue> match_register_epilogue(const Expr& value, const Expr& acc, const std::string& column,
                                                        const std::set<std::string>& rows) {
  if (!value || value->type != DType::Float32) return std::nullopt;
  RegisterEpilogue r;
  Expr x = value;
  if (Expr in = clamp_of(x, BinOp::Gt, &r.hi)) {
    r.flags |= kernels::kEpHigh;
    x = in;
  }
  if (Expr in = clamp_of(x, BinOp::Lt, &r.lo)) {
    r.flags |= kernels::kEpLow;
    x = in;
  }
  AffineScope scope;
  scope.varying = rows;
  scope.varying.insert(column);
  // A load of a float32 kernel argument whose index is affine with coefficient 1 in the column;
  // its affine form in *f.
  auto column_load = [&](const Expr& b, std::optional<AffineForm>* f) {
    if (b->kind != ExprKind::Load || b->type != DType::Float32 || !b->buffer || b->buffer->scope != Scope::Global)
      return false;
    *f = affine_form(b->args[0], scope);
    return *f && (*f)->coef_of(column) == 1;
  };
  auto row_free = [&](const AffineForm& f) {
    for (const std::string& v : rows)
      if (f.coef_of(v) != 0) return false;
    return true;
  };
  // The residual: the outer Add, one side a load that varies with the rows, the other the sum
  // (with its bias).
  if (x->kind == ExprKind::Binary && x->bin == BinOp::Add) {
    for (int side = 0; side < 2; ++side) {
      const Expr &s = x->args[size_t(side)], &b = x->args[size_t(1 - side)];
      std::optional<AffineForm> f;
      if (!column_load(b, &f) || row_free(*f)) continue;
      r.flags |= kernels::kEpResidual;
      r.res = b->buffer;
      r.res_index = b->args[0];
      x = s;
      break;
    }
  }
  if (x->kind == ExprKind::Binary && x->bin == BinOp::Add) {
    for (int side = 0; side < 2; ++side) {
      const Expr &s = x->args[size_t(side)], &b = x->args[size_t(1 - side)];
      std::optional<AffineForm> f;
      if (!same_expr(s, acc) || !column_load(b, &f) || !row_free(*f)) continue;
      r.flags |= kernels::kEpBias;
      r.bias = b->buffer;
      r.bias_index = b->args[0];
      x = s;
      break;
    }
  }
  if (!same_expr(x, acc)) return std::nullopt;  // (flags 0: the value is the sum itself)
  return r;
}

}  // namespace kiln::loop
