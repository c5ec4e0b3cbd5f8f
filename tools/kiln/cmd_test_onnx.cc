// kiln test-onnx: runs ONNX backend-test folders (model.onnx + test_data_set_*/input_N.pb,
// output_N.pb) through import, simplification and the reference executor (or, with --fused, the
// lowered graph's fusion plan kernel by kernel; with --compiled, the compiled Executable), and
// compares outputs.
//
// Each test runs in a forked child so a crash or a hang in one kernel is reported as that test's
// failure instead of ending the whole run. Tolerances (per dtype, |got - want| <= atol + rtol*|want|):
// float32/float64 rtol 1e-3 atol 1e-7 (the ONNX backend test runner's defaults), float16/bfloat16
// rtol 1e-2 atol 1e-3 (their ~3 significant digits), integers and bool exact. NaN matches NaN.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "cli.h"
#include "fusion/partitioner.h"
#include "fusion/plan_executor.h"
#include "reference/executor.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

constexpr int kTestTimeoutSeconds = 300;

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dt) {
  switch (dt) {
    case DType::Float32:
    case DType::Float64: return {1e-3, 1e-7};
    case DType::Float16:
    case DType::BFloat16: return {1e-2, 1e-3};
    default: return {0, 0};
  }
}

// "" when got matches want, else the reason.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return cat("dtype ", dtype_name(got.dtype()), ", expected ", dtype_name(want.dtype()));
  if (got.shape() != want.shape()) return cat("shape ", shape_str(got.shape()), ", expected ", shape_str(want.shape()));
  Tolerance tol = tolerance_for(want.dtype());
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.as_double(i), w = want.as_double(i);
    bool ok;
    if (std::isnan(w)) ok = std::isnan(g);
    else if (std::isinf(w)) ok = g == w;
    else ok = std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
      if (!std::isnan(g - w)) worst = std::max(worst, std::fabs(g - w));
    }
  }
  if (!bad) return "";
  return cat(bad, " of ", want.numel(), " elements differ (first at ", first, ": got ", got.as_double(first),
             ", expected ", want.as_double(first), "; max abs diff ", worst, ")");
}

std::vector<fs::path> sorted_matching(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> r;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) r.push_back(e.path());
  // input_10 after input_9: sort by the number after the prefix when there is one.
  std::sort(r.begin(), r.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      std::string s = p.stem().string().substr(prefix.size());
      return s.empty() || !std::isdigit(s[0]) ? -1L : std::stol(s);
    };
    return num(a) != num(b) ? num(a) < num(b) : a < b;
  });
  return r;
}

// numpy has no bfloat16, so ONNX 1.12's backend test data stores bfloat16 tensors as uint16 bit
// patterns; read such a tensor as the bfloat16 the model declares.
Tensor as_bfloat16_if_needed(const Tensor& t, DType want) {
  if (want != DType::BFloat16 || t.dtype() != DType::UInt16) return t;
  Tensor r(DType::BFloat16, t.shape());
  if (t.nbytes()) std::memcpy(r.raw(), t.raw(), t.nbytes());
  return r;
}

// Runs one test folder in this process; returns "" on success or the failure reason.
// CompiledStrict: compiled with --strict-fp, and every kernel compared bit for bit with the
// reference executor (kiln run --check --strict-fp) besides the outputs with the test's.
enum class Mode { Reference, FusedPlan, Compiled, CompiledStrict };

// Compiled mode: the op types that ran as library kernels (outside generated code), sorted, unique.
std::string g_device;  // --device: where compiled runs put their generated kernels ("": the host)

