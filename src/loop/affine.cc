#include "loop/affine.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace kiln::loop {

int64_t AffineForm::coef_of(const std::string& key) const {
  auto it = coef.find(key);
  return it == coef.end() ? 0 : it->second;
}

Expr AffineForm::to_expr() const {
  // Larger strides first, as a row-major index reads: ((i * 6) + j).
  std::vector<std::pair<std::string, int64_t>> terms(coef.begin(), coef.end());
  std::stable_sort(terms.begin(), terms.end(), [](const auto& a, const auto& b) {
    const uint64_t x = a.second < 0 ? 0 - uint64_t(a.second) : uint64_t(a.second);
    const uint64_t y = b.second < 0 ? 0 - uint64_t(b.second) : uint64_t(b.second);
    return x > y;
  });
  Expr e;
  for (const auto& [k, c] : terms) {
    Expr t = mul(atoms.at(k), int_imm(c));
    e = e ? add(e, t) : t;
  }
  if (!e) return int_imm(constant);
  return add(e, int_imm(constant));
}

namespace {

bool is_int_type(DType t) { return is_integer(t); }

// True when `e` has the same value everywhere in the region.
bool invariant(const Expr& e, const AffineScope& scope) {
  switch (e->kind) {
    case ExprKind::Var: return !scope.varying.count(e->name);
    case ExprKind::Load:
      if (scope.written.count(e->buffer.get())) return false;
      break;
    default: break;
  }
  for (const auto& a : e->args)
    if (!invariant(a, scope)) return false;
  return true;
}

struct Analyzer {
  const AffineScope& scope;
  std::string why;

  std::optional<AffineForm> fail(std::string reason) {
    if (why.empty()) why = std::move(reason);
    return std::nullopt;
  }

  static std::optional<AffineForm> atom(const std::string& key, const Expr& e) {
    AffineForm f;
    f.coef[key] = 1;
    f.atoms[key] = e;
    return f;
  }

  // a + sign·b, nullopt on overflow.
  static std::optional<AffineForm> combine(const AffineForm& a, const AffineForm& b, int64_t sign) {
    AffineForm r = a;
    int64_t bc;
    if (__builtin_mul_overflow(b.constant, sign, &bc) || __builtin_add_overflow(r.constant, bc, &r.constant))
      return std::nullopt;
    for (const auto& [k, c] : b.coef) {
      int64_t sc, sum;
      if (__builtin_mul_overflow(c, sign, &sc) || __builtin_add_overflow(r.coef_of(k), sc, &sum)) return std::nullopt;
      if (sum == 0) {
        r.coef.erase(k);
        r.atoms.erase(k);
      } else {
        r.coef[k] = sum;
        r.atoms[k] = b.atoms.at(k);
      }
    }
    return r;
  }

  static std::optional<AffineForm> scale(const AffineForm& a, int64_t s) {
    AffineForm r;
    if (s == 0) return r;
    if (__builtin_mul_overflow(a.constant, s, &r.constant)) return std::nullopt;
    r.atoms = a.atoms;
    for (const auto& [k, c] : a.coef)
      if (__builtin_mul_overflow(c, s, &r.coef[k])) return std::nullopt;
    return r;
  }

  std::optional<AffineForm> analyze(const Expr& e) {
    if (!is_int_type(e->type)) return fail("index '" + print_expr(e) + "' is not an integer");
    switch (e->kind) {
      case ExprKind::IntImm: {
        AffineForm f;
        f.constant = e->int_value;
        return f;
      }
      case ExprKind::Var: return atom(e->name, e);
      case ExprKind::Unary:
        if (e->un == UnOp::Neg) {
          auto a = analyze(e->args[0]);
          if (!a) return a;
          auto r = scale(*a, -1);
          return r ? r : fail("index overflows");
        }
        break;
      case ExprKind::Binary: {
        if (e->bin != BinOp::Add && e->bin != BinOp::Sub && e->bin != BinOp::Mul) break;
        auto a = analyze(e->args[0]);
        if (!a) return a;
        auto b = analyze(e->args[1]);
        if (!b) return b;
        std::optional<AffineForm> r;
        if (e->bin == BinOp::Mul) {
          if (a->coef.empty()) r = scale(*b, a->constant);
          else if (b->coef.empty()) r = scale(*a, b->constant);
          else if (invariant(e, scope)) return atom(print_expr(e), e);
          else return fail("index '" + print_expr(e) + "' multiplies two varying terms");
        } else {
          r = combine(*a, *b, e->bin == BinOp::Add ? 1 : -1);
        }
        return r ? r : fail("index '" + print_expr(e) + "' overflows");
      }
      default: break;
    }
    // Not linear: usable only as an atom that does not change inside the region.
    if (invariant(e, scope)) return atom(print_expr(e), e);
    return fail("index '" + print_expr(e) + "' is not affine in the loop variables");
  }
};

}  // namespace

