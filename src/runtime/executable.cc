#include "runtime/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include "fusion/assign_layouts.h"
#include "fusion/partitioner.h"
#include "loop/loop_transforms.h"
#include "loop/lower_group.h"
#include "tune/kernel_signature.h"

namespace kiln::runtime {

const Value* view_source(const FusionGroup& grp, const Value* out) {
  const Value* v = out;
  while (v->producer() && std::count(grp.nodes.begin(), grp.nodes.end(), v->producer())) {
    // Only a view's data output copies its input (a Dropout's mask written as a graph output
    // does not).
    if (v != v->producer()->output(0)) return nullptr;
    v = v->producer()->input(0);
  }
  return v != out && value_bytes(v) == value_bytes(out) ? v : nullptr;
}

BuildOptions with_numerics(BuildOptions o) {
  o.emit.strict_fp = o.strict_fp;
  const std::string contract = o.strict_fp ? "-ffp-contract=off" : "-ffp-contract=fast";
  bool found = false;
  for (auto& f : o.compile.flags)
    if (f.rfind("-ffp-contract=", 0) == 0) {
      f = contract;
      found = true;
    }
  if (!found) o.compile.flags.push_back(contract);
  return o;
}

std::unique_ptr<Executable> Executable::build(std::unique_ptr<Graph> g, const BuildOptions& opts_in,
                                              const std::function<void(const std::string&)>& progress) {
  auto ex = std::unique_ptr<Executable>(new Executable());
  ex->graph_ = std::move(g);
  ex->options_ = with_numerics(opts_in);
  const BuildOptions& opts = ex->options_;
  loop::Schedule sched = opts.schedule ? *opts.schedule : loop::Schedule::for_target(opts.fusion.target);
  // Strict numerics: every float sum in the reference's order (one running sum per row).
  if (opts.strict_fp) sched.set_strict_numerics();
  // The partitioner asks the lowering under the schedule the kernels will be built with.
  FusionOptions fusion = opts.fusion;
  fusion.schedule = sched;
  // Values between convs channels-last where the next conv reads them in place; only fused
  // kernels hold the layout's Transposes and Pads (and only the C emitter is measured with it).
  if (fusion.enabled && opts.device == DeviceKind::Cpu) assign_layouts(*ex->graph_, sched);
  ex->plan_ = partition(*ex->graph_, fusion);
  // The kernel order decides which tensors are live together: pick one that frees memory early.
  order_for_memory(*ex->graph_, ex->plan_);
  ex->memory_ = plan_memory(*ex->graph_, ex->plan_);
  ex->arena_.assign(size_t(ex->memory_.arena_bytes), 0);
  ex->threads_ = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  std::vector<loop::LoopKernel> kernels;
  ex->packed_.resize(ex->plan_.groups.size());
  ex->index_checks_.resize(ex->plan_.groups.size());
  for (size_t i = 0; i < ex->plan_.groups.size(); ++i) {
    const FusionGroup& grp = ex->plan_.groups[i];
    if (progress) progress("lowering kernel " + std::to_string(i + 1) + "/" + std::to_string(ex->plan_.groups.size()));
    KernelInfo info;
    info.group = i;
    info.name = loop::sanitize_identifier(grp.name);
    if (grp.in_place_concat) {
      info.reason = "in place: its parts' producers write its slices";
    } else if (!grp.counts_as_kernel()) {
      info.reason = "view: a memmove of its input";
    } else if (grp.is_library()) {
      info.reason = "library kernel: " + grp.library_reason;
    } else if (!opts.generate_code) {
      info.reason = "code generation disabled";
    } else {
      // A tuned schedule for this kernel, when one is given: tried first; the plan was made under
      // `sched`, so a tuned schedule may be refused, and then the default builds the kernel.
      loop::LoweredGroup lg;
      const loop::Schedule* used = &sched;
      loop::Schedule tuned;
      if (!opts.kernel_schedules.empty()) {
        info.signature = tune::kernel_signature(grp);
        if (auto it = opts.kernel_schedules.find(info.signature); it != opts.kernel_schedules.end()) {
          tuned = it->second;
          if (opts.strict_fp) tuned.set_strict_numerics();
          lg = loop::lower_group(grp, info.name, tuned);
          if (lg.kernel) {
            info.tuned = true;
            used = &tuned;
          } else {
            info.tuned_refused = lg.reason.empty() ? "the lowering refuses it" : lg.reason;
          }
        }
      }
      // The partitioner's analysis accepted this group under `sched`: its lowering cannot refuse.
      if (!info.tuned) lg = loop::lower_group(grp, info.name, sched);
      KILN_CHECK(lg.kernel, "kernel ", info.name, " was planned as generated code, but its lowering refuses: ",
                 lg.reason);
      if (used->default_transforms) loop::apply_default_schedule(*lg.kernel, *used);
      // Weights the kernel reads in the micro-kernel's panel layout: packed once, here.
      for (const loop::PackedInput& p : lg.kernel->packed_inputs) {
        auto source = [&](size_t input) {
          const Value* v = grp.inputs.at(input);
          KILN_CHECK(v->is_constant() && v->dtype() == DType::Float32, "kernel ", info.name, " packs '", v->name(),
                     "', which is not a float32 constant");
          return v->constant().data<float>();
        };
        ex->packed_[i][p.input] = loop::pack_argument(p, source);
      }
      info.generated = true;
      ex->index_checks_[i] = lg.kernel->index_checks;
      kernels.push_back(std::move(*lg.kernel));
    }
    ex->kernels_.push_back(std::move(info));
  }
  ex->fns_.assign(ex->plan_.groups.size(), nullptr);
  ex->loaded_ = opts.load_kernels;
  if (opts.device != DeviceKind::Cpu) {
    if (progress) progress("building " + std::to_string(kernels.size()) + " kernels for " + device_name(opts.device));
    ex->setup_device(kernels);
    ex->source_ = ex->program_.source;
  }
  if (!kernels.empty() && opts.device == DeviceKind::Cpu) ex->source_ = codegen::emit_c(kernels, opts.emit);
  if (!kernels.empty() && opts.load_kernels && opts.device == DeviceKind::Cpu) {
    if (progress) progress("compiling " + std::to_string(kernels.size()) + " kernels with " + opts.compile.compiler);
    ex->module_ = JitModule::build(ex->source_, opts.compile);
    for (size_t i = 0; i < ex->kernels_.size(); ++i)
      if (ex->kernels_[i].generated) ex->fns_[i] = ex->module_->get(ex->kernels_[i].name);
    auto set_threads = reinterpret_cast<void (*)(int)>(ex->module_->get("kiln_set_num_threads"));
    set_threads(ex->threads_);
  }
  size_t max_args = 0;
  for (size_t gi = 0; gi < ex->plan_.groups.size(); ++gi) {
    const FusionGroup& grp = ex->plan_.groups[gi];
    std::vector<ArgRef> refs;
    for (size_t i = 0; i < grp.inputs.size(); ++i) {
      const std::vector<float>* packed = ex->packed_input(gi, i);
      refs.push_back(packed ? ArgRef{const_cast<float*>(packed->data()), -1} : ex->locate(grp.inputs[i]));
    }
    for (const Value* v : grp.outputs) refs.push_back(ex->locate(v));
    if (!ex->index_checks_[gi].empty()) refs.push_back(ArgRef{&ex->index_status_, -1});
    max_args = std::max(max_args, refs.size());
    ex->arg_refs_.push_back(std::move(refs));
    std::vector<std::pair<size_t, size_t>> copies;
    bool copies_only = !grp.counts_as_kernel() && !grp.in_place_concat;
    for (size_t o = 0; copies_only && o < grp.outputs.size(); ++o) {
      const Value* src = view_source(grp, grp.outputs[o]);
      size_t i = size_t(std::find(grp.inputs.begin(), grp.inputs.end(), src) - grp.inputs.begin());
      copies_only = src && i < grp.inputs.size();
      copies.push_back({grp.inputs.size() + o, i});
    }
    // A view group that writes something other than a copy (a Dropout mask) runs its reference
    // kernels, like a library kernel.
    if (!copies_only) copies.clear();
    ex->view_copies_.push_back(std::move(copies));
  }
  ex->args_.assign(max_args, nullptr);
  ex->io_.assign(ex->graph_->inputs().size() + ex->graph_->outputs().size(), nullptr);
  ex->kernel_ms_.assign(ex->plan_.groups.size(), 0.0);
  return ex;
}

const std::vector<float>* Executable::packed_input(size_t group, size_t input) const {
  if (group >= packed_.size()) return nullptr;
  auto it = packed_[group].find(input);
  return it == packed_[group].end() ? nullptr : &it->second;
}

// Where a tensor lives during run(): constants in the graph, intermediates in the arena (both
// fixed at build time), graph inputs/outputs in the caller's buffers (slot in `io`).
Executable::ArgRef Executable::locate(const Value* v) {
  if (v->is_constant()) return {const_cast<void*>(v->constant().raw()), -1};
  if (const TensorSlot* s = memory_.find(v)) return {arena_.data() + s->offset, -1};
  const auto& ins = graph_->inputs();
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i] == v) return {nullptr, int(i)};
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i] == v) return {nullptr, int(ins.size() + i)};
  throw InternalError(cat("executable: no storage for '", v->name(), "'"));
}

