// The public API (include/kiln/model.h) over the compiler: import, simplify, lower, build the
// Executable. Internal errors and user errors both surface as kiln::Error.
#include "kiln/model.h"

#include <cstring>

#include "frontend/onnx/onnx_import.h"
#include "runtime/executable.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln {

struct Model::Impl {
  std::unique_ptr<runtime::Executable> exe;
  std::vector<TensorInfo> inputs, outputs;
};

namespace {
TensorInfo info_of(const Value* v) { return {v->name(), std::string(dtype_name(v->dtype())), v->shape()}; }

template <class F>
auto translate_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}
}  // namespace

const float* OutputTensor::f32() const {
  if (dtype != "f32") throw Error("output is " + dtype + ", not f32");
  return reinterpret_cast<const float*>(bytes.data());
}

Model Model::compile(const std::string& onnx_path, const ModelOptions& opts) {
  return translate_errors([&] {
    ImportOptions io;
    for (const auto& [name, shape] : opts.input_shapes) io.input_shapes[name] = shape;
    auto g = import_onnx(onnx_path, io);
    run_pipeline(*g);
    run_lowering(*g);
    runtime::BuildOptions bo;
    bo.threads = opts.threads;
    bo.fusion.enabled = opts.fusion;
    bo.compile.use_cache = opts.use_cache;
    if (!opts.target.empty()) {
      auto t = Target::by_name(opts.target);
      if (!t) throw Error("unknown target '" + opts.target + "'");
      bo.fusion.target = *t;
    }
    Model m;
    m.impl_ = std::make_shared<Impl>();
    for (Value* v : g->inputs()) m.impl_->inputs.push_back(info_of(v));
    for (Value* v : g->outputs()) m.impl_->outputs.push_back(info_of(v));
    m.impl_->exe = runtime::Executable::build(std::move(g), bo);
    return m;
  });
}

const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
int Model::kernel_count() const { return impl_->exe->plan().kernel_count(); }

std::map<std::string, OutputTensor> Model::run(const std::map<std::string, TensorRef>& inputs) const {
  return translate_errors([&] {
    TensorMap in;
    for (const auto& [name, ref] : inputs) {
      auto dt = dtype_from_name(ref.dtype);
      if (!dt) throw Error("input '" + name + "': unknown dtype '" + ref.dtype + "'");
      Tensor t(*dt, ref.shape);
      if (t.nbytes() && !ref.data) throw Error("input '" + name + "' has no data");
      if (t.nbytes()) std::memcpy(t.raw(), ref.data, t.nbytes());
      in[name] = t;
    }
    std::map<std::string, OutputTensor> out;
    for (auto& [name, t] : impl_->exe->run(in)) {
      OutputTensor o{std::string(dtype_name(t.dtype())), t.shape(), {}};
      o.bytes.resize(t.nbytes());
      if (t.nbytes()) std::memcpy(o.bytes.data(), t.raw(), t.nbytes());
      out[name] = std::move(o);
    }
    return out;
  });
}

void Model::run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) const {
  translate_errors([&] {
    for (const void* p : inputs)
      if (!p) throw Error("run_into: null input buffer");
    for (void* p : outputs)
      if (!p) throw Error("run_into: null output buffer");
    impl_->exe->run_into(inputs, outputs);
    return 0;
  });
}

}  // namespace kiln
