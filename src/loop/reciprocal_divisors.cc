// A float division whose divisor is the same on every iteration of the innermost loop around it
// multiplies by the divisor's reciprocal instead: softmax's e / sum, LayerNorm's (x - mean) / std,
// attention's scores / sqrt(d), GELU's x / sqrt(2). A vector division costs several times a
// multiply (Zen 4: vdivps zmm one per ~5 cycles against two multiplies per cycle), and these are
// the divisions of every transformer's row kernels. Default numerics only (Schedule::
// reciprocal_divisors, false under --strict-fp): a · fl(1/b) is within 1.5 ulp of a / b, not
// the same bits.
//
// A constant divisor becomes its reciprocal rounded to the division's type, when that is a
// normal number (|b| in [2^-126, 2^126] for float32, [2^-1022, 2^1022] for float64): 0, inf,
// NaN and divisors whose reciprocal would be subnormal or overflow keep the division. A divisor
// computed before the loop (a Var, a load of a buffer the loop does not write, arithmetic of those)
// gets a Let `kiln_rcp = 1 / b` ahead of the loop, and the loop runs in two versions: with the
// multiplies when every such |b| is in that range, else as it was. (Outside it the two differ
// beyond rounding: a subnormal b's reciprocal overflows to inf. b = 0, inf or NaN would give the
// same results both ways but take the original loop too.) Parallel loops are left alone: the C
// emitter forks threads at the outermost loop only, and an If around it would hide that.
#include <cmath>
#include <set>

#include "loop/loop_transforms_internal.h"
#include "loop/register_epilogue.h"

namespace kiln::loop {

namespace {

bool is_float_type(DType t) { return t == DType::Float32 || t == DType::Float64; }

// The range of |b| whose reciprocal is a normal number of type t.
std::pair<double, double> normal_reciprocal_range(DType t) {
  return t == DType::Float32 ? std::pair<double, double>{0x1p-126, 0x1p126} : std::pair<double, double>{0x1p-1022, 0x1p1022};
}

bool has_loop(const std::vector<Stmt>& body) {
  for (const Stmt& s : body) {
    if (s->kind == StmtKind::For || has_loop(s->body) || has_loop(s->else_body)) return true;
  }
  return false;
}

void stored_buffers(const std::vector<Stmt>& body, std::set<const Buffer*>& out) {
  for (const Stmt& s : body) {
    if (s->kind == StmtKind::Store) out.insert(s->buffer.get());
    if (s->kind == StmtKind::Call)  // a micro-kernel writes through its address arguments
      for (const Expr& a : s->call_args)
        if (a->kind == ExprKind::Address) out.insert(a->buffer.get());
    stored_buffers(s->body, out);
    stored_buffers(s->else_body, out);
  }
}

class LoopRewriter {
 public:
  LoopRewriter(const StmtNode& loop, std::set<std::string>& used) : used_(used) {
    variant_.insert(loop.var);
    for (const Stmt& s : loop.body) {
      sched::bound_names(s, variant_);
      sched::assigned_names(s, variant_);
    }
    stored_buffers(loop.body, written_);
  }

  // b is the same on every iteration: no name the loop binds or assigns, no load of a buffer it
  // writes, no call (a checked index records its site).
  bool invariant(const Expr& b) const {
    if (b->kind == ExprKind::Call || b->kind == ExprKind::Address) return false;
    if (b->kind == ExprKind::Var && variant_.count(b->name)) return false;
    if (b->kind == ExprKind::Load && written_.count(b->buffer.get())) return false;
    for (const Expr& a : b->args)
      if (!invariant(a)) return false;
    return true;
  }