TensorMap Executable::run(const TensorMap& inputs, const Observer& observe) {
  const Graph& g = *graph_;
  std::vector<const void*> in;
  for (const Tensor* t : check_inputs(g, inputs)) in.push_back(t->raw());
  std::vector<Tensor> outs;
  std::vector<void*> out;
  for (Value* o : g.outputs()) {
    outs.emplace_back(o->dtype(), o->shape());
    out.push_back(outs.back().raw());
  }
  run_into(in, out, observe);
  TensorMap result;
  for (size_t i = 0; i < g.outputs().size(); ++i) result[g.outputs()[i]->name()] = outs[i];
  return result;
}

void Executable::run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                          const Observer& observe) {
  const Graph& g = *graph_;
  if (!loaded_) user_error("this executable was built without loading its kernels (BuildOptions::load_kernels)");
  if (inputs.size() != g.inputs().size() || outputs.size() != g.outputs().size())
    user_error("run: expected ", g.inputs().size(), " inputs and ", g.outputs().size(), " outputs, got ",
               inputs.size(), " and ", outputs.size());
  size_t n = 0;
  for (const void* p : inputs) io_[n++] = const_cast<void*>(p);
  for (void* p : outputs) io_[n++] = p;
  // A graph output that is also an input or a constant is never written by a kernel.
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* o = g.outputs()[i];
    if (const size_t n = size_t(shape_numel(o->shape())) * dtype_size(o->dtype());
        n && (o->is_constant() || o->is_graph_input()))  // n == 0: the pointers may be null (UB in memcpy)
      std::memcpy(outputs[i], address(locate(o), io_.data()), n);
  }
  if (device_) {
    run_on_device(observe);
    return;
  }
  static const bool env_profile = std::getenv("KILN_PROFILE") != nullptr;  // per-kernel times to stderr
  const bool timed = profiling_ || env_profile;
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const auto& refs = arg_refs_[k];
    if (fns_[k]) {
      for (size_t i = 0; i < refs.size(); ++i) args_[i] = address(refs[i], io_.data());
      const bool checks = !index_checks_[k].empty();  // one test per kernel; none in the kernels without checks
      if (checks) index_status_ = 0;
      fns_[k](args_.data());
      // An index out of range stops the run, as the reference kernel's error does; run() then
      // returns nothing (kiln run writes no output).
      if (checks && index_status_) user_error(loop::index_error_message(index_checks_[k], index_status_));
      if (observe) {
        const FusionGroup& grp = plan_.groups[k];
        for (size_t i = 0; i < grp.outputs.size(); ++i)
          observe(k, grp.outputs[i], args_[grp.inputs.size() + i]);
      }
    } else if (plan_.groups[k].in_place_concat) {
      // Nothing to run: the parts were written into the Concat's slices.
      if (observe && !plan_.groups[k].outputs.empty())
        observe(k, plan_.groups[k].outputs[0], address(refs[plan_.groups[k].inputs.size()], io_.data()));
    } else if (!view_copies_[k].empty()) {
      // A view: memmove (the memory plan may give its output its input's place).
      const FusionGroup& grp = plan_.groups[k];
      for (auto [o, i] : view_copies_[k]) {
        void* dst = address(refs[o], io_.data());
        // An empty tensor may have no storage (a null pointer, which memmove must not get).
        if (const int64_t n = value_bytes(grp.outputs[o - grp.inputs.size()]))
          std::memmove(dst, address(refs[i], io_.data()), size_t(n));
        if (observe) observe(k, grp.outputs[o - grp.inputs.size()], dst);
      }
    } else {
      run_library_kernel(k, io_.data(), observe);
    }
    if (timed) {
      kernel_ms_[k] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (env_profile)
        std::fprintf(stderr, "kiln profile: %-40s %s %9.3f ms\n", kernels_[k].name.c_str(),
                     kernels_[k].generated                   ? "gen"
                     : plan_.groups[k].in_place_concat       ? "in-place"
                     : !plan_.groups[k].counts_as_kernel()   ? "view"
                                                             : "lib",
                     kernel_ms_[k]);
    }
  }
}

