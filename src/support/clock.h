// Wall-clock timestamps for records kiln writes (probe results, tuning records).
#pragma once
#include <string>

namespace kiln {

// The current UTC time as ISO 8601, e.g. 2026-12-01T17:59:10Z.
std::string iso_utc_now();

}  // namespace kiln
