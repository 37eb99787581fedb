// http_engine.cpp: the HTTP engine (http_engine.hpp).
#include "engines/http/http_engine.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <latch>
#include <system_error>
#include <thread>

#include "base/errors.hpp"
#include "base/strings.hpp"
#include "base/utf8.hpp"
#include "engines/command_engine.hpp"
#include "engines/http/dialect.hpp"
#include "engines/http/http_exchange.hpp"
#include "engines/http/server_launch.hpp"
#include "engines/model_handoff.hpp"
#include "engines/registry.hpp"
#include "models/config.hpp"
#include "spec/server_profile.hpp"

namespace bih {
namespace {

using nlohmann::json;

// How long a version question may take: it is a courtesy, never the scenario's failure.
constexpr double kVersionTimeoutS = 5;

// The scenario's model config: what the prompts' token ids are checked against.
ModelConfig scenario_model_config(const Scenario& s) {
  if (!s.model.path.empty()) {
    return load_config_json((std::filesystem::path(s.model.path) / "config.json").string());
  }
  if (auto config = preset_config(s.model.preset)) return *config;
  throw InfraError("unknown preset '" + s.model.preset + "'");
}

// "POST /flush_cache" -> "/flush_cache".
std::string endpoint_path(const std::string& method_and_path) {
  return method_and_path.substr(method_and_path.find(' ') + 1);
}

class HttpEngine : public TestedEngine {
 public:
  HttpEngine(const Scenario& s, const std::string& work_dir)
      : scenario_(s), dialect_(make_dialect(s.engine.dialect)) {
    reply_timeout_s_ = s.engine.reply_timeout_s > 0 ? s.engine.reply_timeout_s : 0.9 * s.timeout_s;
    identity_.kind = "http";
    identity_.name = s.engine.name;
    identity_.value = "logprob";
    if (s.engine.url.empty()) {
      std::string cache_notice;
      model_ = hand_off_model(s, &cache_notice);
      config_ = model_.config;
      launched_ = launch_server(s, work_dir);
      target_ = split_http_url(launched_->base_url());
      fields_ = launched_->launch().request_fields;
      served_model_ = launched_->launch().served_model;
      const HttpEndpoint& reset = launched_->profile().reset_cache;
      if (!reset.empty()) reset_ = reset;
      identity_.details["launch"] = launched_->details();
      if (!cache_notice.empty()) identity_.details["model_cache_notice"] = cache_notice;
    } else {
      config_ = scenario_model_config(s);
      target_ = split_http_url(s.engine.url);
      if (!s.engine.reset_cache.empty()) {
        reset_.method = "POST";
        reset_.path = endpoint_path(s.engine.reset_cache);
      }
    }
    if (!s.engine.served_model.empty()) served_model_ = s.engine.served_model;
    if (dialect_->takes_model() && !served_model_.empty()) fields_["model"] = served_model_;
    identity_.version = find_version();
    identity_.details["dialect"] = dialect_->name();
    identity_.details["batching"] = s.engine.batching;
    identity_.details["url"] = target_.url();
    identity_.details["endpoint"] = "POST " + target_.prefix + dialect_->path();
    if (!served_model_.empty()) identity_.details["served_model"] = served_model_;
    identity_.details["request_fields"] = fields_;
  }

  ~HttpEngine() override { shutdown(); }

  const EngineIdentity& identity() const override { return identity_; }
  // A launched server is restarted by a fresh worker; a running one cannot be.
  EngineCapabilities capabilities() const override { return {false, launched_ != nullptr, false}; }
  int vocab_size() const override { return config_.vocab_size; }
  // A running server's model is its own: bih cannot read what it loaded.
  std::string model_hash() override {
    return launched_ ? handed_off_weights_hash(model_) : std::string();
  }

  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, GenerateStats* stats,
                                       const ProgressFn& progress) override {
    std::vector<SequenceResult> out;
    int most_in_flight = 0;
    if (scenario_.engine.batching == "request" || prompts.size() == 1) {
      out = exchange(prompts, max_tokens);
      most_in_flight = 1;
    } else {
      out = concurrent(prompts, max_tokens, most_in_flight);
    }
    if (stats != nullptr) {
      stats->max_in_flight = std::max<int64_t>(stats->max_in_flight, most_in_flight);
    }
    return out;
  }

