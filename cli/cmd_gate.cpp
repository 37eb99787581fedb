// cmd_gate.cpp: `bih gate`, the CI regression gate.
#include <cstdio>
#include <memory>

#include "base/errors.hpp"
#include "cli/commands.hpp"
#include "harness/expectations.hpp"
#include "harness/gate.hpp"
#include "harness/junit.hpp"
#include "harness/report_set.hpp"

namespace bih::cli {

Command add_gate_command(CLI::App& app) {
  struct Args {
    std::string expect;
    std::vector<std::string> report_dirs;
    std::string junit;
    bool strict = false;
    bool require_all = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "gate",
      "Check reports against an expectations file (exit 0: every scenario as expected, 1: a "
      "regression, a changed verdict or a missing scenario)");
  cmd->footer(
      R"(Expectations file (JSON, comments allowed; schema ci/expectations.schema.json):
  {"schema": "bih.expectations/1",
   "expectations": [{"id": "<exact scenario id, or a glob with * ?>",
                     "verdict": "invariant|batch_variant|nondeterministic|config_variant|prefill_variant|error|unsupported",
                     "why": "free text, e.g. the upstream issue",
                     "require": true}],
   "require_all": false}
An exact id beats any glob; among globs the first in file order wins. A scenario that no entry
matches is expected to be `invariant`: list only the accepted variances.

Outcomes: pass; regression (expected invariant, got anything else; or got error) -> failure;
changed (one variance became another) -> failure; unexpected_pass (an expected variance, error or
unsupported went away) -> warning, failure with --strict; missing (a run manifest names the
scenario but no report was gathered: pass every shard's folder) -> failure; unchecked (it could
not run here, `unsupported`, while a verdict was declared for it by an entry or its own `expect`)
-> counted with its reason ("6 not checked on this machine: ranks nccl at tp=2 needs 2 GPUs") and a
JUnit <skipped>, a failure naming what is missing when it must run (--require-all, an entry's
"require": true, the file's "require_all": true). bih run judges its exit code by the same rule.
Each problem line says which line of the expectations file to change, or the entry to add.
Exit codes: 0 pass, 1 gate failure, 2 bad input (expectations file, reports).)");
  cmd->add_option("--expect", args->expect, "Expectations file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("reports", args->report_dirs,
                  "Report folders (of every shard) or report files of `bih run`")
      ->required();
  cmd->add_option("--junit", args->junit,
                  "Also write JUnit XML here: one test case per scenario, named by its id");
  cmd->add_flag("--strict", args->strict, "An unexpected pass fails the gate too");
  cmd->add_flag("--require-all", args->require_all,
                "Every scenario must run here: one that could not (unsupported) fails the gate, "
                "naming what is missing, instead of being counted as not checked");
  return {cmd, [args] {
            const ExpectationsFile expectations = load_expectations(args->expect);
            const ReportSet reports = load_report_set(args->report_dirs);
            if (reports.reports.empty() && reports.missing_ids.empty()) {
              std::string where;
              for (const auto& d : args->report_dirs) where += (where.empty() ? "" : ", ") + d;
              throw InputError(where +
                               ": no report and no run manifest found; valid: the --out "
                               "folder(s) of bih run");
            }
            const GateResult result =
                decide_gate(expectations, reports,
                            GateOptions{.strict = args->strict, .require_all = args->require_all});
            std::fputs(render_gate_text(result).c_str(), stdout);
            if (!args->junit.empty()) {
              std::string suite;
              for (const auto& d : args->report_dirs) suite += (suite.empty() ? "" : " + ") + d;
              write_junit(args->junit, result, suite);
              std::printf("JUnit XML: %s\n", args->junit.c_str());
            }
            return result.exit_code();
          }};
}

}  // namespace bih::cli
