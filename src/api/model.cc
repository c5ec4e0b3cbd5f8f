// The public API (include/kiln/model.h) over the compiler: import, simplify, lower, build the
// Executable, run it. Every exception leaves as a kiln::Error whose kind() says what went wrong,
// decided by the exception's type and the phase it came from (translate_errors below).
#include "kiln/model.h"

#include <cstdio>

#include "api/model_impl.h"
#include "frontend/onnx/onnx_import.h"
#include "support/error.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln {

namespace {
TensorInfo info_of(const Value* v) { return {v->name(), std::string(dtype_name(v->dtype())), v->shape()}; }

// Splits the Executable's progress messages ("lowering kernel 3/40", "compiling 40 kernels with
// cc"; src/runtime/executable.cc) into (step, done, total) for ModelOptions::progress.
void report_progress(const ModelOptions& opts, const std::string& message, int& kernels) {
  int done = 0, total = 0;
  if (std::sscanf(message.c_str(), "lowering kernel %d/%d", &done, &total) == 2) {
    kernels = total;
    opts.progress("lowering", done, total);
  } else if (std::sscanf(message.c_str(), "compiling %d", &done) == 1) {
    opts.progress("compiling", kernels ? kernels : done, kernels ? kernels : done);
  } else {
    opts.progress(message, 0, 0);
  }
}
}  // namespace

[[noreturn]] void rethrow_as_api_error(Phase phase) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const UnsupportedError& e) {
    throw Error(e.what(), Error::Kind::UnsupportedOp);
  } catch (const UserError& e) {
    // During the build a UserError comes from code generation or the C compiler (one that
    // cannot be found or started); elsewhere it is about the model or the inputs.
    throw Error(e.what(), phase == Phase::Build ? Error::Kind::Compile
                          : phase == Phase::Report ? Error::Kind::Usage
                                                   : Error::Kind::Model);
  } catch (const InternalError& e) {
    // A C compiler that rejects kiln's own C is an InternalError of the JIT: a compile failure
    // to the caller. The CLI adds the same request for a report.
    throw Error(std::string(e.what()) + " (this is a bug in kiln; please report it with the model)",
                phase == Phase::Build ? Error::Kind::Compile : Error::Kind::Internal);
  } catch (const std::bad_alloc&) {
    throw Error("out of memory", Error::Kind::Model);
  } catch (const std::exception& e) {
    throw Error(std::string("internal error: ") + e.what(), Error::Kind::Internal);
  }
}

const float* OutputTensor::f32() const {
  if (dtype != "f32") throw Error("output is " + dtype + ", not f32", Error::Kind::Usage);
  return reinterpret_cast<const float*>(bytes.data());
}

