// Convs through the contraction lowering, continued from lower_contraction_conv_test.cc (split at
// 900 lines): staged and computed inputs, far-apart in-place operands, channel rows from a page of
// positions, per-row-tile and channels-last stores, two-thread shares, whole-K panels, the
// channel scale folded into the weights, the channel-rows budget, and strict numerics. Each case
// runs through the loop interpreter against the reference and compiled with emit_c + JitModule.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "loop/loop_interpreter.h"
#include "lower_contraction_conv_test_util.h"
#include "lower_group_test_util.h"

namespace kiln {
namespace {

using namespace conv_test;

// A pointwise conv over many positions whose input the kernel computes (a fused prologue): the
// input is staged once into a plain buffer and read in place as B of the channel-rows GEMM — not
// packed per tile through its per-element value. Both numerics modes; both bit-exact.
TEST(LowerContraction, StagedPointwiseConvMatchesReference) {
  const ConvCase c{"staged_pw", R"(  %s: f32[2,16,24,24] = Sigmoid(%x) name="sig"
  %m: f32[2,16,24,24] = Mul(%x, %s) name="silu"
  %y: f32[2,40,24,24] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[2,16,24,24]", "%y", {{"w", {40, 16, 1, 1}}, {"b", {40}}}};
  check_conv_both_numerics(c, /*fma_exact=*/true, [](const std::string& nest, bool) {
    EXPECT_NE(nest.find("kiln_xph"), std::string::npos) << nest;       // staged once
    EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << nest;     // no panel packed per tile
    EXPECT_EQ(nest.find("K in segments"), std::string::npos) << nest;  // output channels as rows
  });
}

// A 3x3 conv whose input the kernel computes (a skip connection's Concat with an upsampled
// branch, as in a U-Net decoder), under strict numerics (the im2col form): the input is staged
// once per call into a plain copy (kiln_xin) and the panels are packed from it, bit-exact; under
// the default numerics the implicit GEMM stages it into phase planes.
TEST(LowerContraction, ComputedInputOfWindowedConvIsStagedOnce) {
  const ConvCase c{"staged_3x3", R"(  %u: f32[1,8,6,6] = Relu(%a) name="relu"
  %cat: f32[1,20,6,6] = Concat(%u, %s) {axis=1} name="cat"
  %y: f32[1,16,6,6] = Conv(%cat, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%a: f32[1,8,6,6], %s: f32[1,12,6,6]", "%y", {{"w", {16, 20, 3, 3}}, {"b", {16}}}};
  check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    EXPECT_NE(nest.find(strict ? "kiln_xin" : "kiln_xph"), std::string::npos) << nest;  // staged once per call
  });
}

// The staging of a computed input is parallel by its work, elements times operations
// (lower_conv_staging.cc, staged_ops): 32 channels of 16x16 (10368 elements as phase planes) of
// a ReLU stay on one thread; of a SiLU then tanh (two transcendental functions each) they are
// staged in parallel.
TEST(LowerContraction, ComputedInputStagingIsParallelByItsWork) {
  for (const bool costly : {false, true}) {
    SCOPED_TRACE(costly ? "silu-tanh" : "relu");
    const std::string prologue = costly ? R"(  %s: f32[1,32,16,16] = Sigmoid(%a) name="sig"
  %m: f32[1,32,16,16] = Mul(%a, %s) name="silu"
  %u: f32[1,32,16,16] = Tanh(%m) name="tanh"
)" : R"(  %u: f32[1,32,16,16] = Relu(%a) name="relu"
)";
    const ConvCase c{"staged_work", prologue + R"(  %y: f32[1,32,16,16] = Conv(%u, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%a: f32[1,32,16,16]", "%y", {{"w", {32, 32, 3, 3}}, {"b", {32}}}};
    check_conv_both_numerics(c, /*fma_exact=*/false, [costly](const std::string& nest, bool) {
      EXPECT_NE(nest.find("kiln_xph"), std::string::npos) << nest;
      EXPECT_EQ(nest.find("for kiln_xt in [0, 32) parallel") != std::string::npos, costly) << nest;
    }, {}, costly ? 4 : 2, /*strict_too=*/false);
  }
}

// A pointwise conv whose input channels lie pages apart (2070 positions each) with K blocks of 128
// rows: its in-place B is copied per tile into a contiguous panel (ContractionTile::copy_b_min_k),
// the last column tile's 22 columns padded with zeros; both numerics modes match the reference.
// With copy_b_min_k above K it is read in place.
TEST(LowerContraction, FarApartInPlaceBIsCopiedPerTile) {
  const ConvCase c{"copy_b", R"(  %s: f32[1,128,46,45] = Sigmoid(%x) name="sig"
  %m: f32[1,128,46,45] = Mul(%x, %s) name="silu"
  %y: f32[1,24,46,45] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,128,46,45]", "%y", {{"w", {24, 128, 1, 1}}, {"b", {24}}}};
  check_conv_both_numerics(c, /*fma_exact=*/true, [](const std::string& nest, bool) {
    EXPECT_NE(nest.find("B copied per tile"), std::string::npos) << nest;
    EXPECT_NE(nest.find("kiln_pz"), std::string::npos) << nest;  // the rest tile's zero columns
  });
  loop::Schedule sched;
  sched.contraction.copy_b_min_k = 256;
  auto g = make_conv_graph(c);
  for (const auto& grp : partition(*g).groups)
    if (is_contraction_group(grp)) {
      auto lg = loop::lower_group(grp, "c", sched);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_EQ(nest.find("B copied per tile"), std::string::npos) << nest;
      EXPECT_EQ(nest.find("kiln_bpack"), std::string::npos) << nest;
      // B in place: the last column tile (2070 mod 32 = 22 columns) calls the micro-kernel with
      // its width as a constant (a specialisation), never the tile's run-time width.
      EXPECT_NE(nest.find("kiln_mk_f32(8, 22,"), std::string::npos) << nest;
      EXPECT_EQ(nest.find(", kiln_nc, kiln_kc"), std::string::npos) << nest;
    }
}

// A pointwise conv of a kernel input with more than channel_rows_few_k input channels: over a
// page of positions or more (1024: each input channel's plane a page apart) the output channels
// are the GEMM's rows, the input B copied per tile; over fewer (31x32) the implicit GEMM with
// positions as rows reads it in place (ContractionTile::channel_rows_positions). Bias and ReLU.
TEST(LowerContraction, PointwiseConvTakesChannelRowsFromAPageOfPositions) {
  for (const int64_t h : {32, 31}) {
    SCOPED_TRACE(h);
    const std::string shape = "1,48," + std::to_string(h) + ",32";
    const ConvCase c{"pw_page_" + std::to_string(h), "  %c: f32[" + shape + R"(] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %y: f32[)" + shape + R"(] = Relu(%c) name="relu"
)", "%x: f32[1,160," + std::to_string(h) + ",32]", "%y", {{"w", {48, 160, 1, 1}}, {"b", {48}}}};
    const int64_t positions = h * 32;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (strict) return;  // strict numerics always take channel rows (the reference's K order)
      if (positions >= 1024) {
        EXPECT_NE(nest.find("[48 x 160] * [160 x 1024]"), std::string::npos) << nest;
        EXPECT_NE(nest.find("B copied per tile"), std::string::npos) << nest;
      } else {
        EXPECT_NE(nest.find("[" + std::to_string(positions) + " x 160] * [160 x 48]"), std::string::npos) << nest;
      }
    }, {}, 2);
  }
}

