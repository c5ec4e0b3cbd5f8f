// Private machinery of lower_group (lower_group.cc drives; lower_elementwise.cc and
// lower_injective.cc turn one node into an expression at one index).
//
// Model: the kernel's loop nest walks the group's output domain. Every value the group computes is
// an expression of its position: value_at(v, index) builds it, recursively through v's producer,
// memoised per (value, index) so that a value needed twice at the same place is built once (and
// later computed once into a Let). Elementwise ops map their output index to each operand by
// numpy broadcasting; injective ops (Transpose, Slice, Pad, Concat, Gather, ...) remap it, so their
// producers are recomputed at the remapped index instead of being stored.
//
// Every expression built here is total: loads are always in bounds and integer division never
// traps, even in a select branch that is not taken (the contract in loop_interpreter.h).
#pragma once
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/op_kind.h"
#include "loop/loop_ir.h"
#include "loop/lower_group.h"
#include "loop/rebind_buffers.h"
#include "loop/schedule.h"
#include "support/error.h"

namespace kiln::loop::detail {

// Thrown to refuse a group; lower_group turns it into LoweredGroup::reason.
struct Refusal {
  std::string reason;
};
[[noreturn]] void refuse(std::string reason);

// Runs `build` (returning a LoopKernel) and turns a Refusal, or a UserError (an invalid attribute
// or shape the reference kernel would report at run time), into LoweredGroup::reason.
template <class Build>
LoweredGroup lowered_or_refused(Build&& build) {
  LoweredGroup r;
  try {
    r.kernel = build();
  } catch (const Refusal& e) {
    r.reason = e.reason;
  } catch (const UserError& e) {
    r.reason = e.what();
  }
  return r;
}

// A position in a tensor of `shape`: its flat row-major offset and/or its per-dimension indices
// (Int64 expressions). Whichever is missing is derived on demand (Lowerer::flat / dims).
struct Index {
  Shape shape;
  Expr flat;                              // may be null
  std::optional<std::vector<Expr>> dims;  // may be absent

  static Index from_flat(Shape s, Expr f) { return Index{std::move(s), std::move(f), std::nullopt}; }
  // A size-1 dim has one position, 0, whatever expression the caller had for it (a GEMM row
  // variable of a one-row operand): value_at memoises by the flat offset, which ignores size-1
  // dims, so an expression kept there would be reused at every other point with the same offset.
  static Index from_dims(Shape s, std::vector<Expr> d) {
    for (size_t i = 0; i < s.size() && i < d.size(); ++i)
      if (s[i] == 1) d[i] = int_imm(0);
    return Index{std::move(s), nullptr, std::move(d)};
  }
  static Index zero(Shape s) { return from_flat(std::move(s), int_imm(0)); }
};

// Limits on recomputation: distinct (value, index) pairs, distinct expression nodes, and nodes of
// the loop body as emitted (unhoisted shared index arithmetic counted per use). Past them the
// group is refused rather than emitting an exploding expression. Real elementwise groups use a
// few hundred at most.
constexpr size_t kMaxValuePoints = 1024;
constexpr size_t kMaxExprNodes = 8192;
constexpr int64_t kMaxEmittedNodes = 8192;
// CumSum is spelled as an unrolled scan (each output sums its row: row length squared adds) and
// TopK as an unrolled selection (each output ranks its row: row length squared compares), for
// rows up to these lengths (longer rows: the scan and select emitters of lower_scan.cc, which do
// not fuse): where the generated kernel is still faster than the reference kernel
// (kiln bench --threads 1, 2026-12-01, 512K elements: CumSum rows of 16 0.98 ms vs 1.9 ms, rows
// of 32 0.59 ms vs 0.42 ms for 131K; TopK k=2 rows of 8 1.4 ms vs 3.0 ms, rows of 16 slower).
constexpr int64_t kMaxScanLength = 16;
constexpr int64_t kMaxSelectLength = 8;

class Lowerer {
 public:
  // flat_mode: one loop over the flat domain (every access contiguous); otherwise one loop per
  // output dimension.
  Lowerer(const FusionGroup& grp, bool flat_mode) : grp_(grp), flat_mode_(flat_mode) {}

  LoopKernel lower(const std::string& name);

  // True when some index had to be unravelled (div/mod) from a flat offset: the flat loop is then
  // not the right nest.
  bool needed_unravel() const { return needed_unravel_; }

