// cmd_diff.cpp: `bih diff A B` (two generation dumps), `bih adapter` (bih's engine over the engine
// protocol) and the internal `bih worker`.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "engines/bih_adapter.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "harness/worker.hpp"
#include "spec/scenario_file.hpp"

namespace bih::cli {

Command add_diff_command(CLI::App& app) {
  struct Args {
    std::string a, b;
    int max_divergences = 16;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "diff", "Diff two generation dumps bitwise (exit 0 when identical, 1 when not)");
  cmd->add_option("a", args->a, "First generation dump")->required()->check(CLI::ExistingFile);
  cmd->add_option("b", args->b, "Second generation dump")->required()->check(CLI::ExistingFile);
  cmd->add_option("--max-divergences", args->max_divergences, "First divergences shown")
      ->capture_default_str();
  return {cmd, [args] {
            const Generation a = generation_from_json(read_json_file(args->a), args->a);
            const Generation b = generation_from_json(read_json_file(args->b), args->b);
            const Comparison c = compare(a, b, "batch", static_cast<size_t>(args->max_divergences));
            std::printf("%s (%s) vs %s (%s): %s\n", args->a.c_str(), a.label.c_str(),
                        args->b.c_str(), b.label.c_str(), summarize(c).c_str());
            if (!c.first_divergences.empty()) {
              std::printf("%-7s %-5s %-9s %-9s %-12s %-12s %s\n", "prompt", "step", "token_a",
                          "token_b", "logprob_a", "logprob_b", "ulp");
            }
            for (const Divergence& d : c.first_divergences) {
              std::printf("%-7d %-5d %-9d %-9d %-12s %-12s %llu\n", d.prompt, d.step, d.token_a,
                          d.token_b, hex_bits(d.logprob_a_bits).c_str(),
                          hex_bits(d.logprob_b_bits).c_str(),
                          static_cast<unsigned long long>(d.ulp));
            }
            return c.identical() ? 0 : 1;
          }};
}

Command add_adapter_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "adapter",
      "Serve bih's own engine over the engine protocol bih.engine/1 on stdin/stdout (the "
      "reference adapter: \"command\": [\"bih\", \"adapter\"], model_format hf)");
  return {cmd, [] { return serve_bih_engine(std::cin, std::cout); }};
}

Command add_worker_command(CLI::App& app) {
  auto args = std::make_shared<WorkerArgs>();
  CLI::App* cmd = app.add_subcommand("worker", "Internal: run one scenario's generations");
  cmd->group("");  // hidden from --help
  cmd->add_option("--scenario", args->scenario_file)->required();
  cmd->add_option("--work", args->work_dir)->required();
  cmd->add_flag("--fresh", args->fresh);
  cmd->add_option("--rank", args->rank, "ranks nccl: this process's TP rank (its GPU)");
  cmd->add_option("--nccl-id", args->nccl_unique_id, "ranks nccl: the communicator's unique id");
  return {cmd, [args] { return run_worker(*args); }};
}

}  // namespace bih::cli
