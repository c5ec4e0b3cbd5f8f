// Test helpers for loop lowering: execute a fusion plan group by group — lowered groups with the
// loop-IR interpreter, the others with the reference kernels (as fusion/plan_executor.cc does) —
// and compare with the unfused reference run.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "codegen/c/c_emitter.h"
#include "frontend/onnx/onnx_import.h"
#include "ir/parser.h"
#include "fusion/partitioner.h"
#include "loop/loop_interpreter.h"
#include "loop/lower_group.h"
#include "reference/executor.h"
#include "runtime/executable.h"
#include "runtime/jit.h"
#include "transforms/lowering.h"
#include "transforms/pipeline.h"

namespace kiln::testing {

struct LoweredRun {
  TensorMap outputs;
  int lowered = 0, refused = 0;
  std::map<std::string, int> reasons;       // refusal reason → count (reductions etc. included)
  std::vector<loop::LoopKernel> kernels;    // the lowered ones, in plan order
};

inline LoweredRun run_lowered(const Graph& g, const FusionPlan& plan, const TensorMap& inputs,
                              const loop::Schedule& sched = loop::Schedule{}) {
  LoweredRun run;
  std::unordered_map<const Value*, Tensor> memory;
  for (Value* in : g.inputs()) memory[in] = inputs.at(in->name());
  auto read = [&](const Value* v) { return v->is_constant() ? v->constant() : memory.at(v); };
  for (const auto& grp : plan.groups) {
    loop::LoweredGroup lg = loop::lower_group(grp, grp.name, sched);
    if (lg.kernel) {
      ++run.lowered;
      std::vector<Tensor> ins, outs;
      for (const Value* v : grp.inputs) ins.push_back(read(v));
      for (const Value* v : grp.outputs) outs.emplace_back(v->dtype(), v->shape());
      std::vector<Tensor*> in_ptrs, out_ptrs;
      for (auto& t : ins) in_ptrs.push_back(&t);
      for (auto& t : outs) out_ptrs.push_back(&t);
      loop::interpret(*lg.kernel, in_ptrs, out_ptrs);
      for (size_t i = 0; i < outs.size(); ++i) memory[grp.outputs[i]] = outs[i];
      run.kernels.push_back(std::move(*lg.kernel));
      continue;
    }
    ++run.refused;
    ++run.reasons[lg.reason];
    std::unordered_map<const Value*, Tensor> local;
    for (const Value* v : grp.inputs) local[v] = read(v);
    for (const Node* n : grp.nodes) {
      std::vector<Tensor> args;
      for (const Value* v : n->inputs()) args.push_back(v ? local.at(v) : Tensor{});
      auto outs = run_node(*n, args);
      for (size_t i = 0; i < outs.size(); ++i) local[n->output(i)] = outs[i];
    }
    for (const Value* v : grp.outputs) memory[v] = local.at(v);
  }
  for (Value* o : g.outputs()) run.outputs[o->name()] = read(o);
  return run;
}

// "" when got matches want: floats within 1e-5 relative (plus 1e-6 absolute near zero; NaN
// matches NaN, infinities must be equal), integers and bool exactly.
// The emitter and C compiler options of a numerics mode (runtime::with_numerics) with a private
// cache folder: strict for tests that compare a compiled kernel's bits with the reference, the
// default (FMA) for tests that compare within tolerance.
inline runtime::BuildOptions numerics_options(bool strict, const std::string& cache_dir) {
  runtime::BuildOptions o;
  o.strict_fp = strict;
  o.compile.cache_dir = cache_dir;
  return runtime::with_numerics(o);
}

inline std::string compare_tensors(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return cat("got ", TensorType{got.dtype(), got.shape()}.str(), ", want ", TensorType{want.dtype(), want.shape()}.str());
  for (int64_t i = 0; i < want.numel(); ++i) {
    bool ok;
    if (is_float(want.dtype())) {
      const double g = got.as_double(i), w = want.as_double(i);
      if (std::isnan(w)) ok = std::isnan(g);
      else if (std::isinf(w)) ok = g == w;
      else ok = std::fabs(g - w) <= 1e-5 * std::fabs(w) + 1e-6;
    } else if (want.dtype() == DType::UInt64) {
      ok = got.data<uint64_t>()[i] == want.data<uint64_t>()[i];
    } else {
      ok = got.as_int64(i) == want.as_int64(i);
    }
    if (!ok) return cat("element ", i, ": got ", got.as_double(i), ", want ", want.as_double(i));
  }
  return "";
}

// Random inputs with edge values mixed in: floats in [-3, 3] plus NaN, ±inf, ±0 and large
// magnitudes (unless !edge_values); integers in [-20, 20] (with zeros), bool at random. `fixed`
// overrides by name.
// Bitwise equal, except that any NaN equals any NaN (payloads are not part of the contract): for
// lowerings that must give the reference's bits, signed zeros included.
inline std::string bit_exact(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return "type or shape differs";
  const size_t w = dtype_size(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    const auto* g = static_cast<const uint8_t*>(got.raw()) + i * w;
    const auto* e = static_cast<const uint8_t*>(want.raw()) + i * w;
    if (is_float(want.dtype()) && std::isnan(want.as_double(i)) && std::isnan(got.as_double(i))) continue;
    if (std::memcmp(g, e, w) != 0) return cat("element ", i, ": got ", got.as_double(i), ", want ", want.as_double(i));
  }
  return "";
}

// Runs kernel `k` (lowered from `grp`) in the loop interpreter on the group's inputs taken from
// `values` (every tensor of a reference run); returns its outputs in group order.
inline std::vector<Tensor> interpret_group(const loop::LoopKernel& k, const FusionGroup& grp,
                                           const std::unordered_map<const Value*, Tensor>& values) {
  std::vector<Tensor> in, out;
  std::vector<Tensor*> ip, op;
  for (const Value* v : grp.inputs) in.push_back(v->is_constant() ? v->constant() : values.at(v).clone());
  for (const Value* v : grp.outputs) out.emplace_back(v->dtype(), v->shape());
  for (auto& t : in) ip.push_back(&t);
  for (auto& t : out) op.push_back(&t);
  loop::interpret(k, ip, op);
  return out;
}

// The public models named in `names` that have been exported (by ctest's models_end_to_end into
// the build's models/ folder, or by bench/models/make_models.py into bench/models/out), imported,
// simplified and lowered, in the order given. Missing ones are left out.
inline std::vector<std::pair<std::string, std::unique_ptr<Graph>>> public_models(const std::vector<std::string>& names) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::unique_ptr<Graph>>> out;
  for (const auto& m : names)
    for (const fs::path& dir : {fs::path(KILN_BINARY_DIR) / "models", fs::path(KILN_SOURCE_DIR) / "bench/models/out"}) {
      const fs::path path = dir / (m + ".onnx");
      if (!fs::exists(path)) continue;
      auto g = import_onnx(path.string());
      run_pipeline(*g);
      run_lowering(*g);
      out.emplace_back(m, std::move(g));
      break;
    }
  return out;
}

