#include "frontend/onnx/canonicalize_opset.h"

#include <set>

#include "reference/kernel_util.h"

namespace kiln {

namespace {

Value* add_i64_constant(Graph& g, const Node* n, const std::string& what, const std::vector<int64_t>& v) {
  return g.add_constant(g.unique_name(n->name() + "_" + what),
                        Tensor::from_vector<int64_t>(v, {int64_t(v.size())}));
}

// Moves ints attribute `attr` (if present) to input `index` as an int64 constant.
void ints_attr_to_input(Graph& g, Node* n, const std::string& attr, size_t index) {
  if (!n->has_attr(attr)) return;
  auto v = n->attr_ints(attr);
  n->attrs().erase(attr);
  n->set_input(index, add_i64_constant(g, n, attr, v));
}

// Moves float attribute `attr` (if present) to input `index` as a scalar of `dt`.
void float_attr_to_input(Graph& g, Node* n, const std::string& attr, size_t index, DType dt) {
  if (!n->has_attr(attr)) return;
  Tensor t = Tensor::scalar<float>(n->attr_float(attr, 0)).cast(dt);
  n->attrs().erase(attr);
  n->set_input(index, g.add_constant(g.unique_name(n->name() + "_" + attr), t));
}

// Inserts a Reshape of v to `shape` before n and returns its output.
Value* reshape_before(Graph& g, Node* n, Value* v, const Shape& shape, std::vector<Node*>& added) {
  Value* s = add_i64_constant(g, n, "shape", shape);
  Value* out = g.add_value(g.unique_name(v->name() + "_reshaped"), TensorType{v->dtype(), shape});
  added.push_back(g.insert_node_before(n, "Reshape", {v, s}, {out}, {}, g.unique_name(n->name() + "_reshape")));
  return out;
}

const std::set<std::string> kReduceOps = {"ReduceSum",  "ReduceMean", "ReduceMax",       "ReduceMin",
                                          "ReduceProd", "ReduceL1",   "ReduceL2",        "ReduceLogSum",
                                          "ReduceLogSumExp", "ReduceSumSquare"};
const std::set<std::string> kLegacyBroadcastOps = {"Add", "Sub", "Mul",  "Div",     "Pow",  "And",
                                                   "Or",  "Xor", "Equal", "Greater", "Less"};

// Opset < 7 elementwise ops broadcast B only when broadcast=1, aligned at `axis`.
void legacy_broadcast(Graph& g, Node* n, std::vector<Node*>& added) {
  if (!n->has_attr("broadcast") && !n->has_attr("axis")) return;
  bool bc = n->attr_int("broadcast", 0) != 0;
  Value* a = n->input(0);
  Value* b = n->input(1);
  if (bc && n->has_attr("axis") && a && b) {
    int64_t ra = int64_t(a->shape().size()), rb = int64_t(b->shape().size());
    int64_t axis = normalize_axis(n->attr_int("axis", 0), ra);
    if (axis + rb > ra) user_error("legacy broadcast axis ", axis, " does not fit ", a->type().str(), " and ", b->type().str());
    if (axis + rb < ra) {
      Shape s = b->shape();
      s.resize(size_t(ra - axis), 1);
      n->set_input(1, reshape_before(g, n, b, s, added));
    }
  } else if (!bc && a && b && a->shape() != b->shape()) {
    user_error("inputs ", a->type().str(), " and ", b->type().str(), " differ but broadcast=0");
  }
  n->attrs().erase("broadcast");
  n->attrs().erase("axis");
}

// PRelu-6 applies a 1-D slope per channel (axis 1); numpy broadcasting would align it with the
// last axis instead, so the slope becomes [C,1,...,1].
void legacy_prelu(Graph& g, Node* n, std::vector<Node*>& added) {
  Value* x = n->input(0);
  Value* slope = n->input(1);
  if (!x || !slope || x->shape().size() < 3 || slope->shape().size() != 1) return;
  if (slope->shape()[0] == 1 || slope->shape()[0] != x->shape()[1]) return;
  Shape s(x->shape().size() - 1, 1);
  s[0] = slope->shape()[0];
  n->set_input(1, reshape_before(g, n, slope, s, added));
}

// Before opset 13 these ops flatten the input to 2-D at `axis` (default 1) and normalise rows.
void legacy_softmax(Graph& g, Node* n, std::vector<Node*>& added) {
  Value* x = n->input(0);
  int64_t rank = int64_t(x->shape().size());
  int64_t axis = rank == 0 ? 0 : normalize_axis(n->attr_int("axis", 1), rank);
  if (rank == 0 || axis == rank - 1) {
    n->attrs()["axis"] = int64_t(-1);  // the same function as the opset-13 form
    return;
  }
  Shape flat = {dims_product(x->shape(), 0, axis), dims_product(x->shape(), axis, rank)};
  Value* flat_in = reshape_before(g, n, x, flat, added);
  AttributeMap attrs = n->attrs();
  attrs["axis"] = int64_t(1);
  // The op itself moves to a new node on the 2-D view; n becomes the Reshape that restores the shape,
  // so n's output value (and every use of it) stays as it was.
  Value* flat_out = g.add_value(g.unique_name(n->output(0)->name() + "_2d"), TensorType{n->output(0)->dtype(), flat});
  added.push_back(g.insert_node_before(n, n->op_type(), {flat_in}, {flat_out}, attrs, n->name()));
  n->set_op_type("Reshape");
  n->attrs().clear();
  n->set_input(0, flat_out);
  n->set_input(1, add_i64_constant(g, n, "shape", x->shape()));
  n->set_name(g.unique_name(n->name() + "_unflatten"));
  added.push_back(n);
}

}  // namespace

bool is_legacy_op(const std::string& op_type) { return op_type == "Upsample" || op_type == "Scatter"; }

std::vector<Node*> canonicalize_opset(Graph& g, Node* n, int64_t opset) {
  std::vector<Node*> added;
  const std::string& op = n->op_type();
  auto input_dtype = [&](size_t i) { return n->input(i) ? n->input(i)->dtype() : DType::Float32; };

  if (opset < 7 && kLegacyBroadcastOps.count(op)) legacy_broadcast(g, n, added);
  if (opset < 7 && op == "Gemm") n->attrs().erase("broadcast");
  if (opset < 7 && op == "PRelu") legacy_prelu(g, n, added);

  if (op == "Clip" && opset < 11) {
    float_attr_to_input(g, n, "min", 1, input_dtype(0));
    float_attr_to_input(g, n, "max", 2, input_dtype(0));
  } else if (op == "Slice" && opset < 10) {
    ints_attr_to_input(g, n, "starts", 1);
    ints_attr_to_input(g, n, "ends", 2);
    ints_attr_to_input(g, n, "axes", 3);
  } else if (op == "Pad" && opset < 11) {
    ints_attr_to_input(g, n, "pads", 1);
    float_attr_to_input(g, n, "value", 2, input_dtype(0));
    if (n->has_attr("paddings")) ints_attr_to_input(g, n, "paddings", 1);  // opset-1 spelling
  } else if (op == "Split" && opset < 13) {
    ints_attr_to_input(g, n, "split", 1);
  } else if ((op == "Squeeze" || op == "Unsqueeze") && opset < 13) {
    ints_attr_to_input(g, n, "axes", 1);
  } else if (kReduceOps.count(op) && !(op == "ReduceSum" && opset >= 13)) {
    ints_attr_to_input(g, n, "axes", 1);
  } else if (op == "TopK" && opset < 10) {
    n->require_attr("k");
    n->set_input(1, add_i64_constant(g, n, "k", {n->attr_int("k", 0)}));
    n->attrs().erase("k");
  } else if (op == "Dropout" && opset < 12) {
    float_attr_to_input(g, n, "ratio", 1, DType::Float32);
    if (n->attr_int("is_test", 1) == 0 && opset < 7)
      user_error("training-mode Dropout (is_test=0) is not supported");
    n->attrs().erase("is_test");
  } else if (op == "BatchNormalization" && opset < 9) {
    if (n->attr_int("spatial", 1) != 1 && n->input(0) && n->input(0)->shape().size() > 2)
      user_error("unsupported attribute value spatial=0");
    n->attrs().erase("spatial");
    n->attrs().erase("is_test");
    n->attrs().erase("consumed_inputs");
  } else if ((op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") && opset < 13) {
    legacy_softmax(g, n, added);
    if (!added.empty()) return added;
  } else if (op == "Scatter") {
    n->set_op_type("ScatterElements");  // Scatter-9/10 is ScatterElements under its old name
  } else if (op == "Upsample" || (op == "Resize" && opset < 11)) {
    // Upsample-7 keeps scales in an attribute, Upsample-9 and Resize-10 in input 1. Both index the
    // input as out/scale (asymmetric); nearest picks floor, as Upsample always did.
    Value* scales = n->input(1);
    if (n->has_attr("scales")) {
      auto s = n->attr_floats("scales");
      scales = g.add_constant(g.unique_name(n->name() + "_scales"), Tensor::from_vector<float>(s, {int64_t(s.size())}));
      n->attrs().erase("scales");
    }
    if (!scales) user_error("missing scales");
    std::string mode = n->attr_string("mode", "nearest");
    if (mode == "bilinear") mode = "linear";
    n->set_op_type("Resize");
    n->set_input(1, nullptr);  // roi
    n->set_input(2, scales);
    n->attrs().clear();
    n->attrs()["mode"] = mode;
    n->attrs()["coordinate_transformation_mode"] = std::string("asymmetric");
    n->attrs()["nearest_mode"] = std::string("floor");
  }
  // Unused inputs left at the end after moves (e.g. Resize-10 has exactly two) need no trimming:
  // kernels treat omitted and absent inputs alike.
  added.push_back(n);
  return added;
}

}  // namespace kiln
