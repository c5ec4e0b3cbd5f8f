// Private machinery of the schedule transforms (loop_transforms*.cc): finding loops, rebuilding the
// tree along a path, substitution, and the region analysis the legality checks share.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loop/affine.h"
#include "loop/loop_ir.h"
#include "loop/loop_transforms.h"

namespace kiln::loop::sched {

template <class... Args>
[[noreturn]] void refuse(const Args&... args) {
  throw ScheduleError(cat(args...));
}

// The statements from the kernel's root down to a node (root first, the node last).
using Path = std::vector<Stmt>;

// The one loop named `name`; refuses when there is none or more than one.
Path find_loop(const LoopKernel& k, const std::string& name);

// A new root in which the last node of `path` is replaced by `replacement` (spliced into its
// parent's statement list; a Block when the node was the root and there are several). Nodes along
// the path are copied; nothing existing is modified.
Stmt replace_node(const Path& path, std::vector<Stmt> replacement);

// A copy of loop `s` with kind `kind`.
Stmt with_kind(const Stmt& s, ForKind kind);

// Deep copies with variables replaced (expressions shared where nothing changes).
Expr substitute(const Expr& e, const std::map<std::string, Expr>& m);
Stmt substitute(const Stmt& s, const std::map<std::string, Expr>& m);
std::vector<Stmt> substitute(const std::vector<Stmt>& body, const std::map<std::string, Expr>& m);

// Every name the kernel uses (buffers, loop variables, scalars), for fresh_name.
std::set<std::string> names_in(const LoopKernel& k);
// `base` or base2, base3, ... — whichever is not in `used`; recorded in `used`.
std::string fresh_name(const std::string& base, std::set<std::string>& used);

bool mentions(const Expr& e, const std::set<std::string>& names);
int64_t const_extent(const StmtNode& loop);  // -1 when not a constant
// Statement nodes in `body` (what a copy of it costs in code).
int64_t statement_count(const std::vector<Stmt>& body);
// The loop and Let variables `s` binds, added to `out`; the variables it assigns (Assign).
void bound_names(const Stmt& s, std::set<std::string>& out);
void assigned_names(const Stmt& s, std::set<std::string>& out);
// Known values of scalar variables (the Lets in scope): `name` is bound anew, so its value and
// every value that reads it no longer hold.
void forget_binding(std::map<std::string, Expr>& values, const std::string& name);

// ---------------------------------------------------------------- region analysis

struct Access {
  BufferPtr buffer;
  bool store = false;
  Expr index;
  std::vector<const StmtNode*> loops;  // enclosing loops inside the region, outermost first
  Expr node;                           // loads: the Load expression itself
};

struct Region {
  std::vector<Access> accesses;
  std::vector<const StmtNode*> loops;      // every loop in the region, the root too when it is one
  std::set<std::string> lets;               // scalars defined inside
  std::set<std::string> outer_assigns;      // scalars assigned inside but defined outside
  std::set<const Buffer*> written, allocated;
  bool has_call = false;

  AffineScope scope() const;  // loop variables and scalars vary; written buffers
};

Region analyze_region(const Stmt& root);

// "" when distinct iterations of `loops` (loops of the region enclosing all its statements) never
// touch a common element of a buffer the region writes; otherwise why not (the rule is in
// loop_transforms.h).
std::string independence_violation(const Region& r, const std::vector<const StmtNode*>& loops);

// Splits loop `s` by `factor` (see split in loop_transforms.h) with the given kinds for the outer
// and inner loops; returns the replacement statements and the new loop names.
std::vector<Stmt> split_loop(const StmtNode& s, int64_t factor, TailStrategy tail, ForKind outer_kind,
                             ForKind inner_kind, std::set<std::string>& used, SplitLoops& names);

}  // namespace kiln::loop::sched
