// Staging a conv's input once per call (lower_contraction_implicit.cc's implicit GEMM and im2col
// forms, lower_conv_stencil.cc, lower_contraction_rows.cc): zero-padded phase planes, the planar
// (2-D) view of 1-D and foldable 3-D convs, and a plain copy of a computed input.
#include <algorithm>
#include <unordered_set>

#include "kernels/microkernel.h"
#include "loop/affine.h"
#include "loop/contraction_lowering.h"
#include "support/error.h"

namespace kiln::loop::detail {
namespace {

// Whether one operation costs more than a few instructions: a transcendental function, a
// division or a call (SiLU's sigmoid, HardSwish's division).
bool costly_op(const ExprNode& e) {
  if (e.kind == ExprKind::Call) return true;
  if (e.kind == ExprKind::Binary && e.bin == BinOp::Div && is_float(e.type)) return true;
  if (e.kind == ExprKind::Unary) switch (e.un) {
      case UnOp::Neg: case UnOp::Not: case UnOp::Abs: case UnOp::Floor: case UnOp::Ceil: case UnOp::Round:
      case UnOp::IsNaN: case UnOp::IsInf:
        return false;
      default:
        return true;
    }
  return false;
}

// Whether computing `e` costs more than a few instructions per element (costly_op anywhere in it).
bool costly(const Expr& e) {
  if (!e || e->kind == ExprKind::Load) return false;  // a load's index is address arithmetic
  if (costly_op(*e)) return true;
  for (const Expr& a : e->args)
    if (costly(a)) return true;
  return false;
}

// The operations an element of a staged value costs: the distinct nodes of its expressions (a
// DAG: a shared part counts once), leaves and affine index arithmetic (Int64 + - *) left out, a
// transcendental function, call or float division as 8 (costly). A copy is 1 (its load); a
// computed input's arithmetic, and the index arithmetic of its gathers, is counted: RAFT's
// correlation lookup (four GridSamples feeding a 1x1 conv) stages 196 x 256 elements of about
// 100 operations each, which the element count alone kept on one thread (0.72 ms of a 3 ms
// iteration at 2 threads).
void count_ops(const Expr& e, std::unordered_set<const ExprNode*>& seen) {
  if (!e || !seen.insert(e.get()).second) return;
  for (const Expr& a : e->args) count_ops(a, seen);
}
int64_t staged_ops(const std::vector<Stmt>& body) {
  std::unordered_set<const ExprNode*> seen;
  std::vector<const std::vector<Stmt>*> lists = {&body};
  for (size_t i = 0; i < lists.size(); ++i)
    for (const Stmt& st : *lists[i]) {
      if (!st) continue;
      if (st->kind == StmtKind::Store || st->kind == StmtKind::Let || st->kind == StmtKind::Assign) count_ops(st->value, seen);
      lists.push_back(&st->body);
      lists.push_back(&st->else_body);
    }
  int64_t ops = 0;
  for (const ExprNode* n : seen) {
    const bool leaf = n->kind == ExprKind::IntImm || n->kind == ExprKind::FloatImm || n->kind == ExprKind::Var;
    const bool affine = n->kind == ExprKind::Binary && n->type == DType::Int64 &&
                        (n->bin == BinOp::Add || n->bin == BinOp::Sub || n->bin == BinOp::Mul);
    if (leaf || affine) continue;
    ops += costly_op(*n) ? 8 : 1;
  }
  return std::max<int64_t>(1, ops);
}

// A staging loop over `count` items of `elements` elements in all is parallel when its work (the
// elements times their operations, staged_ops) reaches 2^16: a plain copy from 2^16 elements,
// as before operations were counted.
bool parallel_staging(int64_t count, int64_t elements, const std::vector<Stmt>& body) {
  return count > 1 && elements * staged_ops(body) >= (int64_t(1) << 16);
}

// Whether every load in `e` reads consecutive channels (the channel variable's coefficient in its
// index 1) or one value for all channels (0), and some load of a tensor that also changes along the
// columns reads them consecutively: a computed conv input whose source keeps the channels
// innermost (ConvNeXt's LayerNorm before its downsampling conv, computed channels-last and
// transposed). A load whose index is not affine in the three variables answers no.
void channel_coefficients(const Expr& e, const std::string& ch, const std::string& col, bool& ok, bool& contiguous) {
  if (!e || !ok) return;
  if (e->kind == ExprKind::Load) {
    const AffineScope scope{{ch, col, "kiln_sy"}, {}};
    const auto f = affine_form(e->args[0], scope);
    if (!f) {
      ok = false;
      return;
    }
    const int64_t c = f->coef_of(ch);
    if (c != 0 && c != 1) ok = false;
    if (c == 1 && f->coef_of(col) != 0) contiguous = true;
  }
  for (const Expr& a : e->args) channel_coefficients(a, ch, col, ok, contiguous);
}

}  // namespace

std::pair<int64_t, int64_t> phase_interior(int64_t s, int64_t p, int64_t pad, int64_t extent, int64_t count) {
  int64_t lo = 0;
  while (lo < count && lo * s + p - pad < 0) ++lo;
  int64_t hi = lo;
  while (hi < count && hi * s + p - pad < extent) ++hi;
  return {lo, hi};
}

// The conv input staged into zero-padded phase planes (implicit_conv_view's comment): plane
// (n, ci, slot) at ((n · c + ci) · slots + slot) · plane; row r of phase (py, px) is padded row
// r · sy + py (input row r · sy + py − pt); kernel position kpos reads slot slot_of[kpos] at offset
// (⌊ky·dy / sy⌋, ⌊kx·dx / sx⌋). Only the phases some kernel position reads are staged.
ContractionLowering::PhasePlanes ContractionLowering::phase_geometry() const {
  const nn::WindowGeometry g = planar_geometry();
  const int64_t ho = g.out[0], wo = g.out[1], kh = g.kernel[0], kw = g.kernel[1];
  const int64_t sy = g.stride[0], sx = g.stride[1], dy = g.dilation[0], dx = g.dilation[1];
  const int64_t hp = (ho - 1) * sy + (kh - 1) * dy + 1, wp = (wo - 1) * sx + (kw - 1) * dx + 1;
  PhasePlanes r;
  r.hq = (hp + sy - 1) / sy;
  r.wq = (wp + sx - 1) / sx;
  r.plane = r.hq * r.wq;
  r.slot_of.assign(size_t(kh * kw), 0);
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx) {
      std::pair<int64_t, int64_t> ph{(ky * dy) % sy, (kx * dx) % sx};
      auto at = std::find(r.phases.begin(), r.phases.end(), ph);
      if (at == r.phases.end()) at = r.phases.insert(r.phases.end(), ph);
      r.slot_of[size_t(ky * kw + kx)] = int64_t(at - r.phases.begin());
    }
  r.slots = int64_t(r.phases.size());
  r.offset.assign(size_t(kh * kw), 0);
  for (int64_t kpos = 0; kpos < kh * kw; ++kpos)
    r.offset[size_t(kpos)] = r.slot_of[size_t(kpos)] * r.plane + ((kpos / kw) * dy / sy) * r.wq + (kpos % kw) * dx / sx;
  return r;
}

