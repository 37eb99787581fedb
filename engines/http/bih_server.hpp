// bih_server.hpp: bih's engine as an OpenAI-compatible completions server (`bih serve`).
//
// The HTTP twin of `bih adapter`: the endpoints and reply shapes follow vLLM's documented
// OpenAI-compatible server (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html),
// with token-id prompts only (bih has no tokenizer) and greedy decoding only. Continuous
// batching: one scheduler thread owns the Engine; HTTP handler threads queue their sequences and
// wait; before every step the scheduler admits every queued sequence (up to max_num_seqs, the rest
// wait in order), so the requests in flight at a step decode together (docs/bih-serve.md).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/engine.hpp"

namespace bih {

struct BihServerInfo {
  std::string model;    // the served model name (GET /v1/models, "model" in replies)
  std::string version;  // GET /version
  nlohmann::json resolved = nlohmann::json::object();  // GET /bih/resolved
};

class BihServer {
 public:
  // `engine` must outlive the server and be touched by nobody else while it runs.
  BihServer(Engine& engine, BihServerInfo info);
  ~BihServer();  // stops and joins
  BihServer(const BihServer&) = delete;
  BihServer& operator=(const BihServer&) = delete;

  // Binds host:port (0: a free port) and returns the port. Throws InfraError when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop(): blocks. Requests in flight when stop() comes are answered 503.
  void run();
  // Thread-safe (not async-signal-safe); run() returns soon after.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace bih
