// gate.hpp: the CI regression gate's decision, reports against an expectations file.
//
// Each scenario that has a report, or that a run manifest names, gets one outcome:
//   pass             the verdict is the expected one
//   regression       expected `invariant` and got anything else, or got `error` where something
//                    else was expected                                                -> failure
//   changed          expected one variance (or error/unsupported), got another non-invariant
//                    verdict, e.g. batch_variant -> nondeterministic                   -> failure
//   unexpected_pass  expected a variance (or error/unsupported) and got `invariant`: good news,
//                    but the baseline is stale                         -> warning (--strict:
//                    failure)
//   missing          a manifest names it and no report exists (a shard not gathered?) -> failure
//   unchecked        got `unsupported` where another verdict was declared (an entry, or the
//                    scenario's own `expect`): nothing was checked on this machine      -> counted
//                    and named, not a failure; a failure when the scenario must run
//                    (--require-all, the entry's "require", the file's "require_all")
// The split between pass, unchecked and the failures is check_expectation's (expectations.hpp),
// the rule `bih run` uses too; the failures are then told apart by classify().
// Every outcome but pass carries the fix: the file:line of the entry to change and its new text,
// or the entry to add when no entry matched.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/expectations.hpp"
#include "harness/report_set.hpp"
#include "spec/verdict.hpp"

namespace bih {

enum class GateOutcome { pass, regression, changed, unexpected_pass, missing, unchecked };
std::string to_string(GateOutcome outcome);

// The outcome of one verdict against one expectation (for a scenario that has a report).
GateOutcome classify(const Expected& expected, Verdict got);
// The same for an expectation that nothing declared (the default, must not be unsupported).
inline GateOutcome classify(Verdict expected, Verdict got) {
  return classify(Expected{.verdict = expected}, got);
}

struct GateCase {
  std::string id;
  GateOutcome outcome = GateOutcome::pass;
  bool failure = false;  // counts against the gate (a warning when false and not pass)
  Verdict expected = kDefaultExpectation;
  bool must_run = false;           // unsupported fails rather than being unchecked
  std::optional<Verdict> got;      // nullopt: missing
  std::optional<size_t> entry;     // index into ExpectationsFile::entries; nullopt: the default
  std::string expectation_source;  // "ci/expectations.json:12", or "default (no entry matches)"
  std::string fix;                 // empty for pass
  const nlohmann::json* report = nullptr;  // into the ReportSet; nullptr when missing
};

struct GateResult {
  std::vector<GateCase> cases;  // sorted by id
  int passed = 0, failures = 0, warnings = 0;
  int unchecked = 0;               // not checked on this machine, and allowed to be (not failures)
  std::vector<std::string> notes;  // duplicates, environment differences, unused exact entries
  // 0 when no case is a failure, else 1.
  int exit_code() const { return failures == 0 ? 0 : 1; }
};

struct GateOptions {
  bool strict = false;       // unexpected passes fail the gate
  bool require_all = false;  // every scenario must run: unsupported fails (as "require" does)
};

// The comparison that explains a report's verdict, as "kind a vs b: summary": for
// nondeterministic the first differing repeat/fresh comparison, else the first differing one,
// else the first; then the first line of the reason when there is one. Empty when neither exists.
std::string verdict_evidence(const nlohmann::json& report);

// The first line of a report's reason; empty when it has none.
std::string first_reason_line(const nlohmann::json& report);

// Decides every scenario of `reports` against `expectations`. Pointers in the result refer into
// `reports` and stay valid while it lives.
GateResult decide_gate(const ExpectationsFile& expectations, const ReportSet& reports,
                       const GateOptions& options = {});

// The human summary: a table (scenario, expected, got, outcome), then one line per problem with
// its fix, then the notes and a totals line (with "N not checked on this machine: <reasons>").
// Every line ends with '\n'.
std::string render_gate_text(const GateResult& result);

}  // namespace bih
