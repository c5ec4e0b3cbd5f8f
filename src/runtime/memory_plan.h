// Memory planning: every intermediate tensor gets an offset in one arena. Liveness runs over the
// kernel order; offsets are assigned greedily, largest tensor first, into the lowest gap that does
// not overlap any tensor live at the same time; an elementwise kernel may write its output over an
// input that dies there (in place). A Concat built in place (fusion/concat_in_place.h) gets one
// slot, live from its first part's write to its last reader, and each part lies inside it at its
// slice's offset: the parts' producers write the concatenation, nothing copies it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"

namespace kiln::runtime {

struct TensorSlot {
  const Value* value = nullptr;
  int64_t offset = 0, bytes = 0;
  int first = 0, last = 0;  // kernel indices: written at `first`, last read at `last`
  const Value* shares = nullptr;  // the input this output overwrites in place (same offset), if any
  const Value* inside = nullptr;  // a part of a Concat built in place: the Concat's output, whose slot holds it
};

struct MemoryPlan {
  std::vector<TensorSlot> slots;  // intermediates only (not graph inputs/outputs or constants)
  int64_t arena_bytes = 0;        // peak
  int64_t naive_bytes = 0;        // sum of all intermediates (no reuse)
  const TensorSlot* find(const Value* v) const;
};

// Alignment of every slot (bytes): a cache line, so kernels may use aligned vector loads.
constexpr int64_t kSlotAlignment = 64;

MemoryPlan plan_memory(const Graph& g, const FusionPlan& plan);

// Reorders plan.groups (keeping every group after the groups it reads from) to keep peak memory
// low: a list schedule that, among the kernels ready to run, picks the one that frees the most
// bytes net of what it allocates (ties: the model's order). Returns whether the order changed.
bool order_for_memory(const Graph& g, FusionPlan& plan);

// Throws InternalError when two slots overlap in both time and space (tests and debug builds).
void verify_memory_plan(const MemoryPlan& mp);

}  // namespace kiln::runtime
