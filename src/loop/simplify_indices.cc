#include "loop/simplify_indices.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "loop/loop_transforms_internal.h"

namespace kiln::loop {

namespace {

struct Range {
  int64_t lo = 0, hi = 0;  // inclusive
};
using Env = std::map<std::string, Range>;
// The values of the Int64 Lets in scope (never reassigned): a division of a Let's variable sees
// the Let's linear form (the lowering names shared index parts t0, t1, ... before this runs).
using Defs = std::map<std::string, Expr>;

// Bounds stay far inside int64 so that no sum or product of two of them overflows.
constexpr __int128 kLimit = __int128(1) << 62;
std::optional<Range> checked(__int128 lo, __int128 hi) {
  if (lo < -kLimit || hi > kLimit || lo > hi) return std::nullopt;
  return Range{int64_t(lo), int64_t(hi)};
}

bool is_i64(const Expr& e) { return e && e->type == DType::Int64; }
bool is_const(const Expr& e) { return e->kind == ExprKind::IntImm; }

int64_t floor_div(int64_t a, int64_t d) { return a / d - ((a % d != 0) && ((a < 0) != (d < 0))); }

class Simplifier {
 public:
  explicit Simplifier(const Env& env, const Defs* defs = nullptr) : env_(env), defs_(defs) {}

  Expr run(const Expr& e) {
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Expr r = map_args(e, [&](const Expr& a) { return run(a); });
    if (r->kind == ExprKind::Var && r->type == DType::Bool && defs_) {
      if (auto it = defs_->find(r->name); it != defs_->end() && is_const(it->second)) r = it->second;
    }
    if (is_i64(r) && r->kind == ExprKind::Binary) {
      const BinOp op = r->bin;
      if ((op == BinOp::Div || op == BinOp::Mod) && is_const(r->args[1]) && r->args[1]->int_value > 0) {
        if (Expr s = divmod(r->args[0], r->args[1]->int_value, op == BinOp::Div)) r = s;
      } else if (op == BinOp::Min || op == BinOp::Max) {
        auto a = range(r->args[0]), b = range(r->args[1]);
        if (a && b && a->hi <= b->lo) r = op == BinOp::Min ? r->args[0] : r->args[1];
        else if (a && b && b->hi <= a->lo) r = op == BinOp::Min ? r->args[1] : r->args[0];
      } else if (op == BinOp::Add || op == BinOp::Sub) {
        if (Expr s = recombine(r)) r = s;
      }
    }
    if (r->kind == ExprKind::Binary && r->type == DType::Bool) {
      if (auto v = decide(r)) {
        r = int_imm(*v ? 1 : 0, DType::Bool);
      } else if ((r->bin == BinOp::And || r->bin == BinOp::Or) && (is_const(r->args[0]) || is_const(r->args[1]))) {
        // false || x, true && x: x (the constant did not decide it, so it is the neutral one).
        r = is_const(r->args[0]) ? r->args[1] : r->args[0];
      }
    } else if (r->kind == ExprKind::Unary && r->un == UnOp::Not && is_const(r->args[0])) {
      r = int_imm(r->args[0]->int_value ? 0 : 1, DType::Bool);
    } else if (r->kind == ExprKind::Select && is_const(r->args[0])) {
      // A select whose condition the ranges decide (a Concat part or a Pad border after
      // partition_loops split the loop there) is the branch taken.
      r = r->args[0]->int_value ? r->args[1] : r->args[2];
    }
    memo_[e.get()] = r;
    return r;
  }

