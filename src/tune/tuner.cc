#include "tune/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "analysis/kernel_timing.h"
#include "codegen/c/c_emitter.h"
#include "loop/loop_transforms.h"
#include "loop/lower_group.h"
#include "support/error.h"
#include "tune/kernel_signature.h"
#include "tune/schedule_fields.h"
#include "tune/schedule_model.h"
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
  std::string code;                  // the generated C under a fixed name: equal code, equal nest
  std::vector<double> features;      // tune::schedule_features (raw: not yet relative to the default)
};

// `s` lowered for `grp` (nullopt: the lowering refuses it), its code and features.
std::optional<Point> lower_point(const FusionGroup& grp, loop::Schedule s, const TuneOptions& opts,
                                 const runtime::BuildOptions& resolved) {
  if (opts.build.strict_fp) s.set_strict_numerics();
  loop::LoweredGroup lg = loop::lower_group(grp, "tune_probe", s);
  if (!lg.kernel) return std::nullopt;
  if (s.default_transforms) loop::apply_default_schedule(*lg.kernel, s);
  Point p{s, std::move(*lg.kernel), "", {}};
  p.code = codegen::emit_c({p.kernel}, resolved.emit);
  p.features = schedule_features({grp.cost.flops, double(grp.cost.bytes_read + grp.cost.bytes_written)}, s, &p.kernel,
                                 opts.build.fusion.target, opts.build.threads);
  return p;
}

// One kernel's coordinate descent, as a sequence of batches: next() gives the batch to measure (or
// nothing when the search is over), take() its result. The caller decides when batches are
// measured, so that several kernels' batches can go to the measurer together (measure_all).
class KernelSearch {
 public:
  using Tick = std::function<void(int, int, double)>;  // trials, proposed, best speed-up so far
  // `model` (shared by the tune's kernels; nullptr: no filter) learns from this search's batches,
  // filed under `kernel`.
  KernelSearch(const FusionGroup& grp, std::vector<Tensor> inputs, std::vector<Tensor> reference,
               const TuneOptions& opts, const loop::Schedule& dflt, double deadline_s, Clock::time_point start,
               Tick tick, ScheduleModel* model, int kernel)
      : grp_(grp), inputs_(std::move(inputs)), reference_(std::move(reference)), opts_(opts), dflt_(dflt),
        resolved_(runtime::with_numerics(opts.build)), deadline_s_(deadline_s), start_(start), tick_(std::move(tick)),
        model_(model), kernel_(kernel) {
    std::optional<Point> d = lower(dflt_);
    KILN_CHECK(d, "kernel ", grp_.name, " was planned under the default schedule, but its lowering refuses it");
    best_ = std::move(*d);
    default_features_ = best_.features;
    default_code_ = best_.code;
    tried_ = {best_.code};
    space_ = search_space(grp_, dflt_, opts_.build.fusion.target);
    rng_.seed(std::hash<std::string>{}(default_code_));
  }

  // The next batch, or nullopt when the search is done (result() and final_schedule() are set).
  std::optional<MeasureRequest> next() {
    if (phase_ == Phase::Search) {
      if (std::optional<MeasureRequest> q = next_search_batch()) return q;
      phase_ = Phase::Confirm;
    }
    if (phase_ == Phase::Confirm) {
      // Confirm: the default and the best, interleaved, in one batch.
      dp_ = lower(dflt_);
      phase_ = Phase::Confirming;
      // The search reserved this batch's time; a prediction short of it (a slower machine, a
      // sanitizer build) still confirms, since a search without its confirmation is lost work:
      // nothing to record, and the next run would search the kernel again.
      if (best_.code != default_code_) {
        pending_ = Pending::Pair;
        return request({&*dp_, &best_});
      }
      if (best_.code == default_code_ && res_.trials > 0) {
        pending_ = Pending::Single;
        return request({&*dp_});
      }
      finish();
    }
    return std::nullopt;
  }