  bool reset_prefix_cache() override {
    if (reset_.empty()) return false;
    try {
      if (reset_.method == "POST") {
        post_json(target_, reset_.path, reset_.body.is_null() ? json::object() : reset_.body,
                  reply_timeout_s_);
      } else if (!get_if_ok(target_, reset_.path, reply_timeout_s_)) {
        throw InfraError("GET " + target_.url() + reset_.path + " did not answer 200");
      }
    } catch (const InfraError& e) {
      fail(std::string("could not empty its prefix cache: ") + e.what());
    }
    return true;
  }

  void shutdown() override {
    if (!launched_) return;
    identity_.details["launch"] = launched_->details();
    launched_.reset();  // stops the server's process group
  }

 private:
  // One request for `prompts`, its reply parsed.
  std::vector<SequenceResult> exchange(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens) {
    try {
      const std::string body =
          post_json(target_, dialect_->path(), dialect_->request_body(prompts, max_tokens, fields_),
                    reply_timeout_s_);
      return dialect_->parse_reply(body, prompts.size(), max_tokens, config_.vocab_size);
    } catch (const InfraError& e) {
      fail(fmt::format("request of {} prompt{} x {} tokens: {}", prompts.size(),
                       prompts.size() == 1 ? "" : "s", max_tokens, e.what()));
    }
  }

  // One request per prompt, each on its own thread and connection, all released at once: the
  // server sees them together, as its own scheduler would from many clients.
  std::vector<SequenceResult> concurrent(const std::vector<std::vector<int32_t>>& prompts,
                                         int max_tokens, int& most_in_flight) {
    const size_t n = prompts.size();
    std::vector<SequenceResult> out(n);
    std::vector<std::string> bodies(n), errors(n);
    std::atomic<int> in_flight{0}, most{0};
    std::vector<json> requests;
    for (size_t i = 0; i < n; ++i) {
      requests.push_back(dialect_->request_body({prompts[i]}, max_tokens, fields_));
    }
    std::latch start(static_cast<std::ptrdiff_t>(n));
    std::vector<std::thread> threads;
    threads.reserve(n);
    size_t started = 0;
    try {
      for (; started < n; ++started) {
        threads.emplace_back([&, i = started] {
          start.arrive_and_wait();
          const int now = ++in_flight;
          for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
          }
          try {
            bodies[i] = post_json(target_, dialect_->path(), requests[i], reply_timeout_s_);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
          --in_flight;
        });
      }
    } catch (const std::system_error& e) {
      // Those started are waiting at the latch: release them, and wait for them.
      start.count_down(static_cast<std::ptrdiff_t>(n - started));
      for (std::thread& t : threads) t.join();
      fail(fmt::format("cannot start a thread for each of {} requests (batching concurrent): {}", n,
                       e.what()));
    }
    for (std::thread& t : threads) t.join();
    most_in_flight = most.load();
    for (size_t i = 0; i < n; ++i) {
      try {
        if (!errors[i].empty()) throw InfraError(errors[i]);
        out[i] = std::move(dialect_->parse_reply(bodies[i], 1, max_tokens, config_.vocab_size)[0]);
      } catch (const InfraError& e) {
        fail(fmt::format("request for prompt {} of {} (batching concurrent) x {} tokens: {}", i, n,
                         max_tokens, e.what()));
      }
    }
    return out;
  }

