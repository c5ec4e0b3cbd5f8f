// Sibling contractions of one left operand as one tiled GEMM (sibling_gemm.h).
//
// Each part is first taken as far as its own tiled GEMM view (ContractionLowering::sibling_view:
// the same decisions its own kernel would make), so a part qualifies exactly when its own kernel
// would be the tiled nest with prepacked weights. The joined view is the first part's (its A: in
// place, staged once, or packed per tile with the prologue) with N the parts' columns side by
// side, part p from column begin_p = Σ_{q<p} ⌈n_q / nr⌉ · nr; B is the parts' packed weights in
// one argument (each packed as on its own: whole panels, zero past its last column), so the
// columns between two parts are zeros, computed and never stored. Every output element is the
// same sum in the same order as in its part's own nest (the micro-kernel's ascending k, K blocks
// of kc): the results are those of the spliced parts, bit for bit, under either numerics.
#include <algorithm>

#include "loop/affine.h"
#include "loop/contraction_lowering.h"
#include "loop/rebind_buffers.h"
#include "loop/sibling_gemm.h"
#include "support/error.h"

namespace kiln::loop::detail {

struct SiblingGemms::Candidate {
  const FusionGroup* grp = nullptr;
  std::unique_ptr<ContractionLowering> cl;
  GemmView view;
  const Value* a = nullptr;  // the left operand (MatMul's A; a conv's input)
  const Value* b = nullptr;  // the constant weights read in panels
  PanelLayout b_layout;
};

// The parts' columns are joined in panels of the schedule's nr, so no part fits its own panel
// width to its channels (ContractionLowering::fit_panel_width): a join reads A once for all of
// them, where the widths only trim a part's padding.
SiblingGemms::SiblingGemms(const Schedule& sched) : sched_(sched) { sched_.contraction.fit_panel_width = 0; }
SiblingGemms::~SiblingGemms() = default;

namespace {

// The group input that kernel buffer `buf` of `k` binds, or null (a local buffer).
const Value* bound_value(const LoopKernel& k, const FusionGroup& grp, const BufferPtr& buf) {
  for (size_t i = 0; i < k.inputs.size(); ++i)
    if (k.inputs[i] == buf) return grp.inputs.at(i);
  return nullptr;
}

}  // namespace

bool SiblingGemms::same_a(const Candidate& x, const Candidate& y) const {
  const Node* cx = x.cl->contraction();
  const Node* cy = y.cl->contraction();
  const GemmView& u = x.view;
  const GemmView& v = y.view;
  if (cx->op_type() != cy->op_type() || x.a != y.a) return false;
  // One tile loop: the same register tile and K blocks (an implicit conv fits them to its geometry).
  const auto& tx = x.cl->schedule().contraction;
  const auto& ty = y.cl->schedule().contraction;
  if (tx.mr != ty.mr || tx.nr != ty.nr || tx.kc != ty.kc) return false;
  if (u.batch != v.batch || u.m != v.m || u.k != v.k || u.k_segment != v.k_segment || u.m_block != v.m_block ||
      u.line != v.line || u.line_valid != v.line_valid || bool(u.line_epilogue) != bool(v.line_epilogue))
    return false;
  if (cx->op_type() == "Conv") {
    const nn::WindowGeometry& gx = x.cl->window();
    const nn::WindowGeometry& gy = y.cl->window();
    if (gx.in != gy.in || gx.kernel != gy.kernel || gx.stride != gy.stride || gx.dilation != gy.dilation ||
        gx.pad_begin != gy.pad_begin || gx.pad_end != gy.pad_end || gx.out != gy.out)
      return false;
  }
  // A is built from the same value at the same geometry; the operand's form must agree too (it
  // is decided from the value alone, so this only guards the joined view's assumption).
  const GemmOperand& a = u.a;
  const GemmOperand& b = v.a;
  if (bool(a.buffer) != bool(b.buffer) || bool(a.segment_base) != bool(b.segment_base)) return false;
  if (!a.buffer) return true;  // packed per tile from the same value
  const Value* va = bound_value(x.cl->kernel(), *x.grp, a.buffer);
  const Value* vb = bound_value(y.cl->kernel(), *y.grp, b.buffer);
  // In place: the same group input, or each part's own staging of the same input (a local).
  if (va != vb || (!va && (a.buffer->scope != Scope::Local || b.buffer->scope != Scope::Local))) return false;
  if (a.stride_r != b.stride_r || a.stride_c != b.stride_c || a.m_block_stride != b.m_block_stride ||
      a.line_rows != b.line_rows || a.line_stride != b.line_stride)
    return false;
  std::vector<Expr> probe;
  for (size_t d = 0; d < u.batch.size(); ++d) probe.push_back(var("kiln_probe_b" + std::to_string(d)));
  if (a.base && (!b.base || !same_position(a.base(probe), b.base(probe)))) return false;
  if (a.segment_base && !same_position(a.segment_base(probe, var("kiln_probe_s")), b.segment_base(probe, var("kiln_probe_s"))))
    return false;
  return true;
}

std::vector<std::vector<size_t>> SiblingGemms::plan(const std::vector<const FusionGroup*>& parts) {
  cands_.clear();
  const int64_t nr = sched_.contraction.nr;
  for (const FusionGroup* g : parts) {
    cands_.emplace_back();
    if (!g) continue;
    auto c = std::make_unique<Candidate>();
    c->grp = g;
    c->cl = std::make_unique<ContractionLowering>(*g, "sibling", sched_);
    try {
      c->view = c->cl->sibling_view();
    } catch (const Refusal&) {
      continue;
    } catch (const UserError&) {
      continue;
    }
    const GemmView& v = c->view;
    if (!v.b.buffer || v.b.panel_nr != nr || v.b.packer || !v.column_parts.empty()) continue;
    const LoopKernel& k = c->cl->kernel();
    bool found = false;
    for (const PackedInput& p : k.packed_inputs)
      if (k.inputs.at(p.input) == v.b.buffer && p.then.empty()) {
        c->b = g->inputs.at(p.input);
        c->b_layout = p.layout;
        found = true;
      }
    if (!found || c->b_layout.batch != 1 || c->b_layout.rows != v.k || c->b_layout.cols != v.n || c->b_layout.nr != nr)
      continue;
    const Node* cn = c->cl->contraction();
    c->a = cn->input(0);
    cands_.back() = std::move(c);
  }
  // Greedy in part order: each set is a first candidate and the later ones with its A whose
  // members do not read its weights otherwise (its argument becomes the joined panels).
  std::vector<std::vector<size_t>> sets;
  std::vector<bool> taken(cands_.size(), false);
  for (size_t i = 0; i < cands_.size(); ++i) {
    if (!cands_[i] || taken[i]) continue;
    std::vector<size_t> set = {i};
    const Value* w = cands_[i]->b;
    for (size_t j = i + 1; j < cands_.size(); ++j) {
      if (!cands_[j] || taken[j] || !same_a(*cands_[i], *cands_[j])) continue;
      bool reads_w = false;
      for (const Node* n : cands_[j]->grp->nodes)
        for (size_t q = 0; q < n->num_inputs(); ++q)
          reads_w = reads_w || (n->input(q) == w && !(n == cands_[j]->cl->contraction() && q == 1));
      if (!reads_w) set.push_back(j);
    }
    if (set.size() < 2) continue;
    for (size_t j : set) taken[j] = true;
    sets.push_back(std::move(set));
  }
  return sets;
}

LoopKernel SiblingGemms::lower(const std::vector<size_t>& set, const FusionGroup& grp, const std::string& name) {
  KILN_CHECK(set.size() >= 2, "a sibling GEMM of one part");
  const int64_t nr = sched_.contraction.nr;
  const Candidate& first = *cands_.at(set[0]);
  GemmView g = first.view;
  g.epilogue = nullptr;
  g.line_epilogue = nullptr;
  int64_t begin = 0;
  for (size_t i : set) {
    const Candidate& c = *cands_.at(i);
    g.column_parts.push_back({begin, c.view.n, c.view.epilogue, c.view.line_epilogue});
    g.n = begin + c.view.n;
    begin += (c.view.n + nr - 1) / nr * nr;
  }
  int next_let = 0;
  // The parts' own schedule (same_a: every part's tile is the first's).
  std::vector<Stmt> body = build_tiled_gemm(g, first.cl->schedule(), next_let);

  // The parts' buffers become the joined kernel's; the first part's packed weights its argument
  // holding every part's panels.
  LoopKernel k;
  std::unordered_map<const Value*, BufferPtr> ins, outs;
  bind_kernel(grp, name, k, {kAcc}, &ins, &outs);
  PackedInput packed;
  const size_t w = size_t(std::find(grp.inputs.begin(), grp.inputs.end(), first.b) - grp.inputs.begin());
  KILN_CHECK(w < grp.inputs.size(), "the sibling GEMM's weights are not an input of its group");
  packed.input = w;
  packed.layout = first.b_layout;
  for (size_t s = 1; s < set.size(); ++s) {
    const Candidate& c = *cands_.at(set[s]);
    const size_t at = size_t(std::find(grp.inputs.begin(), grp.inputs.end(), c.b) - grp.inputs.begin());
    KILN_CHECK(at < grp.inputs.size(), "a sibling's weights are not an input of the joined group");
    packed.then.push_back({at, c.b_layout});
  }
  KILN_CHECK(packed.packed_numel() >= begin * g.k, "the joined panels are shorter than the joined columns");
  k.inputs[w] = std::make_shared<Buffer>(Buffer{k.inputs[w]->name, DType::Float32, {packed.packed_numel()}, Scope::Global});
  ins[first.b] = k.inputs[w];
  k.packed_inputs.push_back(std::move(packed));
  BufferMap m;
  for (size_t i : set) {
    const Candidate& c = *cands_.at(i);
    const LoopKernel& pk = c.cl->kernel();
    for (size_t j = 0; j < pk.inputs.size(); ++j) m[pk.inputs[j].get()] = BufferTarget{ins.at(c.grp->inputs[j]), nullptr};
    for (size_t j = 0; j < pk.outputs.size(); ++j) m[pk.outputs[j].get()] = BufferTarget{outs.at(c.grp->outputs[j]), nullptr};
  }
  k.body = rebind_buffers(block(std::move(body)), std::move(m));
  return k;
}

}  // namespace kiln::loop::detail
