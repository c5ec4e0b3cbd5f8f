// Einsum reference kernel (numpy.einsum semantics), worked by hand.
#include "nn_test_util.h"

namespace kiln::nn_test {
namespace {

std::vector<Tensor> einsum(const std::string& eq, std::vector<Tensor> ins) {
  return run_op("Einsum", ins, {{"equation", eq}});
}

TEST(NNEinsum, SingleOperand) {
  auto x = iota_f32({2, 3});  // [[0,1,2],[3,4,5]]
  auto t = einsum("ij->ji", {x})[0];
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(t), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<float>(einsum("ij->i", {x})[0]), (std::vector<float>{3, 12}));
  auto all = einsum("ij->", {x})[0];
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(values<float>(all), (std::vector<float>{15}));
  // Implicit output: labels in ASCII order, so "ji" is a transpose and "ij" the identity.
  EXPECT_EQ(values<float>(einsum("ji", {x})[0]), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<float>(einsum(" i j ", {x})[0]), values<float>(x));
}

TEST(NNEinsum, RepeatedLabelsTakeDiagonals) {
  auto m = iota_f32({3, 3});
  EXPECT_EQ(values<float>(einsum("ii->i", {m})[0]), (std::vector<float>{0, 4, 8}));
  auto trace = einsum("ii", {m})[0];  // implicit: i is repeated, so it is summed
  EXPECT_EQ(trace.shape(), Shape{});
  EXPECT_EQ(values<float>(trace), (std::vector<float>{12}));
  // Batch diagonal with an ellipsis: [2,2,2] -> [2,2].
  auto bd = einsum("...ii->...i", {iota_f32({2, 2, 2})})[0];
  EXPECT_EQ(bd.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>(bd), (std::vector<float>{0, 3, 4, 7}));
}

TEST(NNEinsum, TwoOperands) {
  auto a = f32({1, 2, 3, 4}, {2, 2}), b = f32({5, 6, 7, 8}, {2, 2});
  EXPECT_EQ(values<float>(einsum("ij,jk->ik", {a, b})[0]), (std::vector<float>{19, 22, 43, 50}));
  EXPECT_EQ(values<float>(einsum("ij,jk", {a, b})[0]), (std::vector<float>{19, 22, 43, 50}));
  // "ij,kj" implicit -> "ik": a times b^T.
  EXPECT_EQ(values<float>(einsum("ij,kj", {a, b})[0]), (std::vector<float>{17, 23, 39, 53}));
  EXPECT_EQ(values<float>(einsum("i,i", {f32({1, 2, 3}, {3}), f32({4, 5, 6}, {3})})[0]), (std::vector<float>{32}));
  auto outer = einsum("i,j->ij", {f32({1, 2}, {2}), f32({3, 4, 5}, {3})})[0];
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(outer), (std::vector<float>{3, 4, 5, 6, 8, 10}));
  EXPECT_EQ(values<float>(einsum("ij,ij->", {a, b})[0]), (std::vector<float>{70}));
  // Three operands: sum_i x_i * y_i * z_i.
  auto three = einsum("i,i,i->", {f32({1, 2}, {2}), f32({3, 4}, {2}), f32({5, 6}, {2})})[0];
  EXPECT_EQ(values<float>(three), (std::vector<float>{63}));
}

TEST(NNEinsum, EllipsisBroadcastsBatchDims) {
  // Batch [2,1] x [3] -> [2,3]; each matrix product is [1,2] x [2,1].
  auto a = f32({1, 2, 3, 4}, {2, 1, 1, 2});
  auto b = f32({1, 0, 0, 1, 1, 1}, {3, 2, 1});
  auto y = einsum("...ij,...jk->...ik", {a, b})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 2, 3, 3, 4, 7}));
  // Implicit output puts the ellipsis dims first.
  auto z = einsum("i...", {iota_f32({2, 3})})[0];
  EXPECT_EQ(z.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>(z), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // An ellipsis missing from an explicit output is summed.
  EXPECT_EQ(values<float>(einsum("...i->i", {iota_f32({2, 2})})[0]), (std::vector<float>{2, 4}));
  auto bmm = einsum("bij,bjk->bik", {iota_f32({2, 1, 2}), iota_f32({2, 2, 1})})[0];
  EXPECT_EQ(values<float>(bmm), (std::vector<float>{1, 2 * 2 + 3 * 3}));
}

TEST(NNEinsum, IntegerAndDoubleTypes) {
  auto i = einsum("ij,j->i",
                  {Tensor::from_vector<int32_t>({1, -2, 3, 4}, {2, 2}), Tensor::from_vector<int32_t>({5, 6}, {2})})[0];
  EXPECT_EQ(i.dtype(), DType::Int32);
  EXPECT_EQ(values<int32_t>(i), (std::vector<int32_t>{-7, 39}));
  auto i8 = einsum("i->", {Tensor::from_vector<int8_t>({100, 100}, {2})})[0];
  EXPECT_EQ(values<int8_t>(i8), (std::vector<int8_t>{-56}));  // 200 wraps in int8
  auto d =
      einsum("i,i", {Tensor::from_vector<double>({0.1, 0.2}, {2}), Tensor::from_vector<double>({0.3, 0.4}, {2})})[0];
  EXPECT_EQ(values<double>(d), (std::vector<double>{0.1 * 0.3 + 0.2 * 0.4}));
}

TEST(NNEinsum, Errors) {
  auto x = iota_f32({2, 3});
  EXPECT_THROW(einsum("ij,jk", {x}), UserError);                    // two terms, one input
  EXPECT_THROW(einsum("ijk", {x}), UserError);                      // rank mismatch
  EXPECT_THROW(einsum("ii", {x}), UserError);                       // label i sizes 2 and 3
  EXPECT_THROW(einsum("i1", {x}), UserError);                       // not a letter
  EXPECT_THROW(einsum("ij->k", {x}), UserError);                    // output label not in inputs
  EXPECT_THROW(einsum("ij->ii", {x}), UserError);                   // repeated output label
  EXPECT_THROW(einsum("i..j", {x}), UserError);                     // malformed ellipsis
  EXPECT_THROW(einsum("ij,jk", {x, iota_f32({2, 2})}), UserError);  // j: 3 vs 2
  EXPECT_THROW(run_op("Einsum", {x}), UserError);                   // equation missing
  EXPECT_THROW(einsum("i", {Tensor::from_vector<bool>({true}, {1})}), UserError);
  EXPECT_THROW(einsum("...i,...i", {iota_f32({2, 2}), iota_f32({3, 2})}), UserError);
}

}  // namespace
}  // namespace kiln::nn_test
