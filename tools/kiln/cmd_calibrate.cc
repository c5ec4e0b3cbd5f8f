// kiln calibrate: times every kernel of the given models on this machine, keeps them as cost-model
// samples (src/tune/cost_calibration.h) and fits the per-class factors the calibrated cost model
// prices kernels with; reports, per model, how far the plain roofline estimate and the calibrated
// one are from the measured whole-model time, and the calibrated estimate with the model's own
// kernels held out of the fit (the honest figure: what the model predicts for a model it has not
// seen).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <thread>

#include "analysis/kernel_timing.h"
#include "analysis/roofline.h"
#include "cli.h"
#include "support/json.h"
#include "tune/cost_calibration.h"

namespace kiln::cli {

namespace {

std::string samples_path(const Args& a) {
  if (a.has("samples")) {
    if (a.get("samples").empty()) user_error("--samples needs a file name");
    return a.get("samples");
  }
  std::string why;
  std::string p = tune::default_samples_path(&why);
  if (p.empty()) user_error("no private cache folder for the cost samples (", why, "); give --samples FILE");
  return p;
}

struct ModelFigures {
  std::string name;
  std::string file;        // the model it was built from (fused and unfused share one)
  double measured_ms = 0;  // whole-model median, no profiling
  double kernel_ms = 0;    // per-kernel medians summed (profiled runs)
  std::vector<tune::CostSample> samples;
};

double predicted_total(const std::vector<tune::CostSample>& samples, const analysis::Roof& roof,
                       const std::map<std::string, ClassEfficiency>& eff) {
  double ms = 0;
  for (const auto& s : samples) ms += tune::predicted_ms(s, roof.peak_gflops, roof.dram_gbps, eff);
  return ms;
}

std::string pct(double est, double measured) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.0f %%", measured > 0 ? 100 * (est / measured - 1) : 0.0);
  return b;
}

}  // namespace

void add_cost_samples(const Args& a, const std::vector<tune::CostSample>& samples) {
  std::string path;
  if (a.has("samples")) path = samples_path(a);
  else path = tune::default_samples_path(nullptr);
  if (path.empty() || samples.empty()) return;  // no private cache folder: nothing kept
  tune::SamplesFile f = tune::read_samples(path, nullptr);
  for (const auto& w : f.warnings) std::cerr << "kiln: warning: " << w << "\n";
  for (const auto& s : samples) tune::upsert_sample(f.samples, s);
  tune::write_samples(path, f.samples);
}

