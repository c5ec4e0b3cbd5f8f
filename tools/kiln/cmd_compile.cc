// kiln compile: ahead-of-time compilation into a self-contained C bundle (src/runtime/aot_bundle.h)
// that builds with make and runs without kiln.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli.h"
#include "runtime/aot_bundle.h"

namespace kiln::cli {

int cmd_compile(const std::vector<std::string>& argv_in) {
  const std::vector<std::string> argv = with_long_output(argv_in);
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"output", "target", "fusion-fuel", "threads", "records"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"no-fusion", "no-cache", "strict-fp", "no-records"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("compile expects one MODEL.onnx (see kiln help)");
  if (!a.has("output")) user_error("compile needs -o DIR");
  const std::string model = a.positional()[0], dir = a.get("output");
  // Refuse a bad destination before the (slow) compilation.
  runtime::check_aot_destination(dir);

  runtime::BuildOptions bo = build_options(a);
  bo.load_kernels = false;  // the bundle's Makefile compiles the C; no JIT build here
  runtime::AotOptions ao;
  ao.model_path = model;
  ao.threads = bo.threads;
  // The Makefile compiles with the JIT's flags in the build's numerics mode (-ffp-contract).
  const runtime::BuildOptions resolved = runtime::with_numerics(bo);
  ao.compile = resolved.compile;
  ao.emit = resolved.emit;

  Progress progress;
  auto g = load_model(model, a, pipeline_options(a), /*lower=*/true);
  std::unique_ptr<runtime::Executable> ex;
  runtime::AotBundle bundle;
  try {
    ex = runtime::Executable::build(std::move(g), bo, progress.callback());
    progress.done();
    bundle = runtime::make_aot_bundle(*ex, ao);
  } catch (const UserError& e) {
    throw UserError(model + ": " + e.what());
  }
  runtime::write_aot_bundle(bundle, dir);
  std::printf("%s: %d kernels, %d views, %d Concats built in place; arena %lld bytes, weights %lld bytes; build with: make -C %s\n",
              dir.c_str(), bundle.generated_kernels, bundle.views, bundle.in_place_concats, (long long)bundle.arena_bytes,
              (long long)bundle.weights_bytes, dir.c_str());
  return 0;
}

}  // namespace kiln::cli