// `c` lowered with the schedule field `field` on (`on`) and off (0) over `base`, both against the
// reference: every nest has `form`, and `marker` exactly where the field is on.
template <class T>
void check_field_on_and_off(const ConvCase& c, const loop::Schedule& base, T loop::ContractionTile::*field, T on,
                            const std::string& form, const std::string& marker, size_t members = 2, bool strict_too = true) {
  for (const T value : {on, T{0}}) {
    SCOPED_TRACE(value);
    loop::Schedule sched = base;
    sched.contraction.*field = value;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (strict) return;
      ASSERT_NE(nest.find(form), std::string::npos) << nest;
      EXPECT_EQ(nest.find(marker) != std::string::npos, value == on) << nest;
    }, sched, members, strict_too);
  }
}

// A positions-as-rows tile whose output lines follow each other (row tiles fitted to the 8-wide
// lines) is stored per row tile, right after the last K block's call (store_per_call); with the
// field off, once after the tile.
TEST(LowerContraction, ImplicitConvStoresEachRowTileAfterItsLastCall) {
  const ConvCase c{"store_per_call", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,32,8,8] = Relu(%c) name="relu"
)", "%x: f32[1,16,8,8]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::store_per_call, 1, "kiln_transpose_f32(&y", "+ (kiln_m0 + (kiln_r");
}

