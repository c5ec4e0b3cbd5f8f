// The one JSON string writer kiln's JSON outputs share (kiln explain --json, machine.json, ...).
#pragma once
#include <string>

namespace kiln {

// `s` as a JSON string literal, quotes included: " and \ escaped, control characters as \u00XX.
std::string json_quote(const std::string& s);

}  // namespace kiln
