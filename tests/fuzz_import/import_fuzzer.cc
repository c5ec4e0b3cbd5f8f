// libFuzzer target for kiln's ONNX importer (issue 15): bytes → model file → import_onnx →
// simplification and lowering passes. (Not the fusion partition: it asks the code generator about
// every candidate group, ~1 s per small model under the sanitizers, which would leave the fuzzer
// a few executions per second; the bad-input table and fuzz_random_graphs cover it.)
//
// A UserError is the right answer to a malformed model and is ignored. Anything else is a finding:
// an InternalError or another exception (a user mistake reported as "internal error", exit 70),
// and — caught by libFuzzer and the sanitizers themselves — a signal, a sanitizer report, a
// timeout or an allocation beyond -rss_limit_mb / -malloc_limit_mb.
//
// Built with clang (-fsanitize=fuzzer,address,undefined) by `make fuzz-import` (tests/fuzz_import/
// README.md). Seeds: the ONNX backend-test models in /usr/share/libonnx-testdata.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "frontend/onnx/onnx_import.h"
#include "support/error.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace {

// One folder per fuzzing process: the model file is rewritten for every input. The importer
// reads a path (external data is resolved next to it), so the bytes go through a file.
const std::string& model_path() {
  static const std::string path = [] {
    std::string dir = (std::filesystem::temp_directory_path() / ("kiln-import-fuzz-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    return dir + "/model.onnx";
  }();
  return path;
}

[[noreturn]] void finding(const char* kind, const char* what) {
  std::fprintf(stderr, "kiln import fuzzer: %s: %s\n", kind, what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream f(model_path(), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    auto g = kiln::import_onnx(model_path(), {});
    auto passes = kiln::simplification_pipeline();
    for (auto& p : kiln::lowering_pipeline()) passes.push_back(std::move(p));
    kiln::run_passes(*g, passes, {});
  } catch (const kiln::UserError&) {
    // the expected answer to a malformed model
  } catch (const kiln::InternalError& e) {
    finding("internal error", e.what());
  } catch (const std::exception& e) {
    finding("unexpected exception", e.what());
  }
  return 0;
}
