// The one JSON string writer kiln's JSON outputs share (kiln explain --json, machine.json, ...).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <variant>

namespace kiln {

// `s` as a JSON string literal, quotes included: " and \ escaped, control characters as \u00XX.
std::string json_quote(const std::string& s);

// Reads a flat JSON object {"key": string | number | true | false | null, ...}; nullopt on
// anything else (nesting included: the formats that use it, machine.json and kiln tune's records,
// have none). Strings may hold only the escapes json_quote writes.
using JsonScalar = std::variant<std::monostate, bool, double, std::string>;
std::optional<std::map<std::string, JsonScalar>> parse_flat_object(const std::string& s);

// Typed lookups in a parsed flat object: nullopt when the key is absent or holds another kind.
template <class T>
std::optional<T> flat_get(const std::map<std::string, JsonScalar>& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || !std::holds_alternative<T>(it->second)) return std::nullopt;
  return std::get<T>(it->second);
}

}  // namespace kiln
