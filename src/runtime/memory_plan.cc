#include "runtime/memory_plan.h"

#include <algorithm>
#include <map>

#include "fusion/concat_in_place.h"
#include "fusion/op_kind.h"

namespace kiln::runtime {

const TensorSlot* MemoryPlan::find(const Value* v) const {
  for (const auto& s : slots)
    if (s.value == v) return &s;
  return nullptr;
}

namespace {

int64_t align(int64_t x) { return (x + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment; }

bool overlaps_in_time(const TensorSlot& a, const TensorSlot& b) { return a.first <= b.last && b.first <= a.last; }

// A group whose every op is elementwise (no broadcast of the value in question, no index remap)
// computes output element i from input element i only, so its output may overwrite an input of
// the same shape that dies in it.
bool pure_elementwise(const FusionGroup& grp) {
  if (grp.kind != GroupKind::Elementwise) return false;
  for (const Node* n : grp.nodes) {
    OpKind k = op_kind(*n);
    if (k != OpKind::ElementWise && k != OpKind::Broadcast) return false;
  }
  return true;
}

// A one-contraction kernel whose other members are elementwise ops on the contraction's output
// shape (a conv or MatMul with its bias, activation and residual in the epilogue): an input `in`
// of the output's shape that no path inside the kernel carries to the contraction is read only
// by the epilogue, at the element it computes, before that element's store (emitters that put
// every tile's values in a local tile first read all of the tile's inputs before its stores). So
// the output may overwrite it: ResNet-50's 1x1 conv + residual Add + ReLU over 56x56 wrote a
// fresh 3.2 MB buffer while the dying residual sat in cache — 1.08 -> 0.78 ms in place (a C
// harness around the emitted kernel). One output only: a second output (the pre-activation
// value) could be stored before the residual is read.
bool epilogue_reads_only(const FusionGroup& grp, const Value* in, const Value* out) {
  if (grp.kind != GroupKind::Contraction || grp.emitter != "contraction" || grp.outputs.size() != 1) return false;
  const Node* anchor = nullptr;
  for (const Node* n : grp.nodes) {
    const OpKind k = op_kind(*n);
    if (k == OpKind::Contraction) {
      if (anchor) return false;
      anchor = n;
      if (n->num_outputs() < 1 || !n->output(0) || n->output(0)->shape() != out->shape()) return false;
    } else if (k != OpKind::ElementWise && k != OpKind::Broadcast) {
      return false;
    }
  }
  if (!anchor) return false;
  // The members that depend on `in`, and that none of them is (or feeds) the contraction.
  std::vector<const Value*> reached = {in};
  std::vector<const Node*> users;
  for (size_t i = 0; i < reached.size(); ++i)
    for (const Node* n : grp.nodes) {
      if (std::count(users.begin(), users.end(), n)) continue;
      bool reads = false;
      for (const Value* v : n->inputs()) reads = reads || v == reached[i];
      if (!reads) continue;
      if (n == anchor) return false;
      for (const Value* o : n->outputs())
        if (o) {
          if (o->shape() != out->shape()) return false;
          reached.push_back(o);
        }
      users.push_back(n);
    }
  return true;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g, const FusionPlan& plan) {
  MemoryPlan mp;
  std::map<const Value*, size_t> index;
  auto is_intermediate = [&](const Value* v) {
    return !v->is_constant() && !v->is_graph_input() && !g.is_graph_output(v);
  };
  for (size_t k = 0; k < plan.groups.size(); ++k)
    for (const Value* v : plan.groups[k].outputs)
      if (is_intermediate(v)) {
        index[v] = mp.slots.size();
        mp.slots.push_back({v, 0, align(value_bytes(v)), int(k), int(k)});
      }
  for (size_t k = 0; k < plan.groups.size(); ++k)
    for (const Value* v : plan.groups[k].inputs) {
      auto it = index.find(v);
      if (it != index.end()) mp.slots[it->second].last = std::max(mp.slots[it->second].last, int(k));
    }
  for (const auto& s : mp.slots) mp.naive_bytes += s.bytes;

  // Concats built in place: the output's slot is live while any part is, and each part takes no
  // place of its own (its offset is set from the Concat's once that is placed).
  std::vector<std::pair<size_t, int64_t>> part_at;  // part slot → byte offset in its Concat's slot
  for (const FusionGroup& grp : plan.groups) {
    if (!grp.in_place_concat) continue;
    const Node* n = grp.nodes.front();
    KILN_CHECK(concat_in_place(g, *n).ok(), "memory plan: Concat '", n->name(), "' is not buildable in place");
    if (!index.count(n->output(0))) continue;  // nobody reads it: its parts keep places of their own
    TensorSlot& whole = mp.slots[index.at(n->output(0))];
    const std::vector<int64_t> offsets = concat_part_offsets(*n);
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      TensorSlot& part = mp.slots[index.at(n->input(i))];
      part.inside = whole.value;
      part.bytes = value_bytes(part.value);
      whole.first = std::min(whole.first, part.first);
      whole.last = std::max(whole.last, part.last);
      part_at.push_back({index.at(n->input(i)), offsets[i]});
    }
  }

  // In-place candidates: output slot → the input slot it may share.
  std::map<size_t, size_t> in_place;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& grp = plan.groups[k];
    const bool elementwise = pure_elementwise(grp);
    if (!elementwise && grp.kind != GroupKind::Contraction) continue;
    std::vector<size_t> taken;
    for (const Value* out : grp.outputs) {
      auto o = index.find(out);
      if (o == index.end() || mp.slots[o->second].inside) continue;  // a part's place is its slice
      for (const Value* in : grp.inputs) {
        auto i = index.find(in);
        if (i == index.end() || mp.slots[i->second].inside || in->shape() != out->shape() || in->dtype() != out->dtype()) continue;
        if (!elementwise && !epilogue_reads_only(grp, in, out)) continue;
        if (mp.slots[i->second].last != int(k) || std::count(taken.begin(), taken.end(), i->second)) continue;
        in_place[o->second] = i->second;
        taken.push_back(i->second);
        break;
      }
    }
  }

