// bih_server.cpp: bih serve's endpoints and its scheduler thread (bih_server.hpp).
//
// Endpoints as vLLM's OpenAI-compatible server documents them
// (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html): GET /health, GET
// /version, GET /v1/models, POST /v1/completions, POST /reset_prefix_cache (409 while requests are
// in flight: emptying the cache under a running sequence would change what "cold" means), and
// bih's own GET /bih/resolved (what the engine applied).
#include "engines/http/bih_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/errors.hpp"
#include "engines/http/bih_completions.hpp"

namespace bih {
namespace {

using nlohmann::json;

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message,
                 const std::string& type, const std::string& param = "") {
  reply_json(res, status, error_body(message, type, param, status));
}

}  // namespace

struct BihServer::State {
  // One /v1/completions request between its handler thread and the scheduler. A member, not a
  // file-local type: State has external linkage, so its fields may not use the anonymous namespace.
  struct Pending {
    CompletionRequest request;
    std::vector<SequenceId> ids;  // consecutive: one per prompt, in order
    std::vector<SequenceResult> results;
    int remaining = 0;
    BatchSeen seen;
    bool finished = false;
    int error_status = 0;  // 0: ok; 500 an engine failure, 503 the server stopping
    std::string error;
  };

  State(Engine& e, BihServerInfo i) : engine(e), info(std::move(i)) {}

  Engine& engine;
  BihServerInfo info;
  httplib::Server http;
  std::mutex mutex;
  std::condition_variable work;  // the scheduler waits here for requests
  std::condition_variable done;  // handlers wait here for their results
  std::deque<Pending*> queued;   // not yet added to the engine
  int in_flight = 0;             // requests queued or in the engine
  bool stopping = false;
  std::thread scheduler;
  std::atomic<int64_t> next_request{0};
  int listen_fd = -1;

  // Ends a request (under the lock).
  void finish(Pending* p, int status, const std::string& error) {
    p->finished = true;
    p->error_status = status;
    p->error = error;
    --in_flight;
  }