  // The server's version: a profile's endpoint (through the launch details), else what vLLM
  // (/version) or llama-server (/props build_info) say, else "unknown".
  std::string find_version() const {
    if (launched_) {
      const json details = launched_->details();
      if (details.contains("version") && details["version"].is_string()) {
        return details["version"].get<std::string>();
      }
      if (details.contains("version") && !details["version"].is_null()) {
        return details["version"].dump();
      }
    }
    for (const auto& [path, key] : {std::pair{"/version", "version"}, {"/props", "build_info"}}) {
      const auto body = get_if_ok(target_, path, std::min(kVersionTimeoutS, reply_timeout_s_));
      if (!body) continue;
      const json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains(key) && j[key].is_string()) {
        return valid_utf8(std::string(cut_utf8(j[key].get<std::string>(), 200)));
      }
    }
    return "unknown";
  }

  [[noreturn]] void fail(const std::string& what) const {
    std::string message = fmt::format("engine {} at {} ({} dialect): {}", scenario_.engine.name,
                                      target_.url(), dialect_->name(), what);
    if (launched_) {
      if (const std::string why = launched_->failure(); !why.empty()) {
        message += "; the server " + why;
      }
      const std::string tail = launched_->log_tail(12);
      message += tail.empty() ? "; its log is empty" : "; the end of its log:\n" + tail;
    }
    throw InfraError(valid_utf8(message));
  }

  Scenario scenario_;
  std::unique_ptr<Dialect> dialect_;
  std::unique_ptr<LaunchedServer> launched_;
  protocol::ModelHandle model_;
  ModelConfig config_;
  HttpTarget target_;
  HttpEndpoint reset_;
  json fields_ = json::object();
  std::string served_model_;
  EngineIdentity identity_;
  double reply_timeout_s_ = 0;
};

}  // namespace

std::string http_engine_unsupported_reason(const Scenario& s) {
  if (std::string why = command_engine_unsupported_reason(s); !why.empty()) return why;
  const std::string& name = s.engine.name;
  if (!s.engine.url.empty()) {
    // prefix_caching.enabled states the running server's setting, so that bih empties its cache
    // between generations (engine.reset_cache); every other knob would be a claim bih cannot
    // make true.
    std::vector<std::string> set;
    for (const std::string& knob : s.knobs_set) {
      if (knob != "prefix_caching.enabled") set.push_back(knob);
    }
    if (!set.empty()) {
      return fmt::format(
          "engine {}: a running server's configuration is its own: knob {} cannot be set; use "
          "engine.profile (a server bih launches, with the knob mapped to its arguments)",
          name, join(set));
    }
    if (s.plan.fresh_process) {
      return fmt::format(
          "engine {}: a running server (engine.url) cannot be restarted, so plan.fresh_process "
          "has no fresh engine to compare; use engine.profile",
          name);
    }
    if (s.prefix_caching && s.engine.reset_cache.empty()) {
      return fmt::format(
          "engine {}: prefix caching is on, but bih has no way to empty the server's prefix "
          "cache between generations; give engine.reset_cache (e.g. \"POST /flush_cache\")",
          name);
    }
    return "";
  }
  const ServerProfile profile = load_server_profile(s.engine.profile, s.source_file);
  const ServerLaunch launch = map_server_launch(profile, s, ServerVars{});
  if (!launch.unsupported.empty()) return fmt::format("engine {}: {}", name, launch.unsupported);
  if (s.prefix_caching && profile.reset_cache.empty()) {
    return fmt::format(
        "engine {}: prefix caching is on, but profile {} has no reset_cache endpoint to empty the "
        "server's prefix cache between generations",
        name, profile.file.empty() ? profile.name : profile.file);
  }
  return "";
}

std::unique_ptr<TestedEngine> start_http_engine(const Scenario& s, const std::string& work_dir) {
  return std::make_unique<HttpEngine>(s, work_dir);
}

EngineKind http_engine_kind() {
  EngineKind kind;
  kind.name = "http";
  kind.unsupported_reason = http_engine_unsupported_reason;
  kind.make = [](const Scenario& s, const EngineContext& context) {
    return start_http_engine(s, context.work_dir);
  };
  return kind;
}

}  // namespace bih
