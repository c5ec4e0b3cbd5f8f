#include "transforms/fold_pad_into_conv.h"

#include <cmath>
#include <optional>

#include "transforms/node_rewriter.h"

namespace kiln {

namespace {

// The Conv's pads with the Pad's spatial amounts added; nullopt (and why) when n is not a Conv
// reading such a Pad.
std::optional<std::vector<int64_t>> plan(const Node& n, std::string* why) {
  auto fail = [&](const std::string& w) {
    *why = w;
    return std::optional<std::vector<int64_t>>();
  };
  if (n.op_type() != "Conv" || !n.domain().empty()) return fail("not a Conv");
  const Value *x = n.input(0), *w = n.num_inputs() > 1 ? n.input(1) : nullptr;
  if (!x || !w || n.num_outputs() != 1) return fail("Conv has an unexpected signature");
  const Node* p = x->producer();
  if (!p || p->op_type() != "Pad" || !p->domain().empty()) return fail("its input is not a Pad");
  if (p->attr_string("mode", "constant") != "constant") return fail("the Pad's mode is not constant");
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return fail("auto_pad decides the conv's padding");
  if (!w->is_constant()) return fail("the weights are computed");
  const Tensor& wt = w->constant();
  for (int64_t i = 0; i < wt.numel(); ++i)
    if (!std::isfinite(wt.as_double(i))) return fail("a weight is not finite (0 * inf through the Pad is NaN)");
  const Value *data = p->input(0), *pads = p->num_inputs() > 1 ? p->input(1) : nullptr;
  const Value* value = p->num_inputs() > 2 ? p->input(2) : nullptr;
  const Value* axes_v = p->num_inputs() > 3 ? p->input(3) : nullptr;
  if (!data || !pads || !pads->is_constant()) return fail("the Pad's pads are computed");
  if (value && shape_numel(value->shape()) > 0) {
    if (!value->is_constant() || shape_numel(value->shape()) != 1) return fail("the Pad's value is computed");
    const double v = value->constant().as_double(0);
    if (v != 0.0 || std::signbit(v)) return fail("the Pad's value is not +0");
  }
  const int64_t rank = int64_t(data->shape().size());
  if (rank < 3 || rank != int64_t(x->shape().size())) return fail("the Pad's rank is not the conv's");
  std::vector<int64_t> axes;
  if (axes_v && shape_numel(axes_v->shape()) > 0) {
    if (!axes_v->is_constant()) return fail("the Pad's axes are computed");
    for (int64_t i = 0; i < shape_numel(axes_v->shape()); ++i) {
      const int64_t a = axes_v->constant().as_int64(i);
      axes.push_back(a < 0 ? a + rank : a);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  const int64_t na = int64_t(axes.size());
  if (shape_numel(pads->shape()) != 2 * na) return fail("the Pad's pads have the wrong length");
  const int64_t nd = rank - 2;
  std::vector<int64_t> r = n.attr_ints("pads");
  if (r.empty()) r.assign(size_t(2 * nd), 0);
  if (int64_t(r.size()) != 2 * nd) return fail("the conv's pads have the wrong length");
  for (int64_t i = 0; i < na; ++i) {
    const int64_t a = axes[size_t(i)], b = pads->constant().as_int64(i), e = pads->constant().as_int64(na + i);
    if (a < 0 || a >= rank) return fail("a Pad axis is out of range");
    if (b < 0 || e < 0) return fail("the Pad crops (negative pads)");
    if (a < 2) {
      if (b != 0 || e != 0) return fail("the Pad pads the batch or channel axis");
      continue;
    }
    r[size_t(a - 2)] += b;
    r[size_t(a - 2 + nd)] += e;
  }
  return r;
}

}  // namespace

std::string FoldPadIntoConv::refusal(const Node& n) {
  std::string why;
  return plan(n, &why) ? "" : why;
}

bool FoldPadIntoConv::run(Graph& g) {
  bool changed = rewrite_in_order(
      g, [](const Node& n) { return refusal(n).empty(); },
      [&](Node* n) {
        std::string why;
        const std::vector<int64_t> pads = *plan(*n, &why);
        Value* data = n->input(0)->producer()->input(0);
        NodeRewriter rw(g, n);
        AttributeMap attrs = rw.attrs();
        attrs["pads"] = pads;
        std::vector<Value*> ins = {data, rw.input(1)};
        if (rw.input(2)) ins.push_back(rw.input(2));
        rw.emit("Conv", ins, rw.output(0)->type(), "pad_folded", attrs, rw.output(0));
      });
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
