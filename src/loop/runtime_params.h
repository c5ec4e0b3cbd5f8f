// Ops whose parameters are computed at run time but whose output shape the model declares: Slice
// (starts, ends, axes, steps), Pad (pads) and the Reduce* family (axes). The ONNX conformance
// tests feed such parameters as graph inputs; exporters usually fold them to constants, which
// lower_injective.cc and lower_reduction.cc read at lowering time.
//
// The generated code reads the parameters once, in a prologue at the top of the kernel:
//  - Lets of the per-axis index arithmetic (Slice's start and step, Pad's crop, padding and kept
//    length), Int64 expressions of the parameter elements, clamped first so nothing overflows,
//    with the reference kernels' clamping rules (src/reference/ops/tensor_layout_ops.cc,
//    tensor_pad.cc); the nest's index expressions use those variables;
//  - a guard: whether the parameters are valid and give the declared output shape, as a checked
//    index (loop_ir.h kCheckedIndex): parameters the reference kernel would reject, or that give
//    another shape, set the kernel's status word and the runtime reports the node in one line, as
//    for an out-of-range Gather index. The nest still runs (its loads are clamped into the
//    input), but its result is never returned.
// Reductions take their reduced axes from the shapes (runtime_reduced_axes) when every axis set the
// declared shapes allow computes the same thing; the guard then checks the run-time set is one of
// them.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "loop/loop_ir.h"

namespace kiln::loop::detail {

// Element i of n's input `input` as an Int64 expression (an immediate when the input is a
// constant, a load otherwise).
using ParamAt = std::function<Expr(size_t input, int64_t i)>;

// Whether n is a Slice, Pad or Reduce* with a parameter input computed at run time (one with no
// elements has a single possible value and does not count).
bool has_runtime_params(const Node& n);
// Why the run-time form of n is not generated ("" when it is): for unsupported_reason.
std::string runtime_params_refusal(const Node& n);
// The statements lower_group puts at the top of a kernel holding n (its check site `site`): Lets
// of the per-axis parameters the nest reads through runtime_param (Slice: "start", "step"; Pad:
// "crop", "pad", "kept"), computed from the parameter elements `at` gives, then the guard.
std::vector<Stmt> runtime_params_prologue(const Node& n, const ParamAt& at, int64_t site);
// The variable holding parameter `what` of `axis` for the node of check site `site`.
Expr runtime_param(int64_t site, const std::string& what, size_t axis);
// The error the runtime reports when the guard fails.
std::string runtime_params_message(const Node& n);

// A Reduce* with run-time axes: the reduced axes (size-1 axes never count) when every axis set the
// input and declared output shapes allow reduces the same axes; nullopt otherwise.
std::optional<std::vector<bool>> runtime_reduced_axes(const Node& n);
// Every distinct reduced-axes set the shapes allow (size-1 axes dropped). With more than one
// (ReduceSum of [3,2,2] to [3,2]: axis 1 or axis 2), the prologue binds runtime_param(site, "set", 0)
// to the number of the set the run-time axes name, and the row kernel reads its input through that
// set's view: rows of the output's positions by the sets' common row length, each set's own index
// arithmetic chosen by a select (lower_reduction.cc).
std::vector<std::vector<bool>> runtime_reduction_sets(const Node& n);

}  // namespace kiln::loop::detail
