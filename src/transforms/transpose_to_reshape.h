// transpose_to_reshape: replaces Transposes that move no data by Reshapes (a free view), so they
// are not scheduled as copies and do not block fusion as layout changes.
//
// In:  Transpose(X) {perm} (perm absent = reversed axes). In row-major order the element order
//      depends only on the relative order of the dims larger than 1; a permutation that keeps
//      that order (it may move size-1 dims anywhere) produces the same flat data. PyTorch exports
//      many such Transposes, e.g. [1,128,768] with perm [1,0,2] -> [128,1,768].
// Out: Reshape(X, shape) with the output's static shape as a new constant i64 input (no -1, no 0,
//      allowzero absent), keeping the node's name and output value. The identity permutation
//      qualifies too.
// Left alone: any permutation that reorders two dims larger than 1, outputs with a 0-sized dim
// (a 0 in Reshape's shape would mean "copy the input dim"), and Transposes of unknown rank.
#pragma once
#include "transforms/pass.h"

namespace kiln {

class TransposeToReshape : public Pass {
 public:
  std::string name() const override { return "transpose_to_reshape"; }
  bool run(Graph& g) override;

  // "" when the pass rewrites n, otherwise why not.
  static std::string refusal(const Node& n);
};

}  // namespace kiln
