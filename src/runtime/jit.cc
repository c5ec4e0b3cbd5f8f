#include "runtime/jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>

#include "runtime/jit_cache.h"
#include "support/error.h"

namespace kiln::runtime {

namespace fs = std::filesystem;

namespace {

// Bump when the kernel ABI or the emitted prelude's contract changes, so stale objects are ignored.
constexpr std::string_view kCacheVersion = "kiln-jit-1";

// FNV-1a, 64 bits: fast, dependency-free; the cache needs no resistance to crafted collisions.
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ULL;
  // Each field ends with a NUL so ("ab", "c") and ("a", "bc") hash differently.
  void field(std::string_view s) {
    for (unsigned char c : s) mix(c);
    mix(0);
  }
  void mix(unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
};

// With -march=native the object depends on the CPU as well: a cache directory shared by several
// machines (an NFS home) must not hand one machine's object to another (SIGILL).
const std::string& cpu_identity() {
  static const std::string id = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, out;
    while (std::getline(in, line)) {
      auto key = line.substr(0, line.find(':'));
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      if (key == "model name" || key == "flags" || key == "Features" || key == "CPU part") out += line + "\n";
      if (line.empty() && !out.empty()) break;  // the first processor is enough
    }
    return out;
  }();
  return id;
}

std::string content_hash(const std::string& source, const CompileOptions& o) {
  Fnv1a h;
  h.field(kCacheVersion);
  h.field(source);
  h.field(o.compiler);
  bool native = false;
  for (const auto& f : o.flags) {
    h.field(f);
    native = native || f.find("=native") != std::string::npos;
  }
  if (native) h.field(cpu_identity());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h.h));
  return buf;
}

// The cache directory: the configured one when it is private to the user, else a private
// temporary one (jit_cache.h has the rules). Leftovers of killed builds there are removed.
fs::path cache_dir_for(const CompileOptions& opts) {
  const std::string wanted = opts.cache_dir.empty() ? default_cache_dir() : opts.cache_dir;
  const std::string dir = jit_cache::usable_dir(wanted);
  jit_cache::sweep_stale_temporaries(dir);
  return dir;
}

// A name no other thread or process uses at the same time, next to `base`.
std::string unique_temp(const std::string& base, const char* ext) {
  static std::atomic<uint64_t> counter{0};
  return base + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ext;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) user_error("cannot write ", path, ": ", std::strerror(errno));
}

// Readers (other processes) only ever see a complete file: write aside, then rename over.
void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = unique_temp(path, "");
  write_file(tmp, text);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    user_error("cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

// The executable exec will run: `name` itself when it has a slash, else the first match on PATH.
// Resolved here, so that the spawn gets a path and a missing compiler is one clear error.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string cand = dir + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  user_error("C compiler '", name, "' not found on PATH");
}

