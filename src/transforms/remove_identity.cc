#include "transforms/remove_identity.h"

#include <algorithm>
#include <set>

#include "transforms/op_traits.h"

namespace kiln {

namespace {

// A Reduce* whose axes are absent or empty (an input of no elements, computed or not) with
// noop_with_empty_axes=1: the reference returns its input.
bool is_noop_reduction(const Node& n) {
  static const std::set<std::string> reduces = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                                "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                                "ReduceLogSumExp", "ReduceSumSquare"};
  if (!n.domain().empty() || !reduces.count(n.op_type()) || n.attr_int("noop_with_empty_axes", 0) != 1) return false;
  if (!n.input(0) || n.num_outputs() != 1 || n.output(0)->type() != n.input(0)->type()) return false;
  const Value* axes = n.num_inputs() > 1 ? n.input(1) : nullptr;
  return !axes || shape_numel(axes->shape()) == 0;
}

bool is_pass_through(const Graph& g, const Node& n) {
  if (n.op_type() == "Identity" && n.domain().empty()) return n.num_inputs() == 1 && n.input(0) && n.num_outputs() == 1;
  if (!is_identity_dropout(n) || !n.input(0) || n.num_outputs() < 1) return false;
  for (size_t i = 1; i < n.num_outputs(); ++i)  // the mask would need a constant; leave that to folding
    if (!n.output(i)->uses().empty() || g.is_graph_output(n.output(i))) return false;
  return true;
}

// The node after n in graph order, or nullptr when n is last.
Node* next_node(const Graph& g, const Node* n) {
  const auto& l = g.node_list();
  auto it = std::find_if(l.begin(), l.end(), [&](const auto& p) { return p.get() == n; });
  return it == l.end() || std::next(it) == l.end() ? nullptr : std::next(it)->get();
}

// Re-creates `producer` in place with `from` (one of its outputs) replaced by `to`, so `to` —
// a graph output whose name must survive — is defined directly. `from` is left unused. Returns
// whether the graph needs a topo_sort afterwards.
bool redefine_output(Graph& g, Node* producer, Value* from, Value* to) {
  std::string op = producer->op_type(), name = producer->name(), domain = producer->domain();
  std::vector<Value*> inputs = producer->inputs(), outputs = producer->outputs();
  AttributeMap attrs = producer->attrs();
  std::replace(outputs.begin(), outputs.end(), from, to);
  Node* anchor = next_node(g, producer);
  g.remove_node(producer);  // frees its outputs so the new node can define them
  if (anchor && domain.empty()) {
    g.insert_node_before(anchor, op, inputs, outputs, std::move(attrs), name);
    return false;
  }
  // insert_node_before has no domain parameter: append (the same place when the producer was last)
  // and let topo_sort move the node back before its consumers.
  g.add_node(op, inputs, outputs, std::move(attrs), name, domain);
  return anchor != nullptr;
}

// Each noop reduction becomes Identity(data) in its place (then removed like any Identity, or
// kept as a copy where the graph's names need it).
bool rewrite_noop_reductions(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (!is_noop_reduction(*n)) continue;
    Value* in = n->input(0);
    Value* out = n->output(0);
    const std::string name = n->name();
    Node* anchor = next_node(g, n);
    g.remove_node(n);
    if (anchor) g.insert_node_before(anchor, "Identity", {in}, {out}, {}, name);
    else g.add_node("Identity", {in}, {out}, {}, name, "");
    changed = true;
  }
  return changed;
}

}  // namespace

bool RemoveIdentity::run(Graph& g) {
  bool changed = rewrite_noop_reductions(g), needs_sort = false;
  for (Node* n : g.nodes()) {  // snapshot: only n and nodes before it are removed below
    if (!is_pass_through(g, *n)) continue;
    Value* in = n->input(0);
    Value* out = n->output(0);
    if (!g.is_graph_output(out)) {
      g.replace_all_uses(out, in);
      g.remove_node(n);
      changed = true;
      continue;
    }
    // out is a graph output: its name has to stay, so `in` must disappear instead.
    Node* producer = in->producer();
    if (!producer || g.is_graph_output(in)) continue;  // graph input, constant, or both names are outputs
    g.remove_node(n);
    g.replace_all_uses(in, out);
    needs_sort |= redefine_output(g, producer, in, out);
    changed = true;
  }
  if (needs_sort) g.topo_sort();
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
