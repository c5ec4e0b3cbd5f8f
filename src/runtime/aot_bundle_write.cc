// Writing a bundle: into a fresh temporary directory beside the destination, then one rename, so a
// reader (or make) never sees a half-written bundle and a failure leaves the destination as it was.
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/aot_bundle.h"
#include "support/stale_temp.h"

namespace kiln::runtime {

namespace fs = std::filesystem;

namespace {

// The destination as an absolute path without a trailing separator ("out/" and "out" alike).
fs::path destination(const std::string& dir) {
  if (dir.empty()) user_error("the output directory name is empty");
  fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (p == p.root_path()) user_error("refusing to write a bundle to '", dir, "'");
  return p;
}

bool is_previous_bundle(const fs::path& p) {
  std::ifstream f(p / "kiln_model.h");
  std::string line;
  return f && std::getline(f, line) && line == kAotMarker;
}

// mkdtemp beside `p`: ".NAME.kiln-TAG-XXXXXX", on the same file system so rename is atomic.
// ".NAME.kiln-TAG-<pid>-XXXXXX": the pid lets a later compile tell a killed compile's leftovers
// from a running one's (remove_stale_staging).
fs::path temp_beside(const fs::path& p, const char* tag) {
  std::string templ = (p.parent_path() / ("." + p.filename().string() + ".kiln-" + tag + "-" +
                                          std::to_string(::getpid()) + "-XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    user_error("cannot create a directory beside '", p.string(), "': ", std::strerror(errno));
  return fs::path(buf.data());
}

void write_file(const fs::path& p, const char* data, size_t n) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (f) f.write(data, std::streamsize(n));
  if (f) f.close();
  if (!f) user_error(p.string(), ": write failed");
}

void write_weights(const AotBundle& b, const fs::path& p) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  char header[kAotHeaderBytes] = {};
  auto put = [&](int at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) header[at + i] = char((v >> (8 * i)) & 0xff);
  };
  std::memcpy(header, "KILNWTS1", 8);
  put(8, kAotWeightsVersion, 4);
  put(12, uint64_t(kAotHeaderBytes), 4);
  put(16, uint64_t(b.weights_bytes), 8);
  put(24, b.weights_hash, 8);
  f.write(header, sizeof header);
  static const char zeros[kAotWeightAlignment] = {};
  int64_t at = 0;
  for (const AotWeight& w : b.weights) {
    KILN_CHECK(w.offset >= at && w.offset - at < kAotWeightAlignment, "aot: weights out of order");
    f.write(zeros, std::streamsize(w.offset - at));
    f.write(static_cast<const char*>(w.data), std::streamsize(w.bytes));
    at = w.offset + w.bytes;
  }
  KILN_CHECK(b.weights_bytes >= at && b.weights_bytes - at < kAotWeightAlignment, "aot: weights size");
  f.write(zeros, std::streamsize(b.weights_bytes - at));
  f.close();
  if (!f) user_error(p.string(), ": write failed");
}

}  // namespace

void check_aot_destination(const std::string& dir) {
  fs::path p = destination(dir);
  std::error_code ec;
  fs::file_status st = fs::symlink_status(p, ec);
  if (!fs::exists(st)) return;
  if (fs::is_symlink(st)) user_error("'", dir, "' is a symbolic link; give the directory itself");
  if (!fs::is_directory(st)) user_error("'", dir, "' exists and is not a directory");
  if (!fs::is_empty(p, ec) && !is_previous_bundle(p))
    user_error("'", dir, "' is not empty and not a kiln bundle; refusing to overwrite it");
}

// Staging folders (a bundle's worth of weights each) of compiles that were killed: removed, so that
// they do not pile up beside the destination.
void remove_stale_staging(const fs::path& p) {
  const std::string prefix = "." + p.filename().string() + ".kiln-";
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path().empty() ? "." : p.parent_path(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    long pid = pid_after(rest, "tmp-");
    if (pid < 0) pid = pid_after(rest, "old-");
    if ((rest.rfind("tmp-", 0) == 0 || rest.rfind("old-", 0) == 0) && process_gone(pid)) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
    }
  }
}

void write_aot_bundle(const AotBundle& b, const std::string& dir) {
  check_aot_destination(dir);
  fs::path p = destination(dir);
  std::error_code ec;
  remove_stale_staging(p);
  fs::create_directories(p.parent_path(), ec);
  if (ec) user_error("cannot create '", p.parent_path().string(), "': ", ec.message());
  fs::path tmp = temp_beside(p, "tmp");
  try {
    for (const auto& [name, text] : b.files) write_file(tmp / name, text.data(), text.size());
    write_weights(b, tmp / "weights.bin");
    // mkdtemp made it private; a bundle is an ordinary directory.
    fs::permissions(tmp, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
    if (fs::exists(fs::symlink_status(p, ec)) && !fs::is_empty(p, ec)) {
      // A previous bundle: move it aside, put the new one in place, then delete the old one.
      fs::path old = temp_beside(p, "old");
      fs::rename(p, old);  // onto the empty directory mkdtemp made: no window for another name
      try {
        fs::rename(tmp, p);
      } catch (...) {
        fs::rename(old, p, ec);
        throw;
      }
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, p);  // replaces an empty directory
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    user_error("cannot write bundle '", dir, "': ", e.code().message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace kiln::runtime