// demo and mlp_ln; with KILN_LOWER_MODELS=1 also resnet18, mobilenet_v2 and the encoder (minutes
// in the loop interpreter).
inline std::vector<std::string> public_model_names() {
  std::vector<std::string> names = {"demo", "mlp_ln"};
  if (std::getenv("KILN_LOWER_MODELS")) names.insert(names.end(), {"resnet18", "mobilenet_v2", "encoder"});
  return names;
}

inline TensorMap random_inputs(const Graph& g, unsigned seed = 3, const TensorMap& fixed = {}, bool edge_values = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-3, 3);
  std::uniform_int_distribution<int> pick(0, 15), iv(-20, 20);
  TensorMap m;
  for (Value* in : g.inputs()) {
    if (fixed.count(in->name())) {
      m[in->name()] = fixed.at(in->name());
      continue;
    }
    Tensor d(DType::Float64, in->shape());
    for (int64_t i = 0; i < d.numel(); ++i) {
      double v = u(rng);
      if (is_float(in->dtype())) {
        switch (edge_values ? pick(rng) : 15) {
          case 0: v = std::numeric_limits<double>::quiet_NaN(); break;
          case 1: v = std::numeric_limits<double>::infinity(); break;
          case 2: v = -std::numeric_limits<double>::infinity(); break;
          case 3: v = 0.0; break;
          case 4: v = -0.0; break;
          case 5: v = v * 1e4; break;
          default: break;
        }
      } else {
        v = iv(rng);
        if (pick(rng) < 2) v = 0;
        if (is_integer(in->dtype()) && !is_signed(in->dtype())) v = std::fabs(v);
      }
      d.data<double>()[i] = v;
    }
    m[in->name()] = in->dtype() == DType::Bool ? d.cast(DType::Int32).cast(DType::Bool) : d.cast(in->dtype());
  }
  return m;
}

