// A Measurer that runs kiln tune's measurement jobs on a Ray cluster of identical machines
// (issue 12's scale-out; docs/tuning.md, "Ray measurer").
//
// What runs where:
//  - here: one driver process, `<python> <driver> --address A --kiln K` (tools/ray_measure.py),
//    started by the constructor and kept for the measurer's life, so that Ray's import and
//    connection (about a second) are paid once, not per batch. kiln talks to it over a pipe, one
//    line per round; the requests and results travel as files in a private temporary folder,
//    serialised with tune/measure_wire.h;
//  - on the cluster: one Ray task per request, holding one unit of the custom resource
//    `kiln_measure` (every node is started with one unit: one measurement per machine at a time),
//    running `K tune-worker` on its node, which is LocalMeasurer there. K must be the same path on
//    every node. Records are keyed by the machine running kiln tune, so every result must say it
//    was measured on the same CPU model and ISA extensions (MeasureResult::machine), or the round
//    is an error: "identical machines" is checked, not assumed.
// measure_all sends all its requests in one round, so a cluster of N nodes measures N batches at
// once; parallelism() is N (the cluster's kiln_measure units when the driver connected), which the
// tuner uses to search that many kernels side by side.
//
// Every wait has a timeout, and every failure (python or ray missing, nothing listening at the
// address, no node with the resource, a worker that crashed or timed out, the driver gone) is a
// UserError of one line; the driver is killed rather than waited on for ever.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "tune/measurer.h"

namespace kiln::tune {

struct RayOptions {
  std::string address;             // the head node, HOST:PORT (its `ray start --head --port`)
  std::string python = "python3";  // found on PATH: the interpreter pip installed ray for
  std::string driver;              // path of tools/ray_measure.py
  std::string kiln;                // the kiln binary, at this path on every node
  double connect_timeout_s = 20;   // starting the driver and connecting to the cluster
  double job_timeout_s = 600;      // one request on one node (compile + measure)
};

class RayMeasurer : public Measurer {
 public:
  // Starts the driver and waits until it is connected; UserError when it cannot be.
  explicit RayMeasurer(RayOptions opts);
  ~RayMeasurer() override;
  RayMeasurer(const RayMeasurer&) = delete;
  RayMeasurer& operator=(const RayMeasurer&) = delete;

  MeasureResult measure(const MeasureRequest& req) override;
  std::vector<MeasureResult> measure_all(const std::vector<MeasureRequest>& reqs) override;
  int parallelism() const override { return slots_; }

 private:
  void start();  // forks the driver and waits for its "ready"
  // The next protocol line ("KILN-RAY ..." without the prefix) within `timeout_s`; UserError (and
  // the driver killed) on timeout or when the driver exits.
  std::string read_line(double timeout_s, const std::string& waiting_for);
  [[noreturn]] void driver_failed(const std::string& why);
  void stop_driver(bool kill_now);

  RayOptions opts_;
  std::string here_;  // measuring_machine() of this machine: every result must come from its like
  std::string dir_;  // private temporary folder: requests, results, the driver's log
  pid_t pid_ = -1;
  int to_driver_ = -1, from_driver_ = -1;
  std::string pending_;  // bytes read from the driver past the last full line
  int slots_ = 1;
  int rounds_ = 0;
};

}  // namespace kiln::tune
