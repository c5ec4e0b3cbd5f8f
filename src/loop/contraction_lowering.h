// ContractionLowering: the lowering of a contraction-anchored group, its members defined across
// files — lower_contraction.cc (analysis, geometry, the untiled nest, the epilogue),
// lower_contraction_gemm.cc (the MatMul and im2col GEMM views, weight packing),
// lower_contraction_implicit.cc (the implicit-GEMM and channel-rows views of convs),
// lower_conv_staging.cc and lower_conv_stencil.cc (phase planes, the grouped/depthwise stencils),
// lower_contraction_rows.cc (row reductions after the contraction) and the sibling/chain files.
// Internal to src/loop; see lower_contraction.cc for the nests.
#pragma once
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "loop/lower_contraction_tiled.h"
#include "loop/affine.h"
#include "loop/lower_internal.h"
#include "reference/ops/nn_internal.h"

namespace kiln::loop::detail {

inline constexpr const char* kAcc = "acc";

// The phase rows (columns) i < count of a stride-s phase p whose input row i·s + p − pad lies in
// [0, extent): [lo, hi) (lower_conv_staging.cc; the rest of a phase plane is zero padding).
std::pair<int64_t, int64_t> phase_interior(int64_t s, int64_t p, int64_t pad, int64_t extent, int64_t count);

// Kernel position `kpos` (a loop expression) -> the constant table[kpos], as a chain of selects.
Expr table_lookup(const Expr& kpos, const std::vector<int64_t>& table);

class ContractionLowering {
 public:
  ContractionLowering(const FusionGroup& grp, const std::string& name, const Schedule& sched)
      : grp_(grp), name_(name), sched_(sched), L_(grp, false) {}

  LoopKernel lower();

  // For sibling contractions of one left operand lowered as one GEMM
  // (lower_contraction_sibling_gemm.cc): the tiled GEMM view lower() would build its nest from,
  // refused unless lower() builds the plain tiled nest (no row passes, not the stencil). The
  // view's expressions use kernel()'s buffers (B's packed weights among kernel().packed_inputs).
  GemmView sibling_view();
  // For a depthwise conv whose input a fused pointwise conv computes per channel block
  // (lower_pointwise_depthwise.cc): the stencil nest lower() would build, refused when lower()
  // would not take it.
  LoopKernel lower_stencil();
  // Whether lower_stencil() / lower() build the channel-blocked stencil (16 channels per vector,
  // the outer loop over images × channel blocks) rather than a plane per channel. After either.
  bool stencil_in_channel_blocks() const { return stencil_conv() && channel_block_stencil(); }
  const LoopKernel& kernel() const { return k_; }
  const Node* contraction() const { return c_; }
  // The schedule the view was built under (an implicit conv fits mr and kc to its geometry).
  const Schedule& schedule() const { return sched_; }
  const nn::WindowGeometry& window() const { return geo_; }

 private:
  // ---- analysis

  // find_contraction, bind and the geometry: what lower() and sibling_view() start from.
  void prepare();

  void find_contraction();

  void bind();

  // ---- geometry (the reference kernels' checks: what they would reject is refused)

  void matmul_geometry();

  void conv_geometry();

  // ---- the product at one (output, K) position

  // Operand position of a MatMul operand with batch dims `ob` (before promotion of a vector).
  std::vector<Expr> matmul_index(const Shape& ob, bool vec, Expr row, Expr col, const std::vector<Expr>& out);
  // The output's batch indices (batch_) of flat batch position `flat`.
  std::vector<Expr> batch_position(const Expr& flat) const;

  Expr product(const std::vector<Expr>& out, const std::vector<Expr>& kv);

  // The Conv input at output position `o` (spatial) and kernel position `kp` of input channel
  // `cin`, 0 in the padding: the load is clamped in range and its value replaced by 0, which the
  // caller still multiplies by the weight (0 * inf is NaN, as in the reference's im2col).
  Expr conv_input(Expr n, Expr cin, const std::vector<Expr>& o, const std::vector<Expr>& kp);

  // The untiled K loop nest (types other than float32, or Schedule::tile_contractions off):
  // `acc = acc + A·B` over the reduction extents (size-1 extents fold to index 0), shared parts of
  // the operand loads in Lets inside the loop.
  Stmt k_loop_nest(const std::vector<Expr>& out, DType acc_t, const std::function<std::string(size_t)>& name,
                   int& next_let);

  // The contraction's output at the loop point, from the accumulator.
  Expr result(const std::vector<Expr>& out, DType acc_t);
  // The accumulated value plus Conv's bias at output channel `channel`, in the output type.
  Expr result(Expr acc, Expr channel);

  // The stores of the group's outputs at `point` (the contraction's output position) when the
  // contraction's value there is `with`.
  std::vector<std::pair<Expr, Expr>> epilogue_stores(Index& point, const Expr& with);

