// kiln bench: latency of the compiled model (median and min over --runs after --warmup).
// --kernels adds each kernel's median time, compulsory bytes, achieved GB/s and, for kernels
// without a contraction, the share of the machine's probed bandwidth (src/analysis).
// --compare runs kiln fused, kiln --no-fusion and ONNX Runtime (bench/ort_runner.py, driven over a
// pipe) interleaved in one loop on the same inputs and thread count, so machine noise hits all
// three alike, and prints the ratios.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "analysis/kernel_timing.h"
#include "analysis/machine_probe.h"
#include "cli.h"
#include "runtime/executable.h"
#include "support/npy.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

using analysis::CallerBuffers;

struct Stats {
  std::vector<double> ms;
  double median() const { return analysis::median(ms); }
  double min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }
};

double time_ms(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// ONNX Runtime driven over pipes (bench/ort_runner.py).
class OrtRunner {
 public:
  OrtRunner(const std::string& model, int threads, const TensorMap& inputs, const std::string& tmpdir) {
    std::vector<std::string> args = {python(), script(), model, std::to_string(threads)};
    for (const auto& [name, t] : inputs) {
      std::string path = (fs::path(tmpdir) / (std::to_string(args.size()) + ".npy")).string();
      write_npy(path, t);
      args.push_back(name + "=" + path);
    }
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) user_error("--compare: cannot create pipes");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      std::vector<char*> argv;
      for (auto& s : args) argv.push_back(s.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::printf("error cannot start %s\n", argv[0]);
      _exit(1);
    }
    close(to_child[0]);
    close(from_child[1]);
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    std::string first = line();
    if (first.rfind("ready", 0) != 0) user_error("--compare: ONNX Runtime failed: ", first);
    version_ = first.size() > 6 ? first.substr(6) : "?";
  }
  ~OrtRunner() {
    if (in_) {
      std::fputs("quit\n", in_);
      std::fclose(in_);
    }
    if (out_) std::fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  double run() {
    std::fputs("run\n", in_);
    std::fflush(in_);
    std::string l = line();
    try {
      return std::stod(l);
    } catch (const std::exception&) {
      user_error("--compare: ONNX Runtime failed: ", l);
    }
  }
  const std::string& version() const { return version_; }

 private:
  std::string line() {
    char buf[4096];
    if (!std::fgets(buf, sizeof buf, out_)) return "error ONNX Runtime process ended";
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  static std::string python() {
    const char* p = std::getenv("KILN_ORT_PYTHON");
    return p ? p : "python3";
  }
  static std::string script() {
    const char* s = std::getenv("KILN_ORT_RUNNER");
    if (s) return s;
    // The runner lives in the source tree next to the build directory the binary came from.
    for (fs::path p : {fs::path(KILN_SOURCE_DIR) / "bench/ort_runner.py", fs::path("bench/ort_runner.py")})
      if (fs::exists(p)) return p.string();
    user_error("--compare: bench/ort_runner.py not found (set KILN_ORT_RUNNER)");
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::string version_;
};

// Per-kernel report of --kernels.
//
// Bytes are compulsory traffic: every group input (activations and weights alike) read once and
// every output written once, at their dtype's size. The yardstick is the probed bandwidth of the
// level those bytes fit (MachineModel::level_for: DRAM beyond the L3 size, L3 beyond the L2s of
// the threads, else L2), with the N-thread figure when the model runs on more than one thread;
// triad bandwidth (streams read and written), or read bandwidth when the outputs are under 10 %
// of the bytes (reductions). Contractions are compute-bound by design and get no percentage.
struct KernelRow {
  std::string name, kind, level;
  bool generated = false, contraction = false;
  double median_ms = 0, gbps = 0, yardstick_gbps = 0, pct = 0;
  int64_t bytes = 0;
};

std::vector<KernelRow> kernel_rows(const runtime::Executable& ex, const std::vector<double>& median_ms,
                                   const analysis::MachineModel& m, int threads) {
  std::vector<KernelRow> rows;
  for (size_t k = 0; k < ex.plan().groups.size(); ++k) {
    const FusionGroup& grp = ex.plan().groups[k];
    if (!grp.counts_as_kernel()) continue;
    KernelRow r;
    r.name = ex.kernels()[k].name;
    r.kind = group_kind_name(grp.kind);
    r.generated = ex.kernels()[k].generated;
    r.contraction = grp.kind == GroupKind::Contraction;
    r.median_ms = median_ms[k];
    int64_t out_bytes = 0;
    for (const Value* v : grp.inputs) r.bytes += value_bytes(v);
    for (const Value* v : grp.outputs) out_bytes += value_bytes(v);
    r.bytes += out_bytes;
    r.gbps = r.median_ms > 0 ? double(r.bytes) / (r.median_ms * 1e-3) / 1e9 : 0;
    r.level = m.level_for(r.bytes, threads);
    r.yardstick_gbps = m.bandwidth_for(r.bytes, threads, /*reads_only=*/out_bytes * 10 < r.bytes);
    r.pct = r.yardstick_gbps > 0 ? 100 * r.gbps / r.yardstick_gbps : 0;
    rows.push_back(r);
  }
  return rows;
}

void print_kernel_rows(const std::vector<KernelRow>& rows, const analysis::MachineModel& m, int threads) {
  const bool one = threads <= 1;
  std::printf("\nmachine (kiln probe, %s): DRAM triad %.1f GB/s, L3 triad %.1f GB/s, L2 triad %.1f GB/s (%d thread%s)\n",
              m.probed_at.c_str(), (one ? m.dram_1t : m.dram_nt).triad_gbps, (one ? m.l3_1t : m.l3_nt).triad_gbps,
              (one ? m.l2_1t : m.l2_nt).triad_gbps, one ? 1 : m.threads, one ? "" : "s");
  std::printf("%-4s %-44s %-12s %-3s %9s %9s %8s %-5s %6s\n", "#", "kernel", "kind", "", "ms", "MB", "GB/s", "level",
              "% bw");
  int i = 0;
  for (const auto& r : rows) {
    char pct[16] = "-";
    if (!r.contraction) std::snprintf(pct, sizeof pct, "%.0f", r.pct);
    std::printf("%-4d %-44.44s %-12s %-3s %9.4f %9.3f %8.2f %-5s %6s\n", ++i, r.name.c_str(), r.kind.c_str(),
                r.generated ? "gen" : "lib", r.median_ms, double(r.bytes) / 1e6, r.gbps, r.level.c_str(), pct);
  }
  std::printf("(bytes: every input incl. weights and every output, once; %% bw: of the probed triad bandwidth of the\n"
              " level the bytes fit, read bandwidth for reductions; none for contractions)\n");
}

std::string kernel_rows_json(const std::vector<KernelRow>& rows) {
  std::string j = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    char b[512];
    // Kernel names are sanitised C identifiers: no JSON escaping needed.
    std::snprintf(b, sizeof b,
                  "%s{\"name\": \"%s\", \"kind\": \"%s\", \"generated\": %s, \"median_ms\": %.5f, \"bytes\": %lld, "
                  "\"gbps\": %.3f, \"level\": \"%s\", \"bandwidth_gbps\": %.3f, \"pct_of_bandwidth\": ",
                  i ? ", " : "", r.name.c_str(), r.kind.c_str(), r.generated ? "true" : "false", r.median_ms,
                  (long long)r.bytes, r.gbps, r.level.c_str(), r.yardstick_gbps);
    j += b;
    if (r.contraction) j += "null}";
    else {
      std::snprintf(b, sizeof b, "%.2f}", r.pct);
      j += b;
    }
  }
  return j + "]";
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"threads", "runs", "warmup", "input", "target"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "compare", "no-cache", "no-fusion", "kernels", "strict-fp"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("bench expects one MODEL.onnx");
  const std::string model = a.positional()[0];
  int runs = int(a.get_int("runs", 20)), warmup = int(a.get_int("warmup", 3));
  if (runs < 1 || warmup < 0) user_error("--runs must be >= 1 and --warmup >= 0");
  if (a.has("kernels") && a.has("compare")) user_error("--kernels and --compare do not combine (run them one at a time)");
  // Interleaved with ONNX Runtime (whose spinning is switched off), kiln's OpenMP workers must not
  // spin long either, or each side would steal the cores the other's next run needs; but sleeping
  // at once (OMP_WAIT_POLICY=PASSIVE) makes every kernel pay a thread wake-up. A short spin (about
  // a hundred microseconds) keeps the workers warm between one run's kernels only. libgomp reads
  // this when the first kernel module loads, so it is set before any is built; a user's value wins.
  if (a.has("compare")) setenv("GOMP_SPINCOUNT", "100000", /*overwrite=*/0);
  auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
  TensorMap inputs = analysis::fill_inputs(*g, analysis::read_input_specs(a.all("input")));
  runtime::BuildOptions bo = build_options(a);
  int threads = bo.threads > 0 ? bo.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  bo.threads = threads;
  Progress progress;
  auto fused = runtime::Executable::build(g->clone(), bo, progress.callback());
  progress.done();
  warn_library_kernels(*fused);

  if (!a.has("compare")) {
    const bool per_kernel = a.has("kernels");
    // The machine model first: a probe (when nothing is cached) must not overlap the timed runs.
    std::optional<analysis::MachineModel> machine;
    if (per_kernel) {
      if (!analysis::load_cached_machine()) std::fprintf(stderr, "kiln: probing this machine (cached afterwards)...\n");
      analysis::ProbeOptions po;
      po.threads = threads;
      machine = analysis::machine_model(false, po);
    }
    analysis::TimedRuns t = analysis::time_runs(*fused, inputs, runs, warmup, per_kernel);
    Stats s{t.run_ms};
    const int clean_runs = t.undisturbed_runs;
    std::vector<KernelRow> rows;
    if (per_kernel) rows = kernel_rows(*fused, t.kernel_medians(), *machine, threads);
    if (a.has("json")) {
      std::printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"runs\": %d, \"threads\": %d", s.median(), s.min(), runs,
                  threads);
      if (per_kernel) std::printf(", \"undisturbed_runs\": %d, \"kernels\": %s", clean_runs, kernel_rows_json(rows).c_str());
      std::printf("}\n");
    } else {
      std::printf("%s: median %.3f ms, min %.3f ms over %d runs (%d threads, %d kernels)\n", model.c_str(),
                  s.median(), s.min(), runs, threads, fused->plan().kernel_count());
      if (per_kernel) {
        print_kernel_rows(rows, *machine, threads);
        std::printf("kernel times: medians over %s (%d of %d runs undisturbed by other processes)\n",
                    t.kernels_from_undisturbed ? "the undisturbed runs" : "all runs", clean_runs, runs);
      }
    }
    return 0;
  }

  runtime::BuildOptions nb = bo;
  nb.fusion.enabled = false;
  auto unfused = runtime::Executable::build(g->clone(), nb, progress.callback());
  progress.done();
  CallerBuffers fio(*fused, inputs), uio(*unfused, inputs);
  std::string tmp = (fs::temp_directory_path() / ("kiln_bench_" + std::to_string(getpid()))).string();
  fs::create_directories(tmp);
  Stats sk, su, so;
  std::string ort_version;
  try {
    OrtRunner ort(fs::absolute(model).string(), threads, inputs, tmp);
    ort_version = ort.version();
    for (int i = 0; i < warmup; ++i) {
      fio.run(*fused);
      uio.run(*unfused);
      ort.run();
    }
    // Interleaved: one run of each per round, so drift and noise affect all three alike; the
    // order rotates every round so none always follows the same neighbour.
    for (int i = 0; i < runs; ++i)
      for (int j = 0; j < 3; ++j) switch ((i + j) % 3) {
          case 0: sk.ms.push_back(time_ms([&] { fio.run(*fused); })); break;
          case 1: su.ms.push_back(time_ms([&] { uio.run(*unfused); })); break;
          default: so.ms.push_back(ort.run()); break;
        }
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
  fs::remove_all(tmp);
  if (a.has("json")) {
    std::printf("{\"threads\": %d, \"runs\": %d, \"kiln\": {\"median_ms\": %.4f, \"min_ms\": %.4f}, "
                "\"kiln_no_fusion\": {\"median_ms\": %.4f, \"min_ms\": %.4f}, \"onnxruntime\": {\"version\": \"%s\", "
                "\"median_ms\": %.4f, \"min_ms\": %.4f}}\n",
                threads, runs, sk.median(), sk.min(), su.median(), su.min(), ort_version.c_str(), so.median(), so.min());
    return 0;
  }
  std::printf("%s, %d threads, %d interleaved runs (medians; min in brackets)\n", model.c_str(), threads, runs);
  std::printf("  kiln fused       %9.3f ms  [%8.3f]  %d kernels\n", sk.median(), sk.min(), fused->plan().kernel_count());
  std::printf("  kiln --no-fusion %9.3f ms  [%8.3f]  %d kernels\n", su.median(), su.min(), unfused->plan().kernel_count());
  std::printf("  onnxruntime %-5s %8.3f ms  [%8.3f]\n", ort_version.c_str(), so.median(), so.min());
  std::printf("  fused / unfused = %.2f, kiln / onnxruntime = %.2f\n", sk.median() / su.median(), sk.median() / so.median());
  return 0;
}

}  // namespace kiln::cli
