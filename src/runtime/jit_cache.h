// The JIT cache's safety rules (jit.cc builds and loads; this file decides what it may trust).
//
// A cached object is code kiln runs as the user, so:
//  - the cache folder must be the user's own, mode 0700, and not a symbolic link; a folder that is
//    not (another user made /tmp/kiln-<uid> first, a group-writable folder, a symlink) is never
//    used: kiln compiles into a private temporary folder instead and warns once;
//  - every object is loaded only after its content hash matches the one recorded beside it
//    (`<object>.sum`, written before the object is renamed into place), so a truncated or
//    altered object is rebuilt instead of crashing the process with SIGBUS;
//  - temporaries of processes that died mid-build (`*.tmp.<pid>.<n>*`) are removed.
#pragma once
#include <string>

namespace kiln::runtime::jit_cache {

// The folder to compile into: `wanted` when it is, or could be created or tightened (a folder the
// user owns that only the user can write is chmod-ed to 0700) into, a private folder; else a fresh
// private temporary folder (removed at exit), with a one-time warning on stderr naming the reason.
std::string usable_dir(const std::string& wanted);

// Why `dir` may not be used as a cache folder, creating it (mode 0700) when it does not exist;
// empty when it may. Symbolic links are not followed (checked with O_NOFOLLOW and fstat).
std::string why_not_private(const std::string& dir);

// Records `object`'s content hash in `sum_path` (atomically: written aside, renamed over).
void record_digest(const std::string& object, const std::string& sum_path);

// True when `object` is a regular file (not a symlink) the user owns whose content hash is the one
// in `sum_path`. The caller then loads it by its path: only the user can write the folder, and
// files there are only ever replaced whole (rename), so the file loaded is the file checked.
// (Loading through /proc/self/fd/N instead would be wrong: the dynamic loader matches objects by
// name, and a later module opened under a reused descriptor number would get the earlier one.)
bool verify_digest(const std::string& object, const std::string& sum_path);

// Removes `dir`'s temporaries left by processes that no longer exist; once per folder per process.
void sweep_stale_temporaries(const std::string& dir);

}  // namespace kiln::runtime::jit_cache
