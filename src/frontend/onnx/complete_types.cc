#include "frontend/onnx/complete_types.h"

#include <algorithm>

#include "fusion/op_kind.h"
#include "ir/tensor_size_limit.h"
#include "reference/kernel_util.h"
#include "reference/op_registry.h"
#include "reference/ops/nn_internal.h"
#include "transforms/fold_constants.h"

namespace kiln {

namespace {

// Inputs summing to more elements than this are not evaluated for known values: shape
// computations are tiny, and evaluating big constant subgraphs is fold_constants' job.
constexpr int64_t kMaxKnownElements = 1 << 16;

// Placeholder inputs up to this size are allocated to evaluate a node ONNX left untyped. Above it
// an elementwise node is evaluated on one-element stand-ins (its output shape is the broadcast of
// its input shapes) and anything else is refused: a 58-byte model declaring a 2 GiB input must not
// make `kiln info` allocate 4 GiB. Every tensor the evaluation makes (outputs, temporaries) is
// bounded by the same size (TensorSizeLimit).
constexpr uint64_t kMaxPlaceholderBytes = uint64_t(32) << 20;

uint64_t placeholder_bytes(const Value* v) {
  const uint64_t n = uint64_t(shape_numel(v->shape())), es = dtype_size(v->dtype());
  return n > (uint64_t(1) << 62) / es ? uint64_t(1) << 62 : n * es;
}

const Tensor* known_value(const Value* v, const KnownValues& known) {
  if (!v) return nullptr;
  if (v->is_constant()) return &v->constant();
  auto it = known.find(v);
  return it == known.end() ? nullptr : &it->second;
}

void record_known(const Node* n, const OpInfo& info, KnownValues& known) {
  if (n->op_type() == "Shape" || n->op_type() == "Size") {
    if (auto t = fold_shape_query(*n)) known[n->output(0)] = *t;
    return;
  }
  std::vector<Tensor> args;
  int64_t elements = 0;
  for (Value* v : n->inputs()) {
    if (!v) {
      args.emplace_back();
      continue;
    }
    const Tensor* t = known_value(v, known);
    if (!t) return;
    elements += t->numel();
    args.push_back(*t);
  }
  if (elements > kMaxKnownElements) return;
  // Nor are nodes whose outputs are large (ConstantOfShape, Expand, Tile, Range of a few known
  // numbers): their outputs are typed by now, and evaluating them would allocate the full size.
  int64_t out_elements = 0;
  for (const Value* o : n->outputs()) {
    if (!o || o->dtype() == DType::Undefined) return;
    out_elements += shape_numel(o->shape());
    if (out_elements > kMaxKnownElements) return;
  }
  std::vector<Tensor> outs;
  try {
    TensorSizeLimit limit(kMaxPlaceholderBytes);
    outs = info.kernel(*n, args);
  } catch (const UserError&) {
    return;  // not evaluable here; the run (or fold_constants) reports the problem with context
  }
  for (size_t i = 0; i < n->num_outputs() && i < outs.size(); ++i)
    if (outs[i].defined()) known[n->output(i)] = outs[i];
}

}  // namespace

// ONNX's shape inference (libonnx before 1.16) counts a ceil_mode pool's last window even when it
// would start inside the end padding; ONNX Runtime, PyTorch and the reference kernel drop it. The
// pool's output type then disagrees with every kernel (33 rows, kernel 1, stride 3: 12 vs 11).
// The reference's geometry is the semantics kiln implements, so it types the output; what ONNX
// typed downstream of it is untyped again, so that complete_types types it from the kernels.
void untype_downstream(Value* v) {
  for (auto [user, slot] : v->uses())
    for (Value* o : user->outputs())
      if (o && o->dtype() != DType::Undefined) {
        o->set_type(TensorType{});
        untype_downstream(o);
      }
}

void retype_ceil_mode_pool(Node* n) {
  const std::string& op = n->op_type();
  if ((op != "MaxPool" && op != "AveragePool" && op != "LpPool") || n->attr_int("ceil_mode", 0) == 0) return;
  const Value* x = n->input(0);
  Value* y = n->output(0);
  if (!x || x->dtype() == DType::Undefined || y->dtype() == DType::Undefined || x->shape().size() < 3) return;
  const Shape spatial(x->shape().begin() + 2, x->shape().end());
  const std::vector<int64_t> kernel = n->attr_ints("kernel_shape");
  if (kernel.size() != spatial.size())  // the pool kernel's own message (window_geometry assumes it)
    user_error("kernel_shape has ", kernel.size(), " values, input has ", spatial.size(), " spatial dims");
  nn::WindowGeometry geo = nn::window_geometry(*n, spatial, kernel, /*ceil_mode=*/true);
  Shape out = y->shape();
  if (out.size() != x->shape().size()) return;
  std::copy(geo.out.begin(), geo.out.end(), out.begin() + 2);
  if (out == y->shape()) return;
  y->set_type(TensorType{y->dtype(), out});
  untype_downstream(y);
  if (n->num_outputs() > 1 && n->output(1)->dtype() != DType::Undefined) {  // MaxPool's Indices
    n->output(1)->set_type(TensorType{n->output(1)->dtype(), out});
    untype_downstream(n->output(1));
  }
}

// ONNX's inference types some nodes whose operands kiln's kernel refuses (a Reshape of 6 elements
// to [7,5] gets the type f32[7,5]); later stages trust the types, so such a node would surface
// as an internal error in code generation, or pass `explain`. The kernels' operand checks, on
// types alone, for those ops.
void check_typed_operands(const Node* n) {
  const std::string& op = n->op_type();
  auto typed = [](const Value* v) { return v && v->dtype() != DType::Undefined; };
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    const Value *x = n->input(0), *y = n->output(0);
    if (typed(x) && typed(y) && shape_numel(x->shape()) != shape_numel(y->shape()))
      user_error("cannot reshape ", x->type().str(), " (", shape_numel(x->shape()), " elements) to ", shape_str(y->shape()));
  }
  if ((op == "Conv" || op == "ConvTranspose") && n->num_inputs() >= 2 && typed(n->input(0)) && typed(n->input(1))) {
    const Shape &x = n->input(0)->shape(), &w = n->input(1)->shape();
    const int64_t group = n->attr_int("group", 1);
    if (x.size() < 3) user_error("X must have rank >= 3 (N x C x spatial...), got shape ", shape_str(x));
    if (w.size() != x.size()) user_error("W must have rank ", x.size(), " like X, got shape ", shape_str(w));
    if (op == "Conv") {
      if (w[1] * group != x[1])
        user_error("X has ", x[1], " channels but W ", shape_str(w), " with group ", group, " expects ", w[1] * group);
      if (w[0] % group != 0) user_error("W has ", w[0], " output channels, not divisible by group ", group);
    } else {
      if (w[0] != x[1]) user_error("X has ", x[1], " channels but W ", shape_str(w), " expects ", w[0]);
      if (x[1] % group != 0) user_error("X has ", x[1], " channels, not divisible by group ", group);
    }
  }
}

