#include "tune/cost_calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "analysis/machine_probe.h"
#include "analysis/roofline.h"
#include "fusion/cost_model.h"
#include "runtime/jit.h"
#include "runtime/jit_cache.h"
#include "support/clock.h"
#include "support/error.h"
#include "support/json.h"
#include "tune/kernel_signature.h"

namespace kiln::tune {

namespace {

std::string op_list(const FusionGroup& grp) {
  std::string r;
  for (const Node* n : grp.nodes) r += (r.empty() ? "" : ",") + n->op_type();
  return r;
}

}  // namespace

std::string sample_to_json_line(const CostSample& s) {
  std::ostringstream os;
  os << "{\"schema\": " << kSamplesSchema << ", \"signature\": " << json_quote(s.signature)
     << ", \"class\": " << json_quote(s.cost_class) << ", \"ops\": " << json_quote(s.ops)
     << ", \"model\": " << json_quote(s.model) << ", \"cpu\": " << json_quote(s.machine.cpu)
     << ", \"isa\": " << json_quote(s.machine.isa) << ", \"threads\": " << s.machine.threads
     << ", \"flops\": " << entry_number(s.flops) << ", \"bytes\": " << entry_number(s.bytes) << ", \"ms\": " << entry_number(s.ms)
     << ", \"date\": " << json_quote(s.date.empty() ? iso_utc_now() : s.date) << "}";
  return os.str();
}

std::optional<CostSample> sample_from_json_line(const std::string& line, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<CostSample> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  auto obj = parse_entry(line, kSamplesSchema, why);
  if (!obj) return std::nullopt;
  auto num = [&](const char* k) { return flat_get<double>(*obj, k); };
  auto str = [&](const char* k) { return flat_get<std::string>(*obj, k); };
  auto sig = str("signature"), cls = str("class"), ops = str("ops"), model = str("model"), cpu = str("cpu"),
       isa = str("isa"), date = str("date");
  auto threads = num("threads"), flops = num("flops"), bytes = num("bytes"), ms = num("ms");
  if (!sig || sig->empty() || !cls || cls->empty() || !ops || !model || !cpu || !isa || !date || !threads || !flops ||
      !bytes || !ms)
    return fail("a field is missing or of the wrong kind");
  if (*threads < 1 || *threads > 4096 || std::floor(*threads) != *threads || !(*flops >= 0) || !(*bytes >= 0) ||
      !(*ms > 0) || !std::isfinite(*flops) || !std::isfinite(*bytes) || !std::isfinite(*ms))
    return fail("a field is out of range");
  CostSample s;
  s.signature = *sig;
  s.cost_class = *cls;
  s.ops = *ops;
  s.model = *model;
  s.machine = {*cpu, *isa, int(*threads)};
  s.flops = *flops;
  s.bytes = *bytes;
  s.ms = *ms;
  s.date = *date;
  return s;
}

SamplesFile read_samples(const std::string& path, const MachineKey* machine) {
  SamplesFile out;
  out.samples = read_json_lines<CostSample>(path, "cost samples", "sample", machine, sample_from_json_line, out.warnings);
  return out;
}

void write_samples(const std::string& path, const std::vector<CostSample>& samples) {
  std::string text;
  for (const CostSample& s : samples) text += sample_to_json_line(s) + "\n";
  write_text_atomically(path, text, "cost samples");
}

void upsert_sample(std::vector<CostSample>& samples, const CostSample& s) {
  for (CostSample& x : samples)
    if (x.signature == s.signature && x.machine == s.machine) {
      x = s;
      return;
    }
  samples.push_back(s);
}

std::string default_samples_path(std::string* why) {
  const std::string dir = runtime::default_cache_dir();
  const std::string w = runtime::jit_cache::why_not_private(dir);
  if (!w.empty()) {
    if (why) *why = w;
    return "";
  }
  return (std::filesystem::path(dir) / "cost_samples.jsonl").string();
}

std::vector<CostSample> samples_of(const runtime::Executable& ex, const std::vector<double>& group_ms,
                                   const std::string& model, const MachineKey& machine) {
  std::vector<CostSample> out;
  const std::string date = iso_utc_now();
  for (const runtime::KernelInfo& info : ex.kernels()) {
    const FusionGroup& grp = ex.plan().groups[info.group];
    if (!grp.counts_as_kernel() || info.group >= group_ms.size() || !(group_ms[info.group] > 0)) continue;
    CostSample s;
    s.signature = kernel_signature(grp);
    s.cost_class = grp.cost.cost_class.empty() ? cost_class(grp.nodes) : grp.cost.cost_class;
    s.ops = op_list(grp);
    s.model = model;
    s.machine = machine;
    s.flops = grp.cost.flops;
    s.bytes = double(grp.cost.bytes_read + grp.cost.bytes_written);
    s.ms = group_ms[info.group];
    s.date = date;
    out.push_back(std::move(s));
  }
  return out;
}

double predicted_ms(const CostSample& s, double peak_gflops, double dram_gbps,
                    const std::map<std::string, ClassEfficiency>& efficiency) {
  Target t = Target::default_target();
  t.peak_gflops = peak_gflops;
  t.dram_gbps = dram_gbps;
  t.efficiency = efficiency;
  // bytes are read + written together; the estimate only adds them.
  return estimate_time(s.flops, int64_t(s.bytes), 0, 1, t, s.cost_class).total_us() / 1000;
}

namespace {

// A launch on the CPU costs microseconds: the call, and an OpenMP fork/join where the kernel runs
// in parallel. Left free, the fit absorbs a class's spread of efficiencies into a large constant
// (66 us for GEMMs, 26 us for pools over the 20 models of docs/tuning.md), which prices every small
// kernel of that class at tens of microseconds: small models came out 1.5-2.5x too slow. Capped,
// the efficiencies carry the spread. Measured (held-out whole-model error over those 20 models
// fused and unfused, 1 thread): cap 8 us 16 % mean / 114 % worst, 2 us 14 % / 64 %, 1 us 14 % / 43 %.
constexpr double kMaxOverheadUs = 1;

struct Point {
  double compute, memory, overhead_us;
};

// Σ √t·ln²(predicted / measured) over `samples` at `p` (the fit's objective; see the header).
double loss(const std::vector<const CostSample*>& samples, double peak, double bw, const Point& p) {
  double l = 0;
  for (const CostSample* s : samples) {
    const double us = std::max(s->flops / (peak * p.compute * 1e3), s->bytes / (bw * p.memory * 1e3)) + p.overhead_us;
    const double e = std::log(std::max(us, 1e-6) / (s->ms * 1e3));
    l += std::sqrt(s->ms) * e * e;
  }
  return l;
}

ClassEfficiency fit_one(const std::vector<const CostSample*>& samples, double peak, double bw) {
  // The grid: efficiencies on a log scale (compute 1 % .. 200 % of peak; memory 2 % .. 64x DRAM,
  // since operands of small kernels come from cache), overheads 0 .. kMaxOverheadUs.
  auto geometric = [](double lo, double hi, int n) {
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(lo * std::pow(hi / lo, double(i) / (n - 1)));
    return v;
  };
  const std::vector<double> cs = geometric(0.01, 2.0, 40), ms = geometric(0.02, 64.0, 40);
  const std::vector<double> os = {0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1};
  Point best{1, 1, 0};
  double best_l = INFINITY;
  for (double c : cs)
    for (double m : ms)
      for (double o : os) {
        const double l = loss(samples, peak, bw, {c, m, o});
        if (l < best_l) best_l = l, best = {c, m, o};
      }
  // Refinement, a compass search: move to the best of the 26 neighbours (log steps for the
  // efficiencies) while one improves, then halve the steps.
  double ratio = std::pow(2.0 / 0.01, 1.0 / 39), step_o = 0.1;
  for (int round = 0; round < 12; ++round) {
    for (int moves = 0; moves < 64; ++moves) {
      const Point centre = best;
      for (int i = -1; i <= 1; ++i)
        for (int j = -1; j <= 1; ++j)
          for (int k = -1; k <= 1; ++k) {
            const Point p{centre.compute * std::pow(ratio, i), centre.memory * std::pow(ratio, j),
                          std::clamp(centre.overhead_us + k * step_o, 0.0, kMaxOverheadUs)};
            const double l = loss(samples, peak, bw, p);
            if (l < best_l) best_l = l, best = p;
          }
      if (best.compute == centre.compute && best.memory == centre.memory && best.overhead_us == centre.overhead_us) break;
    }
    ratio = std::sqrt(ratio);
    step_o /= 2;
  }
  ClassEfficiency e;
  e.compute = best.compute;
  e.memory = best.memory;
  e.overhead_us = best.overhead_us;
  e.samples = int(samples.size());
  return e;
}

}  // namespace

std::map<std::string, ClassEfficiency> fit_efficiency(const std::vector<CostSample>& samples, double peak_gflops,
                                                      double dram_gbps) {
  std::map<std::string, ClassEfficiency> out;
  if (samples.empty() || !(peak_gflops > 0) || !(dram_gbps > 0)) return out;
  std::map<std::string, std::vector<const CostSample*>> by_class;
  std::vector<const CostSample*> all;
  for (const CostSample& s : samples) {
    by_class[s.cost_class].push_back(&s);
    all.push_back(&s);
  }
  out["all"] = fit_one(all, peak_gflops, dram_gbps);
  for (const auto& [cls, list] : by_class)
    if (int(list.size()) >= kMinClassSamples) out[cls] = fit_one(list, peak_gflops, dram_gbps);
  return out;
}

std::map<std::string, ClassEfficiency> load_calibration(int threads, int* samples, std::vector<std::string>* warnings) {
  if (samples) *samples = 0;
  auto m = analysis::load_cached_machine();
  if (!m) return {};
  std::string why;
  const std::string path = default_samples_path(&why);
  if (path.empty()) return {};
  const MachineKey key = current_machine(threads);
  SamplesFile f = read_samples(path, &key);
  if (warnings) *warnings = f.warnings;
  if (samples) *samples = int(f.samples.size());
  const analysis::Roof roof = analysis::roof_for(*m, key.threads);
  return fit_efficiency(f.samples, roof.peak_gflops, roof.dram_gbps);
}

}  // namespace kiln::tune
