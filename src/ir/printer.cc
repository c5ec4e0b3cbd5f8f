#include "ir/printer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace kiln {

// ---------------------------------------------------------------- names and strings

bool is_plain_identifier(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
      return false;
  return true;
}

std::string quote_string(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': r += "\\\""; break;
      case '\\': r += "\\\\"; break;
      case '\n': r += "\\n"; break;
      case '\t': r += "\\t"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", u);
          r += buf;
        } else {
          r += c;  // UTF-8 bytes pass through unchanged
        }
    }
  }
  return r + "\"";
}

std::string print_name(const std::string& s) { return is_plain_identifier(s) ? s : quote_string(s); }

std::string print_value_ref(const Value* v) { return v ? "%" + print_name(v->name()) : "_"; }

namespace {

// `_` alone would read as an omitted input, so it is quoted even though it is "plain".
std::string value_ref(const Value* v) {
  if (v && v->name() == "_") return "%\"_\"";
  return print_value_ref(v);
}

std::string type_str(const TensorType& t) { return std::string(dtype_name(t.dtype)) + shape_str(t.shape); }

// ---------------------------------------------------------------- numbers

std::string nonfinite(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

// Shortest decimal text that parses back (strtof / strtod) to exactly v.
template <class F>
std::string shortest(F v) {
  if (!std::isfinite(v)) return nonfinite(double(v));
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// f16/bf16: fewest significant digits whose float parse converts back to the same 16-bit pattern.
template <class H>
std::string shortest_half(H h) {
  float f = float(h);
  if (!std::isfinite(f)) return nonfinite(double(f));
  char buf[64];
  std::string exact = shortest(f);  // always parses back; wins for integers like 65504
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    if (H(std::strtof(buf, nullptr)).bits == h.bits) return std::strlen(buf) < exact.size() ? std::string(buf) : exact;
  }
  return exact;
}

// Attribute floats must not look like ints: add ".0" to integral renderings such as "1" or "-0".
std::string float_attr(float f) {
  std::string s = shortest(f);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n' covers inf and nan
  return s;
}

template <class T>
std::string element_str(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return shortest_half(v);
  else if constexpr (std::is_floating_point_v<T>) return shortest(v);
  else return std::to_string(v);
}

uint64_t fnv1a(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string tensor_body(const Tensor& t, const PrintOptions& opts) {
  if (opts.elide_constants_over >= 0 && t.numel() > opts.elide_constants_over) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "elided hash=%016llx", static_cast<unsigned long long>(fnv1a(t)));
    return buf;
  }
  std::string r = "[";
  dispatch_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* d = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (i) r += ", ";
      r += element_str(d[i]);
    }
  });
  return r + "]";
}

std::string attribute_str(const Attribute& a, const PrintOptions& opts) {
  struct Visitor {
    const PrintOptions& opts;
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(float v) const { return float_attr(v); }
    std::string operator()(const std::string& v) const { return quote_string(v); }
    std::string operator()(const Tensor& v) const { return "tensor " + print_tensor(v, opts); }
    std::string operator()(const std::vector<int64_t>& v) const {
      if (v.empty()) return "ints[]";
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? "," : "") + std::to_string(v[i]);
      return r + "]";
    }
    std::string operator()(const std::vector<float>& v) const {
      if (v.empty()) return "floats[]";
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + float_attr(v[i]);
      return r + "]";
    }
    std::string operator()(const std::vector<std::string>& v) const {
      if (v.empty()) return "strings[]";
      std::string r = "[";
      for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + quote_string(v[i]);
      return r + "]";
    }
  };
  return std::visit(Visitor{opts}, a);
}

}  // namespace

std::string print_tensor(const Tensor& t, const PrintOptions& opts) {
  if (!t.defined()) return "undef[]";
  return type_str({t.dtype(), t.shape()}) + " " + tensor_body(t, opts);
}

std::string print_node(const Node& n, const PrintOptions& opts) {
  std::string r;
  for (size_t i = 0; i < n.num_outputs(); ++i) {
    if (i) r += ", ";
    r += value_ref(n.output(i)) + ": " + type_str(n.output(i)->type());
  }
  if (n.num_outputs()) r += " = ";
  if (!n.domain().empty()) r += print_name(n.domain()) + "::";
  r += print_name(n.op_type()) + "(";
  for (size_t i = 0; i < n.num_inputs(); ++i) r += (i ? ", " : "") + value_ref(n.input(i));
  r += ")";
  if (!n.attrs().empty()) {
    r += " {";
    bool first = true;
    for (const auto& [name, a] : n.attrs()) {
      if (!first) r += ", ";
      first = false;
      r += print_name(name) + "=" + attribute_str(a, opts);
    }
    r += "}";
  }
  if (!n.name().empty()) r += " name=" + quote_string(n.name());
  return r;
}

std::string print_graph(const Graph& g, const PrintOptions& opts) {
  std::string r = "graph " + print_name(g.name()) + " opset " + std::to_string(g.opset()) + " (";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    r += (i ? ", " : "") + value_ref(v) + ": " + type_str(v->type());
  }
  r += ") -> (";
  for (size_t i = 0; i < g.outputs().size(); ++i) r += (i ? ", " : "") + value_ref(g.outputs()[i]);
  r += ") {\n";
  for (const Value* v : g.values())
    if (v->is_constant())  // a constant graph input (an overridable default) also prints here
      r += "  " + value_ref(v) + " = constant " + print_tensor(v->constant(), opts) + "\n";
  for (const Node* n : g.nodes()) r += "  " + print_node(*n, opts) + "\n";
  return r + "}\n";
}

std::string graph_fingerprint(const Graph& g) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
    h = (h ^ 0x0a) * 0x100000001b3ULL;
  };
  for (const Value* v : g.inputs()) add(value_ref(v) + ": " + type_str(v->type()));
  for (const Node* n : g.nodes()) add(print_node(*n));
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace kiln
