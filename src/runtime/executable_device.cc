// Executable on a device (runtime/device.h): the plan's generated kernels as device launches on
// one in-order queue, every intermediate in one device buffer laid out by the same memory plan as
// the host arena, constants and packed weights uploaded once at build time. Per run: the graph's
// inputs are uploaded, the kernels enqueued in plan order, the outputs downloaded. Views are
// device-to-device copies; library kernels (ops with no loop spelling) run the reference kernels
// on the host between a download and an upload, which is why kiln warns about them.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "codegen/cuda/cuda_emitter.h"
#include "codegen/opencl/opencl_emitter.h"
#include "runtime/executable.h"

namespace kiln::runtime {

DeviceKind parse_device(const std::string& s) {
  if (s.empty() || s == "cpu") return DeviceKind::Cpu;
  if (s == "opencl") return DeviceKind::OpenCL;
  if (s == "cuda") return DeviceKind::Cuda;
  user_error("--device must be cpu, opencl or cuda, got '", s, "'");
}

const char* device_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::OpenCL: return "opencl";
    case DeviceKind::Cuda: return "cuda";
  }
  return "?";
}

void Executable::setup_device(const std::vector<loop::LoopKernel>& kernels) {
  const BuildOptions& opts = options_;
  program_ = opts.device == DeviceKind::OpenCL ? codegen::emit_opencl(kernels, opts.emit)
                                               : codegen::emit_cuda(kernels, opts.emit);
  device_kernel_.assign(plan_.groups.size(), -1);
  for (size_t i = 0, n = 0; i < kernels_.size(); ++i)
    if (kernels_[i].generated) device_kernel_[i] = int(n++);
  if (!opts.load_kernels) return;
  device_ = open_device(opts.device);
  device_->build(program_);
  arena_buffer_ = device_->alloc(memory_.arena_bytes);
  scratch_ = {device_->alloc(program_.scratch_bytes()), 0};
  for (const Value* v : graph_->inputs()) io_buffers_.push_back(device_->alloc(value_bytes(v)));
  for (const Value* v : graph_->outputs()) io_buffers_.push_back(device_->alloc(value_bytes(v)));
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    std::vector<DevicePtr> args;
    const FusionGroup& grp = plan_.groups[g];
    for (size_t a = 0; a < grp.inputs.size() + grp.outputs.size(); ++a) args.push_back(device_locate(g, a));
    // A kernel that checks run-time indices takes the status word after its outputs.
    if (!index_checks_[g].empty()) {
      if (status_buffer_ < 0) status_buffer_ = device_->alloc(sizeof(int32_t));
      args.push_back({status_buffer_, 0});
    }
    device_args_.push_back(std::move(args));
  }
}

// Where argument `arg` of group `group` lives on the device; constants (packed or not) are uploaded
// on first use and shared by every kernel that reads them.
DevicePtr Executable::device_locate(size_t group, size_t arg) {
  const FusionGroup& grp = plan_.groups[group];
  const Value* v = arg < grp.inputs.size() ? grp.inputs[arg] : grp.outputs[arg - grp.inputs.size()];
  const void* host = nullptr;
  int64_t bytes = 0;
  bool constant = false;
  if (const std::vector<float>* packed = arg < grp.inputs.size() ? packed_input(group, arg) : nullptr) {
    host = packed->data();
    bytes = int64_t(packed->size() * sizeof(float));
    constant = true;
  } else if (v->is_constant()) {
    host = v->constant().raw();
    bytes = value_bytes(v);
    constant = true;
  }
  if (constant) {
    // An empty constant (the shape [] of a Reshape to a scalar) has no host storage: its key is
    // the null pointer, and it gets one byte (OpenCL refuses buffers of size 0).
    auto it = device_constants_.find(bytes ? host : nullptr);
    if (it != device_constants_.end()) return it->second;
    if (!bytes) host = nullptr;
    DevicePtr p{device_->alloc(std::max<int64_t>(bytes, 1)), 0};
    if (bytes) device_->upload(p, host, bytes);
    device_constants_[host] = p;
    return p;
  }
  if (const TensorSlot* s = memory_.find(v)) return {arena_buffer_, s->offset};
  const auto& ins = graph_->inputs();
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i] == v) return {io_buffers_[i], 0};
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i] == v) return {io_buffers_[ins.size() + i], 0};
  throw InternalError(cat("executable: no device storage for '", v->name(), "'"));
}