  // Greedy by size: the largest tensors are placed first, each at the lowest offset where it does
  // not overlap a placed tensor that is live at the same time.
  std::vector<size_t> order;
  for (size_t i = 0; i < mp.slots.size(); ++i)
    if (!mp.slots[i].inside) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mp.slots[a].bytes > mp.slots[b].bytes; });
  std::vector<bool> placed(mp.slots.size(), false);
  // An in-place pair may share bytes only by starting at the same offset (then the kernel writes
  // each element over the one it has just read). At any other offset it is two tensors live at
  // once like any others: the sharing is a permission to coincide, not to overlap. (The in-place
  // spot can be taken: the output then goes elsewhere and must not overlap its input.)
  auto shared = [&](size_t a, size_t b) {
    auto ia = in_place.find(a), ib = in_place.find(b);
    return (ia != in_place.end() && ia->second == b) || (ib != in_place.end() && ib->second == a);
  };
  auto fits_at = [&](size_t s, int64_t off) {
    for (size_t o = 0; o < mp.slots.size(); ++o) {
      if (!placed[o] || o == s || !overlaps_in_time(mp.slots[s], mp.slots[o])) continue;
      const TensorSlot& p = mp.slots[o];
      if (shared(s, o) && off == p.offset) continue;
      if (off < p.offset + p.bytes && p.offset < off + mp.slots[s].bytes) return false;
    }
    return true;
  };
  for (size_t s : order) {
    // First the offset of a placed in-place partner (either direction), then candidate offsets:
    // 0 and the end of every placed slot live at the same time.
    std::vector<int64_t> cands;
    for (size_t o = 0; o < mp.slots.size(); ++o)
      if (placed[o] && shared(s, o)) cands.push_back(mp.slots[o].offset);
    std::vector<int64_t> rest{0};
    for (size_t o = 0; o < mp.slots.size(); ++o)
      if (placed[o] && overlaps_in_time(mp.slots[s], mp.slots[o])) rest.push_back(mp.slots[o].offset + mp.slots[o].bytes);
    std::sort(rest.begin(), rest.end());
    cands.insert(cands.end(), rest.begin(), rest.end());
    for (int64_t c : cands)
      if (fits_at(s, c)) {
        mp.slots[s].offset = c;
        break;
      }
    placed[s] = true;
    mp.arena_bytes = std::max(mp.arena_bytes, mp.slots[s].offset + mp.slots[s].bytes);
  }
  for (auto [p, off] : part_at) mp.slots[p].offset = mp.find(mp.slots[p].inside)->offset + off;
  // Reverse the in-place map for verification: shared pairs are legal overlaps.
  for (auto [o, i] : in_place)
    if (mp.slots[o].offset == mp.slots[i].offset) mp.slots[o].shares = mp.slots[i].value;
  verify_memory_plan(mp);
  return mp;
}

