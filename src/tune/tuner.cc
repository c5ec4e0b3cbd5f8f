#include "tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>

#include "analysis/kernel_timing.h"
#include "codegen/c/c_emitter.h"
#include "loop/loop_transforms.h"
#include "loop/lower_group.h"
#include "support/error.h"
#include "tune/kernel_signature.h"
#include "tune/schedule_fields.h"
#include "tune/search_space.h"
#include "support/clock.h"

namespace kiln::tune {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One distinct kernel of the model and what measuring it needs.
struct Work {
  size_t group = 0;  // its first instance in the default plan
  std::string signature;
  int instances = 0;
  double weight_ms = 0;  // default time of all instances (the budget's weight)
};

// A point of the search, lowered: its kernel (named for its slot in a batch later) and its code.
struct Point {
  loop::Schedule sched;
  loop::LoopKernel kernel;
  std::string code;  // the generated C under a fixed name: equal code, equal nest
};

class KernelSearch {
 public:
  KernelSearch(const FusionGroup& grp, const std::vector<Tensor>& inputs, const std::vector<Tensor>& reference,
               const TuneOptions& opts, const loop::Schedule& dflt, Measurer& m)
      : grp_(grp), inputs_(inputs), reference_(reference), opts_(opts), dflt_(dflt), measurer_(m),
        resolved_(runtime::with_numerics(opts.build)) {}

  // The point for `s`, or nullopt when the lowering refuses it.
  std::optional<Point> lower(loop::Schedule s) const {
    if (opts_.build.strict_fp) s.set_strict_numerics();
    loop::LoweredGroup lg = loop::lower_group(grp_, "tune_probe", s);
    if (!lg.kernel) return std::nullopt;
    if (s.default_transforms) loop::apply_default_schedule(*lg.kernel, s);
    Point p{s, std::move(*lg.kernel), ""};
    p.code = codegen::emit_c({p.kernel}, resolved_.emit);
    return p;
  }

  // Times `points` in one batch; per point its median (ms) or a negative number when it failed.
  std::vector<double> measure(std::vector<Point*> points, std::string* first_error) {
    MeasureRequest req;
    std::vector<loop::LoopKernel> ks;
    for (size_t i = 0; i < points.size(); ++i) {
      loop::LoopKernel k = points[i]->kernel;
      k.name = "tune_c" + std::to_string(batches_) + "_" + std::to_string(i);
      req.kernels.push_back(k.name);
      req.arguments.push_back(loop::kernel_arguments(k, inputs_));
      ks.push_back(std::move(k));
    }
    ++batches_;
    req.source = codegen::emit_c(ks, resolved_.emit);
    req.reference = reference_;
    req.threads = opts_.build.threads;
    req.compile = resolved_.compile;
    req.protocol = opts_.protocol;
    const auto t0 = Clock::now();
    MeasureResult r = measurer_.measure(req);
    last_batch_s_ = seconds_since(t0);
    per_candidate_s_ = last_batch_s_ / double(points.size());
    std::vector<double> out;
    for (const Measurement& m : r.candidates) {
      out.push_back(m.ok ? m.median_ms : -1.0);
      if (!m.ok && first_error && first_error->empty()) *first_error = m.error;
    }
    return out;
  }

  // Predicted wall time of a batch of `n` points.
  double predict_s(size_t n) const { return per_candidate_s_ > 0 ? per_candidate_s_ * double(n) + 0.2 : 1.0 + 0.3 * n; }

