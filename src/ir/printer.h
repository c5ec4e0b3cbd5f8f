// The graph IR text form: a stable, readable, MLIR-like rendering of a Graph, used by golden tests,
// `kiln show` and `--dump-after`. parse_graph() (ir/parser.h) reads it back, and
// print(parse(print(g))) == print(g) holds exactly for every graph without elided constants.
//
//   graph main opset 17 (%x: f32[1,3,8,8], %m: bool[4]) -> (%y, %"idx.1") {
//     %w = constant f32[2,3] [1, 2.5, -inf, nan, 0, 3e-08]
//     %big = constant f32[64,3,7,7] elided hash=9f1c2d3e4b5a6978
//     %y: f32[1,2,8,8], %"idx.1": i64[3] = Conv(%x, %w, _) {group=1, pads=[1,1,1,1]} name="conv1"
//     %z: f32[2] = com.microsoft::FusedGemm(%a, %b)
//   }
//
// Rules of the format:
//  - Constants come first, in value creation order, then nodes in graph (topological) order.
//  - Names matching [A-Za-z0-9_.]+ print bare; any other name is a quoted string with C escapes
//    (\" \\ \n \t \xHH), e.g. %"onnx::Conv_12". `_` stands for an omitted optional input.
//  - Types are dtype[dims]: f32[1,3,8,8], i64[] (scalar); an undefined dtype prints as undef[...].
//  - Attributes print sorted by name. Kinds are unambiguous: int `1`; float always with '.' or an
//    exponent (`1.0`, `3e-08`, `inf`, `nan`); string "quoted"; ints [1,2]; floats [1.0, 2.5];
//    strings ["a", "b"]; empty lists as ints[], floats[], strings[]; tensor `tensor f32[2] [1, 2]`.
//  - Tensor data is the flat row-major element list. Floats print the shortest text that parses
//    back to the same value (so f32 uses at most %.9g digits, f64 %.17g); f16/bf16 print their
//    float value; bool prints true/false. Every NaN prints as `nan` (payload and sign are not kept).
#pragma once
#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace kiln {

struct PrintOptions {
  // Constants (and tensor attributes) with more elements than this print as
  // "elided hash=<fnv1a-64 of the bytes>"; a negative value never elides (golden tests).
  int64_t elide_constants_over = 16;
};

std::string print_graph(const Graph& g, const PrintOptions& opts = {});
// One node's line without indentation or newline, e.g. `%y: f32[2] = Relu(%x)` (verifier messages).
std::string print_node(const Node& n, const PrintOptions& opts = {});
// A stable identity of the graph's structure: 16 hex digits hashing its inputs' names and types and
// every node as print_node prints it (op, attributes, wiring, names, output types), not constant
// data — so it costs no pass over the weights, and a model re-exported with other weights keeps it.
// What kiln tune's fusion records are keyed by (node names are only unique within one model).
std::string graph_fingerprint(const Graph& g);
// A tensor literal as in the text form: `f32[2] [1, 2]` (or `f32[2] elided hash=...`).
std::string print_tensor(const Tensor& t, const PrintOptions& opts = {});
// `%name`, quoted when needed.
std::string print_value_ref(const Value* v);

// Helpers shared with the parser.
bool is_plain_identifier(const std::string& s);  // [A-Za-z0-9_.]+
std::string quote_string(const std::string& s);  // "..." with escapes
std::string print_name(const std::string& s);    // bare when plain, else quoted

}  // namespace kiln
