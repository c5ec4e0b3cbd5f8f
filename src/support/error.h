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

}  // namespace kiln

// KILN_CHECK guards compiler invariants; a failure is a kiln bug, not a user mistake.
#define KILN_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      throw ::kiln::InternalError(::kiln::cat("internal error at ", __FILE__, ":", __LINE__, \
                                              ": check '", #cond, "' failed. ", ##__VA_ARGS__)); \
  } while (0)