void complete_types(Graph& g, Node* n, KnownValues& known) {
  const OpInfo* info = OpRegistry::global().find(n->op_type());
  if (!info) user_error("unsupported op");
  retype_ceil_mode_pool(n);
  check_typed_operands(n);
  bool complete = std::all_of(n->outputs().begin(), n->outputs().end(),
                              [](Value* v) { return v->dtype() != DType::Undefined; });
  if (!complete) {
    uint64_t placeholders = 0;
    for (Value* v : n->inputs())
      if (v && !known_value(v, known) && v->dtype() != DType::Undefined)
        placeholders = std::min(uint64_t(1) << 62, placeholders + placeholder_bytes(v));
    const bool stand_ins = placeholders > kMaxPlaceholderBytes;
    if (stand_ins && op_kind_of_type(n->op_type()) != OpKind::ElementWise)
      user_error("ONNX's shape inference left this node's outputs untyped, and typing them would mean evaluating it on ",
                 placeholders, " bytes of placeholder inputs (at most ", kMaxPlaceholderBytes, ")");
    std::vector<Tensor> args;
    std::vector<Shape> real_shapes;
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      Value* v = n->input(i);
      if (!v) {
        args.emplace_back();
      } else if (const Tensor* t = known_value(v, known)) {
        args.push_back(*t);
      } else {
        if (std::count(info->shape_inputs.begin(), info->shape_inputs.end(), int(i)))
          user_error("input ", i, " ('", v->name(), "') decides the output shape but its value is only known at ",
                     "run time; kiln compiles static shapes");
        KILN_CHECK(v->dtype() != DType::Undefined, "input '", v->name(), "' of ", n->describe(), " has no type");
        args.emplace_back(v->dtype(), stand_ins ? Shape(v->shape().size(), 1) : v->shape());
      }
      if (v) real_shapes.push_back(v->shape());
    }
    std::vector<Tensor> outs;
    {
      // The outputs of a node typed by evaluation are bounded like its placeholders: a Tile of a
      // few elements by known repeats [1e9] is refused, not allocated.
      TensorSizeLimit limit(kMaxPlaceholderBytes);
      outs = info->kernel(*n, args);
    }
    // On stand-ins, an elementwise op's outputs have the broadcast shape of its real inputs.
    const Shape stand_in_shape = stand_ins ? broadcast_shapes(real_shapes) : Shape{};

    // More outputs than the op has ("" names pass ONNX's schema check): the model is wrong.
    if (outs.size() < n->num_outputs())
      user_error("has ", n->num_outputs(), " outputs, but ", n->op_type(), " produces ", outs.size());
    for (size_t i = 0; i < n->num_outputs(); ++i) {
      Value* o = n->output(i);
      if (o->dtype() == DType::Undefined) {
        if (!outs[i].defined()) user_error("output ", i, " ('", o->name(), "') is not produced by kiln's kernel");
        o->set_type(TensorType{outs[i].dtype(), stand_ins ? stand_in_shape : outs[i].shape()});
      }
    }
  }
  record_known(n, *info, known);
  (void)g;
}

}  // namespace kiln
