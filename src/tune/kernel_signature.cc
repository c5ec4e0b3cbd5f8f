#include "tune/kernel_signature.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <variant>

namespace kiln::tune {

namespace {

// Constants up to this many elements are hashed by value (see the header).
constexpr int64_t kHashedConstantElements = 64;

void write_type(std::ostream& os, const Value* v) {
  os << dtype_name(v->dtype()) << shape_str(v->shape());
}

void write_tensor_bytes(std::ostream& os, const Tensor& t) {
  os << dtype_name(t.dtype()) << shape_str(t.shape()) << ":";
  const auto* p = static_cast<const unsigned char*>(t.raw());
  char b[4];
  for (size_t i = 0; i < t.nbytes(); ++i) {
    std::snprintf(b, sizeof b, "%02x", p[i]);
    os << b;
  }
}

void write_attribute(std::ostream& os, const Attribute& a) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor>) {
          write_tensor_bytes(os, x);
        } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, std::string>) {
          os << x;
        } else if constexpr (std::is_same_v<T, float>) {
          char b[32];
          std::snprintf(b, sizeof b, "%a", double(x));  // exact: no decimal rounding
          os << b;
        } else {
          for (const auto& e : x) {
            if constexpr (std::is_same_v<std::decay_t<decltype(e)>, float>) {
              char b[32];
              std::snprintf(b, sizeof b, "%a", double(e));
              os << b << ",";
            } else {
              os << e << ",";
            }
          }
        }
      },
      a);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

}  // namespace

std::string kernel_signature(const FusionGroup& grp) {
  std::ostringstream os;
  os << group_kind_name(grp.kind) << ";in:";
  for (const Value* v : grp.inputs) {
    write_type(os, v);
    if (v->is_constant()) {
      os << "=const";
      if (v->constant().numel() <= kHashedConstantElements) write_tensor_bytes(os, v->constant());
    }
    os << ";";
  }
  os << "out:";
  for (const Value* v : grp.outputs) {
    write_type(os, v);
    os << ";";
  }
  // Wiring: where each node input comes from, by position, never by name.
  auto where = [&](const Value* v) -> std::string {
    if (!v) return "none";
    for (size_t j = 0; j < grp.nodes.size(); ++j)
      for (size_t k = 0; k < grp.nodes[j]->num_outputs(); ++k)
        if (grp.nodes[j]->output(k) == v) return "n" + std::to_string(j) + "." + std::to_string(k);
    auto it = std::find(grp.inputs.begin(), grp.inputs.end(), v);
    if (it != grp.inputs.end()) return "i" + std::to_string(it - grp.inputs.begin());
    // An input the group does not list (a constant the lowering reads directly): by type and,
    // when small, by value.
    std::ostringstream c;
    write_type(c, v);
    if (v->is_constant() && v->constant().numel() <= kHashedConstantElements) write_tensor_bytes(c, v->constant());
    return c.str();
  };
  std::string ops;
  for (const Node* n : grp.nodes) {
    os << "node:" << n->domain() << "::" << n->op_type() << "(";
    for (const Value* v : n->inputs()) os << where(v) << ",";
    os << ")->";
    for (const Value* v : n->outputs()) {
      if (v) write_type(os, v);
      os << ",";
    }
    os << "{";
    for (const auto& [name, a] : n->attrs()) {
      os << name << "=";
      write_attribute(os, a);
      os << ";";
    }
    os << "}";
    std::string op = n->op_type();
    std::transform(op.begin(), op.end(), op.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ops.size() < 48) ops += (ops.empty() ? "" : "_") + op;
  }
  // Where each group output comes from (a group may write an intermediate as well as its root).
  os << "outs:";
  for (const Value* v : grp.outputs) os << where(v) << ",";
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(os.str())));
  return (ops.empty() ? "view" : ops) + "-" + hex;
}

}  // namespace kiln::tune
