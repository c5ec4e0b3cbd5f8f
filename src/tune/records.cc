#include "tune/records.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "analysis/machine_probe.h"
#include "runtime/jit.h"
#include "runtime/jit_cache.h"
#include "support/error.h"
#include "support/json.h"
#include "tune/schedule_fields.h"
#include "support/clock.h"

namespace kiln::tune {

namespace fs = std::filesystem;

namespace {

// The ISA extensions kiln's generated code is specialised for (the micro-kernels' AVX-512F and
// AVX2+FMA paths, docs/codegen.md); a record from a CPU with other ones is for other code.
std::string isa_flags() {
  std::string r;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  auto add = [&](const char* name, bool on) {
    if (on) r += (r.empty() ? "" : ",") + std::string(name);
  };
  add("avx512f", __builtin_cpu_supports("avx512f"));
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
#endif
  return r.empty() ? "scalar" : r;
}

}  // namespace

std::string entry_number(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string MachineKey::str() const { return cpu + " (" + isa + ", " + std::to_string(threads) + " threads)"; }

MachineKey current_machine(int threads) {
  MachineKey m;
  m.cpu = analysis::current_cpu_model();
  m.isa = isa_flags();
  m.threads = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  return m;
}

std::string to_json_line(const Record& r) {
  std::ostringstream os;
  os << "{\"schema\": " << kRecordsSchema << ", \"signature\": " << json_quote(r.signature)
     << ", \"ops\": " << json_quote(r.ops) << ", \"emitter\": " << json_quote(r.emitter)
     << ", \"cpu\": " << json_quote(r.machine.cpu) << ", \"isa\": " << json_quote(r.machine.isa)
     << ", \"threads\": " << r.machine.threads << ", \"target\": " << json_quote(r.target)
     << ", \"improved\": " << (r.improved ? "true" : "false") << ", \"default_ms\": " << entry_number(r.default_ms)
     << ", \"tuned_ms\": " << entry_number(r.tuned_ms) << ", \"trials\": " << r.trials
     << ", \"date\": " << json_quote(r.date.empty() ? iso_utc_now() : r.date);
  if (r.is_fusion())
    os << ", \"graph\": " << json_quote(r.graph) << ", \"apart_a\": " << json_quote(r.apart_a)
       << ", \"apart_b\": " << json_quote(r.apart_b);
  for (const auto& [k, v] : r.fields) os << ", " << json_quote("s:" + k) << ": " << v;
  os << "}";
  return os.str();
}

std::optional<std::map<std::string, JsonScalar>> parse_entry(const std::string& line, int schema, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<std::map<std::string, JsonScalar>> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  auto obj = parse_flat_object(line);
  if (!obj) return fail("not a JSON object of strings and numbers");
  auto got = flat_get<double>(*obj, "schema");
  if (!got) return fail("no \"schema\"");
  if (*got != schema)
    return fail("schema " + entry_number(*got) + " (this kiln reads schema " + std::to_string(schema) + ")");
  return obj;
}

std::optional<Record> from_json_line(const std::string& line, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<Record> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  auto obj = parse_entry(line, kRecordsSchema, why);
  if (!obj) return std::nullopt;
  auto num = [&](const char* k) { return flat_get<double>(*obj, k); };
  auto str = [&](const char* k) { return flat_get<std::string>(*obj, k); };
  Record r;
  auto sig = str("signature"), ops = str("ops"), em = str("emitter"), cpu = str("cpu"), isa = str("isa"),
       target = str("target"), date = str("date");
  auto threads = num("threads"), dms = num("default_ms"), tms = num("tuned_ms"), trials = num("trials");
  auto improved = obj->find("improved");
  if (!sig || sig->empty() || !ops || !em || !cpu || !isa || !target || !date || !threads || !dms || !tms || !trials ||
      improved == obj->end() || !std::holds_alternative<bool>(improved->second))
    return fail("a field is missing or of the wrong kind");
  if (*threads < 1 || *threads > 4096 || std::floor(*threads) != *threads || !(*dms >= 0) || !(*tms >= 0))
    return fail("a field is out of range");
  r.signature = *sig;
  r.ops = *ops;
  r.emitter = *em;
  r.machine = {*cpu, *isa, int(*threads)};
  r.target = *target;
  r.improved = std::get<bool>(improved->second);
  r.default_ms = *dms;
  r.tuned_ms = *tms;
  r.trials = int(*trials);
  r.date = *date;
  if (r.is_fusion()) {
    auto graph = str("graph"), a = str("apart_a"), b = str("apart_b");
    if (!graph || graph->empty() || !a || a->empty() || !b || b->empty())
      return fail("a fusion record needs \"graph\", \"apart_a\" and \"apart_b\"");
    r.graph = *graph;
    r.apart_a = *a;
    r.apart_b = *b;
  }
  for (const auto& [k, v] : *obj) {
    if (k.rfind("s:", 0) != 0) continue;
    const std::string field = k.substr(2);
    if (!get_field(loop::Schedule{}, field)) return fail("unknown schedule field '" + field + "'");
    if (!std::holds_alternative<double>(v)) return fail("schedule field '" + field + "' is not a number");
    const double x = std::get<double>(v);
    // Integers a Schedule field can hold (int fields: within int; all of them non-negative).
    if (!(x >= 0 && x <= 9.0e15) || std::floor(x) != x) return fail("schedule field '" + field + "' is out of range");
    if (field == "unroll" || field.rfind("contraction.mr", 0) == 0 || field == "contraction.nr")
      if (x > 1 << 20) return fail("schedule field '" + field + "' is out of range");
    r.fields[field] = int64_t(x);
  }
  return r;
}

loop::Schedule record_schedule(const Record& r, const Target& target) {
  loop::Schedule s = loop::Schedule::for_target(target);
  for (const auto& [k, v] : r.fields) set_field(s, k, v);
  return s;
}

void read_json_lines(const std::string& path, const std::string& what, const std::string& entry, const MachineKey* machine,
                     const std::function<std::optional<MachineKey>(const std::string& line, std::string* why)>& parse,
                     const std::function<void()>& keep, std::vector<std::string>& warnings) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return;
  std::ifstream f(path);
  if (!f) user_error(path, ": cannot read the ", what, " file");
  std::string line, first_bad, foreign;
  int bad = 0, other = 0, n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string why;
    const std::optional<MachineKey> of = parse(line, &why);
    if (!of) {
      if (!bad++) first_bad = "line " + std::to_string(n) + ": " + why;
      continue;
    }
    if (machine && !(*of == *machine)) {
      // Another thread count on this CPU is the same database used at another --threads: skipped
      // silently. Another CPU or ISA is an entry copied from elsewhere: worth a warning.
      const bool this_cpu = of->cpu == machine->cpu && of->isa == machine->isa;
      if (!this_cpu && !other++) foreign = of->str();
      continue;
    }
    keep();
  }
  if (f.bad()) user_error(path, ": cannot read the ", what, " file");
  if (bad) warnings.push_back(cat(path, ": ignored ", bad, " line(s) that are not ", what, " (first: ", first_bad, ")"));
  if (other)
    warnings.push_back(cat(path, ": ignored ", other, " ", entry, "(s) of another machine (first: ", foreign, "; this is ",
                           machine->str(), ")"));
}

