#include "loop/affine.h"
#include "loop/row_jam.h"
#include "loop/register_epilogue.h"

#include <functional>
#include <set>
#include <unordered_map>

#include "support/error.h"

namespace kiln::loop::detail {

namespace {

// Names declared in `body` (Lets, at any depth) and the local buffers it allocates.
void collect(const std::vector<Stmt>& body, std::set<std::string>& names, std::vector<BufferPtr>& buffers) {
  for (const Stmt& s : body) {
    if (s->kind == StmtKind::Let) names.insert(s->var);
    if (s->kind == StmtKind::Allocate) buffers.push_back(s->buffer);
    collect(s->body, names, buffers);
    collect(s->else_body, names, buffers);
  }
}

// One copy of the body: variables and buffers renamed.
class Renamer {
 public:
  Renamer(const std::set<std::string>& names, const std::vector<BufferPtr>& buffers, const std::string& suffix) {
    for (const auto& n : names) vars_[n] = n + suffix;
    for (const auto& b : buffers) {
      auto c = std::make_shared<Buffer>(*b);
      c->name = b->name + suffix;
      bufs_[b.get()] = c;
    }
  }

  Expr expr(const Expr& e) {
    if (!e) return e;
    if (auto it = memo_.find(e.get()); it != memo_.end()) return it->second;
    Expr r = e;
    if (e->kind == ExprKind::Var) {
      if (auto it = vars_.find(e->name); it != vars_.end()) r = var(it->second, e->type);
    } else {
      auto copy = std::make_shared<ExprNode>(*e);
      bool changed = false;
      if (e->buffer) {
        if (auto it = bufs_.find(e->buffer.get()); it != bufs_.end()) copy->buffer = it->second, changed = true;
      }
      for (auto& a : copy->args) {
        Expr na = expr(a);
        changed = changed || na != a;
        a = na;
      }
      if (changed) r = copy;
    }
    memo_[e.get()] = r;
    return r;
  }

  // The statement itself renamed (its body is handled by the jammer).
  Stmt shallow(const Stmt& s) {
    auto c = std::make_shared<StmtNode>(*s);
    if ((s->kind == StmtKind::Let || s->kind == StmtKind::Assign) && vars_.count(s->var)) c->var = vars_.at(s->var);
    if (s->buffer)
      if (auto it = bufs_.find(s->buffer.get()); it != bufs_.end()) c->buffer = it->second;
    c->extent = expr(s->extent);
    c->index = expr(s->index);
    c->value = expr(s->value);
    c->cond = expr(s->cond);
    for (auto& a : c->call_args) a = expr(a);
    return c;
  }

  Stmt deep(const Stmt& s) {
    Stmt c = shallow(s);
    for (auto& b : c->body) b = deep(b);
    for (auto& b : c->else_body) b = deep(b);
    return c;
  }

 private:
  std::unordered_map<std::string, std::string> vars_;
  std::unordered_map<const Buffer*, BufferPtr> bufs_;
  std::unordered_map<const ExprNode*, Expr> memo_;
};

bool reads_memory(const Expr& e) {
  if (!e) return false;
  if (e->kind == ExprKind::Load) return true;
  for (const Expr& a : e->args)
    if (reads_memory(a)) return true;
  return false;
}

// Loops appear once with their bodies jammed, and so do conditions the copies share; allocations
// once per copy, nested around the jammed body; everything else once per copy, in copy order.
std::vector<Stmt> jam(const std::vector<Stmt>& list, std::vector<Renamer>& copies) {
  std::vector<Stmt> out;
  for (const Stmt& s : list) {
    switch (s->kind) {
      case StmtKind::For: {
        // One loop serves every copy only when its extent is the same in all of them.
        Stmt c = copies[0].shallow(s);
        for (auto& r : copies)
          KILN_CHECK(same_position(r.shallow(s)->extent, c->extent), "jam_loop: loop ", s->var,
                     " has a different extent in each copy");
        c->body = jam(s->body, copies);
        out.push_back(c);
        break;
      }
      case StmtKind::Block: out.push_back(block(jam(s->body, copies))); break;
      case StmtKind::If: {
        // A condition that is the same in every copy (a row kernel's `if (true)`, a guard on the
        // tile) is tested once around the jammed branches; a per-row guard (i < M) is not the
        // same, and its copies run one after the other.
        Stmt c = copies[0].shallow(s);
        bool shared = !reads_memory(c->cond);  // an earlier copy may write what it reads
        for (auto& r : copies) shared = shared && same_expr(r.shallow(s)->cond, c->cond);
        if (!shared) {
          for (auto& r : copies) out.push_back(r.deep(s));
          break;
        }
        c->body = jam(s->body, copies);
        c->else_body = jam(s->else_body, copies);
        out.push_back(c);
        break;
      }
      case StmtKind::Allocate: {
        std::vector<Stmt> inner = jam(s->body, copies);
        for (size_t k = copies.size(); k-- > 0;) {
          Stmt a = copies[k].shallow(s);
          a->body = std::move(inner);
          inner = {a};
        }
        for (auto& st : inner) out.push_back(st);
        break;
      }
      default:
        for (auto& r : copies) out.push_back(r.deep(s));
        break;
    }
  }
  return out;
}

}  // namespace

std::vector<Stmt> jam_loop(const std::string& v, int64_t extent, const std::vector<Stmt>& body, int copies,
                           ForKind kind) {
  KILN_CHECK(copies >= 2 && extent >= copies, "jam_loop: ", copies, " copies of a loop of ", extent);
  std::set<std::string> names;
  std::vector<BufferPtr> buffers;
  collect(body, names, buffers);
  KILN_CHECK(!names.count(v), "jam_loop: the body redeclares the loop variable ", v);
  names.insert(v);
  std::vector<Renamer> renamers;
  for (int k = 0; k < copies; ++k) renamers.emplace_back(names, buffers, "_r" + std::to_string(k));

  const std::string vb = v + "_b", vt = v + "_t";
  std::vector<Stmt> block_body;
  for (int k = 0; k < copies; ++k)
    block_body.push_back(let(v + "_r" + std::to_string(k), add(mul(var(vb), int_imm(copies)), int_imm(k))));
  for (auto& s : jam(body, renamers)) block_body.push_back(s);
  std::vector<Stmt> out = {for_loop(vb, int_imm(extent / copies), std::move(block_body), kind)};
  if (extent % copies) {
    std::vector<Stmt> tail = {let(v, add(int_imm(extent / copies * copies), var(vt)))};
    for (const auto& s : body) tail.push_back(s);
    out.push_back(for_loop(vt, int_imm(extent % copies), std::move(tail)));
  }
  return out;
}

}  // namespace kiln::loop::detail