// Runs argv (no shell) with stdout and stderr going to log_path; returns the exit status, or
// 128 + signal number when it was killed. posix_spawn, not fork: glibc starts the child with
// clone(CLONE_VM | CLONE_VFORK), which copies no address space, so a process that has mapped many
// modules (kiln tune loads hundreds, each with its own per-thread scratch reservation) can still
// start the compiler — fork() had to commit a copy of all of it and failed with ENOMEM.
int run_process(const std::vector<std::string>& argv, const std::string& log_path) {
  const std::string program = find_program(argv[0]);
  std::vector<char*> av;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);

  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) user_error("cannot write ", log_path, ": ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy
  posix_spawn_file_actions_adddup2(&actions, fd, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  if (rc != 0) user_error("cannot start the C compiler ", program, ": ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) user_error("waiting for the C compiler failed: ", std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The line of a compiler log a user should see first: the first diagnostic that is an error,
// else the first non-empty line.
std::string first_error_line(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, first;
  while (std::getline(in, line)) {
    if (line.find("error") != std::string::npos) return line;
    if (first.empty() && !line.empty()) first = line;
  }
  return first.empty() ? "(no compiler output)" : first;
}

// RTLD_NODELETE: a module that ran OpenMP parallel loops leaves libgomp worker threads behind;
// unmapping it on dlclose would crash them at process exit, so modules stay mapped.
void* open_library(const std::string& path) {
  return ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
}

}  // namespace

std::string default_cache_dir() {
  // XDG says a relative $XDG_CACHE_HOME is invalid and must be ignored.
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return (fs::path(xdg) / "kiln").string();
  const char* home = std::getenv("HOME");
  if (home && home[0]) return (fs::path(home) / ".cache" / "kiln").string();
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  return ((ec ? fs::path("/tmp") : tmp) / ("kiln-" + std::to_string(::getuid()))).string();
}

std::unique_ptr<JitModule> JitModule::build(const std::string& source, const CompileOptions& opts) {
  const fs::path dir = cache_dir_for(opts);
  const std::string base = (dir / ("kiln_" + content_hash(source, opts))).string();
  const std::string src_path = base + ".c", so_path = base + ".so", log_path = base + ".log";
  std::unique_ptr<JitModule> m(new JitModule());
  m->path_ = so_path;

  const std::string sum_path = so_path + ".sum";
  if (opts.use_cache) {
    // Only an object whose content matches the hash recorded when it was built is loaded; anything
    // else (truncated, no record, another user's) is rebuilt below. A verified file that still
    // fails to load (another libc) is rebuilt too.
    if (jit_cache::verify_digest(so_path, sum_path)) {
      m->handle_ = open_library(so_path);
      if (m->handle_) {
        m->cached_ = true;
        return m;
      }
    }
  }

  // Every file is written aside and renamed into place: processes building the same kernel at
  // the same time never see each other's partial output, and the last rename wins harmlessly.
  write_file_atomic(src_path, source);
  const std::string tmp_so = unique_temp(base, ".so"), tmp_log = unique_temp(base, ".log");
  std::vector<std::string> argv = {opts.compiler};
  argv.insert(argv.end(), opts.flags.begin(), opts.flags.end());
  argv.insert(argv.end(), {"-o", tmp_so, src_path});
  const int rc = run_process(argv, tmp_log);
  if (rc != 0) {
    std::remove(tmp_so.c_str());
    std::rename(tmp_log.c_str(), log_path.c_str());
    // The source is kiln's own output: C that does not compile is a bug in kiln (the emitter or a
    // lowering), not in the model. The kept source and log are what a bug report needs.
    throw InternalError(cat("internal error: C compiler failed (exit ", rc, ") on ", src_path, ": ", first_error_line(log_path),
                            "; full log: ", log_path));
  }
  std::remove(tmp_log.c_str());
  // The hash is in place before the object: a reader that finds the object finds its record.
  try {
    jit_cache::record_digest(tmp_so, sum_path);
  } catch (...) {
    std::remove(tmp_so.c_str());
    throw;
  }
  if (std::rename(tmp_so.c_str(), so_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_so.c_str());
    user_error("cannot rename ", tmp_so, " to ", so_path, ": ", std::strerror(err));
  }
  m->handle_ = open_library(so_path);
  if (!m->handle_) {
    const char* err = ::dlerror();
    user_error("cannot load compiled kernels ", so_path, ": ", err ? err : "unknown error");
  }
  return m;
}

std::vector<std::unique_ptr<JitModule>> JitModule::build_all(const std::vector<std::string>& sources,
                                                             const CompileOptions& opts, int jobs) {
  std::vector<std::unique_ptr<JitModule>> out(sources.size());
  if (jobs <= 0) jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  const size_t workers = std::min(sources.size(), size_t(jobs));
  if (workers <= 1) {
    for (size_t i = 0; i < sources.size(); ++i) out[i] = build(sources[i], opts);
    return out;
  }
  // Threads, each running build() (which spawns the compiler and waits for it): build is safe to
  // run concurrently — distinct sources have distinct cache names, temporaries are unique per
  // thread, the stale-file sweep runs once per folder. Each thread takes the next source.
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(sources.size());
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < sources.size();) {
        try {
          out[i] = build(sources[i], opts);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    });
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

JitModule::~JitModule() {
  if (handle_) ::dlclose(handle_);
}

KernelFn JitModule::find(const std::string& name) const {
  ::dlerror();  // clear a stale error
  return handle_ ? reinterpret_cast<KernelFn>(::dlsym(handle_, name.c_str())) : nullptr;
}

KernelFn JitModule::get(const std::string& name) const {
  ::dlerror();  // clear a stale error
  void* sym = handle_ ? ::dlsym(handle_, name.c_str()) : nullptr;
  if (!sym) user_error("kernel ", name, " not found in ", path_);
  return reinterpret_cast<KernelFn>(sym);
}

}  // namespace kiln::runtime
