#include "codegen/c/c_emitter.h"

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

#include "codegen/c/c_prelude.h"
#include "kernels/depthwise.h"
#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "support/error.h"

namespace kiln::codegen {

using namespace loop;

namespace {

// Local buffers above this size come from the per-thread scratch stack (kiln_scratch_push in the
// prelude): OpenMP worker threads have small stacks.
constexpr int64_t kMaxStackBytes = 64 * 1024;

// The (mr, nr) tiles of the micro-kernel calls in `s`: one specialisation is emitted for each;
// `transpose`: whether a transposing copy is called; `windows`: the (kh, kw) of the depthwise
// micro-kernel calls.
void collect_tiles(const Stmt& s, std::set<std::pair<int64_t, int64_t>>& tiles, bool& any, bool& transpose,
                   std::set<std::pair<int64_t, int64_t>>& windows, std::set<std::pair<int64_t, int64_t>>& ep_tiles,
                   bool& blocked_depthwise, bool& grouped) {
  if (!s) return;
  if (s->kind == StmtKind::Call && s->text == kernels::kTransposeF32) transpose = true;
  if (s->kind == StmtKind::Call && s->text == kernels::kDepthwiseBlockedF32) blocked_depthwise = true;
  if (s->kind == StmtKind::Call && s->text == kernels::kGroupedConvF32) grouped = true;
  if (s->kind == StmtKind::Call && s->text == kernels::kDepthwiseF32) {
    const auto& a = s->call_args;
    KILN_CHECK(a.size() == 9 && a[0]->kind == ExprKind::IntImm && a[1]->kind == ExprKind::IntImm,
               "C emitter: a depthwise micro-kernel call needs a constant window");
    windows.insert({a[0]->int_value, a[1]->int_value});
  }
  const bool ep = s->kind == StmtKind::Call && (s->text == kernels::kMicroKernelEpF32 || s->text == kernels::kMicroKernelSegEpF32);
  if (ep || (s->kind == StmtKind::Call && (s->text == kernels::kMicroKernelF32 || s->text == kernels::kMicroKernelSegF32))) {
    any = true;
    const auto& a = s->call_args;
    if (a.size() >= 2 && a[0]->kind == ExprKind::IntImm && a[1]->kind == ExprKind::IntImm) {
      tiles.insert({a[0]->int_value, a[1]->int_value});
      if (ep) ep_tiles.insert({a[0]->int_value, a[1]->int_value});
    }
  }
  for (const auto& c : s->body) collect_tiles(c, tiles, any, transpose, windows, ep_tiles, blocked_depthwise, grouped);
  for (const auto& c : s->else_body) collect_tiles(c, tiles, any, transpose, windows, ep_tiles, blocked_depthwise, grouped);
}

// Whether `s` accumulates into a variable (an Assign) inside two or more loops while reading an
// index whose coefficient on the innermost loop's variable is negative (a reversed Slice under a
// ReduceSum over several axes). GCC 12.2 at -O3 vectorizes the outer loop of such a nest and sums
// the wrong elements (fuzz seed 250283: ReduceL1 over axes 0 and 2 of a Slice with step -1,
// 734 where the reference has 528; a five-line C reproducer in docs/codegen.md). Such a kernel is
// compiled with KILN_NO_LOOP_VECTORIZE (the prelude): its `omp simd` loops then run scalar too.
bool reversed_accumulation(const Stmt& s, std::vector<const StmtNode*>& loops) {
  if (!s) return false;
  if (s->kind == StmtKind::Assign && loops.size() >= 2) {
    const std::string& inner = loops.back()->var;
    bool negative = false;
    std::function<void(const Expr&)> visit = [&](const Expr& e) {
      if (!e || negative) return;
      if (e->kind == ExprKind::Load) {
        AffineScope scope;
        scope.varying = {inner};
        const auto f = affine_form(e->args.at(0), scope);
        negative = f && f->coef_of(inner) < 0;
      }
      for (const auto& a : e->args) visit(a);
    };
    visit(s->value);
    if (negative) return true;
  }
  const bool loop = s->kind == StmtKind::For;
  if (loop) loops.push_back(s.get());
  bool found = false;
  for (const auto& c : s->body) found = found || reversed_accumulation(c, loops);
  for (const auto& c : s->else_body) found = found || reversed_accumulation(c, loops);
  if (loop) loops.pop_back();
  return found;
}

class CEmitter final : public CStyleEmitter {
 public:
  using CStyleEmitter::CStyleEmitter;

  std::string emit(const std::vector<LoopKernel>& kernels) override {
    std::ostringstream os;
    os << detail::c_prelude(opts_.strict_fp);
    // The C flags decide contraction (-ffp-contract=fast by default, =off under strict_fp); the
    // pragma is for compilers that honour it instead.
    os << (opts_.strict_fp ? "#pragma STDC FP_CONTRACT OFF\n\n" : "#pragma STDC FP_CONTRACT ON\n\n");
    std::set<std::pair<int64_t, int64_t>> tiles, windows, ep_tiles;
    bool any_microkernel = false, transpose = false, blocked_depthwise = false, grouped = false;
    for (const auto& k : kernels)
      collect_tiles(k.body, tiles, any_microkernel, transpose, windows, ep_tiles, blocked_depthwise, grouped);
    if (any_microkernel) os << kernels::microkernel_c_source(tiles, !opts_.strict_fp, ep_tiles);
    if (transpose) os << kernels::transpose_c_source() << "\n";
    // (Only the default numerics' lowering calls it: its sums are not in the reference's order.)
    if (!windows.empty()) os << kernels::depthwise_c_source(windows);
    if (blocked_depthwise) os << kernels::depthwise_blocked_c_source();
    if (grouped) os << kernels::grouped_conv_c_source();
    for (const auto& k : kernels) emit_kernel(os, k);
    return os.str();
  }