  // ---- used by the per-op files
  Expr value_at(const Value* v, Index idx);
  Expr flat(Index& idx);
  const std::vector<Expr>& dims(Index& idx);
  // idx (a position in an output of shape idx.shape) mapped to an operand of `in` under numpy
  // broadcasting.
  Index broadcast(Index& idx, const Shape& in);
  // Operand k of n at the node output position idx (broadcast).
  Expr operand(const Node& n, size_t k, Index& idx);
  // The kCheckedIndex site of member n's run-time indices (lower_group.cc).
  int64_t index_check_site(const Node& n) const;

 private:
  // lower_contraction.cc drives a Lowerer for the prologue and epilogue of a contraction: it binds
  // the kernel's buffers and members itself and builds its own nest around the K loop.
  friend class ContractionLowering;

  // The loop nest writing `outs` (all of one size) into `bufs`; Lets are numbered from next_let.
  std::vector<Stmt> nest(const std::vector<const Value*>& outs, const std::vector<BufferPtr>& bufs, int& next_let);
  Expr lower_node(const Node& n, size_t slot, Index& idx);
  Expr lower_elementwise(const Node& n, Index& idx);                // lower_elementwise.cc
  Expr lower_injective(const Node& n, size_t slot, Index& idx);     // lower_injective.cc
  Expr lower_pad(const Node& n, Index& idx);                        // lower_injective.cc
  Expr pad_fill(const Node& n, const std::string& mode);            // lower_injective.cc
  // Slice/Pad parameters computed at run time (runtime_params.h): the nest reads the variables
  // of the kernel's prologue, which lower_group builds from the kernel's arguments.
  void require_kernel_params(const Node& n);                             // runtime_params.cc
  Expr lower_runtime_slice(const Node& n, Index& idx);                   // runtime_params.cc
  Expr lower_runtime_pad(const Node& n, Index& idx, const Expr& fill);   // runtime_params.cc
  Expr lower_concat(const Node& n, Index& idx);                     // lower_injective.cc
  Expr lower_gather(const Node& n, Index& idx);                     // lower_injective.cc
  Expr lower_gather_elements(const Node& n, Index& idx);            // lower_injective.cc
  Expr lower_space_depth(const Node& n, Index& idx);                // lower_injective.cc
  Expr lower_gather_nd(const Node& n, Index& idx);                  // lower_injective.cc
  Expr lower_one_hot(const Node& n, Index& idx);                    // lower_injective.cc
  Expr lower_range(const Node& n, Index& idx);                      // lower_injective.cc
  Expr lower_cumsum(const Node& n, Index& idx);                     // lower_injective.cc
  Expr lower_topk(const Node& n, size_t slot, Index& idx);          // lower_injective.cc

  // Row kernels (lower_reduction.cc) drive value_at pass by pass with their own loops.
  friend class RowKernelBuilder;
  // Chained contractions (lower_contraction_chain.cc) build each stage's epilogue node by node.
  friend class RowPipeline;

