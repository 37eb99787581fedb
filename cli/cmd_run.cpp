// cmd_run.cpp: `bih run` and `bih list`.
#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "harness/driver.hpp"
#include "spec/scenario_file.hpp"

namespace bih::cli {
namespace {

const char* kRunFooter = R"(Examples:
  bih run scenarios/issue-56370.json                          every scenario of a matrix file
  bih run scenarios/issue-56370.json --only 'tp=4,sp=on*' --set plan.prompts.count=8 --out out/quick
  bih run FILE --out out/mine --keep-work                     keep the dumps for bih diff
  bih run FILE --dry-run                                      each scenario's id and what it would run

--set KEY=VALUE edits every scenario as if the file said so: a relative path in VALUE (e.g.
--set plan.prompts.file=prompts.json or --set model.path=ckpt) is resolved against the scenario
file's folder, as the file's own paths are, not against the working directory; give an absolute
path to mean another place.

--out is locked for the run (OUT/.lock): a second run into the same folder is refused with the
first one's pid.

Exit codes: 0 every scenario met its expect (or is invariant when none is given), or could not run
here while expecting something else (counted and named: "2 not checked on this machine: ..."), 1
a conformance failure (also: unsupported without an expect, or any unsupported with
--require-all), 2 a usage or input error (the message names the file, the JSON pointer and
what would be valid; nothing is run), 3 an infrastructure failure (a worker crashed or timed out).)";

}  // namespace

Command add_run_command(CLI::App& app) {
  auto run = std::make_shared<RunOptions>();
  auto shard = std::make_shared<std::string>("1/1");
  CLI::App* cmd = app.add_subcommand(
      "run", "Run scenario or matrix files: one JSON report per scenario and a table");
  cmd->add_option("files", run->files, "Scenario or matrix files (JSON, comments allowed)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", run->sets,
                  "Override a knob in every scenario, e.g. --set parallel.tp=4 "
                  "--set kernels=vendor (value parsed as JSON, else a string)");
  cmd->add_option("--only", run->only,
                  "Keep scenarios whose id contains FILTER, or matches it as a glob when it "
                  "has * or ? (repeatable: any match keeps)");
  cmd->add_option("--out", run->out_dir, "Folder for the reports")->capture_default_str();
  cmd->add_option("--shard", *shard,
                  "Run a deterministic 1/N of the scenarios: I/N takes every scenario k "
                  "(0-based, selection order) with k % N == I-1; bih matrix and bih gate "
                  "gather the shards' reports and name missing scenarios")
      ->capture_default_str();
  cmd->add_flag("--resume", run->resume,
                "Skip scenarios whose report in --out was made from the same resolved "
                "scenario in the same environment (error verdicts are run again)");
  cmd->add_flag("--require-all", run->require_all,
                "A scenario that cannot run here (unsupported) fails the run (exit 1) instead of "
                "being counted as not checked on this machine");
  cmd->add_flag("--dry-run", run->dry_run,
                "Print each scenario's id and what it would run (engine, command line, "
                "environment); run nothing, write nothing");
  cmd->add_flag("--keep-work", run->keep_work,
                "Keep the generation dumps under OUT/work/ (for bih diff)");
  cmd->add_option("--max-divergences", run->max_divergences,
                  "First divergences kept per comparison")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  cmd->footer(kRunFooter);
  return {cmd, [run, shard] {
            parse_shard(*shard, run->shard_index, run->shard_count);
            return run_command(*run);
          }};
}

Command add_list_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> files, sets, only;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("list", "Print the scenario ids of files (validates them)");
  cmd->add_option("files", args->files, "Scenario or matrix files")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", args->sets, "As for run");
  cmd->add_option("--only", args->only, "As for run");
  return {cmd, [args] {
            std::vector<Scenario> all;
            for (const auto& f : args->files) {
              for (auto& s : load_scenarios(f, args->sets).scenarios) all.push_back(std::move(s));
            }
            for (const auto& s : filter_scenarios(std::move(all), args->only)) {
              std::printf("%s%s\n", s.id().c_str(),
                          s.expect ? ("  expect=" + to_string(*s.expect)).c_str() : "");
            }
            return 0;
          }};
}

}  // namespace bih::cli
