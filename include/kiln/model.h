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
// message. This header is small and stable on purpose: it exposes nothing of kiln's IR.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
};

class Model {
 public:
  static Model compile(const std::string& onnx_path, const ModelOptions& opts = {});
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  int kernel_count() const;
  std::map<std::string, OutputTensor> run(const std::map<std::string, TensorRef>& inputs) const;
  // The allocation-free path: caller-owned buffers in inputs() / outputs() order, each dense
  // row-major with the declared dtype and shape (not checked: the caller sized them from
  // inputs()/outputs()). Generated kernels allocate nothing; intermediates live in the model's
  // arena, so one Model must not run on two threads at once.
  void run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace kiln
