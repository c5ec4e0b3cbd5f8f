// Legality of the micro-kernel's register epilogue (kernels/microkernel.h, the epilogue forms):
// whether a tiled contraction's epilogue value is exactly what kiln_mk_f32_ep computes from its
// registers — the accumulator, plus a bias per output column, then Relu's or Clip's selects —
// so that the micro-kernel applies it before its single store and the tile needs no pass of its
// own (lower_contraction_tiled.cc uses it for the transposing stores of positions-as-rows convs).
//
// The value must be, innermost first (each step optional, in this order; exactly the loop IR that
// the elementwise lowering builds for Add, Relu and Clip):
//   x = acc                                  the accumulator element (`acc`, structurally)
//   x = x + bias[f(col)]  or  bias[...] + x  a float32 load whose index is affine in the column
//                                            variable with coefficient 1 and free of `rows`
//   x = x + res[g(rows, col)]  or  res + x   a residual: a float32 load whose index is affine in
//                                            the column (coefficient 1) and depends on `rows`
//                                            (the caller decides whether its rows are a strided
//                                            tile: residual_rows)
//   x = select(x < lo, lo, x)                lo, hi uniform: a float constant, or a float32 load
//   x = select(x > hi, hi, x)                at a constant index (a Clip's scalar bounds)
// Anything else (another activation, a second output) keeps the tile pass.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "loop/loop_ir.h"

namespace kiln::loop {

struct RegisterEpilogue {
  int64_t flags = 0;      // kernels::kEpBias | kEpLow | kEpHigh | kEpResidual
  BufferPtr bias;         // with kEpBias
  Expr bias_index;        // the bias element of column `col` (in terms of the column variable)
  BufferPtr res;          // with kEpResidual
  Expr res_index;         // the residual element of the tile's (rows, col)
  Expr lo, hi;            // with kEpLow / kEpHigh (float32)
};

// `column` is the variable of the tile's column, `rows` the variables that vary with its row.
std::optional<RegisterEpilogue> match_register_epilogue(const Expr& value, const Expr& acc, const std::string& column,
                                                        const std::set<std::string>& rows);

// Structural equality of two expressions (same kinds, operators, constants, buffers and names).
bool same_expr(const Expr& a, const Expr& b);

}  // namespace kiln::loop
