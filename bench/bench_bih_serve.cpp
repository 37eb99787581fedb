// bench_bih_serve.cpp: what bih serve adds per request on the tiny model. The same one-prompt
// generation in-process (Engine::generate) and as a POST /v1/completions to an in-process
// BihServer over loopback: the difference is the HTTP, JSON and scheduler hand-off cost. Also
// requests/s with 8 clients at once (continuous batching).
#if defined(BIH_HAVE_HTTP)
#include <benchmark/benchmark.h>
#include <httplib.h>

#include <latch>
#include <memory>
#include <thread>

#include "engines/bih_adapter.hpp"
#include "engines/bih_engine.hpp"
#include "engines/http/bih_server.hpp"

namespace bih {
namespace {

constexpr int kMaxTokens = 8;

EngineBundle tiny_engine() {
  return make_engine(
      scenario_from_knobs({{"preset", "tiny"}}, nlohmann::json::object(), 64, 512, 1, "bench"));
}

const std::vector<int32_t> kPrompt{11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26};

void BM_EngineGenerateInProcess(benchmark::State& state) {
  EngineBundle b = tiny_engine();
  for (auto _ : state) benchmark::DoNotOptimize(b.engine->generate({kPrompt}, kMaxTokens));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineGenerateInProcess)->Unit(benchmark::kMicrosecond)->UseRealTime();

// A server on a thread of this process, bound to a free loopback port.
struct LocalServer {
  EngineBundle bundle = tiny_engine();
  std::unique_ptr<BihServer> server;
  std::thread thread;
  int port = 0;
  LocalServer() {
    server = std::make_unique<BihServer>(*bundle.engine, BihServerInfo{"preset:tiny", "bench"});
    port = server->bind("127.0.0.1", 0);
    thread = std::thread([this] { server->run(); });
  }
  ~LocalServer() {
    server->stop();
    thread.join();
  }
};

const std::string& request_body() {
  static const std::string body = nlohmann::json{
      {"prompt", kPrompt},
      {"max_tokens", kMaxTokens},
      {"temperature", 0},
      {"logprobs", 1},
      {"return_token_ids", true}}.dump();
  return body;
}

void BM_ServeOneRequest(benchmark::State& state) {
  LocalServer local;
  httplib::Client c("127.0.0.1", local.port);
  for (auto _ : state) {
    auto res = c.Post("/v1/completions", request_body(), "application/json");
    if (!res || res->status != 200) state.SkipWithError("request failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ServeOneRequest)->Unit(benchmark::kMicrosecond)->UseRealTime();

// 8 clients, each sending state.iterations() requests back to back: items/s is requests/s.
void BM_ServeEightClients(benchmark::State& state) {
  LocalServer local;
  constexpr int kClients = 8;
  for (auto _ : state) {
    std::latch start(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&] {
        httplib::Client c("127.0.0.1", local.port);
        start.arrive_and_wait();
        c.Post("/v1/completions", request_body(), "application/json");
      });
    }
    for (auto& t : clients) t.join();
  }
  state.SetItemsProcessed(state.iterations() * kClients);
}
BENCHMARK(BM_ServeEightClients)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace bih
#endif
