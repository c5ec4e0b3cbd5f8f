#include "fusion/assign_layouts.h"

#include <algorithm>

#include "fusion/op_kind.h"

namespace kiln {
namespace {

constexpr const char* kLayoutAttr = "kiln_layout";

bool is_conv2d(const Node& n) {
  return n.op_type() == "Conv" && n.domain().empty() && n.num_inputs() >= 2 && n.input(0) && n.input(1) &&
         n.input(0)->shape().size() == 4 && n.input(1)->is_constant() && n.attr_int("group", 1) == 1 &&
         n.attr_string("auto_pad", "NOTSET") == "NOTSET" && n.input(0)->dtype() == DType::Float32;
}

std::vector<int64_t> ints_or(const Node& n, const char* name, std::vector<int64_t> dflt) {
  auto v = n.attr_ints(name);
  return v.empty() ? dflt : v;
}

// The bytes of a conv's staged planes: its input channels over the padded input.
int64_t plane_bytes(const Node& conv) {
  const Shape& x = conv.input(0)->shape();
  const auto p = ints_or(conv, "pads", {0, 0, 0, 0});
  return x[1] * (x[2] + p[0] + p[2]) * (x[3] + p[1] + p[3]) * int64_t(sizeof(float));
}

// Whether a conv stores its output as a tile of positions x channels (the implicit GEMM,
// ContractionLowering::implicit_conv), whose rows a channels-last output takes as they are. The
// others (the output channels as rows: 1x1 convs over a page of positions or more, windowed convs
// past the planes' budget; patch convs; the stencils of narrow convs) would refuse the Transpose
// and leave it a copy kernel of its own. The rule mirrors implicit_conv's thresholds.
bool stores_positions_as_rows(const Node& conv, const loop::Schedule& s) {
  if (!is_conv2d(conv)) return false;
  const Shape& w = conv.input(1)->shape();
  const Shape& y = conv.output(0)->shape();
  const auto strides = ints_or(conv, "strides", {1, 1}), pads = ints_or(conv, "pads", {0, 0, 0, 0});
  const bool unit = w[2] == 1 && w[3] == 1 && strides == std::vector<int64_t>{1, 1} &&
                    pads == std::vector<int64_t>{0, 0, 0, 0};
  const int64_t cout = w[0], cin = w[1], positions = y[2] * y[3];
  if (unit) {
    const auto& cr = s.contraction;
    return cout >= cr.nr && positions < cr.channel_rows_positions &&
           !(positions >= cr.channel_rows_positions_few_k && cin <= cr.channel_rows_few_k);
  }
  if (w[2] == strides[0] && w[3] == strides[1] && pads == std::vector<int64_t>{0, 0, 0, 0}) return false;  // patch
  return cout >= s.vector_width && cin >= 16 && plane_bytes(conv) <= s.contraction.window_channel_rows_plane_bytes;
}

// Whether a grouped conv reads v, directly or through single-use elementwise ops: a 1x1 conv
// before a depthwise conv joins it in the pointwise-depthwise kernel, which reads its input in the
// model's layout (a channels-last one would be copied back by a kernel of its own).
bool feeds_grouped_conv(const Value* v, int depth = 0) {
  for (const auto& [n, i] : v->uses()) {
    if (n->op_type() == "Conv" && n->attr_int("group", 1) != 1) return true;
    const OpKind k = op_kind(*n);
    if (depth < 8 && (k == OpKind::ElementWise || k == OpKind::Broadcast) && n->num_outputs() == 1 &&
        feeds_grouped_conv(n->output(0), depth + 1))
      return true;
  }
  return false;
}

// A conv that would read a channels-last input as its phase plane in place: stride 1, positions
// as rows (a 1x1 conv too: its A rows are then runs of channels, not positions a plane apart;
// not one that joins a depthwise conv).
bool reads_plane_in_place(const Node& conv, const loop::Schedule& s) {
  if (!stores_positions_as_rows(conv, s) || ints_or(conv, "strides", {1, 1}) != std::vector<int64_t>{1, 1}) return false;
  const Shape& w = conv.input(1)->shape();
  return w[2] > 1 || w[3] > 1 || !feeds_grouped_conv(conv.output(0));
}

// The conv whose output v is, through elementwise ops of v's shape that only lead to v (the
// epilogue its kernel fuses); `avoid` is not walked through.
const Node* anchor_conv(const Value* v, const Value* avoid, int depth = 0) {
  const Node* n = v->producer();
  if (!n || depth > 8) return nullptr;
  if (n->op_type() == "Conv" && n->domain().empty()) return n->output(0) == v ? n : nullptr;
  if (n->num_outputs() != 1 || n->output(0) != v) return nullptr;
  const OpKind k = op_kind(*n);
  if (k != OpKind::ElementWise && k != OpKind::Broadcast) return nullptr;
  for (const Value* a : n->inputs())
    if (a && a != avoid && !a->is_constant() && a->shape() == v->shape() && a->uses().size() == 1)
      if (const Node* c = anchor_conv(a, avoid, depth + 1)) return c;
  return nullptr;
}

// The padding (top, left, bottom, right) v is given, when v qualifies: a conv's output (through
// its epilogue) that the implicit form stores, read by at least one stride-1 windowed conv that
// takes its planes in place (all with the same padding), and otherwise only by elementwise ops
// of another conv's epilogue (a residual Add), which read it back through a Slice and Transpose
// fused into their loads. A value read by anything else — a pool, a strided conv, a graph output
// — keeps the model's layout: those readers would pay a strided read or a copy.
std::optional<std::vector<int64_t>> layout_padding(const Graph& g, const Value* v, const loop::Schedule& s) {
  if (v->dtype() != DType::Float32 || v->shape().size() != 4 || g.is_graph_output(v) || v->is_graph_input()) return {};
  // One position (squeeze-excitation's FCs as 1x1 convs): both layouts are the same memory.
  if (v->shape()[2] * v->shape()[3] == 1) return {};
  const Node* producer = anchor_conv(v, nullptr);
  if (!producer || !stores_positions_as_rows(*producer, s)) return {};
  std::optional<std::vector<int64_t>> pads;
  for (const auto& [n, i] : v->uses()) {
    if (n->op_type() == "Conv" && n->domain().empty() && i == 0 && n->input(1) != v) {
      if (!reads_plane_in_place(*n, s)) return {};
      const auto p = ints_or(*n, "pads", {0, 0, 0, 0});
      if (pads && *pads != p) return {};
      pads = p;
      continue;
    }
    const OpKind k = op_kind(*n);
    if (k != OpKind::ElementWise && k != OpKind::Broadcast) return {};
    if (n->num_outputs() != 1 || n->output(0)->shape() != v->shape()) return {};
    if (std::count_if(n->inputs().begin(), n->inputs().end(), [&](const Value* a) { return a == v; }) != 1) return {};
    bool epilogue = false;
    for (const Value* a : n->inputs())
      if (a && a != v && !a->is_constant() && a->shape() == v->shape() && a->uses().size() == 1) {
        const Node* c = anchor_conv(a, v);
        epilogue = epilogue || (c && stores_positions_as_rows(*c, s));
      }
    if (!epilogue) return {};
  }
  return pads;
}

Value* constant_ints(Graph& g, const std::string& base, const std::vector<int64_t>& v) {
  return g.add_constant(g.unique_name(base), Tensor::from_vector(v, {int64_t(v.size())}));
}

// A node computing one value, placed just before `before` (the graph keeps its order, so the
// partitioner meets the nodes as it did: its ties break by node order).
Value* add_one(Graph& g, Node* before, const std::string& op, const std::vector<Value*>& ins, const Shape& shape,
               const std::string& base, AttributeMap attrs = {}) {
  Value* out = g.add_value(g.unique_name(base), TensorType{DType::Float32, shape});
  g.insert_node_before(before, op, ins, {out}, std::move(attrs), out->name());
  return out;
}

// V's elements [N, C, H, W] read back from V_cl [N, Hp, Wp, Cs] starting at (top, left), for `user`.
Value* read_back(Graph& g, Node* user, Value* vcl, const Shape& vs, int64_t top, int64_t left, const std::string& base) {
  const Shape& cl = vcl->shape();
  Value* t = add_one(g, user, "Transpose", {vcl}, {cl[0], cl[3], cl[1], cl[2]}, base + "/nchw",
                     {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
  if (cl[3] == vs[1] && cl[1] == vs[2] && cl[2] == vs[3]) return t;
  return add_one(g, user, "Slice",
                 {t, constant_ints(g, base + "/starts", {0, top, left}),
                  constant_ints(g, base + "/ends", {vs[1], top + vs[2], left + vs[3]}),
                  constant_ints(g, base + "/axes", {1, 2, 3})},
                 vs, base + "/slice");
}

}  // namespace

bool is_layout_boundary(const Node& n) { return n.op_type() == "Pad" && n.has_attr(kLayoutAttr); }

std::vector<std::string> assign_layouts(Graph& g, const loop::Schedule& s) {
  std::vector<std::string> done;
  if (!s.channels_last_values || !s.reorder_sums) return done;
  std::vector<std::pair<Value*, std::vector<int64_t>>> chosen;
  for (Node* n : g.nodes())
    for (Value* v : n->outputs())
      if (v)
        if (auto pads = layout_padding(g, v, s)) chosen.push_back({v, *pads});
  for (auto& [v, p] : chosen) {
    const Shape vs = v->shape();
    const int64_t cs = loop::channels_inner_stride(vs[1]);
    const std::string base = v->name();
    // The uses as they are before the rewrite adds the Transpose that reads v.
    const std::vector<std::pair<Node*, int>> uses = v->uses();
    // Just after V's producer: before its first reader in the graph's order.
    Node* first = nullptr;
    for (Node* n : g.nodes())
      if (std::any_of(uses.begin(), uses.end(), [&](const auto& u) { return u.first == n; })) {
        first = n;
        break;
      }
    Value* t = add_one(g, first, "Transpose", {v}, {vs[0], vs[2], vs[3], vs[1]}, base + "/nhwc",
                       {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
    const Shape cl = {vs[0], vs[2] + p[0] + p[2], vs[3] + p[1] + p[3], cs};
    Value* vcl = add_one(g, first, "Pad", {t, constant_ints(g, base + "/pads", {0, p[0], p[1], 0, 0, p[2], p[3], cs - vs[1]})},
                         cl, base + "/channels_last",
                         {{"mode", std::string("constant")}, {kLayoutAttr, std::string("channels_last")}});
    // Every reader reads V's elements back (the convs keep their padding: the border of V_cl
    // is that padding, which their lowering reads in place, planes_in_place).
    for (auto& [n, i] : uses) n->set_input(size_t(i), read_back(g, n, vcl, vs, p[0], p[1], base + "/" + n->name()));
    done.push_back(v->name());
  }
  return done;
}

}  // namespace kiln
