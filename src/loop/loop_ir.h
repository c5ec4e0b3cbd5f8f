// Loop IR: explicit loop nests, one per fusion group (a future kernel). Expressions are immutable
// trees shared by pointer; statements are a small tree of For / Store / Let / Block / If /
// Allocate / Call. Every IR has a printer (print_kernel), used by tests and --dump-after.
//
// Indexing model: buffers are dense row-major arrays; a Load or Store takes one flat element index
// (an Int64 expression built from loop variables). Multi-dimensional index arithmetic is lowered
// into that flat index by the code that builds the nest, so emitters (C now; CUDA and OpenCL
// later, from one C-style base) only print expressions.
//
// Scheduling (split, reorder, vectorize, unroll, parallelize, cache) rewrites these trees; a loop's
// ForKind records the decision, and Schedule (schedule.h) carries the parameters the tuner sets.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/tensor.h"
#include "loop/panel_layout.h"

namespace kiln::loop {

// ---------------------------------------------------------------- buffers

enum class Scope { Global, Local, Register };
const char* scope_name(Scope s);

struct Buffer {
  std::string name;  // sanitised C identifier
  DType dtype = DType::Float32;
  Shape shape;
  Scope scope = Scope::Global;
  int64_t numel() const { return shape_numel(shape); }
};
using BufferPtr = std::shared_ptr<Buffer>;

// ---------------------------------------------------------------- expressions

enum class ExprKind { IntImm, FloatImm, Var, Load, Unary, Binary, Select, Cast, Call, Address };

enum class BinOp { Add, Sub, Mul, Div, Mod, Min, Max, Pow, Lt, Le, Gt, Ge, Eq, Ne, And, Or, Xor };
enum class UnOp { Neg, Not, Abs, Sqrt, Exp, Log, Erf, Tanh, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh,
                  Asinh, Acosh, Atanh, Floor, Ceil, Round, IsNaN, IsInf,
                  Sigmoid };  // 1 / (1 + exp(-x)): one op so emitters can spell it as one function

const char* binop_name(BinOp op);
const char* unop_name(UnOp op);

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprKind kind;
  DType type;            // type of the value; index arithmetic is Int64, predicates Bool
  int64_t int_value = 0;       // IntImm
  double float_value = 0;      // FloatImm
  std::string name;            // Var: variable name; Call: function name
  BinOp bin = BinOp::Add;      // Binary
  UnOp un = UnOp::Neg;         // Unary
  BufferPtr buffer;            // Load, Address
  std::vector<Expr> args;      // operands: Load {index}; Unary {a}; Binary {a, b}; Select {c, t, f};
                               // Cast {a}; Call {args...}; Address {index}
};

Expr int_imm(int64_t v, DType t = DType::Int64);
Expr float_imm(double v, DType t = DType::Float32);
Expr var(const std::string& name, DType t = DType::Int64);
Expr load(const BufferPtr& b, Expr index);
Expr unary(UnOp op, Expr a);
Expr binary(BinOp op, Expr a, Expr b);  // comparison and logic ops have type Bool
Expr select(Expr cond, Expr t, Expr f);
Expr cast(DType t, Expr a);
Expr call(const std::string& fn, DType t, std::vector<Expr> args);
// The address of buffer[index]: only as an argument of a micro-kernel Call statement (type
// Undefined; never loaded, stored or computed with).
Expr address(const BufferPtr& b, Expr index);

// `e` with each operand replaced by f(operand): `e` itself when no operand changes (so rewrites
// keep sharing), else a copy. The one way the rewriters of src/loop rebuild an expression.
template <class F>
Expr map_args(const Expr& e, F&& f) {
  std::vector<Expr> args;
  args.reserve(e->args.size());
  bool changed = false;
  for (const Expr& a : e->args) {
    args.push_back(f(a));
    changed = changed || args.back() != a;
  }
  if (!changed) return e;
  auto copy = std::make_shared<ExprNode>(*e);
  copy->args = std::move(args);
  return copy;
}

