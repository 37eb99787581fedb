// main.cpp: the `bih` command line. The only place that turns failures into exit codes:
// 0 as expected, 1 a conformance failure, 2 a usage or input error, 3 an infrastructure failure.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "harness/diff.hpp"
#include "harness/driver.hpp"
#include "harness/errors.hpp"
#include "harness/generation.hpp"
#include "harness/scenario_file.hpp"
#include "harness/worker.hpp"
#if defined(BIH_HAVE_CUDA)
#include "models/cuda/device_info.hpp"
#endif

namespace {

constexpr const char* kDescription = R"(bih: batch-invariance conformance harness.

Runs an LLM engine's request alone (bs=1) and inside a batch (bs=64), again in the same process and
in a fresh one, and diffs the greedy tokens and logprobs bit for bit. Verdicts: invariant,
batch_variant, nondeterministic, error, unsupported.

Start with:
  bih run scenarios/issue-56370.json            the motivating vLLM issue, replayed on the tiny model
  bih list scenarios/issue-56370.json           the scenario ids (usable with --only)
  bih run FILE --only 'tp=4,sp=on*' --set plan.prompts.count=8   a quick subset
  bih diff out/work/.../gen-bs_1.json out/work/.../gen-bs_64.json  two generation dumps

Exit codes: 0 as expected, 1 a conformance failure, 2 a usage or input error, 3 an infrastructure
failure (a worker crashed or timed out).)";

int diff_command(const std::string& a_path, const std::string& b_path, int max_divergences) {
  const bih::Generation a = bih::generation_from_json(bih::read_json_file(a_path), a_path);
  const bih::Generation b = bih::generation_from_json(bih::read_json_file(b_path), b_path);
  const bih::Comparison c = bih::compare(a, b, "batch", static_cast<size_t>(max_divergences));
  std::printf("%s (%s) vs %s (%s): %s\n", a_path.c_str(), a.label.c_str(), b_path.c_str(),
              b.label.c_str(), bih::summarize(c).c_str());
  if (!c.first_divergences.empty()) {
    std::printf("%-7s %-5s %-9s %-9s %-12s %-12s %s\n", "prompt", "step", "token_a", "token_b",
                "logprob_a", "logprob_b", "ulp");
  }
  for (const bih::Divergence& d : c.first_divergences) {
    std::printf("%-7d %-5d %-9d %-9d %-12s %-12s %llu\n", d.prompt, d.step, d.token_a, d.token_b,
                bih::hex_bits(d.logprob_a_bits).c_str(), bih::hex_bits(d.logprob_b_bits).c_str(),
                static_cast<unsigned long long>(d.ulp));
  }
  return c.identical() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "bih"};
  app.require_subcommand(1);

  bih::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Run scenario or matrix files: one JSON report per scenario and a table");
  run_cmd->add_option("files", run.files, "Scenario or matrix files (JSON, comments allowed)")
      ->required()
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--set", run.sets,
                      "Override a knob in every scenario, e.g. --set parallel.tp=4 "
                      "--set kernels=vendor (value parsed as JSON, else a string)");
  run_cmd->add_option("--only", run.only,
                      "Keep scenarios whose id contains FILTER, or matches it as a glob when it "
                      "has * or ? (repeatable: any match keeps)");
  run_cmd->add_option("--out", run.out_dir, "Folder for the reports")->capture_default_str();
  run_cmd->add_flag("--keep-work", run.keep_work,
                    "Keep the generation dumps under OUT/work/ (for bih diff)");
  run_cmd
      ->add_option("--max-divergences", run.max_divergences,
                   "First divergences kept per comparison")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));

  std::vector<std::string> list_files, list_sets, list_only;
  CLI::App* list_cmd =
      app.add_subcommand("list", "Print the scenario ids of files (validates them)");
  list_cmd->add_option("files", list_files, "Scenario or matrix files")
      ->required()
      ->check(CLI::ExistingFile);
  list_cmd->add_option("--set", list_sets, "As for run");
  list_cmd->add_option("--only", list_only, "As for run");

  std::string diff_a, diff_b;
  int diff_max = 16;
  CLI::App* diff_cmd = app.add_subcommand(
      "diff", "Diff two generation dumps bitwise (exit 0 when identical, 1 when not)");
  diff_cmd->add_option("a", diff_a, "First generation dump")->required()->check(CLI::ExistingFile);
  diff_cmd->add_option("b", diff_b, "Second generation dump")->required()->check(CLI::ExistingFile);
  diff_cmd->add_option("--max-divergences", diff_max, "First divergences shown")
      ->capture_default_str();

  bih::WorkerArgs worker;
  CLI::App* worker_cmd = app.add_subcommand("worker", "Internal: run one scenario's generations");
  worker_cmd->group("");  // hidden from --help
  worker_cmd->add_option("--scenario", worker.scenario_file)->required();
  worker_cmd->add_option("--work", worker.work_dir)->required();
  worker_cmd->add_flag("--fresh", worker.fresh);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(bih::ExitCode::usage_error);
  }

#if defined(BIH_HAVE_CUDA)
  bih::cuda::register_environment_provider();
#endif
  try {
    if (*run_cmd) return bih::run_command(run);
    if (*list_cmd) {
      std::vector<bih::Scenario> all;
      for (const auto& f : list_files) {
        for (auto& s : bih::load_scenarios(f, list_sets).scenarios) all.push_back(std::move(s));
      }
      for (const auto& s : bih::filter_scenarios(std::move(all), list_only)) {
        std::printf("%s%s\n", s.id().c_str(),
                    s.expect ? ("  expect=" + bih::to_string(*s.expect)).c_str() : "");
      }
      return 0;
    }
    if (*diff_cmd) return diff_command(diff_a, diff_b, diff_max);
    if (*worker_cmd) return bih::run_worker(worker);
  } catch (const bih::InputError& e) {
    std::fprintf(stderr, "bih: error: %s\n", e.what());
    return static_cast<int>(bih::ExitCode::usage_error);
  } catch (const bih::InfraError& e) {
    std::fprintf(stderr, "bih: infrastructure error: %s\n", e.what());
    return static_cast<int>(bih::ExitCode::infrastructure);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bih: internal error: %s\n", e.what());
    return static_cast<int>(bih::ExitCode::infrastructure);
  }
  return 0;
}
