#include "transforms/lower_einsum.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// The parsed equation: one label string per operand and the output's.
struct Equation {
  std::vector<std::string> terms;
  std::string out;
  std::map<char, int64_t> size;
};

std::optional<Equation> parse(const Node& n, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return std::nullopt;
  };
  std::string eq;
  for (char c : n.attr_string("equation", ""))
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  Equation e;
  for (size_t pos = 0;;) {
    const size_t comma = lhs.find(',', pos);
    e.terms.push_back(lhs.substr(pos, comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (e.terms.size() != n.num_inputs() || e.terms.size() > 2) return fail("only one or two operands are lowered");
  for (size_t i = 0; i < e.terms.size(); ++i)
    if (!n.input(i)) return fail("an operand is missing");
  // An ellipsis stands for the same dims in every operand (right-aligned); they get letters the
  // equation does not use. Ellipses whose dims would broadcast (1 against n) are not lowered.
  std::string ellipsis;
  if (eq.find('.') != std::string::npos) {
    size_t ell_rank = 0;
    std::vector<size_t> ell_dims(e.terms.size(), 0);
    for (size_t i = 0; i < e.terms.size(); ++i) {
      const size_t at = e.terms[i].find("...");
      if (at == std::string::npos) continue;
      const size_t named = e.terms[i].size() - 3;
      if (n.input(i)->shape().size() < named) return fail("a term does not match its operand's rank");
      ell_dims[i] = n.input(i)->shape().size() - named;
      ell_rank = std::max(ell_rank, ell_dims[i]);
    }
    for (char c = 'A'; ellipsis.size() < ell_rank && c <= 'z'; ++c)
      if (std::isalpha(static_cast<unsigned char>(c)) && eq.find(c) == std::string::npos) ellipsis += c;
    if (ellipsis.size() < ell_rank) return fail("no letters left for the ellipsis");
    for (size_t i = 0; i < e.terms.size(); ++i) {
      const size_t at = e.terms[i].find("...");
      if (at == std::string::npos) continue;
      e.terms[i].replace(at, 3, ellipsis.substr(ell_rank - ell_dims[i]));
    }
  }
  std::map<char, int> uses;
  for (size_t i = 0; i < e.terms.size(); ++i) {
    const Value* v = n.input(i);
    const std::string& t = e.terms[i];
    if (v->shape().size() != t.size()) return fail("a term does not match its operand's rank");
    for (size_t d = 0; d < t.size(); ++d) {
      const char c = t[d];
      if (!std::isalpha(static_cast<unsigned char>(c))) return fail("a label is not a letter");
      auto [it, fresh] = e.size.emplace(c, v->shape()[d]);
      if (!fresh && it->second != v->shape()[d]) return fail("a label has two sizes (or an ellipsis broadcasts)");
      ++uses[c];
    }
  }
  if (arrow == std::string::npos) {
    e.out = ellipsis;  // numpy: the ellipsis dims first, then the labels used once, in ASCII order
    for (const auto& [c, k] : uses)
      if (k == 1 && !has(ellipsis, c)) e.out += c;
  } else {
    e.out = eq.substr(arrow + 2);
    if (const size_t at = e.out.find("..."); at != std::string::npos) e.out.replace(at, 3, ellipsis);
    for (char c : e.out)
      if (!e.size.count(c) || std::count(e.out.begin(), e.out.end(), c) > 1)
        return fail("an output label is unknown or repeated");
  }
  return e;
}

// The permutation taking labels `from` to `to` (same letters) and the shape of `to`.
std::vector<int64_t> perm_of(const std::string& from, const std::string& to) {
  std::vector<int64_t> p;
  for (char c : to) p.push_back(int64_t(from.find(c)));
  return p;
}

class Builder {
 public:
  Builder(NodeRewriter& rw, const Equation& e) : rw_(rw), e_(e) {}

  Shape shape_of(const std::string& labels) const {
    Shape s;
    for (char c : labels) s.push_back(e_.size.at(c));
    return s;
  }
  int64_t numel_of(const std::string& labels) const { return shape_numel(shape_of(labels)); }

  // v (labelled `labels`) summed over the labels not in `keep`, which it then carries in their
  // original order; `labels` becomes that.
  Value* sum_out(Value* v, std::string& labels, const std::string& keep, const std::string& tag, Value* into = nullptr) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t d = 0; d < labels.size(); ++d) {
      if (has(keep, labels[d])) kept += labels[d];
      else axes.push_back(int64_t(d));
    }
    if (axes.empty()) return v;
    Value* r = rw_.reduce("ReduceSum", v, axes, tag + "_sum");  // keepdims=1; the Reshape drops them
    labels = kept;
    return reshape(r, shape_of(kept), tag + "_summed", into);
  }

  Value* transpose(Value* v, const std::string& from, const std::string& to, const std::string& tag, Value* into = nullptr) {
    if (from == to) return into ? identity(v, into, tag) : v;
    return rw_.emit("Transpose", {v}, {v->dtype(), shape_of(to)}, tag, {{"perm", perm_of(from, to)}}, into);
  }

  Value* reshape(Value* v, const Shape& s, const std::string& tag, Value* into = nullptr) {
    if (!into) return rw_.reshape(v, s, tag);
    if (v->shape() == s) return identity(v, into, tag);
    Value* sc = rw_.constant(tag + "_shape", Tensor::from_vector<int64_t>(s, {int64_t(s.size())}));
    return rw_.emit("Reshape", {v, sc}, {v->dtype(), s}, tag, {}, into);
  }

  // v (labelled `labels`) with every label repeated within it reduced to its diagonal: the two
  // dims moved last (Transpose), merged (Reshape [.., n*n]) and read with step n+1 (Slice).
  Value* diagonals(Value* v, std::string& labels, const std::string& tag) {
    for (int round = 0;; ++round) {
      size_t i = 0, j = 0;
      for (i = 0; i < labels.size(); ++i)
        if ((j = labels.find(labels[i], i + 1)) != std::string::npos) break;
      if (i == labels.size()) return v;
      const char c = labels[i];
      std::string rest;
      for (size_t d = 0; d < labels.size(); ++d)
        if (d != i && d != j) rest += labels[d];
      std::vector<int64_t> perm;
      for (size_t d = 0; d < labels.size(); ++d)
        if (d != i && d != j) perm.push_back(int64_t(d));
      perm.push_back(int64_t(i));
      perm.push_back(int64_t(j));
      const std::string t = tag + "_diag" + std::to_string(round);
      Shape moved = shape_of(rest);
      const int64_t n = e_.size.at(c);
      moved.insert(moved.end(), {n, n});
      bool identity = true;
      for (size_t d = 0; d < perm.size(); ++d) identity = identity && perm[d] == int64_t(d);
      if (!identity) v = rw_.emit("Transpose", {v}, {v->dtype(), moved}, t + "_moved", {{"perm", perm}});
      Shape merged = shape_of(rest), diag = shape_of(rest);
      merged.push_back(n * n);
      diag.push_back(n);
      v = rw_.reshape(v, merged, t + "_merged");
      auto ints = [&](const std::string& name, int64_t x) {
        return rw_.constant(t + "_" + name, Tensor::from_vector<int64_t>({x}, {1}));
      };
      v = rw_.emit("Slice",
                   {v, ints("start", 0), ints("end", n * n), ints("axis", int64_t(merged.size()) - 1), ints("step", n + 1)},
                   {v->dtype(), diag}, t);
      labels = rest + c;
    }
  }

  Value* identity(Value* v, Value* into, const std::string& tag) {
    return rw_.emit("Identity", {v}, into->type(), tag, {}, into);
  }

 private:
  NodeRewriter& rw_;
  const Equation& e_;
};

