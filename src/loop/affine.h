// Affine index analysis: a loop-IR Int64 expression as `constant + Σ coef·atom`, the tool the
// schedule transforms (loop_transforms.h) use for dependences, contiguity and footprints.
//
// An atom is a variable, or a subexpression that does not change inside the region being analysed
// (it mentions no varying name and loads no buffer the region writes) — `(i0 / 3)` is an atom when
// only the inner loops are analysed. Anything else that is not linear (div, mod, min, max, select,
// casts, loads, a product of two varying terms) fails with a reason: the transforms refuse what
// they cannot prove rather than guess.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "loop/loop_ir.h"

namespace kiln::loop {

// What changes inside the analysed region: its loop variables and the scalars it defines (`varying`),
// and the buffers it stores to (a load of one of them is never invariant).
struct AffineScope {
  std::set<std::string> varying;
  std::set<const Buffer*> written;
};

struct AffineForm {
  int64_t constant = 0;
  std::map<std::string, int64_t> coef;  // atom key → nonzero coefficient (key: a variable's name or
                                        // the printed invariant subexpression)
  std::map<std::string, Expr> atoms;    // atom key → its expression

  int64_t coef_of(const std::string& key) const;
  // The form rebuilt as an expression (terms by decreasing |coefficient|, then the constant).
  Expr to_expr() const;
  // The terms whose keys satisfy `keep`, without the constant.
  template <class Pred>
  AffineForm filtered(Pred keep) const {
    AffineForm f;
    for (const auto& [k, c] : coef)
      if (keep(k)) {
        f.coef[k] = c;
        f.atoms[k] = atoms.at(k);
      }
    return f;
  }
  bool operator==(const AffineForm& o) const { return constant == o.constant && coef == o.coef; }
};

// The affine form of `e` (an Int64 index) in `scope`; nullopt with the reason in *why otherwise.
std::optional<AffineForm> affine_form(const Expr& e, const AffineScope& scope, std::string* why = nullptr);

struct Interval {
  int64_t lo = 0, hi = 0;  // inclusive
};

// The range of `f` when each atom key k ranges over [0, extents[k] - 1]; nullopt when an atom has no
// extent (its range is unknown), an extent is < 1, or the bound overflows.
std::optional<Interval> affine_bounds(const AffineForm& f, const std::map<std::string, int64_t>& extents);

// True when Σ coef_j·x_j (x_j ∈ [0, extent_j)) takes values at least `span + 1` apart for distinct
// tuples — i.e. distinct tuples never meet even when each value is widened by a window of width
// `span` (mixed-radix test: sorted by |coef|, each |coef| must exceed the span of the smaller ones
// plus `span`). Terms of extent 1 are ignored; a zero coefficient with extent > 1 fails. The term of
// the largest |coef| may have an unknown extent (pass INT64_MAX): it widens nothing after it.
bool separates(const std::map<std::string, std::pair<int64_t, int64_t>>& coef_extent, int64_t span);

// A canonical key of an Int64 position expression: equal keys for positions that are equal as
// affine functions of their variables, however they were built ((i0 * 4 + i1) * 2 and
// 2 * i1 + 8 * i0 + 0 agree). Non-linear parts (div, mod, min, select, loads, ...) are atoms whose
// own operands are keyed the same way, so positions are compared as math, not as printed text
// (STYLE.md 15). Lowerings memoise and compare positions through it.
std::string position_key(const Expr& e);
inline bool same_position(const Expr& a, const Expr& b) { return a == b || position_key(a) == position_key(b); }

}  // namespace kiln::loop