std::string run_test(const fs::path& dir, Mode mode, std::set<std::string>* library) {
  const std::string& device = g_device;
  bool fused = mode != Mode::Reference;
  try {
    std::vector<std::string> valued = kModelValuedOptions;
    valued.push_back("device");
    // --device D: the compiled run's generated kernels on device D (runtime/device.h).
    Args none(device.empty() ? std::vector<std::string>{} : std::vector<std::string>{"--device", device}, valued,
              kModelFlags);
    std::vector<std::string> strict_flags = kModelFlags;
    strict_flags.push_back("strict-fp");
    Args strict({"--strict-fp"}, kModelValuedOptions, strict_flags);
    PipelineOptions popts;
    popts.strict_fp = mode == Mode::CompiledStrict;
    auto g = load_model((dir / "model.onnx").string(), none, popts, /*lower=*/fused);
    auto sets = sorted_matching(dir, "test_data_set_");
    if (sets.empty()) return "no test_data_set_* folders";
    for (const auto& set : sets) {
      TensorMap inputs;
      auto in_files = sorted_matching(set, "input_");
      for (size_t i = 0; i < in_files.size(); ++i) {
        std::string name;
        Tensor t = read_tensor_proto_file(in_files[i].string(), &name);
        Value* v = g->find_value(name);
        if (!v || !v->is_graph_input()) {
          if (i >= g->inputs().size()) return cat(in_files[i].filename().string(), " has no matching model input");
          v = g->inputs()[i];
        }
        inputs[v->name()] = as_bfloat16_if_needed(t, v->dtype());
      }
      // --fused executes the fusion plan kernel by kernel (each sees only what the plan stores),
      // so a wrong plan shows up as a wrong output or an internal error.
      TensorMap outputs;
      if (mode == Mode::Compiled || mode == Mode::CompiledStrict) {
        std::vector<std::string> lib;
        const bool st = mode == Mode::CompiledStrict;
        outputs = run_compiled(g->clone(), st ? strict : none, inputs, /*check=*/st, &lib);
        library->insert(lib.begin(), lib.end());
      } else {
        outputs = fused ? run_plan_reference(*g, partition(*g), inputs) : run_reference(*g, inputs);
      }
      auto out_files = sorted_matching(set, "output_");
      if (out_files.size() != g->outputs().size())
        return cat(set.filename().string(), " has ", out_files.size(), " outputs, model has ", g->outputs().size());
      for (size_t i = 0; i < out_files.size(); ++i) {
        const std::string& oname = g->outputs()[i]->name();
        Tensor want = as_bfloat16_if_needed(read_tensor_proto_file(out_files[i].string()), g->outputs()[i]->dtype());
        std::string why = compare(outputs.at(oname), want);
        if (!why.empty()) return cat(set.filename().string(), " output '", oname, "': ", why);
      }
    }
    return "";
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    return msg;
  }
}

std::string join(const std::set<std::string>& s) {
  std::string r;
  for (const auto& x : s) r += (r.empty() ? "" : ",") + x;
  return r;
}

