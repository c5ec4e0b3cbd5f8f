// kiln bench: latency of the compiled model (median and min over --runs after --warmup).
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
#include <random>
#include <thread>

#include "cli.h"
#include "runtime/executable.h"
#include "support/npy.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

struct Stats {
  std::vector<double> ms;
  double median() const {
    auto v = ms;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
  double min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }
};

double time_ms(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Inputs for benchmarking: the given .npy files, otherwise fixed-seed values (uniform in [-1, 1)
// for floats, small non-negative integers otherwise).
TensorMap bench_inputs(const Graph& g, const Args& a) {
  TensorMap in;
  for (const auto& spec : a.all("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos) user_error("--input expects NAME=FILE.npy");
    in[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
  }
  std::mt19937 rng(1234);
  for (Value* v : g.inputs()) {
    if (in.count(v->name())) continue;
    Tensor t(v->dtype(), v->shape());
    if (v->dtype() == DType::Float32) {
      std::uniform_real_distribution<float> u(-1, 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    } else if (is_integer(v->dtype())) {
      Tensor r = Tensor(DType::Int64, v->shape());
      for (int64_t i = 0; i < t.numel(); ++i) r.data<int64_t>()[i] = int64_t(rng() % 4);
      t = r.cast(v->dtype());
    }
    in[v->name()] = t;
  }
  return in;
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

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"threads", "runs", "warmup", "input", "target"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"json", "compare", "no-cache", "no-fusion"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("bench expects one MODEL.onnx");
  const std::string model = a.positional()[0];
  int runs = int(a.get_int("runs", 20)), warmup = int(a.get_int("warmup", 3));
  if (runs < 1 || warmup < 0) user_error("--runs must be >= 1 and --warmup >= 0");
  // Interleaved with ONNX Runtime (whose spinning is switched off), kiln's OpenMP workers must not
  // spin either, or each side would steal the cores the other's next run needs. libgomp reads
  // this when the first kernel module loads, so it is set before any is built; a user's value wins.
  if (a.has("compare")) setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
  TensorMap inputs = bench_inputs(*g, a);
  runtime::BuildOptions bo = build_options(a);
  int threads = bo.threads > 0 ? bo.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  bo.threads = threads;
  auto fused = runtime::Executable::build(g->clone(), bo);

  if (!a.has("compare")) {
    for (int i = 0; i < warmup; ++i) fused->run(inputs);
    Stats s;
    for (int i = 0; i < runs; ++i) s.ms.push_back(time_ms([&] { fused->run(inputs); }));
    if (a.has("json"))
      std::printf("{\"median_ms\": %.4f, \"min_ms\": %.4f, \"runs\": %d, \"threads\": %d}\n", s.median(), s.min(),
                  runs, threads);
    else
      std::printf("%s: median %.3f ms, min %.3f ms over %d runs (%d threads, %d kernels)\n", model.c_str(),
                  s.median(), s.min(), runs, threads, fused->plan().kernel_count());
    return 0;
  }

  runtime::BuildOptions nb = bo;
  nb.fusion.enabled = false;
  auto unfused = runtime::Executable::build(g->clone(), nb);
  std::string tmp = (fs::temp_directory_path() / ("kiln_bench_" + std::to_string(getpid()))).string();
  fs::create_directories(tmp);
  Stats sk, su, so;
  std::string ort_version;
  try {
    OrtRunner ort(fs::absolute(model).string(), threads, inputs, tmp);
    ort_version = ort.version();
    for (int i = 0; i < warmup; ++i) {
      fused->run(inputs);
      unfused->run(inputs);
      ort.run();
    }
    // Interleaved: one run of each per round, so drift and noise affect all three alike; the
    // order rotates every round so none always follows the same neighbour.
    for (int i = 0; i < runs; ++i)
      for (int j = 0; j < 3; ++j) switch ((i + j) % 3) {
          case 0: sk.ms.push_back(time_ms([&] { fused->run(inputs); })); break;
          case 1: su.ms.push_back(time_ms([&] { unfused->run(inputs); })); break;
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
