// Reads the graph IR text form written by print_graph() (the grammar is documented in
// ir/printer.h). `//` comments and blank lines are ignored anywhere. Values must be defined before
// they are used (graph outputs excepted: the header names them before the body defines them).
//
// Errors are UserErrors of the form "line L:C: expected <what>, got <token>"; an elided constant
// (printed with PrintOptions::elide_constants_over) is "line L:C: constant %name is elided".
// The result is not verified: call verify_graph() when the text may come from outside.
#pragma once
#include <memory>
#include <string_view>

#include "ir/graph.h"

namespace kiln {

std::unique_ptr<Graph> parse_graph(std::string_view text);

}  // namespace kiln
