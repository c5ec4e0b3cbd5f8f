// Temporaries named after the process that writes them, so that a later process can tell the
// leftovers of a killed one (kill -9, OOM, power loss) from files another live process is writing.
#pragma once
#include <string>

namespace kiln {

// The pid written right after `marker` in `name` and ended by '.' or '-'
// ("kiln_ab.tmp.1234.0.so", ".tmp." → 1234), or -1.
long pid_after(const std::string& name, const std::string& marker);

// True when no process `pid` exists (kill(pid, 0) fails with ESRCH). A pid that exists, or that
// cannot be probed, counts as alive: a leftover kept is harmless, a live file removed is not.
bool process_gone(long pid);

}  // namespace kiln