// A 1-D conv as a 2-D one over a single row (a leading spatial dim of extent 1, kernel 1, stride 1,
// no padding), so that the phase planes serve both; a 2-D conv's geometry as it is; a 3-D conv
// that planar_fold() turns into a 2-D one, that 2-D geometry.
nn::WindowGeometry ContractionLowering::planar_geometry() const {
  if (geo_.rank() == 3) {
    KILN_CHECK(planar_fold() != PlanarFold::None, "phase planes: a 3-D conv with a window along every axis reached them");
    const bool depth = planar_fold() == PlanarFold::DepthIntoBatch;
    nn::WindowGeometry g;
    if (depth) {  // the (H, W) planes of every depth position
      g.in = {geo_.in[1], geo_.in[2]};
      g.kernel = {geo_.kernel[1], geo_.kernel[2]};
      g.stride = {geo_.stride[1], geo_.stride[2]};
      g.dilation = {geo_.dilation[1], geo_.dilation[2]};
      g.pad_begin = {geo_.pad_begin[1], geo_.pad_begin[2]};
      g.pad_end = {geo_.pad_end[1], geo_.pad_end[2]};
      g.out = {geo_.out[1], geo_.out[2]};
    } else {  // (D, H·W): the window runs along D only
      g.in = {geo_.in[0], geo_.in[1] * geo_.in[2]};
      g.kernel = {geo_.kernel[0], 1};
      g.stride = {geo_.stride[0], 1};
      g.dilation = {geo_.dilation[0], 1};
      g.pad_begin = {geo_.pad_begin[0], 0};
      g.pad_end = {geo_.pad_end[0], 0};
      g.out = {geo_.out[0], geo_.out[1] * geo_.out[2]};
    }
    return g;
  }
  KILN_CHECK(geo_.rank() == 1 || geo_.rank() == 2, "phase planes are 1-D, 2-D or folded 3-D; a ", geo_.rank(),
             "-D conv reached them");
  if (geo_.rank() == 2) return geo_;
  nn::WindowGeometry g = geo_;
  for (Shape* s : {&g.in, &g.kernel, &g.stride, &g.dilation, &g.out}) s->insert(s->begin(), 1);
  for (Shape* s : {&g.pad_begin, &g.pad_end}) s->insert(s->begin(), 0);
  return g;
}

