// main.cpp: the `bih` command line. The only place that turns failures into exit codes:
// 0 as expected, 1 a conformance failure, 2 a usage or input error, 3 an infrastructure failure.
#include <csignal>
#include <cstdio>
#include <exception>
#include <vector>

#include "base/child_process.hpp"
#include "base/errors.hpp"
#include "base/process_tree.hpp"
#include "base/utf8.hpp"
#include "cli/commands.hpp"
#include "harness/environment.hpp"
#if defined(BIH_HAVE_CUDA)
#include "engines/cuda/bih_cuda_engine.hpp"
#include "models/cuda/device_info.hpp"
#endif

namespace {

constexpr const char* kDescription = R"(bih: batch-invariance conformance harness.

Runs an LLM engine's request alone (bs=1) and inside a batch (bs=64), again in the same process and
in a fresh one, and diffs the greedy tokens and logprobs bit for bit. Verdicts: invariant,
batch_variant, nondeterministic, config_variant,
prefill_variant (compare.prefill), error, unsupported.

Start with:
  bih run scenarios/issue-56370.json            the motivating vLLM issue, replayed on the tiny model
  bih list scenarios/issue-56370.json           the scenario ids (usable with --only)
  bih run FILE --only 'tp=4,sp=on*' --set plan.prompts.count=8   a quick subset
  bih run FILE --keep-work, then bih diff A.json B.json          two generation dumps
  bih explain out/REPORT.json                   which layer/op/rank first moved the bits
  bih bisect GOOD.json BAD.json                 the smallest knob change that flips the verdict
  bih probe all                                 op-level invariance probes (kernels, collectives)
  bih gate --expect ci/expectations.json OUT    CI gate: exit 1 on a regression, JUnit with --junit
  bih matrix OUT... --out site/                 compatibility matrix: Markdown, CSV, JSON, HTML
  bih export --preset tiny --format gguf --out tiny.gguf   the same weights for other engines

Exit codes: 0 as expected, 1 a conformance failure, 2 a usage or input error, 3 an infrastructure
failure (a worker crashed or timed out).)";

// Runs the chosen verb, mapping what it throws to an exit code. Messages quote paths and outside
// text as they came; they are printed as UTF-8 (bytes that are not become visible \xNN).
int run_verb(const bih::cli::Command& command) {
#if defined(BIH_HAVE_CUDA)
  bih::set_gpu_environment_provider(bih::cuda::gpu_environment);
  bih::cuda::register_cuda_backend();
#endif
  try {
    return command.run();
  } catch (const bih::InputError& e) {
    std::fprintf(stderr, "bih: error: %s\n", bih::valid_utf8(e.what()).c_str());
    return static_cast<int>(bih::ExitCode::usage_error);
  } catch (const bih::InfraError& e) {
    std::fprintf(stderr, "bih: infrastructure error: %s\n", bih::valid_utf8(e.what()).c_str());
    return static_cast<int>(bih::ExitCode::infrastructure);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bih: internal error: %s\n", bih::valid_utf8(e.what()).c_str());
    return static_cast<int>(bih::ExitCode::infrastructure);
  } catch (...) {
    // The driver's interruption (SIGINT/SIGTERM) escaping a verb that does not report it itself.
    if (const int sig = bih::interrupt_signal(); sig != 0) {
      std::fprintf(stderr, "bih: interrupted by %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      return 128 + sig;
    }
    std::fprintf(stderr, "bih: internal error: an unknown exception\n");
    return static_cast<int>(bih::ExitCode::infrastructure);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "bih"};
  app.require_subcommand(1);
  // clang-format off
  const std::vector<bih::cli::Command> commands{
      bih::cli::add_run_command(app),
      bih::cli::add_list_command(app),
      bih::cli::add_diff_command(app),
      bih::cli::add_explain_command(app),
      bih::cli::add_bisect_command(app),
      bih::cli::add_probe_command(app),
      bih::cli::add_gate_command(app),
      bih::cli::add_matrix_command(app),
      bih::cli::add_export_command(app),
      bih::cli::add_adapter_command(app),
      bih::cli::add_serve_command(app),
      bih::cli::add_worker_command(app),
  };
  // clang-format on
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : static_cast<int>(bih::ExitCode::usage_error);
  }
  const bih::cli::Command* chosen = nullptr;
  for (const auto& command : commands) {
    if (*command.app) chosen = &command;
  }
  if (chosen == nullptr) return 0;
  // Verbs that start processes own everything below them (base/process_tree.hpp): `run` and
  // `bisect` behind a guardian, the worker as the subreaper of its adapter's tree.
  const std::string verb = chosen->app->get_name();
  const bool guarded = verb == "run" || verb == "bisect";
  const bool owns_tree = guarded || verb == "worker";
  try {
    if (guarded) {
      bih::start_guardian();  // before any thread exists
      bih::install_interrupt_handlers();
    } else if (owns_tree) {
      bih::become_subreaper();
    }
  } catch (const bih::InfraError& e) {
    std::fprintf(stderr, "bih: infrastructure error: %s\n", bih::valid_utf8(e.what()).c_str());
    return static_cast<int>(bih::ExitCode::infrastructure);
  }
  const int code = run_verb(*chosen);
  if (owns_tree) bih::kill_descendants();
  return code;
}
