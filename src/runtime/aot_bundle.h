// Ahead-of-time bundles (`kiln compile`): a compiled model written out as plain C that builds with
// `cc`/`make` and runs without kiln. The bundle holds
//   kiln_model.h   the entry points and a description of every input and output;
//   kiln_model.c   the kernels exactly as the JIT compiles them (Executable::source()) plus a driver
//                  that replays Executable::run_into: one arena from the memory plan, the kernel
//                  calls in plan order with their argument pointers resolved at compile time;
//   weights.bin    every constant the driver passes to a kernel, 64-byte aligned, behind a header
//                  (magic, sizes, a hash that kiln_model.c also holds);
//   main.c, Makefile, README.txt   a model-independent runner and how to build and use it.
// Library kernels (reference ops run by kiln) have no C form, so a model that needs one cannot be
// bundled: make_aot_bundle refuses it by name before anything is written.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executable.h"

namespace kiln::runtime {

struct AotOptions {
  std::string model_path;     // named in the generated comments and README
  int threads = 0;            // thread count kiln_model_init sets (0: the OpenMP default)
  CompileOptions compile;     // compiler and flags the Makefile uses (those of the JIT)
  codegen::EmitOptions emit;  // for the helper prelude of a model without generated kernels
};

// One constant's place in weights.bin (offset from the start of the data, after the header).
struct AotWeight {
  const void* data = nullptr;
  int64_t bytes = 0;
  int64_t offset = 0;
};

// A bundle in memory. `weights` point into the Executable's constants: keep it alive until written.
struct AotBundle {
  std::vector<std::pair<std::string, std::string>> files;  // file name → contents (text files)
  std::vector<AotWeight> weights;
  int64_t weights_bytes = 0;  // data bytes after the header (a multiple of the alignment)
  uint64_t weights_hash = 0;
  int64_t arena_bytes = 0;
  int generated_kernels = 0, views = 0, in_place_concats = 0;  // the last two run no kernel
};

// weights.bin: a kAotHeaderBytes header ("KILNWTS1", u32 version, u32 header bytes, u64 data bytes,
// u64 hash; little-endian; zero padded), then the data. Every constant starts at a multiple of
// kAotWeightAlignment from the start of the data (and of the file).
constexpr int64_t kAotHeaderBytes = 64;
constexpr int64_t kAotWeightAlignment = 64;
constexpr uint32_t kAotWeightsVersion = 1;

// The hash kiln_model_init checks: FNV-1a over the data as little-endian 64-bit words.
uint64_t aot_hash_words(uint64_t h, const void* data, int64_t bytes);  // bytes: a multiple of 8
constexpr uint64_t kAotHashSeed = 0xcbf29ce484222325ull;

// Lays out the weights and generates the text files. UserError (one line, naming the kernel and
// why) when a kernel of `ex` runs as a library kernel.
AotBundle make_aot_bundle(const Executable& ex, const AotOptions& opts);

// UserError unless `dir` is absent, an empty directory or a previous kiln bundle (which
// write_aot_bundle replaces). Cheap: the CLI calls it before compiling.
void check_aot_destination(const std::string& dir);

// Writes the bundle into a temporary directory beside `dir` and renames it into place at the end,
// so `dir` is never left half written; on failure nothing new remains.
void write_aot_bundle(const AotBundle& b, const std::string& dir);

// The first line of every generated kiln_model.h: how a previous bundle is recognised.
extern const char* const kAotMarker;

// Fixed text (aot_bundle_files.cc): the driver's init/free/error functions (C, after the defines
// kiln_model.c starts its driver with), the runner, the Makefile for the given compiler and flags,
// and the README.
std::string aot_driver_support();
std::string aot_runner_source();
std::string aot_makefile(const CompileOptions& compile);
std::string aot_readme(const std::string& model_path, const Graph& g);

}  // namespace kiln::runtime
