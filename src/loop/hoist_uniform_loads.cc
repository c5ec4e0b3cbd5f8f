// Loads of one fixed element of a kernel input (a Clip's bounds, a PRelu's single slope, a scalar
// scale) read on every iteration of the loops around them. They are loop-invariant, but whether GCC
// vectorises a loop holding `v < lo[0] ? lo[0] : v` depends on what else the kernel does: in the
// pointwise -> depthwise kernel (lower_pointwise_depthwise.cc) it if-converted the Clip of the
// staging loop and then gave up on the same Clip in the epilogue ("control flow in loop"), which
// ran scalar: MobileNetV2's 24 -> 144 pair over 56x56 0.68 ms, 0.42 ms with the bounds in locals.
// So each such load becomes a Let at the start of the outermost loop that reads it, and the loads
// inside read the local: the loop bodies then hold only arithmetic and selects of registers.
//
// Only inputs (never written by the kernel) and constant indices inside the buffer: the load is
// then legal anywhere in the kernel, so moving it out of a branch cannot fault.
#include <map>
#include <set>

#include "loop/loop_transforms.h"

namespace kiln::loop {

namespace {

class UniformLoads {
 public:
  UniformLoads(const LoopKernel& k, int& next) : next_(next) {
    for (const BufferPtr& b : k.inputs) inputs_.insert(b.get());
  }

  Expr expr(const Expr& e) {
    Expr r = map_args(e, [&](const Expr& a) { return expr(a); });
    if (r->kind != ExprKind::Load || !inputs_.count(r->buffer.get())) return r;
    const Expr& i = r->args[0];
    if (i->kind != ExprKind::IntImm || i->int_value < 0 || i->int_value >= r->buffer->numel()) return r;
    const auto key = std::make_pair(r->buffer.get(), i->int_value);
    auto it = names_.find(key);
    if (it == names_.end()) {
      const std::string name = "kiln_u" + std::to_string(next_++);
      it = names_.emplace(key, name).first;
      lets_.push_back(let(name, r));
    }
    return var(it->second, r->type);
  }

  Stmt stmt(const Stmt& s) {
    return map_stmt(s, [&](const Expr& e) { return expr(e); }, [&](const Stmt& c) { return stmt(c); });
  }

  std::vector<Stmt> take_lets() { return std::move(lets_); }

 private:
  int& next_;
  std::set<const Buffer*> inputs_;
  std::map<std::pair<const Buffer*, int64_t>, std::string> names_;
  std::vector<Stmt> lets_;
};

// The outermost loops of `s`, each with its uniform loads hoisted into its body.
Stmt hoist(const LoopKernel& k, const Stmt& s, int& next) {
  if (s->kind == StmtKind::For) {
    UniformLoads u(k, next);
    std::vector<Stmt> body;
    for (const Stmt& c : s->body) body.push_back(u.stmt(c));
    std::vector<Stmt> lets = u.take_lets();
    if (lets.empty()) return s;
    lets.insert(lets.end(), body.begin(), body.end());
    auto c = std::make_shared<StmtNode>(*s);
    c->body = std::move(lets);
    return c;
  }
  return map_stmt(s, [](const Expr& e) { return e; }, [&](const Stmt& c) { return hoist(k, c, next); });
}

}  // namespace

void hoist_uniform_loads(LoopKernel& k) {
  if (!k.body) return;
  int next = 0;
  k.body = hoist(k, k.body, next);
}

}  // namespace kiln::loop
