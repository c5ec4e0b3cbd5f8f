// The reports of a compiled kiln::Model (include/kiln/model.h): each is what the matching CLI
// command prints or writes for the same model and options, computed the same way:
//   explain_json   `kiln explain --json`   (tools/kiln/cmd_explain.cc)
//   roofline_json  `kiln roofline --json`  (tools/kiln/cmd_roofline.cc)
//   save_bundle    `kiln compile -o DIR`   (tools/kiln/cmd_compile.cc)
#include <algorithm>

#include "analysis/kernel_timing.h"
#include "analysis/machine_probe.h"
#include "analysis/roofline.h"
#include "api/model_impl.h"
#include "fusion/explain.h"
#include "fusion/partitioner.h"
#include "runtime/aot_bundle.h"
#include "runtime/memory_plan.h"
#include "support/error.h"

namespace kiln {

std::string Model::explain_json() const {
  try {
    // As cmd_explain: the partition of the lowered graph in the model's numerics mode, with the
    // memory figures of the plan ordered for memory (the order the Executable runs).
    const Graph& g = impl_->exe->graph();
    FusionOptions fo = impl_->build.fusion;
    const bool strict = impl_->build.strict_fp;
    if (strict) {  // the plan under the strict schedule, as `kiln explain --strict-fp`
      fo.schedule = fo.schedule_or_default();
      fo.schedule->set_strict_numerics();
    }
    FusionPlan plan = partition(g, fo);
    FusionPlan ordered = plan;
    runtime::order_for_memory(g, ordered);
    runtime::MemoryPlan mp = runtime::plan_memory(g, ordered);
    return kiln::explain_json(g, plan, ExplainExtras{mp.arena_bytes, mp.naive_bytes, strict});
  } catch (...) {
    rethrow_as_api_error(Phase::Report);
  }
}

namespace {

analysis::RooflineReport measure(runtime::Executable& ex, const TensorMap& inputs, const RooflineOptions& o,
                                 const analysis::Roof& roof, const char* label) {
  analysis::TimedRuns t = analysis::time_runs(ex, inputs, o.runs, o.warmup, /*per_kernel=*/true);
  analysis::RooflineReport r = analysis::roofline(ex, t.kernel_medians(), roof, label);
  r.model_ms = analysis::median(t.run_ms);
  r.runs = o.runs;
  r.undisturbed_runs = t.undisturbed_runs;
  return r;
}

}  // namespace

std::string Model::roofline_json(const RooflineOptions& o) const {
  if (o.runs < 1 || o.warmup < 0) throw Error("roofline: runs must be >= 1 and warmup >= 0", Error::Kind::Usage);
  try {
    runtime::Executable& ex = *impl_->exe;
    TensorMap inputs = analysis::fill_inputs(ex.graph(), {});
    const int threads = impl_->exe_threads();
    analysis::ProbeOptions po;
    po.threads = threads;
    const analysis::MachineModel m = analysis::machine_model(false, po);  // cached after the first probe
    const analysis::Roof roof = analysis::roof_for(m, threads);
    analysis::RooflineReport fused = measure(ex, inputs, o, roof, "fused");
    if (!o.compare_unfused) return analysis::roofline_json(fused, nullptr, m);
    runtime::BuildOptions nb = impl_->build;
    nb.threads = threads;
    nb.fusion.enabled = false;
    std::unique_ptr<runtime::Executable> unfused_ex;
    try {
      unfused_ex = runtime::Executable::build(ex.graph().clone(), nb);
    } catch (...) {
      rethrow_as_api_error(Phase::Build);
    }
    analysis::RooflineReport unfused = measure(*unfused_ex, inputs, o, roof, "unfused");
    return analysis::roofline_json(fused, &unfused, m);
  } catch (...) {
    rethrow_as_api_error(Phase::Report);
  }
}

void Model::save_bundle(const std::string& dir) const {
  runtime::AotBundle bundle;
  try {
    runtime::check_aot_destination(dir);
  } catch (...) {
    rethrow_as_api_error(Phase::Report);  // a bad destination: a Usage error, nothing written
  }
  try {
    runtime::AotOptions ao;
    ao.model_path = impl_->path;
    ao.threads = impl_->build.threads;
    // The Makefile compiles with the JIT's flags in the build's numerics mode (as cmd_compile).
    ao.compile = impl_->exe->options().compile;
    ao.emit = impl_->exe->options().emit;
    try {
      bundle = runtime::make_aot_bundle(*impl_->exe, ao);
    } catch (const UserError& e) {
      rethrow_with_context(impl_->path + ": ", e);  // as cmd_compile
    }
  } catch (...) {
    rethrow_as_api_error(Phase::Build);  // a kernel with no C form (a library kernel)
  }
  try {
    runtime::write_aot_bundle(bundle, dir);
  } catch (...) {
    rethrow_as_api_error(Phase::Report);
  }
}

}  // namespace kiln