  // The value of a comparison of Int64 operands, or And/Or of decided operands, when the ranges
  // decide it for every value of the loop variables.
  std::optional<bool> decide(const Expr& r) {
    const Expr& a = r->args[0];
    const Expr& b = r->args[1];
    if (r->bin == BinOp::And || r->bin == BinOp::Or) {
      const bool is_and = r->bin == BinOp::And;
      for (const Expr& x : {a, b})
        if (is_const(x) && bool(x->int_value) != is_and) return !is_and;  // false && _, true || _
      if (is_const(a) && is_const(b)) return is_and;
      return std::nullopt;
    }
    if (!is_i64(a) || !is_i64(b)) return std::nullopt;
    auto da = linear(a), db = linear(b);
    if (!da || !db) return std::nullopt;
    auto diff = combine(*da, *db, -1);
    if (!diff) return std::nullopt;
    auto d = range(*diff);  // a - b
    if (!d) return std::nullopt;
    switch (r->bin) {
      case BinOp::Lt: return d->hi < 0 ? std::optional<bool>(true) : d->lo >= 0 ? std::optional<bool>(false) : std::nullopt;
      case BinOp::Le: return d->hi <= 0 ? std::optional<bool>(true) : d->lo > 0 ? std::optional<bool>(false) : std::nullopt;
      case BinOp::Gt: return d->lo > 0 ? std::optional<bool>(true) : d->hi <= 0 ? std::optional<bool>(false) : std::nullopt;
      case BinOp::Ge: return d->lo >= 0 ? std::optional<bool>(true) : d->hi < 0 ? std::optional<bool>(false) : std::nullopt;
      case BinOp::Eq: return d->lo == 0 && d->hi == 0 ? std::optional<bool>(true) : (d->hi < 0 || d->lo > 0) ? std::optional<bool>(false) : std::nullopt;
      case BinOp::Ne: return d->lo == 0 && d->hi == 0 ? std::optional<bool>(false) : (d->hi < 0 || d->lo > 0) ? std::optional<bool>(true) : std::nullopt;
      default: return std::nullopt;
    }
  }

  std::optional<Range> range(const Expr& e) {
    if (!is_i64(e)) return std::nullopt;
    if (auto it = ranges_.find(e.get()); it != ranges_.end()) return it->second;
    std::optional<Range> r = compute_range(e);
    ranges_[e.get()] = r;
    return r;
  }

 private:
  struct Term {
    Expr atom;
    int64_t coef;
  };
  // constant + Σ coef · atom, atoms distinct (by their printed form).
  struct Linear {
    int64_t k = 0;
    std::vector<Term> terms;
  };

