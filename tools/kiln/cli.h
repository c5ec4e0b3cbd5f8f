// Shared pieces of the kiln command-line tool: argument parsing and the import+simplify step every
// command starts with. The CLI stays thin: flags in, library calls out.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_import.h"
#include "fusion/fusion_plan.h"
#include "reference/executor.h"
#include "runtime/executable.h"
#include "ir/graph.h"
#include "transforms/pipeline.h"
#include "tune/cost_calibration.h"

namespace kiln::cli {

// Parsed command line: positional arguments and options. Options are "--name=value", "--name value"
// (when the option takes a value) or "--flag". Repeatable options keep every value.
class Args {
 public:
  // `valued` names the options that take a value; `flags` those that do not. Anything else that
  // starts with "--" is a UserError.
  Args(const std::vector<std::string>& argv, const std::vector<std::string>& valued,
       const std::vector<std::string>& flags);
  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string get(const std::string& name, const std::string& dflt = "") const;
  std::vector<std::string> all(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t dflt) const;
  // --threads N: 0 (absent) means "the OpenMP default"; N must be 1..the machine's CPU count
  // (libgomp crashes creating 100000 threads; more threads than CPUs only slows kiln down).
  int threads() const;

 private:
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
};

// "NAME=1x3x224x224" → {NAME, {1,3,224,224}}; "NAME=" gives a scalar shape.
std::pair<std::string, Shape> parse_input_shape(const std::string& spec);

// Pipeline options from --dump-after/--disable-pass/--time-passes.
PipelineOptions pipeline_options(const Args& a);
// Imports MODEL (with --input-shape options) and runs the simplification pipeline, followed by the
// lowering to primitives when `lower` (what fusion works on).
std::unique_ptr<Graph> load_model(const std::string& path, const Args& a, const PipelineOptions& popts,
                                  bool lower = false);

// Fusion options from --target/--no-fusion/--fusion-fuel.
FusionOptions fusion_options(const Args& a);

// Builds the (lowered) graph into an Executable and runs it; with `check`, also runs the
// reference executor and reports per-kernel differences (UserError beyond the tolerance).
// `library` (optional) receives the op types of the kernels that ran as library kernels; when
// given, no warning line is printed (the caller reports them) and the check prints only the
// kernels that differ.
TensorMap run_compiled(std::unique_ptr<Graph> g, const Args& a, const TensorMap& inputs, bool check,
                       std::vector<std::string>* library = nullptr);

// The arguments with the conventional "-o X" spelled "--output=X" (Args knows only --name
// options); "-o" without a value is a user error. compile, emit and tune accept it.
std::vector<std::string> with_long_output(const std::vector<std::string>& argv);

// The options every model-loading command accepts.
extern const std::vector<std::string> kModelValuedOptions;
extern const std::vector<std::string> kModelFlags;

int cmd_run(const std::vector<std::string>& argv);
int cmd_info(const std::vector<std::string>& argv);
int cmd_show(const std::vector<std::string>& argv);
int cmd_test_onnx(const std::vector<std::string>& argv);
int cmd_explain(const std::vector<std::string>& argv);
int cmd_bench(const std::vector<std::string>& argv);
int cmd_compile(const std::vector<std::string>& argv);
int cmd_emit(const std::vector<std::string>& argv);
int cmd_probe(const std::vector<std::string>& argv);
int cmd_roofline(const std::vector<std::string>& argv);
int cmd_tune(const std::vector<std::string>& argv);
int cmd_calibrate(const std::vector<std::string>& argv);
int cmd_tune_worker(const std::vector<std::string>& argv);

// A one-line progress display for long steps (building kernels), shown only when stderr is a
// terminal; the line is cleared by done() or when the object goes away.
class Progress {
 public:
  Progress();
  ~Progress() { done(); }
  void operator()(const std::string& message);
  void done();
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& m) { (*this)(m); };
  }

 private:
  bool tty_ = false, shown_ = false;
};

// Executable options from --threads/--no-cache and the fusion options.
runtime::BuildOptions build_options(const Args& a);
// One stderr line naming the kernels that run outside generated code (library kernels), if any:
// a slow path is never silent.
void warn_library_kernels(const runtime::Executable& ex);
// kiln tune's records (cmd_tune.cc): the matching records of --records FILE or the default
// database become `o`'s per-kernel schedules, unless --no-records; call after o.threads and
// o.fusion are set. Skipped records are one warning line each kind.
void use_tuned_records(const Args& a, runtime::BuildOptions& o);
// Adds timed kernels to the cost-model samples (--samples FILE, else the default file when the cache
// folder is private; cmd_calibrate.cc): kiln tune keeps its profile of the default build there.
void add_cost_samples(const Args& a, const std::vector<tune::CostSample>& samples);
// One stderr line per kernel whose tuned schedule the lowering refused (it runs the default).
void warn_tuned_fallbacks(const runtime::Executable& ex);

}  // namespace kiln::cli
