// cmd_explain.cpp: `bih explain REPORT`: the first op whose bits moved.
#include <cstdio>
#include <memory>
#include <optional>

#include "base/atomic_file.hpp"
#include "cli/commands.hpp"
#include "harness/explain.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"

namespace bih::cli {

Command add_explain_command(CLI::App& app) {
  struct Args {
    std::string report;
    std::string kind;
    bool no_write = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Localize a report's first divergence: re-run that token in both contexts with activation "
      "capture and name the first layer/op/rank whose bits differ, and whether its inputs were "
      "still equal. Adds a \"localization\" section to the report.");
  cmd->add_option("report", args->report, "A report written by bih run")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--comparison", args->kind,
                  "Which comparison to explain: batch, repeat, fresh, cache or config (default: "
                  "the one the verdict rests on)")
      ->check(CLI::IsMember({"batch", "repeat", "fresh", "cache", "config"}));
  cmd->add_flag("--no-write", args->no_write, "Print only; leave the report unchanged");
  return {cmd, [args] {
            nlohmann::json report = read_checked_report(args->report);
            const Localization l = explain_report(
                report, args->kind.empty() ? std::nullopt : std::optional<std::string>(args->kind));
            std::printf("%s\n%s\n", report.at("id").get<std::string>().c_str(), l.summary.c_str());
            // stderr: `bih run` keeps it in the scenario's work folder, out of the report.
            std::fprintf(stderr, "bih explain: re-run times: %s\n", l.timings.c_str());
            if (!args->no_write) {
              report["localization"] = to_json(l);
              write_file_atomically(args->report, report.dump(2) + "\n");
            }
            return 0;
          }};
}

}  // namespace bih::cli