  // The result of the batch next() returned last, and how long the caller waited for it.
  void take(const MeasureResult& r, double waited_s) {
    per_candidate_s_ = waited_s / double(std::max<size_t>(1, r.candidates.size()));
    std::vector<double> t;
    for (const Measurement& m : r.candidates) {
      t.push_back(m.ok ? m.median_ms : -1.0);
      if (!m.ok && error_.empty()) error_ = m.error;
    }
    KILN_CHECK(t.size() == batch_size_, "measurer returned ", t.size(), " measurements for ", batch_size_, " candidates");
    if (pending_ == Pending::Search) {
      res_.trials += int(cands_.size());
      if (t[0] <= 0) {  // the incumbent itself failed: nothing to compare with; end this pass
        dim_ = space_.size();
        return;
      }
      // The model's samples: each candidate's time relative to the default, through the incumbent
      // measured beside it (whose ratio to the default the search has tracked).
      if (model_)
        for (size_t i = 1; i < t.size(); ++i)
          if (t[i] > 0)
            model_->add(relative_features(cands_[i - 1].features, default_features_),
                        std::log(t[i] / t[0] / best_speedup_), kernel_);
      size_t win = 0;
      for (size_t i = 1; i < t.size(); ++i)
        if (t[i] > 0 && t[i] < t[win]) win = i;
      if (win && t[win] < t[0] * (1 - opts_.min_gain)) {
        best_speedup_ *= t[0] / t[win];
        best_ = std::move(cands_[win - 1]);
        improved_in_pass_ = true;
        evolve_left_ = kEvolveRounds;  // a new best: descent from it, then mutants of it again
      }
      cands_.clear();
      tick_(res_.trials, res_.proposed, best_speedup_);
      return;
    }
    res_.default_ms = t[0];
    if (pending_ == Pending::Pair) {
      res_.tuned_ms = t[1];
      res_.improved = t[0] > 0 && t[1] > 0 && t[1] < t[0] * (1 - opts_.min_gain / 2);
    } else {
      res_.tuned_ms = t[0];
    }
    finish();
  }

  const KernelResult& result() const { return res_; }
  const loop::Schedule& final_schedule() const { return final_sched_; }

 private:
  enum class Phase { Search, Confirm, Confirming, Done };
  enum class Pending { Search, Pair, Single };

  double left() const { return deadline_s_ - seconds_since(start_); }
  // Predicted wall time of a batch of `n` points.
  double predict_s(size_t n) const { return per_candidate_s_ > 0 ? per_candidate_s_ * double(n) + 0.2 : 1.0 + 0.3 * n; }

  // The point for `s`, or nullopt when the lowering refuses it.
  std::optional<Point> lower(const loop::Schedule& s) const { return lower_point(grp_, s, opts_, resolved_); }

  // The filter: when the model has enough samples to fit, keeps `keep` of cands_ — the model's
  // best `keep - explore` and `explore` random others (a wrong model still lets the search see
  // points it would not pick) — and hands the others' code back to tried_, so that a later pass
  // or mutant batch may propose them again. Returns how many were proposed (counted in
  // KernelResult::proposed when the batch is sent).
  size_t filter(size_t keep, size_t explore) {
    const size_t proposed = cands_.size();
    if (!model_ || cands_.size() <= keep || !model_->fit(kernel_)) {
      // No fit (a singular system; not seen): the first `keep`, as proposed.
      while (cands_.size() > keep) {
        tried_.erase(cands_.back().code);
        cands_.pop_back();
      }
      return proposed;
    }
    std::vector<double> predicted;
    for (const Point& p : cands_)
      predicted.push_back(model_->predict(relative_features(p.features, default_features_)));
    std::vector<Point> kept;
    size_t next = 0;
    for (size_t i : pick_candidates(predicted, keep, explore, rng_)) {
      for (; next < i; ++next) tried_.erase(cands_[next].code);
      kept.push_back(std::move(cands_[i]));
      next = i + 1;
    }
    for (; next < cands_.size(); ++next) tried_.erase(cands_[next].code);
    cands_ = std::move(kept);
    return proposed;
  }
  bool model_ready() const { return model_ && model_->size() >= ScheduleModel::kMinSamples; }

