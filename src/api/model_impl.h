// What a kiln::Model holds (include/kiln/model.h), shared by the API's source files: model.cc
// (compile, run) and model_reports.cc (explain, roofline, AOT bundle).
#pragma once
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/model.h"
#include "runtime/executable.h"

namespace kiln {

struct Model::Impl {
  std::string path;              // the model file, named in error messages as the CLI names it
  runtime::BuildOptions build;   // what exe was built with (reports rebuild from these)
  std::unique_ptr<runtime::Executable> exe;
  std::vector<TensorInfo> inputs, outputs;
  int exe_threads() const;
};

// Where an exception came from, which decides its Error::Kind when its type does not.
enum class Phase { Import, Build, Run, Report };

// Called in a catch block: rethrows the exception being handled as a kiln::Error of the kind its
// type and `phase` give (UnsupportedError -> UnsupportedOp; UserError -> Model, Compile during the
// build, Usage in reports; InternalError -> Internal, Compile during the build).
[[noreturn]] void rethrow_as_api_error(Phase phase);

}  // namespace kiln