  const FusionGroup& grp_;
  bool flat_mode_;
  bool needed_unravel_ = false;
  std::unordered_map<const Value*, BufferPtr> input_buffers_;
  std::set<const Node*> members_;
  std::unordered_map<std::string, Expr> memo_;
  std::string domain_flat_;          // position_key of the flat index of the loop point
  std::set<const ExprNode*> at_point_;  // node values at the loop point (each gets a Let)
};

// ---- helpers shared by the per-op files

// A member's class as the anchored emitters read it (the op-kind table; ONNX-domain ops only).
inline bool is_reduction(const Node* n) { return op_kind(*n) == OpKind::Reduction; }
inline bool is_contraction(const Node* n) { return op_kind(*n) == OpKind::Contraction; }
inline bool is_elementwise(const Node* n) {
  const auto k = op_kind_of_type(n->op_type());
  return k && *k == OpKind::ElementWise && n->domain().empty();
}
// The types the MatMul and Conv reference kernels accept.
inline const std::initializer_list<DType> kMatMulTypes = {DType::Float32, DType::Float64, DType::Float16,
                                                          DType::BFloat16, DType::Int32,  DType::Int64,
                                                          DType::UInt32,  DType::UInt64};
inline const std::initializer_list<DType> kConvTypes = {DType::Float32, DType::Float64, DType::Float16};

inline bool type_in(DType t, std::initializer_list<DType> set) {
  return std::find(set.begin(), set.end(), t) != set.end();
}

// A MatMul's geometry as its reference kernel computes it (numpy matmul: a 1-D operand promoted
// to a matrix, its unit dim dropped from the output; batch dims broadcast); refuses what the
// reference kernel would reject (lower_contraction.cc).
struct MatMulGeometry {
  DType dtype = DType::Float32;
  bool a_vec = false, b_vec = false;
  Shape a_batch, b_batch, batch, out;
  int64_t k = 0, n = 1;
};
MatMulGeometry matmul_geometry(const Node& c);

// "Op 'name'" (or the op type alone) for refusal texts.
inline std::string name_of(const Node* n) {
  return n->name().empty() ? n->op_type() : cat(n->op_type(), " '", n->name(), "'");
}

// Why the group cannot contain n ("" when n is supported); checked for every node before lowering.
std::string unsupported_reason(const Node& n);         // lower_elementwise.cc (dispatches)
// any_length: without the row-length limits of the unrolled CumSum / TopK (the scan emitter's
// own check).
std::string unsupported_injective(const Node& n, bool any_length = false);  // lower_injective.cc

// Values of a constant integer input (nullopt when the input is absent), refusing when it is
// computed at run time.
std::optional<std::vector<int64_t>> constant_ints(const Node& n, size_t input, const char* what);

// The type arithmetic on `t` happens in: float16/bfloat16 compute in float32.
DType compute_type(DType t);
// e converted to its compute type.
Expr to_compute(Expr e);
// A constant of (compute) type t: float immediates for float types, integer otherwise.
Expr imm(double v, DType t);
// Element i of t as an immediate of t's dtype (half types as a cast of a float32 immediate).
Expr tensor_imm(const Tensor& t, int64_t i);
// Index arithmetic on Int64 that may be negative (pads, wrapped indices).
Expr sub(Expr a, Expr b);
Expr clamp(Expr v, int64_t lo, int64_t hi);

// Computes shared subexpressions once: count() every root expression, then rewrite() each root;
// a non-leaf subexpression referenced twice or more becomes a Let `t<k>` (appended to `lets`) —
// except pure index arithmetic without loads, which stays inline (the C compiler shares it).
// Used by the row-kernel and contraction lowerings for their loop bodies.
class SharedExprHoister {
 public:
  explicit SharedExprHoister(int& next_let) : next_(next_let) {}
  void count(const Expr& e);
  Expr rewrite(const Expr& e, std::vector<Stmt>& lets);
  size_t dag_size() const { return refs_.size(); }  // distinct nodes counted

