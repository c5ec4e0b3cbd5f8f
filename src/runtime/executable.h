// Executable: a compiled model. Owns the (lowered) graph, its fusion plan, the generated kernels
// (one shared object), the memory plan and one arena allocated at build time. Each fusion group
// runs either as a generated kernel or, when code generation does not cover it yet (reductions,
// contractions and opaque ops today), as a library kernel: the reference kernels run op by op on
// the group's inputs. kernels() says which is which and why.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/c/c_emitter.h"
#include "fusion/fusion_plan.h"
#include "loop/schedule.h"
#include "reference/executor.h"
#include "runtime/jit.h"
#include "runtime/device.h"
#include "runtime/memory_plan.h"

namespace kiln::runtime {

struct BuildOptions {
  FusionOptions fusion;
  CompileOptions compile;
  codegen::EmitOptions emit;
  int threads = 0;                  // 0: as many as the machine has
  bool generate_code = true;        // false: every group runs as a library kernel
  bool load_kernels = true;         // false: emit the C source only (kiln compile); run() refuses
  // Loop-nest parameters (tiles, vector width); unset: Schedule::for_target(fusion.target).
  std::optional<loop::Schedule> schedule;
  // Per-kernel schedules (kiln tune's records, docs/tuning.md), keyed by tune::kernel_signature of
  // the group (never by kernel name, which depends on plan order): a planned group found here is
  // lowered under that schedule, every other under the default one. The fusion plan stays the
  // default schedule's (the partitioner is not asked again), so an entry the lowering refuses is
  // not used: the kernel keeps the default and KernelInfo::tuned_refused says why.
  std::map<std::string, loop::Schedule> kernel_schedules;
  // The numerics mode (docs/codegen.md "Numerics contract"), the one switch for it: false (the
  // default) lets contractions and epilogues use fused multiply-adds, reductions sum in lanes and
  // exp/erf use kiln's vectorised approximations, all within the 1e-4 tolerance; true (--strict-fp)
  // keeps the reference executor's exact operations and order, so results are bit-identical to it.
  // Executable::build applies it to `emit`, the -ffp-contract flag in `compile` and the schedule.
  bool strict_fp = false;
  // Where generated kernels run (runtime/device.h): the host (C through cc, the default), or an
  // OpenCL/CUDA device with the same kernels in its language; library kernels and views run on
  // the host on copies (named by kiln's library-kernel warning) in every case.
  DeviceKind device = DeviceKind::Cpu;
};

// `o` with its numerics mode applied to the emitter options and the C compiler flags (what
// Executable::build compiles with, and what an AOT bundle's Makefile must use).
BuildOptions with_numerics(BuildOptions o);

struct KernelInfo {
  std::string name;
  bool generated = false;
  std::string reason;  // why it runs as a library kernel
  size_t group = 0;    // index into plan().groups
  std::string signature;      // tune::kernel_signature of the group (generated kernels)
  bool tuned = false;         // built under its BuildOptions::kernel_schedules entry
  std::string tuned_refused;  // why that entry was not used (the default schedule was), else ""
};

// The tensor a view group's output copies: the group's view ops followed back to their data
// input (a view moves no data in row-major order, so running it is one memmove).
const Value* view_source(const FusionGroup& grp, const Value* out);

class Executable {
 public:
  // `g` must be simplified and lowered (what partition() expects). `progress` (optional) is called
  // with a message for long steps (the C compiler).
  static std::unique_ptr<Executable> build(std::unique_ptr<Graph> g, const BuildOptions& opts = {},
                                           const std::function<void(const std::string&)>& progress = {});

  // Called after each kernel with every tensor it wrote (for --check).
  using Observer = std::function<void(size_t kernel, const Value* v, const void* data)>;

  // Runs the model. Inputs by name must match the graph's types (UserError otherwise). Allocates
  // the output tensors, then calls run_into.
  TensorMap run(const TensorMap& inputs, const Observer& observe = {});

  // Runs the model on caller-owned buffers: `inputs` in graph().inputs() order, `outputs` in
  // graph().outputs() order, each dense with the value's type and shape (not checked here). The
  // generated-kernel path allocates nothing: kernel argument arrays are resolved at build time
  // and intermediates live in the arena. Library kernels (the reference fallback) do allocate.
  void run_into(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                const Observer& observe = {});

