#include "transforms/eliminate_common_subexpressions.h"

#include <cstring>
#include <functional>
#include <unordered_map>

#include "transforms/op_traits.h"

namespace kiln {

namespace {

void hash_mix(size_t& h, size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }

size_t hash_bytes(const void* p, size_t n) { return std::hash<std::string_view>()({static_cast<const char*>(p), n}); }

size_t hash_tensor(const Tensor& t) {
  size_t h = size_t(t.dtype());
  for (int64_t d : t.shape()) hash_mix(h, size_t(d));
  hash_mix(h, hash_bytes(t.raw(), t.nbytes()));
  return h;
}

bool same_constant(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.raw() == b.raw()) return true;
  return a.numel() <= EliminateCommonSubexpressions::kMaxComparedElements && a.bitwise_equal(b);
}

// Bitwise equality of attributes (std::variant's == would need Tensor::operator== and treats NaN
// as unequal to itself).
bool same_attribute(const Attribute& a, const Attribute& b) {
  if (a.index() != b.index()) return false;
  if (const auto* f = std::get_if<float>(&a)) return std::memcmp(f, &std::get<float>(b), sizeof(float)) == 0;
  if (const auto* fs = std::get_if<std::vector<float>>(&a)) {
    const auto& gs = std::get<std::vector<float>>(b);
    return fs->size() == gs.size() && (fs->empty() || std::memcmp(fs->data(), gs.data(), fs->size() * sizeof(float)) == 0);
  }
  if (const auto* t = std::get_if<Tensor>(&a)) return t->bitwise_equal(std::get<Tensor>(b));
  if (const auto* i = std::get_if<int64_t>(&a)) return *i == std::get<int64_t>(b);
  if (const auto* is = std::get_if<std::vector<int64_t>>(&a)) return *is == std::get<std::vector<int64_t>>(b);
  if (const auto* s = std::get_if<std::string>(&a)) return *s == std::get<std::string>(b);
  return std::get<std::vector<std::string>>(a) == std::get<std::vector<std::string>>(b);
}

bool same_expression(const Node& a, const Node& b) {
  if (a.op_type() != b.op_type() || a.domain() != b.domain() || a.inputs() != b.inputs() ||
      a.num_outputs() != b.num_outputs() || a.attrs().size() != b.attrs().size())
    return false;
  for (size_t i = 0; i < a.num_outputs(); ++i)
    if (a.output(i)->type() != b.output(i)->type()) return false;
  for (auto ia = a.attrs().begin(), ib = b.attrs().begin(); ia != a.attrs().end(); ++ia, ++ib)
    if (ia->first != ib->first || !same_attribute(ia->second, ib->second)) return false;
  return true;
}

// Attributes are left out of the hash (same_expression compares them); op and inputs separate
// almost all candidates already.
size_t hash_expression(const Node& n) {
  size_t h = std::hash<std::string>()(n.op_type());
  hash_mix(h, std::hash<std::string>()(n.domain()));
  for (const Value* v : n.inputs()) hash_mix(h, std::hash<const Value*>()(v));
  return h;
}

// Moves every node input reading `from` to `to`; graph outputs keep `from`. Returns whether any moved.
bool redirect_node_uses(Value* from, Value* to) {
  auto uses = from->uses();  // copy: set_input edits the list
  for (auto [n, i] : uses) n->set_input(size_t(i), to);
  return !uses.empty();
}

bool merge_constants(Graph& g) {
  bool changed = false;
  std::unordered_map<size_t, std::vector<Value*>> seen;
  for (Value* v : g.values()) {
    if (!v->is_constant() || v->is_graph_input()) continue;  // an input's default may be overridden
    const Tensor& t = v->constant();
    size_t h = t.numel() <= EliminateCommonSubexpressions::kMaxComparedElements ? hash_tensor(t) : std::hash<const void*>()(t.raw());
    Value* first = nullptr;
    for (Value* c : seen[h])
      if (same_constant(c->constant(), t)) {
        first = c;
        break;
      }
    if (first) changed |= redirect_node_uses(v, first);
    else seen[h].push_back(v);
  }
  return changed;
}

bool merge_nodes(Graph& g) {
  bool changed = false;
  std::unordered_map<size_t, std::vector<Node*>> seen;
  for (Node* n : g.nodes()) {
    if (n->num_outputs() == 0 || is_nondeterministic(*n)) continue;
    size_t h = hash_expression(*n);
    Node* first = nullptr;
    for (Node* c : seen[h])
      if (same_expression(*c, *n)) {
        first = c;
        break;
      }
    if (!first) {
      seen[h].push_back(n);
      continue;
    }
    bool defines_output = false;
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      changed |= redirect_node_uses(n->output(i), first->output(i));
      defines_output |= g.is_graph_output(n->output(i));
    }
    if (!defines_output) {
      g.remove_node(n);
      changed = true;
    }
  }
  return changed;
}

}  // namespace

bool EliminateCommonSubexpressions::run(Graph& g) {
  // Constants first: nodes reading equal constants then have identical input pointers.
  bool changed = merge_constants(g);
  changed |= merge_nodes(g);
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
