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

// Args: {prompt tokens, max_tokens}. {1, 1} is almost no model work: the HTTP cost shows.
void shapes(benchmark::internal::Benchmark* b) { b->Args({1, 1})->Args({16, 8}); }

std::vector<int32_t> prompt_of(const benchmark::State& state) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < state.range(0); ++i) p.push_back(static_cast<int32_t>(11 + i));
  return p;
}

EngineBundle tiny_engine() {
  return make_engine(
      scenario_from_knobs({{"preset", "tiny"}}, nlohmann::json::object(), 64, 512, 1, "bench"));
}

void BM_EngineGenerateInProcess(benchmark::State& state) {
  EngineBundle b = tiny_engine();
  const auto prompt = prompt_of(state);
  const int max_tokens = static_cast<int>(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(b.engine->generate({prompt}, max_tokens));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EngineGenerateInProcess)->Apply(shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

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

std::string request_body(const benchmark::State& state) {
  return nlohmann::json{{"prompt", prompt_of(state)},
                        {"max_tokens", state.range(1)},
                        {"temperature", 0},
                        {"logprobs", 1},
                        {"return_token_ids", true}}
      .dump();
}

void BM_ServeOneRequest(benchmark::State& state) {
  LocalServer local;
  httplib::Client c("127.0.0.1", local.port);
  const std::string body = request_body(state);
  for (auto _ : state) {
    auto res = c.Post("/v1/completions", body, "application/json");
    if (!res || res->status != 200) state.SkipWithError("request failed");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ServeOneRequest)->Apply(shapes)->Unit(benchmark::kMicrosecond)->UseRealTime();

// 8 clients released together, one request each per iteration: items/s is requests/s.
void BM_ServeEightClients(benchmark::State& state) {
  LocalServer local;
  constexpr int kClients = 8;
  const std::string body = request_body(state);
  for (auto _ : state) {
    std::latch start(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i) {
      clients.emplace_back([&] {
        httplib::Client c("127.0.0.1", local.port);
        start.arrive_and_wait();
        c.Post("/v1/completions", body, "application/json");
      });
    }
    for (auto& t : clients) t.join();
  }
  state.SetItemsProcessed(state.iterations() * kClients);
}
BENCHMARK(BM_ServeEightClients)->Apply(shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace bih
#endif
