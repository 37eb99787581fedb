// report.hpp: one scenario's result as a versioned JSON document ("bih.report/1").
//
// The report is what the matrix, the gate and `bih explain` read; reports/report.schema.json
// documents every key. This file builds it, names its file and reads it back; writing goes
// through write_file_atomically (harness/atomic_file.hpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "spec/verdict.hpp"

namespace bih {

inline constexpr const char* kReportSchema = "bih.report/1";

// What a report keeps of a generation: its identity and timings, not its tokens.
struct GenerationTiming {
  std::string label;
  int batch_size = 0;
  int repeat = 0;
  bool fresh_process = false;
  double wall_s = 0;
  int64_t steps = 0;
  int64_t tokens_processed = 0;  // rows through the model, padding included
  std::string cache;             // the plan's cache state: "" (no prefix caching), cold, warm
  int64_t max_in_flight = 0;     // HTTP engine: most requests at once; 0: none
  int solo_lanes = 1;            // engines the generation ran on at once (plan.solo_lanes)
};
GenerationTiming timing_of(const Generation& g);

struct ReportInput {
  nlohmann::json scenario;  // the resolved scenario (Scenario::to_json())
  std::string id;           // its canonical id (Scenario::id())
  std::optional<Verdict> expect;
  nlohmann::json model;   // {"preset": "tiny", "seed": 0, "weights_hash": "..."} or
                          // {"path": "/ckpt", "weights_hash": "..."}
  nlohmann::json engine;  // {"backend", "communicator", "nccl_env"}; null when no worker ran
  std::vector<GenerationTiming> generations;
  std::vector<Comparison> comparisons;
  nlohmann::json health;  // harness/health.hpp's to_json; null when no generation was read
  Verdict verdict = Verdict::error;
  std::string reason;          // why error/unsupported: signal, exit code, stderr tail
  double wall_s = 0;           // the whole scenario, launch to verdict
  nlohmann::json environment;  // collect_environment()
  std::string created_at;      // UTC ISO-8601; empty: now
  // A configuration of a matrix with a "compare" block: {"id", "scenario"} of its reference
  // configuration (the report key "config_reference"); null otherwise, and the key is left out.
  nlohmann::json config_reference;
};

// The comparison as a report stores it: every count, the summary line, and first divergences
// with both logprobs as hex bit patterns and as numbers (null when not finite). ULP distances are
// null where a NaN is involved (ulp_distance's UINT64_MAX).
nlohmann::json to_json(const Comparison& c);

// The full report. Keys: schema, id, scenario, environment, model, generations, comparisons,
// verdict, reason (null when empty), expect and expect_met (null without an expectation),
// wall_s, created_at; config_reference for a configuration compared against a reference.
nlohmann::json make_report(const ReportInput& in);

// "2025-01-31T12:34:56Z" for the current time.
std::string utc_now_iso8601();

// A file name for the report of scenario `id`: the id with every character outside
// [A-Za-z0-9._=,+-] replaced by '_' (and cut to 150 characters), then '-' and 12 hex digits of a
// 64-bit FNV-1a hash of the whole id, then ".json". Stable across runs and machines; two ids that
// sanitize alike still get different names through the hash.
std::string report_file_name(const std::string& id);

// Reads and checks a report file: valid JSON, an object, "schema" == "bih.report/1", "id" a
// string, "verdict" a valid verdict, "scenario" an object, "comparisons" an array, "expect" null
// or a verdict. Throws InputError naming the file and the offending pointer.
nlohmann::json read_report(const std::string& path);

}  // namespace bih
