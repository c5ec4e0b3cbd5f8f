#include "frontend/onnx/validate_nodes.h"

#include <onnx/defs/schema.h>

#include "support/error.h"

namespace kiln {

namespace {

// The first line of a libonnx message (some span several).
std::string first_line(std::string s) {
  size_t nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  return s;
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

// Every value of INTS attribute `name` (when present) must be >= min.
void ints_at_least(const onnx::NodeProto& n, const char* name, int64_t min, const std::string& ctx) {
  if (const auto* a = find_attr(n, name))
    for (int64_t v : a->ints())
      if (v < min) user_error(ctx, ": ", name, " must be >= ", min, ", got ", v);
}

void int_at_least(const onnx::NodeProto& n, const char* name, int64_t min, const std::string& ctx) {
  if (const auto* a = find_attr(n, name))
    if (a->i() < min) user_error(ctx, ": ", name, " must be >= ", min, ", got ", a->i());
}

// With kernel_shape given, the per-axis lists must agree with its length: libonnx indexes them by
// the kernel's axes without checking.
void lists_match_kernel(const onnx::NodeProto& n, const std::string& ctx) {
  const auto* k = find_attr(n, "kernel_shape");
  if (!k) return;
  const int nd = k->ints_size();
  for (const char* name : {"strides", "dilations", "output_padding"})
    if (const auto* a = find_attr(n, name))
      if (a->ints_size() != 0 && a->ints_size() != nd)
        user_error(ctx, ": ", name, " has ", a->ints_size(), " values, expected ", nd);
  if (const auto* a = find_attr(n, "pads"))
    if (a->ints_size() != 0 && a->ints_size() != 2 * nd)
      user_error(ctx, ": pads has ", a->ints_size(), " values, expected ", 2 * nd);
}

bool is_window_op(const std::string& op) {
  return op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv" || op == "MaxPool" ||
         op == "AveragePool" || op == "LpPool" || op == "MaxUnpool" || op == "MaxRoiPool";
}

}  // namespace

// A scalar attribute whose kind is declared but whose value is absent ("end" of kind INT with no i):
// libonnx reads it as absent, kiln's attribute conversion as 0; neither reading is the model's.
void check_attribute_values(const onnx::NodeProto& n, const std::string& ctx) {
  using A = onnx::AttributeProto;
  for (const auto& a : n.attribute()) {
    const bool missing = (a.type() == A::INT && !a.has_i()) || (a.type() == A::FLOAT && !a.has_f()) ||
                         (a.type() == A::STRING && !a.has_s()) || (a.type() == A::TENSOR && !a.has_t());
    if (missing) user_error(ctx, ": attribute '", a.name(), "' is declared ", A::AttributeType_Name(a.type()), " but has no value");
  }
}

void validate_node(const onnx::NodeProto& n, int64_t opset, const std::string& ctx, std::set<std::string>& defined) {
  for (const auto& in : n.input())
    if (!in.empty() && !defined.count(in)) user_error(ctx, ": input '", in, "' is not defined before this node");
  for (const auto& out : n.output())
    if (!out.empty()) defined.insert(out);

  check_attribute_values(n, ctx);

  // The schema's own verification: input and output counts, required inputs and attributes,
  // attribute kinds. libonnx's inference functions assume all of it.
  if (const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), int(opset), "")) {
    try {
      schema->Verify(n);
    } catch (const std::exception& e) {
      std::string msg = first_line(e.what());
      // libonnx prefixes its own context ("Node (name) has input size 0 not in range ..."); the
      // node is already named in ctx.
      user_error(ctx, ": ", msg);
    }
  }

  const std::string& op = n.op_type();
  if (is_window_op(op)) {
    ints_at_least(n, "kernel_shape", 1, ctx);
    ints_at_least(n, "strides", 1, ctx);
    ints_at_least(n, "dilations", 1, ctx);
    ints_at_least(n, "pads", 0, ctx);
    ints_at_least(n, "output_padding", 0, ctx);
    ints_at_least(n, "output_shape", 0, ctx);
    int_at_least(n, "group", 1, ctx);
    lists_match_kernel(n, ctx);
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") int_at_least(n, "blocksize", 1, ctx);
  if (op == "LRN") int_at_least(n, "size", 1, ctx);
  if (op == "Im2Col" || op == "Col2Im") ints_at_least(n, "strides", 1, ctx);
}

}  // namespace kiln