  // Where group value v holds the contraction's output element at `point` (forward through
  // elementwise, Transpose and zero Pad members; path_position when v is on such a path).
  Index output_position(const Value* v, Index& point);
  std::optional<Index> path_position(const Value* v, Index& point);
  static std::optional<std::vector<int64_t>> zero_pad_begin(const Node& n);
  const Value* unpadded_source(const Value* v, Index& point);
  // Group outputs that zero Pads on the contraction's path surround (their border is not stored
  // by the epilogue), and the loops that zero those borders after the nest.
  std::vector<size_t> padded_outputs();
  std::vector<Stmt> zero_padding(const std::vector<size_t>& outputs);

  // Epilogue value v at idx when the contraction's value at its output position `point_flat` is
  // `with` (substitute_placeholders; a read of the output at another position refuses).
  Expr epilogue_value(const Value* v, const Index& idx, const Expr& point_flat, const Expr& with,
                      std::unordered_map<const ExprNode*, Expr>& memo);

  // ---- the nest

  // Loop variables and extents, outermost first.
  using LoopVars = std::vector<std::pair<std::string, int64_t>>;

  // The untiled nests' outer loops around `body` (the outermost Parallel when the work is big).
  LoopKernel untiled_kernel(const LoopVars& loops, std::vector<Stmt> body);

  // ---- the tiled nest (lower_contraction_tiled.h)

  bool is_group_input(const Value* v) const;

  // Float32 contractions wide enough to fill a vector of columns go through the micro-kernel.
  bool tiled() const;

  // A MatMul whose right operand is one matrix (no batch dims): the left operand's batch dims and
  // rows form the rows of one GEMM ([128, 1, 768] x [768, 2304] is one 128-row GEMM, not 128
  // one-row GEMMs).
  bool fold_matmul_batch() const;

  LoopKernel build_tiled();
  GemmView tiled_view();

  // An operand computed in the group whose value is still a plain load of a kernel input at an
  // index affine in (row, column) — a Reshape or Squeeze of an input — is read in place too
  // instead of packed (the encoder's QKV projection reads its input through a Reshape). B needs
  // contiguous columns.
  void read_in_place_when_affine(GemmOperand& op, size_t batch_rank, bool unit_columns);
  void pack_constant_b(GemmOperand& op, const Value* b, int64_t k, int64_t n);

  // The epilogue as the tiled nest needs it: the group's stores at `point` from the accumulator.
  std::vector<TileStore> tile_stores(Index point, const Expr& acc, const Expr& channel);

  GemmView matmul_view();

  // fold_matmul_batch(): A is [rows, K] and the output [rows, N] in row-major order.
  GemmView folded_matmul_view();

  GemmView conv_view();
  std::optional<std::pair<const Value*, const Value*>> channel_scaled_input() const;
  Expr channel_scale_at(const Value* s, const Expr& k);
  bool implicit_conv() const;
  void narrow_panels(int64_t cout);
  void widen_panels(int64_t cout, int64_t nr);
  void set_panel_width(int64_t nr);
  void fit_panel_width(int64_t cout);
  GemmView implicit_conv_view();
  bool patch_conv() const;
  GemmView patch_conv_view();
  GemmView staged_im2col_view();
  bool window_channel_rows() const;
  int position_rows(bool direct, int64_t ho, int64_t wo, int64_t rs, int64_t m, double live, bool* split = nullptr) const;
  struct PhasePlanes {
    BufferPtr buffer;
    int64_t slots = 0, hq = 0, wq = 0, plane = 0;
    std::vector<std::pair<int64_t, int64_t>> phases;  // (row, column) phase of each slot
    std::vector<int64_t> slot_of;  // per kernel position
    std::vector<int64_t> offset;   // per kernel position: slot · plane + its offset within the phase plane
    // Layout of the buffer: channel planes, element (n, ci, pos) at (n · c + ci) · slots · plane +
    // pos; or channels innermost, at (n · slots · plane + pos) · cstride + ci (pos = slot · plane +
    // the position within the phase plane; cstride ≥ c, channels_inner_stride in schedule.h).
    bool channels_inner = false;
    int64_t cstride = 0;
    Stmt fill;
  };
  // The phase planes' geometry (no buffer, no fill); a 1-D conv's as one row of a 2-D one
  // (planar_geometry).
  PhasePlanes phase_geometry() const;
  nn::WindowGeometry planar_geometry() const;
  // How a 3-D conv is a 2-D one (planar_geometry): not at all, over (D, H·W), or over the (H, W)
  // planes of every depth position, the depth folded into the batch of planes.
  enum class PlanarFold { None, MergeHW, DepthIntoBatch };
  PlanarFold planar_fold() const;
  int64_t planar_images() const;
  Index planar_index(const Value* v, const Expr& b, const Expr& c, const Expr& y, const Expr& x) const;
  // The loops that stage channel `ch` of image `n` into `buf` from `base`: ph.slots planes of
  // ph.hq × ph.wq, zero in the padding, the fused prologue evaluated once per element.
  std::vector<Stmt> stage_channel_phases(const PhasePlanes& ph, const BufferPtr& buf, const Expr& n, const Expr& ch,
                                         const Expr& base);
  // Every channel of every image staged once per call into one buffer (the implicit GEMM's A), in
  // channel planes or with the channels innermost (PhasePlanes::channels_inner).
  PhasePlanes stage_phase_planes(bool channels_inner = false);
  std::optional<PhasePlanes> planes_in_place();
  bool channels_inner_staging();
  Stmt stage_channels_inner(const PhasePlanes& ph);