// Runs run_test in a child process with a time limit. The child answers "P<library ops>\n" or
// "F<library ops>\n<why>".
std::string run_test_isolated(const fs::path& dir, Mode fused, std::set<std::string>* library) {
  int fds[2];
  if (pipe(fds) != 0) return run_test(dir, fused, library);
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0) return run_test(dir, fused, library);
  if (pid == 0) {
    close(fds[0]);
    std::set<std::string> lib;
    std::string r = run_test(dir, fused, &lib);
    std::string msg = (r.empty() ? "P" : "F") + join(lib) + "\n" + r;
    ssize_t off = 0;
    while (off < ssize_t(msg.size())) {
      ssize_t w = write(fds[1], msg.data() + off, msg.size() - size_t(off));
      if (w <= 0) break;
      off += w;
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  bool timed_out = false;
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    int pr = poll(&p, 1, kTestTimeoutSeconds * 1000);
    if (pr == 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    msg.append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return cat("timed out after ", kTestTimeoutSeconds, " s");
  if (WIFSIGNALED(status)) return cat("crashed (signal ", WTERMSIG(status), ", ", strsignal(WTERMSIG(status)), ")");
  if (msg.empty()) return "test process ended without a result";
  size_t nl = msg.find('\n');
  if (nl == std::string::npos) return "test process ended without a result";
  std::string ops = msg.substr(1, nl - 1);
  for (size_t b = 0; !ops.empty() && b <= ops.size();) {
    size_t e = std::min(ops.find(',', b), ops.size());
    library->insert(ops.substr(b, e - b));
    b = e + 1;
  }
  return msg[0] == 'P' ? "" : msg.substr(nl + 1);
}

// Test folders named by the arguments: a folder with model.onnx is one test; otherwise each
// subfolder with a model.onnx is.
std::vector<fs::path> collect_tests(const std::vector<std::string>& dirs) {
  std::vector<fs::path> tests;
  for (const auto& d : dirs) {
    fs::path p(d);
    if (fs::exists(p / "model.onnx")) {
      tests.push_back(p);
      continue;
    }
    if (!fs::is_directory(p)) user_error(d, ": not a test folder (no model.onnx) nor a folder of tests");
    std::vector<fs::path> sub;
    for (const auto& e : fs::directory_iterator(p))
      if (fs::exists(e.path() / "model.onnx")) sub.push_back(e.path());
    std::sort(sub.begin(), sub.end());
    tests.insert(tests.end(), sub.begin(), sub.end());
  }
  return tests;
}

// "node/test_abs": the test folder and its parent, unique across the backend-test data folders.
std::string test_id(const fs::path& dir) {
  fs::path p = fs::weakly_canonical(dir);
  return p.parent_path().filename().string() + "/" + p.filename().string();
}

}  // namespace

int cmd_test_onnx(const std::vector<std::string>& argv) {
  Args a(argv, {"expect", "write-passed", "expect-library", "write-library", "device"},
         {"verbose", "fused", "compiled", "strict-fp"});
  if (a.has("device") && !a.has("compiled")) user_error("--device needs --compiled");
  g_device = a.get("device");
  if (a.has("fused") && a.has("compiled")) user_error("choose one of --fused and --compiled");
  if (a.has("strict-fp") && !a.has("compiled")) user_error("--strict-fp needs --compiled");
  Mode mode = a.has("compiled") ? (a.has("strict-fp") ? Mode::CompiledStrict : Mode::Compiled)
              : a.has("fused")  ? Mode::FusedPlan
                                : Mode::Reference;
  if (a.positional().empty()) user_error("test-onnx expects one or more test folders");
  auto tests = collect_tests(a.positional());
  std::set<std::string> expected;
  if (a.has("expect")) {
    std::ifstream f(a.get("expect"));
    if (!f) user_error(a.get("expect"), ": cannot open file");
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && line[0] != '#') expected.insert(line);
  }
  // --expect-library FILE (compiled mode): lines "TEST_ID OP,OP" naming the tests allowed to run
  // library kernels (ops with no loop spelling) and which ops; any other library kernel, or a
  // listed one that is now generated, fails the run, so the list stays exact.
  std::map<std::string, std::string> expected_lib;
  if (a.has("expect-library")) {
    std::ifstream f(a.get("expect-library"));
    if (!f) user_error(a.get("expect-library"), ": cannot open file");
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      size_t sp = line.find(' ');
      expected_lib[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
    }
  }
  std::map<std::string, std::string> library_of;
  int library_mismatches = 0, library_tests = 0;
  std::set<std::string> passed;
  int failed = 0, regressions = 0;
  for (const auto& t : tests) {
    std::string id = test_id(t);
    std::set<std::string> lib;
    std::string why = run_test_isolated(t, mode, &lib);
    if (!lib.empty()) {
      library_of[id] = join(lib);
      ++library_tests;
    }
    if (a.has("expect-library") && why.empty()) {
      auto it = expected_lib.find(id);
      std::string want = it == expected_lib.end() ? "" : it->second;
      if (want != join(lib)) {
        ++library_mismatches;
        std::cout << "LIBRARY " << id << ": runs library kernels for {" << join(lib) << "}, expected {" << want
                  << "} (tests/onnx/expected_library.txt)\n";
      }
    }
    if (why.empty()) {
      passed.insert(id);
      if (a.has("verbose")) std::cout << "PASS " << id << "\n";
    } else {
      ++failed;
      bool reg = expected.count(id) != 0;
      regressions += reg;
      std::cout << (reg ? "REGRESSION " : "FAIL ") << id << ": " << why << "\n";
    }
    std::cout.flush();
  }
  if (a.has("write-passed")) {
    std::string path = a.get("write-passed"), tmp = path + ".kiln-tmp";
    {
      std::ofstream f(tmp);
      for (const auto& p : passed) f << p << "\n";
      if (!f) user_error(path, ": cannot write file");
    }
    fs::rename(tmp, path);
  }
  int missing = 0;
  if (a.has("expect")) {
    std::set<std::string> ran;
    for (const auto& t : tests) ran.insert(test_id(t));
    for (const auto& e : expected)
      if (!ran.count(e)) {
        ++missing;
        std::cout << "MISSING " << e << ": expected to pass but not found among the test folders\n";
      }
  }
  if (a.has("write-library")) {
    std::string path = a.get("write-library"), tmp = path + ".kiln-tmp";
    {
      std::ofstream f(tmp);
      f << "# Conformance tests whose compiled run has library kernels (ops with no loop spelling), and\n"
           "# which ops. Written by kiln test-onnx --compiled --write-library; checked by --expect-library.\n";
      for (const auto& [id, ops] : library_of) f << id << " " << ops << "\n";
      if (!f) user_error(path, ": cannot write file");
    }
    fs::rename(tmp, path);
  }
  std::cout << passed.size() << " passed, " << failed << " failed";
  if (mode == Mode::Compiled || mode == Mode::CompiledStrict)
    std::cout << "; " << library_tests << " ran library kernels";
  std::cout << "\n";
  if (library_mismatches) return 1;
  if (a.has("expect")) return regressions || missing ? 1 : 0;
  return failed ? 1 : 0;
}

}  // namespace kiln::cli
