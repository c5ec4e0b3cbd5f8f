// kiln emit: the generated source of a model's kernels for one target (C, OpenCL C, CUDA C), and
// with --nvrtc ARCH,... the CUDA source compiled by NVRTC to PTX for each architecture (the CI
// check that every kernel compiles for sm_80/sm_90 on machines without a GPU).
#include <cstdio>
#include <fstream>

#include "cli.h"
#include "runtime/executable.h"

namespace kiln::cli {

int cmd_emit(const std::vector<std::string>& argv_in) {
  const std::vector<std::string> argv = with_long_output(argv_in);
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"device", "output", "nvrtc", "target"});
  auto flags = kModelFlags;
  flags.push_back("no-fusion");
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("emit expects one MODEL.onnx (see kiln help)");
  runtime::BuildOptions bo = build_options(a);
  bo.load_kernels = false;  // the source only: no compiler, no device
  if (a.has("nvrtc") && bo.device != runtime::DeviceKind::Cuda) user_error("--nvrtc needs --device cuda");
  auto g = load_model(a.positional()[0], a, pipeline_options(a), /*lower=*/true);
  auto ex = runtime::Executable::build(std::move(g), bo);
  if (a.has("output")) {
    std::ofstream f(a.get("output"), std::ios::binary);
    if (!(f << ex->source())) user_error(a.get("output"), ": cannot write");
  } else if (!a.has("nvrtc")) {
    std::fwrite(ex->source().data(), 1, ex->source().size(), stdout);
  }
  if (a.has("nvrtc")) {
    const codegen::DeviceProgram& p = *ex->device_program();
    std::string archs = a.get("nvrtc");
    for (size_t pos = 0; pos <= archs.size();) {
      size_t c = archs.find(',', pos);
      const std::string arch = archs.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
      pos = c == std::string::npos ? archs.size() + 1 : c + 1;
      if (arch.rfind("sm_", 0) != 0) user_error("--nvrtc expects architectures like sm_80,sm_90, got '", arch, "'");
      const std::string ptx = runtime::nvrtc_ptx(ex->source(), arch);
      // Every launch must be an entry point of the PTX.
      size_t entries = 0;
      for (size_t q = 0; (q = ptx.find(".entry ", q)) != std::string::npos; ++q) ++entries;
      if (entries != p.launch_count())
        throw InternalError(cat("NVRTC ", arch, ": ", entries, " entry points for ", p.launch_count(), " launches"));
      std::printf("%s: %zu kernels, %zu launches, PTX %zu bytes\n", arch.c_str(), p.kernels.size(), p.launch_count(),
                  ptx.size());
    }
  }
  return 0;
}

}  // namespace kiln::cli