void Executable::run_on_device(const Observer& observe) {
  const Graph& g = *graph_;
  Device& dev = *device_;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    if (int64_t n = value_bytes(g.inputs()[i])) dev.upload({io_buffers_[i], 0}, io_[i], n);
  auto staged = [&](const Value* v, DevicePtr p) -> const void* {
    staging_.resize(size_t(std::max<int64_t>(value_bytes(v), 1)));
    if (value_bytes(v)) dev.download(staging_.data(), p, value_bytes(v));
    return staging_.data();
  };
  // Per-kernel times (kiln bench --kernels, roofline): each kernel timed to its completion on the
  // device (launches are asynchronous; the queue is drained after each one, so a profiled run is
  // slower than a plain one by the drains).
  const bool timed = profiling_;
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const FusionGroup& grp = plan_.groups[k];
    const auto& args = device_args_[k];
    if (device_kernel_[k] >= 0) {
      const size_t dk = size_t(device_kernel_[k]);
      const bool checks = !index_checks_[k].empty();
      int32_t status = 0;
      if (checks) dev.upload(args.back(), &status, sizeof status);
      for (size_t l = 0; l < program_.kernels[dk].launches.size(); ++l) dev.launch(dk, l, args, scratch_);
      // As on the CPU: an index out of range stops the run with the reference kernel's error (the
      // read waits for the kernel; only kernels with run-time indices pay for it).
      if (checks) {
        dev.download(&status, args.back(), sizeof status);
        if (status) user_error(loop::index_error_message(index_checks_[k], status));
      }
    } else if (grp.in_place_concat) {
      // Nothing to run: the parts were written into the Concat's slices.
    } else if (!view_copies_[k].empty()) {
      for (auto [o, i] : view_copies_[k]) {
        const int64_t n = value_bytes(grp.outputs[o - grp.inputs.size()]);
        const DevicePtr dst = args[o], src = args[i];
        const bool same_buffer = dst.buffer == src.buffer;
        if (n == 0 || (same_buffer && dst.offset == src.offset)) continue;
        if (same_buffer && dst.offset < src.offset + n && src.offset < dst.offset + n) {
          // Overlapping regions (device copies may not overlap): through the host.
          std::vector<uint8_t> tmp(static_cast<size_t>(n));
          dev.download(tmp.data(), src, n);
          dev.upload(dst, tmp.data(), n);
        } else {
          dev.copy(dst, src, n);
        }
      }
    } else {
      // A library kernel: the reference kernels on host copies of its inputs.
      std::unordered_map<const Value*, Tensor> local;
      for (size_t i = 0; i < grp.inputs.size(); ++i) {
        const Value* v = grp.inputs[i];
        if (v->is_constant()) {
          local[v] = v->constant();
          continue;
        }
        Tensor t(v->dtype(), v->shape());
        if (t.nbytes()) dev.download(t.raw(), args[i], int64_t(t.nbytes()));
        local[v] = t;
      }
      run_group_nodes(grp, local);
      for (size_t i = 0; i < grp.outputs.size(); ++i) {
        const Tensor& t = local.at(grp.outputs[i]);
        if (t.nbytes()) dev.upload(args[grp.inputs.size() + i], t.raw(), int64_t(t.nbytes()));
      }
    }
    if (timed) {
      dev.finish();
      kernel_ms_[k] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (observe)
      for (size_t i = 0; i < grp.outputs.size(); ++i)
        observe(k, grp.outputs[i], staged(grp.outputs[i], args[grp.inputs.size() + i]));
  }
  const size_t ni = g.inputs().size();
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* o = g.outputs()[i];
    // An output that is an input or a constant was copied by run_into and no kernel writes it.
    if (o->is_constant() || o->is_graph_input()) continue;
    if (int64_t n = value_bytes(o)) dev.download(io_[ni + i], {io_buffers_[ni + i], 0}, n);
  }
  dev.finish();
}

}  // namespace kiln::runtime