// A conv whose epilogue ends in a Transpose to channels-last (ConvNeXt's depthwise conv before
// its LayerNorm, a value stored channels-last between convs): the stores follow the value forward
// through the Transpose, so the tile's rows are the output's rows. With the register epilogue
// the micro-kernel stores them (below), or each row tile is copied row by row right after its
// last call (store_per_call), vectorised along the channels; with the field off after the tile. Whole lines (8 wide) and a stride-2
// conv whose tile lines are padded (17 rows for 16 outputs). Default numerics: under --strict-fp
// these convs take the channel-rows form, whose flat stores refuse the Transpose (it stays apart).
TEST(LowerContraction, ImplicitConvStoresAChannelsLastOutputByRows) {
  const ConvCase whole{"channels_last", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %r: f32[1,32,8,8] = Relu(%c) name="relu"
  %y: f32[1,8,8,32] = Transpose(%r) {perm=[0,2,3,1]} name="nhwc"
)", "%x: f32[1,16,8,8]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  // One K block, row tiles within whole lines and whole column tiles: the micro-kernel writes the
  // output's rows itself (its C the output, `&y[`; ContractionTile::channels_last_direct), no
  // copy; without that, per call (store_per_call) or after the tile.
  check_field_on_and_off(whole, {}, &loop::ContractionTile::channels_last_direct, 1, "* [144 x 32]", "&y[", 3, false);
  loop::Schedule copied;
  copied.contraction.channels_last_direct = 0;
  check_field_on_and_off(whole, copied, &loop::ContractionTile::store_per_call, 1, "* [144 x 32]", "for kiln_sr in", 3, false);
  const ConvCase padded{"channels_last_lines", R"(  %c: f32[1,32,16,16] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %r: f32[1,32,16,16] = Relu(%c) name="relu"
  %y: f32[1,16,16,32] = Transpose(%r) {perm=[0,2,3,1]} name="nhwc"
)", "%x: f32[1,3,33,33]", "%y", {{"w", {32, 3, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(padded, {}, &loop::ContractionTile::store_per_call, 1, "[271 x 27] * [27 x 32]", "for kiln_sr in", 3, false);
}

