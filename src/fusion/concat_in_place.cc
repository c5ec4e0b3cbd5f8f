#include "fusion/concat_in_place.h"

#include <algorithm>

#include "fusion/cost_model.h"
#include "fusion/op_kind.h"

namespace kiln {

namespace {

int64_t concat_axis(const Node& n) {
  const int64_t rank = int64_t(n.output(0)->shape().size());
  const int64_t a = n.attr_int("axis", 0);
  return a < 0 ? a + rank : a;
}

bool is_concat(const Node* n) { return n && n->op_type() == "Concat"; }

}  // namespace

FusionDecision concat_in_place(const Graph& g, const Node& n) {
  if (n.op_type() != "Concat" || n.num_outputs() != 1 || !n.output(0))
    return FusionDecision::no("not a Concat");
  const Value* out = n.output(0);
  if (g.is_graph_output(out)) return FusionDecision::no("its output is a graph output (the caller's buffer)");
  const Shape& s = out->shape();
  const int64_t axis = concat_axis(n);
  for (int64_t d = 0; d < axis; ++d)
    if (s[size_t(d)] != 1)
      return FusionDecision::no("its parts' slices are strided (axis " + std::to_string(d) + " before the "
                                "concatenation axis has size " + std::to_string(s[size_t(d)]) + ")");
  for (auto [user, slot] : out->uses())
    if (is_concat(user)) return FusionDecision::no("its output is a part of another Concat");
  std::vector<const Value*> seen;
  for (const Value* v : n.inputs()) {
    if (!v || v->is_constant() || v->is_graph_input() || g.is_graph_output(v) || !v->producer())
      return FusionDecision::no("a part is not an intermediate tensor");
    if (std::count(seen.begin(), seen.end(), v)) return FusionDecision::no("a part appears twice");
    seen.push_back(v);
    const OpKind k = op_kind(*v->producer());
    if (k != OpKind::ElementWise && k != OpKind::Broadcast && k != OpKind::Contraction && k != OpKind::Reduction)
      return FusionDecision::no("part '" + v->name() + "' comes from " + v->producer()->op_type() +
                                ", which would become a copy kernel of its own");
    for (auto [user, slot] : v->uses())
      if (is_concat(user) && user != &n)
        return FusionDecision::no("part '" + v->name() + "' is also a part of another Concat");
  }
  return FusionDecision::yes();
}

std::vector<int64_t> concat_part_offsets(const Node& n) {
  std::vector<int64_t> r;
  int64_t at = 0;
  for (const Value* v : n.inputs()) {
    r.push_back(at);
    at += value_bytes(v);
  }
  return r;
}

}  // namespace kiln
