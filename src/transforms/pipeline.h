// The graph simplification pipeline: the passes that clean an imported ONNX graph before
// lowering, in order, with the debugging hooks every pipeline offers (dump after a pass, disable
// a pass, per-pass timing) and an IR verification after every pass that changed the graph.
#pragma once
#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "transforms/pass.h"

namespace kiln {

struct PipelineOptions {
  // "" (no dumps), a pass name, or "all". Dumps print "// after <pass>" and the IR (constants
  // elided as in `kiln show`), or just "// after <pass> (unchanged)".
  std::string dump_after;
  // Where dumps and timings go; std::cerr when null.
  std::ostream* dump = nullptr;
  // Pass names to skip.
  std::set<std::string> disabled;
  // Print "// time <pass>: <ms> ms" after each pass and a total at the end.
  bool time_passes = false;
  // How dumps print the IR (e.g. elide_constants_over = -1 for `kiln show --no-elide`).
  PrintOptions print_options;
  // --strict-fp: the lowering keeps the reference executor's bits, so recurrent ops are unrolled
  // (decompose_recurrent) even where the recurrent emitter would build them whole: their
  // reference kernel computes in double, the unrolled ops' reference kernels in the kernels'
  // order.
  bool strict_fp = false;
};

// The passes in the order run_pipeline runs them (a pass may appear more than once).
std::vector<std::unique_ptr<Pass>> simplification_pipeline();
// Every distinct pass name, sorted (for messages and flag validation).
std::vector<std::string> pass_names();
// A fresh instance of the named pass — a simplification pass or one of lowering_pipeline()'s
// (transforms/lowering.h); UserError listing the valid simplification names when unknown.
std::unique_ptr<Pass> create_pass(const std::string& name);

// Runs simplification_pipeline() on g. Unknown names in dump_after or disabled are a UserError
// listing the valid names; a pass that leaves invalid IR is an InternalError naming the pass.
void run_pipeline(Graph& g, const PipelineOptions& opts = {});
// The same driver for any list of passes (names are validated against that list).
void run_passes(Graph& g, const std::vector<std::unique_ptr<Pass>>& passes, const PipelineOptions& opts = {});

}  // namespace kiln
