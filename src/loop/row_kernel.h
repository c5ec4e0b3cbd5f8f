// RowKernelBuilder: the lowering of reduction-anchored groups, shared by the row kernels
// (lower_reduction.cc: softmax, LayerNorm, Reduce*, ArgMax/ArgMin, global pools) and the windowed
// pools (lower_pool.cc: MaxPool, AveragePool). Internal to src/loop; lower_reduction_group
// (lower_internal.h) is the entry point.
//
// Both kinds of kernel build their loop bodies the same way, so that machinery lives in
// row_kernel.cc: statements are first collected as Roots (Let / Assign / Store of expressions
// built by the elementwise Lowerer), then finish() substitutes reduction results and staged rows,
// computes shared subexpressions once (Lets `t<k>`) and puts every store after the loads of its
// iteration. bind() and outer_loops() set up the kernel's buffers and its outer loops. The class
// is a friend of Lowerer (it reads and rebinds the Lowerer's input buffers), which is why the
// pool lowering is a member too rather than a separate class.
#pragma once
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loop/lower_internal.h"

namespace kiln::loop::detail {

// A pool's geometry and types (lower_pool.cc).
struct PoolSpec;

enum class RKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare, GlobalAvg, GlobalMax, ArgMax, ArgMin };

class RowKernelBuilder {
 public:
  // `jam`: run long rows several at a time (see build); off where a caller peels the outer loops.
  // `reduction_lanes`: Schedule::reduction_lanes (the partial sums of a float sum; 0 or 1: none).
  // reorder_sums: Schedule::reorder_sums (false under --strict-fp): an AveragePool may sum in float.
  RowKernelBuilder(const FusionGroup& grp, bool jam, int reduction_lanes = Schedule{}.reduction_lanes,
                   bool reorder_sums = Schedule{}.reorder_sums);
  LoopKernel build(const std::string& name);

 private:
  using Update = std::function<Expr(Expr acc, Expr elem, Expr first)>;
  using Combine = std::function<Expr(Expr a, Expr b)>;
  // Partial accumulators of a Max/Min or integer lane pass (lower_reduction.cc's file comment);
  // float sums use sum_lanes_ (Schedule::reduction_lanes) instead.
  static constexpr int64_t kLanes = 32;
  // A lane pass needs a row of at least kMinLaneBlocks x its lane count.
  // Two: a softmax over Swin's windows (rows of 49) ran its exp and sum one element at a time.
  static constexpr int64_t kMinLaneBlocks = 2;
  // Rows run together by unroll-and-jam, for rows of at least kJamMinRow elements (a shorter row's
  // chain is short enough for the CPU to overlap it with the next row's on its own).
  static constexpr int kJamRows = 8;
  static constexpr int64_t kJamMinRow = 128;

  // One statement of a list before CSE: Let var = value, Assign var = value, or a Store.
  struct Root {
    StmtKind kind;
    std::string var;
    BufferPtr buf;
    Expr index, value;
  };
  // A reduction result, read through a fake buffer until its Let exists.
  struct Result {
    std::string var;
    bool defined = false;
  };

