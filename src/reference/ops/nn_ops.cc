// Neural-network reference kernels: the entry point the op registry calls. The kernels live in
// one file per family (nn_matmul.cc, nn_conv.cc, nn_pool.cc, nn_norm.cc, nn_einsum.cc); the
// helpers they share and their numerics policy are in nn_internal.h.
#include "reference/ops/nn_internal.h"

namespace kiln {

void register_nn_ops(OpRegistry& r) {
  nn::register_matmul_ops(r);
  nn::register_conv_ops(r);
  nn::register_pool_ops(r);
  nn::register_norm_ops(r);
  nn::register_einsum_ops(r);
  nn::register_recurrent_ops(r);
}

}  // namespace kiln
