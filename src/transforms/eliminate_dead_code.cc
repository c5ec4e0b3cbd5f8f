#include "transforms/eliminate_dead_code.h"

#include <unordered_set>

namespace kiln {

bool EliminateDeadCode::run(Graph& g) {
  // One backward sweep: in reverse topological order every consumer is decided before its
  // producers, so a node is live iff an output is a graph output or feeds a live node.
  std::vector<Node*> nodes = g.nodes();
  std::unordered_set<const Node*> live;
  std::vector<Node*> dead;
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool needed = false;
    for (const Value* o : n->outputs()) {
      if (g.is_graph_output(o)) needed = true;
      for (const auto& use : o->uses()) needed |= live.count(use.first) != 0;
      if (needed) break;
    }
    if (needed) live.insert(n);
    else dead.push_back(n);  // consumers first, so each removal leaves no dangling user behind
  }
  for (Node* n : dead) g.remove_node(n);
  size_t values_before = g.values().size();
  g.remove_unused_values();
  return !dead.empty() || g.values().size() != values_before;
}

}  // namespace kiln
