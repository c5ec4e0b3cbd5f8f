// The partitioner's working state: the graph's nodes (topological order) and the current groups.
// A group is a set of node indices; a node may belong to several groups when it is recomputed in
// each of them. A value is *materialized* (written to memory) when it is a graph output or some
// group that needs it does not compute it itself.
//
// Queries take a member set rather than a group id, so legality and cost can be evaluated for a
// candidate merge without changing the state.
#pragma once
#include <set>
#include <unordered_map>
#include <vector>

#include "fusion/cost_model.h"
#include "fusion/fusion_plan.h"
#include "ir/graph.h"

namespace kiln {

using Members = std::vector<int>;  // sorted node indices

class GroupGraph {
 public:
  explicit GroupGraph(const Graph& g);

  const Graph& graph() const { return g_; }
  const std::vector<Node*>& nodes() const { return nodes_; }
  int index(const Node* n) const;
  int num_groups() const { return int(groups_.size()); }
  bool alive(int gid) const { return alive_[size_t(gid)]; }
  const Members& members(int gid) const { return groups_[size_t(gid)]; }
  std::vector<int> groups_of(int node) const;  // alive groups containing the node
  // Is the node a Concat built in place (fusion/concat_in_place.h)? Such a node stays alone.
  bool in_place_concat(int node) const { return in_place_[size_t(node)]; }

  // Values read by `m` from memory: inputs of member nodes produced outside `m` (graph inputs,
  // constants, other groups' outputs).
  std::vector<const Value*> inputs_of(const Members& m) const;
  // Values produced in `m` that must be written: graph outputs, and values some consumer outside
  // needs. `replacing` lists the groups `m` would replace (their members no longer count).
  std::vector<const Value*> outputs_of(const Members& m, const std::vector<int>& replacing) const;

  GroupKind kind_of(const Members& m) const;
  // The kernel `m` would be, replacing `replacing`: its kind, nodes, inputs and outputs (no name,
  // no cost). What the one analysis is asked about and what the plan is built from.
  FusionGroup as_group(const Members& m, const std::vector<int>& replacing) const;
  // Cost of `m` as one kernel (see cost notes in group_graph.cc).
  CostEstimate cost_of(const Members& m, const std::vector<int>& replacing, const Target& t) const;

  // Alive groups that read a value produced by gid (and not computed by themselves).
  std::vector<int> consumer_groups(int gid) const;
  // A group on a path from `from` to `to` other than the direct edge (-1 when there is none):
  // fusing the two would put that group both before and after the fused kernel.
  int path_via(int from, int to) const;
  bool reachable_indirectly(int from, int to) const { return path_via(from, to) >= 0; }

  static Members unite(const Members& a, const Members& b);

  // Mutations.
  void merge(int p, int c);            // c := p ∪ c; p dies
  void recompute_into(int p, int c);   // c := p ∪ c; p stays (dies if nothing needs it any more)
  bool needed(int gid) const;          // does any value produced only here need writing?

 private:
  const Graph& g_;
  std::vector<Node*> nodes_;
  std::vector<Members> groups_;
  std::vector<bool> alive_;
  std::vector<bool> in_place_;  // per node: a Concat built in place
  std::vector<std::vector<int>> node_groups_;  // node → groups (alive or not; filtered on read)
  std::unordered_map<const Node*, int> index_;
};

}  // namespace kiln
