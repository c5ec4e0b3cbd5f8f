#include "analysis/roofline.h"

#include <algorithm>
#include <cstdio>

#include "fusion/cost_model.h"
#include "support/error.h"
#include "support/json.h"

namespace kiln::analysis {

Roof roof_for(const MachineModel& m, int threads) {
  Roof r;
  r.threads = std::max(1, threads);
  if (r.threads == 1 || m.threads <= 1) {
    r.peak_gflops = m.peak_gflops_1t;
    r.dram_gbps = m.dram_1t.triad_gbps;
  } else {
    r.peak_gflops = std::min(m.peak_gflops_nt, m.peak_gflops_1t * r.threads);
    r.dram_gbps = m.dram_nt.triad_gbps;
  }
  return r;
}

double group_flops(const FusionGroup& g) {
  double f = 0;
  for (const Node* n : g.nodes) f += node_flops(*n);
  return f;
}

int64_t group_dram_bytes(const FusionGroup& g) {
  int64_t b = 0;
  for (const Value* v : g.inputs) b += value_bytes(v);
  for (const Value* v : g.outputs) b += value_bytes(v);
  return b;
}

double graph_flops(const Graph& g) {
  double f = 0;
  for (const Node* n : g.nodes()) f += node_flops(*n);
  return f;
}

KernelRoofline place_kernel(std::string name, double flops, int64_t dram_bytes, double time_ms, const Roof& roof) {
  KernelRoofline k;
  k.name = std::move(name);
  k.flops = flops;
  k.dram_bytes = dram_bytes;
  k.time_ms = time_ms;
  // ms → s is 1e-3 and G is 1e9: FLOP / (ms × 1e6) is GFLOP/s.
  k.gflops = time_ms > 0 ? flops / (time_ms * 1e6) : 0;
  k.gbps = time_ms > 0 ? double(dram_bytes) / (time_ms * 1e6) : 0;
  k.intensity = dram_bytes > 0 ? flops / double(dram_bytes) : 0;
  k.memory_bound = k.intensity < roof.ridge();
  k.roof_gflops = std::min(roof.peak_gflops, roof.dram_gbps * k.intensity);
  // The two forms agree for FLOP-carrying memory-bound kernels; the bandwidth form also covers
  // kernels that only move data (no FLOPs, a roof of 0 GFLOP/s).
  if (k.memory_bound) k.percent_of_roof = roof.dram_gbps > 0 ? 100 * k.gbps / roof.dram_gbps : 0;
  else k.percent_of_roof = roof.peak_gflops > 0 ? 100 * k.gflops / roof.peak_gflops : 0;
  return k;
}

RooflineReport roofline(const runtime::Executable& ex, const std::vector<double>& group_median_ms, const Roof& roof,
                        std::string label, const Calibration& calibration) {
  KILN_CHECK(group_median_ms.size() == ex.plan().groups.size(), "one median per fusion group");
  RooflineReport r;
  r.label = std::move(label);
  r.roof = roof;
  r.total_flops = graph_flops(ex.graph());
  Target machine = Target::default_target();
  machine.peak_gflops = roof.peak_gflops;
  machine.dram_gbps = roof.dram_gbps;
  Target calibrated = machine;
  calibrated.efficiency = calibration.efficiency;
  r.calibration_samples = calibration.efficiency.empty() ? 0 : calibration.samples;
  for (size_t k = 0; k < ex.plan().groups.size(); ++k) {
    const FusionGroup& grp = ex.plan().groups[k];
    if (!grp.counts_as_kernel()) continue;
    KernelRoofline kr = place_kernel(ex.kernels()[k].name, group_flops(grp), group_dram_bytes(grp), group_median_ms[k], roof);
    kr.kind = group_kind_name(grp.kind);
    kr.generated = ex.kernels()[k].generated;
    r.kernel_flops += kr.flops;
    r.total_dram_bytes += kr.dram_bytes;
    r.kernel_ms += kr.time_ms;
    kr.cost_class = grp.cost.cost_class;
    r.estimated_ms += estimate_time(grp.cost, 1, machine).total_us() / 1000;
    kr.estimated_ms = estimate_time(grp.cost, 1, calibrated).total_us() / 1000;
    if (r.calibration_samples) r.calibrated_ms += kr.estimated_ms;
    r.kernels.push_back(std::move(kr));
  }
  std::stable_sort(r.kernels.begin(), r.kernels.end(),
                   [](const KernelRoofline& a, const KernelRoofline& b) { return a.time_ms > b.time_ms; });
  double mem_ms = 0, comp_ms = 0, mem_roof_ms = 0, comp_roof_ms = 0;
  for (const auto& k : r.kernels) {
    // percent × time is 100 × the time the roof allows.
    (k.memory_bound ? mem_ms : comp_ms) += k.time_ms;
    (k.memory_bound ? mem_roof_ms : comp_roof_ms) += k.percent_of_roof * k.time_ms;
  }
  if (r.kernel_ms > 0) {
    r.memory_time_share = mem_ms / r.kernel_ms;
    r.compute_time_share = comp_ms / r.kernel_ms;
  }
  r.memory_percent_of_roof = mem_ms > 0 ? mem_roof_ms / mem_ms : 0;
  r.compute_percent_of_roof = comp_ms > 0 ? comp_roof_ms / comp_ms : 0;
  return r;
}

namespace {

std::string num(double v, const char* f = "%.6g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string report_body_json(const RooflineReport& r) {
  std::string j = "\"total_flops\": " + num(r.total_flops, "%.0f") + ", \"kernel_flops\": " + num(r.kernel_flops, "%.0f") +
                  ", \"total_dram_bytes\": " + std::to_string(r.total_dram_bytes) + ", \"kernel_ms\": " +
                  num(r.kernel_ms) + ", \"model_ms\": " + num(r.model_ms) + ", \"estimated_ms\": " + num(r.estimated_ms) +
                  ", \"calibrated_ms\": " + num(r.calibrated_ms) + ", \"calibration_samples\": " +
                  std::to_string(r.calibration_samples) + ", \"runs\": " + std::to_string(r.runs) +
                  ", \"undisturbed_runs\": " + std::to_string(r.undisturbed_runs) + ", \"kernel_count\": " +
                  std::to_string(r.kernels.size()) + ", \"summary\": {\"memory_time_share\": " +
                  num(r.memory_time_share) + ", \"compute_time_share\": " + num(r.compute_time_share) +
                  ", \"memory_percent_of_roof\": " + num(r.memory_percent_of_roof) +
                  ", \"compute_percent_of_roof\": " + num(r.compute_percent_of_roof) + "}, \"kernels\": [";
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    const auto& k = r.kernels[i];
    j += std::string(i ? ", " : "") + "{\"name\": " + json_quote(k.name) + ", \"kind\": " + json_quote(k.kind) +
         ", \"generated\": " + (k.generated ? "true" : "false") + ", \"flops\": " + num(k.flops, "%.0f") +
         ", \"dram_bytes\": " + std::to_string(k.dram_bytes) + ", \"time_ms\": " + num(k.time_ms) +
         ", \"time_share\": " + num(r.kernel_ms > 0 ? k.time_ms / r.kernel_ms : 0) + ", \"gflops\": " + num(k.gflops) +
         ", \"gbps\": " + num(k.gbps) + ", \"intensity\": " + num(k.intensity) + ", \"bound\": \"" +
         (k.memory_bound ? "memory" : "compute") + "\", \"roof_gflops\": " + num(k.roof_gflops) +
         ", \"percent_of_roof\": " + num(k.percent_of_roof) + ", \"cost_class\": " + json_quote(k.cost_class) +
         ", \"estimated_ms\": " + num(k.estimated_ms) + "}";
  }
  return j + "]";
}

}  // namespace

