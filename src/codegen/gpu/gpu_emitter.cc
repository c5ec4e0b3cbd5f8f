#include "codegen/gpu/gpu_emitter.h"

#include <algorithm>
#include <sstream>

#include "kernels/depthwise.h"
#include "kernels/microkernel.h"
#include "support/error.h"

namespace kiln::codegen {

using namespace loop;

namespace {

constexpr int64_t kAlign = 64;
int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
int64_t buffer_bytes(const Buffer& b) { return std::max<int64_t>(b.numel(), 1) * int64_t(dtype_size(b.dtype)); }

// The kernel's top-level statements (through Blocks and loop-free Allocates, which are collected
// into `shared`); false when one of them is a scalar that later phases would need.
bool top_level(const Stmt& s, std::vector<Stmt>& out, std::vector<const Buffer*>& shared) {
  switch (s->kind) {
    case StmtKind::Block:
      for (const auto& c : s->body)
        if (!top_level(c, out, shared)) return false;
      return true;
    case StmtKind::Allocate:
      shared.push_back(s->buffer.get());
      for (const auto& c : s->body)
        if (!top_level(c, out, shared)) return false;
      return true;
    case StmtKind::Let:
    case StmtKind::Assign: return false;
    default: out.push_back(s); return true;
  }
}

bool is_parallel_phase(const Stmt& s) {
  return s->kind == StmtKind::For && s->for_kind == ForKind::Parallel && s->extent->kind == ExprKind::IntImm &&
         s->extent->int_value > 0;
}

}  // namespace

int64_t DeviceKernel::scratch_bytes() const {
  int64_t items = 0;
  for (const auto& l : launches) items = std::max(items, l.work_items * l.item_bytes);
  return shared_bytes + items;
}

int64_t DeviceProgram::scratch_bytes() const {
  int64_t b = 0;
  for (const auto& k : kernels) b = std::max(b, k.scratch_bytes());
  return b;
}

size_t DeviceProgram::launch_count() const {
  size_t n = 0;
  for (const auto& k : kernels) n += k.launches.size();
  return n;
}

std::string GpuEmitter::storage_type(DType t) const {
  // A bool's size in device memory is the implementation's (OpenCL forbids bool pointers in
  // kernel arguments): bools are stored as bytes, 0 or 1, as the host's bool is.
  if (t == DType::Bool) return "uint8_t";
  return CStyleEmitter::storage_type(t);
}

DeviceProgram GpuEmitter::emit_program(const std::vector<LoopKernel>& kernels) {
  DeviceProgram prog;
  microkernels_.clear();
  seg_microkernels_.clear();
  ep_microkernels_.clear();
  transposes_.clear();
  std::ostringstream body;
  for (const auto& k : kernels) {
    prog.kernels.push_back({});
    emit_kernel(body, k, prog.kernels.back());
  }
  std::ostringstream os;
  os << prelude();
  if (!microkernels_.empty())
    os << "/* Contraction micro-kernels (src/kernels/microkernel.h): c[i*ldc+j] = (acc_in ? c[i*ldc+j] : 0) +\n"
          " * sum_k a[i*as_i+k*as_k] * b[k*bs_k+j], k ascending, one accumulator per element; one variant per\n"
          " * address spaces. */\n";
  for (const auto& spaces : microkernels_) os << microkernel_source(spaces);
  for (const auto& spaces : seg_microkernels_) os << seg_microkernel_source(spaces);
  for (const auto& key : ep_microkernels_) os << ep_microkernel_source(key);
  for (const auto& spaces : transposes_) os << transpose_source(spaces);
  for (const auto& spaces : depthwises_) os << depthwise_source(spaces);
  for (const auto& spaces : blocked_depthwises_) os << blocked_depthwise_source(spaces);
  for (const auto& spaces : grouped_convs_) os << grouped_conv_source(spaces);
  os << "\n" << body.str();
  prog.source = os.str();
  return prog;
}

void GpuEmitter::emit_kernel(std::ostream& os, const LoopKernel& k, DeviceKernel& dk) {
  dk.name = k.name;
  shared_.clear();
  std::vector<Stmt> stmts;
  std::vector<const Buffer*> shared;
  const bool phased = !k.body || top_level(k.body, stmts, shared);
  shared_bytes_ = 0;
  if (phased)
    for (const Buffer* b : shared) {
      shared_.push_back({b, dk.shared_bytes});
      dk.shared_bytes += aligned(buffer_bytes(*b));
    }
  shared_bytes_ = dk.shared_bytes;
  kernel_comment(os, k);
  if (!phased) {
    // One work-item runs the body as the CPU's single thread would.
    dk.launches.push_back({k.name + "_p0", 1, 0});
    emit_phase(os, k, dk.launches.back().function, nullptr, {k.body}, dk.launches.back());
    return;
  }
  // Maximal runs of non-parallel statements become one serial phase each.
  std::vector<Stmt> run;
  auto flush = [&] {
    if (run.empty()) return;
    dk.launches.push_back({k.name + "_p" + std::to_string(dk.launches.size()), 1, 0});
    emit_phase(os, k, dk.launches.back().function, nullptr, run, dk.launches.back());
    run.clear();
  };
  for (const Stmt& s : stmts) {
    if (s->kind == StmtKind::Comment) continue;
    if (!is_parallel_phase(s)) {
      run.push_back(s);
      continue;
    }
    flush();
    dk.launches.push_back({k.name + "_p" + std::to_string(dk.launches.size()), s->extent->int_value, 0});
    emit_phase(os, k, dk.launches.back().function, s.get(), s->body, dk.launches.back());
  }
  flush();
}

void GpuEmitter::emit_phase(std::ostream& os, const LoopKernel& k, const std::string& fn, const StmtNode* par,
                            const std::vector<Stmt>& stmts, DeviceLaunch& launch) {
  begin_kernel(k);
  private_.clear();
  item_bytes_ = 0;
  std::ostringstream inner;
  for (const auto& [b, off] : shared_) {
    const std::string name = ident(b->name), t = storage_type(b->dtype);
    claim_buffer(name, b->name);
    inner << "  " << global_ptr(t) << " " << name << " = (" << global_ptr(t) << ")(kiln_scratch + " << off << ");\n";
  }
  for (const auto& s : stmts) stmt(inner, s, par ? 2 : 1);
  launch.item_bytes = item_bytes_;

  os << function_head(fn);
  size_t i = 0;
  for (const auto& b : k.inputs) os << param(i++, *b, false) << ", ";
  for (const auto& b : k.outputs) os << param(i++, *b, true) << ", ";
  // The index checks' status word (LoopKernel::index_checks): one more buffer after the outputs.
  static const loop::Buffer status{"kiln_status", DType::Int32, {1}, loop::Scope::Global};
  const bool checks = !k.index_checks.empty();
  if (checks) os << param(i++, status, true) << ", ";
  os << scratch_param() << ") {\n";
  i = 0;
  for (const auto& b : k.inputs) os << bind_param(i++, *b, false);
  for (const auto& b : k.outputs) os << bind_param(i++, *b, true);
  if (checks) {
    os << bind_param(i++, status, true);
    // ident() suffixes kiln_ names; the checked-index calls name the word kiln_status.
    os << "  " << global_ptr("int32_t") << " kiln_status = " << ident(status.name) << ";\n";
  }
  const std::string gid = par ? ident(par->var) : "kiln_gid";
  os << "  const int64_t " << gid << " = " << global_index() << ";\n";
  // CUDA rounds the work-items up to whole blocks (and a serial phase is one work-item of a block).
  os << "  if (" << gid << " >= " << (par ? par->extent->int_value : 1) << ") return;\n";
  if (item_bytes_ > 0)
    os << "  " << global_ptr("uint8_t") << " kiln_item = kiln_scratch + " << shared_bytes_ << " + (uint64_t)" << gid
       << " * " << item_bytes_ << "u;\n";
  os << inner.str() << "}\n\n";
}

void GpuEmitter::emit_allocate(std::ostream& os, const StmtNode& s, int indent) {
  const std::string pad(size_t(indent) * 2, ' ');
  const Buffer& b = *s.buffer;
  if (is_shared(&b)) {  // declared by the phase's prologue
    body(os, s.body, indent);
    return;
  }
  const std::string name = ident(b.name), t = storage_type(b.dtype);
  claim_buffer(name, b.name);
  const int64_t bytes = buffer_bytes(b);
  os << pad << "{\n";
  if (bytes <= private_limit()) {
    os << pad << "  " << t << " " << name << "[" << std::max<int64_t>(b.numel(), 1) << "];\n";
    private_.insert(name);
  } else {
    os << pad << "  " << global_ptr(t) << " " << name << " = (" << global_ptr(t) << ")(kiln_item + " << item_bytes_
       << ");\n";
    item_bytes_ += aligned(bytes);
  }
  body(os, s.body, indent + 1);
  os << pad << "}\n";
  private_.erase(name);
  release_buffer(name);
}

// The segmented micro-kernel on a device: the plain one per segment (the interface's definition).
std::string GpuEmitter::seg_microkernel_source(const std::string& spaces) const {
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  const std::string plain = microkernel_name(std::string{spaces[0], spaces[2], spaces[3]});
  return device_function() + "void kiln_mk_f32_seg_" + spaces + "(int64_t mr, int64_t nr, int64_t nseg, int64_t kc, " +
         ptr(0, "const float") + " a,\n    " + ptr(1, "const int64_t") + " aoff, int64_t as_i, int64_t as_k, " +
         ptr(2, "const float") + " b, int64_t bs_k, " + ptr(3, "float") +
         " c, int64_t ldc, int64_t acc_in) {\n"
         "  if (nseg <= 0) " + plain + "(mr, nr, 0, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n"
         "  for (int64_t s = 0; s < nseg; ++s)\n"
         "    " + plain + "(mr, nr, kc, a + aoff[s], as_i, as_k, b + s * kc * bs_k, bs_k, c, ldc, s > 0 || acc_in);\n"
         "}\n";
}

// The epilogue forms on a device: the plain (or segmented) variant, then the interface's epilogue
// loop. `key`: 'p' or 's' (plain, segmented), then the spaces of the form's pointers, the bias and
// the residual.
std::string GpuEmitter::ep_microkernel_source(const std::string& key) const {
  const bool seg = key[0] == 's';
  const std::string spaces = key.substr(1);
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  std::string head, call;
  if (seg) {
    head = "void kiln_mk_f32_seg_ep_" + spaces + "(int64_t mr, int64_t nr, int64_t nseg, int64_t kc, " +
           ptr(0, "const float") + " a,\n    " + ptr(1, "const int64_t") + " aoff, int64_t as_i, int64_t as_k, " +
           ptr(2, "const float") + " b, int64_t bs_k, " + ptr(3, "float") + " c, int64_t ldc, int64_t acc_in,\n    int64_t ep, " +
           ptr(4, "const float") + " bias, int64_t nbias, float lo, float hi, " + ptr(5, "const float") +
           " res, int64_t ldr) {\n";
    call = "  kiln_mk_f32_seg_" + spaces.substr(0, 4) + "(mr, nr, nseg, kc, a, aoff, as_i, as_k, b, bs_k, c, ldc, acc_in);\n";
  } else {
    head = "void kiln_mk_f32_ep_" + spaces + "(int64_t mr, int64_t nr, int64_t kc, " + ptr(0, "const float") +
           " a, int64_t as_i, int64_t as_k,\n    " + ptr(1, "const float") + " b, int64_t bs_k, " + ptr(2, "float") +
           " c, int64_t ldc, int64_t acc_in, int64_t ep, " + ptr(3, "const float") +
           " bias, int64_t nbias, float lo, float hi, " + ptr(4, "const float") + " res, int64_t ldr) {\n";
    call = "  " + microkernel_name(spaces.substr(0, 3)) + "(mr, nr, kc, a, as_i, as_k, b, bs_k, c, ldc, acc_in);\n";
  }
  return device_function() + head + call + kernels::epilogue_loop_c_source() + "}\n";
}

// The transposing copy on a device (kernels/microkernel.h): the interface's loops, one variant per
// address spaces of dst and src.
std::string GpuEmitter::transpose_source(const std::string& spaces) const {
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  return device_function() + "void kiln_transpose_f32_" + spaces + "(" + ptr(0, "float") + " dst, int64_t ldd, " +
         ptr(1, "const float") +
         " src, int64_t lds, int64_t rows, int64_t cols) {\n"
         "  for (int64_t c = 0; c < cols; ++c)\n"
         "    for (int64_t r = 0; r < rows; ++r) dst[c * ldd + r] = src[r * lds + c];\n"
         "}\n";
}

// The depthwise micro-kernel on a device (kernels/depthwise.h): the interface's loops, one variant
// per address spaces of in, w and out.
std::string GpuEmitter::depthwise_source(const std::string& spaces) const {
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  return device_function() + "void kiln_dw_f32_" + spaces + "(int64_t kh, int64_t kw, int64_t rows, int64_t cols, " +
         ptr(0, "const float") + " in,\n    int64_t ldi, " + ptr(1, "const float") + " w, " + ptr(2, "float") +
         " out, int64_t ldo) {\n"
         "  for (int64_t y = 0; y < rows; ++y)\n"
         "    for (int64_t x = 0; x < cols; ++x) {\n"
         "      float s = 0.0f;\n"
         "      for (int64_t ky = 0; ky < kh; ++ky)\n"
         "        for (int64_t kx = 0; kx < kw; ++kx) s = s + w[ky * kw + kx] * in[(y + ky) * ldi + x + kx];\n"
         "      out[y * ldo + x] = s;\n"
         "    }\n"
         "}\n";
}

// The blocked depthwise micro-kernel on a device (kernels/depthwise.h): the interface's loops, one
// variant per address spaces of off, in, w and out.
std::string GpuEmitter::blocked_depthwise_source(const std::string& spaces) const {
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  return device_function() + "void kiln_dwc_f32_" + spaces + "(int64_t taps, " + ptr(0, "const int64_t") +
         " off, int64_t rows, int64_t cols,\n    " + ptr(1, "const float") + " in, int64_t ldi, " + ptr(2, "const float") +
         " w, " + ptr(3, "float") +
         " out, int64_t ldo) {\n"
         "  for (int64_t y = 0; y < rows; ++y)\n"
         "    for (int64_t x = 0; x < cols; ++x)\n"
         "      for (int64_t l = 0; l < 16; ++l) {\n"
         "        float s = 0.0f;\n"
         "        for (int64_t t = 0; t < taps; ++t) s = s + w[t * 16 + l] * in[(y * ldi + x + off[t]) * 16 + l];\n"
         "        out[(y * ldo + x) * 16 + l] = s;\n"
         "      }\n"
         "}\n";
}

// The grouped-conv micro-kernel on a device (kernels/depthwise.h): the interface's loops, one
// variant per address spaces of off, in, w and out.
std::string GpuEmitter::grouped_conv_source(const std::string& spaces) const {
  auto ptr = [&](size_t i, const std::string& t) { return spaces[i] == 'g' ? global_ptr(t) : t + "*"; };
  return device_function() + "void kiln_gcv_f32_" + spaces + "(int64_t cg, int64_t mg, int64_t taps, " +
         ptr(0, "const int64_t") + " off, int64_t len,\n    " + ptr(1, "const float") + " in, int64_t ldi, " +
         ptr(2, "const float") + " w, " + ptr(3, "float") +
         " out, int64_t ldo) {\n"
         "  for (int64_t m = 0; m < mg; ++m)\n"
         "    for (int64_t j = 0; j < len; ++j) {\n"
         "      float s = 0.0f;\n"
         "      for (int64_t ci = 0; ci < cg; ++ci)\n"
         "        for (int64_t t = 0; t < taps; ++t) s = s + w[(m * cg + ci) * taps + t] * in[ci * ldi + off[t] + j];\n"
         "      out[m * ldo + j] = s;\n"
         "    }\n"
         "}\n";
}

std::pair<std::string, size_t> GpuEmitter::microkernel_call(const StmtNode& s) {
  auto space = [&](size_t i) {
    const Expr& a = s.call_args[i];
    return a->kind == ExprKind::Address && private_.count(ident(a->buffer->name)) ? 'p' : 'g';
  };
  if (s.text == kernels::kDepthwiseF32 && s.call_args.size() == 9) {
    const std::string spaces = {space(4), space(6), space(7)};
    depthwises_.insert(spaces);
    return {"kiln_dw_f32_" + spaces, 0};
  }
  if (s.text == kernels::kDepthwiseBlockedF32 && s.call_args.size() == 9) {
    const std::string spaces = {space(1), space(4), space(6), space(7)};
    blocked_depthwises_.insert(spaces);
    return {"kiln_dwc_f32_" + spaces, 0};
  }
  if (s.text == kernels::kGroupedConvF32 && s.call_args.size() == 10) {
    const std::string spaces = {space(3), space(5), space(7), space(8)};
    grouped_convs_.insert(spaces);
    return {"kiln_gcv_f32_" + spaces, 0};
  }
  if (s.text == kernels::kTransposeF32 && s.call_args.size() == 6) {
    const std::string spaces = {space(0), space(2)};
    transposes_.insert(spaces);
    return {"kiln_transpose_f32_" + spaces, 0};
  }
  if (s.text == kernels::kMicroKernelEpF32 || s.text == kernels::kMicroKernelSegEpF32) {
    // The plain or segmented variant, then the epilogue (kernels/microkernel.h): one variant per
    // address spaces of the plain form's pointers and the bias.
    const bool seg = s.text == kernels::kMicroKernelSegEpF32;
    const size_t n = seg ? 13 : 11;
    KILN_CHECK(s.call_args.size() == n + 7, "GPU emitter: ", s.text, " takes ", n + 7, " arguments");
    std::string spaces = seg ? std::string{space(4), space(5), space(8), space(10)} : std::string{space(3), space(6), space(8)};
    if (seg) {
      microkernels_.insert(std::string{spaces[0], spaces[2], spaces[3]});
      seg_microkernels_.insert(spaces);
    } else {
      microkernels_.insert(spaces);
    }
    spaces += space(n + 1);
    spaces += space(n + 5);
    ep_microkernels_.insert(std::string(seg ? "s" : "p") + spaces);
    return {std::string(seg ? "kiln_mk_f32_seg_ep_" : "kiln_mk_f32_ep_") + spaces, 0};
  }
  if (s.text == kernels::kMicroKernelSegF32 && s.call_args.size() == 13) {
    const std::string spaces = {space(4), space(5), space(8), space(10)};
    microkernels_.insert(std::string{spaces[0], spaces[2], spaces[3]});
    seg_microkernels_.insert(spaces);
    return {"kiln_mk_f32_seg_" + spaces, 0};
  }
  KILN_CHECK(s.text == kernels::kMicroKernelF32 && s.call_args.size() == 11, "GPU emitter: no device spelling of '",
             s.text, "' with ", s.call_args.size(), " arguments");
  std::string spaces;
  for (size_t i : {3, 6, 8}) {
    const Expr& a = s.call_args[i];
    spaces += a->kind == ExprKind::Address && private_.count(ident(a->buffer->name)) ? 'p' : 'g';
  }
  microkernels_.insert(spaces);
  return {microkernel_name(spaces), 0};
}

}  // namespace kiln::codegen