// Index arithmetic with light folding (x*1, x+0, constant operands) so printed nests stay readable.
Expr add(Expr a, Expr b);
Expr mul(Expr a, Expr b);
Expr div_floor(Expr a, Expr b);  // operands are non-negative indices here
Expr mod(Expr a, Expr b);
Expr minimum(Expr a, Expr b);
Expr lt(Expr a, Expr b);

// A run-time index checked against its axis (Gather, GatherElements, GatherND read indices that
// are data): the Call kCheckedIndex {i, dim, site} (Int64) is i wrapped into [0, dim) when i lies in
// [-dim, dim) (negative indices count from the end, as in ONNX), and otherwise 0 — a load stays in
// bounds whatever the data — while the kernel records `site` (> 0, an IntImm) in its status word,
// which whoever runs the kernel checks after it (LoopKernel::index_checks). The reference kernels
// reject such an index; compiled code must not answer instead. dim > 0.
inline constexpr const char* kCheckedIndex = "kiln_checked_index";
Expr checked_index(Expr i, int64_t dim, int64_t site);

// ---------------------------------------------------------------- statements

enum class StmtKind { For, Store, Let, Assign, Block, If, Allocate, Call, Comment };
enum class ForKind { Serial, Parallel, Vectorized, Unrolled };
const char* for_kind_name(ForKind k);

struct StmtNode;
using Stmt = std::shared_ptr<StmtNode>;

struct StmtNode {
  StmtKind kind;
  // For: `for (var = 0; var < extent; ++var) body` (loops start at 0; splits rewrite indices).
  std::string var;
  Expr extent;
  ForKind for_kind = ForKind::Serial;
  // Store: buffer[index] = value. Let: `T var = value` (a new scalar). Assign: var = value.
  BufferPtr buffer;
  Expr index, value;
  // If: cond ? body : else_body. Block/For/Allocate: body.
  Expr cond;
  std::vector<Stmt> body, else_body;
  // Allocate: a Local/Register buffer live for `body`. Call: a micro-kernel (name, args).
  std::string text;  // Comment text; Call: function name
  std::vector<Expr> call_args;
};

Stmt for_loop(const std::string& var, Expr extent, std::vector<Stmt> body, ForKind k = ForKind::Serial);
Stmt store(const BufferPtr& b, Expr index, Expr value);
Stmt let(const std::string& var, Expr value);
Stmt assign(const std::string& var, Expr value);
Stmt block(std::vector<Stmt> body);
Stmt if_then(Expr cond, std::vector<Stmt> body, std::vector<Stmt> else_body = {});
Stmt allocate(const BufferPtr& b, std::vector<Stmt> body);
Stmt call_stmt(const std::string& fn, std::vector<Expr> args);
Stmt comment(const std::string& text);

// ---------------------------------------------------------------- kernels

// A kernel input the kernel reads in the micro-kernel's panel layout (panel_layout.h) instead
// of row-major: always a graph constant (weights). Whoever binds the kernel's arguments passes
// the row-major tensor through pack_panels first (the executable once at build time), through
// pack_argument.
//
// `then`: further constant inputs whose panels follow this input's in the same argument, in
// order — sibling contractions of one left operand lowered as one GEMM read their weights as one
// panel sequence, each sibling's columns starting at a whole panel (lower_contraction_siblings.cc).
// Their own arguments stay row-major (the kernel does not read them).
struct PackedSource {
  size_t input = 0;  // index into LoopKernel::inputs
  PanelLayout layout;
  bool operator==(const PackedSource&) const = default;
};
struct PackedInput {
  size_t input = 0;  // index into LoopKernel::inputs
  PanelLayout layout;
  std::vector<PackedSource> then;
  bool operator==(const PackedInput&) const = default;
  int64_t packed_numel() const;
};