  // One batch per field: the incumbent and every new legal, distinct value of the field. Passes
  // over the fields repeat until one improves nothing; a batch starts only when its predicted cost
  // plus the confirming batch's fits what is left of the share.
  std::optional<MeasureRequest> next_search_batch() {
    for (;;) {
      if (dim_ == space_.size()) {
        if (!improved_in_pass_) return next_mutation_batch();
        improved_in_pass_ = false;
        dim_ = 0;
        continue;
      }
      const Dimension& dim = space_[dim_++];
      cands_.clear();
      for (int64_t v : dim.values) {
        loop::Schedule s = best_.sched;
        if (*get_field(s, dim.field) == v) continue;
        set_field(s, dim.field, v);
        if (!fits_registers(s, opts_.build.fusion.target)) continue;
        std::optional<Point> p = lower(s);
        if (!p || !tried_.insert(p->code).second) continue;
        cands_.push_back(std::move(*p));
      }
      if (cands_.empty()) continue;
      const size_t proposed = filter(model_ready() ? kDescentKeep : cands_.size(), 1);
      if (predict_s(cands_.size() + 1) + predict_s(2) > left()) {
        out_of_time_ = true;
        cands_.clear();
        return std::nullopt;
      }
      res_.proposed += int(proposed);
      std::vector<Point*> batch = {&best_};
      for (Point& c : cands_) batch.push_back(&c);
      pending_ = Pending::Search;
      return request(batch);
    }
  }

  // After coordinate descent has converged, a (1+lambda) evolution strategy: batches of
  // kMutants random points that change two or three fields of the best at once (a pair of fields
  // that only pay together is invisible to one-field moves, e.g. mr with nr, or kc with the
  // reuse budget). A mutant that wins restarts the coordinate descent from it; the search stops
  // after kEvolveRounds batches in a row without a win, or when the share is spent. The random
  // numbers are seeded by the kernel's code, so a rerun on the same kernel tries the same points.
  //
  // With the filter, a batch's mutants are the model's pick among kOversample times as many.
  static constexpr int kMutants = 8, kEvolveRounds = 3, kOversample = 6, kExploreMutants = 2;
  static constexpr size_t kDescentKeep = 3;
  static constexpr size_t kMinPerSource = 4;  // candidates per compiled source (request())
  std::optional<MeasureRequest> next_mutation_batch() {
    if (evolve_left_ <= 0 || space_.size() < 2) return std::nullopt;
    --evolve_left_;
    cands_.clear();
    const int want = model_ready() ? kMutants * kOversample : kMutants;
    for (int attempt = 0; attempt < want * 8 && int(cands_.size()) < want; ++attempt) {
      loop::Schedule sch = best_.sched;
      const size_t fields = 2 + rng_() % std::min<size_t>(2, space_.size() - 1);
      std::set<size_t> picked;
      while (picked.size() < fields) picked.insert(rng_() % space_.size());
      for (size_t d : picked) {
        const Dimension& dim = space_[d];
        if (dim.values.empty()) continue;
        set_field(sch, dim.field, dim.values[rng_() % dim.values.size()]);
      }
      if (!fits_registers(sch, opts_.build.fusion.target)) continue;
      std::optional<Point> p = lower(sch);
      if (!p || !tried_.insert(p->code).second) continue;
      cands_.push_back(std::move(*p));
    }
    if (cands_.empty()) return std::nullopt;
    const size_t proposed = filter(kMutants, kExploreMutants);
    if (predict_s(cands_.size() + 1) + predict_s(2) > left()) {
      out_of_time_ = true;
      cands_.clear();
      return std::nullopt;
    }
    res_.proposed += int(proposed);
    res_.mutants += int(cands_.size());
    std::vector<Point*> batch = {&best_};
    for (Point& c : cands_) batch.push_back(&c);
    pending_ = Pending::Search;
    return request(batch);
  }

