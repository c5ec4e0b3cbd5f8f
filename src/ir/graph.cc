#include "ir/graph.h"

#include <algorithm>
#include <unordered_set>

namespace kiln {

const char* attribute_kind_name(const Attribute& a) {
  static const char* names[] = {"int", "float", "string", "tensor", "ints", "floats", "strings"};
  return names[a.index()];
}


void Value::set_constant(Tensor t) {
  type_ = TensorType{t.dtype(), t.shape()};
  constant_ = std::move(t);
  producer_ = nullptr;
}

// ---------------------------------------------------------------- Node

void Node::set_input(size_t i, Value* v) {
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  Value* old = inputs_[i];
  if (old) {
    auto& u = old->uses_;
    auto it = std::find(u.begin(), u.end(), std::pair<Node*, int>{this, int(i)});
    KILN_CHECK(it != u.end(), "use list out of sync for ", old->name());
    u.erase(it);
  }
  inputs_[i] = v;
  if (v) v->uses_.push_back({this, int(i)});
}

namespace {
template <class T>
const T* get_attr(const Node& n, const AttributeMap& m, const std::string& name, const char* want) {
  auto it = m.find(name);
  if (it == m.end()) return nullptr;
  if (const T* p = std::get_if<T>(&it->second)) return p;
  user_error(n.describe(), ": attribute '", name, "' must be ", want, ", got ", attribute_kind_name(it->second));
}
}  // namespace

int64_t Node::attr_int(const std::string& n, int64_t dflt) const {
  const int64_t* p = get_attr<int64_t>(*this, attrs_, n, "an int");
  return p ? *p : dflt;
}
float Node::attr_float(const std::string& n, float dflt) const {
  // ONNX writers sometimes store an integral float attribute as an int; accept it.
  auto it = attrs_.find(n);
  if (it != attrs_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return float(*i);
  const float* p = get_attr<float>(*this, attrs_, n, "a float");
  return p ? *p : dflt;
}
std::string Node::attr_string(const std::string& n, const std::string& dflt) const {
  const std::string* p = get_attr<std::string>(*this, attrs_, n, "a string");
  return p ? *p : dflt;
}
std::vector<int64_t> Node::attr_ints(const std::string& n, const std::vector<int64_t>& dflt) const {
  const auto* p = get_attr<std::vector<int64_t>>(*this, attrs_, n, "a list of ints");
  return p ? *p : dflt;
}
std::vector<float> Node::attr_floats(const std::string& n, const std::vector<float>& dflt) const {
  const auto* p = get_attr<std::vector<float>>(*this, attrs_, n, "a list of floats");
  return p ? *p : dflt;
}
std::vector<std::string> Node::attr_strings(const std::string& n) const {
  const auto* p = get_attr<std::vector<std::string>>(*this, attrs_, n, "a list of strings");
  return p ? *p : std::vector<std::string>{};
}
const Tensor* Node::attr_tensor(const std::string& n) const {
  return get_attr<Tensor>(*this, attrs_, n, "a tensor");
}
void Node::require_attr(const std::string& n) const {
  if (!has_attr(n)) user_error(describe(), ": required attribute '", n, "' is missing");
}

std::string Node::describe() const {
  std::string d = domain_.empty() ? op_type_ : domain_ + "." + op_type_;
  return "node '" + name_ + "' (" + d + ")";
}

// ---------------------------------------------------------------- Graph

Value* Graph::new_value(const std::string& name) {
  if (name.empty()) user_error("a value has an empty name");
  if (by_name_.count(name)) user_error("value '", name, "' is defined more than once");
  values_.push_back(std::unique_ptr<Value>(new Value()));
  Value* v = values_.back().get();
  v->name_ = name;
  by_name_[name] = v;
  return v;
}

Value* Graph::add_input(const std::string& name, TensorType type) {
  Value* v = new_value(name);
  v->type_ = std::move(type);
  v->is_input_ = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(const std::string& name, Tensor t) {
  Value* v = new_value(name);
  v->set_constant(std::move(t));
  return v;
}

Value* Graph::add_value(const std::string& name, TensorType type) {
  Value* v = new_value(name);
  v->type_ = std::move(type);
  return v;
}

Node* Graph::make_node(const std::string& op_type, const std::vector<Value*>& inputs,
                       const std::vector<Value*>& outputs, AttributeMap attrs, const std::string& name,
                       const std::string& domain) {
  auto n = std::make_unique<Node>();
  n->op_type_ = op_type;
  n->domain_ = domain;
  n->name_ = name;
  n->attrs_ = std::move(attrs);
  n->inputs_ = inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) inputs[i]->uses_.push_back({n.get(), int(i)});
  for (Value* o : outputs) {
    KILN_CHECK(o && !o->producer_ && !o->is_input_ && !o->is_constant(), "node output must be a fresh value");
    o->producer_ = n.get();
  }
  n->outputs_ = outputs;
  Node* raw = n.release();
  return raw;
}

Node* Graph::add_node(const std::string& op_type, const std::vector<Value*>& inputs,
                      const std::vector<Value*>& outputs, AttributeMap attrs, const std::string& name,
                      const std::string& domain) {
  Node* n = make_node(op_type, inputs, outputs, std::move(attrs), name, domain);
  nodes_.emplace_back(n);
  return n;
}

Node* Graph::insert_node_before(Node* before, const std::string& op_type, const std::vector<Value*>& inputs,
                                const std::vector<Value*>& outputs, AttributeMap attrs, const std::string& name) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == before; });
  KILN_CHECK(it != nodes_.end(), "insert_node_before: node not in graph");
  Node* n = make_node(op_type, inputs, outputs, std::move(attrs), name, "");
  nodes_.emplace(it, n);
  return n;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  auto uses = from->uses_;  // copy: set_input edits the list
  for (auto [n, i] : uses) n->set_input(size_t(i), to);
  for (Value*& o : outputs_)
    if (o == from) o = to;
}