 private:
  void emit_kernel(std::ostream& os, const LoopKernel& k) {
    begin_kernel(k);
    kernel_comment(os, k);
    std::vector<const StmtNode*> loops;
    os << (k.vector_bits == 512 ? "KILN_PREFER_512 " : "") << (k.no_tree_pre ? "KILN_NO_TREE_PRE " : "")
       << (reversed_accumulation(k.body, loops) ? "KILN_NO_LOOP_VECTORIZE " : "")
       << "void " << k.name << "(void* const* args) {\n";
    size_t arg = 0;
    for (const auto& b : k.inputs) {
      const std::string t = storage_type(b->dtype);
      os << "  const " << t << "* restrict " << ident(b->name) << " = (const " << t << "*)args[" << arg++ << "];\n";
    }
    for (const auto& b : k.outputs) {
      const std::string t = storage_type(b->dtype);
      os << "  " << t << "* restrict " << ident(b->name) << " = (" << t << "*)args[" << arg++ << "];\n";
    }
    // The status word of the index checks (LoopKernel::index_checks), after the outputs.
    if (!k.index_checks.empty()) os << "  int32_t* const kiln_status = (int32_t*)args[" << arg++ << "];\n";
    if (k.body) stmt(os, k.body, 1);
    os << "}\n\n";
  }

  void emit_for_header(std::ostream& os, const StmtNode& s, const std::string& pad, int parallel_around) override {
    switch (s.for_kind) {
      case ForKind::Parallel:
        // Only a parallel loop with none around it forks threads (a nested one would
        // oversubscribe); one inside serial loops forks once per iteration of theirs (a
        // recurrent layer's steps).
        if (parallel_around == 0) os << pad << "#pragma omp parallel for\n";
        break;
      case ForKind::Vectorized: os << pad << "#pragma omp simd\n"; break;
      case ForKind::Unrolled:
        // GCC accepts unroll factors below 65535.
        if (s.extent->kind == ExprKind::IntImm && s.extent->int_value > 0 && s.extent->int_value < 65535)
          os << pad << "#pragma GCC unroll " << s.extent->int_value << "\n";
        break;
      case ForKind::Serial: break;
    }
  }

  void emit_allocate(std::ostream& os, const StmtNode& s, int indent) override {
    const std::string pad(size_t(indent) * 2, ' ');
    const Buffer& b = *s.buffer;
    const int64_t n = std::max<int64_t>(b.numel(), 1);  // C arrays cannot be empty
    const std::string name = ident(b.name), t = storage_type(b.dtype);
    claim_buffer(name, b.name);
    const bool heap = n * int64_t(dtype_size(b.dtype)) > kMaxStackBytes;
    os << pad << "{\n";
    if (heap)
      os << pad << "  " << t << "* restrict " << name << " = (" << t << "*)kiln_scratch_push(sizeof(" << t << ") * " << n
         << ");\n";
    else
      os << pad << "  " << t << " " << name << "[" << n << "] __attribute__((aligned(64)));\n";
    body(os, s.body, indent + 1);
    if (heap) os << pad << "  kiln_scratch_pop(" << name << ", sizeof(" << t << ") * " << n << ");\n";
    os << pad << "}\n";
    release_buffer(name);
  }

  // A micro-kernel call with a constant tile goes to that tile's specialisation; a depthwise call
  // to its window's.
  std::pair<std::string, size_t> microkernel_call(const StmtNode& s) override {
    const auto& a = s.call_args;
    if (s.text == kernels::kDepthwiseF32) return {kernels::depthwise_name(a[0]->int_value, a[1]->int_value), 2};
    const bool ep = s.text == kernels::kMicroKernelEpF32 || s.text == kernels::kMicroKernelSegEpF32;
    const bool seg = s.text == kernels::kMicroKernelSegF32 || s.text == kernels::kMicroKernelSegEpF32;
    const bool known = ep || seg || s.text == kernels::kMicroKernelF32;
    if (known && a.size() == size_t((seg ? 13 : 11) + (ep ? 7 : 0)) && a[0]->kind == ExprKind::IntImm &&
        a[1]->kind == ExprKind::IntImm && kernels::has_specialisation(a[0]->int_value, a[1]->int_value))
      return {kernels::specialisation_name(a[0]->int_value, a[1]->int_value, seg, ep), 2};
    return CStyleEmitter::microkernel_call(s);
  }
};

}  // namespace

std::string emit_c(const std::vector<LoopKernel>& kernels, const EmitOptions& opts) {
  return CEmitter(opts).emit(kernels);
}

}  // namespace kiln::codegen
