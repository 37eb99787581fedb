#include "harness/gate.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

namespace bih {
namespace {

std::string where(const ExpectationsFile& file, const Expectation& e) {
  return e.line > 0 ? fmt::format("{}:{}", file.path, e.line)
                    : fmt::format("{} (entry {})", file.path, e.index);
}

// The shard that should have run `id`, from any sharded manifest: "shard 3/4".
std::string owning_shard(const ReportSet& reports, const std::string& id) {
  for (const auto& m : reports.manifests) {
    if (m.shard_count <= 1) continue;
    const auto it = std::find(m.all_ids.begin(), m.all_ids.end(), id);
    if (it == m.all_ids.end()) continue;
    const int k = static_cast<int>(it - m.all_ids.begin());
    return fmt::format("shard {}/{}", k % m.shard_count + 1, m.shard_count);
  }
  return "";
}

std::string fix_for(const ExpectationsFile& file, const GateCase& c, const ReportSet& reports) {
  if (c.outcome == GateOutcome::missing) {
    const std::string shard = owning_shard(reports, c.id);
    bool ran_but_no_report = false;
    for (const auto& m : reports.manifests) {
      if (std::find(m.shard_ids.begin(), m.shard_ids.end(), c.id) != m.shard_ids.end()) {
        ran_but_no_report = true;
      }
    }
    if (ran_but_no_report) {
      return fmt::format(
          "{} was asked to run it but left no report: run it again (bih run "
          "--resume with the same --out) and gate again",
          shard.empty() ? "the run" : "the run of " + shard);
    }
    return shard.empty() ? "gather the folder of the run that has it, or run it"
                         : fmt::format(
                               "pass the report folder of {} too (bih run MATRIX --shard "
                               "{} --out DIR), or run that shard",
                               shard, shard.substr(6));
  }
  const Verdict got = *c.got;
  if (c.outcome == GateOutcome::unchecked) {
    const std::string reason = c.report ? first_reason_line(*c.report) : "";
    const std::string why_required =
        c.entry && file.entries[*c.entry].require
            ? "its entry at " + where(file, file.entries[*c.entry]) + " says \"require\": true"
        : file.require_all ? file.path + " says \"require_all\": true"
                           : "--require-all";
    return fmt::format(
        "it could not run here ({}), and it must ({}): run the gate where it can run, or drop "
        "the requirement",
        reason.empty() ? "no reason given" : reason, why_required);
  }
  if (!c.entry) {
    return fmt::format(
        "no entry matches it (expected {} by default); to accept {}, add to "
        "\"expectations\" in {}: {}",
        to_string(kDefaultExpectation), to_string(got), file.path,
        entry_json(c.id, got, "<why this verdict is accepted>"));
  }
  const Expectation& e = file.entries[*c.entry];
  if (e.glob) {
    return fmt::format(
        "the glob '{}' at {} expects {}; to accept {} for this scenario alone, add "
        "an exact entry (it beats any glob): {}",
        e.id, where(file, e), to_string(e.verdict), to_string(got),
        entry_json(c.id, got, e.why.empty() ? "<why>" : e.why));
  }
  return fmt::format(
      "{}change {} to: {}",
      c.outcome == GateOutcome::regression ? "fix the regression, or to accept it " : "",
      where(file, e), entry_json(c.id, got, e.why));
}

}  // namespace

std::string first_reason_line(const nlohmann::json& report) {
  if (!report.contains("reason") || !report["reason"].is_string()) return "";
  const std::string reason = report["reason"].get<std::string>();
  return reason.substr(0, reason.find('\n'));
}

std::string verdict_evidence(const nlohmann::json& report) {
  const bool want_repeat = report.value("verdict", "") == "nondeterministic";
  const bool want_config = report.value("verdict", "") == "config_variant";
  const nlohmann::json* shown = nullptr;
  int shown_rank = -1;  // 2: differs and is the wanted kind, 1: differs, 0: identical
  // read_report checks only that "comparisons" is an array: a field of the wrong type reads as
  // absent here rather than ending the gate in nlohmann's type_error (found by fuzz_report).
  const auto text = [](const nlohmann::json& c, const char* key, const char* absent) {
    return c.is_object() && c.contains(key) && c[key].is_string() ? c[key].get<std::string>()
                                                                  : std::string(absent);
  };
  for (const auto& c : report.at("comparisons")) {
    const bool differs = c.is_object() && c.contains("identical") && c["identical"].is_boolean() &&
                         !c["identical"].get<bool>();
    const std::string kind = text(c, "kind", "");
    const bool wanted_kind = want_config   ? kind == "config"
                             : want_repeat ? (kind == "repeat" || kind == "fresh")
                                           : kind != "config";
    const int rank = differs ? (wanted_kind ? 2 : 1) : 0;
    if (rank > shown_rank) shown = &c, shown_rank = rank;
  }
  std::string evidence;
  if (shown) {
    evidence = fmt::format("{} {} vs {}: {}", text(*shown, "kind", "?"), text(*shown, "a", "?"),
                           text(*shown, "b", "?"), text(*shown, "summary", "?"));
  }
  if (report.contains("reason") && report["reason"].is_string()) {
    const std::string reason = report["reason"].get<std::string>();
    evidence += (evidence.empty() ? "" : "; ") + reason.substr(0, reason.find('\n'));
  }
  return evidence;
}

std::string to_string(GateOutcome outcome) {
  switch (outcome) {
    case GateOutcome::pass:
      return "pass";
    case GateOutcome::regression:
      return "regression";
    case GateOutcome::changed:
      return "changed";
    case GateOutcome::unexpected_pass:
      return "unexpected_pass";
    case GateOutcome::missing:
      return "missing";
    case GateOutcome::unchecked:
      return "unchecked";
  }
  return "?";
}

GateOutcome classify(const Expected& e, Verdict got) {
  switch (check_expectation(got, e)) {
    case ExpectationCheck::met:
      return GateOutcome::pass;
    case ExpectationCheck::unchecked:
    case ExpectationCheck::required_unchecked:
      return GateOutcome::unchecked;
    case ExpectationCheck::missed:
      break;
  }
  const Verdict expected = e.verdict;
  if (expected == Verdict::invariant || got == Verdict::error) return GateOutcome::regression;
  if (got == Verdict::invariant) return GateOutcome::unexpected_pass;
  return GateOutcome::changed;
}

GateResult decide_gate(const ExpectationsFile& file, const ReportSet& reports,
                       const GateOptions& options) {
  GateResult result;
  std::vector<bool> entry_used(file.entries.size(), false);
  auto expect_for = [&](GateCase& c) {
    const Expectation* e = match_expectation(file, c.id);
    c.must_run = options.require_all || file.require_all;
    if (e) {
      c.entry = e->index;
      c.expected = e->verdict;
      c.expectation_source = where(file, *e);
      c.must_run = c.must_run || e->require;
      entry_used[e->index] = true;
    } else {
      c.expected = kDefaultExpectation;
      c.expectation_source = "no entry matches: the default";
    }
  };
  for (const auto& report : reports.reports) {
    GateCase c;
    c.id = report.at("id").get<std::string>();
    c.report = &report;
    c.got = parse_verdict(report.at("verdict").get<std::string>());
    expect_for(c);
    // A verdict is declared by an entry or by the scenario's own `expect` (which the run judged
    // it by): then unsupported is unchecked here, as `bih run` counts it.
    const bool declared =
        c.entry.has_value() || (report.contains("expect") && report["expect"].is_string());
    c.outcome = classify(
        Expected{.verdict = c.expected, .declared = declared, .must_run = c.must_run}, *c.got);
    result.cases.push_back(std::move(c));
  }
  for (const auto& id : reports.missing_ids) {
    GateCase c;
    c.id = id;
    expect_for(c);
    c.outcome = GateOutcome::missing;
    result.cases.push_back(std::move(c));
  }
  std::sort(result.cases.begin(), result.cases.end(),
            [](const GateCase& a, const GateCase& b) { return a.id < b.id; });
  for (GateCase& c : result.cases) {
    c.failure = c.outcome != GateOutcome::pass &&
                (c.outcome != GateOutcome::unexpected_pass || options.strict) &&
                (c.outcome != GateOutcome::unchecked || c.must_run);
    if (c.outcome == GateOutcome::pass) {
      ++result.passed;
      continue;
    }
    if (c.outcome == GateOutcome::unchecked && !c.failure) {
      ++result.unchecked;  // counted and named in the totals, nothing to fix
      continue;
    }
    c.fix = fix_for(file, c, reports);
    ++(c.failure ? result.failures : result.warnings);
  }

  if (!reports.duplicate_ids.empty()) {
    result.notes.push_back(
        fmt::format("{} scenario(s) have several reports; the newest of each is gated (first: {})",
                    reports.duplicate_ids.size(), reports.duplicate_ids.front()));
  }
  for (const auto& difference : reports.environment_differences) {
    result.notes.push_back("reports come from different environments: " + difference);
  }
  for (const auto& e : file.entries) {
    if (!entry_used[e.index]) {
      result.notes.push_back(
          fmt::format("{} matches no scenario gathered here: {}", where(file, e), e.id));
    }
  }
  return result;
}

std::string render_gate_text(const GateResult& result) {
  size_t id_width = 8, expected_width = 8, got_width = 3;
  for (const auto& c : result.cases) {
    id_width = std::max(id_width, c.id.size());
    expected_width = std::max(expected_width, to_string(c.expected).size());
    got_width = std::max(got_width, c.got ? to_string(*c.got).size() : 9);
  }
  std::string out = fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", "scenario", id_width, "expected",
                                expected_width, "got", got_width, "outcome");
  for (const auto& c : result.cases) {
    const char* mark = c.outcome == GateOutcome::pass        ? "✓"
                       : c.failure                           ? "✗"
                       : c.outcome == GateOutcome::unchecked ? "○"
                                                             : "!";
    out += fmt::format("{} {:<{}}  {:<{}}  {:<{}}  {}\n", mark, c.id, id_width,
                       to_string(c.expected), expected_width,
                       c.got ? to_string(*c.got) : "(missing)", got_width, to_string(c.outcome));
  }
  bool first_problem = true;
  std::vector<std::string> unchecked_reasons;
  for (const auto& c : result.cases) {
    if (c.outcome == GateOutcome::unchecked && !c.failure) {
      unchecked_reasons.push_back(c.report ? first_reason_line(*c.report) : "");
    }
    if (c.outcome == GateOutcome::pass || c.fix.empty()) continue;
    if (first_problem) out += "\n";
    first_problem = false;
    const std::string level = c.failure ? "FAIL" : "warning";
    if (c.outcome == GateOutcome::missing) {
      out += fmt::format(
          "{} {}: {}: no report: scenario missing from the run (shard not "
          "gathered?)\n  -> {}\n",
          level, to_string(c.outcome), c.id, c.fix);
      continue;
    }
    const std::string detail = c.report ? verdict_evidence(*c.report) : "";
    out += fmt::format("{} {}: {}: expected {} ({}), got {}{}\n  -> {}\n", level,
                       to_string(c.outcome), c.id, to_string(c.expected), c.expectation_source,
                       to_string(*c.got), detail.empty() ? "" : ": " + detail, c.fix);
  }
  if (!result.notes.empty()) out += "\n";
  for (const auto& note : result.notes) out += "note: " + note + "\n";
  if (!unchecked_reasons.empty()) out += "\n" + unchecked_summary(unchecked_reasons) + "\n";
  out += fmt::format("\ngate: {} scenario(s): {} passed, {} failed, {} warning(s){} -> {}\n",
                     result.cases.size(), result.passed, result.failures, result.warnings,
                     result.unchecked ? fmt::format(", {} not checked here", result.unchecked) : "",
                     result.exit_code() == 0 ? "PASS" : "FAIL");
  return out;
}

}  // namespace bih
