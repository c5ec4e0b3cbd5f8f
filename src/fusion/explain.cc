#include "fusion/explain.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "fusion/assign_layouts.h"
#include "support/json.h"

namespace kiln {

namespace {

std::string fmt(double v, int prec = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

std::string human_bytes(int64_t b) {
  if (b >= (int64_t(1) << 20)) return fmt(double(b) / double(1 << 20)) + " MiB";
  if (b >= 1024) return fmt(double(b) / 1024.0) + " KiB";
  return std::to_string(b) + " B";
}


std::string dot_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') {
      r += "\\n";
      continue;
    }
    r += c;
  }
  return r;
}

// The channels-last values (fusion/assign_layouts.h) a kernel stores and reads: "stores 'v'
// [1,58,58,64]" for a layout Pad among its members, "reads 'v'" for such a value among its inputs.
std::vector<std::string> layout_notes(const FusionGroup& grp) {
  std::vector<std::string> notes;
  auto shape = [](const Value* v) {
    std::string r = "[";
    for (size_t i = 0; i < v->shape().size(); ++i) r += (i ? "," : "") + std::to_string(v->shape()[i]);
    return r + "]";
  };
  for (const Node* n : grp.nodes)
    if (is_layout_boundary(*n)) notes.push_back("stores '" + n->output(0)->name() + "' channels-last " + shape(n->output(0)));
  for (const Value* v : grp.inputs)
    if (v->producer() && is_layout_boundary(*v->producer())) notes.push_back("reads '" + v->name() + "' channels-last");
  return notes;
}

}  // namespace

