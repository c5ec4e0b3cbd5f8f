// kiln public C++ API: compile an ONNX model once, run it many times.
//
//   kiln::ModelOptions opts;
//   opts.threads = 4;
//   kiln::Model m = kiln::Model::compile("resnet18.onnx", opts);
//   std::vector<float> x(1 * 3 * 224 * 224);
//   auto out = m.run({{"input", kiln::TensorRef::f32(x.data(), {1, 3, 224, 224})}});
//   const float* logits = out.at("output").f32();
//
// Errors (bad model, wrong input shape, compiler failure) throw kiln::Error with a one-line
// message (the one the CLI prints after "kiln: error: ") and a kind() saying which it is. This
// header is small and stable on purpose: it exposes nothing of kiln's IR. The Python package
// (python/, docs/python.md) is a thin binding of exactly this interface.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  enum class Kind {
    Model,          // the model or an input is wrong (malformed file, bad shape, wrong input name)
    UnsupportedOp,  // valid ONNX that kiln does not implement (an op or an op domain)
    Compile,        // code generation or the C compiler failed
    Usage,          // the API was called wrongly (an option, a bundle destination)
    Internal,       // a kiln bug (a broken invariant); the message says which
  };
  explicit Error(const std::string& msg, Kind kind = Kind::Model) : std::runtime_error(msg), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// Element types by their short names: "f32", "f64", "f16", "bf16", "i8", "i16", "i32", "i64",
// "u8", "u16", "u32", "u64", "bool".
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};

// A caller-owned input buffer (row-major, of the model's dtype and shape).
struct TensorRef {
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  static TensorRef f32(const float* d, std::vector<int64_t> s) { return {"f32", std::move(s), d}; }
};

// An output owned by the caller after run().
struct OutputTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  const float* f32() const;  // throws Error unless dtype is "f32"
};

struct ModelOptions {
  std::map<std::string, std::vector<int64_t>> input_shapes;  // fixes symbolic input dims
  int threads = 0;            // 0: all hardware threads
  bool fusion = true;         // false: one kernel per op
  bool use_cache = true;      // compiled-kernel cache ($XDG_CACHE_HOME/kiln)
  std::string target;         // fusion target description ("" = default)
  // The reference executor's exact float operations and order (no FMA, no reduction lanes):
  // results bit-identical to it, as `kiln run --strict-fp`. false: kiln's default numerics (FMA,
  // lane sums, vectorised exp/erf; within 1e-4 of the reference).
  bool strict_fp = false;
  // Where the generated kernels run: "cpu" (default), "opencl" (through the ICD loader, e.g.
  // PoCL) or "cuda" (NVRTC and the driver API), as `kiln run --device`. A device that is not
  // there is a Usage error from compile(); strict_fp is CPU-only.
  std::string device = "cpu";
  // Called during compile() with the step being done and its position, e.g. ("lowering", 3, 40)
  // for the kernels, then ("compiling", 40, 40) while the C compiler runs (the long step).
  std::function<void(const std::string& step, int done, int total)> progress;
};

// What Model::roofline measures.
struct RooflineOptions {
  int runs = 10, warmup = 2;
  bool compare_unfused = true;  // also build and time the --no-fusion executable (as `kiln roofline`)
};

class Model {
 public:
  static Model compile(const std::string& onnx_path, const ModelOptions& opts = {});
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  int kernel_count() const;
  int threads() const;                              // the thread count kernels run with
  const std::vector<std::string>& compile_flags() const;  // the C compiler's flags for this model
  // Checks inputs by name, dtype and shape (the messages of `kiln run`, prefixed by the model path)
  // and returns their data pointers in inputs() order, for run_into. Reads no data.
  std::vector<const void*> bind(const std::map<std::string, TensorRef>& inputs) const;
  std::map<std::string, OutputTensor> run(const std::map<std::string, TensorRef>& inputs) const;
  // The allocation-free path: caller-owned buffers in inputs() / outputs() order, each dense
  // row-major with the declared dtype and shape (not checked: the caller sized them from
  // inputs()/outputs()). Generated kernels allocate nothing; intermediates live in the model's
  // arena, so one Model must not run on two threads at once.
  void run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) const;

  // Reports (src/api/model_reports.cc): the fusion plan as `kiln explain --json` prints it; the
  // roofline report as `kiln roofline --json` prints it (times the model on fixed-seed inputs;
  // probes the machine once when no probe is cached); the AOT bundle `kiln compile -o DIR` writes.
  std::string explain_json() const;
  std::string roofline_json(const RooflineOptions& opts = {}) const;
  void save_bundle(const std::string& dir) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
