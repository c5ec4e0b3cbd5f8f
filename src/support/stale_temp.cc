#include "support/stale_temp.h"

#include <signal.h>

#include <cerrno>

namespace kiln {

long pid_after(const std::string& name, const std::string& marker) {
  const size_t at = name.find(marker);
  if (at == std::string::npos) return -1;
  long pid = 0;
  size_t i = at + marker.size(), digits = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 10; ++i, ++digits)
    pid = pid * 10 + (name[i] - '0');
  // The pid ends at a '.' or '-': a run of digits that ends the name (or a longer one) is some
  // other number, e.g. an older kiln's random mkdtemp suffix.
  if (digits == 0 || i >= name.size() || (name[i] != '.' && name[i] != '-')) return -1;
  return pid;
}

bool process_gone(long pid) {
  if (pid <= 0) return false;
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace kiln
