// ONNX → Graph IR. See onnx_import.h for the contract. The steps, in order:
//   1. parse the protobuf and check opsets, ops and attributes kiln can take (before shape inference,
//      so an unsupported op gets kiln's message rather than a shape-inference one);
//   2. fix symbolic input dims from --input-shape (a remaining symbolic dim is an error);
//   3. run ONNX's shape inference (with data propagation, which resolves most Shape→Reshape chains);
//   4. convert initializers, Constant nodes, nodes and attributes;
//   5. walk the nodes once: canonicalise each to its newest ONNX form, then give any output ONNX
//      could not type a static type by evaluating the node's kernel (complete_types.cc).
#include "frontend/onnx/onnx_import.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_map>

#include "frontend/onnx/canonicalize_opset.h"
#include "frontend/onnx/complete_types.h"
#include "frontend/onnx/sandboxed_inference.h"
#include "frontend/onnx/tensor_proto.h"
#include "frontend/onnx/validate_nodes.h"
#include "reference/op_registry.h"

namespace kiln {

namespace fs = std::filesystem;

namespace {

// The ONNX library's newest opset for the default domain.
int64_t newest_known_opset() {
  const auto& m = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = m.find("");
  return it == m.end() ? 17 : it->second.second;
}

std::string node_ctx(const onnx::NodeProto& n, const std::string& name, int64_t opset) {
  std::string op = n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "." + n.op_type();
  return cat("node '", name, "' (", op, ", opset ", opset, ")");
}

class Importer {
 public:
  Importer(std::string path, const ImportOptions& opts) : path_(std::move(path)), opts_(opts) {}

  std::unique_ptr<Graph> run() {
    load();
    check_opset();
    assign_node_names();
    check_nodes();
    fix_input_shapes();
    constants_to_initializers();
    set_aside_declared_outputs();
    infer_shapes();
    collect_types();
    auto g = std::make_unique<Graph>();
    g->set_opset(opset_);
    g->set_name(model_.graph().name().empty() ? "main" : model_.graph().name());
    convert(*g);
    finish(*g);
    warn_about_declared_outputs(*g);
    return g;
  }

 private:
  void load() {
    std::error_code ec;
    if (!fs::is_regular_file(path_, ec)) user_error("no such model file");
    std::ifstream f(path_, std::ios::binary);
    if (!f) user_error("cannot open the model file");
    if (!model_.ParseFromIstream(&f)) user_error("not a valid ONNX model (truncated or malformed protobuf)");
    if (!model_.has_graph()) user_error("not a valid ONNX model (no graph)");
    model_dir_ = fs::path(path_).parent_path().string();
    if (model_dir_.empty()) model_dir_ = ".";
  }

