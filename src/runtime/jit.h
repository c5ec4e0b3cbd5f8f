// Builds C source into a shared object with the system compiler and loads it (dlopen), caching the
// object by a content hash of (source, compiler, flags) under $XDG_CACHE_HOME/kiln or ~/.cache/kiln.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

struct CompileOptions {
  std::string compiler = "cc";
  // One place for the flags; `kiln explain` shows them. No fast-math by default.
  std::vector<std::string> flags = {"-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=fast"};
  bool use_cache = true;       // --no-cache bypasses
  std::string cache_dir;       // default: $XDG_CACHE_HOME/kiln or ~/.cache/kiln
};

using KernelFn = void (*)(void* const* args);

class JitModule {
 public:
  // Compiles (or finds in the cache) and loads. The source is kiln's own output, so a compiler
  // that runs and rejects it is an InternalError (a kiln bug) naming the kept source file, the
  // compiler's first error line and the full log; a compiler that cannot be found or started is
  // a UserError.
  static std::unique_ptr<JitModule> build(const std::string& source, const CompileOptions& opts = {});
  // Several translation units, each compiled into its own object by its own compiler process, up
  // to `jobs` processes at once (0: one per hardware thread), then each loaded; module i is
  // sources[i]'s. The tuner splits a batch of candidates this way so that the machine's cores
  // share its compile. The first failure by source order is thrown (the same one-line error as
  // build), after every compiler process has ended.
  static std::vector<std::unique_ptr<JitModule>> build_all(const std::vector<std::string>& sources,
                                                           const CompileOptions& opts = {}, int jobs = 0);
  JitModule() = default;
  JitModule(const JitModule&) = delete;  // owns a dlopen handle
  JitModule& operator=(const JitModule&) = delete;
  ~JitModule();
  KernelFn get(const std::string& name) const;  // UserError when missing
  KernelFn find(const std::string& name) const;  // nullptr when missing
  const std::string& library_path() const { return path_; }
  bool from_cache() const { return cached_; }

 private:
  void* handle_ = nullptr;
  std::string path_;
  bool cached_ = false;
};

std::string default_cache_dir();

}  // namespace kiln::runtime
