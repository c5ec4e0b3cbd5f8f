// kiln tune's records database: one JSON object per line (JSON lines), one record per (kernel
// signature, machine, target), each the schedule the search chose for that kernel on that machine,
// with the times that justified it. Read by `kiln run/bench/compile` (per-kernel schedules,
// runtime::BuildOptions::kernel_schedules), extended by `kiln tune` (which skips kernels already
// recorded: a second run resumes), combined by `kiln tune --merge`.
//
// A line is a flat object (support/json.h):
//   {"schema": 1, "signature": "conv_add_relu-…", "ops": "Conv,Add,Relu", "emitter": "contraction",
//    "cpu": "<model name from /proc/cpuinfo>", "isa": "avx512f,avx2,fma", "threads": 2,
//    "target": "x86-avx512", "improved": true, "default_ms": 0.41, "tuned_ms": 0.33, "trials": 23,
//    "date": "2026-01-31T12:00:00Z", "s:contraction.mr": 6, "s:contraction.kc": 128, ...}
// A fusion record (tune/fusion_search.h) has "emitter": "fusion", no schedule fields, and
// "graph", "apart_a", "apart_b": the graph and the two nodes kept apart (improved) or measured
// faster fused (not improved).
// "s:<field>" are the tuned schedule's tunable fields (tune/schedule_fields.h), every one of them,
// so a record means the same after kiln's defaults change. "improved": false records a kernel the
// search found nothing better for: kept so that the next run skips it, never applied.
//
// Reading is forgiving, writing is strict: a line that is not a record of this schema, or a record
// of another machine, is skipped with one warning line per file and kind; the file is replaced
// whole (written aside, renamed over), so a crash never leaves half a database.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fusion/target.h"
#include "loop/schedule.h"
#include "support/json.h"

namespace kiln::tune {

inline constexpr int kRecordsSchema = 1;

// What a record's time depends on besides the kernel: the CPU, the ISA extensions kiln's code
// uses on it, and the thread count the kernel ran with.
struct MachineKey {
  std::string cpu;
  std::string isa;
  int threads = 0;
  bool operator==(const MachineKey&) const = default;
  std::string str() const;  // "CPU (isa, N threads)"
};
// This machine with `threads` threads (0: every CPU).
MachineKey current_machine(int threads);

struct Record {
  std::string signature;  // tune::kernel_signature
  std::string ops, emitter;
  MachineKey machine;
  std::string target;     // the fusion target whose default schedule the search started from
  bool improved = false;  // tuned_ms beat default_ms: the record is applied
  double default_ms = 0, tuned_ms = 0;
  int trials = 0;
  std::string date;                        // ISO 8601 UTC
  std::map<std::string, int64_t> fields;  // tunable schedule fields -> values
  // A fusion decision (emitter "fusion", tune/fusion_search.h): in graph `graph` (graph_fingerprint),
  // the nodes `apart_a` and `apart_b` measured fused (default_ms) and apart (tuned_ms); improved:
  // kept apart. Empty for schedule records.
  std::string graph, apart_a, apart_b;
  bool is_fusion() const { return emitter == "fusion"; }
};

std::string to_json_line(const Record& r);
// The record on one line; nullopt with `why` set when it is not one (bad JSON, missing field,
// another schema, an unknown schedule field).
std::optional<Record> from_json_line(const std::string& line, std::string* why);

// `r`'s schedule: the target's default with the record's fields set.
loop::Schedule record_schedule(const Record& r, const Target& target);

struct RecordsFile {
  std::vector<Record> records;
  std::vector<std::string> warnings;  // one line per kind of line skipped
};
// Reads `path`. A missing file is an empty database; an unreadable one is a UserError. With
// `machine`, records of other machines are skipped (those of another CPU or ISA counted in a
// warning; those of this CPU at another thread count silently).
RecordsFile read_records(const std::string& path, const MachineKey* machine);
// Writes `records` to `path` atomically (a temporary beside it, renamed over); UserError when the
// folder cannot be written.
void write_records(const std::string& path, const std::vector<Record>& records);
// One line of a JSON-lines database: the flat object, when it is one and carries "schema": `schema`;
// nullopt with `why` set otherwise (not an object, no schema, another schema).
std::optional<std::map<std::string, JsonScalar>> parse_entry(const std::string& line, int schema, std::string* why);
// A number as the databases write it (%.6g: the times and counts they hold need no more).
std::string entry_number(double v);

// Writes `text` to `path` atomically (a temporary beside it, renamed over); UserError naming `what`
// ("records", "cost samples") when the folder cannot be written.
void write_text_atomically(const std::string& path, const std::string& text, const std::string& what);

// The reading rule of kiln's JSON-lines databases (records, cost samples): a missing file is empty,
// an unreadable one a UserError naming `what`; a line `parse` rejects (nullopt, with a reason) is
// skipped; with `machine`, entries of other machines are dropped (another CPU or ISA counted in a
// warning, this CPU at another thread count silently: one database serves every --threads). One
// warning line per kind of line skipped goes to `warnings`.
template <class T>
std::vector<T> read_json_lines(const std::string& path, const std::string& what, const std::string& entry,
                               const MachineKey* machine,
                               std::optional<T> (*parse)(const std::string&, std::string*),
                               std::vector<std::string>& warnings);
// The untyped core: `parse` reads a line into the caller's pending entry and returns its machine;
// `keep` takes the pending entry.
void read_json_lines(const std::string& path, const std::string& what, const std::string& entry, const MachineKey* machine,
                     const std::function<std::optional<MachineKey>(const std::string& line, std::string* why)>& parse,
                     const std::function<void()>& keep, std::vector<std::string>& warnings);

template <class T>
std::vector<T> read_json_lines(const std::string& path, const std::string& what, const std::string& entry,
                               const MachineKey* machine,
                               std::optional<T> (*parse)(const std::string&, std::string*),
                               std::vector<std::string>& warnings) {
  std::vector<T> out;
  std::optional<T> pending;
  read_json_lines(
      path, what, entry, machine,
      [&](const std::string& line, std::string* why) -> std::optional<MachineKey> {
        pending = parse(line, why);
        if (!pending) return std::nullopt;
        return pending->machine;
      },
      [&] { out.push_back(std::move(*pending)); }, warnings);
  return out;
}

// `a` and `b` together: one record per (signature, machine, target), the one with the larger
// speed-up (default_ms / tuned_ms, measured in one run, so comparable across runs) where both have
// one.
std::vector<Record> merge_records(const std::vector<Record>& a, const std::vector<Record>& b);
// Adds or replaces `r` in `records` (same key: the new one).
void upsert_record(std::vector<Record>& records, const Record& r);

// The default database: <kiln's cache folder>/tune_records.jsonl, when that folder is private to
// the user (runtime/jit_cache.h's rule: a records file changes what kiln builds); "" with `why`
// set otherwise.
std::string default_records_path(std::string* why);

// The per-kernel schedules for a build (runtime::BuildOptions::kernel_schedules): the improved
// records of `machine` and `target`.
std::map<std::string, loop::Schedule> kernel_schedules(const std::vector<Record>& records, const MachineKey& machine,
                                                       const Target& target);

}  // namespace kiln::tune
