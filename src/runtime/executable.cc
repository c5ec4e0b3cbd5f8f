#include "runtime/executable.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <unordered_map>

#include "fusion/partitioner.h"
#include "loop/lower_group.h"

namespace kiln::runtime {

std::unique_ptr<Executable> Executable::build(std::unique_ptr<Graph> g, const BuildOptions& opts,
                                              const std::function<void(const std::string&)>& progress) {
  auto ex = std::unique_ptr<Executable>(new Executable());
  ex->graph_ = std::move(g);
  ex->plan_ = partition(*ex->graph_, opts.fusion);
  // The kernel order decides which tensors are live together: pick one that frees memory early.
  order_for_memory(*ex->graph_, ex->plan_);
  ex->memory_ = plan_memory(*ex->graph_, ex->plan_);
  ex->arena_.assign(size_t(ex->memory_.arena_bytes), 0);
  ex->threads_ = opts.threads > 0 ? opts.threads : int(std::max(1u, std::thread::hardware_concurrency()));

  std::vector<loop::LoopKernel> kernels;
  for (size_t i = 0; i < ex->plan_.groups.size(); ++i) {
    const FusionGroup& grp = ex->plan_.groups[i];
    KernelInfo info;
    info.group = i;
    info.name = loop::sanitize_identifier(grp.name);
    if (!grp.counts_as_kernel()) {
      info.reason = "view: copies its input";
    } else if (!opts.generate_code) {
      info.reason = "code generation disabled";
    } else {
      loop::LoweredGroup lg = loop::lower_group(grp, info.name);
      if (lg.kernel) {
        info.generated = true;
        kernels.push_back(std::move(*lg.kernel));
      } else {
        info.reason = lg.reason;
      }
    }
    ex->kernels_.push_back(std::move(info));
  }
  ex->fns_.assign(ex->plan_.groups.size(), nullptr);
  if (!kernels.empty()) {
    ex->source_ = codegen::emit_c(kernels, opts.emit);
    if (progress) progress("compiling " + std::to_string(kernels.size()) + " kernels with " + opts.compile.compiler);
    ex->module_ = JitModule::build(ex->source_, opts.compile);
    for (size_t i = 0; i < ex->kernels_.size(); ++i)
      if (ex->kernels_[i].generated) ex->fns_[i] = ex->module_->get(ex->kernels_[i].name);
    auto set_threads = reinterpret_cast<void (*)(int)>(ex->module_->get("kiln_set_num_threads"));
    set_threads(ex->threads_);
  }
  return ex;
}

// Where a tensor lives during run(): constants in the graph, graph inputs/outputs in the caller's
// tensors (io, indexed by value), intermediates in the arena.
void* Executable::address_of(const Value* v, const std::vector<void*>& io) const {
  if (v->is_constant()) return const_cast<void*>(v->constant().raw());
  if (const TensorSlot* s = memory_.find(v)) return const_cast<uint8_t*>(arena_.data()) + s->offset;
  const auto& ins = graph_->inputs();
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i] == v) return io[i];
  const auto& outs = graph_->outputs();
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i] == v) return io[ins.size() + i];
  throw InternalError(cat("executable: no storage for '", v->name(), "'"));
}

TensorMap Executable::run(const TensorMap& inputs, const Observer& observe) {
  const Graph& g = *graph_;
  std::vector<void*> io;
  for (const Tensor* t : check_inputs(g, inputs)) io.push_back(const_cast<void*>(t->raw()));
  TensorMap result;
  std::vector<Tensor> outs;
  for (Value* o : g.outputs()) {
    outs.emplace_back(o->dtype(), o->shape());
    io.push_back(outs.back().raw());
  }
  // A graph output that is also an input or a constant is never written by a kernel.
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* o = g.outputs()[i];
    if (o->is_constant() || o->is_graph_input()) {
      const void* src = o->is_constant() ? o->constant().raw() : inputs.at(o->name()).raw();
      std::memcpy(outs[i].raw(), src, outs[i].nbytes());
    }
  }

  std::vector<void*> args;
  static const bool profile = std::getenv("KILN_PROFILE") != nullptr;  // per-kernel times to stderr
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    const FusionGroup& grp = plan_.groups[k];
    auto t0 = std::chrono::steady_clock::now();
    struct Report {
      bool on;
      size_t k;
      std::chrono::steady_clock::time_point t0;
      const std::vector<KernelInfo>& info;
      ~Report() {
        if (on)
          std::fprintf(stderr, "kiln profile: %-40s %s %9.3f ms\n", info[k].name.c_str(),
                       info[k].generated ? "gen" : "lib",
                       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    } report{profile, k, t0, kernels_};
    if (fns_[k]) {
      args.clear();
      for (const Value* v : grp.inputs) args.push_back(address_of(v, io));
      for (const Value* v : grp.outputs) args.push_back(address_of(v, io));
      fns_[k](args.data());
      if (observe)
        for (const Value* v : grp.outputs) observe(k, v, address_of(v, io));
      continue;
    }
    // Library kernel: the reference kernels, op by op, on copies of the group's inputs.
    std::unordered_map<const Value*, Tensor> local;
    for (const Value* v : grp.inputs) {
      if (v->is_constant()) {
        local[v] = v->constant();
        continue;
      }
      Tensor t(v->dtype(), v->shape());
      std::memcpy(t.raw(), address_of(v, io), t.nbytes());
      local[v] = t;
    }
    for (const Node* n : grp.nodes) {
      std::vector<Tensor> a;
      for (const Value* v : n->inputs()) a.push_back(v ? local.at(v) : Tensor{});
      auto r = run_node(*n, a);
      for (size_t i = 0; i < r.size(); ++i) local[n->output(i)] = r[i];
    }
    for (const Value* v : grp.outputs) {
      std::memcpy(address_of(v, io), local.at(v).raw(), local.at(v).nbytes());
      if (observe) observe(k, v, address_of(v, io));
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) result[g.outputs()[i]->name()] = outs[i];
  return result;
}

}  // namespace kiln::runtime
