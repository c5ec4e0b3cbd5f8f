// kiln tune: empirical search for per-kernel schedules (src/tune/tuner.h), the records database
// they are kept in (src/tune/records.h), and the rule every other command follows to use them:
// matching records apply automatically, --records FILE picks another database, --no-records none.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "analysis/kernel_timing.h"
#include "cli.h"
#include "ir/printer.h"
#include "tune/fusion_search.h"
#include "tune/ray_measurer.h"
#include "tune/records.h"
#include "tune/schedule_fields.h"
#include "tune/tuner.h"

namespace kiln::cli {

namespace {

// The records file a command reads: --records FILE, else the default under kiln's cache folder
// (only when that folder is private to the user; "" otherwise).
std::string records_path(const Args& a, std::string* why_none) {
  if (a.has("records")) {
    if (a.get("records").empty()) user_error("--records needs a file name");
    return a.get("records");
  }
  return tune::default_records_path(why_none);
}

void print_warnings(const std::vector<std::string>& w) {
  for (const auto& line : w) std::cerr << "kiln: warning: " << line << "\n";
}

using Clock = std::chrono::steady_clock;

// Whole-model medians of the default and the tuned build, runs interleaved (default, tuned, tuned,
// default, ...) so that a change in the machine's load touches both alike.
std::pair<double, double> interleaved_medians(runtime::Executable& a, runtime::Executable& b, const TensorMap& inputs,
                                              int rounds) {
  analysis::CallerBuffers ia(a, inputs), ib(b, inputs);
  ia.run(a);  // warm-up
  ib.run(b);
  std::vector<double> ta, tb;
  for (int r = 0; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const bool first_a = (r % 2 == 0) == (k == 0);
      runtime::Executable& e = first_a ? a : b;
      analysis::CallerBuffers& io = first_a ? ia : ib;
      const auto t0 = Clock::now();
      io.run(e);
      (first_a ? ta : tb).push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  return {analysis::median(ta), analysis::median(tb)};
}

// Interleaved rounds for a whole-model comparison: about 3 s of runs, 5 to 50 rounds.
int rounds_for(runtime::Executable& ex, const TensorMap& inputs) {
  const auto t0 = Clock::now();
  analysis::CallerBuffers probe(ex, inputs);
  probe.run(ex);
  const double once = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return std::clamp(int(3000.0 / std::max(2 * once, 1e-3)), 5, 50);
}

// The share of the budget the fusion decisions may take before the schedules get the rest.
constexpr double kFusionShare = 0.25;

// The pairs of graph `graph` the tuned options keep apart (the records hold other models' too).
size_t kept_apart(const runtime::BuildOptions& tuned, const std::string& graph) {
  auto it = tuned.fusion.keep_apart.find(graph);
  return it == tuned.fusion.keep_apart.end() ? 0 : it->second.size();
}

void print_fusion_trials(const tune::FusionSearchReport& fr) {
  if (fr.trials.empty()) {
    std::printf("fusion: no close decision (every fusion's estimated benefit is over 20 %% of its parts' time)\n");
    return;
  }
  std::printf("%-60s %11s %11s %7s  %s\n", "fusion (close decisions, heaviest first)", "fused ms", "apart ms", "apart/f",
              "decision");
  int measured = 0, apart = 0;
  for (const auto& t : fr.trials) {
    std::string name = t.fusion.a + " + " + t.fusion.b;
    if (name.size() > 60) name = name.substr(0, 57) + "...";
    measured += t.measured;
    apart += t.apart;
    if (t.measured || t.from_records || !t.same_as.empty())
      std::printf("%-60s %11.4g %11.4g %6.2fx  %s%s\n", name.c_str(), t.fused_ms, t.apart_ms,
                  t.fused_ms > 0 ? t.apart_ms / t.fused_ms : 0.0, t.apart ? "kept apart" : "fused",
                  t.from_records ? " (recorded)" : !t.same_as.empty() ? " (as the same fusion above)" : "");
    else
      std::printf("%-60s %11s %11s %7s  %s\n", name.c_str(), "-", "-", "-", t.note.c_str());
  }
  std::printf("fusion: %.1f s; %zu close decisions, %d measured, %d kept apart\n", fr.search_s, fr.trials.size(),
              measured, apart);
}

// The Ray measurer's driver script: beside the kiln binary (CMake copies it into the build
// folder), else in the source tree this kiln was built from.
std::string ray_driver_path(const std::string& exe) {
  std::error_code ec;
  const std::filesystem::path beside = std::filesystem::path(exe).parent_path() / "ray_measure.py";
  if (std::filesystem::is_regular_file(beside, ec)) return beside.string();
  const std::filesystem::path in_tree = std::filesystem::path(KILN_SOURCE_DIR) / "tools" / "ray_measure.py";
  if (std::filesystem::is_regular_file(in_tree, ec)) return in_tree.string();
  user_error("the Ray measurer's driver ray_measure.py is neither beside ", exe, " nor in ", in_tree.parent_path().string());
}

// --measurer local (default) or ray (--ray-address HOST:PORT): which machines measure candidates.
// --compile-jobs N: compiler processes per batch (0 or absent: one per hardware thread).
int compile_jobs(const Args& a) {
  if (!a.has("compile-jobs")) return 0;
  const std::string v = a.get("compile-jobs");
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < 1 || n > 1024) user_error("--compile-jobs expects a count from 1 to 1024, got '", v, "'");
  return int(n);
}

std::unique_ptr<tune::Measurer> make_measurer(const Args& a) {
  const std::string kind = a.get("measurer", "local");
  if (kind == "local") {
    if (a.has("ray-address")) user_error("--ray-address needs --measurer ray");
    return std::make_unique<tune::LocalMeasurer>(compile_jobs(a));
  }
  if (kind != "ray") user_error("--measurer expects local or ray, got '", kind, "'");
  if (!a.has("ray-address") || a.get("ray-address").empty())
    user_error("--measurer ray needs --ray-address HOST:PORT (the head node of the cluster)");
  std::error_code ec;
  // The workers run this same binary: kiln is installed at the same path on every node.
  const std::string exe = std::filesystem::canonical("/proc/self/exe", ec).string();
  if (ec) user_error("cannot find the kiln binary's path (/proc/self/exe): ", ec.message());
  tune::RayOptions ro;
  ro.address = a.get("ray-address");
  ro.kiln = exe;
  ro.driver = ray_driver_path(exe);
  return std::make_unique<tune::RayMeasurer>(ro);
}

int merge(const Args& a) {
  if (!a.has("output")) user_error("tune --merge needs -o FILE");
  std::vector<tune::Record> all;
  for (const auto& f : a.positional()) {
    std::error_code ec;
    if (!std::filesystem::exists(f, ec)) user_error(f, ": no such records file");
    tune::RecordsFile rf = tune::read_records(f, nullptr);
    print_warnings(rf.warnings);
    all = tune::merge_records(all, rf.records);
  }
  tune::write_records(a.get("output"), all);
  std::printf("%s: %zu records from %zu files\n", a.get("output").c_str(), all.size(), a.positional().size());
  return 0;
}

}  // namespace

void use_tuned_records(const Args& a, runtime::BuildOptions& o) {
  if (a.has("no-records")) {
    if (a.has("records")) user_error("choose one of --records FILE and --no-records");
    return;
  }
  std::string why;
  const std::string path = records_path(a, &why);
  if (path.empty()) return;  // no private cache folder: no default database (jit warns about it)
  const tune::MachineKey machine = tune::current_machine(o.threads);
  tune::RecordsFile rf = tune::read_records(path, &machine);
  print_warnings(rf.warnings);
  o.kernel_schedules = tune::kernel_schedules(rf.records, machine, o.fusion.target);
  // Fusions kiln tune measured slower than their parts apart (tune/fusion_search.h).
  for (auto& [graph, pairs] : tune::keep_apart_pairs(rf.records, machine, o.fusion.target.name))
    o.fusion.keep_apart[graph] = pairs;
}

void warn_tuned_fallbacks(const runtime::Executable& ex) {
  for (const auto& info : ex.kernels())
    if (!info.tuned_refused.empty())
      std::cerr << "kiln: warning: kernel " << info.name << ": its tuned schedule is refused (" << info.tuned_refused
                << "); the default schedule is used\n";
}

int cmd_tune(const std::vector<std::string>& argv_in) {
  const std::vector<std::string> argv = with_long_output(argv_in);
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"budget", "threads", "records", "input", "target", "output", "samples", "measurer",
                                "ray-address", "compile-jobs"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"merge", "no-cache", "strict-fp", "no-fusion-search", "no-filter"});
  Args a(argv, valued, flags);
  if (a.has("merge")) {
    if (a.positional().size() < 2) user_error("tune --merge expects two or more records files and -o FILE");
    return merge(a);
  }
  if (a.positional().size() != 1) user_error("tune expects one MODEL.onnx (see kiln help)");
  const std::string model = a.positional()[0];
  const double budget = tune::parse_budget(a.get("budget", "10m"));
  const int jobs = compile_jobs(a);  // checked before any work, like the budget
  std::string why;
  const std::string path = records_path(a, &why);
  if (path.empty()) user_error("no private cache folder for the records (", why, "); give --records FILE");
  runtime::BuildOptions bo;
  bo.fusion = fusion_options(a);
  bo.threads = a.threads();
  if (bo.threads <= 0) bo.threads = tune::current_machine(0).threads;
  bo.compile.use_cache = !a.has("no-cache");
  bo.strict_fp = a.has("strict-fp");
  const tune::MachineKey machine = tune::current_machine(bo.threads);
  // The database is read (and refused when unreadable) before any work.
  tune::RecordsFile rf = tune::read_records(path, nullptr);
  print_warnings(rf.warnings);
  std::vector<tune::Record> records = rf.records;
  // So is the measurer: a cluster that cannot be reached is an error before the model is built.
  std::unique_ptr<tune::Measurer> measurer = make_measurer(a);

  auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
  TensorMap inputs = analysis::fill_inputs(*g, analysis::read_input_specs(a.all("input")));
  const bool tty = isatty(fileno(stderr)) != 0;
  auto progress = [&](const std::string& m) {
    // A terminal gets one line rewritten in place; a log gets every line.
    if (tty) std::fprintf(stderr, "\rkiln tune: %s\033[K", m.c_str());
    else std::fprintf(stderr, "kiln tune: %s\n", m.c_str());
    std::fflush(stderr);
  };
  std::printf("tuning %s on %s, budget %.0f s, records %s\n", model.c_str(), machine.str().c_str(), budget, path.c_str());
  if (a.get("measurer", "local") == "ray")
    std::printf("measuring on the Ray cluster at %s: %d kernels at a time (kiln_measure units)\n",
                a.get("ray-address").c_str(), measurer->parallelism());
  std::fflush(stdout);

  // Fusion decisions first (a share of the budget): they decide the kernels whose schedules are
  // then searched. Pairs recorded apart by earlier runs are kept apart from the start.
  const runtime::BuildOptions default_plan = bo;
  for (auto& [graph, pairs] : tune::keep_apart_pairs(records, machine, bo.fusion.target.name))
    bo.fusion.keep_apart[graph] = pairs;
  double fusion_s = 0;
  if (!a.has("no-fusion-search") && bo.fusion.enabled) {
    tune::FusionSearchOptions fo;
    fo.budget_s = budget * kFusionShare;
    fo.build = default_plan;  // from the default plan: recorded decisions show as such
    fo.progress = progress;
    tune::FusionSearchReport fr;
    try {
      fr = tune::search_fusions(*g, inputs, fo, records);
    } catch (const UserError& e) {
      throw UserError(model + ": " + e.what());
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    for (const auto& r : tune::fusion_records(fr, machine, bo.fusion.target.name)) tune::upsert_record(records, r);
    tune::write_records(path, records);
    if (fr.keep_apart.empty()) bo.fusion.keep_apart.erase(fr.graph);
    else bo.fusion.keep_apart[fr.graph] = fr.keep_apart;
    fusion_s = fr.search_s;
    print_fusion_trials(fr);
    // How far the default plan is from the best plan found (default schedules both): the measure
    // of the partitioner's decisions on this model and machine.
    if (kept_apart(bo, fr.graph) > 0) {
      auto dex = runtime::Executable::build(g->clone(), default_plan);
      auto bex = runtime::Executable::build(g->clone(), bo);
      auto [dms, bms] = interleaved_medians(*dex, *bex, inputs, rounds_for(*dex, inputs));
      std::printf("plan: the default plan %.3f ms, the best plan found %.3f ms (%.2fx; default schedules, %d vs %d "
                  "kernels)\n",
                  dms, bms, dms / bms, dex->plan().kernel_count(), bex->plan().kernel_count());
    }
  }

  tune::TuneOptions to;
  to.budget_s = std::max(1.0, budget - fusion_s);
  to.build = bo;
  to.progress = progress;
  to.filter = !a.has("no-filter");
  to.compile_jobs = jobs;
  tune::TuneReport rep;
  try {
    rep = tune::tune_model(*g, inputs, to, *measurer, records,
                           [&](const std::vector<tune::Record>& rs) { tune::write_records(path, rs); });
  } catch (const UserError& e) {
    throw UserError(model + ": " + e.what());
  }
  if (tty) std::fprintf(stderr, "\r\033[K");
  // The default build's profile also calibrates the cost model (kiln calibrate).
  for (auto& s : rep.samples) s.model = std::filesystem::path(model).stem().string();
  add_cost_samples(a, rep.samples);

  // trials: points measured; proposed: points the search proposed (with the filter, the schedule
  // model picked the measured ones among them); mutants: of the trials, evolution-strategy points.
  std::printf("%-44s %4s %6s %8s %7s %11s %11s %7s  %s\n", "kernel", "x", "trials", "proposed", "mutants", "default ms",
              "tuned ms", "speedup", "schedule");
  int searched = 0, tuned = 0, skipped = 0, trials = 0, proposed = 0;
  for (const auto& k : rep.kernels) {
    searched += !k.from_records && k.trials > 0;
    tuned += k.improved;
    skipped += k.from_records;
    if (!k.from_records) {
      trials += k.trials;
      proposed += k.proposed;
    }
    std::string name = k.name.size() > 44 ? k.name.substr(0, 41) + "..." : k.name;
    if (k.default_ms > 0)
      std::printf("%-44s %4d %6d %8d %7d %11.4g %11.4g %6.2fx  %s%s\n", name.c_str(), k.instances, k.trials,
                  k.proposed, k.mutants, k.default_ms, k.improved ? k.tuned_ms : k.default_ms,
                  k.improved ? k.default_ms / k.tuned_ms : 1.0, tune::describe_fields(k.changed).c_str(),
                  k.from_records ? " (recorded)" : "");
    else
      std::printf("%-44s %4d %6d %8d %7d %11s %11s %7s  %s\n", name.c_str(), k.instances, k.trials, k.proposed,
                  k.mutants, "-", "-", "-", k.note.c_str());
  }
  std::printf("search: %.1f s of the %.0f s budget; %d kernels searched, %d from the records, %d with a tuned "
              "schedule; %.1f s compiling\n",
              rep.search_s, budget, searched, skipped, tuned, rep.compile_s);
  std::printf("candidates: %d measured of %d proposed (%s; %zu model samples)\n", trials, proposed,
              to.filter ? "schedule model filter" : "--no-filter: every proposed point measured", rep.model_samples);

  // The whole model, default vs tuned (every matching record, this run's included: the kept-apart
  // pairs and the schedules).
  runtime::BuildOptions tb = bo;
  tb.kernel_schedules = tune::kernel_schedules(records, machine, bo.fusion.target);
  const std::string graph = graph_fingerprint(*g);
  const bool plan_changed = kept_apart(bo, graph) > 0;
  if (tb.kernel_schedules.empty() && !plan_changed) {
    std::printf("whole model: no kernel has a tuned schedule and the plan is the default; the default is kept\n");
    return 0;
  }
  runtime::BuildOptions db = bo;
  db.fusion.keep_apart = default_plan.fusion.keep_apart;
  auto dex = runtime::Executable::build(g->clone(), db);
  auto tex = runtime::Executable::build(g->clone(), tb);
  warn_tuned_fallbacks(*tex);
  int used = 0;
  for (const auto& k : tex->kernels()) used += k.tuned;
  const int rounds = rounds_for(*dex, inputs);
  auto [dms, tms] = interleaved_medians(*dex, *tex, inputs, rounds);
  std::printf("whole model (%d threads, %d of %d kernels tuned, %zu fusion(s) kept apart, medians of %d interleaved "
              "runs): default %.3f ms, tuned %.3f ms (%.2fx)\n",
              bo.threads, used, tex->plan().kernel_count(), kept_apart(bo, graph), rounds, dms, tms, dms / tms);
  return 0;
}

}  // namespace kiln::cli
