#include <gtest/gtest.h>

#include <cmath>

#include "ir/tensor.h"
#include "reference/kernel_util.h"

namespace kiln {

TEST(Tensor, ZeroFilledAndTyped) {
  Tensor t(DType::Float32, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_THROW(t.data<int64_t>(), InternalError);
}

TEST(Tensor, NegativeDimIsUserError) { EXPECT_THROW(Tensor(DType::Float32, {2, -1}), UserError); }

TEST(Tensor, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) EXPECT_EQ(float(Half(f)), f);
  EXPECT_EQ(float(Half(1.0f + 1.0f / 4096)), 1.0f);  // ties to even
  EXPECT_TRUE(std::isinf(float(Half(1e6f))));
}

TEST(Tensor, CastSaturatesAndTruncates) {
  auto t = Tensor::from_vector<float>({1.7f, -1.7f, 1e20f}, {3});
  auto i = t.cast(DType::Int32);
  EXPECT_EQ(i.data<int32_t>()[0], 1);
  EXPECT_EQ(i.data<int32_t>()[1], -1);
  EXPECT_EQ(i.data<int32_t>()[2], 2147483647);
}

TEST(Broadcast, ShapesAndIteration) {
  EXPECT_EQ(broadcast_shapes({{2, 1, 4}, {3, 1}}), (Shape{2, 3, 4}));
  EXPECT_THROW(broadcast_shapes({{2, 3}, {4}}), UserError);
  std::vector<int64_t> seen;
  for (BroadcastIter it({2, 3}, {{2, 1}, {3}}); !it.done(); it.next()) seen.push_back(it.offset(0) * 10 + it.offset(1));
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 10, 11, 12}));
}

}  // namespace kiln
