// Two kinds of errors (after Halide's user_error / internal_error):
//  - UserError: the model or the command line is wrong; the message is one line a user can act on.
//  - InternalError: kiln has a bug; the message says which invariant broke.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// A UserError for valid ONNX that kiln does not implement (an op, an op domain): the Python
// package raises kiln.UnsupportedOp for it, so a caller can tell "kiln cannot" from "the model is
// wrong". Add context with rethrow_with_context(), which keeps the type.
class UnsupportedError : public UserError {
 public:
  explicit UnsupportedError(const std::string& msg) : UserError(msg) {}
};

// Rethrows `e` with `prefix` in front of its message, keeping its type (an UnsupportedError stays one).
[[noreturn]] inline void rethrow_with_context(const std::string& prefix, const UserError& e) {
  if (dynamic_cast<const UnsupportedError*>(&e)) throw UnsupportedError(prefix + e.what());
  throw UserError(prefix + e.what());
}

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& msg) : std::logic_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<<.
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

template <class... Args>
[[noreturn]] void user_error(const Args&... args) {
  throw UserError(cat(args...));
}

template <class... Args>
[[noreturn]] void unsupported_error(const Args&... args) {
  throw UnsupportedError(cat(args...));
}

}  // namespace kiln

// KILN_CHECK guards compiler invariants; a failure is a kiln bug, not a user mistake.
#define KILN_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::kiln::InternalError(::kiln::cat("internal error at ", __FILE__, ":", __LINE__, \
                                              ": check '", #cond, "' failed. ", ##__VA_ARGS__)); \
  } while (0)