// Library kernel: the reference kernels, op by op, on copies of the group's inputs.
void Executable::run_group_nodes(const FusionGroup& grp, std::unordered_map<const Value*, Tensor>& local) {
  for (const Node* n : grp.nodes) {
    std::vector<Tensor> a;
    for (const Value* v : n->inputs()) a.push_back(v ? local.at(v) : Tensor{});
    auto r = run_node(*n, a);
    for (size_t i = 0; i < r.size(); ++i) local[n->output(i)] = r[i];
  }
}

void Executable::run_library_kernel(size_t k, void* const* io, const Observer& observe) {
  const FusionGroup& grp = plan_.groups[k];
  const auto& refs = arg_refs_[k];
  std::unordered_map<const Value*, Tensor> local;
  for (size_t i = 0; i < grp.inputs.size(); ++i) {
    const Value* v = grp.inputs[i];
    if (v->is_constant()) {
      local[v] = v->constant();
      continue;
    }
    Tensor t(v->dtype(), v->shape());
    if (t.nbytes()) std::memcpy(t.raw(), address(refs[i], io), t.nbytes());  // empty: pointers may be null
    local[v] = t;
  }
  run_group_nodes(grp, local);
  for (size_t i = 0; i < grp.outputs.size(); ++i) {
    const Value* v = grp.outputs[i];
    void* dst = address(refs[grp.inputs.size() + i], io);
    if (local.at(v).nbytes()) std::memcpy(dst, local.at(v).raw(), local.at(v).nbytes());
    if (observe) observe(k, v, dst);
  }
}

}  // namespace kiln::runtime