// Lines no tile height divides, with padding columns, are split into tiles of balanced heights
// (ContractionTile::split_line_waste_percent; ContractionLowering::position_rows): a stride-2 conv
// to 17x17 over 18-wide phase-plane lines computes 289 rows as 9 + 8 per line instead of 305 (flat
// 14-row tiles); a 1x7 conv over 23-wide lines, two images, 289 instead of 306 (9-row line tiles
// over 18 rows), its calls over padding skipped per tile; a channels-last output is written by
// the micro-kernel itself (`&y[`). Against the reference, on and off.
TEST(LowerContraction, ImplicitConvSplitsLinesIntoBalancedTiles) {
  const ConvCase stride2{"split_s2", R"(  %c: f32[1,32,17,17] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %y: f32[1,32,17,17] = Relu(%c) name="relu"
)", "%x: f32[1,16,35,35]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(stride2, {}, &loop::ContractionTile::split_line_waste_percent, 1, "* [144 x 32]", "[289 x 144]",
                         2, false);
  const ConvCase row7{"split_1x7", R"(  %c: f32[2,32,17,17] = Conv(%x, %w, %b) {kernel_shape=[1,7], pads=[0,3,0,3]} name="conv"
  %y: f32[2,32,17,17] = Relu(%c) name="relu"
)", "%x: f32[2,48,17,17]", "%y", {{"w", {32, 48, 1, 7}}, {"b", {32}}}};
  check_field_on_and_off(row7, {}, &loop::ContractionTile::split_line_waste_percent, 1, "* [336 x 32]", "[289 x 336]",
                         2, false);
  const ConvCase nhwc{"split_nhwc", R"(  %c: f32[1,32,17,17] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %r: f32[1,32,17,17] = Relu(%c) name="relu"
  %y: f32[1,17,17,32] = Transpose(%r) {perm=[0,2,3,1]} name="nhwc"
)", "%x: f32[1,16,35,35]", "%y", {{"w", {32, 16, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(nhwc, {}, &loop::ContractionTile::split_line_waste_percent, 1, "* [144 x 32]", "&y[", 3, false);
}

// A residual read channels-last (its index moves by 1 with the output channel, a row of the tile
// every 32 floats) is added by the micro-kernel from its registers (kEpResidual: the call's flags
// 1 | 2 | 8 and the residual's address), the output stored channels-last by the micro-kernel itself or
// channels-first by the transposing copy per call; with 40 output channels (a packed panel's
// columns past N, which the call would read) the tile pass adds it. Against the reference.
TEST(LowerContraction, ImplicitConvAddsAChannelsLastResidualFromItsRegisters) {
  for (const bool nhwc_out : {true, false})
    for (const int cout : {32, 40}) {
      SCOPED_TRACE(cat(nhwc_out ? "channels-last" : "channels-first", " output, ", cout, " channels"));
      const std::string y = cat("f32[1,", cout, ",8,8]"), yl = cat("f32[1,8,8,", cout, "]");
      const std::string body = cat("  %c: ", y, " = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name=\"conv\"\n",
                                   "  %t: ", y, " = Transpose(%res) {perm=[0,3,1,2]} name=\"back\"\n",
                                   "  %a: ", y, " = Add(%c, %t) name=\"add\"\n",
                                   nhwc_out ? cat("  %r: ", y, " = Relu(%a) name=\"relu\"\n  %y: ", yl,
                                                  " = Transpose(%r) {perm=[0,2,3,1]} name=\"nhwc\"\n")
                                            : cat("  %y: ", y, " = Relu(%a) name=\"relu\"\n"));
      const ConvCase c{"residual_regs", body, cat("%x: f32[1,16,8,8], %res: ", yl), "%y",
                       {{"w", {cout, 16, 3, 3}}, {"b", {cout}}}};
      check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
        if (strict) return;
        EXPECT_EQ(nest.find(", 0, 11, &b[") != std::string::npos, cout == 32) << nest;
        EXPECT_EQ(nest.find("kiln_etile") == std::string::npos, cout == 32) << nest;
      }, {}, nhwc_out ? 5 : 4, false);
    }
}

// The same with an epilogue the registers do not hold (a residual read channels-last too, through
// a Transpose in the prologue of the Add's other operand): the values go into a tile, then each
// row of it is copied into the output's row (the channels innermost: kiln_ej inside kiln_ex). With
// a second output in the conv's own layout both are stored per channel, the channels-last one
// strided; against the reference both ways.
TEST(LowerContraction, ImplicitConvCopiesAChannelsLastTileByRows) {
  const std::string body = R"(  %c: f32[1,40,6,7] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %t: f32[1,40,6,7] = Transpose(%res) {perm=[0,3,1,2]} name="back"
  %a: f32[1,40,6,7] = Add(%c, %t) name="add"
  %y: f32[1,6,7,40] = Transpose(%a) {perm=[0,2,3,1]} name="nhwc"
)";
  for (const bool both : {false, true}) {
    SCOPED_TRACE(both);
    const ConvCase c{"channels_last_tile", body, "%x: f32[1,16,6,7], %res: f32[1,6,7,40]", both ? "%y, %a" : "%y",
                     {{"w", {40, 16, 3, 3}}, {"b", {40}}}};
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool) {
      const size_t ex = nest.find("for kiln_ex in"), ej = nest.find("for kiln_ej in", ex);
      ASSERT_NE(ex, std::string::npos) << nest;
      // Rows: the channel loop right inside the row loop; else the channel loop outside.
      EXPECT_EQ(ej != std::string::npos && ej - ex < 200, !both) << nest;
    }, {}, 4, false);
  }
}

