#include "transforms/lower_einsum.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

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
  if (eq.find('.') != std::string::npos) return fail("an ellipsis is not lowered (library kernel)");
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
  std::map<char, int> uses;
  for (size_t i = 0; i < e.terms.size(); ++i) {
    const Value* v = n.input(i);
    if (!v) return fail("an operand is missing");
    const std::string& t = e.terms[i];
    if (v->shape().size() != t.size()) return fail("a term does not match its operand's rank");
    for (size_t d = 0; d < t.size(); ++d) {
      const char c = t[d];
      if (!std::isalpha(static_cast<unsigned char>(c))) return fail("a label is not a letter");
      if (std::count(t.begin(), t.end(), c) > 1) return fail("a label repeated within a term (diagonal) is not lowered");
      auto [it, fresh] = e.size.emplace(c, v->shape()[d]);
      if (!fresh && it->second != v->shape()[d]) return fail("a label has two sizes");
      ++uses[c];
    }
  }
  if (arrow == std::string::npos) {
    for (const auto& [c, k] : uses)  // std::map: ASCII order
      if (k == 1) e.out += c;
  } else {
    e.out = eq.substr(arrow + 2);
    for (char c : e.out)
      if (!e.size.count(c) || std::count(e.out.begin(), e.out.end(), c) > 1)
        return fail("an output label is unknown or repeated");
  }
  return e;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

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
    const std::string& labels = e.terms[0];
    std::string order = e.out;
    for (char c : labels)
      if (!has(e.out, c)) order += c;
    const bool sums = order.size() > e.out.size();
    Value* v = b.transpose(rw.input(0), labels, order, "transposed", sums ? nullptr : y);
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
  std::string batch, kept_a, kept_b, contracted;
  for (char c : e.terms[0]) {
    if (has(e.terms[1], c) && has(e.out, c)) batch += c;
    else if (has(e.out, c)) kept_a += c;
  }
  for (char c : e.terms[1])
    if (!has(e.terms[0], c) && has(e.out, c)) kept_b += c;
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
    Value* v = b.sum_out(rw.input(i), labels, order, tag);
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
