// Layout assignment (issue 11): which values between convs are stored channels-last with their
// consumers' zero padding around them, so that the next conv reads them in place.
//
// A conv's implicit GEMM (loop/lower_contraction_implicit.cc) reads its input as zero-padded
// planes with the channels innermost, which it stages once per call from the NCHW input (a
// transposing copy), and stores its positions x channels tile into the NCHW output through
// another transposing copy: two passes over memory per conv that a blocked layout between convs
// does not pay (docs/codegen.md, "Layouts between convs"). This pass rewrites such a value V
// (produced by a conv and its elementwise epilogue, read by stride-1 windowed convs and by
// elementwise ops of other convs' epilogues) as
//
//   V_cl = Pad(Transpose(V, NHWC), the consumers' padding and the channel stride)   [N, Hp, Wp, Cs]
//
// marked as a layout boundary (the Pad's `kiln_layout` attribute, is_layout_boundary): the
// producer's kernel stores it (positions x channels rows from the micro-kernel's registers, the
// border zeroed after), and every reader reads V's elements back through Slice(Transpose(V_cl))
// fused into its loads: a stride-1 windowed conv keeps its padding and its lowering binds V_cl
// itself as the phase plane (ContractionLowering::planes_in_place: no staging), a residual Add in
// another conv's epilogue reads along the channels. Graph inputs and outputs keep the model's
// layout. Not under --strict-fp (its convs take the channel-rows forms, which stage anyway) and
// only where fusion runs (the Transposes and Slices would be kernels of their own otherwise).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "loop/schedule.h"

namespace kiln {

// The values given the layout, by name, in graph order.
std::vector<std::string> assign_layouts(Graph& g, const loop::Schedule& sched);

// Whether n is the Pad that assign_layouts makes a layout boundary: its output is stored by its
// producer's kernel and read by other kernels, never fused through.
bool is_layout_boundary(const Node& n);

}  // namespace kiln
