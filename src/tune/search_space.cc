#include "tune/search_space.h"

#include <algorithm>

#include "tune/schedule_fields.h"

namespace kiln::tune {

namespace {

constexpr int64_t KiB = 1024;
// A threshold no kernel reaches: "never" (parallel_min_work: always serial; channel rows: never).
constexpr int64_t kNever = int64_t(1) << 40;

bool has_op(const FusionGroup& grp, const char* op) {
  return std::any_of(grp.nodes.begin(), grp.nodes.end(), [&](const Node* n) { return n->op_type() == op; });
}

bool has_pointwise_conv(const FusionGroup& grp) {
  for (const Node* n : grp.nodes)
    if (n->op_type() == "Conv" && n->num_inputs() > 1 && n->input(1) && n->input(1)->shape().size() == 4 &&
        n->input(1)->shape()[2] == 1 && n->input(1)->shape()[3] == 1)
      return true;
  return false;
}

// A group-1 conv with a window (not 1x1).
bool has_windowed_conv(const FusionGroup& grp) {
  for (const Node* n : grp.nodes)
    if (n->op_type() == "Conv" && n->attr_int("group", 1) == 1 && n->num_inputs() > 1 && n->input(1) &&
        n->input(1)->shape().size() == 4 && n->input(1)->shape()[2] * n->input(1)->shape()[3] > 1)
      return true;
  return false;
}

bool has_grouped_conv(const FusionGroup& grp) {
  for (const Node* n : grp.nodes)
    if (n->op_type() == "Conv" && n->attr_int("group", 1) > 1) return true;
  return false;
}

Dimension dim(const std::string& field, std::vector<int64_t> values, const loop::Schedule& dflt) {
  values.push_back(*get_field(dflt, field));
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return {field, values};
}

}  // namespace

bool fits_registers(const loop::Schedule& s, const Target& t) {
  const int vw = std::max(1, s.vector_width);
  const int mr = s.contraction.mr, nr = s.contraction.nr;
  if (mr < 1 || mr > 16 || nr < vw || nr > 64 || nr % vw != 0) return false;
  return mr * (nr / vw) + t.contraction_operand_registers <= t.vector_registers;
}

std::vector<Dimension> search_space(const FusionGroup& grp, const loop::Schedule& dflt, const Target& t) {
  std::vector<Dimension> d;
  const bool contraction = grp.emitter == "contraction" || grp.emitter == "siblings" || grp.emitter == "chain";
  const int64_t l2 = t.l2_bytes > 0 ? t.l2_bytes : 1024 * KiB;
  // Every kernel: whether it runs on one thread (small kernels lose to the wake-up of the workers,
  // big ones gain), and the unroll factor of short inner loops.
  d.push_back(dim("parallel_min_work", {0, int64_t(1) << 15, int64_t(1) << 17, int64_t(1) << 19, int64_t(1) << 21, kNever}, dflt));
  if (contraction) {
    // The register tile first: it matters most (docs/codegen.md "Tiled contractions").
    std::vector<int64_t> mrs, nrs;
    for (int mr = 1; mr <= 16; ++mr) mrs.push_back(mr);
    const int vw = std::max(1, dflt.vector_width);
    for (int k = 1; k * vw <= 64; ++k) nrs.push_back(int64_t(k) * vw);
    d.push_back(dim("contraction.mr", mrs, dflt));
    d.push_back(dim("contraction.nr", nrs, dflt));
    d.push_back(dim("contraction.kc", {64, 128, 192, 256, 384, 512}, dflt));
    d.push_back(dim("contraction.a_reuse_bytes", {l2 / 8, l2 / 4, l2 / 2, l2, 2 * l2}, dflt));
    // Short, wide tiles for a GEMM of one K block (0: never).
    d.push_back(dim("contraction.store_run", {0, 64, 128, 256, 512}, dflt));
    d.push_back(dim("contraction.store_tile_floats", {2048, 4096, 8192}, dflt));
    d.push_back(dim("contraction.store_max_k", {32, 64, 128, 256}, dflt));
    // An in-place B copied per tile from K blocks of this many rows (0: never).
    d.push_back(dim("contraction.copy_b_min_k", {0, 32, 64, 128, 256}, dflt));
    d.push_back(dim("contraction.columns_outer", {0, 1}, dflt));
    d.push_back(dim("contraction.store_per_call", {0, 1}, dflt));
    d.push_back(dim("contraction.gemm_whole_k_bytes", {0, l2 / 8, l2 / 4, l2 / 2}, dflt));
    d.push_back(dim("rows_block_bytes", {64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB, 1024 * KiB}, dflt));
    if (has_pointwise_conv(grp)) {
      d.push_back(dim("contraction.channel_rows_positions", {0, 512, 1024, 2048, 4096, 8192, kNever}, dflt));
      d.push_back(dim("contraction.channel_rows_positions_few_k", {0, 256, 512, 1024, kNever}, dflt));
      d.push_back(dim("contraction.channel_rows_few_k", {32, 64, 128, 256}, dflt));
    }
    // Output channels or positions as a windowed conv's rows (staged_im2col_view).
    if (has_windowed_conv(grp)) {
      d.push_back(dim("contraction.window_channel_rows_plane_bytes", {0, l2 / 4, l2, 4 * l2, 16 * l2, kNever}, dflt));
      d.push_back(dim("contraction.window_channel_rows_min_cout", {16, 32, 64, 128}, dflt));
      // The implicit form's row tile fitted to the output lines (0: contraction.mr) and K block.
      d.push_back(dim("contraction.fit_position_rows", {0, 1}, dflt));
      d.push_back(dim("contraction.implicit_kc", {64, 128, 192, 256, 512}, dflt));
      d.push_back(dim("contraction.implicit_whole_k_bytes", {0, l2 / 8, l2 / 4, l2 / 2}, dflt));
      d.push_back(dim("contraction.implicit_channels_inner", {0, 1}, dflt));
      d.push_back(dim("contraction.implicit_inner_nr", {0, 32, 48, 64}, dflt));
      d.push_back(dim("contraction.fit_panel_width", {0, 1}, dflt));
    }
    if (has_grouped_conv(grp)) {
      d.push_back(dim("stencil_bytes", {l2 / 8, l2 / 4, l2 / 2, l2, 2 * l2}, dflt));
      // 0: every grouped conv takes the GEMM per group (depthwise ones the untiled nest).
      d.push_back(dim("stencil_max_group_width", {0, 8, 16, 32, 64, 128, 256}, dflt));
      d.push_back(dim("stencil_strided_depthwise", {0, 1}, dflt));
      d.push_back(dim("stencil_direct_min_width", {8, 16, 32, kNever}, dflt));
      d.push_back(dim("stencil_kernel_min_width", {0, 8, 12, 16, 32}, dflt));
      d.push_back(dim("stencil_whole_vectors", {0, 1}, dflt));
      d.push_back(dim("stencil_channel_blocks_below", {0, 8, 16, 32}, dflt));
      d.push_back(dim("stage_plane_bytes", {0, 4096, 16384, 65536}, dflt));
    }
    // The expanded channel block of a pointwise -> depthwise kernel (0 would unfuse it: the
    // fusion search measures that alternative, not the schedule search).
    if (grp.emitter == "pointwise-depthwise")
      d.push_back(dim("pointwise_depthwise_bytes", {64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB, 1024 * KiB}, dflt));
  }
  if (grp.emitter == "chain" || (contraction && has_op(grp, "MatMul"))) {
    d.push_back(dim("chain.max_row_blocks", {2, 4, 8, 16, 32}, dflt));
    d.push_back(dim("chain.min_tiles", {1, 2, 4, 8}, dflt));
    d.push_back(dim("chain.max_pack_bytes", {128 * KiB, 256 * KiB, 512 * KiB, 1024 * KiB, 2048 * KiB}, dflt));
    d.push_back(dim("chain.max_local_bytes", {512 * KiB, 1024 * KiB, 2048 * KiB, 4096 * KiB}, dflt));
    d.push_back(dim("chain.max_stream_bytes", {l2 / 2, l2, 2 * l2, 4 * l2}, dflt));
    d.push_back(dim("chain.row_jam", {1, 2, 4, 8}, dflt));
  }
  d.push_back(dim("unroll", {1, 2, 4, 8}, dflt));
  return d;
}

}  // namespace kiln::tune