  void check_opset() {
    // Newer IR versions than libonnx's (Debian 12: 8) only add fields and data types, which the
    // importer checks where it reads them; the pip onnx of the day (1.23) writes 14, as do the
    // exporters using it. Past the newest IR the ONNX project has published, the model is refused.
    constexpr int64_t kNewestPublishedIrVersion = 14;
    if (model_.ir_version() > std::max<int64_t>(kNewestPublishedIrVersion, onnx::IR_VERSION))
      user_error("ir_version ", model_.ir_version(), " is newer than the newest this build knows (",
                 std::max<int64_t>(kNewestPublishedIrVersion, onnx::IR_VERSION), ")");
    opset_ = -1;
    for (const auto& o : model_.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
    if (opset_ < 0 && model_.ir_version() < 3) opset_ = 1;  // IR v1/v2 models predate opset_import
    // Opsets start at 1; at 0 no schema exists, so nothing of ONNX's would check the nodes.
    if (opset_ == 0) user_error("the model imports opset 0 of the default ONNX domain (opsets start at 1)");
    // A model without the default domain is only valid if no node uses it; check_nodes reports.
    if (opset_ > newest_known_opset())
      user_error("opset ", opset_, " is newer than the newest this build knows (", newest_known_opset(), ")");
  }

  // kiln names unnamed nodes "<OpType>_<index>" (index in the ONNX graph) so errors and dumps can
  // point at them; a name the model gave is kept as is.
  void assign_node_names() {
    const auto& nodes = model_.graph().node();
    names_.resize(size_t(nodes.size()));
    for (int i = 0; i < nodes.size(); ++i)
      names_[size_t(i)] = nodes[i].name().empty() ? cat(nodes[i].op_type(), "_", i) : nodes[i].name();
  }

  void check_nodes() {
    const auto& reg = OpRegistry::global();
    const auto& nodes = model_.graph().node();
    std::set<std::string> defined;
    for (const auto& in : model_.graph().input()) defined.insert(in.name());
    for (const auto& t : model_.graph().initializer()) defined.insert(t.name());
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      std::string ctx = node_ctx(n, names_[size_t(i)], opset_);
      if (!n.domain().empty() && n.domain() != "ai.onnx") unsupported_error(ctx, ": unsupported op (domain '", n.domain(), "')");
      if (opset_ < 0) user_error(ctx, ": the model imports no opset of the default ONNX domain");
      if (n.op_type() != "Constant" && !reg.find(n.op_type()) && !is_legacy_op(n.op_type()))
        unsupported_error(ctx, ": unsupported op");
      for (const auto& a : n.attribute())
        if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS || a.has_g())
          user_error(ctx, ": unsupported attribute '", a.name(), "' (subgraphs are not supported)");
      // An attribute the op does not have at this opset (ReduceSum's `axes` became an input at 13)
      // would be read by some code and ignored by other: reject it, as ONNX's checker does.
      if (const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), opset_, ""))
        for (const auto& a : n.attribute())
          if (!schema->attributes().count(a.name()))
            user_error(ctx, ": attribute '", a.name(), "' is not defined for ", n.op_type(), " at opset ", opset_);
      if (n.op_type() == "Constant") check_constant(n, ctx);
      validate_node(n, opset_, ctx, defined);
    }
  }

  // Constant's value attribute must be of the kind its name says (a FLOAT `value` is not a tensor).
  static void check_constant(const onnx::NodeProto& n, const std::string& ctx) {
    if (n.attribute_size() != 1) user_error(ctx, ": Constant must have exactly one value attribute");
    const auto& a = n.attribute(0);
    using A = onnx::AttributeProto;
    const std::pair<const char*, A::AttributeType> kinds[] = {
        {"value", A::TENSOR}, {"value_float", A::FLOAT}, {"value_int", A::INT},
        {"value_floats", A::FLOATS}, {"value_ints", A::INTS}};
    for (const auto& [name, kind] : kinds)
      if (a.name() == name) {
        const bool has = kind == A::TENSOR ? a.has_t()
                         : kind == A::FLOAT ? a.has_f()
                         : kind == A::INT   ? a.has_i()
                                            : true;
        if ((a.type() != A::UNDEFINED && a.type() != kind) || !has)
          user_error(ctx, ": attribute '", a.name(), "' must be a ", A::AttributeType_Name(kind), ", got ",
                     A::AttributeType_Name(a.type()));
        return;
      }
    user_error(ctx, ": unsupported attribute '", a.name(), "' (string and sparse constants are not supported)");
  }

  // A dim is fixed when it has a non-negative dim_value. Exporters (Paddle among them) write an
  // unknown dim as dim_value -1 instead of a dim_param: it is symbolic like a named dim.
  static bool is_fixed_dim(const onnx::TensorShapeProto::Dimension& d) {
    return d.has_dim_value() && d.dim_value() >= 0;
  }

  // Negative dims in value_info and graph outputs become unnamed dims, so that ONNX shape inference
  // merges its inferred sizes instead of reporting -1 as a conflicting size.
  static void clear_negative_dims(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list) {
    for (auto& vi : *list) {
      if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) continue;
      for (auto& d : *vi.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
        if (d.has_dim_value() && d.dim_value() < 0) d.clear_dim_value();
    }
  }

  void fix_input_shapes() {
    auto* graph = model_.mutable_graph();
    clear_negative_dims(graph->mutable_value_info());
    clear_negative_dims(graph->mutable_output());
    std::set<std::string> inits;
    for (const auto& t : graph->initializer()) inits.insert(t.name());
    std::set<std::string> seen;
    for (auto& in : *graph->mutable_input()) {
      if (inits.count(in.name())) continue;
      seen.insert(in.name());
      if (!in.type().has_tensor_type())
        user_error("input '", in.name(), "' is not a tensor (sequences, maps and optionals are not supported)");
      auto* tt = in.mutable_type()->mutable_tensor_type();
      dtype_from_onnx_checked(tt->elem_type(), cat("input '", in.name(), "'"));
      auto it = opts_.input_shapes.find(in.name());
      if (it != opts_.input_shapes.end()) {
        const Shape& want = it->second;
        if (tt->has_shape() && tt->shape().dim_size() != int(want.size()))
          user_error("--input-shape ", in.name(), "=", shape_str(want), " has rank ", want.size(),
                     " but the model declares rank ", tt->shape().dim_size());
        for (size_t d = 0; d < want.size(); ++d) {
          if (want[d] < 0) user_error("--input-shape ", in.name(), ": negative dimension");
          if (tt->has_shape() && is_fixed_dim(tt->shape().dim(int(d))) && tt->shape().dim(int(d)).dim_value() != want[d])
            user_error("--input-shape ", in.name(), "=", shape_str(want), " disagrees with the model's fixed dim ",
                       tt->shape().dim(int(d)).dim_value(), " at axis ", d);
        }
        tt->clear_shape();
        auto* shp = tt->mutable_shape();
        for (int64_t d : want) shp->add_dim()->set_dim_value(d);
        continue;
      }
      if (!tt->has_shape())
        user_error("input '", in.name(), "' has no shape; give one with --input-shape ", in.name(), "=DIMS");
      for (int d = 0; d < tt->shape().dim_size(); ++d) {
        const auto& dim = tt->shape().dim(d);
        if (!is_fixed_dim(dim)) {
          std::string sym = dim.has_dim_param() ? "'" + dim.dim_param() + "'"
                            : dim.has_dim_value() ? cat(dim.dim_value(), " (unknown size)")
                                                  : "(unnamed)";
          user_error("input '", in.name(), "' has symbolic dimension ", sym, " at axis ", d,
                     "; fix it with --input-shape ", in.name(), "=DIMS (e.g. 1x3x224x224)");
        }
      }
    }
    for (const auto& [name, s] : opts_.input_shapes)
      if (!seen.count(name)) user_error("--input-shape names '", name, "', which is not an input of the model");
    // A declared size that cannot exist (2^62 x 4 elements) is refused here, not first met by a
    // later stage's arithmetic.
    for (const auto& in : graph->input()) {
      if (inits.count(in.name())) continue;
      Shape s;
      for (const auto& d : in.type().tensor_type().shape().dim()) s.push_back(d.dim_value());
      const size_t es = dtype_size(*dtype_from_onnx(in.type().tensor_type().elem_type()));
      try {
        const int64_t n = shape_numel(s);
        if (n > 0 && uint64_t(n) > (uint64_t(1) << 40) / es) user_error("shape ", shape_str(s), " is too large");
      } catch (const UserError& e) {
        user_error("input '", in.name(), "': ", e.what());
      }
    }
  }

  // Constant nodes become initializers before shape inference: old opsets' Constant schema only
  // allows float types, yet exporters wrote int64 Constants there, which ONNX inference rejects.
  void constants_to_initializers() {
    auto* graph = model_.mutable_graph();
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    std::vector<std::string> kept_names;
    for (int i = 0; i < graph->node_size(); ++i) {
      const auto& n = graph->node(i);
      std::string ctx = node_ctx(n, names_[size_t(i)], opset_);
      if (n.op_type() == "Constant" && (n.domain().empty() || n.domain() == "ai.onnx")) {
        if (n.output_size() != 1) user_error(ctx, ": Constant must have one output");
        Tensor t = constant_node_value(n, ctx);
        constant_values_[n.output(0)] = t;
        auto* init = graph->add_initializer();
        init->set_name(n.output(0));
        init->set_data_type(int32_t(dtype_to_onnx(t.dtype())));
        for (int64_t d : t.shape()) init->add_dims(d);
        init->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
        continue;
      }
      *kept.Add() = n;
      kept_names.push_back(names_[size_t(i)]);
    }
    graph->mutable_node()->Swap(&kept);
    names_ = std::move(kept_names);
  }

  void infer_shapes() {
    // error_mode 0: a node ONNX cannot infer stays untyped and complete_types() types it from
    // kiln's kernel (which reports real shape errors with the node's name). In a child process:
    // libonnx's inference can crash on malformed models (sandboxed_inference.h).
    onnx::ShapeInferenceOptions o(/*check_type=*/true, /*error_mode=*/0, /*data_prop=*/true);
    infer_shapes_sandboxed(model_, o, [&](int i) { return node_ctx(model_.graph().node(i), names_[size_t(i)], opset_); });
  }

  static std::optional<TensorType> static_type(const onnx::TypeProto& t) {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return std::nullopt;
    auto dt = dtype_from_onnx(t.tensor_type().elem_type());
    if (!dt) return std::nullopt;
    TensorType r{*dt, {}};
    for (const auto& d : t.tensor_type().shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
      r.shape.push_back(d.dim_value());
    }
    return r;
  }

  // A graph output's declared type is a hint, as in ONNX Runtime (which warns "Error merging shape
  // info for output" and runs with the computed shape): ONNX's inference in error_mode 0 would keep
  // a declaration that contradicts the graph (an Add of two scalars declared f64[2,3]), and every
  // later stage, trusting the types, would fail on it as an internal error. So the declarations are
  // taken out before inference; an output inference types statically gets the inferred type, and
  // one it does not is typed by kiln's kernel (complete_types) like any other value — the
  // declaration (hints_) is used only where that is impossible (a Pad or Expand whose pads or
  // shape are graph inputs: data-dependent, typed only by its declaration). Element types must
  // agree: ONNX Runtime refuses a model whose output is declared with another element type.
  void set_aside_declared_outputs() {
    for (auto& out : *model_.mutable_graph()->mutable_output()) {
      declared_outputs_.emplace(out.name(), out.type());
      out.clear_type();
    }
  }

  // ONNX Runtime warns when it runs an output with a shape other than the declared one; so does
  // kiln (ImportOptions::warn), once the graph is typed.
  void warn_about_declared_outputs(const Graph& g) {
    if (!opts_.warn) return;
    for (const Value* o : g.outputs()) {
      auto d = declared_outputs_.find(o->name());
      if (d == declared_outputs_.end()) continue;
      auto t = static_type(d->second);
      if (t && *t != o->type())
        opts_.warn(cat(path_, ": graph output '", o->name(), "' is declared ", t->str(), ", but the graph computes ",
                       o->type().str(), "; the computed type is used (as ONNX Runtime does)"));
    }
  }

  void collect_types() {
    const auto& g = model_.graph();
    for (const auto* list : {&g.input(), &g.value_info()})
      for (const auto& vi : *list)
        if (auto t = static_type(vi.type())) types_[vi.name()] = *t;
    for (const auto& out : g.output()) {
      auto decl = declared_outputs_.find(out.name());
      if (auto t = static_type(out.type())) {
        types_[out.name()] = *t;
        if (decl != declared_outputs_.end()) check_declared_elem_type(out.name(), decl->second, t->dtype);
      } else if (decl != declared_outputs_.end()) {
        if (auto d = static_type(decl->second)) {
          check_declared_agrees(out.name(), decl->second, out.type());
          hints_[out.name()] = *d;
        }
      }
    }
  }

  static std::string onnx_type_str(const onnx::TypeProto& t) {
    auto dt = t.tensor_type().has_elem_type() ? dtype_from_onnx(t.tensor_type().elem_type()) : std::nullopt;
    std::string s = dt ? std::string(dtype_name(*dt)) : std::string("tensor");
    if (!t.tensor_type().has_shape()) return s;
    s += "[";
    for (int i = 0; i < t.tensor_type().shape().dim_size(); ++i) {
      const auto& d = t.tensor_type().shape().dim(i);
      s += (i ? "," : "") + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : "?");
    }
    return s + "]";
  }

  static void check_declared_elem_type(const std::string& name, const onnx::TypeProto& decl, DType computed) {
    if (!decl.has_tensor_type() || decl.tensor_type().elem_type() == 0) return;  // no element type declared
    auto d = dtype_from_onnx(decl.tensor_type().elem_type());
    if (!d || *d != computed)
      user_error("graph output '", name, "' is declared ", onnx_type_str(decl), ", but the graph computes ",
                 dtype_name(computed));
  }

  // The declaration of an output inference typed only partly (or not at all) must fit what it found.
  static void check_declared_agrees(const std::string& name, const onnx::TypeProto& decl, const onnx::TypeProto& inferred) {
    if (!inferred.has_tensor_type()) return;
    const auto& it = inferred.tensor_type();
    if (it.elem_type() != 0)
      if (auto dt = dtype_from_onnx(it.elem_type())) check_declared_elem_type(name, decl, *dt);
    if (!it.has_shape()) return;
    const auto& ds = decl.tensor_type().shape();
    bool agrees = ds.dim_size() == it.shape().dim_size();
    for (int i = 0; agrees && i < ds.dim_size(); ++i)
      agrees = !it.shape().dim(i).has_dim_value() || it.shape().dim(i).dim_value() == ds.dim(i).dim_value();
    if (!agrees)
      user_error("graph output '", name, "' is declared ", onnx_type_str(decl), ", but the graph computes ",
                 onnx_type_str(inferred));
  }

  Attribute convert_attribute(const onnx::AttributeProto& a, const std::string& ctx) {
    auto type = a.type();
    if (type == onnx::AttributeProto::UNDEFINED) {  // very old writers leave the type unset
      if (a.has_f()) type = onnx::AttributeProto::FLOAT;
      else if (a.has_i()) type = onnx::AttributeProto::INT;
      else if (a.has_s()) type = onnx::AttributeProto::STRING;
      else if (a.has_t()) type = onnx::AttributeProto::TENSOR;
      else if (a.floats_size()) type = onnx::AttributeProto::FLOATS;
      else if (a.ints_size()) type = onnx::AttributeProto::INTS;
      else if (a.strings_size()) type = onnx::AttributeProto::STRINGS;
    }
    switch (type) {
      case onnx::AttributeProto::FLOAT: return a.f();
      case onnx::AttributeProto::INT: return int64_t(a.i());
      case onnx::AttributeProto::STRING: return a.s();
      case onnx::AttributeProto::TENSOR: return tensor_from_proto(a.t(), model_dir_, cat(ctx, ": attribute '", a.name(), "'"));
      case onnx::AttributeProto::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
      case onnx::AttributeProto::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
      case onnx::AttributeProto::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
      default:
        user_error(ctx, ": unsupported attribute '", a.name(), "' of kind ", onnx::AttributeProto_AttributeType_Name(type));
    }
  }

  // A Constant node becomes a constant value.
  Tensor constant_node_value(const onnx::NodeProto& n, const std::string& ctx) {
    if (n.attribute_size() != 1) user_error(ctx, ": Constant must have exactly one value attribute");
    const auto& a = n.attribute(0);
    Attribute v = convert_attribute(a, ctx);
    if (a.name() == "value") return std::get<Tensor>(v);
    if (a.name() == "value_float") return Tensor::scalar<float>(std::get<float>(v));
    if (a.name() == "value_int") return Tensor::scalar<int64_t>(std::get<int64_t>(v));
    if (a.name() == "value_floats") {
      auto f = std::get<std::vector<float>>(v);
      return Tensor::from_vector<float>(f, {int64_t(f.size())});
    }
    if (a.name() == "value_ints") {
      auto i = std::get<std::vector<int64_t>>(v);
      return Tensor::from_vector<int64_t>(i, {int64_t(i.size())});
    }
    user_error(ctx, ": unsupported attribute '", a.name(), "' (string and sparse constants are not supported)");
  }

  void convert(Graph& g) {
    const auto& graph = model_.graph();
    for (const auto& init : graph.initializer()) {
      if (g.find_value(init.name())) user_error("initializer '", init.name(), "' is defined twice");
      auto cv = constant_values_.find(init.name());
      g.add_constant(init.name(), cv != constant_values_.end()
                                      ? cv->second
                                      : tensor_from_proto(init, model_dir_, cat("initializer '", init.name(), "'")));
    }
    for (const auto& in : graph.input()) {
      if (Value* v = g.find_value(in.name())) {
        if (v->is_constant()) continue;  // IR < 4 lists initializers as inputs; the initializer wins
        user_error("input '", in.name(), "' is declared twice");
      }
      g.add_input(in.name(), types_.at(in.name()));
    }
    for (int i = 0; i < graph.node_size(); ++i) {
      const auto& n = graph.node(i);
      const std::string& name = names_[size_t(i)];
      std::string ctx = node_ctx(n, name, opset_);
      std::vector<Value*> ins, outs;
      for (const auto& in : n.input()) {
        if (in.empty()) {
          ins.push_back(nullptr);
          continue;
        }
        Value* v = g.find_value(in);
        if (!v) user_error(ctx, ": input '", in, "' is not defined before this node");
        ins.push_back(v);
      }
      // Trailing omitted inputs carry no meaning; drop them so kernels see the shorter list.
      while (!ins.empty() && !ins.back()) ins.pop_back();
      for (const auto& out : n.output()) {
        std::string oname = out.empty() ? g.unique_name(name + "_unused_output") : out;
        if (g.find_value(oname)) user_error(ctx, ": output '", oname, "' is defined twice");
        auto t = types_.find(oname);
        outs.push_back(g.add_value(oname, t == types_.end() ? TensorType{} : t->second));
      }
      AttributeMap attrs;
      for (const auto& a : n.attribute()) attrs[a.name()] = convert_attribute(a, ctx);
      g.add_node(n.op_type(), ins, outs, std::move(attrs), name);
    }
    for (const auto& out : graph.output()) {
      Value* v = g.find_value(out.name());
      if (!v) user_error("graph output '", out.name(), "' is not defined");
      g.add_output(v);
    }
  }

  // complete_types, falling back to the declared types of graph outputs (collect_types) when kiln
  // cannot type them itself; a declared element type the kernel contradicts is an error.
  void complete_types_or_hinted(Graph& g, Node* n, KnownValues& known) {
    try {
      complete_types(g, n, known);
    } catch (const UserError&) {
      bool hinted = false;
      for (Value* o : n->outputs())
        if (auto h = hints_.find(o->name()); h != hints_.end() && o->dtype() == DType::Undefined) {
          o->set_type(h->second);
          hinted = true;
        }
      if (!hinted) throw;
      complete_types(g, n, known);  // now typed: only the operand checks and known values remain
    }
    for (Value* o : n->outputs())
      if (auto h = hints_.find(o->name()); h != hints_.end() && o->dtype() != h->second.dtype)
        user_error("graph output '", o->name(), "' is declared ", h->second.str(), ", but the graph computes ",
                   o->type().str());
  }

  // Canonicalises each node and completes the types of its outputs, in one topological walk:
  // canonicalisation may need the (now known) input types, e.g. ranks for legacy broadcasting.
  void finish(Graph& g) {
    KnownValues known;
    for (Node* n : g.nodes()) {
      std::string ctx = cat("node '", n->name(), "' (", n->op_type(), ", opset ", opset_, ")");
      try {
        for (Node* m : canonicalize_opset(g, n, opset_)) complete_types_or_hinted(g, m, known);
      } catch (const UserError& e) {
        rethrow_with_context(ctx + ": ", e);
      }
    }
    for (Value* v : g.values())
      if (v->dtype() == DType::Undefined && (v->producer() || v->is_graph_input() || g.is_graph_output(v)))
        throw InternalError(cat("value '", v->name(), "' has no type after import"));
  }

  std::string path_;
  const ImportOptions& opts_;
  onnx::ModelProto model_;
  std::string model_dir_;
  int64_t opset_ = 0;
  std::vector<std::string> names_;
  std::unordered_map<std::string, TensorType> types_;
  std::unordered_map<std::string, onnx::TypeProto> declared_outputs_;  // set_aside_declared_outputs
  std::unordered_map<std::string, TensorType> hints_;  // declared types of outputs ONNX left untyped
  std::unordered_map<std::string, Tensor> constant_values_;
};

}  // namespace

std::unique_ptr<Graph> import_onnx(const std::string& path, const ImportOptions& opts) {
  try {
    return Importer(path, opts).run();
  } catch (const UserError& e) {
    rethrow_with_context(path + ": ", e);
  }
}

}  // namespace kiln
