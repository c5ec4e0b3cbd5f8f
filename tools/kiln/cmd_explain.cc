// kiln explain: the fusion plan of a model — kernels, their ops and costs, and every refused fusion.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "cli.h"
#include "analysis/native_target.h"
#include "analysis/roofline.h"
#include "fusion/cost_model.h"
#include "fusion/explain.h"
#include "fusion/assign_layouts.h"
#include "fusion/partitioner.h"
#include "runtime/memory_plan.h"
#include "tune/cost_calibration.h"
#include "tune/kernel_signature.h"
#include "tune/schedule_fields.h"

namespace kiln::cli {

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".kiln-tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) user_error(path, ": cannot write file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) user_error(path, ": cannot write file");
}

}  // namespace

namespace {
Target calibrated_native_target(const Args& a, const analysis::MachineModel& m) {
  Target t = analysis::native_target(m);
  // The calibration of the thread count the command runs with (--threads, else every CPU the
  // probe used); uncalibrated (the plain roofline) when kiln calibrate has not measured it.
  if (a.threads() > 0) {
    t.threads = a.threads();
    const analysis::Roof roof = analysis::roof_for(m, t.threads);  // the roof the factors were fitted on
    t.peak_gflops = roof.peak_gflops;
    t.dram_gbps = roof.dram_gbps;
  }
  std::vector<std::string> warnings;
  t.efficiency = tune::load_calibration(t.threads, nullptr, &warnings);
  for (const auto& w : warnings) std::cerr << "kiln: warning: " << w << "\n";
  return t;
}
}  // namespace

FusionOptions fusion_options(const Args& a) {
  FusionOptions o;
  if (a.get("target") == "native") {
    o.target = calibrated_native_target(a, analysis::machine_model());
  } else if (a.has("target")) {
    auto t = Target::by_name(a.get("target"));
    if (!t) {
      std::string names;
      for (const auto& n : Target::names()) names += (names.empty() ? "" : ", ") + n;
      names += ", native (the probed machine)";
      user_error("unknown --target '", a.get("target"), "' (known: ", names, ")");
    }
    o.target = *t;
  }
  o.enabled = !a.has("no-fusion");
  o.fuel = a.get_int("fusion-fuel", -1);
  return o;
}

int cmd_explain(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"dot", "svg", "target", "fusion-fuel", "records", "threads"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "no-fusion", "strict-fp", "no-records"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("explain expects one MODEL.onnx");
  FusionOptions fo = fusion_options(a);
  // The plan an Executable builds in this numerics mode (its schedule decides what lowers).
  if (a.has("strict-fp")) {
    fo.schedule = fo.schedule_or_default();
    fo.schedule->set_strict_numerics();
  }
  // The plan kiln run/bench/compile build: with kiln tune's kept-apart fusions of this machine and
  // --threads (their refusals name the records), unless --no-records.
  {
    runtime::BuildOptions bo;
    bo.fusion = fo;
    bo.threads = a.threads();
    use_tuned_records(a, bo);
    fo.keep_apart = bo.fusion.keep_apart;
  }
  auto g = load_model(a.positional()[0], a, pipeline_options(a), /*lower=*/true);
  // As Executable::build does before it partitions.
  if (fo.enabled) assign_layouts(*g, fo.schedule_or_default());
  FusionPlan plan = partition(*g, fo);
  FusionPlan ordered = plan;
  runtime::order_for_memory(*g, ordered);
  runtime::MemoryPlan mp = runtime::plan_memory(*g, ordered);
  ExplainExtras extras{mp.arena_bytes, mp.naive_bytes, a.has("strict-fp")};
  std::cout << (a.has("json") ? explain_json(*g, plan, extras) : explain_text(*g, plan, extras));
  // The same plan's estimate on the probed machine, when one is cached (a description target
  // keeps the plan the same on every machine; this line says what the measured machine predicts).
  if (!a.has("json") && fo.target.name == "native")
    std::printf("target native: %.0f GFLOP/s, %.1f GB/s at %d thread(s), %s\n", fo.target.peak_gflops,
                fo.target.dram_gbps, fo.target.threads,
                fo.target.efficiency.empty() ? "not calibrated (the plain roofline; kiln calibrate MODEL... fits it)"
                                             : "calibrated by kiln calibrate (per-class factors)");
  if (!a.has("json") && fo.target.name != "native")
    if (auto m = analysis::load_cached_machine()) {
      const Target native = calibrated_native_target(a, *m);
      FusionOptions unfused = fo;
      unfused.enabled = false;
      auto total = [&](const FusionPlan& p) {
        double us = 0;
        for (const auto& grp : p.groups)
          us += estimate_time(grp.cost, grp.counts_as_kernel() ? 1 : 0, native).total_us();
        return us;
      };
      std::printf("estimated on this machine (kiln probe %s: %.0f GFLOP/s, %.1f GB/s%s): %.1f us unfused -> %.1f us fused\n",
                  m->probed_at.c_str(), native.peak_gflops, native.dram_gbps,
                  native.efficiency.empty() ? "; not calibrated" : ", calibrated by kiln calibrate",
                  total(partition(*g, unfused)), total(plan));
    }
  // Which kernels kiln run/bench/compile would build under a tuned schedule (kiln tune's records
  // for this machine and --threads), and its fields.
  if (!a.has("json")) {
    runtime::BuildOptions bo;
    bo.fusion = fo;
    bo.threads = a.threads();
    use_tuned_records(a, bo);
    const loop::Schedule dflt = fo.schedule_or_default();
    int tuned = 0;
    for (const auto& grp : plan.groups) {
      if (!grp.counts_as_kernel() || grp.is_library()) continue;
      auto it = bo.kernel_schedules.find(tune::kernel_signature(grp));
      if (it == bo.kernel_schedules.end()) continue;
      if (!tuned++) std::printf("tuned schedules (kiln tune records; --no-records: none):\n");
      std::printf("  %s: %s\n", grp.name.c_str(), tune::describe_fields(tune::changed_fields(it->second, dflt)).c_str());
    }
    if (!tuned) std::printf("tuned schedules: none (every kernel uses the default schedule)\n");
  }
  if (a.has("dot")) write_file(a.get("dot"), explain_dot(*g, plan));
  if (a.has("svg")) {
    std::string dot_path = a.get("svg") + ".dot.kiln-tmp";
    write_file(dot_path, explain_dot(*g, plan));
    std::string cmd = "dot -Tsvg '" + dot_path + "' -o '" + a.get("svg") + ".kiln-tmp' 2>/dev/null";
    bool ok = a.get("svg").find('\'') == std::string::npos && std::system(cmd.c_str()) == 0;
    std::remove(dot_path.c_str());
    if (!ok) {
      std::remove((a.get("svg") + ".kiln-tmp").c_str());
      user_error("--svg needs Graphviz's `dot` (scripts/setup.sh installs it)");
    }
    std::rename((a.get("svg") + ".kiln-tmp").c_str(), a.get("svg").c_str());
  }
  return 0;
}

}  // namespace kiln::cli