  KernelResult run(double deadline_s, Clock::time_point start, const std::function<void(int, double)>& tick) {
    KernelResult res;
    auto left = [&] { return deadline_s - seconds_since(start); };
    std::optional<Point> d = lower(dflt_);
    KILN_CHECK(d, "kernel ", grp_.name, " was planned under the default schedule, but its lowering refuses it");
    Point best = std::move(*d);
    const std::string default_code = best.code;
    std::set<std::string> tried = {best.code};
    const std::vector<Dimension> space = search_space(grp_, dflt_, opts_.build.fusion.target);
    double best_speedup = 1.0;  // of the best over the default, as the batches saw it
    bool out_of_time = false, improved_in_pass = true;
    std::string error;
    // Leave room for the confirming batch (two points) after the search.
    auto fits = [&](size_t n) { return predict_s(n) + predict_s(2) <= left(); };
    while (improved_in_pass && !out_of_time) {
      improved_in_pass = false;
      for (const Dimension& dim : space) {
        std::vector<Point> cands;
        for (int64_t v : dim.values) {
          loop::Schedule s = best.sched;
          if (*get_field(s, dim.field) == v) continue;
          set_field(s, dim.field, v);
          if (!fits_registers(s, opts_.build.fusion.target)) continue;
          std::optional<Point> p = lower(s);
          if (!p || !tried.insert(p->code).second) continue;
          cands.push_back(std::move(*p));
        }
        if (cands.empty()) continue;
        if (!fits(cands.size() + 1)) {
          out_of_time = true;
          break;
        }
        std::vector<Point*> batch = {&best};
        for (Point& c : cands) batch.push_back(&c);
        std::vector<double> t = measure(batch, &error);
        res.trials += int(cands.size());
        if (t[0] <= 0) break;  // the incumbent itself failed: nothing to compare with
        size_t win = 0;
        for (size_t i = 1; i < t.size(); ++i)
          if (t[i] > 0 && t[i] < t[win]) win = i;
        if (win && t[win] < t[0] * (1 - opts_.min_gain)) {
          best_speedup *= t[0] / t[win];
          best = std::move(cands[win - 1]);
          improved_in_pass = true;
        }
        tick(res.trials, best_speedup);
      }
    }
    // Confirm: the default and the best, interleaved, in one batch.
    std::optional<Point> dp = lower(dflt_);
    if (best.code != default_code && left() > 0) {
      std::vector<double> t = measure({&*dp, &best}, &error);
      res.default_ms = t[0];
      res.tuned_ms = t[1];
      res.improved = t[0] > 0 && t[1] > 0 && t[1] < t[0] * (1 - opts_.min_gain / 2);
    } else if (best.code == default_code && res.trials > 0) {
      std::vector<double> t = measure({&*dp}, &error);
      res.default_ms = res.tuned_ms = t[0];
    }
    if (!res.improved) best = std::move(*dp);
    res.changed = changed_fields(best.sched, dflt_);
    if (!res.improved) res.changed.clear();
    if (res.trials == 0) res.note = out_of_time ? "budget spent before its first batch" : "no other legal nest";
    else if (!error.empty()) res.note = "some candidates refused: " + error;
    final_sched_ = best.sched;
    return res;
  }
  const loop::Schedule& final_schedule() const { return final_sched_; }

 private:
  const FusionGroup& grp_;
  const std::vector<Tensor>& inputs_;
  const std::vector<Tensor>& reference_;
  const TuneOptions& opts_;
  const loop::Schedule& dflt_;
  Measurer& measurer_;
  runtime::BuildOptions resolved_;
  loop::Schedule final_sched_;
  int batches_ = 0;
  double last_batch_s_ = 0, per_candidate_s_ = 0;
};

std::string op_list(const FusionGroup& grp) {
  std::string r;
  for (const Node* n : grp.nodes) r += (r.empty() ? "" : ",") + n->op_type();
  return r;
}

}  // namespace

double parse_budget(const std::string& text) {
  double total = 0;
  size_t i = 0;
  bool any = false;
  auto bad = [&]() -> double {
    user_error("--budget expects a duration such as 10m, 90s, 1h or 1m30s, got '", text, "'");
  };
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) ++j;
    if (j == i || j - i > 9) return bad();
    double v = 0;
    try {
      v = std::stod(text.substr(i, j - i));
    } catch (const std::exception&) {
      return bad();
    }
    double unit = 1;
    if (j < text.size()) {
      const char u = text[j++];
      unit = u == 's' ? 1 : u == 'm' ? 60 : u == 'h' ? 3600 : 0;
      if (unit == 0) return bad();
    } else if (any) {
      return bad();  // "1m30" is ambiguous
    }
    total += v * unit;
    any = true;
    i = j;
  }
  if (!any || !(total > 0) || total > 7 * 24 * 3600.0) return bad();
  return total;
}

