// kiln run --compiled / --check: builds the model into an Executable (generated kernels; library
// kernels only for ops with no loop spelling, always reported) and runs it; --check also runs the
// reference executor and reports, per kernel, the largest difference relative to the tensor's
// magnitude.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <map>
#include <unordered_map>

#include "cli.h"
#include "fusion/plan_executor.h"
#include "runtime/executable.h"

namespace kiln::cli {

namespace {

// max|a - b| / max|b| over the tensor (0 when b is all zeros and a equals it).
// Max |got - ref| / max |ref| over the tensor. `bitwise`: any other difference in the bits of an
// element (the sign of a zero) counts as infinite, so 0 means bit-identical (NaN payloads aside).
double relative_difference(const Tensor& ref, const void* data, bool bitwise) {
  Tensor got(ref.dtype(), ref.shape());
  std::memcpy(got.raw(), data, got.nbytes());
  double diff = 0, mag = 0;
  const size_t esize = dtype_size(ref.dtype());
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double a = got.as_double(i), b = ref.as_double(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (bitwise && a == b && std::memcmp(static_cast<const char*>(got.raw()) + i * esize,
                              static_cast<const char*>(ref.raw()) + i * esize, esize) != 0)
      return INFINITY;
    if (std::isinf(b) && a == b) continue;
    diff = std::max(diff, std::fabs(a - b));
    if (std::isfinite(b)) mag = std::max(mag, std::fabs(b));
  }
  if (diff == 0) return 0;
  return mag > 0 ? diff / mag : INFINITY;
}

}  // namespace

void warn_library_kernels(const runtime::Executable& ex) {
  std::vector<std::string> lib;
  for (const auto& info : ex.kernels())
    if (ex.plan().groups[info.group].is_library()) {
      const Node* n = ex.plan().groups[info.group].nodes.front();
      lib.push_back(n->op_type() + " '" + n->name() + "'");
    }
  warn_tuned_fallbacks(ex);
  if (lib.empty()) return;
  std::string list;
  for (size_t i = 0; i < lib.size() && i < 5; ++i) list += (i ? ", " : "") + lib[i];
  if (lib.size() > 5) list += cat(" and ", lib.size() - 5, " more");
  std::cerr << "kiln: warning: " << lib.size() << " kernel(s) run as library kernels outside generated code (slow path; "
            << "kiln explain says why): " << list << "\n";
}

runtime::BuildOptions build_options(const Args& a) {
  runtime::BuildOptions o;
  o.fusion = fusion_options(a);
  o.threads = a.threads();
  o.compile.use_cache = !a.has("no-cache");
  // --strict-fp: the reference's exact float operations and order (no FMA, no reduction lanes,
  // libm's exp/erf); default: FMA and vectorised forms within the 1e-4 contract.
  o.strict_fp = a.has("strict-fp");
  // --device opencl|cuda: generated kernels on that device (runtime/device.h).
  o.device = runtime::parse_device(a.get("device"));
  if (o.device != runtime::DeviceKind::Cpu && o.strict_fp)
    user_error("--strict-fp is CPU-only: a device's math library is not the reference's");
  // Tuned per-kernel schedules (kiln tune) for this machine and thread count, when recorded.
  if (o.device == runtime::DeviceKind::Cpu) use_tuned_records(a, o);
  return o;
}

TensorMap run_compiled(std::unique_ptr<Graph> g, const Args& a, const TensorMap& inputs, bool check,
                       std::vector<std::string>* library) {
  Progress progress;
  std::unique_ptr<Graph> ref_graph = check ? g->clone() : nullptr;  // the end-to-end reference
  auto ex = runtime::Executable::build(std::move(g), build_options(a), progress.callback());
  progress.done();
  if (library) {
    for (const auto& grp : ex->plan().groups)
      if (grp.is_library()) library->push_back(grp.nodes.front()->op_type());
  } else {
    warn_library_kernels(*ex);
  }
  if (!check) return ex->run(inputs);

  // Each kernel is checked on the inputs it really read: the compiled values of the kernels before
  // it (copied as the observer sees them; the arena reuses their memory), with its ops run by the
  // reference kernels on those. That is the numerics contract's unit: comparing with the reference
  // run end to end would also count the rounding the earlier kernels passed on, which a deep
  // network amplifies past 1e-4 with every kernel within it (Inception-v3: 13 of 103 kernels "beyond"
  // the tolerance end to end, none by itself). The end-to-end difference is reported beside it.
  const Graph& eg = ex->graph();
  std::unordered_map<const Value*, Tensor> compiled;
  TensorMap out = ex->run(inputs, [&](size_t, const Value* v, const void* data) {
    Tensor t(v->dtype(), v->shape());
    std::memcpy(t.raw(), data, t.nbytes());
    compiled[v] = std::move(t);
  });
  const auto checked = check_inputs(eg, inputs);
  for (size_t i = 0; i < checked.size(); ++i) compiled[eg.inputs()[i]] = *checked[i];
  const bool bitwise = ex->options().strict_fp;
  std::vector<double> worst(ex->plan().groups.size(), 0.0);
  for (size_t gi = 0; gi < ex->plan().groups.size(); ++gi) {
    const FusionGroup& grp = ex->plan().groups[gi];
    const std::unordered_map<const Value*, Tensor> local = run_group_reference(grp, compiled);
    for (const Value* v : grp.outputs) {
      auto it = compiled.find(v);
      if (it == compiled.end()) {
        compiled[v] = local.at(v);  // a view the executable does not run as a kernel: exact
        continue;
      }
      worst[gi] = std::max(worst[gi], relative_difference(local.at(v), it->second.raw(), bitwise));
    }
  }
  // End to end: the outputs against the reference run of the whole graph.
  double end_to_end = 0;
  for (const auto& [name, t] : run_reference(*ref_graph, inputs))
    end_to_end = std::max(end_to_end, relative_difference(t, out.at(name).raw(), bitwise));
  // The numerics contract for float32: relative error ≤ 1e-4 of the tensor's max magnitude; under
  // --strict-fp none at all (the reference's operations in its order give its bits).
  const double kTolerance = bitwise ? 0.0 : 1e-4;
  int bad = 0, generated = 0, kernels = 0;
  for (size_t k = 0; k < ex->kernels().size(); ++k) {
    const auto& info = ex->kernels()[k];
    if (!ex->plan().groups[info.group].counts_as_kernel()) continue;
    ++kernels;
    generated += info.generated;
    const double diff = worst[info.group];
    bool ok = diff <= kTolerance;
    bad += !ok;
    if (library && ok) continue;  // test-onnx: only the kernels that differ
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", diff);
    std::cerr << (ok ? "  ok   " : "  FAIL ") << info.name << " [" << (info.generated ? "generated" : "library")
              << "]: max rel diff " << buf << (info.generated ? "" : " (" + info.reason + ")") << "\n";
  }
  // Under --strict-fp every kernel equal to the reference makes the whole run equal to it; a
  // difference end to end then means a kernel was checked on other inputs than it ran on.
  KILN_CHECK(!bitwise || bad != 0 || end_to_end == 0,
             "--check --strict-fp: every kernel matches the reference, the outputs do not");
  if (!library) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", end_to_end);
    std::cerr << "check: " << kernels << " kernels (" << generated << " generated), " << bad
              << " above the tolerance " << kTolerance << " on their own inputs; outputs vs the reference run end to end: "
              << "max rel diff " << buf << "\n";
  }
  if (bad) user_error(bad, " kernel(s) differ from the reference executor beyond ", kTolerance);
  return out;
}

}  // namespace kiln::cli