  MeasureRequest request(const std::vector<Point*>& points) {
    MeasureRequest req;
    std::vector<loop::LoopKernel> ks;
    std::vector<loop::Schedule> scheds;
    for (size_t i = 0; i < points.size(); ++i) {
      loop::LoopKernel k = points[i]->kernel;
      k.name = "tune_c" + std::to_string(batches_) + "_" + std::to_string(i);
      req.kernels.push_back(k.name);
      req.arguments.push_back(loop::kernel_arguments(k, inputs_));
      ks.push_back(std::move(k));
      scheds.push_back(points[i]->sched);
    }
    ++batches_;
    batch_size_ = points.size();
    // Up to compile_jobs sources of consecutive candidates, each a whole translation unit (its own
    // prelude and micro-kernels), compiled side by side. Each source repeats that head — about
    // half the compile of a 3-candidate MobileNetV2 batch (bench/tune_compile_split.py) — so a
    // source gets at least kMinPerSource candidates: small batches stay one source.
    const size_t parts = std::clamp<size_t>(size_t(std::max(1, opts_.compile_jobs)), 1,
                                            std::max<size_t>(1, ks.size() / kMinPerSource));
    for (size_t p = 0; p < parts; ++p) {
      const std::vector<loop::LoopKernel> part(ks.begin() + std::ptrdiff_t(p * ks.size() / parts),
                                               ks.begin() + std::ptrdiff_t((p + 1) * ks.size() / parts));
      req.sources.push_back(codegen::emit_c(part, resolved_.emit));
    }
    if (opts_.on_batch) opts_.on_batch(req.kernels, scheds);
    req.reference = reference_;
    req.threads = opts_.build.threads;
    req.compile = resolved_.compile;
    req.protocol = opts_.protocol;
    return req;
  }

  void finish() {
    if (!res_.improved) best_ = std::move(*dp_);
    res_.changed = changed_fields(best_.sched, dflt_);
    if (!res_.improved) res_.changed.clear();
    if (res_.trials == 0) res_.note = out_of_time_ ? "budget spent before its first batch" : "no other legal nest";
    else if (!error_.empty()) res_.note = "some candidates refused: " + error_;
    final_sched_ = best_.sched;
    phase_ = Phase::Done;
  }

  const FusionGroup& grp_;
  const std::vector<Tensor> inputs_, reference_;
  const TuneOptions& opts_;
  const loop::Schedule& dflt_;
  runtime::BuildOptions resolved_;
  const double deadline_s_;
  const Clock::time_point start_;
  const Tick tick_;

