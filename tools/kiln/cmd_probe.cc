// kiln probe: the machine model (peak FLOP/s, cache and DRAM bandwidth) that the roofline and
// `kiln bench --kernels` measure kernels against; cached, --reprobe measures again.
#include <cstdio>
#include <iostream>

#include "analysis/machine_probe.h"
#include "cli.h"

namespace kiln::cli {

namespace {

std::string kib(int64_t b) {
  char s[32];
  if (b >= (int64_t(1) << 20) && b % (int64_t(1) << 20) == 0) std::snprintf(s, sizeof s, "%lld MiB", (long long)(b >> 20));
  else std::snprintf(s, sizeof s, "%lld KiB", (long long)(b >> 10));
  return s;
}

void print_summary(const analysis::MachineModel& m) {
  std::printf("cpu      %s, %d CPUs, %s (%d-bit vectors)\n", m.cpu_model.c_str(), m.cpus, m.isa.c_str(), m.vector_bits);
  std::printf("caches   L1d %s, L2 %s (shared by %d), L3 %s (shared by %d)\n", kib(m.l1d_bytes).c_str(),
              kib(m.l2_bytes).c_str(), m.l2_shared_by, kib(m.l3_bytes).c_str(), m.l3_shared_by);
  std::printf("probed   %s, load average %.2f%s\n\n", m.probed_at.c_str(), m.load_avg,
              m.quick ? " (quick probe: rough figures)" : "");
  std::printf("                         1 thread  %2d threads\n", m.threads);
  std::printf("peak fp32 GFLOP/s      %10.1f  %10.1f\n", m.peak_gflops_1t, m.peak_gflops_nt);
  struct Row {
    const char* name;
    const analysis::Bandwidth &one, &n;
  };
  for (const Row& r : {Row{"L1  ", m.l1_1t, m.l1_nt}, Row{"L2  ", m.l2_1t, m.l2_nt}, Row{"L3  ", m.l3_1t, m.l3_nt},
                       Row{"DRAM", m.dram_1t, m.dram_nt}}) {
    std::printf("%s read  GB/s        %10.1f  %10.1f\n", r.name, r.one.read_gbps, r.n.read_gbps);
    std::printf("%s triad GB/s        %10.1f  %10.1f\n", r.name, r.one.triad_gbps, r.n.triad_gbps);
  }
  std::printf("\n(GB/s = 1e9 B/s; triad a = b + s*c counts 12 B per element; medians of repeated samples)\n");
}

}  // namespace

int cmd_probe(const std::vector<std::string>& argv) {
  Args a(argv, {"threads"}, {"reprobe", "json"});
  if (!a.positional().empty()) user_error("probe takes no positional arguments");
  analysis::ProbeOptions o;
  o.threads = a.threads();
  auto before = analysis::load_cached_machine();
  analysis::MachineModel m = analysis::machine_model(a.has("reprobe"), o);
  if (a.has("json")) {
    std::cout << analysis::to_json(m);
    return 0;
  }
  print_summary(m);
  const bool reused = !a.has("reprobe") && before && before->probed_at == m.probed_at;
  std::printf("%s %s\n", reused ? "cached in" : "saved to", analysis::machine_cache_path().c_str());
  return 0;
}

}  // namespace kiln::cli
