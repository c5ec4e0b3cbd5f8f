// kiln run / info / show: the commands that load one model.
#include <filesystem>
#include <iostream>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "cli.h"
#include "fusion/partitioner.h"
#include "fusion/plan_executor.h"
#include "ir/printer.h"
#include "reference/executor.h"
#include "support/npy.h"

namespace kiln::cli {

namespace fs = std::filesystem;

namespace {

// A graph output name as a file name inside the output folder. Names come from the model: any
// byte but a letter, digit, '.', '_', '-' and '+' becomes '_' (no path separators, newlines or
// control characters), a leading dot becomes '_' (no hidden files, no ".."), and a name longer
// than kMaxStem keeps its start and gains a hash of the whole name (file systems refuse names
// over 255 bytes). Distinct names that still meet are refused in cmd_run.
constexpr size_t kMaxStem = 96;

std::string output_file_name(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '+') c = '_';
  if (s.empty() || s[0] == '.') s = "_" + s;
  if (s.size() > kMaxStem) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the original name
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
    char tail[24];
    std::snprintf(tail, sizeof tail, "-%016llx", static_cast<unsigned long long>(h));
    s = s.substr(0, kMaxStem) + tail;
  }
  return s + ".npy";
}

// A name as one printable line: control characters escaped, long names shortened.
std::string printable(const std::string& name) {
  std::string r;
  for (unsigned char c : name) {
    if (r.size() > 120) return r + "...";
    if (c == '\n') r += "\\n";
    else if (c == '\t') r += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    } else {
      r += char(c);
    }
  }
  return r;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.insert(valued.end(), {"input", "output-dir"});
  valued.insert(valued.end(), {"target", "fusion-fuel", "threads", "device", "records"});
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"reference", "fused-plan", "no-fusion", "compiled", "check", "no-cache", "strict-fp", "no-records"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("run expects one MODEL.onnx (see kiln help)");
  int modes = a.has("reference") + a.has("fused-plan") + (a.has("compiled") || a.has("check"));
  if (modes > 1) user_error("choose one of --reference, --fused-plan, --compiled/--check");
  if (!a.has("output-dir")) user_error("run needs --output-dir DIR");
  const std::string model = a.positional()[0];

  // Read every input before doing any work, so a bad file is reported first and nothing is written.
  TensorMap inputs;
  std::map<std::string, std::string> input_files;
  for (const auto& spec : a.all("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) user_error("--input expects NAME=FILE.npy, got '", spec, "'");
    std::string name = spec.substr(0, eq);
    if (inputs.count(name)) user_error("--input '", name, "' is given twice");
    input_files[name] = spec.substr(eq + 1);
    inputs[name] = read_npy(input_files[name]);
  }
  // Compiled code is the default; --reference runs the interpreter (the oracle), --fused-plan the
  // fusion plan with the reference kernels. --compiled is accepted (and means the default).
  const bool compiled = !a.has("reference") && !a.has("fused-plan");
  auto g = load_model(model, a, pipeline_options(a), /*lower=*/!a.has("reference"));
  for (const auto& [name, t] : inputs) {
    const Value* in = nullptr;
    for (Value* v : g->inputs())
      if (v->name() == name) in = v;
    if (!in) user_error(model, ": model has no input named '", printable(name), "'");  // the executor's words (and the Python API's)
    // Checked here too (the executors check again) so that the message names the file.
    if (t.dtype() != in->dtype() || t.shape() != in->shape())
      user_error(input_files[name], ": input '", printable(name), "' expects ", in->type().str(), ", got ",
                 TensorType{t.dtype(), t.shape()}.str());
  }
  TensorMap outputs;
  try {
    // --fused-plan runs the fusion plan kernel by kernel with the reference kernels, each kernel
    // seeing only the tensors the plan stores: the check that fusion keeps the function until
    // generated code runs the plan.
    if (compiled) {
      // The executable takes the graph; keep the output list for writing files below.
      auto clone = g->clone();
      outputs = run_compiled(std::move(clone), a, inputs, a.has("check"));
    } else {
      outputs = a.has("fused-plan") ? run_plan_reference(*g, partition(*g, fusion_options(a)), inputs)
                                    : run_reference(*g, inputs);
    }
  } catch (const UserError& e) {
    throw UserError(model + ": " + e.what());
  }

  fs::path dir(a.get("output-dir"));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) user_error("cannot create output directory '", dir.string(), "'");
  // Encode everything first (an unwritable dtype fails before any file exists), then write.
  std::vector<std::pair<fs::path, const Tensor*>> files;
  std::vector<std::string> names;
  std::map<std::string, std::string> seen;
  for (Value* o : g->outputs()) {
    std::string file = output_file_name(o->name());
    if (seen.count(file) && seen[file] != o->name())
      user_error("outputs '", printable(seen[file]), "' and '", printable(o->name()), "' map to the same file ", file);
    seen[file] = o->name();
    encode_npy(outputs.at(o->name()));
    files.push_back({dir / file, &outputs.at(o->name())});
    names.push_back(o->name());
  }
  std::vector<fs::path> written;
  try {
    for (auto& [path, t] : files) {
      write_npy(path.string(), *t);
      written.push_back(path);
    }
  } catch (...) {
    for (auto& p : written) fs::remove(p, ec);
    throw;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [path, t] = files[i];
    std::cout << path.string() << "  " << TensorType{t->dtype(), t->shape()}.str();
    // Say which output went where when the file name is not the output's name.
    if (path.filename().string() != names[i] + ".npy") std::cout << "  (output '" << printable(names[i]) << "')";
    std::cout << "\n";
  }
  return 0;
}