  std::optional<Range> compute_range(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm: return Range{e->int_value, e->int_value};
      case ExprKind::Var: {
        auto it = env_.find(e->name);
        if (it == env_.end()) return std::nullopt;
        return it->second;
      }
      case ExprKind::Select: {
        auto t = range(e->args[1]), f = range(e->args[2]);
        if (!t || !f) return std::nullopt;
        return Range{std::min(t->lo, f->lo), std::max(t->hi, f->hi)};
      }
      case ExprKind::Binary: break;
      default: return std::nullopt;
    }
    auto a = range(e->args[0]), b = range(e->args[1]);
    if (!a || !b) return std::nullopt;
    switch (e->bin) {
      case BinOp::Add: return checked(__int128(a->lo) + b->lo, __int128(a->hi) + b->hi);
      case BinOp::Sub: return checked(__int128(a->lo) - b->hi, __int128(a->hi) - b->lo);
      case BinOp::Mul: {
        const __int128 c[4] = {__int128(a->lo) * b->lo, __int128(a->lo) * b->hi, __int128(a->hi) * b->lo,
                               __int128(a->hi) * b->hi};
        return checked(*std::min_element(c, c + 4), *std::max_element(c, c + 4));
      }
      case BinOp::Div:
        if (b->lo != b->hi || b->lo <= 0 || a->lo < 0) return std::nullopt;
        return Range{a->lo / b->lo, a->hi / b->lo};
      case BinOp::Mod:
        if (b->lo != b->hi || b->lo <= 0 || a->lo < 0) return std::nullopt;
        if (a->hi < b->lo) return *a;
        return Range{0, b->lo - 1};
      case BinOp::Min: return Range{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
      case BinOp::Max: return Range{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
      default: return std::nullopt;
    }
  }

  std::optional<Linear> linear(const Expr& e) {
    if (!is_i64(e)) return std::nullopt;
    if (e->kind == ExprKind::IntImm) return Linear{e->int_value, {}};
    if (e->kind == ExprKind::Binary) {
      const BinOp op = e->bin;
      if (op == BinOp::Add || op == BinOp::Sub) {
        auto a = linear(e->args[0]), b = linear(e->args[1]);
        if (!a || !b) return std::nullopt;
        return combine(*a, *b, op == BinOp::Add ? 1 : -1);
      }
      if (op == BinOp::Mul && (is_const(e->args[0]) || is_const(e->args[1]))) {
        const bool left = is_const(e->args[0]);
        auto f = linear(e->args[left ? 1 : 0]);
        if (!f) return std::nullopt;
        return scaled(*f, e->args[left ? 0 : 1]->int_value);
      }
    }
    if (e->kind == ExprKind::Var && defs_) {
      // Seen through once per variable: the definition's own variables are earlier Lets.
      if (auto it = defs_->find(e->name); it != defs_->end()) return linear(it->second);
    }
    return Linear{0, {{e, 1}}};
  }

  std::optional<Linear> scaled(Linear f, int64_t s) {
    const __int128 k = __int128(f.k) * s;
    if (k < -kLimit || k > kLimit) return std::nullopt;
    f.k = int64_t(k);
    for (auto& t : f.terms) {
      const __int128 c = __int128(t.coef) * s;
      if (c < -kLimit || c > kLimit) return std::nullopt;
      t.coef = int64_t(c);
    }
    f.terms.erase(std::remove_if(f.terms.begin(), f.terms.end(), [](const Term& t) { return t.coef == 0; }), f.terms.end());
    return f;
  }

  std::optional<Linear> combine(const Linear& a, const Linear& b, int64_t sign) {
    auto sb = scaled(b, sign);
    if (!sb) return std::nullopt;
    Linear r = a;
    const __int128 k = __int128(r.k) + sb->k;
    if (k < -kLimit || k > kLimit) return std::nullopt;
    r.k = int64_t(k);
    for (const Term& t : sb->terms) {
      auto it = std::find_if(r.terms.begin(), r.terms.end(), [&](const Term& u) { return same_atom(u.atom, t.atom); });
      if (it == r.terms.end()) {
        r.terms.push_back(t);
        continue;
      }
      const __int128 c = __int128(it->coef) + t.coef;
      if (c < -kLimit || c > kLimit) return std::nullopt;
      it->coef = int64_t(c);
      if (it->coef == 0) r.terms.erase(it);
    }
    return r;
  }

  bool same_atom(const Expr& a, const Expr& b) {
    if (a == b) return true;
    return key(a) == key(b);
  }
  const std::string& key(const Expr& e) {
    auto it = keys_.find(e.get());
    if (it == keys_.end()) it = keys_.emplace(e.get(), print_expr(e)).first;
    return it->second;
  }

  std::optional<Range> range(const Linear& f) {
    __int128 lo = f.k, hi = f.k;
    for (const Term& t : f.terms) {
      auto r = range(t.atom);
      if (!r) return std::nullopt;
      const __int128 a = __int128(t.coef) * r->lo, b = __int128(t.coef) * r->hi;
      lo += std::min(a, b);
      hi += std::max(a, b);
      if (lo < -kLimit || hi > kLimit) return std::nullopt;
    }
    return checked(lo, hi);
  }

  // Σ terms + k as an expression: terms by decreasing |coef|, then the constant.
  static Expr build(std::vector<Term> terms, int64_t k) {
    std::stable_sort(terms.begin(), terms.end(),
                     [](const Term& a, const Term& b) { return std::abs(a.coef) > std::abs(b.coef); });
    Expr r;
    for (const Term& t : terms) {
      if (!r) {
        r = mul(t.atom, int_imm(t.coef));
        continue;
      }
      r = t.coef < 0 ? binary(BinOp::Sub, r, mul(t.atom, int_imm(-t.coef))) : add(r, mul(t.atom, int_imm(t.coef)));
    }
    if (!r) return int_imm(k);
    if (k < 0) return binary(BinOp::Sub, r, int_imm(-k));
    return add(r, int_imm(k));
  }

  // A sum with c·d·(e / d) + c·(e % d) among its terms, which is c·e for any e (truncated or floor
  // division alike): a position unravelled into dims and raveled again (a row of a reduction
  // over a Concat's 7x7 parts read `(((c·7) + l/7)·7) + l%7` for element l of the row).
  // Null when there is no such pair.
  Expr recombine(const Expr& e) {
    auto f = linear(e);
    if (!f) return nullptr;
    auto divisor = [](const Expr& a, BinOp op) -> int64_t {
      return a->kind == ExprKind::Binary && a->bin == op && is_const(a->args[1]) && a->args[1]->int_value > 0
                 ? a->args[1]->int_value
                 : 0;
    };
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      for (size_t m = 0; m < f->terms.size() && !again; ++m) {
        const int64_t d = divisor(f->terms[m].atom, BinOp::Mod);
        if (!d) continue;
        const Expr& x = f->terms[m].atom->args[0];
        for (size_t q = 0; q < f->terms.size(); ++q) {
          const Term& t = f->terms[q];
          if (divisor(t.atom, BinOp::Div) != d || !same_atom(t.atom->args[0], x) ||
              __int128(t.coef) != __int128(f->terms[m].coef) * d)
            continue;
          auto xl = linear(x);
          if (!xl) break;
          const int64_t c = f->terms[m].coef;
          Linear rest{f->k, {}};
          for (size_t i = 0; i < f->terms.size(); ++i)
            if (i != m && i != q) rest.terms.push_back(f->terms[i]);
          auto sx = scaled(*xl, c);
          if (!sx) break;
          auto sum = combine(rest, *sx, 1);
          if (!sum) break;
          f = sum;
          changed = again = true;
          break;
        }
      }
    }
    return changed ? build(f->terms, f->k) : nullptr;
  }

