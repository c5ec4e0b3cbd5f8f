#include "cli.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <algorithm>

#include "transforms/lowering.h"

namespace kiln::cli {

const std::vector<std::string> kModelValuedOptions = {"input-shape", "dump-after", "disable-pass"};
const std::vector<std::string> kModelFlags = {"time-passes"};

Args::Args(const std::vector<std::string>& argv, const std::vector<std::string>& valued,
           const std::vector<std::string>& flags) {
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (in(valued, name)) {
      if (!has_value) {
        if (i + 1 >= argv.size()) user_error("option --", name, " needs a value");
        value = argv[++i];
      }
    } else if (in(flags, name)) {
      if (has_value) user_error("option --", name, " takes no value");
    } else {
      user_error("unknown option --", name);
    }
    values_.emplace(name, value);
  }
}

std::string Args::get(const std::string& name, const std::string& dflt) const {
  auto it = values_.find(name);
  return it == values_.end() ? dflt : it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  std::vector<std::string> r;
  auto [b, e] = values_.equal_range(name);
  for (auto it = b; it != e; ++it) r.push_back(it->second);
  return r;
}

int64_t Args::get_int(const std::string& name, int64_t dflt) const {
  if (!has(name)) return dflt;
  std::string v = get(name);
  try {
    size_t pos = 0;
    int64_t r = std::stoll(v, &pos);
    if (pos == v.size()) return r;
  } catch (const std::exception&) {
  }
  user_error("option --", name, " needs an integer, got '", v, "'");
}

int Args::threads() const {
  const int64_t n = get_int("threads", 0);
  if (has("threads") && n < 1) user_error("--threads must be positive, got ", n);
  const int64_t cpus = std::max<int64_t>(1, ::sysconf(_SC_NPROCESSORS_ONLN));
  if (n > cpus) user_error("--threads ", n, " is more than this machine's ", cpus, " CPUs");
  return int(n);
}

std::pair<std::string, Shape> parse_input_shape(const std::string& spec) {
  size_t eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0) user_error("--input-shape expects NAME=DIMS (e.g. x=1x3x224x224), got '", spec, "'");
  std::string name = spec.substr(0, eq), dims = spec.substr(eq + 1);
  Shape s;
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t x = dims.find_first_of("x,", pos);
    std::string d = dims.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (d.empty() || !std::all_of(d.begin(), d.end(), ::isdigit))
      user_error("--input-shape ", name, ": bad dimension '", d, "' in '", dims, "'");
    s.push_back(std::stoll(d));
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return {name, s};
}

PipelineOptions pipeline_options(const Args& a) {
  PipelineOptions p;
  p.dump_after = a.get("dump-after");
  for (const auto& d : a.all("disable-pass")) p.disabled.insert(d);
  p.time_passes = a.has("time-passes");
  p.strict_fp = a.has("strict-fp");
  return p;
}

std::unique_ptr<Graph> load_model(const std::string& path, const Args& a, const PipelineOptions& popts, bool lower) {
  ImportOptions io;
  for (const auto& spec : a.all("input-shape")) {
    auto [name, shape] = parse_input_shape(spec);
    io.input_shapes[name] = shape;
  }
  io.warn = [](const std::string& w) { std::cerr << "kiln: warning: " << w << "\n"; };
  auto g = import_onnx(path, io);
  try {
    // Simplification, then (for fusion) lowering to primitives, as one pass list so that
    // --dump-after / --disable-pass accept any pass of either.
    auto passes = simplification_pipeline();
    if (lower)
      for (auto& p : lowering_pipeline(popts.strict_fp)) passes.push_back(std::move(p));
    run_passes(*g, passes, popts);
  } catch (const UserError& e) {
    throw UserError(path + ": " + e.what());
  }
  return g;
}

Progress::Progress() : tty_(isatty(fileno(stderr)) != 0) {}

void Progress::operator()(const std::string& message) {
  if (!tty_) return;
  std::fprintf(stderr, "\rkiln: %s...\033[K", message.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void Progress::done() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

std::vector<std::string> with_long_output(const std::vector<std::string>& argv) {
  std::vector<std::string> r;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "-o") {
      if (i + 1 >= argv.size()) user_error("option -o needs a value");
      r.push_back("--output=" + argv[++i]);
    } else {
      r.push_back(argv[i]);
    }
  }
  return r;
}

}  // namespace kiln::cli
