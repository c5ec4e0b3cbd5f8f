// kiln roofline: every kernel of the compiled model placed under the machine's roofline (probed
// peak FLOP/s and DRAM bandwidth): FLOPs, compulsory bytes, intensity, measured time, attained
// GFLOP/s and GB/s, bound, percent of roof; the same for the --no-fusion build, so the report shows
// what fusion did. Text table, --json, --svg plot, --html report (src/analysis/roofline.h).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "analysis/kernel_timing.h"
#include "analysis/roofline.h"
#include "cli.h"
#include "fusion/target.h"
#include "runtime/device.h"
#include "tune/cost_calibration.h"

namespace kiln::cli {

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::string tmp = path + ".kiln-tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) user_error(path, ": cannot write file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) user_error(path, ": cannot write file");
}

analysis::RooflineReport measure(std::unique_ptr<Graph> g, const runtime::BuildOptions& bo, const TensorMap& inputs,
                                 int runs, int warmup, const analysis::Roof& roof, const char* label,
                                 const analysis::Calibration& calibration) {
  Progress progress;
  auto ex = runtime::Executable::build(std::move(g), bo, progress.callback());
  progress.done();
  warn_library_kernels(*ex);
  analysis::TimedRuns t = analysis::time_runs(*ex, inputs, runs, warmup, /*per_kernel=*/true);
  analysis::RooflineReport r = analysis::roofline(*ex, t.kernel_medians(), roof, label, calibration);
  r.model_ms = analysis::median(t.run_ms);
  r.runs = runs;
  r.undisturbed_runs = t.undisturbed_runs;
  return r;
}

}  // namespace

int cmd_roofline(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"threads", "runs", "warmup", "input", "svg", "html", "target", "fusion-fuel", "device"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "no-fusion", "fused-only", "no-cache", "strict-fp"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("roofline expects one MODEL.onnx");
  const std::string model = a.positional()[0];
  const int runs = int(a.get_int("runs", 10)), warmup = int(a.get_int("warmup", 2));
  if (runs < 1 || warmup < 0) user_error("--runs must be >= 1 and --warmup >= 0");
  if (a.has("no-fusion") && a.has("fused-only")) user_error("--no-fusion and --fused-only exclude each other");
  auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
  TensorMap inputs = analysis::fill_inputs(*g, analysis::read_input_specs(a.all("input")));
  runtime::BuildOptions bo = build_options(a);
  const int threads = bo.threads > 0 ? bo.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  bo.threads = threads;

  // The machine model first: a probe (when nothing is cached) must not overlap the timed runs.
  if (!analysis::load_cached_machine()) std::fprintf(stderr, "kiln: probing this machine (cached afterwards)...\n");
  analysis::ProbeOptions po;
  po.threads = threads;
  const analysis::MachineModel m = analysis::machine_model(false, po);
  analysis::Roof roof = analysis::roof_for(m, threads);
  // --device: the kernels run there, under that device's roof — the target description's figures
  // (cuda-sm80, opencl: docs/fusion.md), not a measurement; kernel times include the queue drain
  // after each launch.
  std::string roof_source = "kiln probe, " + m.probed_at + (m.quick ? ", quick" : "");
  if (bo.device != runtime::DeviceKind::Cpu) {
    const Target t = *Target::by_name(bo.device == runtime::DeviceKind::Cuda ? "cuda-sm80" : "opencl");
    roof.peak_gflops = t.peak_gflops;
    roof.dram_gbps = t.dram_gbps;
    roof_source = "--device " + std::string(runtime::device_name(bo.device)) + ": the " + t.name +
                  " target description, not a measurement";
  }

  // The calibrated cost model of this machine at this thread count (CPU only: the factors are the
  // CPU kernels').
  analysis::Calibration calibration;
  if (bo.device == runtime::DeviceKind::Cpu) {
    std::vector<std::string> warnings;
    calibration.efficiency = tune::load_calibration(threads, &calibration.samples, &warnings);
    for (const auto& w : warnings) std::fprintf(stderr, "kiln: warning: %s\n", w.c_str());
  }

  // --no-fusion: the unfused build is the report; otherwise the fused one, with the unfused one
  // alongside unless --fused-only.
  const bool primary_fused = !a.has("no-fusion");
  analysis::RooflineReport primary =
      measure(g->clone(), bo, inputs, runs, warmup, roof, primary_fused ? "fused" : "unfused", calibration);
  std::optional<analysis::RooflineReport> unfused;
  if (primary_fused && !a.has("fused-only")) {
    runtime::BuildOptions nb = bo;
    nb.fusion.enabled = false;
    unfused = measure(g->clone(), nb, inputs, runs, warmup, roof, "unfused", calibration);
  }
  const analysis::RooflineReport* second = unfused ? &*unfused : nullptr;

  if (a.has("svg")) write_text(a.get("svg"), analysis::roofline_svg(primary, second));
  if (a.has("html")) write_text(a.get("html"), analysis::roofline_html(model, primary, second, m));
  if (a.has("json")) {
    std::cout << analysis::roofline_json(primary, second, m);
    return 0;
  }
  std::printf("%s, %d thread%s, %d runs: roof peak %.1f GFLOP/s, DRAM %.1f GB/s, ridge %.3g FLOP/B (%s)\n\n",
              model.c_str(), threads, threads == 1 ? "" : "s", runs, roof.peak_gflops, roof.dram_gbps, roof.ridge(),
              roof_source.c_str());
  std::cout << analysis::roofline_table(primary);
  if (second) std::cout << "\n" << analysis::roofline_table(*second);
  std::printf("\n(FLOPs: multiply-add = 2; DRAM bytes: kernel inputs incl. weights and outputs, once; %%roof: attained / "
              "min(peak, DRAM x intensity); kernel times: medians over %s)\n",
              primary.undisturbed_runs >= 3 ? "the runs undisturbed by other processes" : "all runs");
  return 0;
}

}  // namespace kiln::cli