// An executable of a copy of g at the given thread count and numerics (default or --strict-fp).
inline std::unique_ptr<runtime::Executable> build_executable(const Graph& g, int threads, bool strict) {
  runtime::BuildOptions o;
  o.threads = threads;
  o.strict_fp = strict;
  return runtime::Executable::build(g.clone(), o);
}

// Partitions g, runs it lowered and unfused, and checks every output. Returns the run.
// "" when got matches want within tol × the largest finite |want| (NaN matches NaN, infinities
// must be equal): the numerics contract.
inline std::string within_max_magnitude(const Tensor& got, const Tensor& want, double tol = 1e-4) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return "type or shape differs";
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.as_double(i))) scale = std::max(scale, std::fabs(want.as_double(i)));
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.as_double(i), w = want.as_double(i);
    const bool ok = std::isnan(w) ? std::isnan(g) : std::isinf(w) ? g == w : std::fabs(g - w) <= tol * scale;
    if (!ok) return cat("element ", i, ": got ", g, ", want ", w, " (largest |want| ", scale, ")");
  }
  return "";
}

// Every node of `g` as one group (what the partitioner would refuse to form when the lowering
// refuses it): reads the graph inputs and the constants, writes the graph outputs.
inline FusionGroup whole_group(const Graph& g) {
  FusionGroup grp;
  grp.kind = GroupKind::Elementwise;
  for (Value* v : g.inputs()) grp.inputs.push_back(v);
  for (Node* n : g.nodes()) {
    grp.nodes.push_back(n);
    OpKind k = op_kind(*n);
    if (k == OpKind::Contraction) grp.kind = GroupKind::Contraction;
    else if (k == OpKind::Reduction && grp.kind != GroupKind::Contraction) grp.kind = GroupKind::Reduction;
    for (Value* v : n->inputs())
      if (v && v->is_constant() && std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
        grp.inputs.push_back(v);
  }
  for (Value* v : g.outputs()) grp.outputs.push_back(v);
  return grp;
}

inline LoweredRun check_lowered(const Graph& g, const TensorMap& inputs, const FusionOptions& o = {}) {
  FusionPlan plan = partition(g, o);
  TensorMap want = run_reference(g, inputs);
  LoweredRun run = run_lowered(g, plan, inputs);
  for (const auto& [name, t] : want) {
    std::string why = compare_tensors(run.outputs.at(name), t);
    EXPECT_EQ(why, "") << "output " << name;
  }
  return run;
}

// IR text of a random chain of elementwise, broadcast and injective ops on rank-3 f32 tensors
// (unary, binary with a same-shaped value or a broadcast input, Transpose, Slice with negative
// steps, Pad in every mode, Concat, Reshape, Tile, Gather), with one or two outputs. May contain
// dead nodes; "" when nothing was generated.
inline std::string random_chain(std::mt19937& rng) {
  auto pick = [&](int n) { return int(std::uniform_int_distribution<int>(0, n - 1)(rng)); };
  auto ints = [](const std::vector<int64_t>& v) {
    std::string r;
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
    return r;
  };
  auto type = [&](const Shape& s) { return "f32" + shape_str(s); };
  struct Val {
    std::string name;
    Shape shape;
  };
  std::vector<Val> vals = {{"x", {2 + pick(3), 1 + pick(4), 2 + pick(4)}}};
  std::string body, inputs = "%x: " + type(vals[0].shape);
  int consts = 0;
  auto constant = [&](const std::string& dt, const std::vector<int64_t>& v) {
    std::string n = "c" + std::to_string(consts++);
    body += "  %" + n + " = constant " + dt + "[" + std::to_string(v.size()) + "] [" + ints(v) + "]\n";
    return "%" + n;
  };
  const int steps = 3 + pick(6);
  for (int k = 0; k < steps; ++k) {
    const Val a = vals[size_t(pick(int(vals.size())))];
    Shape s = a.shape;
    const std::string out = "v" + std::to_string(k), ax = std::to_string(pick(3));
    std::string rhs;
    switch (pick(9)) {
      case 0: {
        const char* ops[] = {"Relu", "Exp", "Sigmoid", "Neg", "Tanh", "Abs", "Sqrt", "Softplus"};
        rhs = std::string(ops[pick(8)]) + "(%" + a.name + ")";
        break;
      }
      case 1: {  // binary with a same-shaped value or a broadcast input
        const char* ops[] = {"Add", "Mul", "Sub", "Max", "Div"};
        std::string b;
        for (const Val& v : vals)
          if (v.shape == s && v.name != a.name && pick(2)) b = v.name;
        if (b.empty()) {
          Shape bs = s;
          for (auto& d : bs) d = pick(2) ? d : 1;
          if (pick(2)) bs.erase(bs.begin());
          b = "in" + std::to_string(k);
          inputs += ", %" + b + ": " + type(bs);
        }
        rhs = std::string(ops[pick(5)]) + "(%" + a.name + ", %" + b + ")";
        break;
      }
      case 2: {
        std::vector<int64_t> perm = {0, 1, 2};
        std::shuffle(perm.begin(), perm.end(), rng);
        s = {a.shape[size_t(perm[0])], a.shape[size_t(perm[1])], a.shape[size_t(perm[2])]};
        rhs = "Transpose(%" + a.name + ") {perm=[" + ints(perm) + "]}";
        break;
      }
      case 3: {  // Slice one axis, maybe backwards
        const size_t d = size_t(pick(3));
        const int64_t n = a.shape[d], step = pick(2) ? 1 + pick(2) : -1 - pick(2);
        const int64_t start = step > 0 ? pick(int(n)) : n - 1 - pick(int(n)), cnt = 1 + pick(2);
        int64_t end = start + step * cnt;
        if (end < 0) end = -n - 1;  // "before the first element" (a negative end counts from the back)
        // The element count by ONNX's clamping rules (as the reference kernel computes it).
        const int64_t e = end < 0 ? end + n : end;
        s[d] = step > 0 ? (std::min(e, n) > start ? (std::min(e, n) - start + step - 1) / step : 0)
                        : (start > std::max<int64_t>(e, -1) ? (start - std::max<int64_t>(e, -1) - step - 1) / -step : 0);
        rhs = "Slice(%" + a.name + ", " + constant("i64", {start}) + ", " + constant("i64", {end}) + ", " +
              constant("i64", {int64_t(d)}) + ", " + constant("i64", {step}) + ")";
        break;
      }
      case 4: {  // Pad (maybe cropping) in a random mode
        const char* modes[] = {"constant", "reflect", "edge", "wrap"};
        std::vector<int64_t> pads(6);
        for (size_t i = 0; i < 6; ++i) {
          pads[i] = pick(3) - (a.shape[i % 3] > 2 ? 1 : 0);
          s[i % 3] += pads[i];
        }
        rhs = "Pad(%" + a.name + ", " + constant("i64", pads) + ") {mode=\"" + modes[pick(4)] + "\"}";
        break;
      }
      case 5: {  // Concat with a same-shaped value (or itself)
        std::string b = a.name;
        for (const Val& v : vals)
          if (v.shape == s && pick(2)) b = v.name;
        s[size_t(std::stoi(ax))] *= 2;
        rhs = "Concat(%" + a.name + ", %" + b + ") {axis=" + ax + "}";
        break;
      }
      case 6: {  // Reshape: rotate the dims
        s = {a.shape[1], a.shape[2], a.shape[0]};
        rhs = "Reshape(%" + a.name + ", " + constant("i64", s) + ")";
        break;
      }
      case 7: {
        std::vector<int64_t> reps = {1, 1, 1};
        reps[size_t(pick(3))] = 2;
        for (size_t i = 0; i < 3; ++i) s[i] *= reps[i];
        rhs = "Tile(%" + a.name + ", " + constant("i64", reps) + ")";
        break;
      }
      case 8: {  // Gather along an axis with constant indices (a progression or not)
        const size_t d = size_t(pick(3));
        std::vector<int64_t> idx;
        for (int i = 0; i < 3; ++i) idx.push_back(pick(int(a.shape[d])) - (pick(2) ? a.shape[d] : 0));
        s[d] = 3;
        rhs = "Gather(%" + a.name + ", " + constant("i64", idx) + ") {axis=" + std::to_string(d) + "}";
        break;
      }
    }
    for (int64_t d : s)
      if (d <= 0 || d > 24) s = {};
    if (s.empty()) continue;  // an unlucky shape: skip this step
    body += "  %" + out + ": " + type(s) + " = " + rhs + " name=\"n" + std::to_string(k) + "\"\n";
    vals.push_back({out, s});
  }
  std::string outs = "%" + vals.back().name;
  if (vals.size() > 2 && pick(2)) outs += ", %" + vals[vals.size() / 2].name;
  if (outs == "%x") return "";
  return "graph main opset 17 (" + inputs + ") -> (" + outs + ") {\n" + body + "}\n";
}

// The files (or folders) in `dir` whose names start with `prefix`, sorted; none when `dir` is missing.
inline std::vector<std::filesystem::path> sorted_files(const std::filesystem::path& dir, const std::string& prefix) {
  std::vector<std::filesystem::path> r;
  if (!std::filesystem::exists(dir)) return r;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) r.push_back(e.path());
  std::sort(r.begin(), r.end());
  return r;
}

