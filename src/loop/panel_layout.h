// The micro-kernel's panel layout for a constant right operand (weights): a [batch][rows][cols]
// row-major matrix B (rows = K, cols = N) stored as [batch][ceil(cols / nr)][rows][nr], each
// panel of nr columns contiguous over K and zero padded past the last column. The micro-kernel
// then reads B at stride nr, one cache line pair per k, instead of at stride N (a 4 KiB stride for
// N = 1024 puts every row of a K block in the same L1 set: the panel never stayed in L1). Weights
// are constants, so they are packed once — when an Executable is built (runtime/executable.cc), in
// an AOT bundle's weights, per call only in the loop interpreter — never per inference.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::loop {

struct PanelLayout {
  int64_t batch = 1, rows = 0, cols = 0, nr = 0;
  // Where the source tensor holds element (b, r, c), with r = ro · inner_rows + ri:
  //   b · batch_stride + ro · outer_stride + ri · inner_stride + c · col_stride.
  // row_major() describes a [batch][rows][cols] tensor; a conv's weights [Cout][Cin][kh][kw] seen
  // as B(k = (kernel position, cin), j = cout) have inner_rows = Cin, inner_stride = kh·kw,
  // outer_stride = 1 and col_stride = Cin·kh·kw.
  int64_t inner_rows = 1, inner_stride = 0, outer_stride = 0, col_stride = 1, batch_stride = 0;

  static PanelLayout row_major(int64_t batch, int64_t rows, int64_t cols, int64_t nr);
  bool operator==(const PanelLayout&) const = default;
  int64_t panels() const { return (cols + nr - 1) / nr; }
  int64_t packed_numel() const { return batch * panels() * rows * nr; }
  // Flat offset in the packed storage of element (b, r, c).
  int64_t offset(int64_t b, int64_t r, int64_t c) const { return ((b * panels() + c / nr) * rows + r) * nr + c % nr; }
  int64_t source_offset(int64_t b, int64_t r, int64_t c) const {
    return b * batch_stride + (r / inner_rows) * outer_stride + (r % inner_rows) * inner_stride + c * col_stride;
  }
  std::string str() const;  // "panels of 32 columns of [768 x 3072]"
};

// The source tensor `src` (batch × rows × cols floats, placed as the layout says) in panels.
std::vector<float> pack_panels(const float* src, const PanelLayout& l);

}  // namespace kiln::loop
