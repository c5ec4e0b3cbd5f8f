// Executable: a compiled model. Owns the (lowered) graph, its fusion plan, the generated kernels
// (one shared object), the memory plan and one arena allocated at build time. Each fusion group
// runs either as a generated kernel or, when code generation does not cover it yet (reductions,
// contractions and opaque ops today), as a library kernel: the reference kernels run op by op on
// the group's inputs. kernels() says which is which and why.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "codegen/c/c_emitter.h"
#include "fusion/fusion_plan.h"
#include "reference/executor.h"
#include "runtime/jit.h"
#include "runtime/memory_plan.h"

namespace kiln::runtime {

struct BuildOptions {
  FusionOptions fusion;
  CompileOptions compile;
  codegen::EmitOptions emit;
  int threads = 0;                  // 0: as many as the machine has
  bool generate_code = true;        // false: every group runs as a library kernel
};

struct KernelInfo {
  std::string name;
  bool generated = false;
  std::string reason;  // why it runs as a library kernel
  size_t group = 0;    // index into plan().groups
};

class Executable {
 public:
  // `g` must be simplified and lowered (what partition() expects). `progress` (optional) is called
  // with a message for long steps (the C compiler).
  static std::unique_ptr<Executable> build(std::unique_ptr<Graph> g, const BuildOptions& opts = {},
                                           const std::function<void(const std::string&)>& progress = {});

  // Called after each kernel with every tensor it wrote (for --check).
  using Observer = std::function<void(size_t kernel, const Value* v, const void* data)>;

  // Runs the model. Inputs by name must match the graph's types (UserError otherwise).
  TensorMap run(const TensorMap& inputs, const Observer& observe = {});

  const Graph& graph() const { return *graph_; }
  const FusionPlan& plan() const { return plan_; }
  const MemoryPlan& memory() const { return memory_; }
  const std::vector<KernelInfo>& kernels() const { return kernels_; }
  const std::string& source() const { return source_; }  // the generated C ("" when none)
  const JitModule* module() const { return module_.get(); }

 private:
  void* address_of(const Value* v, const std::vector<void*>& io) const;

  std::unique_ptr<Graph> graph_;
  FusionPlan plan_;
  MemoryPlan memory_;
  std::vector<KernelInfo> kernels_;
  std::vector<KernelFn> fns_;  // per group (nullptr: library kernel)
  std::string source_;
  std::unique_ptr<JitModule> module_;
  std::vector<uint8_t> arena_;
  int threads_ = 0;
};

}  // namespace kiln::runtime