RecordsFile read_records(const std::string& path, const MachineKey* machine) {
  RecordsFile out;
  out.records = read_json_lines<Record>(path, "kiln tune records", "record", machine, from_json_line, out.warnings);
  return out;
}

void write_text_atomically(const std::string& path, const std::string& text, const std::string& what) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      user_error(path, ": cannot write the ", what, " file");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    user_error(path, ": cannot write the ", what, " file (", ec.message(), ")");
  }
}

void write_records(const std::string& path, const std::vector<Record>& records) {
  std::string text;
  for (const Record& r : records) text += to_json_line(r) + "\n";
  write_text_atomically(path, text, "records");
}

namespace {
bool same_key(const Record& a, const Record& b) {
  return a.signature == b.signature && a.machine == b.machine && a.target == b.target;
}
double speedup(const Record& r) { return r.improved && r.tuned_ms > 0 ? r.default_ms / r.tuned_ms : 1.0; }
}  // namespace

void upsert_record(std::vector<Record>& records, const Record& r) {
  for (Record& x : records)
    if (same_key(x, r)) {
      x = r;
      return;
    }
  records.push_back(r);
}

std::vector<Record> merge_records(const std::vector<Record>& a, const std::vector<Record>& b) {
  std::vector<Record> out;
  for (const auto* list : {&a, &b})
    for (const Record& r : *list) {
      auto it = std::find_if(out.begin(), out.end(), [&](const Record& x) { return same_key(x, r); });
      if (it == out.end()) out.push_back(r);
      else if (speedup(r) > speedup(*it)) *it = r;
    }
  return out;
}

std::string default_records_path(std::string* why) {
  const std::string dir = runtime::default_cache_dir();
  const std::string w = runtime::jit_cache::why_not_private(dir);
  if (!w.empty()) {
    if (why) *why = w;
    return "";
  }
  return (fs::path(dir) / "tune_records.jsonl").string();
}

std::map<std::string, loop::Schedule> kernel_schedules(const std::vector<Record>& records, const MachineKey& machine,
                                                       const Target& target) {
  std::map<std::string, loop::Schedule> out;
  for (const Record& r : records)
    if (r.improved && !r.is_fusion() && r.machine == machine && r.target == target.name)
      out[r.signature] = record_schedule(r, target);
  return out;
}

}  // namespace kiln::tune
