// Structural checks of the graph IR, run after every pass that changed the graph (and by tests).
// A graph is valid when:
//  - every value name is unique, and no graph input is listed twice;
//  - every node input is a graph input, a constant, or an output of an EARLIER node (nodes are in
//    topological order), and belongs to this graph;
//  - every value is defined at most once (one producer; not also an input or constant), and each
//    node output's producer link points back at its node;
//  - every value's use list equals the (node, input index) pairs of the node inputs that read it;
//  - every graph output is defined;
//  - every graph input, constant and node output has a defined dtype, and a constant's tensor has
//    exactly the value's dtype and shape.
// Problems are compiler bugs (a pass broke the IR), so verify_graph throws InternalError.
#pragma once
#include <string>

#include "ir/graph.h"

namespace kiln {

// "" when the graph is valid; otherwise one problem per line (at most 20), node problems followed by
// the node's printed line.
std::string verify_graph_message(const Graph& g);
// Throws InternalError("IR verification failed:\n<problems>") when the graph is invalid.
void verify_graph(const Graph& g);

}  // namespace kiln
