// Einsum reference kernel: the general form with numpy.einsum semantics — explicit ("ij,jk->ik")
// and implicit ("ij,jk", output = the labels used exactly once, in ASCII order) outputs, repeated
// labels within one operand (diagonals, "ii->i"), and an ellipsis standing for broadcast dims.
//
// Algorithm: every distinct label (each ellipsis dim counts as one label) becomes one loop. Each
// operand gets a stride per loop — the sum of its strides over the dims carrying that label, which
// is how a repeated label walks a diagonal, and 0 where an ellipsis dim of size 1 broadcasts. The
// loops run output labels outermost, summed labels innermost, as a single odometer; each output
// element is the sum, in row-major order of the summed labels, of the product of the operands.
// Accumulation follows nn_internal.h (float32 in float32; integers in wrapping uint64 arithmetic,
// which truncates to the same value as wrapping in the narrower type).
#include <algorithm>
#include <array>

#include "reference/kernel_util.h"
#include "reference/ops/nn_internal.h"

namespace kiln::nn {

namespace {

// Label ids: 0..51 for letters A-Z a-z (so id order is ASCII order), kEllipsisBase + j for the
// j-th dim of the broadcast ellipsis shape.
constexpr int kEllipsisBase = 52;

int letter_id(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  user_error("equation has invalid character '", ch, "' (labels must be letters)");
}

struct Term {
  std::vector<int> letters_before, letters_after;  // around the ellipsis (all in before if none)
  bool ellipsis = false;
};

Term parse_term(const std::string& s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      if (t.ellipsis || s.compare(i, 3, "...") != 0) user_error("malformed ellipsis in einsum term '", s, "'");
      t.ellipsis = true;
      i += 2;
    } else {
      (t.ellipsis ? t.letters_after : t.letters_before).push_back(letter_id(s[i]));
    }
  }
  return t;
}

struct EinsumPlan {
  std::vector<int> loop_labels;  // output labels first, then summed labels
  std::vector<int64_t> loop_sizes;
  size_t num_out = 0;                         // leading loop_labels that are output dims
  std::vector<std::vector<int64_t>> strides;  // per operand, per loop
  Shape out_shape;
};

