// command_engine.cpp: the adapter engine (command_engine.hpp).
#include "engines/command_engine.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>

#include "base/child_process.hpp"
#include "base/errors.hpp"
#include "base/line_process.hpp"
#include "base/utf8.hpp"
#include "engines/engine_protocol.hpp"
#include "engines/model_handoff.hpp"
#include "engines/registry.hpp"

namespace bih {
namespace {

using nlohmann::json;

// Knobs that only bih's own engine has: its collectives' summation-order models and its rank
// layout. No external engine can be told to use them.
const std::vector<std::string> kBihOnlyKnobs{"collectives.all_reduce", "collectives.reduce_scatter",
                                             "collectives.all_gather", "parallel.ranks",
                                             "parallel.ring_order"};

std::string join_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// How long an adapter may take to exit after the shutdown message before it is killed.
constexpr double kShutdownGraceS = 10;

class CommandEngine : public TestedEngine {
 public:
  CommandEngine(const Scenario& s, const std::string& work_dir) : scenario_(s) {
    reply_timeout_s_ = s.engine.reply_timeout_s > 0 ? s.engine.reply_timeout_s : 0.9 * s.timeout_s;
    // Why first: the driver shows the first 400 characters of the worker's last words.
    const auto cannot_start = [&](const InfraError& e) {
      std::string command = join_words(s.engine.command);
      if (command.size() > 300) command = command.substr(0, 300) + "...";
      return InfraError(fmt::format(
          "engine {}: its adapter cannot start: {} (engine.command [{}]{})", s.engine.name,
          e.what(), command, s.engine.cwd.empty() ? "" : ", engine.cwd " + s.engine.cwd));
    };
    // Checked before the model is handed off; the scenario's reason says it on its first line.
    try {
      LineProcess::check_startable(s.engine.command, s.engine.cwd, s.engine.env);
    } catch (const InfraError& e) {
      throw cannot_start(e);
    }
    std::string cache_notice;
    model_ = hand_off_model(s, &cache_notice);
    const std::string log =
        (std::filesystem::path(work_dir) / fmt::format("adapter-{}.log", getpid())).string();
    try {
      process_ = std::make_unique<LineProcess>(s.engine.command, s.engine.cwd, s.engine.env, log);
    } catch (const InfraError& e) {
      throw cannot_start(e);
    }
    identity_.kind = "command";
    identity_.details = {{"command", s.engine.command},
                         {"cwd", s.engine.cwd},
                         {"env", s.engine.env},
                         {"options", s.engine.options},
                         {"model_format", model_.format},
                         {"model_path", model_.path},
                         {"model_content", handed_off_content(model_)}};
    if (!cache_notice.empty()) identity_.details["model_cache_notice"] = cache_notice;

    json knobs = s.knobs_json();
    const protocol::Limits limits{
        *std::max_element(s.plan.batch_sizes.begin(), s.plan.batch_sizes.end()),
        s.plan.max_model_len, s.plan.max_tokens};
    // The longest line a reply to this plan can need (a result holds every token and value of a
    // batch, far under 128 bytes each): a flood is cut there instead of filling memory.
    // compare.top_k adds up to k ids and values per token (under 40 bytes each), a digest 20.
    const size_t per_token =
        128 + size_t{40} * static_cast<size_t>(s.compare.top_k) + (s.compare.row_digest ? 20 : 0);
    max_line_bytes_ =
        (size_t{32} << 20) + per_token * static_cast<size_t>(limits.max_batch) * s.plan.max_tokens;
    process_->set_max_line_bytes(max_line_bytes_);
    send(protocol::init_message(model_, knobs, s.engine.options, limits), "init");
    const json answer = receive("its hello (the answer to init)", {});
    const std::string type = answer["type"];
    if (type == "unsupported") {
      const auto it = answer.find("reason");
      const std::string reason = it == answer.end() ? std::string("(no reason given)")
                                 : it->is_string()
                                     ? std::string(cut_utf8(it->get<std::string>(), 2000))
                                     : protocol::quote_text(it->dump());
      process_->finish(5);
      throw UnsupportedError(fmt::format("engine {}: {}", s.engine.name, reason));
    }
    if (type == "error") fail("answered init with an error: " + message_of(answer));
    if (type != "hello") fail("answered init with a '" + type + "' message, not a hello");
    try {
      const protocol::Hello hello = protocol::parse_hello(answer);
      identity_.name = hello.engine_name;
      identity_.version = hello.engine_version;
      identity_.value = hello.value;
      identity_.settings = hello.settings;
      identity_.details["adapter"] = hello.adapter;
      step_stats_ = hello.step_stats;
      reset_cache_ = hello.reset_cache;
      can_score_ = hello.score;
      can_top_k_ = hello.top_k;
      can_row_digest_ = hello.row_digest;
    } catch (const protocol::ProtocolError& e) {
      fail(e.what());
    }
  }

