// kiln bench: latency of the compiled model (median and min over --runs after --warmup).
// --kernels adds each kernel's median time, compulsory bytes, achieved GB/s and, for kernels
// without a contraction, the share of the machine's probed bandwidth (src/analysis).
// --compare runs kiln fused, kiln --no-fusion, ONNX Runtime and OpenVINO (when installed; each peer
// in its own bench/peer_runner.py process, driven over a pipe) in alternating blocks of runs on the
// same inputs and thread count, so machine noise hits all alike, and prints the ratios.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

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
#include "ir/parser.h"
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

// A peer runtime (ONNX Runtime, OpenVINO) in its own process, driven over pipes
// (bench/peer_runner.py): "block N" runs N inferences and answers their times.
class PeerRunner {
 public:
  // `required`: a peer that cannot start is an error; otherwise missing() says why it is absent.
  PeerRunner(const std::string& engine, const std::string& model, int threads, const std::vector<std::string>& feeds,
             bool required)
      : engine_(engine) {
    std::vector<std::string> args = {python(), script(), engine, model, std::to_string(threads)};
    args.insert(args.end(), feeds.begin(), feeds.end());
    int to_child[2], from_child[2];
    // A peer that dies (a crash, the OOM killer) closes its end of the pipe: writing to it must
    // fail with EPIPE, answered below with the peer's exit status, not kill kiln with SIGPIPE
    // (it ended `kiln bench --compare` on Swin-T silently with status 141).
    std::signal(SIGPIPE, SIG_IGN);
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
    if (first.rfind("ready", 0) == 0) {
      version_ = first.size() > 6 ? first.substr(6) : "?";
      return;
    }
    // An optional peer that is not installed or cannot load this model (OpenVINO refuses a
    // training-mode Dropout) is left out with the reason; the required one is an error.
    missing_ = first.rfind("missing ", 0) == 0 ? first.substr(8) : first.rfind("error ", 0) == 0 ? first.substr(6) : first;
    if (missing_.size() > 160) missing_ = missing_.substr(0, 157) + "...";
    if (required) user_error("--compare: ", engine, " failed: ", missing_);
  }
  ~PeerRunner() {
    if (in_) {
      std::fputs("quit\n", in_);
      std::fclose(in_);
    }
    if (out_) std::fclose(out_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  bool available() const { return missing_.empty(); }
  const std::string& missing() const { return missing_; }
  std::vector<double> block(int n) {
    std::fprintf(in_, "block %d\n", n);
    std::fflush(in_);
    std::string l = line();
    std::vector<double> ms;
    try {
      size_t pos = 0;
      while (pos < l.size()) {
        size_t used = 0;
        ms.push_back(std::stod(l.substr(pos), &used));
        pos += used;
        while (pos < l.size() && l[pos] == ' ') ++pos;
      }
    } catch (const std::exception&) {
      user_error("--compare: ", engine_, " failed: ", l);
    }
    if (int(ms.size()) != n) user_error("--compare: ", engine_, " failed: ", l);
    return ms;
  }
  const std::string& version() const { return version_; }

 private:
  std::string line() {
    char buf[4096];
    std::string s;
    while (std::fgets(buf, sizeof buf, out_)) {
      s += buf;
      if (!s.empty() && s.back() == '\n') break;
    }
    if (s.empty()) return "error the " + engine_ + " process ended" + exit_status();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
  // How the peer process ended (it has closed its output), e.g. " (killed by signal 9)".
  std::string exit_status() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, 0) != pid_) return "";
    pid_ = -1;
    if (WIFSIGNALED(status)) return cat(" (killed by signal ", WTERMSIG(status), ")");
    if (WIFEXITED(status)) return cat(" (exit status ", WEXITSTATUS(status), "; its error is on stderr above)");
    return "";
  }
  static std::string python() {
    const char* p = std::getenv("KILN_PEER_PYTHON");
    return p ? p : "python3";
  }
  static std::string script() {
    const char* s = std::getenv("KILN_PEER_RUNNER");
    if (s) return s;
    // The runner lives in the source tree next to the build directory the binary came from.
    for (fs::path p : {fs::path(KILN_SOURCE_DIR) / "bench/peer_runner.py", fs::path("bench/peer_runner.py")})
      if (fs::exists(p)) return p.string();
    user_error("--compare: bench/peer_runner.py not found (set KILN_PEER_RUNNER)");
  }
  std::string engine_, version_, missing_;
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
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

// kiln bench --dispatch: what one kernel dispatch costs through the executable. A chain of
// kDispatchKernels small elementwise kernels (Neg and Abs in turn, fusion off) runs as a model;
// its median time over the kernels is the per-kernel cost. With 1,024 floats a kernel is one
// serial vector loop: the executable's call and argument binding. With 4,096 floats (the smallest
// domain the elementwise emitter runs in parallel) each kernel also forks and joins the thread
// team. Either kernel's own work (4 or 16 KiB from L1) is some tens of nanoseconds.
constexpr int kDispatchKernels = 256;

int bench_dispatch(const Args& a) {
  if (!a.positional().empty()) user_error("bench --dispatch takes no model");
  const int runs = int(a.get_int("runs", 200)), warmup = int(a.get_int("warmup", 20));
  if (runs < 1 || warmup < 0) user_error("--runs must be >= 1 and --warmup >= 0");
  runtime::BuildOptions bo = build_options(a);
  bo.threads = bo.threads > 0 ? bo.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  bo.fusion.enabled = false;
  std::printf("kernel dispatch through the executable, %d threads (%d kernels, median of %d runs):\n", bo.threads,
              kDispatchKernels, runs);
  for (const int64_t n : {int64_t(1024), int64_t(4096)}) {
    const std::string t = "f32[" + std::to_string(n) + "]";
    std::string text = "graph main opset 13 (%v0: " + t + ") -> (%v" + std::to_string(kDispatchKernels) + ") {\n";
    for (int i = 0; i < kDispatchKernels; ++i)
      text += "  %v" + std::to_string(i + 1) + ": " + t + " = " + (i % 2 ? "Abs" : "Neg") + "(%v" + std::to_string(i) + ")\n";
    text += "}\n";
    auto ex = runtime::Executable::build(parse_graph(text), bo);
    KILN_CHECK(ex->plan().kernel_count() == kDispatchKernels, "bench --dispatch: ", ex->plan().kernel_count(),
               " kernels, expected ", kDispatchKernels);
    const TensorMap inputs = {{"v0", Tensor(DType::Float32, {n})}};
    const Stats st{analysis::time_runs(*ex, inputs, runs, warmup, false).run_ms};
    std::printf("  %-44s %7.3f us per kernel (min %.3f)\n",
                n < 4096 ? "serial kernel (1,024 floats)" : "parallel kernel (4,096 floats; fork + join)",
                st.median() * 1e3 / kDispatchKernels, st.min() * 1e3 / kDispatchKernels);
  }
  return 0;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"threads", "runs", "warmup", "input", "target", "device", "records"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "compare", "no-cache", "no-fusion", "kernels", "strict-fp", "no-records", "dispatch"});
  Args a(argv, valued, flags);
  if (a.has("dispatch")) return bench_dispatch(a);
  if (a.positional().size() != 1) user_error("bench expects one MODEL.onnx");
  const std::string model = a.positional()[0];
  int runs = int(a.get_int("runs", 20)), warmup = int(a.get_int("warmup", 3));
  if (runs < 1 || warmup < 0) user_error("--runs must be >= 1 and --warmup >= 0");
  if (a.has("kernels") && a.has("compare")) user_error("--kernels and --compare do not combine (run them one at a time)");
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
  // Every system in its own process as shipped (kiln here, each peer in bench/peer_runner.py),
  // in blocks of runs, the order of the blocks rotating every round, with a pause after each block
  // so that no side's spinning worker threads are still holding a core when the next one starts.
  // Medians over all runs of each system.
  Stats sk, su, so, sv;
  std::string ort_version, ov_version, ov_missing;
  constexpr int kBlock = 5;
  constexpr auto kPause = std::chrono::milliseconds(50);
  try {
    std::vector<std::string> feeds;
    for (const auto& [name, t] : inputs) {
      std::string path = (fs::path(tmp) / (std::to_string(feeds.size()) + ".npy")).string();
      write_npy(path, t);
      feeds.push_back(name + "=" + path);
    }
    const std::string abs_model = fs::absolute(model).string();
    PeerRunner ort("onnxruntime", abs_model, threads, feeds, /*required=*/true);
    PeerRunner ov("openvino", abs_model, threads, feeds, /*required=*/false);
    ort_version = ort.version();
    ov_version = ov.version();
    ov_missing = ov.missing();
    auto kiln_block = [&](CallerBuffers& io, runtime::Executable& ex, int n) {
      std::vector<double> ms;
      for (int r = 0; r < n; ++r) ms.push_back(time_ms([&] { io.run(ex); }));
      return ms;
    };
    const int systems = ov.available() ? 4 : 3;
    auto run_block = [&](int who, int n, bool keep) {
      std::vector<double> ms;
      switch (who) {
        case 0: ms = kiln_block(fio, *fused, n); break;
        case 1: ms = kiln_block(uio, *unfused, n); break;
        case 2: ms = ort.block(n); break;
        default: ms = ov.block(n); break;
      }
      if (keep) {
        Stats& s = who == 0 ? sk : who == 1 ? su : who == 2 ? so : sv;
        s.ms.insert(s.ms.end(), ms.begin(), ms.end());
      }
      std::this_thread::sleep_for(kPause);
    };
    for (int w = 0; w < systems; ++w) run_block(w, std::max(warmup, 1), false);
    for (int done = 0, round = 0; done < runs; done += kBlock, ++round) {
      const int n = std::min(kBlock, runs - done);
      for (int j = 0; j < systems; ++j) run_block((round + j) % systems, n, true);
    }
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
  fs::remove_all(tmp);
  const bool have_ov = !sv.ms.empty();
  if (a.has("json")) {
    std::printf("{\"threads\": %d, \"runs\": %d, \"kiln\": {\"median_ms\": %.4f, \"min_ms\": %.4f}, "
                "\"kiln_no_fusion\": {\"median_ms\": %.4f, \"min_ms\": %.4f}, \"onnxruntime\": {\"version\": \"%s\", "
                "\"median_ms\": %.4f, \"min_ms\": %.4f}, \"openvino\": ",
                threads, runs, sk.median(), sk.min(), su.median(), su.min(), ort_version.c_str(), so.median(), so.min());
    if (have_ov)
      std::printf("{\"version\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f}}\n", ov_version.c_str(), sv.median(),
                  sv.min());
    else
      std::printf("null}\n");
    return 0;
  }
  std::printf("%s, %d threads, %d runs each in alternating blocks of %d (medians; min in brackets)\n", model.c_str(),
              threads, runs, kBlock);
  std::printf("  kiln fused       %9.3f ms  [%8.3f]  %d kernels\n", sk.median(), sk.min(), fused->plan().kernel_count());
  std::printf("  kiln --no-fusion %9.3f ms  [%8.3f]  %d kernels\n", su.median(), su.min(), unfused->plan().kernel_count());
  std::printf("  onnxruntime %-5s %8.3f ms  [%8.3f]\n", ort_version.c_str(), so.median(), so.min());
  if (have_ov)
    std::printf("  openvino %-8s %8.3f ms  [%8.3f]\n", ov_version.c_str(), sv.median(), sv.min());
  else
    std::printf("  openvino: not run (%s)\n", ov_missing.c_str());
  std::printf("  fused / unfused = %.2f, kiln / onnxruntime = %.2f", sk.median() / su.median(), sk.median() / so.median());
  if (have_ov) std::printf(", kiln / openvino = %.2f", sk.median() / sv.median());
  std::printf("\n");
  return 0;
}

}  // namespace kiln::cli
