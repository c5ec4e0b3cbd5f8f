// The Schedule fields the tuner may set, by name ("contraction.mr", "stencil_bytes", ...): one table
// that the search space, the records file and `kiln explain` share, so a field is spelt the same in
// all three. Numerics fields (reduction_lanes, reorder_sums) are deliberately absent: they are the
// build's numerics mode, not a performance choice, and a record must never change a model's results
// beyond the contract. vector_width is the target's, not a choice either.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loop/schedule.h"

namespace kiln::tune {

// Every tunable field's name, in a fixed order.
const std::vector<std::string>& schedule_field_names();
// The value of field `name` in `s` (nullopt: not a tunable field).
std::optional<int64_t> get_field(const loop::Schedule& s, const std::string& name);
// Sets field `name` of `s`; false when `name` is not a tunable field.
bool set_field(loop::Schedule& s, const std::string& name, int64_t value);

// The tunable fields of `s` whose value differs from `base`'s.
std::map<std::string, int64_t> changed_fields(const loop::Schedule& s, const loop::Schedule& base);
// "contraction.mr=6 contraction.kc=128" (empty map: "default").
std::string describe_fields(const std::map<std::string, int64_t>& fields);

}  // namespace kiln::tune