  ~CommandEngine() override { shutdown(); }

  const EngineIdentity& identity() const override { return identity_; }
  EngineCapabilities capabilities() const override { return {false, true, step_stats_}; }
  int vocab_size() const override { return model_.config.vocab_size; }
  // From the bytes handed over, not the scenario's preset: a damaged or edited file shows.
  std::string model_hash() override { return handed_off_weights_hash(model_); }

  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, GenerateStats* stats,
                                       const ProgressFn& progress) override {
    const int64_t id = next_id_++;
    send(protocol::generate_message(id, prompts, max_tokens, announced_extras()),
         fmt::format("generate request {}", id));
    const json answer = receive(fmt::format("its result for request {} ({} prompts x {} tokens)",
                                            id, prompts.size(), max_tokens),
                                progress);
    const std::string type = answer["type"];
    if (type == "error") fail(fmt::format("failed request {}: {}", id, message_of(answer)));
    if (type != "result") fail(fmt::format("answered request {} with a '{}' message", id, type));
    try {
      return protocol::parse_result(answer, id, prompts.size(), max_tokens, vocab_size(), stats);
    } catch (const protocol::ProtocolError& e) {
      fail(e.what());
    }
  }

  // Asked only of what the hello announced; the rest stays empty and is reported not compared.
  void set_row_extras(const RowExtras& extras) override { extras_ = extras; }
  std::string score_unsupported_reason() const override {
    if (can_score_) return "";
    return "engine " + identity_.name +
           ": its adapter did not announce capabilities.score (docs/engine-protocol.md, score)";
  }
  std::vector<SequenceResult> score(const std::vector<ScoreRequest>& requests) override {
    const int64_t id = next_id_++;
    send(protocol::score_message(id, requests, announced_extras()),
         fmt::format("score request {}", id));
    const json answer = receive(
        fmt::format("its result for score request {} ({} sequences)", id, requests.size()), {});
    const std::string type = answer["type"];
    if (type == "error") fail(fmt::format("failed score request {}: {}", id, message_of(answer)));
    if (type != "result") {
      fail(fmt::format("answered score request {} with a '{}' message", id, type));
    }
    try {
      return protocol::parse_score_result(answer, id, requests, vocab_size());
    } catch (const protocol::ProtocolError& e) {
      fail(e.what());
    }
  }
  // Only an adapter that announced capabilities.reset_cache is asked; the others keep what they
  // always had: the worker declines a prefix-caching scenario for them.
  bool reset_prefix_cache() override {
    if (!reset_cache_) return false;
    const int64_t n = ++resets_;
    send(protocol::reset_cache_message(), fmt::format("reset_cache request {}", n));
    const json answer = receive(fmt::format("its answer to reset_cache request {}", n), {});
    try {
      protocol::parse_reset_done(answer);
    } catch (const protocol::ProtocolError& e) {
      fail(e.what());
    }
    return true;
  }

  void shutdown() override {
    if (!process_ || shut_down_) return;
    shut_down_ = true;
    process_->write_line(protocol::shutdown_message().dump(), 2);
    identity_.details["shutdown"] = process_->finish(kShutdownGraceS);
  }

 private:
  RowExtras announced_extras() const {
    return RowExtras{can_top_k_ ? extras_.top_k : 0, can_row_digest_ && extras_.row_digest};
  }
  static std::string message_of(const json& answer) {
    const auto it = answer.find("message");
    return it != answer.end() && it->is_string()
               ? protocol::quote_text(it->get<std::string>(), 2000)
               : protocol::quote_text(answer.dump());
  }

  [[noreturn]] void fail(const std::string& what) {
    std::string how;
    if (process_->exited(&how)) {
      how = "; the adapter " + how;
    } else {
      how.clear();
    }
    std::string tail;
    for (const std::string& line : split_lines(tail_of_file(process_->stderr_file(), 8))) {
      // The adapter's own bytes: cut on a character and repaired, since they reach the report.
      const std::string_view kept = cut_utf8(line, 300);
      tail += "\n  | " + valid_utf8(kept) + (kept.size() < line.size() ? "..." : "");
    }
    shut_down_ = true;
    process_->finish(2);
    // Everything quoted above is repaired already; the whole message once more, for any piece
    // that was not (a command line or a path from outside).
    throw InfraError(valid_utf8(fmt::format(
        "engine {} (adapter: {}) {}{}{}", scenario_.engine.name,
        join_words(scenario_.engine.command), what, how,
        tail.empty() ? "; its stderr is empty" : "; last lines of its stderr:" + tail)));
  }