EinsumPlan plan_einsum(const std::string& equation_in, const std::vector<Tensor>& ops) {
  std::string eq;
  for (char ch : equation_in)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t pos = 0;;) {
    const size_t comma = lhs.find(',', pos);
    terms.push_back(parse_term(lhs.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (terms.size() != ops.size())
    user_error("equation '", equation_in, "' has ", terms.size(), " operand terms but there are ", ops.size(),
               " inputs");

  // Per operand: the label of each dim. Ellipsis dims are right-aligned across operands.
  size_t ell_rank = 0;
  std::vector<size_t> ell_dims(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const size_t named = terms[i].letters_before.size() + terms[i].letters_after.size();
    const size_t rank = size_t(ops[i].rank());
    if (rank < named || (!terms[i].ellipsis && rank != named))
      user_error("einsum term ", i, " names ", named, " dims but input ", i, " has shape ", shape_str(ops[i].shape()));
    ell_dims[i] = rank - named;
    ell_rank = std::max(ell_rank, ell_dims[i]);
  }
  std::array<int64_t, 64> size_of;
  size_of.fill(-1);
  std::array<int, 64> uses{};
  std::vector<std::vector<int>> dim_labels(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    std::vector<int>& dl = dim_labels[i];
    dl = terms[i].letters_before;
    for (size_t j = 0; j < ell_dims[i]; ++j) dl.push_back(kEllipsisBase + int(ell_rank - ell_dims[i] + j));
    dl.insert(dl.end(), terms[i].letters_after.begin(), terms[i].letters_after.end());
    for (size_t d = 0; d < dl.size(); ++d) {
      const int64_t n = ops[i].dim(int64_t(d));
      int64_t& s = size_of[size_t(dl[d])];
      ++uses[size_t(dl[d])];
      if (dl[d] >= kEllipsisBase) {  // ellipsis dims broadcast
        if (s == -1 || s == 1)
          s = n;
        else if (n != 1 && n != s)
          user_error("einsum ellipsis dims of the inputs do not broadcast");
      } else if (s == -1) {
        s = n;
      } else if (s != n) {
        user_error("einsum label '", char(dl[d] < 26 ? 'A' + dl[d] : 'a' + dl[d] - 26), "' has sizes ", s, " and ", n);
      }
    }
  }

  EinsumPlan p;
  std::vector<int> out_labels;
  if (arrow == std::string::npos) {
    for (size_t j = 0; j < ell_rank; ++j) out_labels.push_back(kEllipsisBase + int(j));
    for (int id = 0; id < kEllipsisBase; ++id)
      if (uses[size_t(id)] == 1) out_labels.push_back(id);
  } else {
    const Term out = parse_term(eq.substr(arrow + 2));
    out_labels = out.letters_before;
    if (out.ellipsis)
      for (size_t j = 0; j < ell_rank; ++j) out_labels.push_back(kEllipsisBase + int(j));
    out_labels.insert(out_labels.end(), out.letters_after.begin(), out.letters_after.end());
    for (size_t a = 0; a < out_labels.size(); ++a) {
      if (size_of[size_t(out_labels[a])] == -1)
        user_error("einsum output label ", a, " of '", equation_in, "' does not occur in the inputs");
      if (std::count(out_labels.begin(), out_labels.end(), out_labels[a]) > 1)
        user_error("einsum output of '", equation_in, "' repeats a label");
    }
  }
  p.loop_labels = out_labels;
  p.num_out = out_labels.size();
  for (int id = 0; id < 64; ++id)
    if (size_of[size_t(id)] != -1 && std::find(out_labels.begin(), out_labels.end(), id) == out_labels.end())
      p.loop_labels.push_back(id);
  for (int id : p.loop_labels) p.loop_sizes.push_back(size_of[size_t(id)]);
  p.out_shape.assign(p.loop_sizes.begin(), p.loop_sizes.begin() + int64_t(p.num_out));

  for (size_t i = 0; i < ops.size(); ++i) {
    const std::vector<int64_t> st = shape_strides(ops[i].shape());
    std::vector<int64_t> loop_st(p.loop_labels.size(), 0);
    for (size_t d = 0; d < dim_labels[i].size(); ++d) {
      if (ops[i].dim(int64_t(d)) == 1) continue;  // size 1: broadcast or irrelevant
      const size_t l =
          size_t(std::find(p.loop_labels.begin(), p.loop_labels.end(), dim_labels[i][d]) - p.loop_labels.begin());
      loop_st[l] += st[d];
    }
    p.strides.push_back(std::move(loop_st));
  }
  return p;
}

template <class T, class D>
void run_einsum(const EinsumPlan& p, const std::vector<Tensor>& ops, Tensor& y) {
  const size_t nops = ops.size(), nloops = p.loop_labels.size();
  std::vector<const T*> data;
  for (const Tensor& t : ops) data.push_back(t.data<T>());
  const int64_t out_size = shape_numel(p.out_shape);
  int64_t inner = 1;
  for (size_t l = p.num_out; l < nloops; ++l) inner *= p.loop_sizes[l];
  std::vector<D> acc(size_t(out_size), D(0));
  if (inner > 0 && out_size > 0) {
    std::vector<int64_t> idx(nloops, 0), off(nops, 0);
    for (int64_t o = 0; o < out_size; ++o) {
      D sum = D(0);
      for (int64_t r = 0; r < inner; ++r) {
        D prod = D(data[0][off[0]]);
        for (size_t i = 1; i < nops; ++i) prod *= D(data[i][off[i]]);
        sum += prod;
        // Advance the odometer (innermost loop first); it carries from summed into output loops.
        for (size_t l = nloops; l-- > 0;) {
          if (++idx[l] < p.loop_sizes[l]) {
            for (size_t i = 0; i < nops; ++i) off[i] += p.strides[i][l];
            break;
          }
          idx[l] = 0;
          for (size_t i = 0; i < nops; ++i) off[i] -= p.strides[i][l] * (p.loop_sizes[l] - 1);
        }
      }
      acc[size_t(o)] = sum;
    }
  }
  T* yd = y.data<T>();
  for (int64_t o = 0; o < out_size; ++o) yd[o] = T(acc[size_t(o)]);
}

std::vector<Tensor> einsum_kernel(const Node& node, const std::vector<Tensor>& in) {
  if (in.empty()) user_error("Einsum needs at least one input");
  expect_inputs(in, in.size(), in.size());
  node.require_attr("equation");
  for (const Tensor& t : in) {
    expect_same_dtype(in[0], t, "Einsum");
    if (t.dtype() == DType::Bool) user_error("Einsum does not accept bool inputs");
  }
  std::vector<Tensor> ops;
  for (const Tensor& t : in) ops.push_back(widen_to_float(t));
  const EinsumPlan plan = plan_einsum(node.attr_string("equation", ""), ops);
  Tensor y(ops[0].dtype(), plan.out_shape);
  dispatch_dtype(ops[0].dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      run_einsum<T, T>(plan, ops, y);
    else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      run_einsum<T, uint64_t>(plan, ops, y);
    else
      KILN_CHECK(false, "Einsum: unexpected dtype after widening");
  });
  return {y.dtype() == in[0].dtype() ? y : y.cast(in[0].dtype())};
}

}  // namespace

void register_einsum_ops(OpRegistry& r) { r.add({"Einsum", einsum_kernel, {}}); }

}  // namespace kiln::nn
