// MeasureRequest and MeasureResult as bytes, for measuring on another process or machine (the Ray
// measurer, tune/ray_measurer.h; `kiln tune-worker`).
//
// Format (requests version 2, results version 1), little-endian, all of it kiln's own:
//   magic      8 bytes: "KILNMRQ\x02" (request) or "KILNMRS\x01" (result)
//   body       the fields below, in order
//   checksum   u64: 64-bit FNV-1a of magic + body (a flipped bit anywhere is an error, not a
//              silently different input)
// Scalars are u8/i32/u32/i64/u64 or f64 (the IEEE bits); a string is u64 length + bytes; a list is
// u64 count + elements. A request's tensors are stored once in a table (dtype u8, rank u32, dims
// i64..., u64 byte count, raw bytes) and referred to by index: a batch's candidates mostly read the
// same packed inputs, and the table keeps a request the size of its distinct tensors.
//   request: tensor table; sources (a list: version 1 had one string); kernels; per candidate a list of argument indices; reference
//            indices; tolerance f64; threads i32; compiler; flags; protocol (warmup i32, samples
//            i32, min_sample_ms f64, max_calls_per_sample i32)
//   result:  candidates (ok u8, error, median_ms, max_rel_diff, samples); compile_s; run_s; machine
// CompileOptions' cache fields are not sent: a measurer compiles into its own private folder.
//
// Parsing checks every length against the bytes left before allocating, every dtype, shape and
// index; anything wrong is a UserError naming `what` (the file) and the first problem found.
#pragma once
#include <string>
#include <string_view>

#include "tune/measurer.h"

namespace kiln::tune {

std::string serialize_request(const MeasureRequest& req);
MeasureRequest parse_request(std::string_view bytes, const std::string& what);

std::string serialize_result(const MeasureResult& res);
MeasureResult parse_result(std::string_view bytes, const std::string& what);

// The whole file; UserError when it cannot be read.
std::string read_file_bytes(const std::string& path);
// Writes `bytes` to a temporary beside `path` and renames it over `path`, so that a reader never
// sees half a file (and a failed write leaves none); UserError on failure.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace kiln::tune
