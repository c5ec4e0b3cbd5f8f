// The micro-kernel's panel layout of constant right operands (src/loop/panel_layout.h): where each
// element lands, zero padding past the last column, and a conv's weights read through strides.
#include <gtest/gtest.h>

#include <numeric>

#include "loop/loop_ir.h"
#include "loop/panel_layout.h"

namespace kiln {
namespace {

using loop::PanelLayout;

TEST(PanelLayout, RowMajorPanelsAreContiguousOverKAndZeroPadded) {
  // B [3 x 5] in panels of 4 columns: panel 0 = columns 0..3, panel 1 = column 4 and 3 zeros.
  std::vector<float> b(15);
  std::iota(b.begin(), b.end(), 1.0f);  // b(r, c) = 5r + c + 1
  const PanelLayout l = PanelLayout::row_major(1, 3, 5, 4);
  EXPECT_EQ(l.panels(), 2);
  EXPECT_EQ(l.packed_numel(), 2 * 3 * 4);
  const std::vector<float> p = loop::pack_panels(b.data(), l);
  const std::vector<float> want = {1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14,  // panel 0, rows 0..2
                                   5, 0, 0, 0, 10, 0, 0, 0, 15, 0, 0, 0};   // panel 1
  EXPECT_EQ(p, want);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(p[size_t(l.offset(0, r, c))], b[size_t(r * 5 + c)]);
}

TEST(PanelLayout, ConvWeightsAsKernelPositionThenChannelRows) {
  // W [cout 3][cin 2][kpos 2]: B(k = kpos * 2 + ci, co) = W[co][ci][kpos].
  std::vector<float> w(12);
  std::iota(w.begin(), w.end(), 0.0f);
  PanelLayout l = PanelLayout::row_major(1, 4, 3, 2);
  l.inner_rows = 2;
  l.inner_stride = 2;
  l.outer_stride = 1;
  l.col_stride = 4;
  const std::vector<float> p = loop::pack_panels(w.data(), l);
  for (int64_t kpos = 0; kpos < 2; ++kpos)
    for (int64_t ci = 0; ci < 2; ++ci)
      for (int64_t co = 0; co < 3; ++co)
        EXPECT_EQ(p[size_t(l.offset(0, kpos * 2 + ci, co))], w[size_t(co * 4 + ci * 2 + kpos)]) << kpos << ci << co;
  EXPECT_NE(l.str().find("from element"), std::string::npos) << l.str();
  EXPECT_EQ(PanelLayout::row_major(1, 4, 3, 2).str(), "panels of 2 columns of [4 x 3]");
}

TEST(PanelLayout, KernelArgumentsPackOnlyThePackedInputs) {
  loop::LoopKernel k;
  k.inputs = {std::make_shared<loop::Buffer>(loop::Buffer{"x", DType::Float32, {2}, loop::Scope::Global}),
              std::make_shared<loop::Buffer>(loop::Buffer{"w", DType::Float32, {8}, loop::Scope::Global})};
  k.packed_inputs.push_back({1, PanelLayout::row_major(1, 2, 3, 4), {}});
  std::vector<Tensor> args = loop::kernel_arguments(
      k, {Tensor::from_vector<float>({7, 8}, {2}), Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})});
  EXPECT_EQ(args[0].numel(), 2);
  ASSERT_EQ(args[1].numel(), 8);
  const std::vector<float> want = {1, 2, 3, 0, 4, 5, 6, 0};
  EXPECT_EQ(std::vector<float>(args[1].data<float>(), args[1].data<float>() + 8), want);
}

// A packed input with further sources (sibling weights joined into one argument): each source's
// panels in turn, each padded to whole panels; the sources' own arguments stay row-major.
TEST(PanelLayout, KernelArgumentsJoinFurtherSourcesPanelByPanel) {
  loop::LoopKernel k;
  for (const char* name : {"w1", "x", "w2"})
    k.inputs.push_back(std::make_shared<loop::Buffer>(loop::Buffer{name, DType::Float32, {6}, loop::Scope::Global}));
  k.body = loop::comment("no body");
  loop::PackedInput p{0, PanelLayout::row_major(1, 2, 3, 2), {{2, PanelLayout::row_major(1, 2, 1, 2)}}};
  EXPECT_EQ(p.packed_numel(), 8 + 4);
  k.packed_inputs.push_back(p);
  std::vector<Tensor> args =
      loop::kernel_arguments(k, {Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), Tensor::from_vector<float>({7}, {1}),
                                 Tensor::from_vector<float>({8, 9}, {2, 1})});
  ASSERT_EQ(args[0].numel(), 12);
  // w1: panel 0 = columns 0-1 over both rows, panel 1 = column 2 and a zero; then w2's one panel.
  const std::vector<float> want = {1, 2, 4, 5, 3, 0, 6, 0, 8, 0, 9, 0};
  EXPECT_EQ(std::vector<float>(args[0].data<float>(), args[0].data<float>() + 12), want);
  EXPECT_EQ(args[2].numel(), 2);  // still row-major
  EXPECT_NE(loop::print_kernel(k).find("// w1 packed: panels of 2 columns of [2 x 3], then w2: panels of 2 columns of [2 x 1]"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
