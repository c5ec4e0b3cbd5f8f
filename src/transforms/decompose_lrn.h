// decompose_lrn: rewrites LRN (local response normalization across channels) as elementwise and
// injective ops, which fuse into one generated kernel, instead of the reference kernel.
//
// In:  LRN(X) {size, alpha, beta, bias} on floating-point X [N, C, D1, ...], size <= 32.
// Out: with before = floor((size-1)/2), after = size-1-before (the spec's window c-before..c+after,
//      clipped to the channels):
//        sq = Mul(X, X);  p = Pad(sq, before zeros before axis 1, after zeros after)
//        s  = Slice(p, [0, C) on axis 1) + Slice(p, [1, C+1)) + ... + Slice(p, [size-1, C+size-1))
//        Y  = Div(X, Pow(Add(Mul(s, alpha / size), bias), beta))
//      The zero padding is the clipping (a missing channel adds 0); the window is summed in
//      channel order, as the reference does. float16/bfloat16 compute in float32 (Cast in and
//      out); the reference computes in float64, so float32 results differ by a few ulp.
// Not rewritten: integer X, size < 1, size > 32 (the unrolled window would grow the kernel).
#pragma once
#include "transforms/pass.h"

namespace kiln {

class DecomposeLrn : public Pass {
 public:
  std::string name() const override { return "decompose_lrn"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
