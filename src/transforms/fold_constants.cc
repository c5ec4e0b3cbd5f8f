#include "transforms/fold_constants.h"

#include <algorithm>
#include <optional>

#include "reference/executor.h"
#include "reference/op_registry.h"
#include "transforms/op_traits.h"

namespace kiln {

// Shape (opset-15 form: optional start/end slice the dims, clamped like Python slicing) and Size
// read only the static shape, so they fold without materialising their input.
std::optional<Tensor> fold_shape_query(const Node& n) {
  const Value* in = n.input(0);
  if (!in || in->dtype() == DType::Undefined || n.num_outputs() != 1) return std::nullopt;
  const Shape& s = in->shape();
  if (n.op_type() == "Size") return Tensor::scalar<int64_t>(shape_numel(s));
  int64_t rank = int64_t(s.size());
  auto clamp = [&](int64_t a) {
    if (a < 0) a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  return Tensor::from_vector<int64_t>(dims, {int64_t(dims.size())});
}

namespace {


bool is_shape_query(const Node& n) {
  return n.domain().empty() && (n.op_type() == "Shape" || n.op_type() == "Size") && n.num_inputs() == 1;
}

bool all_inputs_constant(const Node& n) {
  return std::all_of(n.inputs().begin(), n.inputs().end(), [](const Value* v) { return !v || v->is_constant(); });
}

int64_t total_elements(const std::vector<Value*>& values) {
  int64_t n = 0;
  for (const Value* v : values)
    if (v) n += v->is_constant() ? v->constant().numel() : shape_numel(v->shape());
  return n;
}

// The size rule from the header. Uses the declared output types, so a refused node costs nothing;
// an output without a type (dtype undefined) is decided after evaluation by the caller.
bool too_large(int64_t out_elems, int64_t in_elems) {
  return out_elems > FoldConstants::kMaxExpandedElements && out_elems > in_elems;
}

// Runs n on its constant inputs, or returns nullopt when n should not be folded.
std::optional<std::vector<Tensor>> evaluate(const Node& n) {
  if (n.num_outputs() == 0 || is_nondeterministic(n)) return std::nullopt;
  if (is_shape_query(n)) {
    std::optional<Tensor> t = fold_shape_query(n);
    if (!t) return std::nullopt;
    return std::vector<Tensor>{*t};
  }
  if (!all_inputs_constant(n) || !OpRegistry::global().find(n.op_type())) return std::nullopt;
  bool typed = std::all_of(n.outputs().begin(), n.outputs().end(),
                           [](const Value* v) { return v->dtype() != DType::Undefined; });
  int64_t in_elems = total_elements(n.inputs());
  if (typed && too_large(total_elements(n.outputs()), in_elems)) return std::nullopt;
  std::vector<Tensor> args;
  for (const Value* v : n.inputs()) args.push_back(v ? v->constant() : Tensor{});
  std::vector<Tensor> outs = run_node(n, args);
  if (!typed) {
    int64_t out_elems = 0;
    for (const Tensor& t : outs) out_elems += t.numel();
    if (too_large(out_elems, in_elems)) return std::nullopt;
  }
  return outs;
}

}  // namespace

bool FoldConstants::run(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {  // topological order: a folded output is constant for its consumers
    std::optional<std::vector<Tensor>> outs = evaluate(*n);
    if (!outs) continue;
    for (size_t i = 0; i < outs->size(); ++i) {
      const Value* o = n->output(i);
      const Tensor& t = (*outs)[i];
      // Same invariant as the reference executor: kernels agree with the declared types.
      if (!t.defined() || (o->dtype() != DType::Undefined && (t.dtype() != o->dtype() || t.shape() != o->shape())))
        throw InternalError(cat(n->describe(), ": folding produced ",
                                t.defined() ? TensorType{t.dtype(), t.shape()}.str() : std::string("nothing"),
                                " for output '", o->name(), "' typed ", o->type().str()));
    }
    std::vector<Value*> outputs = n->outputs();
    g.remove_node(n);
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->set_constant((*outs)[i]);
    changed = true;
  }
  if (changed) g.remove_unused_values();
  return changed;
}

}  // namespace kiln
