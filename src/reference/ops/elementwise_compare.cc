// Ops with boolean results or conditions, all with numpy broadcasting: the comparisons (Equal,
// Less, LessOrEqual, Greater, GreaterOrEqual), the logical And Or Xor, and Where.
#include "reference/ops/elementwise_internal.h"

namespace kiln::elementwise {
namespace {

// Registers a comparison of two same-typed tensors producing bool. float16/bfloat16 compare as
// float, which is exact.
template <TypeSet Set, class Cmp>
void add_compare(OpRegistry& r, const char* name, Cmp cmp) {
  add_op(r, name, [cmp](const Node&, const Inputs& in) {
    expect_inputs(in, 2, 2);
    expect_same_dtype(in[0], in[1], "A and B");
    Tensor out;
    dispatch_set<Set>(in[0].dtype(), "input 0", [&](auto tag) {
      using T = decltype(tag);
      out = map2<T, T, bool>(in[0], in[1], DType::Bool, [cmp](T a, T b) { return cmp(load(a), load(b)); });
    });
    return Inputs{out};
  });
}

void register_comparisons(OpRegistry& r) {
  add_compare<kNumeric | kBool>(r, "Equal", [](auto a, auto b) { return a == b; });
  add_compare<kNumeric>(r, "Less", [](auto a, auto b) { return a < b; });
  add_compare<kNumeric>(r, "LessOrEqual", [](auto a, auto b) { return a <= b; });
  add_compare<kNumeric>(r, "Greater", [](auto a, auto b) { return a > b; });
  add_compare<kNumeric>(r, "GreaterOrEqual", [](auto a, auto b) { return a >= b; });
  add_compare<kBool>(r, "And", [](bool a, bool b) { return a && b; });
  add_compare<kBool>(r, "Or", [](bool a, bool b) { return a || b; });
  add_compare<kBool>(r, "Xor", [](bool a, bool b) { return a != b; });
}

// Where(condition, X, Y): X where condition else Y, all three broadcast together. Elements are
// copied, never converted, so any dtype works.
void register_where(OpRegistry& r) {
  add_op(r, "Where", [](const Node&, const Inputs& in) {
    expect_inputs(in, 3, 3);
    if (in[0].dtype() != DType::Bool) user_error("condition must be bool, got ", dtype_name(in[0].dtype()));
    expect_same_dtype(in[1], in[2], "X and Y");
    const Shape shape = broadcast_shapes({in[0].shape(), in[1].shape(), in[2].shape()});
    Tensor out;
    dispatch_set<kAll>(in[1].dtype(), "input 1", [&](auto tag) {
      using T = decltype(tag);
      out = Tensor(in[1].dtype(), shape);
      const bool* pc = in[0].data<bool>();
      const T* px = in[1].data<T>();
      const T* py = in[2].data<T>();
      T* po = out.data<T>();
      broadcast_rows<3>(shape, {in[0].shape(), in[1].shape(), in[2].shape()},
                        [&](int64_t o, int64_t n, const auto& off, const auto& st) {
                          for (int64_t i = 0; i < n; ++i)
                            po[o + i] = pc[off[0] + i * st[0]] ? px[off[1] + i * st[1]] : py[off[2] + i * st[2]];
                        });
    });
    return Inputs{out};
  });
}

}  // namespace

void register_compare(OpRegistry& r) {
  register_comparisons(r);
  register_where(r);
}

}  // namespace kiln::elementwise