// A 3-D conv (video models: R(2+1)D's (1, 3, 3) spatial and (3, 1, 1) temporal convs) whose
// window is trivial along some axes is a 2-D conv: with kernel 1, stride 1 and no padding along
// H and W, over (D, H·W) (row-major, the same memory); else with them along D, over the (H, W)
// plane of every depth position, the depth folded into the plane batch. In the im2col form it
// packed a gathered panel per tile (45 GFLOP/s on R(2+1)D's (1, 3, 3) convs).
ContractionLowering::PlanarFold ContractionLowering::planar_fold() const {
  if (geo_.rank() != 3) return PlanarFold::None;
  auto trivial = [&](size_t d) {
    return geo_.kernel[d] == 1 && geo_.stride[d] == 1 && geo_.pad_begin[d] == 0 && geo_.pad_end[d] == 0;
  };
  if (trivial(1) && trivial(2)) return PlanarFold::MergeHW;
  if (trivial(0)) return PlanarFold::DepthIntoBatch;
  return PlanarFold::None;
}

// Planes in the batch: the images, times the depth positions when they are folded into it.
int64_t ContractionLowering::planar_images() const {
  const int64_t n = c_->input(0)->shape()[0];
  return planar_fold() == PlanarFold::DepthIntoBatch ? n * geo_.in[0] : n;
}

// Element (b, c, y, x) of the planar view of `v` (the conv's input or output, [N, C, spatial...]):
// b the plane batch (planar_images), (y, x) a position of the planar geometry.
Index ContractionLowering::planar_index(const Value* v, const Expr& b, const Expr& c, const Expr& y,
                                        const Expr& x) const {
  const Shape& s = v->shape();
  if (s.size() == 3) return Index::from_dims(s, {b, c, x});  // 1-D: the single row's columns
  if (s.size() == 4) return Index::from_dims(s, {b, c, y, x});
  KILN_CHECK(s.size() == 5, "planar_index: a rank-", s.size(), " conv tensor");
  if (planar_fold() == PlanarFold::MergeHW)
    return Index::from_dims(s, {b, c, y, div_floor(x, int_imm(s[4])), mod(x, int_imm(s[4]))});
  return Index::from_dims(s, {div_floor(b, int_imm(s[2])), c, mod(b, int_imm(s[2])), y, x});
}

