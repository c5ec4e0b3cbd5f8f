#include "reference/kernel_util.h"

namespace kiln {

int64_t normalize_axis(int64_t axis, int64_t rank) {
  if (rank == 0 && (axis == 0 || axis == -1)) return 0;  // a scalar has one (virtual) axis
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    user_error("axis ", axis, " is out of range for rank ", rank);
  return a;
}

Shape broadcast_shapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t d = s[i], &o = out[off + i];
      if (d == o) continue;
      if (o == 1) o = d;
      else if (d != 1) {
        std::string all;
        for (const auto& t : shapes) all += (all.empty() ? "" : " and ") + shape_str(t);
        user_error("shapes ", all, " cannot be broadcast together");
      }
    }
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  KILN_CHECK(in.size() <= out.size(), "broadcast_strides rank");
  std::vector<int64_t> st(out.size(), 0);
  auto inst = shape_strides(in);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i] == out[off + i] || in[i] == 1, "not broadcastable: ", shape_str(in), " to ", shape_str(out));
    st[off + i] = in[i] == 1 ? 0 : inst[i];
  }
  return st;
}

BroadcastIter::BroadcastIter(const Shape& out, const std::vector<Shape>& ins)
    : out_(out), counter_(out.size(), 0), offsets_(ins.size(), 0), numel_(shape_numel(out)) {
  for (const auto& s : ins) strides_.push_back(broadcast_strides(s, out));
}

void BroadcastIter::next() {
  ++index_;
  for (int64_t d = int64_t(out_.size()) - 1; d >= 0; --d) {
    size_t du = size_t(d);
    if (++counter_[du] < out_[du]) {
      for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] += strides_[k][du];
      return;
    }
    counter_[du] = 0;
    for (size_t k = 0; k < offsets_.size(); ++k) offsets_[k] -= strides_[k][du] * (out_[du] - 1);
  }
}

void expect_inputs(const std::vector<Tensor>& in, size_t min_count, size_t max_count) {
  if (in.size() < min_count || in.size() > max_count)
    user_error("expects ", min_count, (min_count == max_count ? "" : cat(" to ", max_count)), " inputs, got ",
               in.size());
  for (size_t i = 0; i < min_count; ++i)
    if (!in[i].defined()) user_error("required input ", i, " is missing");
}

void expect_same_dtype(const Tensor& a, const Tensor& b, const char* what) {
  if (a.dtype() != b.dtype())
    user_error(what, ": input types differ (", dtype_name(a.dtype()), " vs ", dtype_name(b.dtype()), ")");
}

void expect_float(const Tensor& t, const char* what) {
  if (!is_float(t.dtype())) user_error(what, " must be a float tensor, got ", dtype_name(t.dtype()));
}

int64_t dims_product(const Shape& s, int64_t begin, int64_t end) {
  int64_t p = 1;
  for (int64_t i = begin; i < end; ++i) p *= s[size_t(i)];
  return p;
}

}  // namespace kiln