std::string explain_text(const Graph& g, const FusionPlan& plan, const ExplainExtras& extras) {
  std::ostringstream os;
  os << "target " << plan.target.name << " (" << plan.target.peak_gflops << " GFLOP/s, " << plan.target.dram_gbps
     << " GB/s, " << plan.target.launch_overhead_us << " us per launch; "
     << (plan.target.name == "native" ? "peak and bandwidth measured by kiln probe" : "a target description, not a measurement")
     << ")\n\n";
  int k = 0;
  for (const auto& grp : plan.groups) {
    if (grp.in_place_concat) {
      const Node* n = grp.nodes.front();
      os << "in place: Concat '" << n->name() << "' (no kernel: its " << n->num_inputs()
         << " parts' producers write its slices)\n";
      continue;
    }
    if (!grp.counts_as_kernel()) continue;
    os << "kernel " << ++k << ": " << grp.name << "  [" << group_kind_name(grp.kind) << "; "
       << (grp.is_library() ? "LIBRARY KERNEL (slow path): " + grp.library_reason : "emitter " + grp.emitter) << "]\n";
    os << "  ops:    ";
    for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : "") << grp.nodes[i]->op_type();
    os << "\n  nodes:  ";
    for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : "") << grp.nodes[i]->name();
    if (grp.placements.size() == grp.nodes.size() && grp.nodes.size() > 1) {
      os << "\n  placed: ";
      for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : "") << grp.nodes[i]->op_type() << "@" << grp.placements[i];
    }
    if (const auto notes = layout_notes(grp); !notes.empty()) {
      os << "\n  layout: ";
      for (size_t i = 0; i < notes.size(); ++i) os << (i ? "; " : "") << notes[i];
    }
    os << "\n  flops " << fmt(grp.cost.flops / 1e6, 2) << " M, read " << human_bytes(grp.cost.bytes_read)
       << ", write " << human_bytes(grp.cost.bytes_written) << ", est " << fmt(grp.cost.total_us(), 1) << " us ("
       << (grp.cost.compute_us > grp.cost.memory_us ? "compute" : "memory") << "-bound)\n";
  }
  if (!plan.rejected.empty()) {
    os << "\nnot fused:\n";
    for (const auto& r : plan.rejected) os << "  " << r.producer << " -> " << r.consumer << ": " << r.reason << "\n";
  }
  int views = 0, concats = 0;
  for (const auto& grp : plan.groups) (grp.in_place_concat ? concats : views) += grp.counts_as_kernel() ? 0 : 1;
  os << "\nkernels: " << plan.kernel_count() << " (" << g.num_nodes() << " ops; " << views << " pure views and "
     << concats << " Concats built in place count as none); " << plan.library_kernel_count() << " library kernel(s)\n";
  os << "fusion analysis: " << plan.analysis_calls << " questions to code generation, "
     << plan.analysis_calls - plan.analysis_cache_hits << " lowered (" << fmt(plan.analysis_ms, 1) << " ms)\n";
  os << "intermediate bytes to DRAM: " << human_bytes(plan.intermediate_bytes_unfused) << " unfused -> "
     << human_bytes(plan.intermediate_bytes_fused) << " fused\n";
  // On a GPU every kernel is a launch from the host (the seed's case for fusion): what the plan
  // saves of the target's per-launch cost, which the estimates above include.
  const int saved = plan.kernels_unfused - plan.kernel_count();
  os << "launches per inference: " << plan.kernel_count() << " (" << plan.kernels_unfused << " unfused): " << saved
     << " saved, " << fmt(saved * plan.target.launch_overhead_us, 1) << " us of launch overhead at "
     << fmt(plan.target.launch_overhead_us, 1) << " us each\n";
  os << "estimated time: " << fmt(plan.est_us_unfused) << " us unfused -> " << fmt(plan.est_us_fused) << " us fused\n";
  os << (extras.strict_fp ? "numerics: strict (--strict-fp): the reference's float operations in its order, bit-identical\n"
                          : "numerics: default: FMA in contractions and epilogues, reordered sums, kiln's exp/erf/tanh; within "
                            "1e-4 of the reference (--strict-fp for its bits)\n");
  int layouts = 0;
  for (const Node* n : g.nodes()) layouts += is_layout_boundary(*n);
  os << "layouts: " << layouts
     << " values between convs channels-last with the next conv's padding (its planes read in place); the rest, "
        "graph inputs and outputs in the model's layout\n";
  if (extras.arena_bytes >= 0)
    os << "memory: peak arena " << human_bytes(extras.arena_bytes) << " for " << human_bytes(extras.intermediate_sum_bytes)
       << " of intermediates (liveness-planned, in-place where elementwise or in a contraction's epilogue)\n";
  return os.str();
}

