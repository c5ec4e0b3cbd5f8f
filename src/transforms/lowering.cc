#include "transforms/lowering.h"

#include <set>

#include "transforms/decompose_activations.h"
#include "transforms/decompose_lrn.h"
#include "transforms/decompose_normalization.h"
#include "transforms/decompose_recurrent.h"
#include "transforms/decompose_grid_sample.h"
#include "transforms/decompose_resize.h"
#include "transforms/decompose_softmax.h"
#include "transforms/eliminate_common_subexpressions.h"
#include "transforms/eliminate_dead_code.h"
#include "transforms/expand_square.h"
#include "transforms/fold_batchnorm.h"
#include "transforms/fold_pad_into_conv.h"
#include "transforms/lower_conv3d.h"
#include "transforms/lower_conv_transpose.h"
#include "transforms/lower_einsum.h"
#include "transforms/lower_gemm.h"
#include "transforms/transpose_to_reshape.h"
#include "transforms/trim_conv_taps.h"

namespace kiln {

std::vector<std::unique_ptr<Pass>> lowering_pipeline(bool strict_fp) {
  std::vector<std::unique_ptr<Pass>> p;
  // Before lower_gemm: a BN after a Gemm folds into the Gemm's weights, while after lowering its
  // producer would be the bias Add and it could only become a separate Mul + Add.
  p.push_back(std::make_unique<FoldBatchNorm>());
  p.push_back(std::make_unique<LowerGemm>());
  // Before fusion: the Conv it becomes is a contraction the loop lowering generates.
  p.push_back(std::make_unique<LowerConvTranspose>());
  // Before trim_conv_taps, which then sees all of a conv's padding (a tap reading only the
  // Pad's zeros is trimmed like one reading the conv's own).
  p.push_back(std::make_unique<FoldPadIntoConv>());
  // After lower_conv_transpose, whose Convs pad the zero-inserted input too.
  p.push_back(std::make_unique<TrimConvTaps>());
  // After trim_conv_taps, which may leave a 3-D conv a window along one of depth and the plane
  // (a planar conv to the loop lowering). Not under --strict-fp: the 2-D conv sums in another
  // order than the reference's 3-D one.
  if (!strict_fp) p.push_back(std::make_unique<LowerConv3d>());
  // Before transpose_to_reshape, which turns the Transposes it emits around unit dims into views.
  p.push_back(std::make_unique<LowerEinsum>());
  // Before decompose_activations and lower_gemm's neighbours: it emits MatMuls, Sigmoid/Tanh and
  // the other activation ops, which the later passes lower like any model's.
  p.push_back(std::make_unique<DecomposeRecurrent>(/*unroll_all=*/strict_fp));
  p.push_back(std::make_unique<DecomposeNormalization>());
  p.push_back(std::make_unique<DecomposeSoftmax>());
  p.push_back(std::make_unique<DecomposeActivations>());
  p.push_back(std::make_unique<DecomposeResize>());
  p.push_back(std::make_unique<DecomposeGridSample>());
  p.push_back(std::make_unique<DecomposeLrn>());
  p.push_back(std::make_unique<ExpandSquare>());
  // After lower_gemm, whose Transposes of non-constant operands may turn out to be free.
  p.push_back(std::make_unique<TransposeToReshape>());
  // Every decomposition adds its own small constants (axes, epsilon, 0 and 1); CSE merges the equal
  // ones across nodes, then DCE drops what that leaves unused.
  p.push_back(std::make_unique<EliminateCommonSubexpressions>());
  p.push_back(std::make_unique<EliminateDeadCode>());
  return p;
}

std::vector<std::string> lowering_pass_names() {
  std::set<std::string> names;
  for (const auto& p : lowering_pipeline()) names.insert(p->name());
  return {names.begin(), names.end()};
}

void run_lowering(Graph& g, const PipelineOptions& opts) { run_passes(g, lowering_pipeline(opts.strict_fp), opts); }

}  // namespace kiln
