// A hot trace as a file: what a plan is built from, kept beside an earlier run's verdicts
// (<cache_dir>/traces/<signature>.trace) so that a later run can build a known winner's plan
// before its signature has even been seen (exec/prepared.cpp), and how a stored trace is compared
// with the one the loop then records: a plan built from one is the other's plan only where
// everything the planner reads agrees.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/hot_trace.h"

namespace hotpath::detail {

// The bytes of `trace`, or nothing with `why` set where an argument is of a kind the file does
// not hold (an object, a generator: such a trace is not kept).
std::optional<std::string> encode_trace(const HotTrace& trace, std::string* why = nullptr);
// The trace `bytes` hold, or nothing with `why` set: not a trace file, written by another hotpath
// or LibTorch, cut short or changed (a checksum covers it), or naming an operator this process
// does not have.
std::optional<HotTrace> decode_trace(const std::string& bytes, std::string* why = nullptr);

// Where a plan built from `a` would not be `b`'s, in words ("op 12 (aten::mul_.Scalar) differs");
// empty where it would: the same ops with the same tensors' metadata, data flow, structural
// arguments and outputs (which ones the iteration still held at its end among them). Scalar
// arguments' values may differ (they are run-time parameters of every plan, as they differ
// between a loop's iterations), their kinds may not; the iteration numbers may. `alive_matters`,
// if given: per op, whether which of its outputs were held is compared (the planner reads it for
// what a group's kernel may skip writing, its members' outputs; of other ops only for the budget
// of temporaries' buffers, which decides speed, not results).
std::string plan_input_difference(const HotTrace& a, const HotTrace& b,
                                  const std::vector<bool>* alive_matters = nullptr);

// <dir>/traces: where a cache directory keeps them.
std::string trace_dir(const std::string& cache_dir);
// Writes `trace` under `cache_dir` (atomically; best effort). Returns an error message, empty
// on success.
std::string save_trace(const std::string& cache_dir, const HotTrace& trace);
// The trace of `signature` kept under `cache_dir`, if there is a readable one (`why`: else why).
std::optional<HotTrace> load_trace(const std::string& cache_dir, std::uint64_t signature,
                                   std::string* why = nullptr);

}  // namespace hotpath::detail