TuneReport tune_model(const Graph& g, const TensorMap& inputs, const TuneOptions& opts_in, Measurer& measurer,
                      std::vector<Record>& records, const std::function<void(const std::vector<Record>&)>& save) {
  const auto start = Clock::now();
  TuneOptions opts = opts_in;
  opts.build.kernel_schedules.clear();  // the search starts from the default of every kernel
  if (opts.build.threads <= 0) opts.build.threads = current_machine(0).threads;
  auto say = [&](const std::string& m) {
    if (opts.progress) opts.progress(m);
  };
  TuneReport report;
  report.machine = current_machine(opts.build.threads);
  const Target& target = opts.build.fusion.target;
  loop::Schedule dflt = opts.build.schedule ? *opts.build.schedule : loop::Schedule::for_target(target);
  if (opts.build.strict_fp) dflt.set_strict_numerics();

  // The default build: its plan names the kernels, its run gives every kernel realistic inputs and
  // the outputs each candidate must reproduce, its profile the budget's weights.
  say("building the model under the default schedules");
  auto ex = runtime::Executable::build(g.clone(), opts.build);
  std::unordered_map<const Value*, Tensor> values;
  for (const Value* v : ex->graph().inputs())
    if (auto it = inputs.find(v->name()); it != inputs.end()) values[v] = it->second;
  ex->run(inputs, [&](size_t, const Value* v, const void* data) {
    Tensor t(v->dtype(), v->shape());
    if (t.nbytes()) std::memcpy(t.raw(), data, t.nbytes());
    values[v] = std::move(t);
  });
  say("timing the default kernels");
  const std::vector<double> kernel_ms = analysis::time_runs(*ex, inputs, 5, 1, true).kernel_medians();
  report.samples = samples_of(*ex, kernel_ms, "", report.machine);

  std::vector<Work> work;
  std::map<std::string, size_t> by_sig;
  for (const runtime::KernelInfo& info : ex->kernels()) {
    if (!info.generated) continue;
    const FusionGroup& grp = ex->plan().groups[info.group];
    const std::string sig = kernel_signature(grp);
    auto [it, fresh] = by_sig.emplace(sig, work.size());
    if (fresh) work.push_back({info.group, sig, 0, 0});
    Work& w = work[it->second];
    ++w.instances;
    w.weight_ms += info.group < kernel_ms.size() ? kernel_ms[info.group] : 0;
  }
  std::stable_sort(work.begin(), work.end(), [](const Work& a, const Work& b) { return a.weight_ms > b.weight_ms; });

  auto recorded = [&](const std::string& sig) -> const Record* {
    for (const Record& r : records)
      if (r.signature == sig && r.machine == report.machine && r.target == target.name) return &r;
    return nullptr;
  };
  double weight_left = 0;
  for (const Work& w : work)
    if (!recorded(w.signature)) weight_left += std::max(w.weight_ms, 1e-6);
  const double search_start = seconds_since(start);
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    const FusionGroup& grp = ex->plan().groups[w.group];
    KernelResult kr;
    kr.signature = w.signature;
    kr.name = ex->kernels()[w.group].name;
    kr.ops = op_list(grp);
    kr.emitter = grp.emitter;
    kr.instances = w.instances;
    const std::string head = cat("kernel ", i + 1, "/", work.size(), " ", kr.name);
    if (const Record* r = recorded(w.signature)) {
      kr.from_records = true;
      kr.default_ms = r->default_ms;
      kr.tuned_ms = r->tuned_ms;
      kr.improved = r->improved;
      kr.trials = r->trials;
      if (r->improved) kr.changed = changed_fields(record_schedule(*r, target), dflt);
      kr.note = "from the records";
      say(head + ": recorded, skipped");
      report.kernels.push_back(std::move(kr));
      continue;
    }
    const double weight = std::max(w.weight_ms, 1e-6);
    const double left = opts.budget_s - (seconds_since(start) - search_start);
    const double share = left * weight / weight_left;
    weight_left -= weight;
    // Realistic buffers: the tensors the default build's run gave this kernel.
    std::vector<Tensor> ins, ref;
    for (const Value* v : grp.inputs) ins.push_back(v->is_constant() ? v->constant() : values.at(v));
    for (const Value* v : grp.outputs) ref.push_back(values.at(v));
    KernelSearch search(grp, ins, ref, opts, dflt, measurer);
    const double kernel_deadline = seconds_since(start) + share;
    kr = [&] {
      KernelResult r = search.run(kernel_deadline, start, [&](int trials, double speedup) {
        char b[96];
        std::snprintf(b, sizeof b, ": %d trials, best x%.2f", trials, speedup);
        say(head + b);
      });
      r.signature = kr.signature;
      r.name = kr.name;
      r.ops = kr.ops;
      r.emitter = kr.emitter;
      r.instances = kr.instances;
      return r;
    }();
    {
      char b[128];
      std::snprintf(b, sizeof b, ": done, %d trials, %.4g -> %.4g ms%s", kr.trials, kr.default_ms, kr.tuned_ms,
                    kr.improved ? "" : " (default kept)");
      say(head + (kr.trials ? std::string(b) : ": " + kr.note));
    }
    // A kernel searched to the end is recorded (improved or not, so the next run skips it); one
    // the budget cut before any trial is not, so the next run tunes it.
    if (kr.trials > 0 && kr.default_ms > 0) {
      Record rec;
      rec.signature = kr.signature;
      rec.ops = kr.ops;
      rec.emitter = kr.emitter;
      rec.machine = report.machine;
      rec.target = target.name;
      rec.improved = kr.improved;
      rec.default_ms = kr.default_ms;
      rec.tuned_ms = kr.improved ? kr.tuned_ms : kr.default_ms;
      rec.trials = kr.trials;
      rec.date = iso_utc_now();
      const loop::Schedule& s = kr.improved ? search.final_schedule() : dflt;
      for (const std::string& f : schedule_field_names()) rec.fields[f] = *get_field(s, f);
      upsert_record(records, rec);
      if (save) save(records);
    }
    report.kernels.push_back(std::move(kr));
  }
  report.search_s = seconds_since(start) - search_start;
  return report;
}

}  // namespace kiln::tune
