#include "support/json.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace kiln {

std::string json_quote(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += char(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else {
      r += char(c);
    }
  }
  return r + "\"";
}

std::optional<std::map<std::string, JsonScalar>> parse_flat_object(const std::string& s) {
  size_t i = 0;
  auto ws = [&] { while (i < s.size() && std::isspace((unsigned char)s[i])) ++i; };
  auto str = [&]() -> std::optional<std::string> {
    if (i >= s.size() || s[i] != '"') return std::nullopt;
    std::string r;
    for (++i; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] != '\\') { r += s[i]; continue; }
      if (++i >= s.size()) return std::nullopt;
      char e = s[i];
      if (e == 'u') {
        if (i + 4 >= s.size()) return std::nullopt;
        unsigned long cp = std::strtoul(s.substr(i + 1, 4).c_str(), nullptr, 16);
        if (cp > 0x7f) return std::nullopt;  // the writer escapes only control characters
        r += char(cp);
        i += 4;
      } else if (e == 'n') r += '\n';
      else if (e == 't') r += '\t';
      else if (e == '"' || e == '\\' || e == '/') r += e;
      else return std::nullopt;
    }
    if (i >= s.size()) return std::nullopt;
    ++i;
    return r;
  };
  std::map<std::string, JsonScalar> out;
  ws();
  if (i >= s.size() || s[i++] != '{') return std::nullopt;
  ws();
  if (i < s.size() && s[i] == '}') return out;
  for (;;) {
    ws();
    auto key = str();
    if (!key) return std::nullopt;
    ws();
    if (i >= s.size() || s[i++] != ':') return std::nullopt;
    ws();
    if (i >= s.size()) return std::nullopt;
    if (s[i] == '"') {
      auto v = str();
      if (!v) return std::nullopt;
      out[*key] = *v;
    } else if (s.compare(i, 4, "true") == 0) out[*key] = true, i += 4;
    else if (s.compare(i, 5, "false") == 0) out[*key] = false, i += 5;
    else if (s.compare(i, 4, "null") == 0) out[*key] = std::monostate{}, i += 4;
    else {
      const char* b = s.c_str() + i;
      char* e = nullptr;
      errno = 0;
      double v = std::strtod(b, &e);
      if (e == b || errno == ERANGE) return std::nullopt;
      out[*key] = v;
      i += size_t(e - b);
    }
    ws();
    if (i < s.size() && s[i] == ',') { ++i; continue; }
    if (i < s.size() && s[i] == '}') { ++i; break; }
    return std::nullopt;
  }
  ws();
  if (i != s.size()) return std::nullopt;
  return out;
}


}  // namespace kiln
