// The GPU half of the C-style emitter (codegen/c_style_emitter.h): what OpenCL C and CUDA C share
// and C does not — how a loop kernel becomes device launches, where its local buffers live, and
// the host-visible description of each launch. A GPU target (opencl/, cuda/) overrides only the
// spellings of a kernel's signature, its thread index, pointer qualifiers, the prelude and the
// micro-kernel.
//
// Launch mapping. A LoopKernel's body is, after its top-level Blocks and Allocates, a sequence of
// statements. When none of them is a top-level scalar (Let/Assign), each maximal run of statements
// becomes one *phase*, a device function launched on its own: a Parallel For with a constant
// extent E becomes E work-items (OpenCL get_global_id(0); CUDA blockIdx/threadIdx), its loop
// variable the work-item's index; any other run is one work-item. Phases of one kernel run in
// order on one in-order queue/stream, which is the barrier the CPU's OpenMP loops end with.
// Otherwise (a top-level scalar would have to cross phases) the whole body is one work-item.
// Serial loops stay loops inside the work-item; Vectorized/Unrolled are hints the device compiler
// does not need.
//
// Local buffers. An Allocate outside every loop is shared by all the kernel's work-items (as it is
// by the CPU's threads): a slice of the global scratch buffer, the same for every phase. One
// inside a loop is private to its work-item: a private array when it is at most
// private_limit() bytes, else a per-work-item slice of the scratch buffer (no reuse between
// slices). The host allocates scratch_bytes() = shared + work_items * per-item bytes (the largest
// over the program's launches) once and passes it to every launch as the last argument.
//
// Argument order of every phase: the kernel's inputs, then its outputs (LoopKernel order), then
// the scratch buffer; how a buffer is passed is the target's (OpenCL: buffer + byte offset).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/c_style_emitter.h"

namespace kiln::codegen {

struct DeviceLaunch {
  std::string function;     // the device function's name
  int64_t work_items = 1;   // global size (1: a serial phase)
  int64_t item_bytes = 0;   // scratch bytes per work-item
};

struct DeviceKernel {
  std::string name;                   // the LoopKernel's name
  std::vector<DeviceLaunch> launches; // in order
  int64_t shared_bytes = 0;           // scratch bytes shared by all work-items (at offset 0)
  int64_t scratch_bytes() const;      // shared + the largest launch's work_items * item_bytes
};

struct DeviceProgram {
  std::string source;
  std::vector<DeviceKernel> kernels;  // one per LoopKernel, in order
  int64_t scratch_bytes() const;      // the largest kernel's
  size_t launch_count() const;
};

class GpuEmitter : public CStyleEmitter {
 public:
  using CStyleEmitter::CStyleEmitter;
  std::string emit(const std::vector<loop::LoopKernel>& kernels) override { return emit_program(kernels).source; }
  DeviceProgram emit_program(const std::vector<loop::LoopKernel>& kernels);

 protected:
  // ---------------------------------------------------------------- target spellings
  // Includes, typedefs, macros and helpers; `kernels_text` follows it.
  virtual std::string prelude() const = 0;
  // `__kernel void NAME(` / `extern "C" __global__ void NAME(` up to the parameter list.
  virtual std::string function_head(const std::string& name) const = 0;
  // Parameter `i`'s declaration(s) for buffer `b` and the statement that binds b's name.
  virtual std::string param(size_t i, const loop::Buffer& b, bool output) const = 0;
  virtual std::string bind_param(size_t i, const loop::Buffer& b, bool output) const = 0;
  virtual std::string scratch_param() const = 0;  // the last parameter: `kiln_scratch`, bytes
  // A pointer to global memory of element type `t` (e.g. "__global float*").
  virtual std::string global_ptr(const std::string& t) const = 0;
  virtual std::string global_index() const = 0;  // the work-item's index as an int64_t expression
  // A micro-kernel for operands in address spaces `spaces` (one letter per pointer: a, b, c;
  // 'g' global, 'p' private): its name and, when first used, its source.
  virtual std::string microkernel_name(const std::string& spaces) const = 0;
  virtual std::string microkernel_source(const std::string& spaces) const = 0;
  virtual int64_t private_limit() const = 0;  // bytes of a private array, at most
  virtual std::string device_function() const { return "static "; }  // how a device helper is declared

  std::string storage_type(DType t) const override;
  const std::set<std::string>& used_spaces() const { return microkernels_; }

 private:
  void emit_kernel(std::ostream& os, const loop::LoopKernel& k, DeviceKernel& dk);
  void emit_phase(std::ostream& os, const loop::LoopKernel& k, const std::string& fn, const loop::StmtNode* par,
                  const std::vector<loop::Stmt>& stmts, DeviceLaunch& launch);
  void emit_for_header(std::ostream& os, const loop::StmtNode& s, const std::string& pad, int depth) override {}
  void emit_allocate(std::ostream& os, const loop::StmtNode& s, int indent) override;
  std::pair<std::string, size_t> microkernel_call(const loop::StmtNode& s) override;

  // Top-level Allocates and their scratch offsets, in the body's order (the text is deterministic).
  std::vector<std::pair<const loop::Buffer*, int64_t>> shared_;
  bool is_shared(const loop::Buffer* b) const {
    for (const auto& [s, off] : shared_)
      if (s == b) return true;
    return false;
  }
  std::set<std::string> private_;                  // names of private arrays in scope
  int64_t shared_bytes_ = 0;                       // of the kernel being emitted
  int64_t item_bytes_ = 0;                         // of the phase being emitted
  std::set<std::string> microkernels_;             // variants used (by spaces)
  std::set<std::string> seg_microkernels_;         // segmented variants used (spaces of a, aoff, b, c)
  std::string seg_microkernel_source(const std::string& spaces) const;
  std::set<std::string> ep_microkernels_;          // epilogue variants used ('p'/'s', then spaces incl. the bias)
  std::string ep_microkernel_source(const std::string& key) const;
  std::set<std::string> transposes_;               // transposing-copy variants used (spaces of dst, src)
  std::string transpose_source(const std::string& spaces) const;
  std::set<std::string> depthwises_;               // depthwise micro-kernel variants used (spaces of in, w, out)
  std::set<std::string> blocked_depthwises_;       // blocked depthwise variants used (spaces of off, in, w, out)
  std::string depthwise_source(const std::string& spaces) const;
  std::string blocked_depthwise_source(const std::string& spaces) const;
  std::set<std::string> grouped_convs_;            // grouped-conv variants used (spaces of off, in, w, out)
  std::string grouped_conv_source(const std::string& spaces) const;
};

}  // namespace kiln::codegen