Model Model::compile(const std::string& onnx_path, const ModelOptions& opts) {
  if (opts.threads < 0) throw Error("threads must be positive (0: all hardware threads)", Error::Kind::Usage);
  runtime::BuildOptions bo;
  bo.threads = opts.threads;
  bo.fusion.enabled = opts.fusion;
  bo.compile.use_cache = opts.use_cache;
  if (!opts.target.empty()) {
    auto t = Target::by_name(opts.target);
    if (!t) throw Error("unknown target '" + opts.target + "'", Error::Kind::Usage);
    bo.fusion.target = *t;
  }
  bo.strict_fp = opts.strict_fp;  // `kiln run --strict-fp`: Executable::build applies it (with_numerics)
  if (opts.device != "cpu" && opts.device != "opencl" && opts.device != "cuda")
    throw Error("device must be cpu, opencl or cuda, got '" + opts.device + "'", Error::Kind::Usage);
  bo.device = runtime::parse_device(opts.device);
  if (bo.device != runtime::DeviceKind::Cpu && bo.strict_fp)
    throw Error("strict_fp is CPU-only: a device's math library is not the reference's", Error::Kind::Usage);

  std::unique_ptr<Graph> g;
  try {
    ImportOptions io;
    for (const auto& [name, shape] : opts.input_shapes) io.input_shapes[name] = shape;
    g = import_onnx(onnx_path, io);
    try {
      run_pipeline(*g);
      PipelineOptions po;
      po.strict_fp = opts.strict_fp;
      run_lowering(*g, po);
    } catch (const UserError& e) {
      rethrow_with_context(onnx_path + ": ", e);  // as the CLI's load_model
    }
  } catch (...) {
    rethrow_as_api_error(Phase::Import);
  }
  Model m;
  m.impl_ = std::make_shared<Impl>();
  m.impl_->path = onnx_path;
  m.impl_->build = bo;
  for (Value* v : g->inputs()) m.impl_->inputs.push_back(info_of(v));
  for (Value* v : g->outputs()) m.impl_->outputs.push_back(info_of(v));
  try {
    int kernels = 0;
    std::function<void(const std::string&)> progress;
    if (opts.progress) progress = [&](const std::string& msg) { report_progress(opts, msg, kernels); };
    try {
      m.impl_->exe = runtime::Executable::build(std::move(g), bo, progress);
    } catch (const UserError& e) {
      rethrow_with_context(onnx_path + ": ", e);  // as `kiln run` reports a build error
    }
  } catch (...) {
    rethrow_as_api_error(Phase::Build);
  }
  return m;
}

const std::vector<TensorInfo>& Model::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return impl_->outputs; }
int Model::kernel_count() const { return impl_->exe->plan().kernel_count(); }
int Model::threads() const { return impl_->exe_threads(); }
const std::vector<std::string>& Model::compile_flags() const { return impl_->exe->options().compile.flags; }

int Model::Impl::exe_threads() const {
  return build.threads > 0 ? build.threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<const void*> Model::bind(const std::map<std::string, TensorRef>& inputs) const {
  try {
    try {
      std::map<std::string, TensorType> types;
      for (const auto& [name, ref] : inputs) {
        auto dt = dtype_from_name(ref.dtype);
        if (!dt) user_error("input '", name, "': unknown dtype '", ref.dtype, "'");
        types[name] = TensorType{*dt, ref.shape};
      }
      check_input_types(impl_->exe->graph(), types);
    } catch (const UserError& e) {
      rethrow_with_context(impl_->path + ": ", e);  // `kiln run` names the model the same way
    }
    std::vector<const void*> ptrs;
    for (const TensorInfo& in : impl_->inputs) {
      const TensorRef& ref = inputs.at(in.name);
      if (!ref.data && shape_numel(ref.shape) > 0) user_error(impl_->path, ": input '", in.name, "' has no data");
      ptrs.push_back(ref.data);
    }
    return ptrs;
  } catch (...) {
    rethrow_as_api_error(Phase::Run);
  }
}

std::map<std::string, OutputTensor> Model::run(const std::map<std::string, TensorRef>& inputs) const {
  std::vector<const void*> in = bind(inputs);
  std::map<std::string, OutputTensor> out;
  std::vector<void*> ptrs;
  for (const TensorInfo& o : impl_->outputs) {
    auto dt = dtype_from_name(o.dtype);
    OutputTensor& t = out[o.name];
    t.dtype = o.dtype;
    t.shape = o.shape;
    t.bytes.resize(size_t(shape_numel(o.shape)) * dtype_size(*dt));
    ptrs.push_back(t.bytes.data());
  }
  run_into(in, ptrs);
  return out;
}

void Model::run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) const {
  try {
    for (const void* p : inputs)
      if (!p) throw Error("run_into: null input buffer", Error::Kind::Usage);
    for (void* p : outputs)
      if (!p) throw Error("run_into: null output buffer", Error::Kind::Usage);
    impl_->exe->run_into(inputs, outputs);
  } catch (...) {
    rethrow_as_api_error(Phase::Run);
  }
}

}  // namespace kiln
