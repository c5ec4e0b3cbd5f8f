#include "ir/verifier.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/printer.h"

namespace kiln {

namespace {

constexpr size_t kMaxProblems = 20;

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g) {}

  std::string run() {
    check_values();
    check_nodes();
    check_use_lists();
    check_outputs();
    std::string r;
    for (size_t i = 0; i < problems_.size() && i < kMaxProblems; ++i) r += problems_[i] + "\n";
    if (problems_.size() > kMaxProblems) r += cat("... and ", problems_.size() - kMaxProblems, " more problems\n");
    return r;
  }

 private:
  void problem(std::string s) { problems_.push_back(std::move(s)); }
  void node_problem(const Node& n, const std::string& s) {
    problem(n.describe() + ": " + s + "\n    " + print_node(n));
  }
  static std::string ref(const Value* v) { return print_value_ref(v); }

  void check_values() {
    std::unordered_set<std::string> names;
    for (const Value* v : g_.values()) {
      known_.insert(v);
      if (!names.insert(v->name()).second) problem("value name " + ref(v) + " is used by more than one value");
    }
    std::unordered_set<const Value*> inputs;
    for (const Value* v : g_.inputs()) {
      if (!known_.count(v)) problem("graph input " + ref(v) + " does not belong to the graph");
      if (!inputs.insert(v).second) problem("graph input " + ref(v) + " is listed twice");
      if (!v->is_graph_input()) problem("graph input " + ref(v) + " is not marked as a graph input");
      if (v->dtype() == DType::Undefined) problem("graph input " + ref(v) + " has an undefined dtype");
      defined_.insert(v);
    }
    for (const Value* v : g_.values()) {
      if (v->is_graph_input() && !inputs.count(v)) problem(ref(v) + " is marked as a graph input but not listed");
      if (!v->is_constant()) continue;
      const Tensor& t = v->constant();
      if (!t.defined() || v->dtype() == DType::Undefined) {
        problem("constant " + ref(v) + " has an undefined dtype");
      } else if (t.dtype() != v->dtype() || t.shape() != v->shape()) {
        problem(cat("constant ", ref(v), " is typed ", v->type().str(), " but its tensor is ",
                    TensorType{t.dtype(), t.shape()}.str()));
      }
      if (v->producer()) problem("constant " + ref(v) + " also has a producer, " + v->producer()->describe());
      defined_.insert(v);
    }
  }

  void check_nodes() {
    std::unordered_map<const Value*, const Node*> later_producer;
    for (const Node* n : g_.nodes()) {
      nodes_.insert(n);
      for (const Value* o : n->outputs())
        if (o) later_producer.emplace(o, n);
    }
    for (const Node* n : g_.nodes()) {
      for (size_t i = 0; i < n->num_inputs(); ++i) {
        const Value* v = n->input(i);
        if (!v || defined_.count(v)) continue;
        if (!known_.count(v))
          node_problem(*n, cat("input ", i, " ", ref(v), " does not belong to the graph"));
        else if (later_producer.count(v) && later_producer[v] != n)
          node_problem(*n, cat("input ", i, " ", ref(v), " is defined later, by ", later_producer[v]->describe(),
                               " (nodes are not in topological order)"));
        else
          node_problem(*n, cat("input ", i, " ", ref(v), " is never defined"));
      }
      for (size_t i = 0; i < n->num_outputs(); ++i) {
        const Value* o = n->output(i);
        if (!o) {
          node_problem(*n, cat("output ", i, " is null"));
          continue;
        }
        if (!known_.count(o)) node_problem(*n, cat("output ", i, " ", ref(o), " does not belong to the graph"));
        if (defined_.count(o)) {
          std::string what = o->is_graph_input() ? "a graph input" : o->is_constant() ? "a constant" : "already produced";
          node_problem(*n, cat("output ", i, " ", ref(o), " is defined twice (it is ", what,
                               o->producer() && o->producer() != n ? ", by " + o->producer()->describe() : "", ")"));
        } else if (o->producer() != n) {
          node_problem(*n, cat("output ", i, " ", ref(o), "'s producer link points to ",
                               o->producer() ? o->producer()->describe() : "nothing"));
        }
        if (o->dtype() == DType::Undefined) node_problem(*n, cat("output ", i, " ", ref(o), " has an undefined dtype"));
        defined_.insert(o);
      }
    }
    for (const Value* v : g_.values())
      if (v->producer() && !nodes_.count(v->producer()))
        problem(ref(v) + "'s producer is not a node of the graph (a removed node?)");
  }

  void check_use_lists() {
    using Use = std::pair<Node*, int>;
    std::unordered_map<const Value*, std::vector<Use>> expected;
    for (Node* n : g_.nodes())
      for (size_t i = 0; i < n->num_inputs(); ++i)
        if (Value* v = n->input(i)) expected[v].push_back({n, int(i)});
    for (const Value* v : g_.values()) {
      std::vector<Use> have = v->uses(), want = expected[v];
      std::sort(have.begin(), have.end());
      std::sort(want.begin(), want.end());
      if (have == want) continue;
      // Name the first disagreement: a stale use (node no longer reads v) or a missing one.
      std::string detail;
      for (const Use& u : have)
        if (!std::binary_search(want.begin(), want.end(), u)) {
          detail = cat("lists input ", u.second, " of ",
                       nodes_.count(u.first) ? u.first->describe() : std::string("a node not in the graph"),
                       ", which does not read it");
          break;
        }
      if (detail.empty())
        for (const Use& u : want)
          if (!std::binary_search(have.begin(), have.end(), u)) {
            detail = cat("misses input ", u.second, " of ", u.first->describe());
            break;
          }
      if (detail.empty()) detail = cat("has ", have.size(), " entries for ", want.size(), " node inputs");
      problem("use list of " + ref(v) + " disagrees with the node inputs: it " + detail);
    }
  }

  void check_outputs() {
    for (const Value* v : g_.outputs()) {
      if (!v) problem("a graph output is null");
      else if (!defined_.count(v)) problem("graph output " + ref(v) + " is never defined");
    }
  }

  const Graph& g_;
  std::unordered_set<const Value*> known_, defined_;
  std::unordered_set<const Node*> nodes_;
  std::vector<std::string> problems_;
};

}  // namespace

std::string verify_graph_message(const Graph& g) { return Verifier(g).run(); }

void verify_graph(const Graph& g) {
  std::string msg = verify_graph_message(g);
  if (!msg.empty()) throw InternalError("IR verification failed:\n" + msg);
}

}  // namespace kiln