  void schedule() {
    std::unordered_map<SequenceId, Pending*> owner;
    for (;;) {
      std::vector<Pending*> fresh;
      {
        std::unique_lock lock(mutex);
        work.wait(lock, [&] { return stopping || !queued.empty() || !owner.empty(); });
        if (stopping) break;
        fresh.assign(queued.begin(), queued.end());
        queued.clear();
      }
      StepReport report;
      std::string failure;
      try {
        // Added in arrival order; the engine admits them at this step up to max_num_seqs.
        for (Pending* p : fresh) {
          for (const auto& prompt : p->request.prompts) {
            const SequenceId id = engine.add(prompt, p->request.max_tokens);
            p->ids.push_back(id);
            owner[id] = p;
          }
        }
        report = engine.step();
      } catch (const std::exception& e) {
        failure = e.what();
      }
      {
        std::lock_guard lock(mutex);
        if (!failure.empty()) {
          std::unordered_set<Pending*> failed(fresh.begin(), fresh.end());
          for (const auto& [id, p] : owner) failed.insert(p);
          for (Pending* p : failed) finish(p, 500, "bih's engine failed: " + failure);
          owner.clear();
          engine.abort_all();
        }
        // Each request with rows in this step saw a batch of report.ran.size() sequences.
        const int batch = static_cast<int>(report.ran.size());
        std::unordered_set<Pending*> seen;
        for (SequenceId id : report.ran) {
          Pending* p = owner.at(id);
          if (!seen.insert(p).second) continue;
          p->seen.min_batch = p->seen.steps == 0 ? batch : std::min(p->seen.min_batch, batch);
          p->seen.max_batch = std::max(p->seen.max_batch, batch);
          ++p->seen.steps;
        }
        for (SequenceId id : report.finished) {
          Pending* p = owner.at(id);
          owner.erase(id);
          p->results[static_cast<size_t>(id - p->ids.front())] = engine.take(id);
          if (--p->remaining == 0) finish(p, 0, "");
        }
      }
      done.notify_all();
    }
    // Stopping: everything still in flight is answered 503.
    std::lock_guard lock(mutex);
    std::unordered_set<Pending*> left(queued.begin(), queued.end());
    for (const auto& [id, p] : owner) left.insert(p);
    for (Pending* p : left) finish(p, 503, "bih serve is stopping");
    queued.clear();
    engine.abort_all();
    done.notify_all();
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      return reply_error(res, 400, std::string("the body is not JSON: ") + e.what(),
                         "BadRequestError");
    }
    Pending p;
    try {
      p.request = parse_completion_request(body, engine);
    } catch (const BadRequest& e) {
      return reply_error(res, 400, e.what(), "BadRequestError", e.param);
    }
    p.results.resize(p.request.prompts.size());
    p.remaining = static_cast<int>(p.request.prompts.size());
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    {
      std::unique_lock lock(mutex);
      if (stopping) return reply_error(res, 503, "bih serve is stopping", "ServiceUnavailable");
      queued.push_back(&p);
      ++in_flight;
      work.notify_one();
      done.wait(lock, [&] { return p.finished; });
    }
    if (p.error_status != 0) {
      return reply_error(res, p.error_status, p.error,
                         p.error_status == 503 ? "ServiceUnavailable" : "InternalServerError");
    }
    const std::string id = "cmpl-bih-" + std::to_string(next_request++);
    reply_json(res, 200, completion_reply(p.request, p.results, id, info.model, created, p.seen));
  }

  void reset_prefix_cache(httplib::Response& res) {
    std::lock_guard lock(mutex);
    if (in_flight > 0) {
      return reply_error(res, 409,
                         std::to_string(in_flight) +
                             " requests are in flight; reset the prefix cache between them",
                         "ConflictError");
    }
    // No request in flight: the scheduler is waiting and does not touch the engine.
    engine.reset_prefix_cache();
    res.status = 200;
  }

  void routes() {
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    http.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200, {{"version", info.version}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200,
                 {{"object", "list"},
                  {"data",
                   {{{"id", info.model},
                     {"object", "model"},
                     {"owned_by", "bih"},
                     {"root", info.model},
                     {"max_model_len", engine.options().max_model_len}}}}});
    });
    http.Get("/bih/resolved", [this](const httplib::Request&, httplib::Response& res) {
      reply_json(res, 200, info.resolved);
    });
    http.Post("/reset_prefix_cache",
              [this](const httplib::Request&, httplib::Response& res) { reset_prefix_cache(res); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        completions(req, res);
      } catch (const std::exception& e) {
        reply_error(res, 500, e.what(), "InternalServerError");
      }
    });
  }
};

BihServer::BihServer(Engine& engine, BihServerInfo info)
    : state_(std::make_unique<State>(engine, std::move(info))) {
  // Every request in flight holds a handler thread while it waits for its tokens: enough threads
  // that max_num_seqs requests can be in flight (and a few more for /health and the like).
  const int threads = engine.options().max_num_seqs + 8;
  state_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  state_->http.set_payload_max_length(64u << 20);
  // Headers and body go out as separate writes: without TCP_NODELAY, Nagle holds the body until
  // the client's delayed ACK (tens of ms per request).
  state_->http.set_tcp_nodelay(true);
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
  // libcpp-httplib): more clients connecting at once lose their SYN and retry a second later.
  // bind() raises it on the listening socket, which this callback hands over.
  state_->http.set_socket_options([state = state_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    state->listen_fd = sock;
  });
  state_->routes();
}

BihServer::~BihServer() {
  stop();
  if (state_->scheduler.joinable()) state_->scheduler.join();
}

int BihServer::bind(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = state_->http.bind_to_any_port(host);
    if (bound <= 0) throw InfraError("bih serve: cannot bind a free port on " + host);
  } else if (!state_->http.bind_to_port(host, port)) {
    throw InfraError("bih serve: cannot bind " + host + ":" + std::to_string(port));
  }
  // listen() again on a listening socket sets its backlog (Linux).
  if (state_->listen_fd >= 0) ::listen(state_->listen_fd, SOMAXCONN);
  return bound;
}

void BihServer::run() {
  state_->scheduler = std::thread([this] { state_->schedule(); });
  state_->http.listen_after_bind();
  stop();
  state_->scheduler.join();
}

void BihServer::stop() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->work.notify_all();
  state_->http.stop();
}

}  // namespace bih
