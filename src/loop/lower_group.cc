// Lowering of one elementwise/injective fusion group to one loop nest. The model (values as
// expressions of their position, memoised per (value, index)) is described in lower_internal.h;
// this file builds the nest, the kernel's buffers, and the Lets that compute shared values once.
//
// Decisions, in order:
//  - the nest walks the outputs' domain in row-major order: one flat loop `i` when no access needs
//    a multi-dimensional index (pure elementwise chains, scalar operands, views), otherwise one
//    loop per output dimension (`i0, i1, ...`, size-1 dims skipped) so broadcasts and remaps index
//    with loop variables instead of div/mod. Lowering tries the flat form first and redoes the
//    group nested when some index had to be unravelled;
//  - outermost loop Parallel when the domain has >= 4096 elements, innermost Vectorized;
//  - outputs of different sizes (a Split alone in its group) get one nest each;
//  - a value used twice, and every group node's value at the loop point, is a Let `t<k>`; values
//    at remapped positions stay inline (and are refused past the limits in lower_internal.h);
//  - all loads of an iteration precede its stores (multi-output kernels store Let variables), so
//    in-place memory reuse of a same-shaped input read at the same point is safe.
// A group is refused (LoweredGroup::reason) for a non-elementwise kind, an op or form with no exact
// loop spelling (integer Pow, run-time Slice/Pad parameters, ...), or an attribute the
// reference kernel would reject. The partitioner asks this same entry point (analyze_group), so a
// refused set of nodes is never planned as one kernel; a node refused alone is a library kernel.
#include "loop/lower_group.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <unordered_set>

#include "fusion/op_kind.h"
#include "loop/affine.h"
#include "loop/lower_internal.h"
#include "loop/runtime_params.h"
#include "reference/kernel_util.h"
#include "support/error.h"

