// The tuner's measurer: compiles a batch of candidate kernels into one shared object, times each in
// isolation and checks its outputs against the default schedule's before its time counts.
//
// A request is self-contained (C source, argument tensors, expected outputs, protocol): nothing in
// it points into a graph or a plan, so a request can be shipped to another process or machine as
// it is. Measurer is the seam for that: LocalMeasurer runs requests here, one after the other;
// RayMeasurer (tune/ray_measurer.h) serialises them (tune/measure_wire.h) to identical machines
// and runs a measure_all's requests concurrently. Results are the same shape either way.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ir/tensor.h"
#include "runtime/jit.h"

namespace kiln::tune {

// How each candidate is timed: `warmup` untimed calls (the first also calibrates), then `samples`
// samples interleaved across the candidates (round-robin, so a burst of load on the shared machine
// hits them all alike), each sample the mean of enough back-to-back calls to last at least
// `min_sample_ms`; a candidate's time is the median of its samples.
struct TimingProtocol {
  int warmup = 2;
  int samples = 7;
  double min_sample_ms = 0.5;
  int max_calls_per_sample = 2000;
};

struct MeasureRequest {
  // C translation units, each complete (prelude and all) and compiled into its own object by its
  // own compiler process, in parallel: together they define every candidate. The tuner splits a
  // batch into up to TuneOptions::compile_jobs of them so that the cores share the compile.
  std::vector<std::string> sources;
  std::vector<std::string> kernels;            // candidate i's function name in `source`
  std::vector<std::vector<Tensor>> arguments;  // candidate i's inputs, as its kernel reads them (packed)
  std::vector<Tensor> reference;               // expected outputs (the default schedule's); their types
  // A float output agrees when every element is within tolerance × its largest finite |reference|
  // (the numerics contract, docs/codegen.md); other dtypes must be equal.
  double tolerance = 1e-4;
  int threads = 1;                 // kiln_set_num_threads for the module
  runtime::CompileOptions compile;
  TimingProtocol protocol;
};

struct Measurement {
  bool ok = false;           // ran and agreed with the reference
  std::string error;         // why not
  double median_ms = 0;      // per call
  double max_rel_diff = 0;   // largest difference relative to the reference's magnitude
  std::vector<double> samples;
};

struct MeasureResult {
  std::vector<Measurement> candidates;  // per request kernel
  double compile_s = 0, run_s = 0;  // compile_s: wall time of all sources' compiles
  // The machine that measured: its CPU model and ISA extensions ("cpu|isa", as in a record's key).
  // Records are keyed by the machine that runs kiln tune; a remote measurer checks this matches.
  std::string machine;
};

class Measurer {
 public:
  virtual ~Measurer() = default;
  virtual MeasureResult measure(const MeasureRequest& req) = 0;
  // Several independent requests; a distributed measurer runs them concurrently on its workers.
  virtual std::vector<MeasureResult> measure_all(const std::vector<MeasureRequest>& reqs) {
    std::vector<MeasureResult> r;
    for (const auto& q : reqs) r.push_back(measure(q));
    return r;
  }
  // How many requests measure_all runs at once (the tuner searches this many kernels side by
  // side); 1 for a measurer that runs them one after the other.
  virtual int parallelism() const { return 1; }
};

// Measures on this machine. Objects go to a private temporary folder (removed with the measurer),
// not the JIT cache: candidates are throwaway code. A request's sources are compiled by up to
// `compile_jobs` compiler processes at once (0: one per hardware thread).
class LocalMeasurer : public Measurer {
 public:
  explicit LocalMeasurer(int compile_jobs = 0);
  ~LocalMeasurer() override;
  MeasureResult measure(const MeasureRequest& req) override;

 private:
  std::string dir_;
  int compile_jobs_ = 0;
};

// This machine as MeasureResult::machine names it.
std::string measuring_machine();

// Largest |got - want| / max|want| over the tensor (float dtypes; 0 when equal), infinite when the
// types differ or a non-float element differs, NaN where `want` is not NaN counts as infinite.
double relative_difference(const Tensor& got, const Tensor& want);

}  // namespace kiln::tune