// The packed argument of `p`: the panels of `p.input`, then of each of `p.then`, read from the
// row-major tensors `source(input index)` (float32, batch × rows × cols of each layout).
std::vector<float> pack_argument(const PackedInput& p, const std::function<const float*(size_t input)>& source);

// One node whose run-time indices a kernel checks (kCheckedIndex calls with this site).
struct IndexCheck {
  int64_t site = 0;     // > 0: what the kernel writes into its status word
  std::string message;  // the error when it does: "node 'g' (Gather): an index is out of range ..."
};

struct LoopKernel {
  std::string name;                  // C identifier, e.g. fused_conv_add_relu_7
  std::vector<std::string> sources;  // ONNX node names it came from (for the source comment)
  std::vector<BufferPtr> inputs;     // read-only global buffers, in argument order
  std::vector<BufferPtr> outputs;    // written global buffers, after the inputs
  Stmt body;
  std::vector<PackedInput> packed_inputs;
  // The sites of the body's kCheckedIndex calls (lower_group fills it). When not empty the kernel
  // takes one more argument after the outputs: an int32 status word, 0 before the call, which an
  // out-of-range index sets to its site (threads may store concurrently; any one site is kept).
  // Kernels without data-dependent indices have neither the argument nor any check.
  std::vector<IndexCheck> index_checks;
  // 512: the C backend asks the compiler to prefer 512-bit vectors for this kernel's loops (GCC's
  // target("prefer-vector-width=512"); its tuning for several AVX-512 cores prefers 256-bit ones
  // under -march=native). 0: the compiler's default. Set by lowerings whose loops run in whole
  // 16-lane vectors (Schedule::stencil_whole_vectors).
  int vector_bits = 0;
  // The C backend compiles the kernel without GCC's partial redundancy elimination on trees
  // (optimize("no-tree-pre")). Set by the stencil lowerings: their row loops read a sliding
  // window (the same plane at offsets x + c for every tap), PRE carries those loads from one
  // iteration to the next, and GCC 12 then left the loop scalar (ConvNeXt's first 7x7 depthwise
  // conv with its LayerNorm prologue: 7.0 ms, 0.9 with PRE off; the others unchanged).
  bool no_tree_pre = false;
  // Flops the loops execute beyond the ops' own: tile padding the emitter computes and drops
  // (the pointwise-depthwise kernel's expansion over column panels of whole vectors). The
  // partitioner prices it against a fusion's benefit (KernelAnalysis::padding_flops).
  double padding_flops = 0;
};

// The message for a status word `status` (> 0) after a call of a kernel with these checks: the
// error the runtime, the interpreter and AOT bundles report.
std::string index_error_message(const std::vector<IndexCheck>& checks, int64_t status);

// A copy of statement `s` with every expression it holds (extent, index, value, cond, call
// arguments; null ones stay null) replaced by fe(expr) and every child statement by fs(child).
template <class FE, class FS>
Stmt map_stmt(const Stmt& s, FE&& fe, FS&& fs) {
  auto c = std::make_shared<StmtNode>(*s);
  for (Expr* e : {&c->extent, &c->index, &c->value, &c->cond})
    if (*e) *e = fe(*e);
  for (auto& a : c->call_args) a = fe(a);
  for (auto* list : {&c->body, &c->else_body})
    for (auto& b : *list) b = fs(b);
  return c;
}

// The argument tensors of kernel `k` from its inputs given row-major (as the graph stores them):
// each packed input replaced by its panel-layout copy. Whoever runs a kernel outside the
// executable (the interpreter, tests calling a compiled module) binds through this.
std::vector<Tensor> kernel_arguments(const LoopKernel& k, std::vector<Tensor> inputs);

std::string print_expr(const Expr& e);
std::string print_stmt(const Stmt& s, int indent = 0);
std::string print_kernel(const LoopKernel& k);

}  // namespace kiln::loop
