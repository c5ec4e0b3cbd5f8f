// The one C-style emitter: a walk over the loop IR (loop/loop_ir.h) that prints C-family source,
// and the handful of "spellings" in which C, OpenCL C and CUDA C differ (tinygrad's
// renderer/cstyle.py, Halide's CodeGen_GPU_Dev). The walk — expressions, integer wrapping, casts,
// float16 storage, statements, the shadowing checks — is written once, here; a target is a
// subclass that overrides the spellings:
//
//   storage_type        the element type in memory (OpenCL stores bool as uchar)
//   math_fn             libm names (C/CUDA: expf for float32; OpenCL: overloaded exp, rint)
//   emit_for_header     what a loop kind becomes (C: OpenMP pragmas; GPU: a plain loop)
//   emit_allocate       a Local buffer (C: stack array or kiln_scratch_push; GPU: private array
//                       or a slice of a global scratch buffer)
//   microkernel_call    the name a micro-kernel call goes to (C: the (mr, nr) specialisation)
//   emit_kernel / emit  the kernel signature and the translation unit (prelude, micro-kernels)
//
// Names from the model appear only as sanitised identifiers or inside comments with "*/" and
// newlines removed.
#pragma once
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loop/loop_ir.h"

namespace kiln::codegen {

struct EmitOptions {
  // docs/codegen.md "Numerics contract". false (default): micro-kernels with fused multiply-adds
  // and the prelude's vectorised kiln_expf/kiln_erff; true: the reference's operations exactly
  // (products rounded before they are added, libm's expf/erff). runtime::BuildOptions::strict_fp
  // sets it (with the matching -ffp-contract flag and reduction order).
  bool strict_fp = false;
};

// A model string made safe for a C comment: "*/", "/*" and control characters removed.
std::string comment_safe(const std::string& s);

// Whether `s` is a C identifier (letters, digits, underscores; not starting with a digit).
bool is_identifier(const std::string& s);

class CStyleEmitter {
 public:
  explicit CStyleEmitter(const EmitOptions& opts) : opts_(opts) {}
  virtual ~CStyleEmitter() = default;
  CStyleEmitter(const CStyleEmitter&) = delete;
  CStyleEmitter& operator=(const CStyleEmitter&) = delete;

  // The translation unit for `kernels`.
  virtual std::string emit(const std::vector<loop::LoopKernel>& kernels) = 0;

 protected:
  // Signed int32/int64 data arithmetic wraps like the reference executor (C leaves overflow
  // undefined, and GCC folds e.g. `a + b > a` to `b > 0`). Index arithmetic (load/store indices,
  // loop extents) cannot overflow and stays plain C: readable, and the compiler keeps its no-wrap
  // facts for vectorization.
  enum class Ctx { Value, Index };

  // ---------------------------------------------------------------- spellings
  // Element type in memory: float16/bfloat16 are their bits.
  virtual std::string storage_type(DType t) const;
  // The name of libm function `base` ("exp", "fmod", "nearbyint") for operands of type `t`
  // (Float32 or Float64; float16/bfloat16 compute as Float32).
  virtual std::string math_fn(const std::string& base, DType t) const;
  // The loop header's prefix for s.for_kind (pragmas); `parallel_around` counts the enclosing
  // parallel loops.
  virtual void emit_for_header(std::ostream& os, const loop::StmtNode& s, const std::string& pad, int parallel_around);
  // A Local/Register buffer live for s.body (the base checks names; this writes it).
  virtual void emit_allocate(std::ostream& os, const loop::StmtNode& s, int indent);
  // The function a micro-kernel Call statement calls, and the index of its first printed argument.
  virtual std::pair<std::string, size_t> microkernel_call(const loop::StmtNode& s);

  // ---------------------------------------------------------------- the walk
  std::string value_type(DType t) const;  // a value in registers: float16/bfloat16 compute in float
  std::string expr(const loop::Expr& e, Ctx ctx = Ctx::Value);
  std::string convert(const std::string& s, DType from, DType to) const;
  void stmt(std::ostream& os, const loop::Stmt& s, int indent);
  void body(std::ostream& os, const std::vector<loop::Stmt>& b, int indent);
  // Starts a kernel: forgets the previous kernel's names and declares `k`'s arguments.
  void begin_kernel(const loop::LoopKernel& k);
  // The kernel's "kernel NAME / from ONNX nodes" comment (names checked).
  void kernel_comment(std::ostream& os, const loop::LoopKernel& k) const;
  // The C spelling of an IR name (reserved names get a trailing underscore).
  static std::string ident(const std::string& name);
  // Claims buffer name `name` for the scope of an Allocate (released by release_buffer).
  void claim_buffer(const std::string& name, const std::string& ir_name);
  void release_buffer(const std::string& name) { live_.erase(name); }

  const EmitOptions opts_;

 private:
  std::string callee(const std::string& name, DType type) const;
  std::string math_call(const char* fn, const std::string& a, DType t) const;
  std::string emit_unary(const loop::ExprNode& e, Ctx ctx);
  std::string emit_pow(const loop::ExprNode& e, Ctx ctx);
  std::string emit_binary(const loop::ExprNode& e, Ctx ctx);
  std::string load_value(const loop::Buffer& b, const std::string& index) const;
  void emit_for(std::ostream& os, const loop::StmtNode& s, int indent);

  int parallel_depth_ = 0;  // parallel loops around the statement being emitted
  std::set<std::string> live_;   // names of the buffers in scope (the kernel's arguments and locals)
  std::set<std::string> loops_;  // names of the enclosing loops' variables
  // Int64 Lets computed only from loop variables, constants and such Lets (index arithmetic):
  // emitted with C's plain operators instead of the wrapping helpers, as indices are.
  std::set<std::string> index_lets_;
  bool is_index_arithmetic(const loop::Expr& e) const;
};

}  // namespace kiln::codegen