int cmd_calibrate(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"threads", "runs", "samples", "target", "records"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "no-cache", "no-records", "fused-only"});
  Args a(argv, valued, flags);
  const int runs = int(a.get_int("runs", 10));
  if (runs < 3) user_error("--runs must be >= 3");
  const std::string path = samples_path(a);
  runtime::BuildOptions bo = build_options(a);
  const int threads = bo.threads > 0 ? bo.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  bo.threads = threads;
  const tune::MachineKey machine = tune::current_machine(threads);

  // The samples file is read (and refused when unreadable) before any work; the probe runs before
  // any timing so that the two never overlap.
  tune::SamplesFile file = tune::read_samples(path, nullptr);
  for (const auto& w : file.warnings) std::cerr << "kiln: warning: " << w << "\n";
  if (!analysis::load_cached_machine()) std::fprintf(stderr, "kiln: probing this machine (cached afterwards)...\n");
  analysis::ProbeOptions po;
  po.threads = threads;
  const analysis::MachineModel m = analysis::machine_model(false, po);
  const analysis::Roof roof = analysis::roof_for(m, threads);

  // Each model fused and, unless --fused-only, unfused: the partitioner compares a group's cost
  // fused with its parts' cost apart, so both kinds of kernel must be priced right.
  std::vector<ModelFigures> models;
  for (const std::string& model : a.positional()) {
    std::fprintf(stderr, "kiln calibrate: %s\n", model.c_str());
    auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
    TensorMap inputs = analysis::fill_inputs(*g, analysis::read_input_specs({}));
    for (const bool fused : {true, false}) {
      if (!fused && a.has("fused-only")) continue;
      ModelFigures mf;
      mf.name = std::filesystem::path(model).stem().string() + (fused ? "" : " (unfused)");
      mf.file = model;
      runtime::BuildOptions mo = bo;
      mo.fusion.enabled = fused;
      std::unique_ptr<runtime::Executable> ex;
      try {
        ex = runtime::Executable::build(g->clone(), mo);
      } catch (const UserError& e) {
        throw UserError(model + ": " + e.what());
      }
      warn_library_kernels(*ex);
      // Whole-model time unprofiled (what a user's run takes), then the per-kernel medians.
      mf.measured_ms = analysis::median(analysis::time_runs(*ex, inputs, runs, 2, false).run_ms);
      const analysis::TimedRuns t = analysis::time_runs(*ex, inputs, runs, 1, true);
      const std::vector<double> med = t.kernel_medians();
      for (double x : med) mf.kernel_ms += x;
      mf.samples = tune::samples_of(*ex, med, mf.name, machine);
      for (const auto& s : mf.samples) tune::upsert_sample(file.samples, s);
      models.push_back(std::move(mf));
    }
  }
  if (!models.empty()) tune::write_samples(path, file.samples);

  std::vector<tune::CostSample> mine;
  for (const auto& s : file.samples)
    if (s.machine == machine) mine.push_back(s);
  if (mine.empty())
    user_error(path, ": no cost samples of ", machine.str(), "; give models to measure (kiln calibrate MODEL.onnx ...)");
  const auto eff = tune::fit_efficiency(mine, roof.peak_gflops, roof.dram_gbps);

  // Per model: the plain roofline, the fit over every sample, the fit without the model's kernels.
  struct Row {
    double plain, calibrated, held_out;
  };
  std::vector<Row> rows;
  for (const auto& mf : models) {
    // Held out: every kernel of the model, fused and unfused.
    std::set<std::string> own;
    for (const auto& other : models)
      if (other.file == mf.file)
        for (const auto& s : other.samples) own.insert(s.signature);
    std::vector<tune::CostSample> others;
    for (const auto& s : mine)
      if (!own.count(s.signature)) others.push_back(s);
    const auto held = tune::fit_efficiency(others, roof.peak_gflops, roof.dram_gbps);
    rows.push_back({predicted_total(mf.samples, roof, {}), predicted_total(mf.samples, roof, eff),
                    held.empty() ? 0.0 : predicted_total(mf.samples, roof, held)});
  }

  if (a.has("json")) {
    std::printf("{\"samples_file\": %s, \"cpu\": %s, \"isa\": %s, \"threads\": %d, \"peak_gflops\": %.6g, "
                "\"dram_gbps\": %.6g, \"samples\": %zu, \"classes\": {",
                json_quote(path).c_str(), json_quote(machine.cpu).c_str(), json_quote(machine.isa).c_str(), threads,
                roof.peak_gflops, roof.dram_gbps, mine.size());
    bool first = true;
    for (const auto& [cls, e] : eff) {
      std::printf("%s%s: {\"compute\": %.6g, \"memory\": %.6g, \"overhead_us\": %.6g, \"samples\": %d}",
                  first ? "" : ", ", json_quote(cls).c_str(), e.compute, e.memory, e.overhead_us, e.samples);
      first = false;
    }
    std::printf("}, \"models\": [");
    for (size_t i = 0; i < models.size(); ++i) {
      std::printf("%s{\"model\": %s, \"measured_ms\": %.6g, \"kernel_ms\": %.6g, \"roofline_ms\": %.6g, "
                  "\"calibrated_ms\": %.6g, \"held_out_ms\": %.6g, \"kernels\": [",
                  i ? ", " : "", json_quote(models[i].name).c_str(), models[i].measured_ms, models[i].kernel_ms,
                  rows[i].plain, rows[i].calibrated, rows[i].held_out);
      // Every kernel instance (identical kernels share one sample in the file).
      for (size_t k = 0; k < models[i].samples.size(); ++k)
        std::printf("%s%s", k ? ", " : "", json_quote(models[i].samples[k].signature).c_str());
      std::printf("]}");
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("cost model calibration for %s: %zu samples (%s), roof %.1f GFLOP/s, %.1f GB/s\n\n", machine.str().c_str(),
              mine.size(), path.c_str(), roof.peak_gflops, roof.dram_gbps);
  std::printf("%-14s %8s %9s %9s %12s\n", "class", "samples", "compute", "memory", "overhead us");
  for (const auto& [cls, e] : eff)
    std::printf("%-14s %8d %8.1f%% %8.1f%% %12.2f\n", cls.c_str(), e.samples, 100 * e.compute, 100 * e.memory,
                e.overhead_us);
  if (!models.empty()) {
    std::printf("\n%-22s %11s %11s %18s %18s %18s\n", "model", "measured ms", "kernels ms", "roofline ms",
                "calibrated ms", "held-out ms");
    for (size_t i = 0; i < models.size(); ++i) {
      const auto& mf = models[i];
      auto cell = [&](double v) {
        char b[48];
        std::snprintf(b, sizeof b, "%.3f (%s)", v, pct(v, mf.measured_ms).c_str());
        return std::string(b);
      };
      std::printf("%-22.22s %11.3f %11.3f %18s %18s %18s\n", mf.name.c_str(), mf.measured_ms, mf.kernel_ms,
                  cell(rows[i].plain).c_str(), cell(rows[i].calibrated).c_str(),
                  rows[i].held_out > 0 ? cell(rows[i].held_out).c_str() : "-");
    }
    std::printf("\n(measured: whole-model median of %d runs without profiling; estimates: the cost model's kernel times "
                "summed; held-out: fitted without this model's kernels)\n",
                runs);
  }
  return 0;
}

}  // namespace kiln::cli
