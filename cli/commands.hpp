// commands.hpp: each `bih` subcommand registers itself on the CLI11 app from its own file.
//
// A command's add_* function declares its options and returns the subcommand plus the action to
// run when it was chosen. Actions return an exit code or throw (InputError -> 2, InfraError -> 3);
// main() is the only place that maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace bih::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);
Command add_list_command(CLI::App& app);
Command add_diff_command(CLI::App& app);
Command add_matrix_command(CLI::App& app);
Command add_worker_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_bisect_command(CLI::App& app);
Command add_probe_command(CLI::App& app);
Command add_gate_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_adapter_command(CLI::App& app);
Command add_serve_command(CLI::App& app);

}  // namespace bih::cli
