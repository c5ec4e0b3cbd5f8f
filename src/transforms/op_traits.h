// Facts about ops that several graph passes need. Kept small: per-op compiler facts otherwise
// belong in the op registry (reference/op_registry.h).
#pragma once
#include "ir/graph.h"

namespace kiln {

// Ops whose outputs are not a function of their inputs (random sampling, training-mode Dropout):
// they must never be constant-folded or merged with an identical-looking node.
bool is_nondeterministic(const Node& n);

// Dropout that is the identity: the opset-12+ form whose training_mode input is absent or a
// constant false, or whose ratio is a constant 0 in training mode. (Its mask output, if
// requested, is all true.)
bool is_identity_dropout(const Node& n);

}  // namespace kiln