  std::vector<Stmt> finish(std::vector<Root> roots);
  // finish() for the body of a loop over `loop_vars`: every maximal subexpression that reads none
  // of them (per-row values such as LayerNorm's sqrt(var + eps)) is computed once, into Lets
  // appended to `before`, which the caller puts ahead of the loop. Besides saving the work, this
  // takes calls with side effects (sqrtf may set errno) out of loops the C compiler must vectorize.
  // What the roots themselves define (Assign/Let targets, stored buffers) counts as varying too.
  std::vector<Stmt> finish_in_loop(std::vector<Root> roots, const std::set<std::string>& loop_vars,
                                   std::vector<Stmt>& before);
  Expr subst(const Expr& e, std::unordered_map<const ExprNode*, Expr>& memo);
  // Loops over the reduced dims (named kiln_j<pass>_<dim>) around body; the full-domain index.
  std::vector<Expr> pass_dims(int pass, std::vector<std::pair<std::string, int64_t>>& loops);
  static std::vector<Stmt> wrap(const std::vector<std::pair<std::string, int64_t>>& loops, std::vector<Stmt> body,
                                bool vectorize);
  void lower_reduction(const Node& r, RKind kind, int k, std::vector<Stmt>& out);
  // Staging (see build): the local row that keeps the reduction input `elem` of `r` for later
  // passes, or null when it is not worth it or not safe. From then on `r`'s input reads from it.
  BufferPtr stage_row(const Node& r, const Expr& elem);
  // Element j (an Int64 expression, 0 <= j < row) of the current contiguous row: its flat index
  // (row base + j) and its dims (j unravelled over the reduced axes).
  Index row_point(const Expr& j);
  // One reduction pass over a contiguous row in `lanes` partials (the file comment): `name`
  // (already declared) ends up holding the combined value. The partials (lanes a power of two)
  // combine pairwise: lane l with lane l + lanes/2, and so on down to one.
  void lane_pass(const Node& r, const std::string& name, DType at, const Expr& init, const Update& update,
                 const Combine& combine, int64_t lanes, std::vector<Stmt>& out);
  // Kernel inputs and outputs, plus one fake Register buffer per reduction result.
  void bind(LoopKernel& k, const std::vector<const Node*>& reds);
  // One outer loop per dim of `shape` longer than 1 (outer_dims_); the current position's flat index.
  std::vector<std::pair<std::string, int64_t>> outer_loops(const Shape& shape);
  // A MaxPool/AveragePool group (lower_pool.cc): a loop nest over the pool's output. Along the
  // output width, the outputs whose windows lie inside the input run as rows (pool_row), the
  // others each with its own predicated window (pool_point).
  LoopKernel build_pool(const std::string& name, const Node& r);
  // The window nest of the one output at outer_dims_, every position tested against the input's
  // bounds; its window loops are named kiln_k<tag><dim>.
  std::vector<Stmt> pool_point(const PoolSpec& p, const LoopKernel& k, const std::string& tag);
  // `len` outputs along the last dim from column `first`, all windows inside the input along that
  // dim: window loops outside vectorized loops over a local row of accumulators; `jv` names the
  // loop that finalises and stores, `tag` the other loops and the row.
  std::vector<Stmt> pool_row(const PoolSpec& p, const LoopKernel& k, const Expr& first, int64_t len,
                             const std::string& jv, const std::string& tag);
  // Whether the rows of a pool (interior `row_len` outputs long) take the separable form: default
  // numerics, a window with rows and a width (lower_pool.cc's file comment).
  bool separable(const PoolSpec& p, int64_t row_len) const;
  // The separable form of a pool plane whose height loop is not among the outer loops: blocks of
  // output rows, each reduced down the window rows into column sums, then along them for output
  // columns [lo, hi) (the others in the point form); `parallel`: the block loop runs in parallel.
  std::vector<Stmt> pool_rows_separable(const PoolSpec& p, const LoopKernel& k, int64_t lo, int64_t hi, bool parallel);
  // The loop `jv` over a pool row's `len` outputs from column `first`: `head`, then `value`
  // finalised (an average divided by `count`), the epilogue and the stores. `vary` names what else
  // changes along the row; loop invariants go to `before`.
  Stmt finish_row(const PoolSpec& p, const LoopKernel& k, const Expr& first, int64_t len, const std::string& jv,
                  std::vector<Stmt> head, const Expr& value, const Expr& count, const std::set<std::string>& vary,
                  std::vector<Stmt>& before);
  // Makes `pos` the current position along dim `dim` (the last) of `shape` (outer_dims_ and the
  // flat index).
  void set_position(const Shape& shape, size_t dim, Expr pos);
  void set_last_position(const Shape& shape, Expr pos);

  // The reduction's input at a position of in_ (which, for run-time chosen axes, is a view).
  Expr input_at(const Node& r, const Index& at);

  const FusionGroup& grp_;
  Lowerer L_;
  // Run-time chosen axes (runtime_params.h runtime_reduction_sets): the sets, the node's check
  // site, and the input's real shape; in_ is then the view [output dims..., row].
  std::vector<std::vector<bool>> view_sets_;
  int64_t view_site_ = 0;
  Shape view_input_;
  bool jam_ = false;
  int64_t sum_lanes_ = 0;         // Schedule::reduction_lanes, 0 when off
  bool reorder_sums_ = true;      // Schedule::reorder_sums
  bool costly_lanes_ = false;     // a lane pass computes a costly element (an exp): no jam (build)
  Shape in_;
  std::vector<bool> reduced_;
  std::vector<Expr> outer_dims_;  // outer loop vars at kept dims, 0 at reduced ones
  std::string outer_flat_;        // position_key (affine.h) of the flat index of the current row in a per-row value
  Expr outer_flat_expr_;
  bool contiguous_ = false;       // the reduced axes are the trailing non-unit axes of in_
  bool stage_ok_ = false;         // contiguous rows, and only elementwise ops besides reductions
  std::unordered_map<const Buffer*, BufferPtr> staged_;  // a staged value's fake buffer -> its row
  std::vector<BufferPtr> rows_;                          // the local rows, allocated per row
  std::vector<std::pair<const Value*, BufferPtr>> pending_stage_;  // bound once their pass is built
  Expr row_base_;                 // flat index into in_ of the current row's first element
  int64_t row_ = 1;
  int passes_ = 0, next_let_ = 0;
  std::unordered_map<const Buffer*, Result> results_;
};


}  // namespace kiln::loop::detail