  Phase phase_ = Phase::Search;
  Pending pending_ = Pending::Search;
  KernelResult res_;
  Point best_;
  std::optional<Point> dp_;
  std::string default_code_;
  std::set<std::string> tried_;
  std::vector<Dimension> space_;
  size_t dim_ = 0;
  bool improved_in_pass_ = true;  // so that the first pass starts
  int evolve_left_ = kEvolveRounds;
  std::mt19937_64 rng_;
  bool out_of_time_ = false;
  std::vector<Point> cands_;      // the candidates of the batch in flight (after the incumbent)
  std::string error_;
  double best_speedup_ = 1.0;     // of the best over the default, as the batches saw it
  loop::Schedule final_sched_;
  int batches_ = 0;
  size_t batch_size_ = 0;
  double per_candidate_s_ = 0;
  ScheduleModel* model_;
  const int kernel_;
  std::vector<double> default_features_;
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
  if (opts.compile_jobs <= 0) opts.compile_jobs = int(std::max(1u, std::thread::hardware_concurrency()));
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
  // Up to `slots` kernels are searched side by side, one batch each per round, the round's batches
  // measured together (measure_all): a measurer that runs N requests at once (a cluster of N
  // machines) gets N at once. With one slot (LocalMeasurer) this is the plain one-kernel-at-a-time
  // search. A kernel's share is fixed when it starts: what is left of the budget, times the slots
  // (they run concurrently), times its weight among the kernels not yet started, never more than
  // what is left, so no kernel runs past the budget.
  const int slots = std::max(1, measurer.parallelism());
  // The schedule model every kernel's search feeds and filters with (TuneOptions::filter).
  ScheduleModel model;
  const runtime::BuildOptions resolved = runtime::with_numerics(opts.build);
  struct Active {
    size_t work = 0;
    KernelResult kr;  // identity fields; the search fills the rest
    std::string head;
    std::unique_ptr<KernelSearch> search;
  };
  std::vector<KernelResult> results(work.size());
  std::vector<Active> active;
  size_t next_work = 0;
  // Starts the next kernel that needs a search (reporting recorded ones on the way); false when
  // none is left.
  auto start_next = [&]() -> bool {
    while (next_work < work.size()) {
      const size_t i = next_work++;
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
        // An earlier tune's result teaches the model too: its best point against the default
        // (a record keeps only those two).
        if (opts.filter && r->improved && r->default_ms > 0 && r->tuned_ms > 0) {
          std::optional<Point> d = lower_point(grp, dflt, opts, resolved),
                               b = lower_point(grp, record_schedule(*r, target), opts, resolved);
          if (d && b) model.add(relative_features(b->features, d->features), std::log(r->tuned_ms / r->default_ms), int(i));
        }
        say(head + ": recorded, skipped");
        results[i] = std::move(kr);
        continue;
      }
      const double weight = std::max(w.weight_ms, 1e-6);
      const double left = opts.budget_s - (seconds_since(start) - search_start);
      const double share = std::min(left, left * double(slots) * weight / weight_left);
      weight_left -= weight;
      // Realistic buffers: the tensors the default build's run gave this kernel.
      std::vector<Tensor> ins, ref;
      for (const Value* v : grp.inputs) ins.push_back(v->is_constant() ? v->constant() : values.at(v));
      for (const Value* v : grp.outputs) ref.push_back(values.at(v));
      auto tick = [say, head](int trials, int proposed, double speedup) {
        char b[96];
        std::snprintf(b, sizeof b, ": %d of %d proposed measured, best x%.2f", trials, proposed, speedup);
        say(head + b);
      };
      Active a;
      a.work = i;
      a.kr = std::move(kr);
      a.head = head;
      a.search = std::make_unique<KernelSearch>(grp, std::move(ins), std::move(ref), opts, dflt,
                                                seconds_since(start) + share, start, tick,
                                                opts.filter ? &model : nullptr, int(i));
      active.push_back(std::move(a));
      return true;
    }
    return false;
  };
  auto finish = [&](Active& a) {
    KernelResult kr = a.search->result();
    kr.signature = a.kr.signature;
    kr.name = a.kr.name;
    kr.ops = a.kr.ops;
    kr.emitter = a.kr.emitter;
    kr.instances = a.kr.instances;
    {
      char b[128];
      std::snprintf(b, sizeof b, ": done, %d of %d proposed measured, %.4g -> %.4g ms%s", kr.trials, kr.proposed,
                    kr.default_ms, kr.tuned_ms, kr.improved ? "" : " (default kept)");
      say(a.head + (kr.trials ? std::string(b) : ": " + kr.note));
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
      const loop::Schedule& s = kr.improved ? a.search->final_schedule() : dflt;
      for (const std::string& f : schedule_field_names()) rec.fields[f] = *get_field(s, f);
      upsert_record(records, rec);
      if (save) save(records);
    }
    results[a.work] = std::move(kr);
  };
  for (;;) {
    while (int(active.size()) < slots && start_next()) {
    }
    if (active.empty()) break;
    // One batch from every active kernel; a kernel that is done leaves, and the next kernel takes
    // its slot in this same round.
    std::vector<MeasureRequest> reqs;
    std::vector<size_t> owner;  // index into `active` of each request
    for (size_t k = 0; k < active.size();) {
      if (std::optional<MeasureRequest> q = active[k].search->next()) {
        reqs.push_back(std::move(*q));
        owner.push_back(k++);
        continue;
      }
      finish(active[k]);
      active.erase(active.begin() + std::ptrdiff_t(k));  // only later entries move: `owner` stays valid
      start_next();
    }
    if (reqs.empty()) continue;
    const auto t0 = Clock::now();
    std::vector<MeasureResult> got = measurer.measure_all(reqs);
    const double waited = seconds_since(t0);
    KILN_CHECK(got.size() == reqs.size(), "measure_all returned ", got.size(), " results for ", reqs.size(), " requests");
    for (size_t j = 0; j < got.size(); ++j) {
      report.compile_s += got[j].compile_s;
      active[owner[j]].search->take(got[j], waited);
    }
  }
  report.kernels = std::move(results);
  report.search_s = seconds_since(start) - search_start;
  report.model_samples = model.size();
  return report;
}

}  // namespace kiln::tune
