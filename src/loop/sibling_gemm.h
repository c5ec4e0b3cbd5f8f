// Sibling contractions of one left operand lowered as one tiled GEMM
// (lower_contraction_sibling_gemm.cc): the Q, K and V projections of one input (MatMul(x, Wq),
// MatMul(x, Wk), MatMul(x, Wv), each with its bias), the 1x1 convs that head an Inception block's
// branches. Their columns are laid side by side — the right operands' panels packed at build time
// into one panel sequence (PackedInput::then), each sibling's columns starting at a whole panel,
// so no panel straddles two siblings — and each A tile (with its prologue, e.g. a LayerNorm tail)
// is produced once and feeds every sibling's column panels; each sibling's column range gets its
// own epilogue and stores (GemmView::column_parts).
//
// Internal to src/loop; lower_contraction_siblings.cc asks it which of a group's parts qualify.
#pragma once
#include <memory>
#include <vector>

#include "fusion/fusion_plan.h"
#include "loop/loop_ir.h"
#include "loop/schedule.h"

namespace kiln::loop::detail {

class SiblingGemms {
 public:
  explicit SiblingGemms(const Schedule& sched);
  ~SiblingGemms();
  SiblingGemms(const SiblingGemms&) = delete;
  SiblingGemms& operator=(const SiblingGemms&) = delete;

  // Which parts share one GEMM: sets of at least two indices into `parts`, each part a group of
  // one contraction with its prologue and epilogue (null: not a candidate). A part qualifies when
  // its own lowering would be the plain tiled nest with B constant weights in panels; parts of a
  // set have the same A (the same value, hence the same prologue, at the same geometry: M, K,
  // batch, a conv's window) and no member of theirs reads the first part's weights otherwise.
  // The groups must outlive this object.
  std::vector<std::vector<size_t>> plan(const std::vector<const FusionGroup*>& parts);

  // The kernel of one set of plan(): its buffers are `grp`'s (the union of the set's parts, their
  // outputs in order); refuses (throws Refusal) what the nest cannot build.
  LoopKernel lower(const std::vector<size_t>& set, const FusionGroup& grp, const std::string& name);

 private:
  struct Candidate;
  bool same_a(const Candidate& a, const Candidate& b) const;

  Schedule sched_;
  std::vector<std::unique_ptr<Candidate>> cands_;  // per part of plan(); null: not a candidate
};

}  // namespace kiln::loop::detail