// Each phase plane row is split into its zero border and the interior copied without a clamp or
// a select, so that the copy vectorises (a stride-2 phase reads every other input element, which
// GCC does with permutes; with a clamped index per element it was a gather: MobileNetV2's strided
// depthwise convs spent more time staging than computing).
std::vector<Stmt> ContractionLowering::stage_channel_phases(const PhasePlanes& ph, const BufferPtr& buf, const Expr& n,
                                                            const Expr& ch, const Expr& base) {
  const Value* x = c_->input(0);
  const nn::WindowGeometry g = planar_geometry();
  const int64_t h = g.in[0], wd = g.in[1], sy = g.stride[0], sx = g.stride[1];
  const int64_t pt = g.pad_begin[0], pl = g.pad_begin[1];
  std::vector<Stmt> per_phase;
  const Expr row = var("kiln_xy"), q = var("kiln_xx");
  // A costly computed input read by every phase (a SiLU between a 1x1 conv and a depthwise conv),
  // whose channel plane fits Schedule::stage_plane_bytes: the plane is computed once, in order, as
  // one run of h · w elements (whole vectors but the last), and the phases copy from it. Row by
  // row (below, and per phase row for stride 1), a 28-wide row was a vector and a scalar rest of
  // the SiLU, and a stride-2 conv's phases read the row right after its stores, which the store
  // buffer could not forward: EfficientNet-B0's 40 -> 240 expansion + 3x3 stride-2 depthwise over
  // 28x28 ran 1.4x the six kernels apart, 64 % of it in the staging (perf annotate: the reloads
  // of the row); as a plane 0.58 of its time. Its 80 -> 480 + 3x3 stride-1 over 14x14 (rows of 14,
  // all rest) 0.80.
  const Expr pos = var("kiln_xp");
  const Expr plane_value = to_compute(L_.value_at(x, planar_index(x, n, ch, div_floor(pos, int_imm(wd)), mod(pos, int_imm(wd)))));
  const bool by_plane = ph.slots == sy * sx && h * wd * int64_t(sizeof(float)) <= sched_.stage_plane_bytes &&
                        costly(plane_value);
  const BufferPtr xplane =
      by_plane ? std::make_shared<Buffer>(Buffer{"kiln_xplane", DType::Float32, {h * wd}, Scope::Local}) : nullptr;
  if (xplane)
    per_phase.push_back(for_loop("kiln_xp", int_imm(h * wd), {store(xplane, pos, plane_value)}, ForKind::Vectorized));
  // Phases of one row phase py read the same input rows (a stride-2 conv's (py, 0) and (py, 1)):
  // they are filled in one pass over those rows, each row's column phases one after the other,
  // so the input is read in order, once (phase by phase, every other input row was read once per
  // column phase: MobileNetV2's stride-2 depthwise stencil over 112x112 0.385 -> 0.366 ms).
  std::vector<bool> done(size_t(ph.slots), false);
  for (int64_t first = 0; first < ph.slots; ++first) {
    if (done[size_t(first)]) continue;
    const int64_t py = ph.phases[size_t(first)].first;
    const auto [r0, r1] = phase_interior(sy, py, pt, h, ph.hq);
    std::vector<int64_t> slots;
    for (int64_t sl = first; sl < ph.slots; ++sl)
      if (ph.phases[size_t(sl)].first == py) {
        slots.push_back(sl);
        done[size_t(sl)] = true;
      }
    // Zeros over columns [from, from + count) of row `r` of the phase plane at `plane`.
    auto zeros = [&](const Expr& plane, const Expr& r, int64_t from, int64_t count) -> Stmt {
      return for_loop("kiln_xx", int_imm(count),
                      {store(buf, add(plane, add(mul(r, int_imm(ph.wq)), add(q, int_imm(from)))), float_imm(0))},
                      ForKind::Vectorized);
    };
    auto zero_rows = [&](int64_t from, int64_t count) {
      if (count <= 0) return;
      std::vector<Stmt> body;
      for (int64_t sl : slots) body.push_back(zeros(add(base, int_imm(sl * ph.plane)), add(row, int_imm(from)), 0, ph.wq));
      per_phase.push_back(for_loop("kiln_xy", int_imm(count), std::move(body)));
    };
    zero_rows(0, r0);
    if (r1 > r0) {
      const Expr r = add(row, int_imm(r0));
      const Expr y = sub(add(mul(r, int_imm(sy)), int_imm(py)), int_imm(pt));
      // A costly computed input (a SiLU between a 1x1 and a strided depthwise conv) whose column
      // phases together read every column: the row is computed once in order into a local row,
      // which the phases then copy from with their stride. Computed per phase, every value was
      // evaluated from strided loads (permutes around each vector): EfficientNet's 16 -> 96
      // expansion + stride-2 depthwise over 112x112 spent 0.64 of its 1.29 ms there.
      const Expr col = var("kiln_xc");
      const bool by_row = !xplane && sx > 1 && int64_t(slots.size()) == sx &&
                          costly(to_compute(L_.value_at(x, planar_index(x, n, ch, y, col))));
      BufferPtr line = by_row ? std::make_shared<Buffer>(Buffer{"kiln_xline", DType::Float32, {wd}, Scope::Local}) : nullptr;
      std::vector<Stmt> body;
      if (line)
        body.push_back(for_loop("kiln_xc", int_imm(wd),
                                {store(line, col, to_compute(L_.value_at(x, planar_index(x, n, ch, y, col))))},
                                ForKind::Vectorized));
      for (int64_t sl : slots) {
        const int64_t px = ph.phases[size_t(sl)].second;
        const auto [q0, q1] = phase_interior(sx, px, pl, wd, ph.wq);
        const Expr plane = add(base, int_imm(sl * ph.plane));
        if (q0 > 0) body.push_back(zeros(plane, r, 0, q0));
        if (q1 > q0) {
          const Expr qq = add(q, int_imm(q0));
          const Expr xx = sub(add(mul(qq, int_imm(sx)), int_imm(px)), int_imm(pl));
          const Expr val = xplane ? load(xplane, add(mul(y, int_imm(wd)), xx))
                           : line ? load(line, xx)
                                  : to_compute(L_.value_at(x, planar_index(x, n, ch, y, xx)));
          body.push_back(for_loop("kiln_xx", int_imm(q1 - q0),
                                  {store(buf, add(plane, add(mul(r, int_imm(ph.wq)), qq)), val)}, ForKind::Vectorized));
        }
        if (ph.wq > q1) body.push_back(zeros(plane, r, q1, ph.wq - q1));
      }
      if (line) body = {allocate(line, std::move(body))};
      per_phase.push_back(for_loop("kiln_xy", int_imm(r1 - r0), std::move(body)));
    }
    zero_rows(std::max(r0, r1), ph.hq - std::max(r0, r1));
  }
  if (xplane) per_phase = {allocate(xplane, std::move(per_phase))};
  return per_phase;
}