std::string roofline_json(const RooflineReport& fused, const RooflineReport* unfused, const MachineModel& m) {
  std::string j = "{\"machine\": {\"peak_gflops\": " + num(fused.roof.peak_gflops) + ", \"dram_gbps\": " +
                  num(fused.roof.dram_gbps) + ", \"threads\": " + std::to_string(fused.roof.threads) +
                  ", \"ridge_flops_per_byte\": " + num(fused.roof.ridge()) + ", \"cpu\": " + json_quote(m.cpu_model) +
                  ", \"isa\": " + json_quote(m.isa) + ", \"probed_at\": " + json_quote(m.probed_at) +
                  ", \"quick_probe\": " + (m.quick ? "true" : "false") + "}, " + report_body_json(fused);
  if (unfused) j += ", \"unfused\": {" + report_body_json(*unfused) + "}";
  return j + "}\n";
}

std::string roofline_table(const RooflineReport& r) {
  std::string s;
  char b[512];
  std::snprintf(b, sizeof b,
                "%s: %zu kernels, %.4g GFLOP (model; kernels %.4g), %.2f MB compulsory DRAM traffic, kernels %.3f ms "
                "(median run %.3f ms)\n",
                r.label.c_str(), r.kernels.size(), r.total_flops / 1e9, r.kernel_flops / 1e9,
                double(r.total_dram_bytes) / 1e6, r.kernel_ms, r.model_ms);
  s += b;
  std::snprintf(b, sizeof b, "%-4s %-40s %-11s %9s %6s %9s %8s %8s %8s %7s %-7s %6s\n", "#", "kernel", "kind", "ms",
                "time%", "MFLOP", "MB", "FLOP/B", "GFLOP/s", "GB/s", "bound", "%roof");
  s += b;
  int i = 0;
  for (const auto& k : r.kernels) {
    std::snprintf(b, sizeof b, "%-4d %-40.40s %-11.11s %9.4f %6.1f %9.2f %8.3f %8.2f %8.1f %7.1f %-7s %6.1f\n", ++i,
                  k.name.c_str(), k.kind.c_str(), k.time_ms, r.kernel_ms > 0 ? 100 * k.time_ms / r.kernel_ms : 0.0,
                  k.flops / 1e6, double(k.dram_bytes) / 1e6, k.intensity, k.gflops, k.gbps,
                  k.memory_bound ? "memory" : "compute", k.percent_of_roof);
    s += b;
  }
  std::snprintf(b, sizeof b,
                "time in memory-bound kernels %.1f %% (%.1f %% of roof), in compute-bound kernels %.1f %% (%.1f %% of "
                "roof; time-weighted)\n",
                100 * r.memory_time_share, r.memory_percent_of_roof, 100 * r.compute_time_share,
                r.compute_percent_of_roof);
  s += b;
  std::snprintf(b, sizeof b, "cost model estimate on this roof: %.3f ms (measured kernels %.3f ms: %.2fx the estimate)\n",
                r.estimated_ms, r.kernel_ms, r.estimated_ms > 0 ? r.kernel_ms / r.estimated_ms : 0.0);
  s += b;
  if (r.calibration_samples)
    std::snprintf(b, sizeof b, "calibrated cost model (%d samples, kiln calibrate): %.3f ms (measured kernels: %.2fx)\n",
                  r.calibration_samples, r.calibrated_ms, r.calibrated_ms > 0 ? r.kernel_ms / r.calibrated_ms : 0.0);
  else
    std::snprintf(b, sizeof b, "calibrated cost model: none for this machine and thread count (kiln calibrate MODEL...)\n");
  return s + b;
}

}  // namespace kiln::analysis