// Two threads share the tiles evenly in the order the nest runs them. ViT-B/16's MLP-in (A packed:
// a LayerNorm's tail) runs its column panels outermost (N > M): panels of 1920 and 1152 columns
// gave one thread all the wide ones; the panels are now equal. Its MLP-out + LayerNorm rows: 197
// rows in 3 blocks gave one thread two; now a whole number of blocks per thread. Against the
// reference both ways.
TEST(LowerContraction, TwoThreadsGetEqualShares) {
  loop::Schedule two;
  two.threads = 2;
  const ConvCase panels{"balance_panels", R"(  %d: f32[197,64] = Div(%x, %s) name="norm"
  %m: f32[197,3072] = MatMul(%d, %w) name="mm"
)", "%x: f32[197,64], %s: f32[197,1]", "%m", {{"w", {64, 3072}}}};
  check_conv_both_numerics(panels, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    if (strict) return;
    const size_t at = nest.find("tile ");
    ASSERT_NE(at, std::string::npos) << nest;
    const int64_t nc = std::stoll(nest.substr(nest.find('x', at) + 1));
    EXPECT_EQ(3072 % nc, 0) << "unequal column panels: " << nest.substr(at, 40);
  }, two, 2);
  const ConvCase rows{"balance_rows", R"(  %m: f32[197,768] = MatMul(%x, %w) name="mm"
  %ax = constant i64[1] [1]
  %mu: f32[197,1] = ReduceMean(%m, %ax) {keepdims=1} name="mean"
  %y: f32[197,768] = Sub(%m, %mu) name="center"
)", "%x: f32[197,64]", "%y", {{"w", {64, 768}}}};
  check_conv_both_numerics(rows, /*fma_exact=*/false, [](const std::string& nest, bool strict) {
    if (strict) return;
    const size_t at = nest.find(" rows per block");
    ASSERT_NE(at, std::string::npos) << nest;
    const size_t from = nest.rfind(' ', at - 1) + 1;
    const int64_t per = std::stoll(nest.substr(from, at - from));
    EXPECT_EQ((197 + per - 1) / per % 2, 0) << per << " rows per block";
  }, two, 3);
}

// A MatMul over an input read in place and prepacked weights whose whole-K panel (384 x 32 floats,
// 48 KiB) is within gemm_whole_k_bytes takes K in one block; with the field off, blocks of kc (two
// of 192). The same where A is computed (a LayerNorm's tail before a transformer's MLP, packed
// per row block). Against the reference both ways.
TEST(LowerContraction, MatMulTakesKWholeWhereItsPanelFits) {
  const ConvCase c{"gemm_whole_k", R"(  %m: f32[40,64] = MatMul(%x, %w) name="mm"
  %y: f32[40,64] = Add(%m, %b) name="add"
)", "%x: f32[40,384]", "%y", {{"w", {384, 64}}, {"b", {64}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::gemm_whole_k_bytes, int64_t{256 * 1024}, "[40 x 384] * [384 x 64]",
                         "K block 384");
  const ConvCase packed{"gemm_whole_k_packed_a", R"(  %d: f32[40,384] = Div(%x, %s) name="norm"
  %m: f32[40,64] = MatMul(%d, %w) name="mm"
  %y: f32[40,64] = Add(%m, %b) name="add"
)", "%x: f32[40,384], %s: f32[40,1]", "%y", {{"w", {384, 64}}, {"b", {64}}}};
  check_field_on_and_off(packed, {}, &loop::ContractionTile::gemm_whole_k_bytes, int64_t{256 * 1024}, "A packed",
                         "K block 384", 3);
}

