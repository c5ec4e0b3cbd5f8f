#include "loop/panel_layout.h"

#include <algorithm>
#include <cstring>

namespace kiln::loop {

PanelLayout PanelLayout::row_major(int64_t batch, int64_t rows, int64_t cols, int64_t nr) {
  PanelLayout l;
  l.batch = batch;
  l.rows = rows;
  l.cols = cols;
  l.nr = nr;
  l.inner_rows = std::max<int64_t>(rows, 1);
  l.inner_stride = cols;
  l.col_stride = 1;
  l.batch_stride = rows * cols;
  return l;
}

std::string PanelLayout::str() const {
  std::string s = "panels of " + std::to_string(nr) + " columns of [";
  if (batch != 1) s += std::to_string(batch) + " x ";
  s += std::to_string(rows) + " x " + std::to_string(cols) + "]";
  if (!(*this == row_major(batch, rows, cols, nr)))
    s += " from element (r, c) at (r / " + std::to_string(inner_rows) + ")*" + std::to_string(outer_stride) + " + (r % " +
         std::to_string(inner_rows) + ")*" + std::to_string(inner_stride) + " + c*" + std::to_string(col_stride);
  return s;
}

std::vector<float> pack_panels(const float* src, const PanelLayout& l) {
  std::vector<float> out(size_t(l.packed_numel()), 0.0f);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t r = 0; r < l.rows; ++r)
      for (int64_t c = 0; c < l.cols; ++c) out[size_t(l.offset(b, r, c))] = src[l.source_offset(b, r, c)];
  return out;
}

}  // namespace kiln::loop
