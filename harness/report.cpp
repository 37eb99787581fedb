// report.cpp: builds, names and reads report documents.
#include "harness/report.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "harness/expectations.hpp"

namespace bih {
namespace {

using json = nlohmann::json;

// JSON has no NaN or infinity; such values are written as null (the schema allows it).
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// ulp_distance's "NaN involved" (UINT64_MAX) is written as null: 2^64-1 would read as a real
// distance, and JSON readers without 64-bit integers would round it.
json ulp_or_null(uint64_t ulp) {
  return ulp == std::numeric_limits<uint64_t>::max() ? json(nullptr) : json(ulp);
}

json to_json(const Divergence& d) {
  return {{"prompt", d.prompt},
          {"step", d.step},
          {"token_a", d.token_a},
          {"token_b", d.token_b},
          {"logprob_a_bits", hex_bits(d.logprob_a_bits)},
          {"logprob_b_bits", hex_bits(d.logprob_b_bits)},
          {"logprob_a", finite_or_null(std::bit_cast<float>(d.logprob_a_bits))},
          {"logprob_b", finite_or_null(std::bit_cast<float>(d.logprob_b_bits))},
          {"ulp", ulp_or_null(d.ulp)}};
}

json to_json(const GenerationTiming& g) {
  json out = {{"label", g.label},
              {"batch_size", g.batch_size},
              {"repeat", g.repeat},
              {"fresh_process", g.fresh_process},
              {"wall_s", g.wall_s},
              {"steps", g.steps},
              {"tokens_processed", g.tokens_processed},
              {"cache", g.cache.empty() ? json() : json(g.cache)},
              // Rows through the model per second; null for an unmeasured (zero) wall time.
              {"tokens_per_s",
               g.wall_s > 0 ? json(static_cast<double>(g.tokens_processed) / g.wall_s) : json()}};
  // Only an engine that sends requests has them: other reports stay as they were.
  if (g.max_in_flight > 0) out["requests_in_flight"] = g.max_in_flight;
  if (g.solo_lanes > 1) out["solo_lanes"] = g.solo_lanes;
  return out;
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

GenerationTiming timing_of(const Generation& g) {
  return {g.label, g.batch_size,       g.repeat, g.fresh_process, g.wall_s,
          g.steps, g.tokens_processed, "",       g.max_in_flight, g.solo_lanes};
}

nlohmann::json to_json(const Comparison& c) {
  json divergences = json::array();
  for (const Divergence& d : c.first_divergences) divergences.push_back(to_json(d));
  json out = {{"kind", c.kind},
              {"a", c.a_label},
              {"b", c.b_label},
              // An unsupported comparison compared nothing: neither identical nor not.
              {"identical", c.unsupported.empty() ? json(c.identical()) : json()},
              {"summary", summarize(c)},
              {"tokens_compared", c.tokens_compared},
              {"tokens_differ", c.tokens_differ},
              {"logprobs_compared", c.logprobs_compared},
              {"logprobs_differ", c.logprobs_differ},
              {"sequences_compared", c.sequences_compared},
              {"sequences_diverged", c.sequences_diverged},
              {"max_abs_delta", finite_or_null(c.max_abs_delta)},
              {"max_ulp", ulp_or_null(c.max_ulp)},
              {"first_divergences", std::move(divergences)}};
  // A config comparison says against what: the reference's id and the knobs that differ.
  if (c.kind == "config") {
    out["reference"] = c.reference_id;
    json knobs = json::array();
    for (const auto& k : c.knob_changes) {
      knobs.push_back({{"key", k.key},
                       {"value", json::parse(k.value)},
                       {"reference_value", json::parse(k.reference_value)}});
    }
    out["knobs"] = std::move(knobs);
  }
  // compare.top_k / row_digest / prefill: only where they apply, so other reports read as before.
  if (c.top_k_compared > 0 || c.row_digests_compared > 0 || !c.notes.empty()) {
    out["top_k_compared"] = c.top_k_compared;
    out["top_k_differ"] = c.top_k_differ;
    out["row_digests_compared"] = c.row_digests_compared;
    out["row_digests_differ"] = c.row_digests_differ;
  }
  if (!c.notes.empty()) out["notes"] = c.notes;
  if (!c.unsupported.empty()) out["unsupported"] = c.unsupported;
  return out;
}

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

// check_expectation's met or missed; null where nothing was expected or nothing could be checked
// here (unsupported against a declared verdict), as the run's table and the gate count it.
namespace {
json expect_met(const ReportInput& in) {
  if (!in.expect) return json();
  const ExpectationCheck check = check_expectation(in.verdict, Expected{*in.expect, true, false});
  if (check == ExpectationCheck::unchecked) return json();
  return check == ExpectationCheck::met;
}
}  // namespace

nlohmann::json make_report(const ReportInput& in) {
  json generations = json::array();
  for (const GenerationTiming& g : in.generations) generations.push_back(to_json(g));
  json comparisons = json::array();
  for (const Comparison& c : in.comparisons) comparisons.push_back(to_json(c));
  json report = {{"schema", kReportSchema},
                 {"id", in.id},
                 {"scenario", in.scenario},
                 {"environment", in.environment},
                 {"model", in.model},
                 {"generations", std::move(generations)},
                 {"comparisons", std::move(comparisons)},
                 {"verdict", to_string(in.verdict)},
                 {"reason", in.reason.empty() ? json() : json(in.reason)},
                 {"expect", in.expect ? json(to_string(*in.expect)) : json()},
                 {"expect_met", expect_met(in)},
                 {"wall_s", in.wall_s},
                 {"created_at", in.created_at.empty() ? utc_now_iso8601() : in.created_at}};
  if (in.engine.is_object()) report["engine"] = in.engine;
  if (in.health.is_object()) report["health"] = in.health;
  if (in.config_reference.is_object()) report["config_reference"] = in.config_reference;
  return report;
}

std::string report_file_name(const std::string& id) {
  constexpr size_t kMaxStem = 150;  // leaves room under the usual 255-byte name limit
  std::string stem;
  for (char c : id.substr(0, kMaxStem)) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '.' || c == '_' || c == '=' || c == ',' || c == '+' || c == '-';
    stem += safe ? c : '_';
  }
  // No hidden files, no "." or ".." path components: a leading dot becomes '_'.
  if (stem.empty()) stem = "scenario";
  if (stem[0] == '.') stem[0] = '_';
  const std::string hash = fmt::format("{:016x}", fnv1a64(id)).substr(0, 12);
  return stem + "-" + hash + ".json";
}

nlohmann::json read_report(const std::string& path) {
  const json j = read_json_file(path);
  if (!j.is_object()) throw InputError(path, "", "a report must be a JSON object");
  if (!j.contains("schema") || j["schema"] != kReportSchema) {
    throw InputError(path, "/schema",
                     std::string("expected \"") + kReportSchema + "\", found " +
                         (j.contains("schema") ? j["schema"].dump() : "nothing"));
  }
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty()) {
    throw InputError(path, "/id", "expected the scenario id, a non-empty string");
  }
  const char* kVerdicts =
      "invariant, batch_variant, nondeterministic, config_variant, prefill_variant, error or "
      "unsupported";
  if (!j.contains("verdict") || !j["verdict"].is_string() ||
      !parse_verdict(j["verdict"].get<std::string>())) {
    throw InputError(path, "/verdict", std::string("expected one of ") + kVerdicts);
  }
  if (j.contains("expect") && !j["expect"].is_null() &&
      (!j["expect"].is_string() || !parse_verdict(j["expect"].get<std::string>()))) {
    throw InputError(path, "/expect", std::string("expected null or one of ") + kVerdicts);
  }
  if (!j.contains("scenario") || !j["scenario"].is_object()) {
    throw InputError(path, "/scenario", "expected the resolved scenario, an object");
  }
  if (!j.contains("comparisons") || !j["comparisons"].is_array()) {
    throw InputError(path, "/comparisons", "expected an array of comparisons");
  }
  return j;
}

}  // namespace bih
