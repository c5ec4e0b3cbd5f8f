// The neural-network ops are registered, and report errors with the executor's node prefix.
#include "nn_test_util.h"
#include "reference/op_registry.h"

namespace kiln::nn_test {
namespace {

TEST(NNOps, AllRegistered) {
  for (const char* op : {"MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
                         "GlobalMaxPool", "BatchNormalization", "InstanceNormalization", "LayerNormalization", "LRN",
                         "MeanVarianceNormalization", "Einsum"})
    EXPECT_NE(OpRegistry::global().find(op), nullptr) << op;
}

TEST(NNOps, ErrorsNameTheNode) {
  try {
    run_op("MatMul", {iota_f32({2, 3}), iota_f32({2, 3})});
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "node 'test_MatMul' (MatMul): MatMul inner dims differ: [2,3] x [2,3]");
  }
}

}  // namespace
}  // namespace kiln::nn_test
