#include "analysis/kernel_timing.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "support/error.h"
#include "support/npy.h"

namespace kiln::analysis {

CallerBuffers::CallerBuffers(const runtime::Executable& ex, const TensorMap& inputs) {
  for (const Tensor* t : check_inputs(ex.graph(), inputs)) in.push_back(t->raw());
  for (const Value* o : ex.graph().outputs()) outs.emplace_back(o->dtype(), o->shape());
  for (Tensor& t : outs) out.push_back(t.raw());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

TensorMap read_input_specs(const std::vector<std::string>& specs) {
  TensorMap in;
  for (const auto& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos) user_error("--input expects NAME=FILE.npy");
    in[spec.substr(0, eq)] = read_npy(spec.substr(eq + 1));
  }
  return in;
}

TensorMap fill_inputs(const Graph& g, TensorMap in) {
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

std::vector<double> TimedRuns::kernel_medians() const {
  std::vector<double> m;
  for (const auto& s : kernel_ms) m.push_back(median(s));
  return m;
}

namespace {

long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_nivcsw;
}

}  // namespace

TimedRuns time_runs(runtime::Executable& ex, const TensorMap& inputs, int runs, int warmup, bool per_kernel) {
  ex.set_profiling(per_kernel);
  CallerBuffers io(ex, inputs);
  for (int i = 0; i < warmup; ++i) io.run(ex);
  TimedRuns t;
  const size_t groups = ex.plan().groups.size();
  std::vector<std::vector<double>> all(groups), clean(groups);
  for (int i = 0; i < runs; ++i) {
    const long csw = involuntary_switches();
    const auto t0 = std::chrono::steady_clock::now();
    io.run(ex);
    t.run_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!per_kernel) continue;
    const bool undisturbed = involuntary_switches() == csw;
    t.undisturbed_runs += undisturbed;
    for (size_t k = 0; k < groups; ++k) {
      all[k].push_back(ex.kernel_times_ms()[k]);
      if (undisturbed) clean[k].push_back(ex.kernel_times_ms()[k]);
    }
  }
  ex.set_profiling(false);
  if (per_kernel) {
    t.kernels_from_undisturbed = t.undisturbed_runs >= 3;
    t.kernel_ms = t.kernels_from_undisturbed ? std::move(clean) : std::move(all);
  }
  return t;
}

}  // namespace kiln::analysis