  // e / d or e % d without the division where the ranges allow; null when they do not.
  Expr divmod(const Expr& e, int64_t d, bool div) {
    auto f = linear(e);
    if (!f) return nullptr;
    auto whole = range(*f);
    if (!whole || whole->lo < 0) return nullptr;  // floor and C's truncation agree only from 0
    if (whole->hi < d) return div ? int_imm(0) : e;
    // One quotient over the whole range: e / d is that constant, e % d = e - q·d.
    if (whole->lo / d == whole->hi / d) {
      const int64_t q = whole->lo / d;
      return div ? int_imm(q) : build(f->terms, f->k - q * d);
    }
    // e = c·E + R with R ∈ [0, c): c = d first (e / d = E exactly), then each coefficient dividing d.
    std::vector<int64_t> factors = {d};
    for (const Term& t : f->terms)
      if (t.coef > 1 && t.coef < d && d % t.coef == 0 && std::find(factors.begin(), factors.end(), t.coef) == factors.end())
        factors.push_back(t.coef);
    std::sort(factors.begin() + 1, factors.end(), std::greater<>());
    for (int64_t c : factors) {
      const int64_t kq = floor_div(f->k, c), kr = f->k - kq * c;
      Linear high{kq, {}}, rest{kr, {}};
      for (const Term& t : f->terms) (t.coef % c == 0 ? high : rest).terms.push_back(t);
      if (high.terms.empty()) continue;
      auto rr = range(rest);
      if (!rr || rr->lo < 0 || rr->hi >= c) continue;
      for (Term& t : high.terms) t.coef /= c;
      const Expr q = build(high.terms, high.k);
      const Expr r = build(rest.terms, rest.k);
      if (c == d) return div ? q : r;
      // e / d = E / (d/c) and e % d = c·(E % (d/c)) + R, E = q ≥ 0.
      const int64_t d2 = d / c;
      Expr inner = divmod(q, d2, div);
      if (!inner) inner = div ? div_floor(q, int_imm(d2)) : mod(q, int_imm(d2));
      return div ? inner : add(mul(inner, int_imm(c)), r);
    }
    // e = d·E + R with R ≥ 0 but not below d: e / d = E + R / d and e % d = R % d (floor division,
    // which C's truncation is from 0). The division stays, but the terms that are multiples of d
    // leave it: a window partition composed with a grid partition (MaxViT) divided
    // `(28·c + 4·a + b) / 7` for every channel c of a LayerNorm row, which kept the row's loop
    // variable inside a division and the row scalar; after this it reads 4·c + (4·a + b) / 7, whose
    // division is the same for the whole row (and whose % 4 the rule above then removes).
    Linear high{floor_div(f->k, d), {}}, rest{f->k - floor_div(f->k, d) * d, {}};
    for (const Term& t : f->terms) (t.coef % d == 0 ? high : rest).terms.push_back(t);
    if (high.terms.empty() || rest.terms.empty()) return nullptr;
    auto rr = range(rest);
    if (!rr || rr->lo < 0) return nullptr;
    for (Term& t : high.terms) t.coef /= d;
    const Expr r = build(rest.terms, rest.k);
    Expr part = divmod(r, d, div);
    if (!part) part = div ? div_floor(r, int_imm(d)) : mod(r, int_imm(d));
    return div ? add(build(high.terms, high.k), part) : part;
  }

