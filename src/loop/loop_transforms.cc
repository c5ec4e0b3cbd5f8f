// split, reorder, vectorize, unroll, parallelize (loop_transforms.h). Each transform checks
// everything before it builds anything, and builds new nodes along the path to the loop only.
#include "loop/loop_transforms.h"

#include <algorithm>

#include "loop/loop_transforms_internal.h"

namespace kiln::loop {

using namespace sched;

namespace sched {

namespace {

// Gives every loop inside `body` a fresh name (the remainder loop's copy of a body must not repeat
// the main copy's loop names: loops are addressed by name).
std::vector<Stmt> rename_loops(const std::vector<Stmt>& body, std::set<std::string>& used) {
  std::vector<Stmt> out;
  for (const auto& s : body) {
    if (s->kind == StmtKind::For) {
      const std::string n = fresh_name(s->var + "_t", used);
      auto c = std::make_shared<StmtNode>(*s);
      c->var = n;
      c->body = rename_loops(substitute(s->body, {{s->var, var(n)}}), used);
      out.push_back(c);
    } else if (!s->body.empty() || !s->else_body.empty()) {
      auto c = std::make_shared<StmtNode>(*s);
      c->body = rename_loops(s->body, used);
      c->else_body = rename_loops(s->else_body, used);
      out.push_back(c);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

bool defines(const std::vector<Stmt>& body, const std::string& name) {
  for (const auto& s : body) {
    if ((s->kind == StmtKind::Let || s->kind == StmtKind::For) && s->var == name) return true;
    if (defines(s->body, name) || defines(s->else_body, name)) return true;
  }
  return false;
}

}  // namespace

std::vector<Stmt> split_loop(const StmtNode& s, int64_t f, TailStrategy tail, ForKind outer_kind, ForKind inner_kind,
                             std::set<std::string>& used, SplitLoops& names) {
  KILN_CHECK(f >= 1 && s.kind == StmtKind::For, "bad split");
  if (defines(s.body, s.var)) refuse("loop ", s.var, " redefines its variable inside");
  const Expr e = s.extent;
  const int64_t ce = const_extent(s);
  names = SplitLoops{};
  names.outer = fresh_name(s.var + "_o", used);
  names.inner = fresh_name(s.var + "_i", used);
  const Expr fi = int_imm(f);
  const Expr idx = add(mul(var(names.outer), fi), var(names.inner));
  std::vector<Stmt> body = substitute(s.body, {{s.var, idx}});

  if ((ce >= 0 && ce % f == 0) || tail == TailStrategy::Guard) {
    const bool exact = ce >= 0 && ce % f == 0;
    const Expr outer_n = ce >= 0 ? int_imm((ce + f - 1) / f) : div_floor(add(e, int_imm(f - 1)), fi);
    if (!exact) body = {if_then(binary(BinOp::Lt, idx, e), std::move(body))};
    return {for_loop(names.outer, outer_n, {for_loop(names.inner, fi, std::move(body), inner_kind)}, outer_kind)};
  }
  // Remainder loop: full tiles, then the rest serially with its own copy of the body.
  const Expr main_n = ce >= 0 ? int_imm(ce / f) : div_floor(e, fi);
  const Expr tail_n = ce >= 0 ? int_imm(ce % f) : binary(BinOp::Sub, e, mul(main_n, fi));
  std::vector<Stmt> out;
  if (!(ce >= 0 && ce < f))
    out.push_back(for_loop(names.outer, main_n, {for_loop(names.inner, fi, std::move(body), inner_kind)}, outer_kind));
  else
    names.outer = names.inner = "";
  names.tail = fresh_name(s.var + "_t", used);
  std::vector<Stmt> tail_body = substitute(s.body, {{s.var, add(mul(main_n, fi), var(names.tail))}});
  out.push_back(for_loop(names.tail, tail_n, rename_loops(tail_body, used)));
  return out;
}

}  // namespace sched

namespace {

const StmtNode& loop_of(const Path& p) { return *p.back(); }

void require_serial(const StmtNode& l, const char* what) {
  if (l.for_kind != ForKind::Serial)
    refuse("cannot ", what, " loop ", l.var, ": it is already ", for_kind_name(l.for_kind));
}

void require_no_reduction(const Region& r, const StmtNode& l, const char* what) {
  if (r.has_call) refuse("cannot ", what, " loop ", l.var, ": it calls a micro-kernel whose accesses are unknown");
  if (!r.outer_assigns.empty())
    refuse("cannot ", what, " loop ", l.var, ": it accumulates into '", *r.outer_assigns.begin(),
           "' across iterations (a reduction)");
}

}  // namespace

SplitLoops split(LoopKernel& k, const std::string& loop, int64_t factor, TailStrategy tail) {
  if (factor < 1) refuse("split factor of loop ", loop, " must be >= 1, got ", factor);
  const Path p = find_loop(k, loop);
  const StmtNode& l = loop_of(p);
  const ForKind outer = l.for_kind == ForKind::Parallel ? ForKind::Parallel : ForKind::Serial;
  const ForKind inner =
      l.for_kind == ForKind::Vectorized || l.for_kind == ForKind::Unrolled ? l.for_kind : ForKind::Serial;
  auto used = names_in(k);
  SplitLoops names;
  auto stmts = split_loop(l, factor, tail, outer, inner, used, names);
  k.body = replace_node(p, std::move(stmts));
  return names;
}

void reorder(LoopKernel& k, const std::vector<std::string>& order) {
  if (order.size() < 2) refuse("reorder needs at least two loops");
  std::set<std::string> wanted(order.begin(), order.end());
  if (wanted.size() != order.size()) refuse("reorder names a loop twice");
  // The outermost of the named loops is the one with the shortest path.
  std::vector<Path> paths;
  for (const auto& n : order) paths.push_back(find_loop(k, n));
  const Path& top = *std::min_element(paths.begin(), paths.end(),
                                      [](const Path& a, const Path& b) { return a.size() < b.size(); });
  std::vector<const StmtNode*> nest = {top.back().get()};
  while (nest.size() < order.size()) {
    const StmtNode& cur = *nest.back();
    if (cur.body.size() != 1 || cur.body[0]->kind != StmtKind::For || !wanted.count(cur.body[0]->var))
      refuse("loops ", cur.var, " and the rest of {", [&] {
        std::string s;
        for (const auto& n : order) s += (s.empty() ? "" : ", ") + n;
        return s;
      }(), "} are not a perfect nest");
    nest.push_back(cur.body[0].get());
  }
  for (const auto* l : nest)
    if (mentions(l->extent, wanted)) refuse("extent of loop ", l->var, " depends on another loop of the nest");
  for (size_t i = 0; i < nest.size(); ++i)
    if (nest[i]->var != order[i] &&
        (nest[i]->for_kind == ForKind::Parallel || nest[i]->for_kind == ForKind::Vectorized))
      refuse("cannot move loop ", nest[i]->var, ": it is ", for_kind_name(nest[i]->for_kind));
  const Region r = analyze_region(top.back());
  require_no_reduction(r, *nest[0], "reorder");
  if (std::string why = independence_violation(r, nest); !why.empty()) refuse("cannot reorder: ", why);

  std::vector<Stmt> body = nest.back()->body;
  for (size_t i = order.size(); i-- > 0;) {
    const StmtNode* l = *std::find_if(nest.begin(), nest.end(), [&](const StmtNode* n) { return n->var == order[i]; });
    auto c = std::make_shared<StmtNode>(*l);
    c->body = std::move(body);
    body = {c};
  }
  k.body = replace_node(top, std::move(body));
}

SplitLoops vectorize(LoopKernel& k, const std::string& loop, int width) {
  if (width < 2) refuse("vector width of loop ", loop, " must be >= 2, got ", width);
  const Path p = find_loop(k, loop);
  const StmtNode& l = loop_of(p);
  require_serial(l, "vectorize");
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i]->kind == StmtKind::For && p[i]->for_kind == ForKind::Vectorized)
      refuse("cannot vectorize loop ", loop, ": it is inside vectorized loop ", p[i]->var);
  const Region r = analyze_region(p.back());
  if (r.loops.size() > 1) refuse("cannot vectorize loop ", loop, ": it is not innermost (loop ", r.loops[1]->var, " is inside)");
  require_no_reduction(r, l, "vectorize");
  const AffineScope scope = r.scope();
  for (const auto& a : r.accesses) {
    if (!a.store) continue;
    std::string why;
    auto f = affine_form(a.index, scope, &why);
    if (!f) refuse("cannot vectorize loop ", loop, ": store to ", a.buffer->name, ": ", why);
    if (f->coef_of(loop) != 1)
      refuse("cannot vectorize loop ", loop, ": store ", a.buffer->name, "[", print_expr(a.index),
             "] is not contiguous in ", loop, " (coefficient ", f->coef_of(loop), ")");
  }
  if (std::string why = independence_violation(r, {&l}); !why.empty()) refuse("cannot vectorize: ", why);