void Graph::remove_node(Node* n) {
  auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == n; });
  KILN_CHECK(it != nodes_.end(), "remove_node: node not in graph");
  for (size_t i = 0; i < n->inputs_.size(); ++i) n->set_input(i, nullptr);
  for (Value* o : n->outputs_)
    if (o->producer_ == n) o->producer_ = nullptr;
  nodes_.erase(it);
}

void Graph::remove_unused_values() {
  std::unordered_set<const Value*> keep(outputs_.begin(), outputs_.end());
  keep.insert(inputs_.begin(), inputs_.end());
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (keep.count(v.get()) || v->producer_ || !v->uses_.empty()) {
      kept.push_back(std::move(v));
    } else {
      by_name_.erase(v->name_);
    }
  }
  values_ = std::move(kept);
}

void Graph::topo_sort() {
  std::unordered_set<const Node*> done;
  std::list<std::unique_ptr<Node>> sorted, pending;
  pending.swap(nodes_);
  // Kahn-style, stable: repeatedly take the first pending node whose producers are all placed.
  while (!pending.empty()) {
    bool progress = false;
    for (auto it = pending.begin(); it != pending.end();) {
      bool ready = true;
      for (Value* in : (*it)->inputs_)
        if (in && in->producer_ && !done.count(in->producer_)) {
          ready = false;
          break;
        }
      if (ready) {
        done.insert(it->get());
        sorted.push_back(std::move(*it));
        it = pending.erase(it);
        progress = true;
      } else {
        ++it;
      }
    }
    if (!progress) {
      nodes_.swap(sorted);
      for (auto& p : pending) nodes_.push_back(std::move(p));
      user_error("graph has a cycle through ", nodes_.back()->describe());
    }
  }
  nodes_.swap(sorted);
}

std::string Graph::unique_name(const std::string& base) {
  std::string n = base;
  while (by_name_.count(n)) n = base + "_" + std::to_string(++name_counter_);
  return n;
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> r;
  r.reserve(nodes_.size());
  for (auto& n : nodes_) r.push_back(n.get());
  return r;
}

std::vector<Value*> Graph::values() const {
  std::vector<Value*> r;
  for (auto& v : values_) r.push_back(v.get());
  return r;
}

Value* Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

bool Graph::is_graph_output(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  g->name_ = name_;
  g->opset_ = opset_;
  std::unordered_map<const Value*, Value*> map;
  for (auto& v : values_) {
    Value* nv = g->new_value(v->name_);
    nv->type_ = v->type_;
    nv->constant_ = v->constant_;
    map[v.get()] = nv;
  }
  for (Value* in : inputs_) {
    map[in]->is_input_ = true;
    g->inputs_.push_back(map[in]);
  }
  for (auto& n : nodes_) {
    std::vector<Value*> ins, outs;
    for (Value* i : n->inputs_) ins.push_back(i ? map[i] : nullptr);
    for (Value* o : n->outputs_) outs.push_back(map[o]);
    g->add_node(n->op_type_, ins, outs, n->attrs_, n->name_, n->domain_);
  }
  for (Value* o : outputs_) g->outputs_.push_back(map[o]);
  g->name_counter_ = name_counter_;
  return g;
}

bool depends_through(const Node* to, const Node* from, const std::function<bool(const Node*)>& inside) {
  if (to == from) return false;
  std::vector<const Node*> stack{to};
  std::unordered_set<const Node*> seen;
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const Value* v : n->inputs()) {
      const Node* p = v ? v->producer() : nullptr;
      if (!p || !inside(p)) continue;
      if (p == from) return true;
      stack.push_back(p);
    }
  }
  return false;
}

}  // namespace kiln