  const Env& env_;
  const Defs* defs_;
  std::unordered_map<const ExprNode*, Expr> memo_;
  std::unordered_map<const ExprNode*, std::optional<Range>> ranges_;
  std::unordered_map<const ExprNode*, std::string> keys_;
};

class Walker {
 public:
  explicit Walker(std::set<std::string> assigned) : assigned_(std::move(assigned)) {}

  std::vector<Stmt> list(const std::vector<Stmt>& body, Env env, Defs defs) {
    std::vector<Stmt> out;
    out.reserve(body.size());
    for (const Stmt& s : body) {
      out.push_back(stmt(s, env, defs));
      const Stmt& n = out.back();
      if (n->kind != StmtKind::Let) continue;
      // A Let's range and value hold for the statements after it (unless the variable is
      // reassigned).
      std::optional<Range> r;
      const bool fixed = !assigned_.count(n->var) && is_i64(n->value);
      if (fixed) r = Simplifier(env, &defs).range(n->value);
      if (r) env[n->var] = *r;
      else env.erase(n->var);
      sched::forget_binding(defs, n->var);
      // A Bool Let the ranges decided (a Concat part's test inside a piece of partition_loops)
      // is that constant for the selects that read it.
      const bool decided = !assigned_.count(n->var) && n->value->type == DType::Bool && is_const(n->value);
      if (fixed || decided) defs[n->var] = n->value;
      else defs.erase(n->var);
    }
    return out;
  }

  Stmt stmt(const Stmt& s, const Env& env, const Defs& defs) {
    auto c = std::make_shared<StmtNode>(*s);
    Simplifier simp(env, &defs);
    for (Expr* e : {&c->extent, &c->index, &c->value, &c->cond})
      if (*e) *e = simp.run(*e);
    for (auto& a : c->call_args) a = simp.run(a);
    Env inner = env;
    Defs inner_defs = defs;
    if (c->kind == StmtKind::For) {
      auto r = simp.range(c->extent);
      if (r && r->hi >= 1 && !assigned_.count(c->var)) inner[c->var] = Range{0, r->hi - 1};
      else inner.erase(c->var);
      sched::forget_binding(inner_defs, c->var);
    }
    c->body = list(c->body, inner, inner_defs);
    c->else_body = list(c->else_body, env, defs);
    return c;
  }

 private:
  std::set<std::string> assigned_;
};

}  // namespace

void simplify_indices(LoopKernel& k) {
  if (!k.body) return;
  std::set<std::string> assigned;
  sched::assigned_names(k.body, assigned);
  Walker w(std::move(assigned));
  k.body = w.stmt(k.body, Env{}, Defs{});
}

Expr simplify_index(const Expr& e, const std::vector<std::pair<std::string, int64_t>>& extents) {
  Env env;
  for (const auto& [name, n] : extents)
    if (n >= 1) env[name] = Range{0, n - 1};
  return Simplifier(env).run(e);
}

}  // namespace kiln::loop
