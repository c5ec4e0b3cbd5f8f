#include "tune/measurer.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "support/error.h"
#include "tune/records.h"

namespace kiln::tune {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


}  // namespace

double relative_difference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return INFINITY;
  if (!is_float(want.dtype())) return std::memcmp(got.raw(), want.raw(), want.nbytes()) == 0 ? 0.0 : INFINITY;
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.as_double(i), w = want.as_double(i);
    if (std::isnan(w)) {
      if (!std::isnan(g)) return INFINITY;
      continue;
    }
    if (std::isinf(w)) {
      if (g != w) return INFINITY;
      continue;
    }
    if (!std::isfinite(g)) return INFINITY;
    diff = std::max(diff, std::fabs(g - w));
    mag = std::max(mag, std::fabs(w));
  }
  if (diff == 0) return 0;
  return mag > 0 ? diff / mag : INFINITY;
}

std::string measuring_machine() {
  const MachineKey m = current_machine(1);
  return m.cpu + "|" + m.isa;
}

LocalMeasurer::LocalMeasurer(int compile_jobs) : compile_jobs_(compile_jobs) {
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  std::string templ = (tmp / "kiln-tune-XXXXXX").string();
  if (!::mkdtemp(templ.data())) user_error("cannot create a private folder for tuning candidates in ", tmp.string());
  dir_ = templ;
}

LocalMeasurer::~LocalMeasurer() {
  std::error_code ec;
  fs::remove_all(dir_, ec);  // loaded objects stay mapped (RTLD_NODELETE): unlinking is safe
}

MeasureResult LocalMeasurer::measure(const MeasureRequest& req) {
  KILN_CHECK(req.kernels.size() == req.arguments.size(), "measure: ", req.kernels.size(), " kernels but ",
             req.arguments.size(), " argument lists");
  MeasureResult res;
  res.candidates.resize(req.kernels.size());
  res.machine = measuring_machine();
  if (req.kernels.empty()) return res;
  runtime::CompileOptions co = req.compile;
  co.cache_dir = dir_;
  co.use_cache = false;
  const auto t0 = Clock::now();
  const std::vector<std::unique_ptr<runtime::JitModule>> modules =
      runtime::JitModule::build_all(req.sources, co, compile_jobs_);
  res.compile_s = ms_since(t0) / 1e3;
  const auto t1 = Clock::now();
  // Every object has its own copy of the prelude's thread count.
  for (const auto& module : modules) {
    auto set_threads = reinterpret_cast<void (*)(int)>(reinterpret_cast<void*>(module->get("kiln_set_num_threads")));
    set_threads(std::max(1, req.threads));
  }
  // A candidate's function is in whichever object defines it (each module's lookup sees its own
  // object only: RTLD_LOCAL).
  auto find_kernel = [&](const std::string& name) -> runtime::KernelFn {
    for (const auto& module : modules)
      if (runtime::KernelFn fn = module->find(name)) return fn;
    user_error("kernel ", name, " is in none of the request's ", modules.size(), " sources");
  };

  struct Slot {
    runtime::KernelFn fn = nullptr;
    std::vector<Tensor> outs;
    std::vector<void*> args;
    int calls = 1;
  };
  std::vector<Slot> slots(req.kernels.size());
  const TimingProtocol& p = req.protocol;
  for (size_t c = 0; c < slots.size(); ++c) {
    Slot& s = slots[c];
    Measurement& m = res.candidates[c];
    s.fn = find_kernel(req.kernels[c]);
    // Arguments are the request's tensors (a kernel never writes its inputs); outputs are fresh,
    // filled with NaN so that an element the kernel fails to write is caught by the check.
    for (const Tensor& t : req.arguments[c]) s.args.push_back(const_cast<void*>(t.raw()));
    for (const Tensor& r : req.reference) {
      Tensor o(r.dtype(), r.shape());
      if (r.dtype() == DType::Float32) std::fill_n(o.data<float>(), o.numel(), NAN);
      s.outs.push_back(std::move(o));
    }
    for (Tensor& o : s.outs) s.args.push_back(o.raw());
    // The first call's outputs are checked: a candidate that computes something else is never timed.
    s.fn(s.args.data());
    for (size_t i = 0; i < s.outs.size(); ++i) {
      const double d = relative_difference(s.outs[i], req.reference[i]);
      m.max_rel_diff = std::max(m.max_rel_diff, d);
      const double tol = is_float(req.reference[i].dtype()) ? req.tolerance : 0.0;
      if (!(d <= tol)) m.error = cat("output ", i, " differs from the default schedule's by ", d, " (tolerance ", tol, ")");
    }
    if (!m.error.empty()) continue;
    double once = 0;
    for (int w = 0; w < std::max(1, p.warmup); ++w) {
      const auto tw = Clock::now();
      s.fn(s.args.data());
      once = ms_since(tw);
    }
    s.calls = std::clamp(int(std::ceil(p.min_sample_ms / std::max(once, 1e-4))), 1, std::max(1, p.max_calls_per_sample));
  }
  for (int k = 0; k < std::max(1, p.samples); ++k)
    for (size_t j = 0; j < slots.size(); ++j) {
      const size_t c = (j + size_t(k)) % slots.size();  // rotate who goes first each round
      Measurement& m = res.candidates[c];
      if (!m.error.empty()) continue;
      Slot& s = slots[c];
      const auto ts = Clock::now();
      for (int i = 0; i < s.calls; ++i) s.fn(s.args.data());
      m.samples.push_back(ms_since(ts) / s.calls);
    }
  for (Measurement& m : res.candidates) {
    m.ok = m.error.empty();
    if (m.ok) m.median_ms = median(m.samples);
  }
  res.run_s = ms_since(t1) / 1e3;
  return res;
}

}  // namespace kiln::tune
