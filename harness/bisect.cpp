#include "harness/bisect.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "base/strings.hpp"
#include "harness/driver.hpp"
#include "harness/environment.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "spec/dotted_keys.hpp"
#include "spec/plan.hpp"
#include "spec/scenario_file.hpp"

namespace bih {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kNcclEnvPrefix = "nccl_env.";

// A copy whose relative prompts file is anchored at the scenario's own file, so that knobs from
// two files in different folders mean the same thing, and the worker finds the file.
Scenario anchored(Scenario s) {
  const fs::path file = s.plan.prompts.file;
  if (!file.empty() && file.is_relative()) {
    s.plan.prompts.file =
        fs::absolute(fs::path(s.source_file).parent_path() / file).lexically_normal().string();
  }
  return s;
}

// The path of a dotted key inside a scenario object. nccl_env entry names are taken whole.
std::vector<std::string> key_path(const std::string& dotted) {
  if (dotted.rfind(kNcclEnvPrefix, 0) == 0) {
    return {"nccl_env", dotted.substr(std::string(kNcclEnvPrefix).size())};
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted.find('.', start);
    parts.push_back(dotted.substr(start, dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

json unflatten(const std::map<std::string, json>& leaves) {
  json root = json::object();
  for (const auto& [dotted, value] : leaves) {
    const std::vector<std::string> parts = key_path(dotted);
    json* node = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) node = &(*node)[parts[i]];
    (*node)[parts.back()] = value;
  }
  return root;
}

// Where a dotted key sits in a scenario file's order; nccl_env entries right after "nccl_env".
size_t file_rank(const std::string& dotted) {
  static const std::vector<std::string> order = scenario_dotted_keys();
  const std::string lookup = dotted.rfind(kNcclEnvPrefix, 0) == 0 ? "nccl_env" : dotted;
  const auto it = std::find(order.begin(), order.end(), lookup);
  return static_cast<size_t>(it - order.begin());
}

std::string format_value(const std::optional<json>& value) {
  if (!value) return "(absent)";
  return value->is_string() ? value->get<std::string>() : value->dump();
}

json change_json(const KnobChange& c) {
  return {{"key", c.key},
          {"good", c.good ? *c.good : json(nullptr)},
          {"bad", c.bad ? *c.bad : json(nullptr)},
          {"text", describe(c)}};
}

// The knobs that decide a run, as one string: equal strings, same run.
std::string cache_key(const Scenario& s) {
  json j = s.to_json();
  j.erase("name");
  j.erase("expect");
  return j.dump();
}

bool decided(Verdict v) { return v != Verdict::error && v != Verdict::unsupported; }

}  // namespace

std::string to_string(TrialOutcome outcome) {
  switch (outcome) {
    case TrialOutcome::holds:
      return "holds";
    case TrialOutcome::flips:
      return "flips";
    case TrialOutcome::unresolved:
      return "unresolved";
  }
  return "?";
}

std::vector<size_t> ddmin(size_t count,
                          const std::function<TrialOutcome(const std::vector<size_t>&)>& test) {
  std::map<std::vector<size_t>, TrialOutcome> asked;
  auto ask = [&](const std::vector<size_t>& subset) {
    if (subset.empty()) return TrialOutcome::holds;          // GOOD, by precondition
    if (subset.size() == count) return TrialOutcome::flips;  // BAD, by precondition
    auto it = asked.find(subset);
    if (it != asked.end()) return it->second;
    const TrialOutcome outcome = test(subset);
    asked.emplace(subset, outcome);
    return outcome;
  };

  std::vector<size_t> current(count);
  std::iota(current.begin(), current.end(), size_t{0});
  size_t granularity = 2;
  while (current.size() >= 2) {
    granularity = std::min(granularity, current.size());
    // Split into `granularity` contiguous parts of near-equal size; order stays sorted.
    std::vector<std::vector<size_t>> parts;
    for (size_t i = 0; i < granularity; ++i) {
      const size_t begin = i * current.size() / granularity;
      const size_t end = (i + 1) * current.size() / granularity;
      parts.emplace_back(current.begin() + begin, current.begin() + end);
    }
    bool reduced = false;
    // Reduce to a part that flips on its own.
    for (const auto& part : parts) {
      if (ask(part) == TrialOutcome::flips) {
        current = part;
        granularity = 2;
        reduced = true;
        break;
      }
    }
    // Reduce to a complement that flips. With two parts the complements are the parts again.
    if (!reduced && granularity > 2) {
      for (const auto& part : parts) {
        std::vector<size_t> complement;
        std::set_difference(current.begin(), current.end(), part.begin(), part.end(),
                            std::back_inserter(complement));
        if (ask(complement) == TrialOutcome::flips) {
          current = std::move(complement);
          granularity -= 1;
          reduced = true;
          break;
        }
      }
    }
    if (reduced) continue;
    if (granularity >= current.size()) break;  // every single change was tried: 1-minimal
    granularity = std::min(granularity * 2, current.size());
  }
  return current;
}

std::string describe(const KnobChange& change) {
  return change.key + " (" + format_value(change.good) + " -> " + format_value(change.bad) + ")";
}

std::map<std::string, json> scenario_knobs(const Scenario& scenario) {
  const Scenario s = anchored(scenario);
  json j = s.to_json();
  j.erase("name");
  j.erase("expect");
  std::map<std::string, json> leaves;
  flatten_dotted(j, "", leaves);
  // The identity ring is what parallel.tp implies; keeping it would pin a ring of the wrong size
  // onto a trial that takes BAD's tp.
  if (s.ring_order.empty()) leaves.erase("parallel.ring_order");
  return leaves;
}

std::vector<KnobChange> differing_knobs(const Scenario& good, const Scenario& bad) {
  const auto good_knobs = scenario_knobs(good);
  const auto bad_knobs = scenario_knobs(bad);
  std::vector<KnobChange> changes;
  auto value_of = [](const std::map<std::string, json>& knobs,
                     const std::string& key) -> std::optional<json> {
    const auto it = knobs.find(key);
    if (it == knobs.end()) return std::nullopt;
    return it->second;
  };
  std::vector<std::string> keys;
  for (const auto& [key, value] : good_knobs) keys.push_back(key);
  for (const auto& [key, value] : bad_knobs) {
    if (!good_knobs.count(key)) keys.push_back(key);
  }
  for (const auto& key : keys) {
    KnobChange c{key, value_of(good_knobs, key), value_of(bad_knobs, key)};
    if (c.good != c.bad) changes.push_back(std::move(c));
  }
  std::stable_sort(changes.begin(), changes.end(), [](const KnobChange& a, const KnobChange& b) {
    const size_t ra = file_rank(a.key), rb = file_rank(b.key);
    return ra != rb ? ra < rb : a.key < b.key;
  });
  return changes;
}

Scenario apply_changes(const Scenario& good, const std::vector<KnobChange>& changes,
                       const std::string& name) {
  std::map<std::string, json> knobs = scenario_knobs(good);
  for (const KnobChange& c : changes) {
    if (c.bad) {
      knobs[c.key] = *c.bad;
    } else {
      knobs.erase(c.key);
    }
  }
  json j = unflatten(knobs);
  j["name"] = name;
  Scenario s = scenario_from_json(j, good.source_file, "");
  if (make_plan(s.plan, s.prefix_caching).comparisons.empty()) {
    throw InputError(good.source_file, "/plan",
                     "the plan compares nothing; valid: at least two batch_sizes, repeats >= 2, "
                     "or fresh_process true");
  }
  return s;
}

int BisectOutcome::exit_code() const {
  switch (result) {
    case BisectResult::culprit_found:
      return static_cast<int>(ExitCode::ok);
    case BisectResult::inconsistent:
      return static_cast<int>(ExitCode::conformance_failure);
    case BisectResult::undecided:
      return static_cast<int>(ExitCode::infrastructure);
  }
  return static_cast<int>(ExitCode::infrastructure);
}

json BisectOutcome::to_json() const {
  static const std::map<BisectResult, std::string> result_names{
      {BisectResult::culprit_found, "culprit_found"},
      {BisectResult::inconsistent, "inconsistent"},
      {BisectResult::undecided, "undecided"}};
  json j = {{"schema", "bih.bisect/1"},
            {"flips_when", "the verdict differs from GOOD's verdict"},
            {"good", {{"id", good_id}, {"verdict", bih::to_string(good_verdict)}}},
            {"bad", {{"id", bad_id}, {"verdict", bih::to_string(bad_verdict)}}},
            {"differing", json::array()},
            {"trials", json::array()},
            {"culprit", json::array()},
            {"minimal_flipping_scenario", nullptr},
            {"result", result_names.at(result)},
            {"message", message.empty() ? json(nullptr) : json(message)},
            {"exit_code", exit_code()}};
  for (const auto& c : differing) j["differing"].push_back(change_json(c));
  for (const auto& c : culprit) j["culprit"].push_back(change_json(c));
  for (const Trial& t : trials) {
    j["trials"].push_back(
        {{"index", t.index},
         {"role", t.role},
         {"id", t.id.empty() ? json(nullptr) : json(t.id)},
         {"changed_keys", t.changed_keys},
         {"verdict", t.verdict ? json(bih::to_string(*t.verdict)) : json(nullptr)},
         {"outcome", bih::to_string(t.outcome)},
         {"reason", t.reason.empty() ? json(nullptr) : json(t.reason)},
         {"report", t.report_path.empty() ? json(nullptr) : json(t.report_path)},
         {"reused", t.reused}});
  }
  if (!minimal_id.empty()) {
    j["minimal_flipping_scenario"] = {{"id", minimal_id},
                                      {"verdict", bih::to_string(minimal_verdict)},
                                      {"report", minimal_report}};
  }
  return j;
}

std::string format_trial(const Trial& t) {
  std::string what;
  if (t.role == "good") {
    what = "good";
  } else if (t.role == "bad") {
    what = "bad: all " + std::to_string(t.changed_keys.size()) + " changes";
  } else {
    what = join(t.changed_keys);
    if (t.role == "confirm") what = "confirming, run again: " + what;
  }
  std::string line =
      fmt::format("[trial {}] {} -> {} ({})", t.index, t.id.empty() ? "(invalid scenario)" : t.id,
                  t.verdict ? bih::to_string(*t.verdict) : "unresolved", what);
  if (t.reused) line += " [report reused]";
  if (t.outcome == TrialOutcome::unresolved && !t.reason.empty()) {
    const std::string first_line = t.reason.substr(0, t.reason.find('\n'));
    line += ": " + first_line;
  }
  return line;
}

BisectOutcome bisect(const Scenario& good_in, const Scenario& bad_in, const TrialRunner& run_trial,
                     const std::function<void(const Trial&)>& on_trial) {
  Scenario good = anchored(good_in);
  Scenario bad = anchored(bad_in);
  good.expect.reset();  // trials check no expectation; the verdict is what we compare
  bad.expect.reset();

  BisectOutcome out;
  out.good_id = good.id();
  out.bad_id = bad.id();
  out.differing = differing_knobs(good, bad);
  if (out.differing.empty()) {
    throw InputError(fmt::format(
        "GOOD ({}) and BAD ({}) resolve to the same knobs (they differ at most in name or "
        "expect); valid: two scenarios that differ in at least one knob",
        good.source_file, bad.source_file));
  }

  std::map<std::string, Trial> by_knobs;  // cache_key -> the trial that ran it
  auto record = [&](Trial t) {
    t.index = static_cast<int>(out.trials.size()) + 1;
    out.trials.push_back(t);
    if (on_trial) on_trial(t);
    return t;
  };
  auto keys_of = [](const std::vector<KnobChange>& changes) {
    std::vector<std::string> keys;
    for (const auto& c : changes) keys.push_back(c.key);
    return keys;
  };
  // Runs `s` (or finds it in the cache) and classifies it against GOOD's verdict.
  auto run = [&](const Scenario& s, const std::vector<KnobChange>& changes, const std::string& role,
                 bool allow_cache) -> Trial {
    const std::string key = cache_key(s);
    if (allow_cache) {
      if (auto it = by_knobs.find(key); it != by_knobs.end()) return it->second;
    }
    Trial t;
    t.id = s.id();
    t.changed_keys = keys_of(changes);
    t.role = role;
    const TrialRun r = run_trial(s, allow_cache);
    t.verdict = r.verdict;
    t.reason = r.reason;
    t.report_path = r.report_path;
    t.reused = r.reused;
    if (!decided(r.verdict)) {
      t.outcome = TrialOutcome::unresolved;
      if (t.reason.empty()) t.reason = "the run gave " + bih::to_string(r.verdict);
    } else if (role == "good") {
      t.outcome = TrialOutcome::holds;
    } else {
      t.outcome = r.verdict != out.good_verdict ? TrialOutcome::flips : TrialOutcome::holds;
    }
    t = record(std::move(t));
    if (allow_cache) by_knobs[key] = t;
    return t;
  };

  const Trial good_trial = run(good, {}, "good", true);
  out.good_verdict = *good_trial.verdict;
  const Trial bad_trial = run(bad, out.differing, "bad", true);
  out.bad_verdict = *bad_trial.verdict;
  for (const Trial* t : {&good_trial, &bad_trial}) {
    if (!decided(*t->verdict)) {
      out.result = BisectResult::undecided;
      out.message =
          fmt::format("{} ({}) gave verdict {}, so nothing can be compared with it{}",
                      t->role == "good" ? "GOOD" : "BAD", t->id, bih::to_string(*t->verdict),
                      t->reason.empty() ? "" : ": " + t->reason);
      return out;
    }
  }
  if (out.good_verdict == out.bad_verdict) {
    throw InputError(fmt::format(
        "GOOD ({}) and BAD ({}) both give verdict {}: there is no flip to bisect; valid: two "
        "scenarios with different verdicts (a plan too small to show the difference gives equal "
        "verdicts; reports in the --out folder)",
        out.good_id, out.bad_id, bih::to_string(out.good_verdict)));
  }

  std::map<std::vector<size_t>, Trial> by_subset;
  auto changes_of = [&](const std::vector<size_t>& subset) {
    std::vector<KnobChange> changes;
    for (size_t i : subset) changes.push_back(out.differing[i]);
    return changes;
  };
  auto test = [&](const std::vector<size_t>& subset) {
    const std::vector<KnobChange> changes = changes_of(subset);
    Trial t;
    try {
      const Scenario s =
          apply_changes(good, changes,
                        fmt::format("bisect: {} + {}", good.name.empty() ? "good" : good.name,
                                    join(keys_of(changes))));
      t = run(s, changes, "trial", true);
    } catch (const InputError& e) {
      t.changed_keys = keys_of(changes);
      t.role = "trial";
      t.outcome = TrialOutcome::unresolved;
      t.reason = std::string("not a valid scenario: ") + e.what();
      t = record(std::move(t));
    }
    by_subset[subset] = t;
    return t.outcome;
  };
  const std::vector<size_t> minimal = ddmin(out.differing.size(), test);
  out.culprit = changes_of(minimal);

  // The minimal flipping scenario: BAD itself, or a trial ddmin made.
  const Trial& flipping =
      minimal.size() == out.differing.size() ? bad_trial : by_subset.at(minimal);
  out.minimal_id = flipping.id;
  out.minimal_verdict = *flipping.verdict;
  out.minimal_report = flipping.report_path;

  // 1-minimality rests on every "one change fewer" subset holding; one that errored instead may
  // have hidden a smaller culprit.
  if (minimal.size() >= 2) {
    for (size_t drop : minimal) {
      std::vector<size_t> fewer;
      for (size_t i : minimal) {
        if (i != drop) fewer.push_back(i);
      }
      const Trial& t = by_subset.at(fewer);
      if (t.verdict && !decided(*t.verdict)) {
        out.result = BisectResult::undecided;
        out.message = fmt::format(
            "trial {} ({}) gave verdict {} where the search needed a verdict: without {} the "
            "culprit may be smaller",
            t.index, t.id, bih::to_string(*t.verdict), out.differing[drop].key);
        return out;
      }
    }
  }

  // Flaky runs can make a subset look like it flips: run the answer once more, for real.
  const Scenario minimal_scenario =
      minimal.size() == out.differing.size()
          ? bad
          : apply_changes(good, out.culprit,
                          fmt::format("bisect: {} + {}", good.name.empty() ? "good" : good.name,
                                      join(keys_of(out.culprit))));
  const Trial confirm = run(minimal_scenario, out.culprit, "confirm", false);
  if (confirm.outcome != TrialOutcome::flips) {
    out.result = confirm.outcome == TrialOutcome::unresolved ? BisectResult::undecided
                                                             : BisectResult::inconsistent;
    out.message = fmt::format(
        "the minimal flipping scenario {} gave {} before and {} when run again: the verdicts are "
        "not reproducible, so no culprit can be named",
        out.minimal_id, bih::to_string(out.minimal_verdict), bih::to_string(*confirm.verdict));
    return out;
  }
  out.result = BisectResult::culprit_found;
  return out;
}

int bisect_command(const BisectOptions& options) {
  auto load_one = [](const std::string& file, const std::vector<std::string>& sets) {
    ScenarioSet set = load_scenarios(file, sets);
    if (set.scenarios.size() != 1) {
      throw InputError(file, "",
                       fmt::format("holds {} scenarios (a matrix); valid: a file with exactly one "
                                   "scenario (`bih list` shows a matrix's ids)",
                                   set.scenarios.size()));
    }
    Scenario s = std::move(set.scenarios.front());
    if (make_plan(s.plan, s.prefix_caching).comparisons.empty()) {
      throw InputError(file, "/plan",
                       "the plan compares nothing; valid: at least two batch_sizes, repeats >= 2, "
                       "or fresh_process true");
    }
    return s;
  };
  if (options.bad_file.empty() == options.bad_sets.empty()) {
    throw InputError(
        "bih bisect needs BAD either as a second file or as --bad-set changes to GOOD (one of "
        "them, not both); valid: bih bisect GOOD.json BAD.json, or bih bisect GOOD.json "
        "--bad-set sequence_parallel.enabled=true");
  }
  const Scenario good = load_one(options.good_file, options.sets);
  std::vector<std::string> bad_sets = options.sets;  // --bad-set wins over --set on one key
  bad_sets.insert(bad_sets.end(), options.bad_sets.begin(), options.bad_sets.end());
  const Scenario bad = options.bad_file.empty() ? load_one(options.good_file, bad_sets)
                                                : load_one(options.bad_file, options.sets);

  const auto differing = differing_knobs(anchored(good), anchored(bad));
  std::printf("bisecting %zu differing knob(s): ", differing.size());
  std::vector<std::string> described;
  for (const auto& c : differing) described.push_back(describe(c));
  std::printf("%s\n", join(described).c_str());
  std::printf("a trial flips when its verdict differs from GOOD's; reports in %s\n",
              options.out_dir.c_str());
  std::fflush(stdout);

  fs::create_directories(options.out_dir);
  const json environment = collect_environment();
  const auto comparable = comparable_environment(environment);
  RunOptions run_options;
  run_options.out_dir = options.out_dir;
  run_options.max_divergences = options.max_divergences;
  const bool tty = isatty(STDERR_FILENO);

  TrialRunner runner = [&](const Scenario& s, bool allow_reuse) {
    TrialRun r;
    const fs::path path = fs::path(options.out_dir) / report_file_name(s.id());
    if (allow_reuse && fs::exists(path)) {
      // A report from an earlier bisect or run of the same knobs in a comparable environment.
      try {
        json report = read_report(path.string());
        json then = report.at("scenario");
        json now = s.to_json();
        for (json* j : {&then, &now}) {
          j->erase("name");
          j->erase("expect");
        }
        const Verdict verdict = *parse_verdict(report.at("verdict").get<std::string>());
        if (then == now && comparable_environment(report.at("environment")) == comparable &&
            verdict != Verdict::error) {
          r.verdict = verdict;
          r.reason = report.value("reason", json()).is_string() ? report.at("reason") : "";
          r.report_path = path.string();
          r.reused = true;
          return r;
        }
      } catch (const std::exception&) {
        // Unreadable or foreign: run again and replace it.
      }
    }
    const ScenarioOutcome o = run_scenario(s, run_options, [&](const std::string& phase) {
      if (!tty) return;
      std::fprintf(stderr, "\r\033[K  %s | %s", s.id().c_str(), phase.c_str());
      std::fflush(stderr);
    });
    if (tty) std::fprintf(stderr, "\r\033[K");
    r.verdict = o.verdict;
    r.reason = o.reason;
    r.report_path = o.report_path;
    return r;
  };

  const BisectOutcome outcome = bisect(good, bad, runner, [](const Trial& t) {
    std::printf("%s\n", format_trial(t).c_str());
    std::fflush(stdout);
  });
  remove_work_folder_if_done(options.out_dir);

  const int runs = static_cast<int>(std::count_if(outcome.trials.begin(), outcome.trials.end(),
                                                  [](const Trial& t) { return t.verdict; }));
  std::printf("%zu trial(s), %d run(s) or reused report(s)\n", outcome.trials.size(), runs);
  if (!outcome.culprit.empty()) {
    std::vector<std::string> culprit;
    for (const auto& c : outcome.culprit) culprit.push_back(describe(c));
    std::printf("%s: %s\n",
                outcome.result == BisectResult::culprit_found ? "culprit" : "candidate culprit",
                join(culprit).c_str());
    std::printf("minimal flipping scenario: %s\n", outcome.minimal_id.c_str());
  }
  if (!outcome.message.empty()) std::printf("no culprit named: %s\n", outcome.message.c_str());
  if (!options.json_path.empty()) {
    write_file_atomically(options.json_path, outcome.to_json().dump(2) + "\n");
  }
  return outcome.exit_code();
}

}  // namespace bih