 private:
  bool has_load(const Expr& e);
  int& next_;
  std::unordered_map<const ExprNode*, int> refs_;
  std::unordered_map<const ExprNode*, bool> loads_;
  std::unordered_map<const ExprNode*, Expr> done_;
};

// ---- the epilogue of an anchor (anchor_epilogue.cc; docs/codegen.md, "Anchored emitters")
//
// An anchor's output (a contraction's; in a chain, each value of the stage) is bound in the
// Lowerer to a placeholder register buffer, so an epilogue value built by value_at loads it. At
// the loop point each placeholder stands for one value at one position (its flat index):
// `lookup(buffer)` says which (nullopt: not a placeholder). substitute_placeholders replaces
// every placeholder load by that value; a load at another position (an epilogue op that remaps
// the anchor's output before using it) refuses, since the point has no value there. Positions are
// compared as affine forms (same_position, affine.h).
struct PlaceholderValue {
  Expr flat;         // where the value is
  Expr value;
  std::string what;  // names it in the refusal: "the MatMul output", "'x'"
};
using PlaceholderLookup = std::function<std::optional<PlaceholderValue>(const Buffer*)>;
Expr substitute_placeholders(const Expr& e, const PlaceholderLookup& lookup, std::unordered_map<const ExprNode*, Expr>& memo);

// Where Transpose `n` puts the element of its input at `in` (the anchored epilogues carry a value
// forward through it: anchor_epilogue.cc); refuses a perm that is not a permutation of the axes.
Index transposed_position(Lowerer& L, const Node& n, Index in);

// Appends the stores of (index, value) pairs into `bufs` to `body`. With several stores, each
// value that is not already a variable or literal is first bound to a Let, so every load of the
// iteration happens before its first store and an output may share memory with a same-shaped
// input read at the same point (the memory planner's in-place reuse).
void append_stores(std::vector<Stmt>& body, const std::vector<BufferPtr>& bufs,
                   std::vector<std::pair<Expr, Expr>> stores, int& next_let);

// append_stores after computing the stores' shared subexpressions once (SharedExprHoister, Lets
// appended to `body`); refuses an epilogue of more than kMaxExprNodes distinct nodes.
void append_hoisted_stores(std::vector<Stmt>& body, const std::vector<BufferPtr>& bufs,
                           std::vector<std::pair<Expr, Expr>> stores, int& next_let);

// A C buffer name for a value, unique within `used`, never a name the nest or an emitter uses
// itself (i<k>, t<k>, acc, math functions, kiln_*).
std::string unique_buffer_name(const Value* v, std::set<std::string>& used);

// Sets up `k` for `grp`: its name, its sources (the members' node names) and one Global buffer per
// group input and output, named after the values (unique_buffer_name within `used`), recorded in
// `inputs` / `outputs` when given. Refuses a group that writes no outputs.
void bind_kernel(const FusionGroup& grp, const std::string& name, LoopKernel& k, std::set<std::string> used,
                 std::unordered_map<const Value*, BufferPtr>* inputs,
                 std::unordered_map<const Value*, BufferPtr>* outputs = nullptr);

// Constant weights in the micro-kernel's panel layout (lower_contraction_gemm.cc). Whether no
// member of grp reads w but as contraction c's right operand: only then may the kernel read w in
// panels alone (another member reads it row-major; X · X too).
bool only_right_operand(const FusionGroup& grp, const Node* c, const Value* w);
// dst[dst_off + q · ldd + l] = val for l < rows, q < cols as one transposing copy
// (kernels::kTransposeF32), when `val` is a float32 load of a kernel argument at an index affine
// in `l` (a positive coefficient: the source's row stride) and in `q` (coefficient 1: each row a
// run of consecutive elements) (lower_conv_stencil.cc). Null otherwise (the caller copies element
// by element).
Stmt transposed_copy(const Expr& val, const std::string& l, const std::string& q, int64_t rows, int64_t cols,
                     const BufferPtr& dst, const Expr& dst_off, int64_t ldd);
// Replaces input `input` of kernel k (a constant's buffer) by its packing in `layout`
// (LoopKernel::packed_inputs: packed once when the executable is built) and returns the packed
// buffer; an input packed already (by another nest of the kernel) is returned as it is.
BufferPtr pack_kernel_input(LoopKernel& k, const BufferPtr& input, const PanelLayout& layout);

// A contraction group with row reductions over the trailing axes of its output
// (lower_contraction_rows.cc): which epilogue values are staged in a local row, which outputs the
// first loop over the row stores, and the synthetic row-kernel group of the reductions' passes.
struct ContractionRows {
  Shape shape;      // the reductions' input: the contraction's output, maybe with leading 1s added
  size_t r0 = 0;    // the row axes are r0.. of `shape`
  int64_t row = 1;  // elements per row
  std::vector<const Value*> staged, first_outputs;
  FusionGroup passes;
};
ContractionRows plan_contraction_rows(const FusionGroup& grp, const Node* c, const Shape& out_shape);
// The passes' statements for one row, inside the contraction kernel's outer loops (`outer`: the
// index into `shape` (plan.shape) at dims < r0): `targets` maps the passes' inputs and outputs to
// the kernel's buffers, indexed as the full tensor plus the target's offset; a Scope::Local target
// (a staged value's row, a chain's next rows) holds rows: indexed within the row plus the offset
// (where the row starts in the buffer).
std::vector<Stmt> contraction_row_passes(const ContractionRows& plan, const Shape& shape,
                                         const std::unordered_map<const Value*, BufferTarget>& targets,
                                         const std::vector<Expr>& outer, const std::string& name,
                                         const Schedule& sched = Schedule{});

// Groups anchored by a reduction (row kernels, pools) and by contractions (with their prologue and
// epilogue); lower_reduction.cc and lower_contraction.cc. They refuse (LoweredGroup::reason) what
// they do not cover, and the runtime runs those groups with library kernels.
// jam_rows: process several rows at once (unroll-and-jam, row_jam.h); off for the row passes of a
// contraction, whose outer loops contraction_row_passes peels off (one loop per dim).
// sched: reduction_lanes (the summation order of float row sums, docs/codegen.md).
LoweredGroup lower_reduction_group(const FusionGroup& grp, const std::string& kernel_name, bool jam_rows = true,
                                   const Schedule& sched = Schedule{});
LoweredGroup lower_contraction_group(const FusionGroup& grp, const std::string& kernel_name,
                                     const Schedule& sched = Schedule{});

// The scatter emitter (lower_scatter.cc): ScatterElements / ScatterND alone in their group, as a
// copy of data and then a nest over updates in the reference's order; any bigger group is refused.
bool is_scatter(const Node& n);
LoweredGroup lower_scatter_group(const FusionGroup& grp, const std::string& kernel_name);

// The scan and select emitters (lower_scan.cc): CumSum / TopK whose rows are longer than the
// unrolled spellings take (needs_row_loop), alone in their group, as loops over each row; any
// bigger group is refused with row_loop_reason.
bool needs_row_loop(const Node& n);
std::string row_loop_reason(const Node& n);
LoweredGroup lower_row_loop_group(const FusionGroup& grp, const std::string& kernel_name);

// The recurrent emitter (lower_recurrent.cc): an RNN / GRU / LSTM alone in its group, the whole
// layer as one kernel (every step's input part as one GEMM, then the steps in a serial loop);
// recurrent_refusal says why it does not build a node ("" when it does): decompose_recurrent
// unrolls those.
bool is_recurrent(const Node& n);
std::string recurrent_refusal(const Node& n);
LoweredGroup lower_recurrent_group(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched);

// Groups with several contractions. lower_contraction_siblings.cc splits the group into
// independent parts (sibling contractions, each with its epilogue; chains), lowers each and
// merges them into one kernel; lower_contraction_chain.cc lowers one chain of MatMuls
// (MatMul -> row-local ops -> MatMul: attention, an MLP) as a row pipeline, and refuses
// (throws Refusal) what it does not cover.
size_t contraction_count(const FusionGroup& grp);
// The members of grp in `nodes` as a group of its own (in grp's order), its inputs the values they
// read and do not produce, in the order first read; no outputs.
FusionGroup subgroup(const FusionGroup& grp, const std::unordered_set<const Node*>& nodes, const std::string& name,
                     GroupKind kind);
// A pointwise conv feeding a depthwise conv through elementwise ops, and elementwise ops after it
// (lower_pointwise_depthwise.cc): the expanded channels a block at a time into a local buffer that
// the depthwise stencil reads. is_pointwise_depthwise: the group's shape (the emitter it goes to);
// the lowering refuses what it does not cover.
bool is_pointwise_depthwise(const FusionGroup& grp);
LoopKernel lower_pointwise_depthwise(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched);
LoweredGroup lower_multi_contraction_group(const FusionGroup& grp, const std::string& kernel_name,
                                           const Schedule& sched = Schedule{});
LoopKernel lower_contraction_chain(const FusionGroup& grp, const std::string& kernel_name, const Schedule& sched);

// A chain of MatMuls stage by stage (analysed by lower_contraction_siblings.cc): stage s is MatMul
// s, the members that depend on it and on no later MatMul, and their row reductions. Every
// stage's output has the rows (all dims but the last) of the first one's; MatMul s+1 reads stage
// s's `next` as its left operand, row by row.
struct ChainStage {
  const Node* c = nullptr;
  std::vector<const Node*> nodes;  // members after c, in group order
  Shape out, a_batch, b_batch;     // c's output; its operands' batch dims
  int64_t k = 0, n = 0;
  DType dtype = DType::Float32;
  const Value* next = nullptr;          // the next MatMul's left operand (null for the last stage)
  std::optional<ContractionRows> plan;  // the stage's row reductions over the last axis
};
struct ChainPlan {
  std::vector<ChainStage> stages;
  std::unordered_map<const Value*, int> stage_of;  // absent: depends on no MatMul
  int stage(const Value* v) const {
    auto it = stage_of.find(v);
    return it == stage_of.end() ? -1 : it->second;
  }
};
// Refuses (throws Refusal) a chain the row pipeline does not cover.
ChainPlan plan_contraction_chain(const FusionGroup& grp);

}  // namespace kiln::loop::detail