bool order_for_memory(const Graph& g, FusionPlan& plan) {
  const size_t n = plan.groups.size();
  std::map<const Value*, size_t> writer;
  for (size_t k = 0; k < n; ++k)
    for (const Value* v : plan.groups[k].outputs) writer[v] = k;
  std::map<const Value*, int> readers;  // groups still to run that read the value
  std::vector<std::vector<size_t>> preds(n);
  for (size_t k = 0; k < n; ++k)
    for (const Value* v : plan.groups[k].inputs) {
      readers[v]++;
      auto w = writer.find(v);
      if (w != writer.end()) preds[k].push_back(w->second);
    }
  auto counted = [&](const Value* v) { return !v->is_constant() && !v->is_graph_input() && !g.is_graph_output(v); };
  std::vector<bool> done(n, false);
  std::vector<size_t> order;
  while (order.size() < n) {
    size_t best = n;
    int64_t best_score = 0;
    for (size_t k = 0; k < n; ++k) {
      if (done[k]) continue;
      bool ready = true;
      for (size_t p : preds[k]) ready = ready && done[p];
      if (!ready) continue;
      int64_t score = 0;
      for (const Value* v : plan.groups[k].inputs)
        if (counted(v) && readers[v] == 1) score += value_bytes(v);  // last reader frees it
      for (const Value* v : plan.groups[k].outputs)
        if (counted(v)) score -= value_bytes(v);
      if (best == n || score > best_score) {
        best = k;
        best_score = score;
      }
    }
    KILN_CHECK(best < n, "order_for_memory: the plan has a cycle");
    done[best] = true;
    order.push_back(best);
    for (const Value* v : plan.groups[best].inputs) readers[v]--;
  }
  bool changed = false;
  std::vector<FusionGroup> groups;
  for (size_t i = 0; i < n; ++i) {
    changed = changed || order[i] != i;
    groups.push_back(std::move(plan.groups[order[i]]));
  }
  plan.groups = std::move(groups);
  return changed;
}

void verify_memory_plan(const MemoryPlan& mp) {
  for (size_t a = 0; a < mp.slots.size(); ++a)
    for (size_t b = a + 1; b < mp.slots.size(); ++b) {
      const TensorSlot &x = mp.slots[a], &y = mp.slots[b];
      if (x.shares == y.value || y.shares == x.value) continue;
      bool space = x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
      // A part of a Concat built in place lies inside the Concat's slot, and nowhere else.
      if (x.inside == y.value || y.inside == x.value) {
        const TensorSlot &part = x.inside ? x : y, &whole = x.inside ? y : x;
        KILN_CHECK(part.offset >= whole.offset && part.offset + part.bytes <= whole.offset + whole.bytes &&
                       part.first >= whole.first && part.last <= whole.last,
                   "memory plan: part '", part.value->name(), "' is not inside its Concat's slot");
        continue;
      }
      KILN_CHECK(!(space && overlaps_in_time(x, y)), "memory plan: '", x.value->name(), "' and '", y.value->name(),
                 "' are live at once and overlap in the arena");
      KILN_CHECK(x.inside || x.offset % kSlotAlignment == 0, "memory plan: misaligned slot");
    }
}

}  // namespace kiln::runtime
