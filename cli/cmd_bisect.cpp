// cmd_bisect.cpp: `bih bisect GOOD BAD`, the smallest knob change that flips a verdict.
#include <memory>

#include "cli/commands.hpp"
#include "harness/bisect.hpp"

namespace bih::cli {

Command add_bisect_command(CLI::App& app) {
  auto options = std::make_shared<BisectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bisect",
      "Find the smallest set of knob changes from GOOD to BAD that flips the verdict (delta "
      "debugging over the knobs that differ); prints every trial and the culprit knobs. Exit 0 "
      "culprit found, 1 the verdicts are not reproducible, 2 bad input (including GOOD and BAD "
      "with the same verdict), 3 a run errored where the decision needed it");
  cmd->add_option("good", options->good_file, "GOOD scenario file (exactly one scenario)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("bad", options->bad_file,
                  "BAD scenario file (exactly one scenario); or leave it out and give --bad-set")
      ->check(CLI::ExistingFile);
  cmd->add_option("--bad-set", options->bad_sets,
                  "BAD is GOOD with this change, e.g. --bad-set sequence_parallel.enabled=true "
                  "(repeatable; wins over --set on the same key)");
  cmd->add_option("--set", options->sets,
                  "Override a knob in both GOOD and BAD, e.g. to shrink the plan: "
                  "--set plan.prompts.count=8 --set plan.max_tokens=4");
  cmd->add_option("--out", options->out_dir,
                  "Folder for every trial's report (named by scenario id; a report of the same "
                  "knobs from this environment is reused instead of run again)")
      ->capture_default_str();
  cmd->add_option("--json", options->json_path, "Write a JSON summary of the bisection here");
  cmd->add_option("--max-divergences", options->max_divergences,
                  "First divergences kept per comparison in each report")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  return {cmd, [options] { return bisect_command(*options); }};
}

}  // namespace bih::cli