int cmd_info(const std::vector<std::string>& argv) {
  Args a(argv, kModelValuedOptions, kModelFlags);
  if (a.positional().size() != 1) user_error("info expects one MODEL.onnx");
  auto g = import_onnx(a.positional()[0], [&] {
    ImportOptions io;
    for (const auto& s : a.all("input-shape")) io.input_shapes.insert(parse_input_shape(s));
    io.warn = [](const std::string& w) { std::cerr << "kiln: warning: " << w << "\n"; };
    return io;
  }());
  std::cout << "model: " << a.positional()[0] << " (opset " << g->opset() << ")\n";
  std::cout << "inputs:\n";
  for (Value* v : g->inputs()) std::cout << "  " << v->name() << ": " << v->type().str() << "\n";
  std::cout << "outputs:\n";
  for (Value* v : g->outputs()) std::cout << "  " << v->name() << ": " << v->type().str() << "\n";
  std::map<std::string, int> hist;
  for (Node* n : g->nodes()) hist[n->op_type()]++;
  std::cout << "ops (" << g->num_nodes() << " nodes):\n";
  for (auto& [op, c] : hist) std::cout << "  " << op << " " << c << "\n";
  int64_t params = 0, bytes = 0;
  for (Value* v : g->values())
    if (v->is_constant()) {
      params += v->constant().numel();
      bytes += int64_t(v->constant().nbytes());
    }
  std::cout << "parameters: " << params << " (" << bytes << " bytes in constants)\n";
  return 0;
}

int cmd_show(const std::vector<std::string>& argv) {
  auto valued = kModelValuedOptions;
  valued.push_back("after");
  auto flags = kModelFlags;
  flags.insert(flags.end(), {"no-elide", "lowered"});
  Args a(argv, valued, flags);
  if (a.positional().size() != 1) user_error("show expects one MODEL.onnx");
  PrintOptions po;
  if (a.has("no-elide")) po.elide_constants_over = -1;
  std::string after = a.get("after");
  if (after == "import") {
    ImportOptions io;
    for (const auto& s : a.all("input-shape")) io.input_shapes.insert(parse_input_shape(s));
    std::cout << print_graph(*import_onnx(a.positional()[0], io), po);
    return 0;
  }
  PipelineOptions p = pipeline_options(a);
  p.print_options = po;
  if (!after.empty()) {
    p.dump_after = after;  // dumps go to stdout here: they are what the user asked for
    p.dump = &std::cout;
  }
  // A lowering pass named in --after implies --lowered.
  auto simplify = pass_names();
  bool lower = a.has("lowered") ||
               (!after.empty() && after != "all" && !std::count(simplify.begin(), simplify.end(), after));
  auto g = load_model(a.positional()[0], a, p, lower);
  if (after.empty()) std::cout << print_graph(*g, po);
  return 0;
}

}  // namespace kiln::cli