  // ---- grouped and depthwise convs as a vectorised stencil (lower_conv_stencil.cc)

  bool stencil_conv() const;
  const Node* transcendental_member() const;
  LoopKernel build_stencil();
  int64_t conv_sized_outputs();
  // A depthwise conv over narrow rows, 16 channels per vector (lower_conv_stencil.cc).
  bool channel_block_stencil() const;
  LoopKernel build_channel_block_stencil();
  BufferPtr pack_constant_weights(const Value* w, const PanelLayout& layout);
  void conv_weights_and_stores(GemmView& g, const Value* w, const PanelLayout& layout, int64_t line, int64_t valid);

  // Row kernels whose rows are the columns of one GEMM per batch: a MatMul's last axis (LayerNorm,
  // softmax; A and B read in place, B a plain [K, N] matrix, so all output rows form one GEMM) or
  // an ungrouped Conv's spatial axes (a global pool after the conv; per image, W [M, K] times the
  // im2col panel [K, P], read in place for a 1x1 conv, else packed once per image). The rows are
  // computed a block of mr at a time into kiln_acc; the per-row passes then read it.
  bool rows_tiled(const ContractionRows& plan, size_t lead) const;
  // A MatMul's tiled rows as one GEMM per batch position (B batched or computed), and with A's rows
  // packed per block (A computed or broadcast); the number of GEMMs (images, batch positions or 1).
  bool rows_batched() const;
  bool rows_a_packed() const;
  int64_t rows_batches() const;

  // A 1x1, stride-1, unpadded conv whose input is a plain buffer: B is the input image itself.
  bool conv_in_place() const;
  // Where the tiled rows' conv gets its B panel (lower_contraction_rows.cc).
  enum class RowsConvB { InPlace, Staged, Planes, Gathered, Generic };
  RowsConvB rows_conv_b() const;
  // A 1x1, stride-1, unpadded conv (its input a plain buffer or computed in the kernel).
  bool unit_window() const;
  bool few_output_channels() const;
  bool computed_by_members(const Value* v) const;

  // The row stride of the tiled rows' accumulator (and packed panel): n, or n rounded up to whole
  // column tiles when the conv's im2col panel is gathered through the offset tables.
  int64_t rows_ld(int64_t n) const;

  // Rows per block of the tiled rows: every block reads all of B, so blocks are as large as the
  // accumulator budget allows (Schedule::rows_block_bytes) while leaving one block per thread;
  // a multiple of the micro-kernel's mr.
  int64_t rows_per_block(int64_t m, int64_t ld) const;

  // The block loops around the per-row statements `per_row` (which read row kiln_tr_row of kiln_acc and
  // use the outer loop variables `outer`, decoded here from the row index).
  std::vector<Stmt> tiled_row_blocks(const LoopVars& outer, const BufferPtr& acc, std::vector<Stmt> per_row);
  std::vector<Stmt> transposed_a_pack(const Expr& x, const BufferPtr& a, int64_t k) const;

  // The im2col panel of a conv whose input is a plain buffer, without per-element div/mod: per
  // tile, each column's input window origin (pos<d> = o_d * stride - pad) and its flat offset go
  // into small tables; per K row (channel, kernel position) the panel row is then
  // valid ? x[base + off[jj]] : 0, a vectorisable gather. (The generic `value` path unravels the
  // column and the K index per element, which cost five times the micro-kernel's time on
  // ResNet-18's 3x3 convs.)
  // `x`: a kernel input, or the input staged by stage_input_fill.
  GemmOperand::Packer im2col_packer(int64_t ncols, int64_t mg, int64_t cg, const BufferPtr& x);
  BufferPtr stage_input() const;
  Stmt stage_input_fill(const BufferPtr& buf);

  // ---- the element / rows nest (lower_contraction_rows.cc): per outer position, the K loop (or
  // the tiled rows' accumulator) and the epilogue per element, then the plan's row passes. A plan
  // with no passes (no_rows: every output stored from the element loop) is the untiled nest.

  ContractionRows no_rows() const;
  LoopKernel build_rows(const ContractionRows& plan);

  const FusionGroup& grp_;
  std::string name_;
  Schedule sched_;
  Lowerer L_;
  bool has_reductions_ = false;
  LoopKernel k_;
  const Node* c_ = nullptr;
  BufferPtr placeholder_;
  DType dtype_ = DType::Float32;
  Shape out_shape_;
  std::vector<int64_t> k_extents_;
  // MatMul
  bool a_vec_ = false, b_vec_ = false;
  Shape a_batch_, b_batch_, batch_;
  // Conv
  const Value* bias_ = nullptr;
  int64_t group_ = 1;
  nn::WindowGeometry geo_;
};

}  // namespace kiln::loop::detail