std::string explain_json(const Graph& g, const FusionPlan& plan, const ExplainExtras& extras) {
  std::ostringstream os;
  os << "{\"target\": " << json_quote(plan.target.name) << ", \"kernel_count\": " << plan.kernel_count()
     << ", \"op_count\": " << g.num_nodes() << ", \"accepted_fusions\": " << plan.accepted_fusions
     << ", \"library_kernel_count\": " << plan.library_kernel_count()
     << ", \"analysis_calls\": " << plan.analysis_calls << ", \"analysis_lowered\": "
     << plan.analysis_calls - plan.analysis_cache_hits << ", \"analysis_ms\": " << fmt(plan.analysis_ms, 3)
     << ", \"intermediate_bytes_unfused\": " << plan.intermediate_bytes_unfused
     << ", \"intermediate_bytes_fused\": " << plan.intermediate_bytes_fused
     << ", \"est_us_unfused\": " << fmt(plan.est_us_unfused, 3) << ", \"est_us_fused\": " << fmt(plan.est_us_fused, 3)
     << ", \"kernels_unfused\": " << plan.kernels_unfused << ", \"launch_overhead_us\": " << fmt(plan.target.launch_overhead_us, 3)
     << ", \"numerics\": " << (extras.strict_fp ? "\"strict\"" : "\"default\"")
     << ", \"peak_arena_bytes\": " << extras.arena_bytes << ", \"intermediate_sum_bytes\": " << extras.intermediate_sum_bytes
     << ", \"in_place_concats\": [";
  int concats = 0;
  for (const auto& grp : plan.groups)
    if (grp.in_place_concat) os << (concats++ ? ", " : "") << json_quote(grp.nodes.front()->name());
  os << "],\n \"kernels\": [";
  bool first = true;
  for (const auto& grp : plan.groups) {
    if (!grp.counts_as_kernel()) continue;
    os << (first ? "\n  " : ",\n  ") << "{\"name\": " << json_quote(grp.name) << ", \"kind\": "
       << json_quote(group_kind_name(grp.kind)) << ", \"emitter\": " << json_quote(grp.is_library() ? "library" : grp.emitter);
    if (grp.is_library()) os << ", \"library_reason\": " << json_quote(grp.library_reason);
    os << ", \"ops\": [";
    first = false;
    for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : "") << json_quote(grp.nodes[i]->op_type());
    os << "], \"nodes\": [";
    for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : "") << json_quote(grp.nodes[i]->name());
    os << "], \"placements\": [";
    for (size_t i = 0; i < grp.placements.size(); ++i) os << (i ? ", " : "") << json_quote(grp.placements[i]);
    os << "], \"layout\": [";
    const auto notes = layout_notes(grp);
    for (size_t i = 0; i < notes.size(); ++i) os << (i ? ", " : "") << json_quote(notes[i]);
    os << "], \"flops\": " << fmt(grp.cost.flops, 0) << ", \"bytes_read\": " << grp.cost.bytes_read
       << ", \"bytes_written\": " << grp.cost.bytes_written << ", \"est_us\": " << fmt(grp.cost.total_us(), 3) << "}";
  }
  os << "],\n \"rejected\": [";
  for (size_t i = 0; i < plan.rejected.size(); ++i) {
    const auto& r = plan.rejected[i];
    os << (i ? ",\n  " : "\n  ") << "{\"producer\": " << json_quote(r.producer)
       << ", \"consumer\": " << json_quote(r.consumer) << ", \"reason\": " << json_quote(r.reason) << "}";
  }
  os << "]}\n";
  return os.str();
}

std::string explain_dot(const Graph& g, const FusionPlan& plan) {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  std::map<const Node*, std::string> id;
  int n = 0;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const auto& grp = plan.groups[gi];
    os << "  subgraph cluster_" << gi << " {\n    label=\"" << dot_escape(grp.name) << "\";\n"
       << (grp.counts_as_kernel() ? "    style=filled; color=lightgrey;\n" : "    style=dashed;\n");
    for (const Node* node : grp.nodes) {
      std::string nid = "n" + std::to_string(n++);
      if (!id.count(node)) id[node] = nid;
      os << "    " << nid << " [label=\"" << dot_escape(node->op_type() + "\n" + node->name()) << "\"];\n";
    }
    os << "  }\n";
  }
  for (Node* node : g.nodes())
    for (const Value* v : node->outputs())
      for (auto [c, slot] : v->uses())
        if (id.count(node) && id.count(c)) os << "  " << id[node] << " -> " << id[c] << ";\n";
  os << "}\n";
  return os.str();
}

std::string plan_structure(const FusionPlan& plan) {
  std::ostringstream os;
  for (const auto& grp : plan.groups) {
    os << (grp.counts_as_kernel() ? "kernel " : "view ") << grp.name;
    if (grp.counts_as_kernel())
      os << " [" << group_kind_name(grp.kind) << "; " << (grp.is_library() ? "library" : grp.emitter) << "]";
    os << ":";
    for (size_t i = 0; i < grp.nodes.size(); ++i) os << (i ? ", " : " ") << grp.nodes[i]->name();
    os << "\n";
  }
  for (const auto& r : plan.rejected) os << "rejected " << r.producer << " -> " << r.consumer << ": " << r.reason << "\n";
  os << "kernels: " << plan.kernel_count() << "\n";
  return os.str();
}

}  // namespace kiln