  // Per-kernel wall times of the last run, in plan order (ms), when profiling is on (also on with
  // the environment variable KILN_PROFILE, which prints them to stderr).
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<double>& kernel_times_ms() const { return kernel_ms_; }

  const Graph& graph() const { return *graph_; }
  const FusionPlan& plan() const { return plan_; }
  const MemoryPlan& memory() const { return memory_; }
  const std::vector<KernelInfo>& kernels() const { return kernels_; }
  // Kernel `group`'s input `input` in the panel layout its kernel reads (loop::PackedInput),
  // packed at build time; nullptr when the kernel reads that input as the graph stores it.
  const std::vector<float>* packed_input(size_t group, size_t input) const;
  // The options the build used, numerics applied (with_numerics).
  const BuildOptions& options() const { return options_; }
  const std::string& source() const { return source_; }  // the generated C ("" when none)
  // The nodes whose run-time indices group `group`'s kernel checks (empty: none, or no kernel).
  const std::vector<loop::IndexCheck>& index_checks(size_t group) const { return index_checks_.at(group); }
  const JitModule* module() const { return module_.get(); }
  // The device program (OpenCL C / CUDA C and its launches) when options().device is not Cpu.
  const codegen::DeviceProgram* device_program() const {
    return options_.device != DeviceKind::Cpu ? &program_ : nullptr;
  }
  const Device* device() const { return device_.get(); }

 private:
  // Where each kernel argument lives: a fixed address (arena, constant) or slot `io` of the
  // caller's input/output pointers (resolved on each run).
  struct ArgRef {
    void* fixed = nullptr;
    int io = -1;
  };
  ArgRef locate(const Value* v);
  void* address(const ArgRef& r, void* const* io) const { return r.io >= 0 ? io[r.io] : r.fixed; }
  void run_library_kernel(size_t k, void* const* io, const Observer& observe);
  // A library kernel's nodes on host tensors (the reference kernels, in plan order): `local` holds
  // the group's inputs and receives every value the nodes compute. The CPU and device paths share it.
  static void run_group_nodes(const FusionGroup& grp, std::unordered_map<const Value*, Tensor>& local);
  // Per view group: (output, the input it copies) as argument slots of arg_refs_.
  std::vector<std::vector<std::pair<size_t, size_t>>> view_copies_;

  std::unique_ptr<Graph> graph_;
  FusionPlan plan_;
  MemoryPlan memory_;
  BuildOptions options_;
  std::vector<std::map<size_t, std::vector<float>>> packed_;  // per group: input index -> packed weights
  std::vector<KernelInfo> kernels_;
  std::vector<KernelFn> fns_;  // per group (nullptr: library kernel)
  std::string source_;
  std::unique_ptr<JitModule> module_;
  std::vector<uint8_t> arena_;
  int threads_ = 0;
  std::vector<std::vector<ArgRef>> arg_refs_;  // per group: inputs, outputs, then the status word if any
  // Per group: the nodes whose run-time indices its kernel checks (loop::LoopKernel::index_checks);
  // such a kernel's last argument is index_status_, cleared before and read after each call.
  std::vector<std::vector<loop::IndexCheck>> index_checks_;
  int32_t index_status_ = 0;
  std::vector<void*> io_, args_;               // scratch reused by run_into (no allocation)
  bool profiling_ = false;
  bool loaded_ = true;
  std::vector<double> kernel_ms_;

  // Device execution (executable_device.cc): buffers for the graph's inputs/outputs, the arena,
  // constants and packed weights (uploaded once), the program's scratch; per group its
  // arguments and its kernel in program_ (-1: runs on the host).
  void setup_device(const std::vector<loop::LoopKernel>& kernels);
  void run_on_device(const Observer& observe);
  DevicePtr device_locate(size_t group, size_t arg);
  std::unique_ptr<Device> device_;
  codegen::DeviceProgram program_;
  std::vector<int> device_kernel_;
  std::vector<std::vector<DevicePtr>> device_args_;
  std::vector<int> io_buffers_;
  std::map<const void*, DevicePtr> device_constants_;
  int arena_buffer_ = -1;
  int status_buffer_ = -1;  // the index checks' status word on the device, when a kernel has checks
  DevicePtr scratch_;
  std::vector<uint8_t> staging_;  // host copies for library kernels and the observer
};

}  // namespace kiln::runtime
