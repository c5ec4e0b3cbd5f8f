// What the fusion engine needs to know about each primitive op: its OpKind. The classification is
// one table (op_kind.cc) next to the op registry; a unit test checks that every registered op has
// an entry, so a new op cannot silently fall into the wrong class.
//
//   ElementWise  out[i] = f(in0[i], in1[i], ...), all inputs already of the output's shape
//   Broadcast    elementwise with numpy broadcasting (some input is smaller than the output)
//   Injective    each output element is a copy of one input element chosen by index arithmetic
//                (Transpose, Slice, Concat, Pad, Gather, Reshape, ...)
//   Reduction    output elements combine a set of input elements (ReduceSum, GlobalAveragePool,
//                MaxPool's windows, ArgMax)
//   Contraction  sums of products over a reduction axis (MatMul, Conv, ConvTranspose): elementwise
//                ops can run on its output tile before the store (epilogue)
//   Opaque       no loop nest kiln can fuse into: a kernel of its own, generated
//                (ScatterElements, ScatterND: loop/lower_scatter.cc) or a library kernel
//                (an unlowered composite, a Hardmax the pipeline has not decomposed, ...)
#pragma once
#include <optional>
#include <string>

#include "ir/graph.h"

namespace kiln {

enum class OpKind { ElementWise, Broadcast, Injective, Reduction, Contraction, Opaque };

const char* op_kind_name(OpKind k);

// The table's class for an op type (nullopt when the op is not in the table). ElementWise ops are
// listed as ElementWise; op_kind(Node) refines them to Broadcast by looking at shapes.
std::optional<OpKind> op_kind_of_type(const std::string& op_type);

// The kind of one node. Ops missing from the table are Opaque.
OpKind op_kind(const Node& n);

// Reshape/Flatten/Squeeze/Unsqueeze (and Identity): row-major data is unchanged, so the op is a
// view that moves no data. Views do not count as kernels.
bool is_view(const Node& n);

// Pools (MaxPool, AveragePool): reductions over sliding windows rather than whole axes.
bool is_windowed_reduction(const Node& n);

}  // namespace kiln