  const int64_t ce = const_extent(l);
  if (ce >= 0 && ce <= width) {
    k.body = replace_node(p, {with_kind(p.back(), ForKind::Vectorized)});
    return SplitLoops{"", loop, ""};
  }
  auto used = names_in(k);
  SplitLoops names;
  auto stmts = split_loop(l, width, TailStrategy::RemainderLoop, ForKind::Serial, ForKind::Vectorized, used, names);
  k.body = replace_node(p, std::move(stmts));
  return names;
}

SplitLoops unroll(LoopKernel& k, const std::string& loop, int factor) {
  if (factor < 1) refuse("unroll factor of loop ", loop, " must be >= 1, got ", factor);
  const Path p = find_loop(k, loop);
  const StmtNode& l = loop_of(p);
  require_serial(l, "unroll");
  const int64_t ce = const_extent(l);
  if (ce >= 0 && ce <= factor) {
    k.body = replace_node(p, {with_kind(p.back(), ForKind::Unrolled)});
    return SplitLoops{"", loop, ""};
  }
  auto used = names_in(k);
  SplitLoops names;
  auto stmts = split_loop(l, factor, TailStrategy::Guard, ForKind::Serial, ForKind::Unrolled, used, names);
  k.body = replace_node(p, std::move(stmts));
  return names;
}

void parallelize(LoopKernel& k, const std::string& loop) {
  const Path p = find_loop(k, loop);
  const StmtNode& l = loop_of(p);
  require_serial(l, "parallelize");
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i]->kind == StmtKind::For)
      refuse("cannot parallelize loop ", loop, ": it is inside loop ", p[i]->var,
             " (the C emitter forks threads only at the outermost loop)");
  const Region r = analyze_region(p.back());
  for (const auto* inner : r.loops)
    if (inner->for_kind == ForKind::Parallel)
      refuse("cannot parallelize loop ", loop, ": loop ", inner->var, " inside it is parallel (one parallel level)");
  require_no_reduction(r, l, "parallelize");
  if (std::string why = independence_violation(r, {&l}); !why.empty()) refuse("cannot parallelize: ", why);
  k.body = replace_node(p, {with_kind(p.back(), ForKind::Parallel)});
}

}  // namespace kiln::loop