// An implicit conv whose B panel over all of K (576 x 32 floats, 72 KiB) is within
// implicit_whole_k_bytes takes K in one block: each row tile's accumulators stay in registers
// over all nine kernel positions, then it is stored. With the field off, implicit_kc blocks.
TEST(LowerContraction, ImplicitConvTakesKWholeWhereItsPanelFits) {
  const ConvCase c{"whole_k", R"(  %c: f32[1,32,8,8] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
  %y: f32[1,32,8,8] = Relu(%c) name="relu"
)", "%x: f32[1,64,8,8]", "%y", {{"w", {32, 64, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::implicit_whole_k_bytes, int64_t{512 * 1024}, "* [576 x 32]",
                         "K block 576");
}

// The same where the output lines are padded in the tile (a stride-2 stem's phase-plane lines,
// 17 rows for 16 outputs, in 13-row tiles that cross them): each row tile is copied per line it
// overlaps, that line's valid rows only.
TEST(LowerContraction, ImplicitConvStoresEachRowTileOverPaddedLines) {
  const ConvCase c{"store_per_call_lines", R"(  %c: f32[1,32,16,16] = Conv(%x, %w, %b) {kernel_shape=[3,3], strides=[2,2]} name="conv"
  %y: f32[1,32,16,16] = Relu(%c) name="relu"
)", "%x: f32[1,3,33,33]", "%y", {{"w", {32, 3, 3, 3}}, {"b", {32}}}};
  check_field_on_and_off(c, {}, &loop::ContractionTile::store_per_call, 1, "[271 x 27] * [27 x 32]", "i64 kiln_sln = ");
}

// Squeeze-excitation's channel scale before a 1x1 conv (x · s, s one value per input channel,
// here computed in the kernel from z): the scale goes into the weights once per call (kiln_wsc)
// and B (channel rows, 16 output channels over 256 positions) or A (positions as rows, 48 output
// channels over 64 positions: the packed panels scaled) is x in place. Not under --strict-fp,
// where x · s is staged as the reference rounds it, bit-exact.
TEST(LowerContraction, ChannelScaleBeforePointwiseConvGoesIntoTheWeights) {
  struct Case {
    int cout, hw;
    std::string form;
  };
  for (const Case& sh : std::vector<Case>{{16, 16, "[16 x 24] * [24 x 256]"}, {48, 8, "[64 x 24] * [24 x 48]"}}) {
    // (Not structured bindings: clang before 16 cannot capture them in the lambda below.)
    const int cout = sh.cout, hw = sh.hw;
    const std::string form = sh.form;
    const std::string y = cat("f32[1,", cout, ",", hw, ",", hw, "]");
    const ConvCase c{"se_scale", cat("  %s: f32[1,24,1,1] = Sigmoid(%z) name=\"sig\"\n",
                                     "  %m: f32[1,24,", hw, ",", hw, "] = Mul(%x, %s) name=\"scale\"\n",
                                     "  %c: ", y, " = Conv(%m, %w, %b) {kernel_shape=[1,1]} name=\"conv\"\n",
                                     "  %y: ", y, " = Add(%c, %r) name=\"res\"\n"),
                     cat("%x: f32[1,24,", hw, ",", hw, "], %z: f32[1,24,1,1], %r: ", y), "%y",
                     {{"w", {cout, 24, 1, 1}}, {"b", {cout}}}};
    SCOPED_TRACE(form);
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (!strict) {
        EXPECT_NE(nest.find(form), std::string::npos) << nest;
      }
      EXPECT_EQ(nest.find("kiln_wsc") != std::string::npos, !strict) << nest;
    }, {}, 4);
  }
  // Not folded, and still right: two images (one scale per image), more output channels than
  // positions (the weights the larger side), a scale per position rather than per channel.
  const std::vector<ConvCase> kept = {
      {"se_batch2", R"(  %s: f32[2,24,1,1] = Sigmoid(%z) name="sig"
  %m: f32[2,24,8,8] = Mul(%x, %s) name="scale"
  %y: f32[2,32,8,8] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[2,24,8,8], %z: f32[2,24,1,1]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
      {"se_wide", R"(  %s: f32[1,24,1,1] = Sigmoid(%z) name="sig"
  %m: f32[1,24,4,4] = Mul(%x, %s) name="scale"
  %y: f32[1,32,4,4] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,24,4,4], %z: f32[1,24,1,1]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
      {"se_per_position", R"(  %s: f32[1,1,8,8] = Sigmoid(%z) name="sig"
  %m: f32[1,24,8,8] = Mul(%x, %s) name="scale"
  %y: f32[1,32,8,8] = Conv(%m, %w, %b) {kernel_shape=[1,1]} name="conv"
)", "%x: f32[1,24,8,8], %z: f32[1,1,8,8]", "%y", {{"w", {32, 24, 1, 1}}, {"b", {32}}}},
  };
  for (const ConvCase& c : kept) {
    SCOPED_TRACE(c.name);
    check_conv_both_numerics(c, /*fma_exact=*/false, [](const std::string& nest, bool) {
      EXPECT_EQ(nest.find("kiln_wsc"), std::string::npos) << nest;
    }, {}, 3);
  }
}