// The conv input, computed by the group, in a scratch buffer of its shape (row-major), filled
// once per call by stage_input_fill.
BufferPtr ContractionLowering::stage_input() const {
  return std::make_shared<Buffer>(Buffer{"kiln_xin", DType::Float32, {shape_numel(c_->input(0)->shape())}, Scope::Local});
}

// One pass over the input: (batch, channel) planes in parallel when there are enough elements,
// each plane's positions vectorised along its last dim.
Stmt ContractionLowering::stage_input_fill(const BufferPtr& buf) {
  const Value* x = c_->input(0);
  const Shape& xs = x->shape();
  const int64_t planes = xs[0] * xs[1], plane = shape_numel(xs) / std::max<int64_t>(1, planes);
  const Expr t = var("kiln_xt");
  std::vector<Expr> dims = {div_floor(t, int_imm(xs[1])), mod(t, int_imm(xs[1]))};
  for (size_t d = 2; d < xs.size(); ++d) dims.push_back(var("kiln_xd" + std::to_string(d)));
  Expr flat = t;
  for (size_t d = 2; d < xs.size(); ++d) flat = add(mul(flat, int_imm(xs[d])), dims[d]);
  Stmt body = store(buf, flat, to_compute(L_.value_at(x, Index::from_dims(xs, dims))));
  for (size_t d = xs.size(); d-- > 2;)
    body = for_loop("kiln_xd" + std::to_string(d), int_imm(xs[d]), {body},
                    d + 1 == xs.size() ? ForKind::Vectorized : ForKind::Serial);
  const bool par = parallel_staging(planes, planes * plane, {body});
  return for_loop("kiln_xt", int_imm(planes), {body}, par ? ForKind::Parallel : ForKind::Serial);
}

// Whether the phase planes can be staged with the channels innermost: the conv reads a kernel
// input along unit-stride columns, so each phase row's interior is a (channels × columns) block of
// the input, one transposing copy; or its input is computed from values that lie channels
// innermost (channel_coefficients), evaluated along the channels position by position. (Other
// convs keep channel planes: a kernel input's strided columns, or a computed input from channel
// planes, would be read c floats apart for every float; not built.)
bool ContractionLowering::channels_inner_staging() {
  if (planar_fold() == PlanarFold::DepthIntoBatch) return false;
  const Value* x = c_->input(0);
  if (is_group_input(x)) return planar_geometry().stride[1] == 1;
  bool ok = true, contiguous = false;
  channel_coefficients(to_compute(L_.value_at(x, planar_index(x, int_imm(0), var("kiln_sc"), var("kiln_sy"), var("kiln_sx")))),
                       "kiln_sc", "kiln_sx", ok, contiguous);
  return ok && contiguous;
}

