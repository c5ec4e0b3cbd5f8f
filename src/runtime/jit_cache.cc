#include "runtime/jit_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>

#include "support/error.h"
#include "support/stale_temp.h"

namespace kiln::runtime::jit_cache {

namespace fs = std::filesystem;

namespace {

// A descriptor closed on every path out.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// The private temporary folder of this process, made on first use and removed at exit (loaded
// objects stay mapped: unlinking their files does not unmap them).
struct PrivateTemp {
  std::string path;
  ~PrivateTemp() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

const std::string& private_temp_dir() {
  static PrivateTemp t;
  static std::once_flag once;
  std::call_once(once, [] {
    std::error_code ec;
    fs::path tmp = fs::temp_directory_path(ec);
    if (ec) tmp = "/tmp";
    std::string templ = (tmp / "kiln-jit-XXXXXX").string();
    if (!::mkdtemp(templ.data()))  // mkdtemp: a new folder, mode 0700, never an existing one
      user_error("cannot create a private folder for compiled kernels in ", tmp.string(), ": ", std::strerror(errno));
    t.path = templ;
  });
  return t.path;
}

// FNV-1a over the object's bytes, with its size. Not a defence against someone who can write the
// folder (nobody else can: see why_not_private); it catches truncation and corruption.
bool digest_fd(int fd, std::string* out) {
  uint64_t h = 0xcbf29ce484222325ULL, size = 0;
  char buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 0x100000001b3ULL;
    }
    size += uint64_t(n);
  }
  char line[64];
  std::snprintf(line, sizeof line, "fnv1a64 %016llx %llu\n", static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(size));
  *out = line;
  return true;
}

// Reads a small file without following a symlink; empty on any failure.
std::string read_small(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (f.fd < 0) return {};
  char buf[128];
  ssize_t n = ::read(f.fd, buf, sizeof buf);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

}  // namespace

std::string why_not_private(const std::string& dir) {
  std::error_code ec;
  fs::path p(dir);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return cat("cannot be created (", std::strerror(errno), ")");
  Fd f(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (f.fd < 0) {
    const int err = errno;
    struct stat ls;
    if (::lstat(dir.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode)) return "is a symbolic link";
    if (err == ENOTDIR) return "is not a folder";
    return cat("cannot be opened (", std::strerror(err), ")");
  }
  struct stat st;
  if (::fstat(f.fd, &st) != 0) return cat("cannot be examined (", std::strerror(errno), ")");
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  if (st.st_uid != ::geteuid()) return cat("is owned by uid ", st.st_uid, ", not by you (uid ", ::geteuid(), ")");
  // Writable by others: someone else may already have planted objects in it; tightening the mode
  // now would not remove them.
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return cat("is writable by others (mode ", octal_mode(st.st_mode), ")");
  if ((st.st_mode & 077) && ::fchmod(f.fd, 0700) != 0)
    return cat("cannot be made private (", std::strerror(errno), ")");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return "is not writable";
  return {};
}

std::string usable_dir(const std::string& wanted) {
  std::string why = why_not_private(wanted);
  if (why.empty()) return wanted;
  const std::string& tmp = private_temp_dir();
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::cerr << "kiln: warning: JIT cache folder " << wanted << " " << why
              << "; compiling into the private temporary folder " << tmp << " (removed at exit)\n";
  });
  return tmp;
}

void record_digest(const std::string& object, const std::string& sum_path) {
  Fd f(::open(object.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  std::string line;
  if (f.fd < 0 || !digest_fd(f.fd, &line)) user_error("cannot read ", object, ": ", std::strerror(errno));
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = cat(sum_path, ".tmp.", ::getpid(), ".", counter++);
  Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (out.fd < 0 || ::write(out.fd, line.data(), line.size()) != ssize_t(line.size()))
    user_error("cannot write ", tmp, ": ", std::strerror(errno));
  ::close(out.release());
  if (std::rename(tmp.c_str(), sum_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    user_error("cannot rename ", tmp, " to ", sum_path, ": ", std::strerror(err));
  }
}

bool verify_digest(const std::string& object, const std::string& sum_path) {
  Fd f(::open(object.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (f.fd < 0) return false;
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return false;
  const std::string want = read_small(sum_path);
  std::string got;
  return !want.empty() && digest_fd(f.fd, &got) && got == want;
}

void sweep_stale_temporaries(const std::string& dir) {
  static std::mutex mu;
  static std::set<std::string> swept;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!swept.insert(dir).second) return;
  }
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("kiln_", 0) != 0) continue;
    if (process_gone(pid_after(name, ".tmp."))) fs::remove(it->path(), ec);
    ec.clear();
  }
}

}  // namespace kiln::runtime::jit_cache
