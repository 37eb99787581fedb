// cmd_serve.cpp: `bih serve`: bih's own engine as an OpenAI-compatible server with continuous
// batching (engines/http/bih_server.hpp, docs/bih-serve.md).
//
// The HTTP twin of `bih adapter`: the knobs file holds the engine protocol's init "knobs" (dotted
// scenario keys) and becomes the same Scenario through the same function (scenario_from_knobs).
// It stops cleanly on SIGINT/SIGTERM, and on its parent's death (PR_SET_PDEATHSIG(SIGTERM)), so a
// bih that launched it never leaves it behind.
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "base/child_process.hpp"
#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "cli/commands.hpp"
#include "engines/bih_adapter.hpp"
#include "engines/bih_engine.hpp"
#include "engines/registry.hpp"
#if defined(BIH_HAVE_HTTP)
#include "engines/http/bih_server.hpp"
#endif

namespace bih::cli {
namespace {

constexpr const char* kServeExamples = R"(Examples:
  bih serve --preset tiny --port 0                          the tiny model; prints the port
  bih serve --knobs knobs.json --model ckpt/ --host 127.0.0.1 --port 8000

The knobs file is a JSON object of dotted scenario keys, as the engine protocol's init "knobs":
{"kernels": "invariant", "parallel.tp": 2, "prefix_caching.enabled": true, "plan.max_num_seqs": 8}.
Endpoints (vLLM's OpenAI-compatible server): GET /health, GET /version, GET /v1/models,
GET /bih/resolved, POST /reset_prefix_cache, POST /v1/completions (token-id prompts, temperature
0, logprobs 0/1, return_token_ids, return_tokens_as_token_ids). See docs/bih-serve.md.)";

struct ServeArgs {
  std::string knobs_file;
  std::string model;
  std::string preset;
  std::string host = "127.0.0.1";
  int port = 8000;
  int max_model_len = 512;
  int max_num_seqs = 64;
  std::string served_model_name;
};

#if defined(BIH_HAVE_HTTP)
// Dies with the parent that started it: SIGTERM, which the interrupt handler turns into a stop.
void die_with_parent() {
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) throw InfraError("bih serve: its parent exited while it started");
}

int run_serve(const ServeArgs& a) {
  install_interrupt_handlers();
  die_with_parent();
  if (a.model.empty() == a.preset.empty()) {
    throw InputError(
        "bih serve: give --model PATH (an HF checkpoint folder) or --preset NAME; "
        "valid: exactly one of them");
  }
  const std::string where = a.knobs_file.empty() ? "bih serve" : a.knobs_file;
  const nlohmann::json knobs =
      a.knobs_file.empty() ? nlohmann::json::object() : read_json_file(a.knobs_file);
  if (!knobs.is_object()) {
    throw InputError(a.knobs_file, "",
                     "the knobs file is not a JSON object; valid: dotted "
                     "scenario keys, {\"parallel.tp\": 2, ...}");
  }
  const nlohmann::json model =
      a.model.empty() ? nlohmann::json{{"preset", a.preset}} : nlohmann::json{{"path", a.model}};
  Scenario s;
  try {
    s = scenario_from_knobs(model, knobs, a.max_num_seqs, a.max_model_len, 1, where);
    if (std::string why = EngineRegistry::instance().unsupported_reason(s); !why.empty()) {
      throw UnsupportedError(why);
    }
  } catch (const UnsupportedError& e) {
    std::fprintf(stderr, "bih serve: unsupported: %s\n", e.what());
    return static_cast<int>(ExitCode::usage_error);
  }
  std::unique_ptr<TestedEngine> tested = EngineRegistry::instance().make(s, EngineContext{});
  auto* bih = dynamic_cast<BihTestedEngine*>(tested.get());
  if (bih == nullptr) {
    throw InputError(where, "/engine/kind",
                     "bih serve serves bih's own engine; valid: engine.kind \"bih\" or absent");
  }
  const EngineIdentity& id = bih->identity();
  BihServerInfo info;
  info.model = !a.served_model_name.empty() ? a.served_model_name
               : a.model.empty()            ? "preset:" + a.preset
                                            : a.model;
  info.version = id.version;
  info.resolved = {{"engine", {{"name", id.name}, {"version", id.version}}},
                   {"value", id.value},
                   {"settings", resolved_settings(s, id)}};
  BihServer server(*bih->bundle().engine, info);
  const int port = server.bind(a.host, a.port);
  std::printf("bih serve: listening on http://%s:%d\n", a.host.c_str(), port);
  std::fflush(stdout);
  // The signal handler only sets a flag; this thread turns it into a stop. stop() is repeated
  // because one that lands before the listener runs is not seen by it.
  std::atomic<bool> served{false};
  std::thread watcher([&] {
    while (!served) {
      if (interrupt_signal() != 0) server.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  server.run();
  served = true;
  watcher.join();
  if (const int sig = interrupt_signal(); sig != 0) {
    std::fprintf(stderr, "bih serve: stopped by %s\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
  return 0;
}
#else
int run_serve(const ServeArgs&) {
  std::fprintf(stderr,
               "bih serve: this bih was built without HTTP support; install libcpp-httplib-dev "
               "(and pkg-config) and rebuild\n");
  return static_cast<int>(ExitCode::usage_error);
}
#endif

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve bih's own engine as an OpenAI-compatible HTTP server with continuous "
      "batching (the HTTP twin of `bih adapter`)");
  cmd->footer(kServeExamples);
  cmd->add_option(
      "--knobs", args->knobs_file,
      "JSON object of scenario knobs as dotted keys (the engine protocol's init knobs)");
  cmd->add_option("--model", args->model, "HF checkpoint folder (config.json + safetensors)");
  cmd->add_option("--preset", args->preset, "a preset's synthetic weights instead (tiny, ...)");
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: a free one, printed)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-model-len", args->max_model_len,
                  "prompt + generated tokens per sequence (knob plan.max_model_len overrides)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-seqs", args->max_num_seqs,
                  "sequences running together; more wait (knob plan.max_num_seqs overrides)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--served-model-name", args->served_model_name,
                  "the model name in /v1/models and replies (default: the path or preset:NAME)");
  return {cmd, [args] { return run_serve(*args); }};
}

}  // namespace bih::cli