// The channels-innermost fill: per phase row of every image, the zero border as runs of cstride · count
// floats and the interior as one transposing copy (kernels::kTransposeF32) from a kernel input's
// channel planes, or a computed input's values position by position, vectorised along the
// channels; the rows of an image in parallel.
Stmt ContractionLowering::stage_channels_inner(const PhasePlanes& ph) {
  const Value* x = c_->input(0);
  const nn::WindowGeometry g = planar_geometry();
  const int64_t nb = planar_images(), c = x->shape()[1], h = g.in[0], wd = g.in[1], sy = g.stride[0], sx = g.stride[1];
  const int64_t pt = g.pad_begin[0], pl = g.pad_begin[1];
  const int64_t spatial = shape_numel(x->shape()) / (x->shape()[0] * c);
  const bool computed = !is_group_input(x);
  const BufferPtr in = computed ? nullptr : L_.input_buffers_.at(x);
  const int64_t cs = ph.cstride;
  const Expr t = var("kiln_xt"), e = var("kiln_xe");
  std::vector<Stmt> fills;
  for (int64_t sl = 0; sl < ph.slots; ++sl) {
    const int64_t py = ph.phases[size_t(sl)].first, px = ph.phases[size_t(sl)].second;
    const auto [r0, r1] = phase_interior(sy, py, pt, h, ph.hq);
    const auto [q0, q1] = phase_interior(sx, px, pl, wd, ph.wq);
    // Phase row `row` of image n starts at float `row0` of the buffer.
    auto row0 = [&](const Expr& n, const Expr& row) {
      return mul(add(mul(n, int_imm(ph.slots * ph.plane)), add(int_imm(sl * ph.plane), mul(row, int_imm(ph.wq)))),
                 int_imm(cs));
    };
    auto zeros = [&](const Expr& at, int64_t count) {
      return for_loop("kiln_xe", int_imm(count), {store(ph.buffer, add(at, e), float_imm(0))}, ForKind::Vectorized);
    };
    // Whole rows [from, to) of every image: zeros.
    auto zero_rows = [&](int64_t from, int64_t to) {
      if (to <= from) return;
      fills.push_back(for_loop("kiln_xt", int_imm(nb * (to - from)),
                               {zeros(row0(div_floor(t, int_imm(to - from)), add(mod(t, int_imm(to - from)), int_imm(from))),
                                      ph.wq * cs)}));
    };
    zero_rows(0, r0);
    if (r1 > r0) {
      const int64_t rows = r1 - r0;
      const Expr n = div_floor(t, int_imm(rows)), r = add(mod(t, int_imm(rows)), int_imm(r0));
      const Expr y = sub(add(mul(r, int_imm(sy)), int_imm(py)), int_imm(pt));
      std::vector<Stmt> body;
      if (q0 > 0) body.push_back(zeros(row0(n, r), q0 * cs));
      if (q1 > q0 && computed) {
        const Expr q = add(var("kiln_xq"), int_imm(q0)), ch = var("kiln_xc");
        const Expr xx = sub(add(mul(q, int_imm(sx)), int_imm(px)), int_imm(pl));
        body.push_back(for_loop(
            "kiln_xq", int_imm(q1 - q0),
            {for_loop("kiln_xc", int_imm(c),
                      {store(ph.buffer, add(add(row0(n, r), mul(q, int_imm(cs))), ch),
                             to_compute(L_.value_at(x, planar_index(x, n, ch, y, xx))))},
                      ForKind::Vectorized)}));
      } else if (q1 > q0) {
        const Expr src = add(mul(n, int_imm(c * spatial)), add(mul(y, int_imm(wd)), int_imm(q0 - pl)));
        body.push_back(call_stmt(kernels::kTransposeF32, {address(ph.buffer, add(row0(n, r), int_imm(q0 * cs))), int_imm(cs),
                                                          address(in, src), int_imm(spatial), int_imm(c), int_imm(q1 - q0)}));
      }
      if (ph.wq > q1) body.push_back(zeros(add(row0(n, r), int_imm(q1 * cs)), (ph.wq - q1) * cs));
      const bool par = parallel_staging(nb * rows, nb * rows * ph.wq * cs, body);
      fills.push_back(for_loop("kiln_xt", int_imm(nb * rows), std::move(body), par ? ForKind::Parallel : ForKind::Serial));
    }
    zero_rows(std::max(r0, r1), ph.hq);
  }
  return block(std::move(fills));
}