// Imports one ONNX backend test (model + test_data_set_0 inputs) the way `kiln test-onnx --fused`
// does (simplified and lowered) and checks the reference can run it; false with `why` when kiln
// cannot import or run it (nothing to compare with then).
inline bool load_backend_test(const std::filesystem::path& dir, std::unique_ptr<Graph>& g, TensorMap& inputs,
                              std::string& why) {
  try {
    g = import_onnx((dir / "model.onnx").string());
    run_pipeline(*g);
    run_lowering(*g);
    auto files = sorted_files(dir / "test_data_set_0", "input_");
    for (size_t i = 0; i < files.size() && i < g->inputs().size(); ++i) {
      std::string tname;
      Tensor t = read_tensor_proto_file(files[i].string(), &tname);
      Value* v = g->find_value(tname);
      if (!v || !v->is_graph_input()) v = g->inputs()[i];
      if (v->dtype() == DType::BFloat16 && t.dtype() == DType::UInt16) {  // ONNX 1.12 test-data quirk
        Tensor b(DType::BFloat16, t.shape());
        if (t.nbytes()) std::memcpy(b.raw(), t.raw(), t.nbytes());
        t = b;
      }
      inputs[v->name()] = t;
    }
    if (inputs.size() != g->inputs().size()) throw UserError("inputs do not match the model");
    run_reference(*g, inputs);
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}

// A graph in kiln's IR text from its signature and body, with each of `consts` (name, shape) a
// constant line of normal random values (stddev `sd`, seeded) — the weights a lowering packs or
// reads as constants. A rank-0 constant holds `scalar` instead.
inline std::unique_ptr<Graph> graph_with_constants(const std::string& inputs, const std::string& outputs,
                                                   const std::string& body,
                                                   const std::vector<std::pair<std::string, Shape>>& consts,
                                                   unsigned seed, float sd,
                                                   const std::function<std::string(const std::string&)>& scalar = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::string lines;
  for (const auto& [name, shape] : consts) {
    std::string dims, vals;
    for (size_t d = 0; d < shape.size(); ++d) dims += (d ? "," : "") + std::to_string(shape[d]);
    if (shape.empty()) vals = scalar ? scalar(name) : std::to_string(nd(rng));
    for (int64_t i = 0; !shape.empty() && i < shape_numel(shape); ++i) vals += (i ? ", " : "") + std::to_string(nd(rng));
    lines += "  %" + name + " = constant f32[" + dims + "] [" + vals + "]\n";
  }
  return parse_graph("graph main opset 17 (" + inputs + ") -> (" + outputs + ") {\n" + lines + body + "}\n");
}

// Lowered kernels compiled together into one C module (one compiler run per test) and each checked
// against the reference executor's values of its group's tensors.
class KernelBatch {
 public:
  // Records `k`, the lowered kernel of `grp`; its inputs and expected outputs come from `values`
  // (run_reference_values of the group's graph).
  void add(loop::LoopKernel k, const FusionGroup& grp, const std::unordered_map<const Value*, Tensor>& values) {
    auto value = [&](const Value* v) { return v->is_constant() ? v->constant() : values.at(v); };
    Entry e{k.name, {}, {}};
    for (const Value* v : grp.inputs) e.ins.push_back(value(v).clone());
    for (const Value* v : grp.outputs) e.want.push_back(value(v));
    kernels_.push_back(std::move(k));
    entries_.push_back(std::move(e));
  }
  size_t size() const { return entries_.size(); }

  // Compiles every kernel into one module (in a temporary cache folder named after `tag`), runs each
  // on its inputs and compares its outputs with the reference: element by element (compare_tensors),
  // or, with `contract`, within the numerics contract (1e-4 of the largest magnitude: sums that run
  // in another order than the reference's, such as the implicit conv's).
  // With `bits`, element for element in the reference's bits (bit_exact; a strict build).
  void check(const std::string& tag, bool contract = false, bool bits = false) {
    if (entries_.empty()) return;
    const auto dir = std::filesystem::temp_directory_path() / ("kiln_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    // An element-exact comparison needs the strict build (no contraction of multiply-adds).
    const runtime::BuildOptions o = numerics_options(!contract, dir.string());
    auto module = runtime::JitModule::build(codegen::emit_c(kernels_, o.emit), o.compile);
    for (size_t k = 0; k < entries_.size(); ++k) {
      auto& e = entries_[k];
      SCOPED_TRACE(e.name);
      std::vector<Tensor> got;
      std::vector<void*> args;
      std::vector<Tensor> ins = loop::kernel_arguments(kernels_[k], e.ins);
      for (auto& t : ins) args.push_back(t.raw());
      for (const auto& w : e.want) got.emplace_back(w.dtype(), w.shape());
      for (auto& t : got) args.push_back(t.raw());
      module->get(e.name)(args.data());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(contract ? within_max_magnitude(got[i], e.want[i])
                  : bits   ? bit_exact(got[i], e.want[i])
                           : compare_tensors(got[i], e.want[i]),
                  "")
            << "output " << i;
    }
    module.reset();
    std::filesystem::remove_all(dir);
  }

 private:
  struct Entry {
    std::string name;
    std::vector<Tensor> ins, want;
  };
  std::vector<loop::LoopKernel> kernels_;
  std::vector<Entry> entries_;
};

}  // namespace kiln::testing
