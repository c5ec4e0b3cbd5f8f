// The lowering pipeline: turns composite ops into the primitives the fusion engine fuses
// (contractions, reductions, elementwise and free reshapes), after simplification and before
// fusion. Every pass emits standard opset-17 ONNX ops in the frontend's canonical forms, so the
// reference executor runs the lowered graph and checks it against the original.
//
// The passes, in order (each header says what comes in and what goes out):
//   fold_batchnorm           BatchNormalization -> folded into Conv/MatMul/Gemm weights, or Mul+Add
//   lower_gemm               Gemm -> MatMul (+ Mul alpha) (+ Add bias), weights pre-transposed
//   decompose_normalization  LayerNorm / InstanceNorm / MeanVarianceNorm -> ReduceMean, Sub, ...
//   decompose_softmax        Softmax / LogSoftmax -> ReduceMax, Sub, Exp, ReduceSum, Div / Log
//   decompose_activations    HardSigmoid / HardSwish -> Mul, Add, Clip (GELU/SiLU need nothing)
//   transpose_to_reshape     data-preserving Transpose -> Reshape
//   eliminate_common_subexpressions, eliminate_dead_code  (clean-up)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "transforms/pipeline.h"

namespace kiln {

// The lowering passes in the order run_lowering runs them; strict_fp as PipelineOptions::strict_fp.
std::vector<std::unique_ptr<Pass>> lowering_pipeline(bool strict_fp = false);
// Every distinct pass name in lowering_pipeline(), sorted.
std::vector<std::string> lowering_pass_names();
// Runs lowering_pipeline(opts.strict_fp) on g with run_passes (dump / disable / timing / verification as in
// pipeline.h; option names are validated against the lowering passes).
void run_lowering(Graph& g, const PipelineOptions& opts = {});

}  // namespace kiln