void lower(Graph& g, Node* n) {
  std::string why;
  const Equation e = *parse(*n, &why);
  NodeRewriter rw(g, n);
  Builder b(rw, e);
  Value* y = rw.output(0);
  if (e.terms.size() == 1) {
    // Transpose first (output labels, then the summed ones) and sum the trailing axes: a
    // reduction over contiguous rows, with the Transpose as its prologue.
    std::string labels = e.terms[0];
    Value* v = b.diagonals(rw.input(0), labels, "a");
    std::string order = e.out;
    for (char c : labels)
      if (!has(e.out, c)) order += c;
    const bool sums = order.size() > e.out.size();
    v = b.transpose(v, labels, order, "transposed", sums ? nullptr : y);
    if (!sums) return;
    std::string kept = order;
    b.sum_out(v, kept, e.out, "a", y);
    return;
  }
  // Labels kept from one operand are ordered as in the output, so the MatMul's result is the
  // output itself (up to a Reshape) whenever the output lists batch labels, then one operand's
  // kept labels, then the other's; the operands swap when the output has B's before A's. Only an
  // output that interleaves them needs a Transpose after the MatMul.
  auto by_output = [&](std::string s) {
    std::stable_sort(s.begin(), s.end(), [&](char x, char z) { return e.out.find(x) < e.out.find(z); });
    return s;
  };
  auto distinct = [](const std::string& t) {
    std::string r;
    for (char c : t)
      if (!has(r, c)) r += c;
    return r;
  };
  const std::string ta = distinct(e.terms[0]), tb = distinct(e.terms[1]);  // after the diagonals
  std::string batch, kept_a, kept_b, contracted;
  for (char c : ta) {
    if (has(tb, c) && has(e.out, c)) batch += c;
    else if (has(e.out, c)) kept_a += c;
  }
  for (char c : tb)
    if (!has(ta, c) && has(e.out, c)) kept_b += c;
  for (const auto& [c, s] : e.size)  // ASCII order: the reference's summation order
    if (has(e.terms[0], c) && has(e.terms[1], c) && !has(e.out, c)) contracted += c;
  batch = by_output(batch);
  kept_a = by_output(kept_a);
  kept_b = by_output(kept_b);
  size_t first = 0, second = 1;
  if (!kept_a.empty() && !kept_b.empty() && batch + kept_a + kept_b != e.out && batch + kept_b + kept_a == e.out) {
    std::swap(first, second);
    std::swap(kept_a, kept_b);
  }
  auto operand = [&](size_t i, const std::string& order, const Shape& mat, const std::string& tag) {
    std::string labels = e.terms[i];
    Value* v = b.diagonals(rw.input(i), labels, tag);
    v = b.sum_out(v, labels, order, tag);
    v = b.transpose(v, labels, order, tag + "_transposed");
    return b.reshape(v, mat, tag + "_matrix");
  };
  Shape bshape = b.shape_of(batch);
  const int64_t m = b.numel_of(kept_a), k = b.numel_of(contracted), nn = b.numel_of(kept_b);
  Shape ma = bshape, mb = bshape, mo = bshape;
  ma.insert(ma.end(), {m, k});
  mb.insert(mb.end(), {k, nn});
  mo.insert(mo.end(), {m, nn});
  Value* a = operand(first, batch + kept_a + contracted, ma, "lhs");
  Value* bm = operand(second, batch + contracted + kept_b, mb, "rhs");
  const std::string prod = batch + kept_a + kept_b;
  const bool reorder = prod != e.out;
  const bool reshaped = b.shape_of(prod) != mo;
  Value* r = rw.emit("MatMul", {a, bm}, {a->dtype(), mo}, "matmul", {}, reorder || reshaped ? nullptr : y);
  if (reorder) {
    r = b.reshape(r, b.shape_of(prod), "unflattened");
    b.transpose(r, prod, e.out, "transpose", y);
  } else if (reshaped) {
    b.reshape(r, b.shape_of(prod), "unflattened", y);
  }
}

}  // namespace

std::string LowerEinsum::refusal(const Node& n) {
  if (n.op_type() != "Einsum" || !n.domain().empty()) return "not an Einsum";
  if (n.num_inputs() == 0 || n.num_outputs() != 1) return "expects inputs and one output";
  for (size_t i = 0; i < n.num_inputs(); ++i)
    if (!n.input(i) || !is_float(n.input(i)->dtype()) || n.input(i)->dtype() != n.output(0)->dtype())
      return "inputs are not floating-point of the output's type";
  std::string why;
  auto e = parse(n, &why);
  if (!e) return why;
  Shape out;
  for (char c : e->out) out.push_back(e->size.at(c));
  if (out != n.output(0)->shape()) return "the output's shape does not match the equation";
  return "";
}

bool LowerEinsum::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); }, [&](Node* n) { lower(g, n); });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