namespace kiln::loop {

namespace {

bool is_c_keyword(const std::string& s) {
  static const std::unordered_set<std::string> kw = {
      "auto",     "break",    "case",     "char",   "const",    "continue", "default",  "do",
      "double",   "else",     "enum",     "extern", "float",    "for",      "goto",     "if",
      "inline",   "int",      "long",     "register", "restrict", "return", "short",    "signed",
      "sizeof",   "static",   "struct",   "switch", "typedef",  "union",    "unsigned", "void",
      "volatile", "while",    "_Bool",    "_Complex", "_Imaginary", "bool", "true",     "false",
      "asm",      "typeof",   "main",     "NULL",   "alignas",  "alignof",  "static_assert",
      "thread_local", "nullptr", "constexpr", "__global__", "__device__", "kernel", "global", "local",
      "private",  "constant"};
  return kw.count(s) != 0;
}

// Names a buffer must not take: the nest's own variables (i, i0.., t0..) and the math functions
// an emitter calls (a parameter named `exp` would shadow exp()).
bool is_reserved_name(const std::string& s) {
  static const std::unordered_set<std::string> fn = {
      "abs",  "fabs", "sqrt",  "exp",   "log",   "log1p", "erf",   "tanh",  "sin",  "cos",   "tan",
      "asin", "acos", "atan",  "sinh",  "cosh",  "asinh", "acosh", "atanh", "floor", "ceil", "round",
      "rint", "nearbyint", "fmod", "pow", "fmin", "fmax", "min", "max", "isnan", "isinf", "select",
      "args", "n", "acc"};
  if (fn.count(s)) return true;
  if (s.rfind("kiln", 0) == 0) return true;
  if ((s[0] == 'i' || s[0] == 't') &&
      std::all_of(s.begin() + 1, s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return true;
  return false;
}

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

std::string sanitize_identifier(const std::string& s) {
  std::string r;
  for (unsigned char c : s) r += std::isalnum(c) ? char(c) : '_';
  if (r.empty()) r = "v";
  if (std::isdigit((unsigned char)r[0])) r = "v" + r;
  // Identifiers starting with "__" or "_X" are reserved to the C implementation.
  if (r[0] == '_' && r.size() > 1 && (r[1] == '_' || std::isupper((unsigned char)r[1]))) r = "v" + r;
  if (is_c_keyword(r)) r += "_";
  // Model names can be arbitrarily long; keep identifiers short but distinct.
  if (r.size() > 64) {
    char h[16];
    std::snprintf(h, sizeof h, "_%08x", fnv1a(s));
    r = r.substr(0, 55) + h;
  }
  return r;
}

namespace detail {

void refuse(std::string reason) { throw Refusal{std::move(reason)}; }

// ---------------------------------------------------------------- indices

Expr Lowerer::flat(Index& idx) {
  if (idx.flat) return idx.flat;
  // Horner form ((d0 * n1 + d1) * n2 + d2); size-1 dims contribute nothing.
  Expr acc = int_imm(0);
  for (size_t d = 0; d < idx.shape.size(); ++d)
    if (idx.shape[d] != 1) acc = add(mul(acc, int_imm(idx.shape[d])), (*idx.dims)[d]);
  idx.flat = acc;
  return acc;
}

const std::vector<Expr>& Lowerer::dims(Index& idx) {
  if (idx.dims) return *idx.dims;
  const Shape& s = idx.shape;
  size_t nontrivial = 0, first = s.size();
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != 1) {
      ++nontrivial;
      if (first == s.size()) first = d;
    }
  if (nontrivial > 1) needed_unravel_ = true;
  std::vector<Expr> r(s.size());
  int64_t stride = 1;
  for (size_t d = s.size(); d-- > 0;) {
    if (s[d] == 1) {
      r[d] = int_imm(0);
      continue;
    }
    Expr q = div_floor(idx.flat, int_imm(stride));
    // The outermost non-trivial dim needs no modulo: the flat offset is within the tensor.
    r[d] = d == first ? q : mod(q, int_imm(s[d]));
    stride *= s[d];
  }
  idx.dims = std::move(r);
  return *idx.dims;
}

Index Lowerer::broadcast(Index& idx, const Shape& in) {
  if (in == idx.shape) return idx;
  const int64_t n_in = shape_numel(in);
  if (n_in == 1) return Index::zero(in);
  // Equal sizes under broadcasting differ only by leading or matching unit dims: same offset.
  if (n_in == shape_numel(idx.shape)) return Index::from_flat(in, flat(idx));
  const auto& d = dims(idx);
  KILN_CHECK(in.size() <= d.size(), "operand of rank ", in.size(), " broadcast to rank ", d.size());
  const size_t off = d.size() - in.size();
  std::vector<Expr> r(in.size());
  for (size_t k = 0; k < in.size(); ++k) r[k] = in[k] == 1 ? int_imm(0) : d[k + off];
  return Index::from_dims(in, std::move(r));
}

Expr Lowerer::operand(const Node& n, size_t k, Index& idx) {
  const Value* v = n.input(k);
  if (!v) refuse(cat(n.op_type(), " input ", k, " is missing"));
  return value_at(v, broadcast(idx, v->shape()));
}

// ---------------------------------------------------------------- run-time index checks

namespace {

// The group lower_group is lowering on this thread. The emitters drive Lowerers over groups of
// their own making (a contraction's row passes, a chain's stages), all of the same nodes; a node's
// check site is its position in the group lower_group was given, so that lower_group can name the
// node of every site in the kernel whichever emitter built it.
thread_local const FusionGroup* t_lowering_group = nullptr;

struct LoweringGroupScope {
  explicit LoweringGroupScope(const FusionGroup& g) : saved(t_lowering_group) { t_lowering_group = &g; }
  ~LoweringGroupScope() { t_lowering_group = saved; }
  const FusionGroup* saved;
};

void collect_check_sites(const Expr& e, std::set<int64_t>& sites) {
  if (e->kind == ExprKind::Call && e->name == kCheckedIndex) sites.insert(e->args.at(2)->int_value);
  for (const Expr& a : e->args) collect_check_sites(a, sites);
}

void collect_check_sites(const Stmt& s, std::set<int64_t>& sites) {
  if (!s) return;
  for (const Expr* e : {&s->extent, &s->index, &s->value, &s->cond})
    if (*e) collect_check_sites(*e, sites);
  for (const Expr& a : s->call_args) collect_check_sites(a, sites);
  for (const auto* list : {&s->body, &s->else_body})
    for (const Stmt& c : *list) collect_check_sites(c, sites);
}

// A pass over the whole index input of each checked Gather, GatherElements and GatherND that the
// kernel reads from its arguments, before the nest: the nest reads only the indices of the
// positions it computes (a Gather whose output a Slice in the same kernel uses in part), while the
// reference kernel rejects any index out of range. One load and compare per index, only in
// kernels with run-time indices. Indices computed inside the kernel stay checked where used.
std::vector<Stmt> whole_index_checks(const FusionGroup& grp, const LoopKernel& k) {
  std::vector<Stmt> out;
  for (const IndexCheck& c : k.index_checks) {
    const Node* n = grp.nodes[size_t(c.site - 1)];
    const std::string& op = n->op_type();
    if (op != "Gather" && op != "GatherElements" && op != "GatherND") continue;
    const Value *data = n->input(0), *ind = n->input(1);
    auto at = std::find(grp.inputs.begin(), grp.inputs.end(), ind);
    if (!data || !ind || ind->is_constant() || at == grp.inputs.end()) continue;
    const BufferPtr& b = k.inputs.at(size_t(at - grp.inputs.begin()));
    const Shape& ds = data->shape();
    const int64_t count = shape_numel(ind->shape());
    if (count == 0 || ds.empty()) continue;
    const std::string v = cat("kiln_ck", c.site);
    if (op == "GatherND") {
      // Tuples of m indices into data dims [batch_dims, batch_dims + m).
      const int64_t m = ind->shape().back(), bd = n->attr_int("batch_dims", 0);
      if (m < 1 || bd < 0 || bd + m > int64_t(ds.size())) continue;
      std::vector<Stmt> tuple;
      for (int64_t j = 0; j < m; ++j)
        tuple.push_back(let(cat(v, "_", j), checked_index(load(b, add(mul(var(v), int_imm(m)), int_imm(j))),
                                                          ds[size_t(bd + j)], c.site)));
      out.push_back(for_loop(v, int_imm(count / m), std::move(tuple)));
    } else {
      const int64_t dim = ds[size_t(normalize_axis(n->attr_int("axis", 0), int64_t(ds.size())))];
      if (dim == 0) continue;
      out.push_back(for_loop(v, int_imm(count), {let(v + "_i", checked_index(load(b, var(v)), dim, c.site))}));
    }
  }
  return out;
}

// The prologue of each member whose parameters are read at run time (runtime_params.h): Lets and
// a checked guard at the top of the kernel, over the kernel's own arguments (the lowering refused
// parameters computed inside the kernel).
std::vector<Stmt> runtime_param_guards(const FusionGroup& grp, const LoopKernel& k) {
  std::vector<Stmt> out;
  for (size_t i = 0; i < grp.nodes.size(); ++i) {
    const Node* n = grp.nodes[i];
    if (!has_runtime_params(*n)) continue;
    ParamAt at = [&](size_t input, int64_t e) -> Expr {
      const Value* v = n->input(input);
      if (v->is_constant()) return int_imm(v->constant().as_int64(e));
      auto pos = std::find(grp.inputs.begin(), grp.inputs.end(), v);
      KILN_CHECK(pos != grp.inputs.end(), n->describe(), ": a run-time parameter is not an input of kernel ", k.name);
      return cast(DType::Int64, load(k.inputs.at(size_t(pos - grp.inputs.begin())), int_imm(e)));
    };
    for (Stmt& s : runtime_params_prologue(*n, at, int64_t(i) + 1)) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

int64_t Lowerer::index_check_site(const Node& n) const {
  const FusionGroup& g = t_lowering_group ? *t_lowering_group : grp_;
  auto it = std::find(g.nodes.begin(), g.nodes.end(), &n);
  KILN_CHECK(it != g.nodes.end(), n.describe(), " is not a member of group ", g.name);
  return int64_t(it - g.nodes.begin()) + 1;
}

// ---------------------------------------------------------------- values

Expr Lowerer::value_at(const Value* v, Index idx) {
  KILN_CHECK(v && idx.shape == v->shape(), "index of shape ", shape_str(idx.shape), " into ",
             v ? v->name() : "?", " of shape ", v ? shape_str(v->shape()) : "?");
  const Expr f = flat(idx);
  const std::string where = position_key(f);
  char key_prefix[32];
  std::snprintf(key_prefix, sizeof key_prefix, "%p@", static_cast<const void*>(v));
  const std::string key = key_prefix + where;
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  if (memo_.size() >= kMaxValuePoints)
    refuse(cat("recomputing remapped values would need more than ", kMaxValuePoints, " expressions"));

  Expr r;
  if (auto it = input_buffers_.find(v); it != input_buffers_.end()) {
    r = load(it->second, f);
  } else {
    const Node* p = v->producer();
    KILN_CHECK(p && members_.count(p), "kernel ", grp_.name, " uses '", v->name(), "', which it neither reads nor computes");
    size_t slot = 0;
    while (p->output(slot) != v) ++slot;
    r = lower_node(*p, slot, idx);
    KILN_CHECK(r->type == v->dtype(), p->describe(), " lowered to ", dtype_name(r->type), ", expected ",
               dtype_name(v->dtype()));
    if (where == domain_flat_) at_point_.insert(r.get());
  }
  memo_[key] = r;
  return r;
}

Expr Lowerer::lower_node(const Node& n, size_t slot, Index& idx) {
  const auto kind = op_kind_of_type(n.op_type());
  if (kind && *kind == OpKind::ElementWise) return lower_elementwise(n, idx);
  return lower_injective(n, slot, idx);
}

// ---------------------------------------------------------------- Lets and the nest

namespace {

// Turns the expression DAG of the stores into Lets: a value used more than once, or a group
// node's value at the loop point, is computed once into `t<k>`; the rest stays inline.
class LetBuilder {
 public:
  LetBuilder(const std::set<const ExprNode*>& at_point, int first) : at_point_(at_point), next_(first) {}
  int next() const { return next_; }

  void count_root(const Expr& e) {
    ++refs_[e.get()];
    ++root_refs_[e.get()];
    visit(e);
  }
  size_t dag_size() const { return seen_.size(); }

  // Nodes of the code as emitted: every expression tree after the rewrite, with shared
  // sub-expressions that were not hoisted counted once per use.
  static int64_t emitted_size(const Expr& e, std::unordered_map<const ExprNode*, int64_t>& memo) {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    int64_t n = 1;
    for (const auto& a : e->args) n += emitted_size(a, memo);
    memo[e.get()] = n;
    return n;
  }

  Expr rewrite(const Expr& e, std::vector<Stmt>& lets) {
    if (auto it = done_.find(e.get()); it != done_.end()) return it->second;
    Expr r = e;
    if (!e->args.empty()) {
      r = map_args(e, [&](const Expr& a) { return rewrite(a, lets); });
    }
    if (hoist(e)) {
      std::string name = "t" + std::to_string(next_++);
      lets.push_back(let(name, r));
      r = var(name, e->type);
    }
    done_[e.get()] = r;
    return r;
  }

 private:
  void visit(const Expr& e) {
    if (!seen_.insert(e.get()).second) return;
    // Affine index arithmetic (loop variables, constants, + - * / %) is left inline even when
    // shared: the C compiler shares it anyway and vectorisers want to see it. Anything else in an
    // index (loads, selects, clamps) is worth a Let when shared.
    bool irregular = !(e->kind == ExprKind::IntImm || e->kind == ExprKind::Var ||
                       (e->kind == ExprKind::Binary && (e->bin == BinOp::Add || e->bin == BinOp::Sub ||
                                                        e->bin == BinOp::Mul || e->bin == BinOp::Div ||
                                                        e->bin == BinOp::Mod)));
    for (const auto& a : e->args) {
      ++refs_[a.get()];
      visit(a);
      irregular = irregular || irregular_.count(a.get());
    }
    if (irregular) irregular_.insert(e.get());
  }

  bool hoist(const Expr& e) const {
    if (e->kind == ExprKind::IntImm || e->kind == ExprKind::FloatImm || e->kind == ExprKind::Var) return false;
    if (e->kind == ExprKind::Cast && e->args[0]->kind != ExprKind::Load && e->args[0]->args.empty()) return false;
    // Pure index arithmetic stays inline (the C compiler shares it anyway).
    if (e->type == DType::Int64 && !irregular_.count(e.get())) return false;
    const int refs = refs_.at(e.get());
    if (refs >= 2) return true;
    auto rr = root_refs_.find(e.get());
    const bool only_stored = rr != root_refs_.end() && rr->second == refs;
    return at_point_.count(e.get()) && !only_stored;
  }

  const std::set<const ExprNode*>& at_point_;
  std::unordered_map<const ExprNode*, int> refs_, root_refs_;
  std::unordered_set<const ExprNode*> seen_, irregular_;
  std::unordered_map<const ExprNode*, Expr> done_;
  int next_;
};

}  // namespace

// Unique buffer names from value names.
std::string unique_buffer_name(const Value* v, std::set<std::string>& used) {
  std::string base = sanitize_identifier(v->name());
  if (is_reserved_name(base)) base = "v_" + base;
  std::string n = base;
  for (int k = 1; used.count(n); ++k) n = base + "_" + std::to_string(k);
  used.insert(n);
  return n;
}

void bind_kernel(const FusionGroup& grp, const std::string& name, LoopKernel& k, std::set<std::string> used,
                 std::unordered_map<const Value*, BufferPtr>* inputs, std::unordered_map<const Value*, BufferPtr>* outputs) {
  k.name = name;
  for (const Node* n : grp.nodes)
    if (!n->name().empty() && std::find(k.sources.begin(), k.sources.end(), n->name()) == k.sources.end())
      k.sources.push_back(n->name());
  auto global = [&](const Value* v) {
    return std::make_shared<Buffer>(Buffer{unique_buffer_name(v, used), v->dtype(), v->shape(), Scope::Global});
  };
  for (const Value* v : grp.inputs) {
    k.inputs.push_back(global(v));
    if (inputs) (*inputs)[v] = k.inputs.back();
  }
  for (const Value* v : grp.outputs) {
    k.outputs.push_back(global(v));
    if (outputs) (*outputs)[v] = k.outputs.back();
  }
  if (grp.outputs.empty()) refuse("the group writes no outputs");
}

std::vector<Stmt> Lowerer::nest(const std::vector<const Value*>& outs, const std::vector<BufferPtr>& bufs,
                                int& next_let) {
  // The domain: the first output's shape; an output of another shape (same size) derives its
  // position from the flat offset.
  memo_.clear();
  at_point_.clear();
  const Shape domain = outs[0]->shape();
  const int64_t numel = shape_numel(domain);
  struct Loop {
    std::string var;
    int64_t extent;
  };
  std::vector<Loop> loops;
  Index point;
  if (numel == 1) {
    point = Index::zero(domain);
  } else if (flat_mode_) {
    loops.push_back({"i", numel});
    point = Index::from_flat(domain, var("i"));
  } else {
    std::vector<Expr> d;
    for (size_t i = 0; i < domain.size(); ++i) {
      if (domain[i] == 1) {
        d.push_back(int_imm(0));
        continue;
      }
      std::string v = "i" + std::to_string(i);
      loops.push_back({v, domain[i]});
      d.push_back(var(v));
    }
    point = Index::from_dims(domain, std::move(d));
  }
  domain_flat_ = position_key(flat(point));

  std::vector<std::pair<Expr, Expr>> stores;  // (index, value) per output
  for (const Value* v : outs) {
    Index at = v->shape() == domain ? point : Index::from_flat(v->shape(), flat(point));
    Expr value = value_at(v, at);
    stores.push_back({flat(at), value});
  }

  LetBuilder lb(at_point_, next_let);
  for (const auto& [index, value] : stores) {
    lb.count_root(value);
    lb.count_root(index);
  }
  if (lb.dag_size() > kMaxExprNodes)
    refuse(cat("the fused expression has ", lb.dag_size(), " nodes (limit ", kMaxExprNodes, ")"));
  std::vector<Stmt> body;
  for (auto& [index, value] : stores) {
    value = lb.rewrite(value, body);
    index = lb.rewrite(index, body);
  }
  next_let = lb.next();
  append_stores(body, bufs, std::move(stores), next_let);
  std::unordered_map<const ExprNode*, int64_t> sizes;
  int64_t emitted = 0;
  for (const Stmt& st : body) emitted += LetBuilder::emitted_size(st->value, sizes) + (st->index ? LetBuilder::emitted_size(st->index, sizes) : 0);
  if (emitted > kMaxEmittedNodes)
    refuse(cat("the fused loop body would have ", emitted, " expression nodes (limit ", kMaxEmittedNodes, ")"));

  // Outermost loop parallel for big domains, innermost vectorised (it walks every output
  // contiguously: the nest follows the outputs' row-major order). A single loop is parallel when
  // big (the scheduler splits it for vectors later), vectorised otherwise.
  for (size_t i = loops.size(); i-- > 0;) {
    ForKind kind = ForKind::Serial;
    if (i == 0 && numel >= 4096) kind = ForKind::Parallel;
    else if (i + 1 == loops.size()) kind = ForKind::Vectorized;
    body = {for_loop(loops[i].var, int_imm(loops[i].extent), std::move(body), kind)};
  }
  return body;
}

LoopKernel Lowerer::lower(const std::string& name) {
  LoopKernel k;
  for (const Node* n : grp_.nodes) members_.insert(n);
  bind_kernel(grp_, name, k, {}, &input_buffers_);

  // Outputs of one size share a nest (the partitioner's rule for fused groups); a multi-output
  // node alone in its group (Split) may write several sizes: one nest per size, in order.
  std::vector<std::vector<size_t>> by_size;
  for (size_t i = 0; i < grp_.outputs.size(); ++i) {
    const int64_t n = shape_numel(grp_.outputs[i]->shape());
    auto it = std::find_if(by_size.begin(), by_size.end(),
                           [&](const auto& c) { return shape_numel(grp_.outputs[c[0]]->shape()) == n; });
    if (it == by_size.end()) by_size.push_back({i});
    else it->push_back(i);
  }
  std::vector<Stmt> nests;
  int next_let = 0;
  for (const auto& c : by_size) {
    std::vector<const Value*> vals;
    std::vector<BufferPtr> bufs;
    for (size_t i : c) {
      vals.push_back(grp_.outputs[i]);
      bufs.push_back(k.outputs[i]);
    }
    for (auto& st : nest(vals, bufs, next_let)) nests.push_back(std::move(st));
  }
  // One statement (the nest) needs no Block around it.
  k.body = nests.size() == 1 ? nests[0] : block(std::move(nests));
  return k;
}

}  // namespace detail

namespace {

// Does `a` (transitively, through members of grp) read `b`'s result?
bool depends_within(const FusionGroup& grp, const Node* a, const Node* b) {
  return depends_through(a, b, [&](const Node* p) { return std::count(grp.nodes.begin(), grp.nodes.end(), p) > 0; });
}

// The emitter a group goes to, and where each member is computed (Halide's compute_at), named for
// kiln explain. Emitters:
//   elementwise   one nest over the outputs' domain; producers inlined into the loads
//   rows          row kernel: reductions over the same rows with their prologue and epilogue
//   pool          windowed reduction (MaxPool/AveragePool) with its prologue and epilogue
//   contraction   one MatMul/Conv through the micro-kernel, prologue in the operand loads,
//                 epilogue (and row passes: softmax, LayerNorm, global pools) from the tile
//   siblings      independent contractions (Q, K, V of one input; sibling convs): those of one
//                 left operand with constant weights as one GEMM over their columns side by
//                 side, the others' nests spliced into the same kernel
//                 (lower_contraction_siblings.cc, lower_contraction_sibling_gemm.cc)
//   chain         MatMul → row-local ops → MatMul as a row pipeline (attention, MLP)
//   pointwise-depthwise  1x1 conv → elementwise → depthwise conv → elementwise over blocks of
//                 the expanded channels, kept in a local buffer (lower_pointwise_depthwise.cc)
//   scatter       ScatterElements / ScatterND alone: a copy of data, then the updates in the
//                 reference's order (lower_scatter.cc)
//   scan, select  CumSum / TopK over rows longer than their unrolled spellings take, alone: a
//                 serial scan per row, a per-row selection of k (lower_scan.cc)
//   recurrent     RNN / GRU / LSTM alone: the whole layer, its steps in a serial loop
//                 (lower_recurrent.cc)
// Placements: "root" (the op the nest is built around: a contraction, a reduction, a stored
// elementwise value), "inline" (recomputed inside a later member's loads: prologues, remaps),
// "tile" (applied to a contraction's output tile before the store), "row" (per row, after the
// row's reductions).
void describe(const FusionGroup& grp, LoweredGroup& r) {
  std::vector<const Node*> anchors;
  bool contraction = grp.kind == GroupKind::Contraction;
  for (const Node* n : grp.nodes) {
    OpKind k = op_kind(*n);
    if (contraction ? k == OpKind::Contraction : k == OpKind::Reduction) anchors.push_back(n);
  }
  bool windowed = false, chained = false;
  for (const Node* n : grp.nodes) windowed = windowed || is_windowed_reduction(*n);
  for (const Node* a : anchors)
    for (const Node* b : anchors) chained = chained || (a != b && depends_within(grp, a, b));
  if (std::any_of(grp.nodes.begin(), grp.nodes.end(), [](const Node* n) { return detail::is_scatter(*n); }))
    r.emitter = "scatter";
  else if (std::any_of(grp.nodes.begin(), grp.nodes.end(), [](const Node* n) { return detail::is_recurrent(*n); }))
    r.emitter = "recurrent";
  else if (grp.nodes.size() == 1 && detail::needs_row_loop(*grp.nodes[0]))
    r.emitter = grp.nodes[0]->op_type() == "CumSum" ? "scan" : "select";
  else if (grp.kind == GroupKind::Reduction) r.emitter = windowed ? "pool" : "rows";
  else if (contraction)
    r.emitter = anchors.size() == 1               ? "contraction"
                : !chained                          ? "siblings"
                : detail::is_pointwise_depthwise(grp) ? "pointwise-depthwise"
                                                    : "chain";
  else r.emitter = "elementwise";

  r.placements.clear();
  for (const Node* n : grp.nodes) {
    std::string where;
    if (grp.kind != GroupKind::Contraction && grp.kind != GroupKind::Reduction) {
      bool stored = false;
      for (const Value* o : n->outputs()) stored = stored || std::count(grp.outputs.begin(), grp.outputs.end(), o);
      where = stored ? "root" : "inline";
    } else if (std::count(anchors.begin(), anchors.end(), n)) {
      where = "root";
    } else {
      // After a row reduction with no contraction in between (a chain's second MatMul starts a
      // new tile: its epilogue is "tile" again).
      bool upstream = false, after_reduction = op_kind(*n) == OpKind::Reduction;
      for (const Node* a : anchors) upstream = upstream || depends_within(grp, a, n);
      for (const Node* m : grp.nodes) {
        if (op_kind(*m) != OpKind::Reduction || !depends_within(grp, n, m)) continue;
        bool restarted = false;
        for (const Node* a : anchors)
          restarted = restarted || (contraction && depends_within(grp, n, a) && depends_within(grp, a, m));
        after_reduction = after_reduction || !restarted;
      }
      if (upstream && !(contraction && after_reduction)) where = "inline";
      else if (contraction) where = after_reduction ? "row" : "tile";
      else where = "row";
    }
    r.placements.push_back(where);
  }
}

LoweredGroup lower_elementwise_group(const FusionGroup& grp, const std::string& kname) {
  LoweredGroup r;
  if (grp.kind != GroupKind::Elementwise && grp.kind != GroupKind::View) {
    r.reason = "opaque ops run as library kernels";
    return r;
  }
  for (const Node* n : grp.nodes) {
    std::string why = detail::unsupported_reason(*n);
    if (!why.empty()) {
      r.reason = why;
      return r;
    }
  }
  // One kernel is one loop nest. Outputs of different sizes would need a nest each, recomputing
  // what they share; only a single node that writes several sizes (Split) gets one nest per size.
  if (grp.nodes.size() > 1)
    for (const Value* o : grp.outputs)
      if (shape_numel(o->shape()) != shape_numel(grp.outputs.front()->shape())) {
        r.reason = cat("outputs '", grp.outputs.front()->name(), "' ", shape_str(grp.outputs.front()->shape()),
                       " and '", o->name(), "' ", shape_str(o->shape()),
                       " differ in size; one elementwise loop cannot write both");
        return r;
      }
  try {
    // A single flat loop first; if some access needed a multi-dimensional index, one loop per
    // output dimension instead (so broadcasts and remaps index with loop variables, not div/mod).
    detail::Lowerer flat(grp, /*flat_mode=*/true);
    LoopKernel k = flat.lower(kname);
    if (!flat.needed_unravel()) {
      r.kernel = std::move(k);
      return r;
    }
    detail::Lowerer nested(grp, /*flat_mode=*/false);
    r.kernel = nested.lower(kname);
  } catch (const detail::Refusal& e) {
    r.reason = e.reason;
  } catch (const UserError& e) {
    // An invalid attribute the reference kernel would report at run time: leave it to that kernel.
    r.reason = e.what();
  }
  return r;
}

}  // namespace

LoweredGroup lower_group(const FusionGroup& grp, const std::string& name, const Schedule& sched) {
  const std::string kname = sanitize_identifier(name);
  const detail::LoweringGroupScope scope(grp);
  LoweredGroup r;
  // A scatter (an opaque op to the partitioner's kinds) decides first: it refuses every group but
  // itself alone, with its own reason.
  if (std::any_of(grp.nodes.begin(), grp.nodes.end(), [](const Node* n) { return detail::is_scatter(*n); }))
    r = detail::lower_scatter_group(grp, kname);
  else if (std::any_of(grp.nodes.begin(), grp.nodes.end(), [](const Node* n) { return detail::is_recurrent(*n); }))
    r = detail::lower_recurrent_group(grp, kname, sched);
  else if (grp.nodes.size() == 1 && detail::needs_row_loop(*grp.nodes[0]))
    r = detail::lower_row_loop_group(grp, kname);
  else if (grp.kind == GroupKind::Reduction) r = detail::lower_reduction_group(grp, kname, true, sched);
  else if (grp.kind == GroupKind::Contraction)
    r = detail::contraction_count(grp) > 1 ? detail::lower_multi_contraction_group(grp, kname, sched)
                                           : detail::lower_contraction_group(grp, kname, sched);
  else r = lower_elementwise_group(grp, kname);
  if (r.kernel) {
    describe(grp, r);
    if (std::vector<Stmt> guards = detail::runtime_param_guards(grp, *r.kernel); !guards.empty()) {
      guards.push_back(r.kernel->body);
      r.kernel->body = block(std::move(guards));
    }
    // The nodes whose indices (or run-time parameters) the kernel checks, for the runtime's error.
    std::set<int64_t> sites;
    detail::collect_check_sites(r.kernel->body, sites);
    for (int64_t site : sites) {
      KILN_CHECK(site > 0 && size_t(site) <= grp.nodes.size(), "kernel ", kname, ": index check site ", site,
                 " is not a node of its group");
      const Node* n = grp.nodes[size_t(site - 1)];
      std::string message = n->describe() + ": an index is out of range for the axis it indexes";
      if (n->op_type() == "CumSum") message = n->describe() + ": the axis input is out of range for the input's rank";
      if (detail::is_recurrent(*n)) message = n->describe() + ": a sequence_lens value is outside [0, sequence length]";
      if (detail::has_runtime_params(*n)) message = detail::runtime_params_message(*n);
      r.kernel->index_checks.push_back({site, message});
    }
    std::vector<Stmt> whole = detail::whole_index_checks(grp, *r.kernel);
    if (!whole.empty()) {
      whole.push_back(r.kernel->body);
      r.kernel->body = block(std::move(whole));
    }
  }
  return r;
}

KernelAnalysis analyze_group(const FusionGroup& grp, const Schedule& sched) {
  LoweredGroup lg = lower_group(grp, "analysis", sched);
  KernelAnalysis a;
  a.ok = lg.kernel.has_value();
  a.reason = lg.reason;
  a.emitter = lg.emitter;
  a.placements = lg.placements;
  if (a.ok) a.padding_flops = lg.kernel->padding_flops;
  if (!a.ok && a.reason.empty()) a.reason = "the lowering gave no reason";  // never an empty "no"
  return a;
}

}  // namespace kiln::loop