  // `e` with its divisions by constants and by invariant divisors rewritten; `hoist` false keeps
  // the invariant ones (the loop's fallback version).
  Expr expr(const Expr& e, bool hoist) {
    Expr r = map_args(e, [&](const Expr& a) { return expr(a, hoist); });
    if (r->kind != ExprKind::Binary || r->bin != BinOp::Div || !is_float_type(r->type)) return r;
    const Expr& b = r->args[1];
    const auto [lo, hi] = normal_reciprocal_range(r->type);
    if (b->kind == ExprKind::FloatImm) {
      const double v = std::fabs(b->float_value);
      if (!(v >= lo && v <= hi)) return r;
      const double rcp = r->type == DType::Float32 ? double(1.0f / float(b->float_value)) : 1.0 / b->float_value;
      return binary(BinOp::Mul, r->args[0], float_imm(rcp, r->type));
    }
    if (!hoist || b->type != r->type || !invariant(b)) return r;
    for (const auto& [name, d] : divisors_)
      if (same_expr(d, b)) return binary(BinOp::Mul, r->args[0], var(name, r->type));
    const std::string name = sched::fresh_name("kiln_rcp", used_);
    divisors_.push_back({name, b});
    return binary(BinOp::Mul, r->args[0], var(name, r->type));
  }

  std::vector<Stmt> body(const std::vector<Stmt>& in, bool hoist) {
    std::vector<Stmt> out;
    for (const Stmt& s : in) out.push_back(stmt(s, hoist));
    return out;
  }
  Stmt stmt(const Stmt& s, bool hoist) {
    return map_stmt(s, [&](const Expr& e) { return expr(e, hoist); }, [&](const Stmt& c) { return stmt(c, hoist); });
  }

  const std::vector<std::pair<std::string, Expr>>& divisors() const { return divisors_; }

 private:
  std::set<std::string>& used_;
  std::set<std::string> variant_;
  std::set<const Buffer*> written_;
  std::vector<std::pair<std::string, Expr>> divisors_;
};

// An innermost loop as the statements that replace it.
std::vector<Stmt> rewrite_loop(const Stmt& loop, std::set<std::string>& used) {
  LoopRewriter rw(*loop, used);
  auto fast = std::make_shared<StmtNode>(*loop);
  fast->body = rw.body(loop->body, /*hoist=*/true);
  if (rw.divisors().empty()) return {fast};
  auto plain = std::make_shared<StmtNode>(*loop);
  plain->body = rw.body(loop->body, /*hoist=*/false);
  std::vector<Stmt> out;
  Expr ok;
  for (const auto& [name, b] : rw.divisors()) {
    const auto [lo, hi] = normal_reciprocal_range(b->type);
    out.push_back(let(name, binary(BinOp::Div, float_imm(1.0, b->type), b)));
    const Expr mag = unary(UnOp::Abs, b);
    const Expr in_range = binary(BinOp::And, binary(BinOp::Ge, mag, float_imm(lo, b->type)),
                                 binary(BinOp::Le, mag, float_imm(hi, b->type)));
    ok = ok ? binary(BinOp::And, ok, in_range) : in_range;
  }
  out.push_back(if_then(ok, {fast}, {plain}));
  return out;
}

std::vector<Stmt> visit(const Stmt& s, std::set<std::string>& used);

std::vector<Stmt> visit_list(const std::vector<Stmt>& in, std::set<std::string>& used) {
  std::vector<Stmt> out;
  for (const Stmt& s : in)
    for (Stmt& r : visit(s, used)) out.push_back(std::move(r));
  return out;
}

std::vector<Stmt> visit(const Stmt& s, std::set<std::string>& used) {
  if (s->kind == StmtKind::For && s->for_kind != ForKind::Parallel && !has_loop(s->body)) return rewrite_loop(s, used);
  if (s->body.empty() && s->else_body.empty()) return {s};
  auto c = std::make_shared<StmtNode>(*s);
  c->body = visit_list(s->body, used);
  c->else_body = visit_list(s->else_body, used);
  return {c};
}

}  // namespace

void reciprocal_divisors(LoopKernel& k) {
  if (!k.body) return;
  std::set<std::string> used = sched::names_in(k);
  std::vector<Stmt> r = visit(k.body, used);
  k.body = r.size() == 1 ? r[0] : block(std::move(r));
}

}  // namespace kiln::loop