  static std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string::npos) nl = text.size();
      lines.push_back(text.substr(start, nl - start));
      start = nl + 1;
    }
    return lines;
  }

  void send(const json& message, const std::string& what) {
    switch (process_->write_line(message.dump(), reply_timeout_s_)) {
      case LineProcess::WriteStatus::written:
        return;
      case LineProcess::WriteStatus::timeout:
        fail(fmt::format("did not read the {} within {:.0f} s (engine.reply_timeout_s)", what,
                         reply_timeout_s_));
      case LineProcess::WriteStatus::closed:
        fail("stopped reading before the " + what);
    }
  }

  // The next message other than progress; fails on a closed stdout, a timeout or a non-message.
  json receive(const std::string& waiting_for, const ProgressFn& progress) {
    for (;;) {
      std::string line;
      switch (process_->read_line(reply_timeout_s_, line)) {
        case LineProcess::ReadStatus::timeout:
          fail(
              fmt::format("did not answer within {:.0f} s (engine.reply_timeout_s) while bih "
                          "waited for {}",
                          reply_timeout_s_, waiting_for));
        case LineProcess::ReadStatus::closed:
          process_->finish(2);
          fail("closed its stdout while bih waited for " + waiting_for);
        case LineProcess::ReadStatus::line:
          break;
      }
      if (process_->last_line_cut()) {
        fail(
            fmt::format("wrote a line of more than {} bytes (the most a reply to this plan can "
                        "need) while bih waited for {}: {}",
                        max_line_bytes_, waiting_for, protocol::quote_text(line, 80)));
      }
      if (line.empty()) continue;
      json message;
      try {
        message = protocol::parse_line(line);
      } catch (const protocol::ProtocolError& e) {
        fail(std::string(e.what()) + " while bih waited for " + waiting_for);
      }
      if (message["type"] == "progress") {
        if (progress && message.contains("text") && message["text"].is_string()) {
          // One line: the worker passes progress to the driver as "@progress TEXT" lines.
          std::string text(cut_utf8(message["text"].get<std::string>(), 200));
          for (char& c : text) {
            if (c == '\n' || c == '\r') c = ' ';
          }
          progress(text);
        }
        continue;
      }
      return message;
    }
  }

  Scenario scenario_;
  protocol::ModelHandle model_;
  std::unique_ptr<LineProcess> process_;
  EngineIdentity identity_;
  double reply_timeout_s_ = 0;
  int64_t next_id_ = 1;
  size_t max_line_bytes_ = 0;
  bool step_stats_ = false;
  bool reset_cache_ = false;
  bool can_score_ = false;
  bool can_top_k_ = false;
  bool can_row_digest_ = false;
  RowExtras extras_;
  int64_t resets_ = 0;
  bool shut_down_ = false;
};

}  // namespace

std::string command_engine_unsupported_reason(const Scenario& s) {
  std::vector<std::string> refused;
  for (const std::string& knob : kBihOnlyKnobs) {
    if (std::find(s.knobs_set.begin(), s.knobs_set.end(), knob) != s.knobs_set.end()) {
      refused.push_back(knob);
    }
  }
  if (refused.empty()) return "";
  std::string list;
  for (const auto& k : refused) list += (list.empty() ? "" : ", ") + k;
  return fmt::format(
      "engine {}: {} {} bih's own engine's (its emulated collectives' summation orders and rank "
      "layout); an external engine cannot be told to use {}, so it is not run with something "
      "else instead",
      s.engine.name, list, refused.size() == 1 ? "is" : "are", refused.size() == 1 ? "it" : "them");
}

std::unique_ptr<TestedEngine> start_command_engine(const Scenario& s, const std::string& work_dir) {
  return std::make_unique<CommandEngine>(s, work_dir);
}

EngineKind command_engine_kind() {
  EngineKind kind;
  kind.name = "command";
  kind.unsupported_reason = command_engine_unsupported_reason;
  kind.make = [](const Scenario& s, const EngineContext& context) {
    return start_command_engine(s, context.work_dir);
  };
  return kind;
}

}  // namespace bih
