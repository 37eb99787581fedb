// cmd_matrix.cpp: `bih matrix`: reports -> a compatibility matrix in Markdown, CSV, JSON and HTML.
#include <cstdio>
#include <memory>
#include <sstream>

#include "base/errors.hpp"
#include "cli/commands.hpp"
#include "harness/matrix_render.hpp"
#include "harness/matrix_view.hpp"
#include "harness/report_set.hpp"

namespace bih::cli {
namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::string join_commas(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

}  // namespace

Command add_matrix_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> inputs;
    std::string rows, cols, split, out_dir = ".";
    std::vector<std::string> formats;
    std::string title;
    bool strict_environment = false;
  };
  auto args = std::make_shared<Args>();
  const MatrixOptions defaults;
  args->rows = join_commas(defaults.rows);
  args->cols = join_commas(defaults.cols);
  args->split = join_commas(defaults.split);
  args->title = defaults.title;
  args->formats = matrix_formats();

  CLI::App* cmd = app.add_subcommand(
      "matrix",
      "Turn reports into a compatibility matrix: matrix.md, matrix.csv, matrix.json and a "
      "self-contained matrix.html. Give the folders of every shard: scenarios named by a run "
      "manifest without a report are listed as missing");
  cmd->add_option("reports", args->inputs, "Report folders (or report files) of one or more runs")
      ->required();
  cmd->add_option("--rows", args->rows, "Scenario keys down the side (dotted, comma-separated)")
      ->capture_default_str();
  cmd->add_option("--cols", args->cols, "Scenario keys across the top (dotted, comma-separated)")
      ->capture_default_str();
  cmd->add_option("--split", args->split,
                  "Scenario keys that pick the table: one table per value combination")
      ->capture_default_str();
  cmd->add_option("--format", args->formats, "Formats to write (repeatable): md, csv, json, html")
      ->check(CLI::IsMember(matrix_formats()))
      ->capture_default_str();
  cmd->add_option("--out", args->out_dir, "Folder for the matrix files")->capture_default_str();
  cmd->add_option("--title", args->title, "Page title")->capture_default_str();
  cmd->add_flag("--strict-environment", args->strict_environment,
                "Refuse (exit 2) when the reports come from different environments instead of "
                "showing a warning");
  return {
      cmd, [args] {
        MatrixOptions options;
        options.rows = split_commas(args->rows);
        options.cols = split_commas(args->cols);
        options.split = split_commas(args->split);
        options.title = args->title;
        check_matrix_axes(options);  // a typo is refused before any report is read
        const ReportSet set = load_report_set(args->inputs);
        if (set.reports.empty() && set.missing_ids.empty()) {
          throw InputError("bih matrix: no reports found in the given folders or files");
        }
        if (!set.environment_differences.empty()) {
          std::string fields;
          for (const auto& d : set.environment_differences) fields += "\n  " + d;
          if (args->strict_environment) {
            throw InputError(
                "the reports come from different environments (--strict-environment):" + fields);
          }
          std::fprintf(stderr,
                       "bih matrix: warning: the reports come from different environments; "
                       "the matrix says so:%s\n",
                       fields.c_str());
        }
        const MatrixView view = build_matrix_view(set, options);
        for (const auto& path : write_matrix_files(view, args->formats, args->out_dir)) {
          std::printf("wrote %s\n", path.c_str());
        }
        std::printf("%d reports in %zu tables", view.report_count, view.tables.size());
        for (const auto& [verdict, n] : view.verdict_totals) {
          std::printf(", %d %s", n, verdict.c_str());
        }
        std::printf("\n");
        if (!set.missing_ids.empty()) {
          std::fprintf(stderr, "bih matrix: %zu scenarios have no report:\n",
                       set.missing_ids.size());
          for (const auto& id : set.missing_ids) std::fprintf(stderr, "  %s\n", id.c_str());
        }
        return 0;
      }};
}

}  // namespace bih::cli