// A GEMM with more columns than rows runs its column panels outermost (Schedule's
// columns_outer), so the threads' contiguous ranges of tiles split the columns: here a 1x1 conv
// with 16 output channels as rows over 3136 positions, two row blocks of 8 at two threads
// (MnasNet's 48 -> 16 conv over 56x56). With columns_outer = 0 the row blocks are outermost.
TEST(LowerContraction, WideGemmSplitsItsColumnsAmongThreads) {
  const ConvCase c{"cols_outer", R"(  %c: f32[1,16,56,56] = Conv(%x, %w, %b) {kernel_shape=[1,1]} name="conv"
  %y: f32[1,16,56,56] = Relu(%c) name="relu"
)", "%x: f32[1,48,56,56]", "%y", {{"w", {16, 48, 1, 1}}, {"b", {16}}}};
  loop::Schedule two;
  two.threads = 2;
  check_field_on_and_off(c, two, &loop::ContractionTile::columns_outer, 1, "[16 x 48] * [48 x 3136]", "kiln_mb = (kiln_t % 2)");
}

// A windowed conv over many positions with many output channels takes the output channels as
// rows (window_channel_rows), its computed input staged once into phase planes; K stays in the
// reference's order, so --strict-fp keeps this form and is bit-identical to the reference.
TEST(LowerContraction, WindowedConvOverManyPositionsHasChannelRows) {
  const ConvCase c{"rows_3x3", R"(  %s: f32[1,20,15,13] = Sigmoid(%x) name="sig"
  %m: f32[1,20,15,13] = Mul(%x, %s) name="silu"
  %y: f32[1,72,15,13] = Conv(%m, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[1,20,15,13]", "%y", {{"w", {72, 20, 3, 3}}, {"b", {72}}}};
  // Its planes (20 KiB) are below the default budget: as if they exceeded it.
  loop::Schedule over;
  over.contraction.window_channel_rows_plane_bytes = 16 * 1024;
  check_conv_both_numerics(
      c, /*fma_exact=*/false,
      [](const std::string& nest, bool) {
        EXPECT_NE(nest.find("kiln_xkoff"), std::string::npos) << nest;      // B's rows from the staged planes
        EXPECT_NE(nest.find("kiln_xph"), std::string::npos) << nest;        // staged once per call
        EXPECT_EQ(nest.find("K in segments"), std::string::npos) << nest;  // not the implicit form
      },
      over);
  // Below either threshold (planes within the budget, or fewer output channels): the implicit
  // form (positions as rows).
  for (const auto& [plane_bytes, cout] : std::vector<std::pair<int64_t, int64_t>>{{int64_t(1) << 20, 64}, {0, 128}}) {
    loop::Schedule sched;
    sched.contraction.window_channel_rows_plane_bytes = plane_bytes;
    sched.contraction.window_channel_rows_min_cout = cout;
    auto g = make_conv_graph(c);
    for (const auto& grp : partition(*g).groups)
      if (is_contraction_group(grp)) {
        auto lg = loop::lower_group(grp, "r", sched);
        ASSERT_TRUE(lg.kernel) << lg.reason;
        EXPECT_NE(loop::print_kernel(*lg.kernel).find("K in segments"), std::string::npos) << plane_bytes << " " << cout;
      }
  }
}

// The planes' budget is per image: a batch of images whose planes exceed it together, each
// within it, keeps the implicit form (its row tiles walk one image at a time).
TEST(LowerContraction, WindowedConvPlaneBudgetIsPerImage) {
  const ConvCase c{"rows_batch", R"(  %y: f32[3,72,15,13] = Conv(%x, %w, %b) {kernel_shape=[3,3], pads=[1,1,1,1]} name="conv"
)", "%x: f32[3,20,15,13]", "%y", {{"w", {72, 20, 3, 3}}, {"b", {72}}}};
  // One image's planes: 20 channels of 17 x 15 floats, 20,400 bytes.
  // (Not structured bindings: clang before 16 cannot capture them in the lambda below.)
  for (const auto& budget : std::vector<std::pair<int64_t, bool>>{{30 * 1024, false}, {16 * 1024, true}}) {
    const int64_t plane_bytes = budget.first;
    const bool rows = budget.second;
    loop::Schedule sched;
    sched.contraction.window_channel_rows_plane_bytes = plane_bytes;
    sched.contraction.window_channel_rows_min_cout = 64;
    check_conv_both_numerics(c, /*fma_exact=*/false, [&](const std::string& nest, bool strict) {
      if (!strict) {
        EXPECT_EQ(nest.find("K in segments") == std::string::npos, rows) << plane_bytes << "\n" << nest;
      }
    }, sched, 1);
  }
}

// Under strict numerics (reorder_sums false) convs keep the reference's K order: im2col.
TEST(LowerContraction, ImplicitConvNotUnderStrictNumerics) {
  loop::Schedule strict;
  strict.reorder_sums = false;
  auto g = make_conv_graph(implicit_conv_cases()[0]);
  for (const auto& grp : partition(*g).groups)
    if (is_contraction_group(grp)) {
      auto lg = loop::lower_group(grp, "s", strict);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      EXPECT_EQ(loop::print_kernel(*lg.kernel).find("K in segments"), std::string::npos);
    }
}

// Patch convs sum K in the reference's (ci, ky, kx) order, so --strict-fp takes the in-place form
// too (with phase planes, CLIP's 32x32 conv stayed a library kernel there): bit-identical to the
// reference, compiled without FMA contraction.
TEST(LowerContraction, PatchConvUnderStrictNumericsIsBitExact) {
  loop::Schedule strict;
  strict.set_strict_numerics();
  KernelBatch batch;
  int patches = 0;
  for (const ConvCase& c : implicit_conv_cases()) {
    if (c.name.rfind("ic_patch_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    ++patches;
    auto g = make_conv_graph(c);
    const TensorMap inputs = random_inputs(*g, 3, {}, false);
    auto values = run_reference_values(*g, inputs);
    for (const auto& grp : partition(*g).groups) {
      if (!is_contraction_group(grp)) continue;
      auto lg = loop::lower_group(grp, c.name + "_strict", strict);
      ASSERT_TRUE(lg.kernel) << lg.reason;
      const std::string nest = loop::print_kernel(*lg.kernel);
      EXPECT_NE(nest.find("K in segments of"), std::string::npos) << nest;
      EXPECT_EQ(nest.find("kiln_xph"), std::string::npos) << nest;
      batch.add(std::move(*lg.kernel), grp, values);
    }
  }
  EXPECT_EQ(patches, 3);
  batch.check("patch_strict", /*contract=*/false, /*bits=*/true);
}

}  // namespace
}  // namespace kiln
