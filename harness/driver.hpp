// driver.hpp: `bih run`, scenarios in, one report each and a table out.
//
// For each scenario: decide whether this machine can run it at all (`unsupported` otherwise, never
// a silent downgrade), launch a worker process for its plan (and a second one for the fresh-process
// run), diff the generation dumps bitwise, decide the verdict, write the report atomically. A
// worker that crashes, aborts or overruns timeout_s gives an `error` verdict with the reason, and
// the run goes on to the next scenario.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/config_compare.hpp"
#include "harness/diff.hpp"
#include "spec/scenario.hpp"

namespace bih {

struct RunOptions {
  std::vector<std::string> files;  // scenario or matrix files
  std::vector<std::string> sets;   // --set key=value
  std::vector<std::string> only;   // --only FILTER
  std::string out_dir = "out";
  bool keep_work = false;  // keep generation dumps under OUT/work/
  int max_divergences = 16;
  int shard_index = 1;  // --shard I/N: run every scenario k with k % N == I-1
  int shard_count = 1;
  bool resume = false;       // skip scenarios whose report matches scenario + environment
  bool require_all = false;  // --require-all: an unsupported scenario fails the run
  bool dry_run = false;      // --dry-run: print what each scenario would run; run nothing
};

// Parses "I/N" (1 <= I <= N); throws InputError naming --shard otherwise.
void parse_shard(const std::string& text, int& index, int& count);

struct ScenarioOutcome {
  std::string id;
  Verdict verdict = Verdict::error;
  std::optional<Verdict> expect;
  std::vector<Comparison> comparisons;
  std::string reason;
  std::string report_path;
  double wall_s = 0;
  std::string localization;  // bih explain's output, with "localize": true
  bool resumed = false;      // taken from an existing report (--resume)
  bool work_kept = false;    // missed its expectation: OUT/work/<id> stays for a look
  std::string work_dir;
  std::vector<std::pair<std::string, std::string>> resumed_summaries;  // (kind, summary)
  std::map<std::string, Generation> generations;  // by label, when run_scenario was asked to keep
  bool expectation_met() const { return !expect || *expect == verdict; }
};

// How run_scenario treats a scenario of a matrix with a "compare" block.
struct ConfigRun {
  const ReferenceRun* reference = nullptr;  // a configuration's reference, already run
  bool write_report = true;       // false: a reference run only for its generations (its report
                                  // is another shard's, or already there under --resume)
  bool keep_generations = false;  // hand the generations back in the outcome
};

// Removes out_dir/work once a run is over, with what the run's workers shared there (the
// weights-hash cache), unless something is kept in it (--keep-work dumps, a failure's folder).
void remove_work_folder_if_done(const std::string& out_dir);

// Runs one scenario end to end and writes its report. `progress` receives phase text. A
// configuration with a reference (needs_config_reference) must get the reference's run in
// `config`; its "config" comparisons join the plan's before the verdict.
ScenarioOutcome run_scenario(const Scenario& scenario, const RunOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             const ConfigRun& config = {});

// `bih run`: every scenario of every file, the table on stdout. Returns the exit code: 0 when every
// scenario meets its expectation (invariant where none is given), 1 when a verdict misses it, 3
// when a scenario ended in `error` without expecting it. Throws InputError for bad files.
int run_command(const RunOptions& options);

}  // namespace bih
