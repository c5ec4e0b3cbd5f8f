// The machine model's JSON form, its cache file, and the rule that picks the bandwidth a kernel is
// measured against. The JSON is one flat object of strings and numbers, so a reader of ~60 lines
// does; a file it cannot read is treated as no cache at all.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <variant>

#include "analysis/machine_probe.h"
#include "support/json.h"
#include "runtime/jit.h"
#include "support/error.h"

namespace kiln::analysis {

namespace fs = std::filesystem;

namespace {

constexpr int kFormat = 1;  // bump when a field changes meaning; older caches are then re-probed

// One numeric field: its key and how to read/write it on the struct.
struct NumField {
  std::string key;
  std::function<double(const MachineModel&)> get;
  std::function<void(MachineModel&, double)> set;
  bool integer;
};

template <class T>
NumField num(std::string key, T MachineModel::*p) {
  return {key, [p](const MachineModel& m) { return double(m.*p); }, [p](MachineModel& m, double v) { m.*p = T(v); },
          std::is_integral_v<T>};
}

NumField bw(std::string key, Bandwidth MachineModel::*b, double Bandwidth::*f) {
  return {key, [b, f](const MachineModel& m) { return (m.*b).*f; }, [b, f](MachineModel& m, double v) { (m.*b).*f = v; },
          false};
}

const std::vector<NumField>& num_fields() {
  static const std::vector<NumField> fields = [] {
    std::vector<NumField> f = {
        num("vector_bits", &MachineModel::vector_bits), num("cpus", &MachineModel::cpus),
        num("threads", &MachineModel::threads), num("l1d_bytes", &MachineModel::l1d_bytes),
        num("l2_bytes", &MachineModel::l2_bytes), num("l3_bytes", &MachineModel::l3_bytes),
        num("l2_shared_by", &MachineModel::l2_shared_by), num("l3_shared_by", &MachineModel::l3_shared_by),
        num("load_avg", &MachineModel::load_avg),
        num("peak_gflops_1t", &MachineModel::peak_gflops_1t), num("peak_gflops_nt", &MachineModel::peak_gflops_nt),
    };
    struct Level {
      const char *name, *threads;
      Bandwidth MachineModel::*member;
    };
    const Level levels[] = {{"l1", "1t", &MachineModel::l1_1t},     {"l1", "nt", &MachineModel::l1_nt},
                            {"l2", "1t", &MachineModel::l2_1t},     {"l2", "nt", &MachineModel::l2_nt},
                            {"l3", "1t", &MachineModel::l3_1t},     {"l3", "nt", &MachineModel::l3_nt},
                            {"dram", "1t", &MachineModel::dram_1t}, {"dram", "nt", &MachineModel::dram_nt}};
    for (const Level& l : levels) {
      f.push_back(bw(std::string(l.name) + "_read_gbps_" + l.threads, l.member, &Bandwidth::read_gbps));
      f.push_back(bw(std::string(l.name) + "_triad_gbps_" + l.threads, l.member, &Bandwidth::triad_gbps));
    }
    return f;
  }();
  return fields;
}


}  // namespace

std::string to_json(const MachineModel& m) {
  std::ostringstream os;
  os << "{\n  \"format\": " << kFormat << ",\n  \"cpu_model\": " << json_quote(m.cpu_model) << ",\n  \"isa\": " << json_quote(m.isa)
     << ",\n  \"probed_at\": " << json_quote(m.probed_at) << ",\n  \"quick\": " << (m.quick ? "true" : "false");
  for (const auto& f : num_fields()) {
    char b[64];
    if (f.integer) std::snprintf(b, sizeof b, "%lld", (long long)f.get(m));
    else std::snprintf(b, sizeof b, "%.10g", f.get(m));
    os << ",\n  \"" << f.key << "\": " << b;
  }
  os << "\n}\n";
  return os.str();
}

std::optional<MachineModel> from_json(const std::string& text) {
  auto obj = parse_flat_object(text);
  if (!obj) return std::nullopt;
  auto number = [&](const char* k) { return flat_get<double>(*obj, k); };
  auto string = [&](const char* k) { return flat_get<std::string>(*obj, k); };
  auto fmt = number("format");
  auto model = string("cpu_model"), isa = string("isa"), at = string("probed_at");
  auto quick = obj->find("quick");
  if (!fmt || *fmt != kFormat || !model || !isa || !at || quick == obj->end() ||
      !std::holds_alternative<bool>(quick->second))
    return std::nullopt;
  MachineModel m;
  m.cpu_model = *model;
  m.isa = *isa;
  m.probed_at = *at;
  m.quick = std::get<bool>(quick->second);
  for (const auto& f : num_fields()) {
    auto v = number(f.key.c_str());
    if (!v) return std::nullopt;
    f.set(m, *v);
  }
  return m;
}

const char* MachineModel::level_for(int64_t bytes, int nthreads) const {
  const int64_t l3_instances = std::max(1, (cpus + l3_shared_by - 1) / std::max(1, l3_shared_by));
  const int64_t l2_instances = std::max(1, (std::max(1, nthreads) + l2_shared_by - 1) / std::max(1, l2_shared_by));
  if (bytes > l3_bytes * l3_instances) return "DRAM";
  if (bytes > l2_bytes * l2_instances) return "L3";
  return "L2";
}

double MachineModel::bandwidth_for(int64_t bytes, int nthreads, bool reads_only) const {
  const std::string level = level_for(bytes, nthreads);
  const bool one = nthreads <= 1;
  const Bandwidth& b = level == "DRAM" ? (one ? dram_1t : dram_nt) : level == "L3" ? (one ? l3_1t : l3_nt) : (one ? l2_1t : l2_nt);
  return reads_only ? b.read_gbps : b.triad_gbps;
}

std::string machine_cache_path() { return (fs::path(runtime::default_cache_dir()) / "machine.json").string(); }

std::optional<MachineModel> load_cached_machine() {
  std::ifstream f(machine_cache_path());
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  auto m = from_json(ss.str());
  if (!m || m->cpu_model != current_cpu_model() || m->cpus != current_cpus()) return std::nullopt;
  return m;
}

void save_machine(const MachineModel& m) {
  const fs::path path = machine_cache_path();
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp);
    f << to_json(m);
    if (!f) user_error("cannot write the machine model cache ", tmp.string(), ": ", std::strerror(errno));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    user_error("cannot write the machine model cache ", path.string(), ": ", ec.message());
  }
}

MachineModel machine_model(bool reprobe, const ProbeOptions& opts) {
  const int want = opts.threads > 0 ? opts.threads : current_cpus();
  if (!reprobe) {
    // A quick (test) model never stands in for a full probe; a quick request takes either. Every
    // probe measures one thread too, so any model serves a 1-thread request.
    auto c = load_cached_machine();
    if (c && (c->threads == want || want == 1) && (!c->quick || opts.quick)) return *c;
  }
  MachineModel m = probe_machine(opts);
  try {
    save_machine(m);
  } catch (const UserError&) {
    // A read-only cache directory costs a re-probe next time, not this answer.
  }
  return m;
}

}  // namespace kiln::analysis