std::optional<AffineForm> affine_form(const Expr& e, const AffineScope& scope, std::string* why) {
  Analyzer a{scope, {}};
  auto r = a.analyze(e);
  if (!r && why) *why = a.why;
  return r;
}

std::optional<Interval> affine_bounds(const AffineForm& f, const std::map<std::string, int64_t>& extents) {
  Interval r{f.constant, f.constant};
  for (const auto& [k, c] : f.coef) {
    auto it = extents.find(k);
    if (it == extents.end() || it->second < 1) return std::nullopt;
    int64_t span;
    if (__builtin_mul_overflow(c, it->second - 1, &span)) return std::nullopt;
    if (__builtin_add_overflow(c > 0 ? r.hi : r.lo, span, c > 0 ? &r.hi : &r.lo)) return std::nullopt;
  }
  return r;
}

bool separates(const std::map<std::string, std::pair<int64_t, int64_t>>& coef_extent, int64_t span) {
  std::vector<std::pair<int64_t, int64_t>> terms;  // (|coef|, extent)
  for (const auto& [k, ce] : coef_extent) {
    const auto [c, n] = ce;
    if (n <= 1) continue;
    if (c == 0 || c == INT64_MIN) return false;
    terms.push_back({std::llabs(c), n});
  }
  std::sort(terms.begin(), terms.end());
  for (size_t i = 0; i < terms.size(); ++i) {
    const auto [c, n] = terms[i];
    if (c <= span) return false;
    if (i + 1 == terms.size()) break;  // the largest term's extent does not matter (may be unknown)
    int64_t add;
    if (__builtin_mul_overflow(c, n - 1, &add) || __builtin_add_overflow(span, add, &span)) return false;
  }
  return true;
}

namespace {

// Σ coef·term + constant of `e`, with non-linear terms keyed recursively; false on overflow.
bool linear_terms(const Expr& e, int64_t scale, std::map<std::string, int64_t>& terms, int64_t& constant);

std::string atom_key(const Expr& e) {
  std::string k;
  switch (e->kind) {
    case ExprKind::Var: return e->name;
    case ExprKind::IntImm: return std::to_string(e->int_value);
    case ExprKind::FloatImm: return print_expr(e);
    case ExprKind::Load: k = "load:" + (e->buffer ? e->buffer->name : std::string("?")); break;
    case ExprKind::Address: k = "addr:" + (e->buffer ? e->buffer->name : std::string("?")); break;
    case ExprKind::Unary: k = std::string("un:") + unop_name(e->un); break;
    case ExprKind::Binary: k = std::string("bin:") + binop_name(e->bin); break;
    case ExprKind::Select: k = "select"; break;
    case ExprKind::Cast: k = "cast:" + std::string(dtype_name(e->type)); break;
    case ExprKind::Call: k = "call:" + e->name; break;
  }
  k += "(";
  for (size_t i = 0; i < e->args.size(); ++i) {
    const Expr& a = e->args[i];
    k += (i ? "," : "") + (a->type == DType::Int64 ? position_key(a) : atom_key(a));
  }
  return k + ")";
}

bool linear_terms(const Expr& e, int64_t scale, std::map<std::string, int64_t>& terms, int64_t& constant) {
  auto add_term = [&](const std::string& key, int64_t c) {
    int64_t& t = terms[key];
    if (__builtin_add_overflow(t, c, &t)) return false;
    if (t == 0) terms.erase(key);
    return true;
  };
  if (e->type == DType::Int64) {
    if (e->kind == ExprKind::IntImm) {
      int64_t p;
      return !__builtin_mul_overflow(e->int_value, scale, &p) && !__builtin_add_overflow(constant, p, &constant);
    }
    if (e->kind == ExprKind::Unary && e->un == UnOp::Neg) return linear_terms(e->args[0], -scale, terms, constant);
    if (e->kind == ExprKind::Binary && (e->bin == BinOp::Add || e->bin == BinOp::Sub))
      return linear_terms(e->args[0], scale, terms, constant) &&
             linear_terms(e->args[1], e->bin == BinOp::Sub ? -scale : scale, terms, constant);
    if (e->kind == ExprKind::Binary && e->bin == BinOp::Mul) {
      for (int side = 0; side < 2; ++side) {
        const Expr& c = e->args[size_t(side)];
        if (c->kind != ExprKind::IntImm) continue;
        int64_t s;
        if (__builtin_mul_overflow(scale, c->int_value, &s)) return false;
        return linear_terms(e->args[size_t(1 - side)], s, terms, constant);
      }
    }
  }
  return add_term(atom_key(e), scale);
}

}  // namespace

std::string position_key(const Expr& e) {
  std::map<std::string, int64_t> terms;
  int64_t constant = 0;
  if (!linear_terms(e, 1, terms, constant)) return "!" + print_expr(e);  // overflow: structural
  std::string k;
  for (const auto& [t, c] : terms) k += std::to_string(c) + "*" + t + "+";
  return k + std::to_string(constant);
}

}  // namespace kiln::loop
