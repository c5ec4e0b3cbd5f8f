// Schedule: the parameters of the loop transforms (tile sizes, vector width, unroll factor, thread
// count), kept apart from the transforms themselves (loop_transforms.h) and from the lowering that
// builds the nests. Today the defaults come from the Target; the auto-tuner will search over these
// fields per kernel, so every performance decision a lowering or transform makes must read its
// parameter from here rather than from a constant.
#pragma once
#include <cstdint>

#include "fusion/target.h"

namespace kiln::loop {

// The register tile of a contraction's micro-kernel: mr rows × nr columns of accumulators, nr a
// multiple of the vector width; kc the K block over which a packed operand tile is reused.
struct ContractionTile {
  int mr = 8;
  int nr = 32;
  int64_t kc = 256;
  // An in-place A's M block (rows × K) up to this size is re-read from L2 for every column tile;
  // beyond it a tile spans a panel of column tiles (lower_contraction_tiled.cc). Half the L2.
  int64_t a_reuse_bytes = 512 * 1024;
  // A 1x1 conv read in place is a GEMM with output channels as rows (its output rows stored
  // contiguously) from this many output positions, or from channel_rows_positions_few_k when it
  // has at most channel_rows_few_k input channels; else the implicit GEMM with positions as rows
  // (lower_contraction_implicit.cc, implicit_conv), whose tile is stored transposed. From a
  // page of positions (1024 floats) the implicit form's A (the input in place, a plane per k)
  // reads a page per k step, where channel rows copy their B rows per tile (copy_b_min_k). On the
  // Intel Xeon (Emerald Rapids) VM, C harness alternating both per call: 256 -> 64 over 56x56
  // 0.88x as channel rows, 256 -> 128 0.87x; below a page they lose (512 -> 128 over 28x28
  // 1.11x, 1024 -> 512 over 14x14 1.49x). (On the AMD EPYC Zen 4 56x56 had gone the other way,
  // 256 -> 64 1.05 -> 0.93 ms as positions, when the bound was raised from 2048 to 4096.)
  int64_t channel_rows_positions = 1024;
  int64_t channel_rows_positions_few_k = 512;
  int64_t channel_rows_few_k = 128;
  // A windowed 2-D conv whose staged phase planes take more than this many bytes (16 x the L2,
  // from the target) is a GEMM with output channels as rows and the positions over its planes as
  // columns (staged_im2col_view in lower_contraction_implicit.cc); up to it the implicit GEMM with
  // positions as rows. On a Zen 5 VM the bound was the L2 (ResNet's 128-channel 3x3 conv over
  // 112x112, 6.6 MB of planes: 20.7 ms as channel rows, 23.2 as positions); on a Zen 4 VM the
  // implicit form won at every size measured, 1 thread (channel rows -> positions): that conv
  // 37.0 -> 34.2 ms, 64 -> 64 3x3 over 224x224 (13 MB of planes) 44.7 -> 36.2, 256 -> 256 3x3
  // over 56x56 36.1 -> 33.0, ResNet-50's stride-2 128 -> 128 over 56x56 (1.7 MB) 2.34 -> 2.07,
  // 256 -> 256 stride 2 9.55 -> 8.30; 2 threads alike. Tunable per machine.
  int64_t window_channel_rows_plane_bytes = 16 * 1024 * 1024;
  // ... and it has at least this many output channels: with few, each packed B panel serves few
  // row tiles (DenseNet-121's 128 -> 32 3x3 convs over 56x56: 1.34 ms as positions with 14-row
  // tiles, 1.62-1.77 as channel rows).
  int64_t window_channel_rows_min_cout = 64;
  // The implicit GEMM's row tile (positions as rows) is fitted to the output lines (1; 0: mr as
  // given): mr at most accumulator_registers / (nr / vector width), chosen so that row tiles
  // cover whole output lines with the fewest computed padding columns
  // (ContractionLowering::position_rows). 256 -> 256 3x3 conv over 14x14: 8-row tiles over the
  // phase planes' 16-wide lines 1.36 ms, 14-row tiles of exactly one line 1.03 ms.
  int fit_position_rows = 1;
  // ... and splits each line into tiles of balanced heights (mr and mr - 1) where those tiles
  // would compute this percent of padding rows or more (ContractionLowering::position_rows; 0:
  // never).
  int split_line_waste_percent = 1;
  int accumulator_registers = 29;  // vector registers left for accumulators (the target's)
  // A row tile product's columns past its last whole nr-wide panel (up to this many) join that
  // panel as one wider call (its last vector masked; at most accumulator_registers accumulators),
  // where B's rows run on across panels (an operand in place, not packed panels). Alone they were
  // a call of one masked vector per row: a broadcast of A per multiply-add, the load ports'
  // limit. SqueezeNet's last 1x1 conv + global pool, 169 = 5 x 32 + 9 columns: the 8x9 calls took
  // 21 % of the kernel's time for 5 % of its work. Needs the FMA build's intrinsic kernels, which
  // take any width (16-lane targets); 0: never (--strict-fp: the portable kernels take widths of
  // whole 4-lane vectors only).
  int64_t merge_tail_cols = 16;
  // The implicit GEMM's K block is at most this (and kc; 0: kc): its B block (kc × nr), the
  // tile's accumulators (126 × nr) and the kc lines of A one micro-kernel call reads share the
  // L1, which 256 filled (128 -> 128 3x3 conv over 28x28 with 14-row tiles: 1.29 ms at 256, 1.17
  // at 128).
  int64_t implicit_kc = 128;
  // ... unless B's panel over the whole K (K × nr floats) is at most this many bytes (the target's
  // L2 / 4; 0: never): then the K block is all of K, so each row tile's accumulators stay in
  // registers from the first K step to the last, the register epilogue applies and the row tile
  // is stored right after its one call (store_per_call), while B streams from the L2 per row tile
  // instead of staying in the L1 per K block. The accumulators' round trips through memory per
  // K block cost more than that stream (bench/ab_schedule.py, 1 thread, new / old: GoogLeNet's
  // 96 -> 128 and 64 -> 192 3x3 convs 0.93, ResNet-50's 1x1 convs with K 256-2048 0.93-0.97,
  // its 64 -> 64 3x3 over 56x56 0.97; 42 one-node convs 0.93-1.01, geomean 0.98); larger panels
  // lost to the L2 taken whole (ResNet's 512 -> 512 3x3 convs, 1.18 MiB panels, 1.07-1.11).
  int64_t implicit_whole_k_bytes = 512 * 1024;
  // The same for a MatMul with A read in place and B the prepacked weights (the target's L2 / 4;
  // 0: never): its K is one block where B's whole-K panel is at most this many bytes, instead of
  // blocks of kc whose accumulator tile goes through memory between them. One-node GEMMs at one
  // thread on a Zen 4 (1 MiB L2), K 384-3072, transformer and square shapes: 0.974-0.981 of the
  // time with kc = 192-256 (bench/ab_schedule.py M contraction.kc=K, 12 shapes; K <= 256
  // unchanged). lower_contraction_gemm.cc.
  int64_t gemm_whole_k_bytes = 256 * 1024;
  // The implicit GEMM's flat row tiles skip a kernel position's calls where it reads only padding
  // (GemmOperand::segment_line) when at least this fraction of the (tile, kernel position) calls
  // can: Inception-v3's 7x1 convs over 17x17 (9 % of their calls; 192 -> 192 1.37 -> 1.27 ms,
  // kiln bench, 1 thread), not a 3x3 conv over 56x56 (1 %, where the lost register epilogue and
  // the zeroed accumulators cost more).
  double dead_tile_min = 0.05;
  // The implicit GEMM's staged phase planes hold the channels innermost (1; 0: a plane per
  // channel): a micro-kernel call's A rows are then kc consecutive floats instead of kc floats a
  // plane apart (as many cache lines and, over 56x56 planes, pages as k values). Only for a conv
  // of a kernel input along unit-stride columns (its staging is then transposing copies). On the
  // 2-core AMD EPYC (Zen 4) both layouts ran within the noise (64 -> 64 3x3 over 56x56 2.09 / 2.12
  // ms, 256 -> 256 over 14x14 2.04 / 2.00); on the Intel Xeon (Emerald Rapids) VM, with the wider
  // tile (implicit_inner_nr) and the padded position stride (channels_inner_stride), 21 one-node
  // stride-1 3x3 and 5x5 convs ran 0.88-1.05x (geomean 0.977; C harness alternating the two
  // kernels per call): VGG's 64 -> 128 over 112x112 0.89, 512 -> 512 over 7x7 0.83-0.96, 48 -> 16
  // over 64x64 0.88; 32 -> 128 over 27x27 and 128 -> 32 over 56x56 1.03-1.05. Whole models
  // (ResNet-50, VGG-11, GoogLeNet, DenseNet-121, ResNet-18) moved within the VM's noise.
  int implicit_channels_inner = 1;
  // The register tile's width (floats) of an implicit GEMM over channels-innermost planes (0:
  // nr). Each k step then reads mr floats that lie a position apart, a line each: a wider, shorter
  // tile (7x64) reads half the lines of 14x32 for the same multiply-adds.
  int implicit_inner_nr = 64;
  // The implicit GEMM's panel width fitted to output channels that are not whole panels
  // (ContractionLowering::fit_panel_width; 0: nr as chosen): 144 channels as 3 panels of 48, not
  // 5 of 32.
  int fit_panel_width = 1;
  // A GEMM whose K is one block stores as much as it computes (a 1x1 conv with 16-64 input
  // channels: 2K flops per stored float). Its tile rows are output rows far apart (an output
  // channel's positions), each a memory stream of the tile's width: a tile is then at least
  // store_run columns wide, with as many rows as store_tile_floats accumulators hold (more
  // concurrent streams than the prefetchers and write buffers track stall the stores).
  // MobileNetV2's 16 -> 96 expansion over 112x112: 96x32 tiles 0.72 ms, 32x128 0.43 ms.
  int64_t store_run = 128;
  int64_t store_tile_floats = 4096;
  int64_t store_max_k = 64;  // fewer rows per tile only up to this K (B panels re-read per M block)
  // A conv with row passes (a global pool) takes the tiled rows — positions as columns, in whole
  // vectors — only when at least this percentage of those lanes hold positions; else the conv and
  // the row passes stay apart (lower_contraction_rows.cc).
  int64_t rows_min_column_percent = 85;
  // ... and only up to this many multiply-adds: above it the conv takes its implicit GEMM (packed
  // weights, positions as rows) and the row passes a small kernel of their own. The tiled rows'
  // micro-kernel has 8 rows (the output channels), reads the input in place as B (rows of the
  // map's width, unaligned) and, for a windowed conv, gathers its im2col panel per tile. Conv +
  // ReLU + global pool against the same apart, 1 thread, in one process alternating per inference
  // (bench/interleave.py), fused / apart: 0.4 M multiply-adds (32 -> 64 over 14x14) 0.91, 1.2 M
  // (the demo model's) 1.00, 1.6 M (64 -> 128 over 14x14) 0.98; 4.2 M (128 -> 128 over 16x16)
  // 1.01, 96 -> 256 over 28x28 1.06, 256 -> 512 over 14x14 1.06, SqueezeNet's 512 -> 1000 over
  // 13x13 1.09, 64 -> 64 3x3 over 14x14 1.37. (16 -> 64 over 28x28, 0.8 M, ran 1.46 fused: the
  // tiled rows' K of 16 per call, a gap this bound leaves.)
  int64_t conv_rows_max_work = int64_t(1) << 21;
  // An in-place B whose K rows lie a page or more apart is copied per tile into a contiguous
  // panel when a K block has at least this many rows (and the tile at least two row tiles);
  // 0: always read in place (lower_contraction_tiled.cc).
  int64_t copy_b_min_k = 128;
  // A tiled GEMM's tiles run with the column panels outermost where N > M (1; 0: row blocks
  // outermost always). The threads split the tile index in contiguous ranges, so the outer
  // dimension is the one they divide: each thread then reads all of the operand along the other
  // one. With N > M that operand is the smaller (A, M x K): a 1x1 conv with output channels as
  // rows splits the positions, which the kernels before and after it split too, instead of each
  // thread reading every position (MnasNet's 48 -> 16 conv + residual over 56x56, 2 threads:
  // 0.065 ms at 1 thread, 0.150 at 2, 0.050 split by columns); a transformer's projection splits the weights' columns,
  // not the sequence. At one thread the B panel of a column tile then serves every row block
  // from L1/L2 while A (the smaller) is re-read.
  int columns_outer = 1;
  // A tile stored by transposing copies (positions as rows) stores each row tile's rows right
  // after the call that finished them (1; 0: the whole tile after its last K block), where the
  // register epilogue applies and the output's lines follow each other (lower_contraction_tiled.cc).
  int store_per_call = 1;
  // A channels-last output (fusion/assign_layouts.h) of one K block with the register epilogue is
  // written by the micro-kernel straight into the output rows (1; 0: through the accumulator tile
  // and a row copy per call; lower_contraction_tiled.cc).
  int channels_last_direct = 1;
};

// Row pipelines (chains of MatMuls such as attention and MLPs, lower_contraction_chain.cc).
struct ChainTile {
  int64_t max_pack_bytes = 512 * 1024;  // pack a stage's right operand per tile up to this size
  int64_t max_row_blocks = 16;         // micro-kernel row blocks (of mr rows) per tile
  int64_t min_tiles = 2;               // tiles to share among threads before making them bigger
  // Local rows of one tile (the stages' rows): bigger tiles read each stage's B fewer times.
  int64_t max_local_bytes = 2 * 1024 * 1024;
  // A stage's right operand (one matrix) streams once per row tile; past this size (the L2, from
  // the target) every tile reads it from L3/DRAM and the pipeline loses to the kernels apart.
  int64_t max_stream_bytes = 1024 * 1024;
  // A stage's row passes over rows of row_jam_from to row_jam_below - 1 elements run row_jam rows
  // at a time (unroll-and-jam, row_jam.h; 0 or 1: one at a time). Such a row's passes are one
  // chain of dependent vector steps (max, its tree, the exps, the sum, its tree, the scale) too
  // short to fill the pipelines and too long for the CPU to overlap with the next row's on its
  // own: SegFormer's attention over 49 keys, 0.45 -> 0.34 ms with four rows at a time (two: 0.36).
  // Rows under two vectors have scalar passes, which jammed ran 0.94-1.14x (LeViT, MobileViT);
  // rows of 128 and more overlap well enough alone: 0.95-0.98x on ViT's and MobileViT's attention,
  // 0.98-1.12x on MobileViT's MatMul + LayerNorm kernels.
  int64_t row_jam = 4;
  int64_t row_jam_from = 32;
  int64_t row_jam_below = 128;
};

// The distance in floats between consecutive positions of channels-innermost planes (a conv's
// staged phase planes, and the channels-last values of assign_layouts that a conv reads as its
// planes in place): c, or one cache line more where c floats are a multiple of 1 KiB. A
// micro-kernel call reads mr positions' first kc channels; a power-of-two distance of 1 KiB or
// more puts those mr runs into the same few L1 sets (the set index repeats every 4 KiB), where
// they evict each other and the B block (512 -> 512 3x3 over 14x14, 2 KiB apart: 3 % slower than
// channel planes; C harness).
inline int64_t channels_inner_stride(int64_t c) { return c % 256 == 0 ? c + 16 : c; }

struct Schedule {
  int vector_width = 16;              // float32 lanes of the target's SIMD registers
  int unroll = 4;                     // unroll factor for short inner loops
  int threads = 0;                    // 0: the runtime's thread count
  // Partial sums of a float sum over a long contiguous row in a row kernel (lower_reduction.cc,
  // docs/codegen.md "Numerics contract"): element j goes to partial j mod reduction_lanes, the
  // partials then add in a fixed pairwise tree. A power of two; 0 or 1: one running sum in the
  // reference's row order (bit-identical to it, but a serial chain of adds). Not taken from the
  // target, so that a model's results do not depend on the machine that compiled it.
  int reduction_lanes = 16;
  // Whether a contraction may sum its K terms in another order than the reference's (a conv's K
  // as (kernel position, input channel) instead of (input channel, kernel position), so that its
  // input is read in place per kernel position; lower_contraction_implicit.cc). False under
  // --strict-fp, with reduction_lanes = 0: every float sum then runs in the reference's order.
  bool reorder_sums = true;
  // Whether a float division by a loop-invariant divisor may multiply by its reciprocal instead
  // (reciprocal_divisors.cc; within 1.5 ulp). False under --strict-fp.
  bool reciprocal_divisors = true;
  // Iterations × inner work (multiply-adds for a contraction) below which a nest stays serial. A
  // fork and join of the spinning team costs under a microsecond (`kiln bench --dispatch`: 0.75
  // us at 2 threads), about what 2^15 multiply-adds take on one core. At 2^19 a serial kernel
  // between parallel ones ran on one core while the other spun — and ran slower than on one
  // thread: MnasNet's 576-channel 3x3 depthwise conv over 7x7 (254K multiply-adds) 0.015 ms at 1
  // thread, 0.028-0.080 ms at 2. Kernel sums at 2 threads, 2^19 -> 2^15 (bench/ab_kernels.py, 3
  // rounds, min): MobileNetV3-Small 1.118 -> 1.058 ms, ShuffleNetV2 2.318 -> 2.198, MobileNetV2
  // 3.926 -> 3.850, EfficientNet-B0 6.615 -> 6.552, MnasNet 1.611 -> 1.600, BERT 1.027 -> 1.030;
  // 1 thread within 1 % either way.
  int64_t parallel_min_work = int64_t(1) << 15;
  // Multiply-adds from which a contraction group is big enough that a slow nest for it costs more
  // than a kernel launch and a pass over memory: from here the lowering refuses the groups whose
  // only form would be the untiled nest with a transcendental epilogue or row passes, or tiled rows
  // over mostly idle lanes (lower_contraction.cc, lower_contraction_rows.cc), so the partitioner
  // keeps those members apart. (It was parallel_min_work's value until that fell to 2^15.)
  int64_t small_kernel_work = int64_t(1) << 19;
  ContractionTile contraction;
  ChainTile chain;
  // Accumulator budget of a block of rows computed whole before their row passes (MatMul +
  // LayerNorm): every block reads all of B, so blocks are as large as this allows.
  int64_t rows_block_bytes = 256 * 1024;
  // A grouped/depthwise conv's working set per group in the stencil nest (lower_conv_stencil.cc):
  // its staged input planes and accumulator plane, streamed from L2 (or L3) once per output
  // channel of the group; above it the conv takes the tiled GEMM per group, whose im2col panel is
  // gathered per tile. Twice the L2 (for_target): RegNetX-400MF's first grouped conv (2 groups of
  // 16 channels, stride 2 over 112x112: 832 KiB of planes per group) ran 2.2 ms as the GEMM,
  // 0.76 ms as the stencil (1 thread).
  int64_t stencil_bytes = 1024 * 1024;
  int64_t stencil_max_group_width = 64;  // channels per group (input and output) the stencil takes
  // An ungrouped windowed conv with fewer output channels than a vector takes the stencil (or,
  // past stencil_bytes, the implicit GEMM with a one-vector panel) from this many multiply-adds;
  // below, the untiled nest, whose scalar sums cost about as much there as the staging and whose
  // sums are the reference's under any schedule (lower_conv_stencil.cc).
  int64_t stencil_few_outputs_min_work = 16384;
  // A conv's costly computed input (a SiLU between a 1x1 conv and a depthwise conv) whose channel
  // plane is at most this many bytes and is read by every phase is computed once per channel into a
  // local plane, which the phases then copy from (lower_conv_staging.cc, stage_channel_phases);
  // larger planes are computed a row at a time. In L1 with room to spare.
  int64_t stage_plane_bytes = 16 * 1024;
  // Values between convs stored channels-last with the next conv's zero padding around them, which
  // that conv reads as its phase plane in place (fusion/assign_layouts.h; 1; 0: every value in the
  // model's layout). A whole-model decision taken before partitioning: not searched per kernel.
  int channels_last_values = 1;
  // Whether a strided depthwise conv takes the stencil too (lower_conv_stencil.cc; 0: the
  // untiled nest, unless its epilogue is transcendental or its input computed).
  int stencil_strided_depthwise = 0;
  // A depthwise stencil whose output rows have at least this many positions sums its window in
  // the epilogue's row loop, with no accumulator plane (lower_conv_stencil.cc).
  int64_t stencil_direct_min_width = 16;
  // A stride-1 depthwise stencil whose output rows have at least this many positions sums its
  // windows through the depthwise micro-kernel (kernels/depthwise.h: blocks of output rows, each
  // input vector loaded once for every row it reaches) under the default numerics; 0: never.
  // Narrower rows fill too few lanes of a row vector (a 7x7 plane: 7 of 16).
  int64_t stencil_kernel_min_width = 12;
  // A grouped conv's stencil (lower_conv_stencil.cc) with at least this many input channels per
  // group, and output channels per group a multiple of the vector width, sums each group as a
  // small implicit GEMM under the default numerics: positions as rows, the group's output
  // channels as columns, K = (kernel position, input channel) through the segmented micro-kernel
  // over the staged planes, the weights packed per group at build time. 0: never (the
  // grouped-conv micro-kernel, positions as lanes, takes them).
  int64_t stencil_group_gemm_min_channels = 16;
  // On 16-lane (AVX-512) targets, a stencil's output rows run in whole vectors — a row of Wo
  // positions as ceil(Wo / 16) vectors, the lanes past Wo computed and their stores masked — and
  // its kernel is compiled preferring 512-bit vectors (LoopKernel::vector_bits; GCC's tuning for
  // several AVX-512 cores prefers 256). Without them a 28-wide row is three 8-lane vectors and
  // four scalar iterations (with the preference alone 16 + 8 lanes and four scalar), a SiLU
  // epilogue's tail among them: EfficientNet's 5x5
  // depthwise conv + SiLU over 28x28 (240 channels) 0.33 -> 0.20 ms in a C harness, 1 thread.
  int stencil_whole_vectors = 1;
  // On 16-lane targets a depthwise conv whose output rows are narrower than this, with a multiple
  // of 16 channels, runs 16 channels per vector (lower_conv_stencil.cc, the channel-blocked
  // stencil) instead of a plane per channel: a 7x7 plane (EfficientNet's and MnasNet's last
  // stages) fills 49 of 128 lanes per channel that way. Rows of 12+ run in whole vectors instead
  // (stencil_whole_vectors): MobileNetV2's 14x14 blocks were 1.2-1.3x slower in channel blocks.
  // 0: never.
  int64_t stencil_channel_blocks_below = 12;
  // A pointwise conv feeding a depthwise conv in one kernel (lower_pointwise_depthwise.cc): the
  // expanded channels are computed a block at a time into a local buffer of at most this many
  // bytes (at least one micro-kernel row block of channels), which the depthwise stencil reads
  // from L2 instead of the expanded tensor going through memory. 0: never fused.
  int64_t pointwise_depthwise_bytes = 256 * 1024;
  bool tile_contractions = true;      // false: the naive dot-product nest (a reference for tests)
  bool default_transforms = true;     // apply_default_schedule after lowering (loop_transforms.h)

  static Schedule for_target(const Target& t);
  // --strict-fp (runtime::BuildOptions::strict_fp): every float sum in the reference's order.
  void set_strict_numerics() {
    reduction_lanes = 0;
    reorder_sums = false;
    reciprocal_divisors = false;
    contraction.merge_tail_cols = 0;
  }
};

}  // namespace kiln::loop
