// kiln tune-worker REQUEST RESULT: one measurement job of `kiln tune`, run where the job was sent
// (the Ray measurer's driver, tools/ray_measure.py, runs it on a cluster node). Reads a serialised
// MeasureRequest (tune/measure_wire.h), measures it with this machine's LocalMeasurer and writes
// the MeasureResult beside RESULT first, then renames it over RESULT: a reader sees the whole
// result or none. Bad input is one error line and exit 1, with no result file written.
#include <cstdio>

#include "cli.h"
#include "tune/measure_wire.h"
#include "tune/measurer.h"

namespace kiln::cli {

int cmd_tune_worker(const std::vector<std::string>& argv) {
  Args a(argv, {}, {});
  if (a.positional().size() != 2) user_error("tune-worker expects REQUEST_FILE RESULT_FILE");
  const std::string& in = a.positional()[0];
  const std::string& out = a.positional()[1];
  const tune::MeasureRequest req = tune::parse_request(tune::read_file_bytes(in), in);
  tune::LocalMeasurer measurer;
  const tune::MeasureResult res = measurer.measure(req);
  tune::write_file_atomically(out, tune::serialize_result(res));
  return 0;
}

}  // namespace kiln::cli
