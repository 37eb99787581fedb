// bisect.hpp: `bih bisect GOOD BAD`, the smallest set of knob changes that flips a verdict.
//
// GOOD and BAD are two resolved scenarios with different verdicts. Their knobs are flattened to
// dotted leaves (arrays such as capture_sizes are one leaf; "name" and "expect" carry no knob), the
// differing leaves become the candidate changes, and delta debugging (Zeller & Hildebrandt's ddmin)
// searches for a 1-minimal subset C such that GOOD + C flips. A trial *flips* when its verdict
// differs from GOOD's verdict (not necessarily equal to BAD's: a change that turns an invariant
// scenario nondeterministic is as much a culprit as one that makes it batch variant). A trial is
// *unresolved* when GOOD + C is not a valid scenario (e.g. a ring order that does not fit TP) or
// its run ended in `error` / `unsupported`: ddmin then neither keeps nor discards that subset.
//
// The search itself is pure; how a trial runs is a callback, so tests drive it with a synthetic
// verdict function and the CLI with real worker processes (harness/driver.hpp).
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "spec/scenario.hpp"
#include "spec/verdict.hpp"

namespace bih {

// ---- Delta debugging --------------------------------------------------------------------------

enum class TrialOutcome { holds, flips, unresolved };
std::string to_string(TrialOutcome outcome);

// Zeller & Hildebrandt's ddmin over the changes 0..count-1, with unresolved outcomes.
// Preconditions, established by the caller and never asked again: the full set flips and the
// empty set holds. `test` receives sorted, non-empty, proper subsets, each distinct subset at most
// once, in a deterministic order. Returns a sorted 1-minimal flipping subset: removing any one of
// its changes gives a subset that holds or is unresolved.
std::vector<size_t> ddmin(size_t count,
                          const std::function<TrialOutcome(const std::vector<size_t>&)>& test);

// ---- Knobs ------------------------------------------------------------------------------------

// One knob that differs between GOOD and BAD; nullopt where the knob is absent on that side
// (an nccl_env entry, model.path vs model.preset).
struct KnobChange {
  std::string key;  // dotted, e.g. "collectives.reduce_scatter"
  std::optional<nlohmann::json> good;
  std::optional<nlohmann::json> bad;
};

// "collectives.reduce_scatter (tree -> ring)"; strings unquoted, absent shown as "(absent)".
std::string describe(const KnobChange& change);

// The knobs of a resolved scenario as dotted leaves: every leaf of Scenario::to_json() but "name"
// and "expect"; arrays are one leaf; nccl_env entries are "nccl_env.NCCL_*"; the identity ring
// order is left out (it is the default that follows parallel.tp); a relative plan.prompts.file
// is anchored at the scenario's file, so GOOD and BAD from different folders compare fairly.
std::map<std::string, nlohmann::json> scenario_knobs(const Scenario& scenario);

// The knobs that differ, ordered as a scenario file lists them (parallel before
// sequence_parallel before collectives ...), nccl_env entries by name.
std::vector<KnobChange> differing_knobs(const Scenario& good, const Scenario& bad);

// GOOD with the BAD side of `changes` applied, named `name`, without an expectation. Throws
// InputError (from scenario_from_json) when the combination is not a valid scenario.
Scenario apply_changes(const Scenario& good, const std::vector<KnobChange>& changes,
                       const std::string& name);

// ---- The bisection ----------------------------------------------------------------------------

// What running one scenario gave.
struct TrialRun {
  Verdict verdict = Verdict::error;
  std::string reason;       // the run's reason (error, unsupported), may be empty
  std::string report_path;  // empty when none was written
  bool reused = false;      // taken from an existing report rather than run
};

// Runs one scenario. `allow_reuse` false asks for a real run (the confirmation of the result).
using TrialRunner = std::function<TrialRun(const Scenario& scenario, bool allow_reuse)>;

struct Trial {
  int index = 0;                          // 1-based, in the order the trials were made
  std::string id;                         // empty when the combination is invalid
  std::vector<std::string> changed_keys;  // the changes applied to GOOD
  std::string role;                       // "good", "bad", "trial" or "confirm"
  std::optional<Verdict> verdict;         // nullopt when the combination is invalid
  TrialOutcome outcome = TrialOutcome::unresolved;
  std::string reason;  // why it is unresolved, or the run's reason
  std::string report_path;
  bool reused = false;
};

enum class BisectResult {
  culprit_found,  // exit 0
  inconsistent,   // exit 1: the verdicts contradict each other (flaky runs)
  undecided,      // exit 3: a run errored where the decision needed its verdict
};

struct BisectOutcome {
  std::string good_id, bad_id;
  Verdict good_verdict = Verdict::error, bad_verdict = Verdict::error;
  std::vector<KnobChange> differing;
  std::vector<Trial> trials;
  std::vector<KnobChange> culprit;  // the 1-minimal flipping changes (when found)
  std::string minimal_id;           // GOOD + culprit
  Verdict minimal_verdict = Verdict::error;
  std::string minimal_report;
  BisectResult result = BisectResult::undecided;
  std::string message;  // one line: why inconsistent or undecided

  int exit_code() const;
  nlohmann::json to_json() const;  // {"schema": "bih.bisect/1", ...}
};

// Runs GOOD and BAD, then ddmin over their differing knobs, then runs the minimal flipping
// scenario once more without reuse to confirm it. Each trial made (cached ones excepted) is passed
// to `on_trial` as it completes. Trials are cached by their resolved knobs within one call, so no
// scenario runs twice (but for the confirmation). Throws InputError when GOOD and BAD have the
// same verdict: there is nothing to bisect.
BisectOutcome bisect(const Scenario& good, const Scenario& bad, const TrialRunner& run_trial,
                     const std::function<void(const Trial&)>& on_trial = {});

// One line for a trial: "[trial K] ID -> VERDICT (changed keys)".
std::string format_trial(const Trial& trial);

struct BisectOptions {
  std::string good_file;
  std::string bad_file;                // empty when bad_sets describe BAD
  std::vector<std::string> bad_sets;   // --bad-set key=value: BAD = GOOD + these
  std::vector<std::string> sets;       // --set key=value, applied to both
  std::string out_dir = "bisect-out";  // every trial's report, named by id
  std::string json_path;               // --json FILE: the summary
  int max_divergences = 16;
};

// `bih bisect`: loads GOOD and BAD (each file must hold exactly one scenario), bisects with real
// runs, prints each trial and the culprit, writes the summary. Returns the exit code (0 culprit
// found, 1 inconsistent, 3 undecided); throws InputError for bad input (exit 2).
int bisect_command(const BisectOptions& options);

}  // namespace bih
