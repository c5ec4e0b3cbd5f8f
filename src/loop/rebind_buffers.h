// Loop-IR rewrites for splicing separately lowered kernels into one (lower_contraction_siblings.cc,
// lower_contraction_chain.cc).
//
// Rebinding buffers: a kernel lowered on its own (a part of a multi-contraction group, a row
// kernel's passes) uses its own Buffer objects. Loads, addresses and stores of a mapped buffer go
// to its new buffer, optionally at `index - base + offset` (a full-tensor position turned into a
// position within a local row: base, the row's offset in the tensor; offset, the row's place in
// the local buffer); unmapped buffers (the tree's own Local/Register buffers) stay as they are.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "loop/loop_ir.h"

namespace kiln::loop {

struct BufferTarget {
  BufferPtr to;
  Expr offset;          // added to every index; null: nothing added
  Expr base = nullptr;  // subtracted from every index first; null: nothing subtracted
  // When set, every Load of the buffer becomes on_load(the rewritten load, its new index): a value
  // the new buffer holds only in part (the pointwise-depthwise kernel's expanded rows before the
  // bias). An Address of such a buffer cannot be rewritten so: BufferRebinder::addressed() tells.
  std::function<Expr(Expr load, const Expr& index)> on_load = nullptr;
};
using BufferMap = std::unordered_map<const Buffer*, BufferTarget>;

class BufferRebinder {
 public:
  explicit BufferRebinder(BufferMap map) : map_(std::move(map)) {}
  // Rewritten copies (expressions that mention no mapped buffer are shared, not copied).
  Expr expr(const Expr& e);
  Stmt stmt(const Stmt& s);
  // Whether an Address of a buffer with on_load was met (its reads then bypass on_load: the
  // caller must not use the result).
  bool addressed() const { return addressed_; }

 private:
  BufferMap map_;
  bool addressed_ = false;
  std::unordered_map<const ExprNode*, Expr> memo_;
};

Stmt rebind_buffers(const Stmt& s, BufferMap map);

// Index expressions of `s` tidied with the loop ranges: a Div or Mod by a constant d whose
// numerator is affine in loop variables, n = d*q + r with r's terms proven within [0, d) (a
// Reshape/Slice pull's `((i*768 + h*64 + k) / 768)`), becomes q or r; load and store indices that
// are affine are rebuilt in expanded form (which folds `(base + j) - base`). `extents` gives the
// ranges [0, e) of variables defined outside `s` (a Let's known range); loops add their own.
Stmt fold_index_divmod(const Stmt& s, const std::map<std::string, int64_t>& extents);
Expr fold_index_divmod(const Expr& e, const std::map<std::string, int64_t>& extents);

// `body` with each loop and Let variable it binds whose name is in `avoid` renamed (to a name used
// neither in `body` nor in `avoid`), scope by scope. For splicing a separately lowered body under
// loops of another kernel: the expressions substituted into it (a row's base offset) name those
// loops' variables, and a binding of the same name inside would capture them.
std::vector<Stmt> rename_bound_vars(const std::vector<Stmt>& body, const std::set<std::string>& avoid);
// The variables an expression reads.
void collect_vars(const Expr& e, std::set<std::string>& out);

// `if (true) { body }`: a C block scope, so Lets and local names in `body` (a spliced kernel's
// t<k>, acc) cannot clash with its neighbours'. (Block is a plain sequence.)
Stmt scoped(std::vector<Stmt> body);

}  // namespace kiln::loop