// Channels-innermost planes that are a kernel input already: a stride-1 conv whose input is the
// interior of a kernel input P = Pad(..., the conv's own padding, +0) — element (n, c, y, x) at
// ((n · hq + y + pt) · wq + x + pl) · cs + c, P's shape [N, hq, wq, cs] the phase plane's — so
// P's border is the padding the planes would hold: a channels-last value with this conv's
// padding around it (fusion/assign_layouts.h), read back through a Transpose and a Slice. Nothing
// is staged; the buffer is bound as A with its channel stride cs (≥ c; the pass pads the channels
// as channels_inner_stride asks).
std::optional<ContractionLowering::PhasePlanes> ContractionLowering::planes_in_place() {
  const Value* x = c_->input(0);
  if (is_group_input(x) || geo_.rank() != 2 || planar_fold() != PlanarFold::None) return std::nullopt;
  if (geo_.stride[0] != 1 || geo_.stride[1] != 1) return std::nullopt;
  PhasePlanes r = phase_geometry();
  if (r.slots != 1) return std::nullopt;
  const Expr e = to_compute(L_.value_at(x, planar_index(x, var("kiln_in"), var("kiln_ic"), var("kiln_iy"), var("kiln_ix"))));
  if (e->kind != ExprKind::Load || !e->buffer || e->type != DType::Float32) return std::nullopt;
  const Value* padded = nullptr;
  for (const auto& [v, b] : L_.input_buffers_)
    if (b.get() == e->buffer.get() && v != c_->output(0)) padded = v;
  const int64_t nb = x->shape()[0], c = x->shape()[1], pt = geo_.pad_begin[0], pl = geo_.pad_begin[1];
  const Node* pad = padded ? padded->producer() : nullptr;
  const auto begin = pad ? zero_pad_begin(*pad) : std::nullopt;
  if (!begin || *begin != std::vector<int64_t>{0, pt, pl, 0} || padded->shape().size() != 4) return std::nullopt;
  const int64_t cs = padded->shape()[3];
  if (padded->shape() != Shape{nb, r.hq, r.wq, cs} || cs < c) return std::nullopt;
  const auto f = affine_form(e->args[0], AffineScope{{"kiln_in", "kiln_ic", "kiln_iy", "kiln_ix"}, {}});
  if (!f || f->constant != (pt * r.wq + pl) * cs || f->coef_of("kiln_ic") != 1 || f->coef_of("kiln_ix") != cs ||
      f->coef_of("kiln_iy") != r.wq * cs || (nb > 1 && f->coef_of("kiln_in") != r.plane * cs))
    return std::nullopt;
  for (const auto& [key, coef] : f->coef)
    if (key != "kiln_ic" && key != "kiln_ix" && key != "kiln_iy" && key != "kiln_in") return std::nullopt;
  r.channels_inner = true;
  r.cstride = cs;
  r.buffer = L_.input_buffers_.at(padded);
  return r;
}

ContractionLowering::PhasePlanes ContractionLowering::stage_phase_planes(bool channels_inner) {
  if (channels_inner)
    if (auto r = planes_in_place()) return *r;
  const int64_t nb = planar_images(), c = c_->input(0)->shape()[1];
  PhasePlanes r = phase_geometry();
  r.channels_inner = channels_inner;
  r.cstride = channels_inner ? channels_inner_stride(c) : c;
  const int64_t total = nb * r.cstride * r.slots * r.plane;
  r.buffer = std::make_shared<Buffer>(Buffer{"kiln_xph", DType::Float32, {total}, Scope::Local});
  if (channels_inner) {
    KILN_CHECK(channels_inner_staging(), "phase planes: channels innermost for a conv that cannot stage them so");
    r.fill = stage_channels_inner(r);
    return r;
  }
  const Expr t = var("kiln_xt");
  std::vector<Stmt> per_phase = stage_channel_phases(r, r.buffer, div_floor(t, int_imm(c)), mod(t, int_imm(c)),
                                                     mul(t, int_imm(r.slots * r.plane)));
  const bool par = parallel_staging(nb * c, total, per_phase);
  r.fill = for_loop("kiln_xt", int_imm(nb * c), std::move(per_phase), par ? ForKind::Parallel : ForKind::Serial);
  return r;
}

}  // namespace kiln::loop::detail
