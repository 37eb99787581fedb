// bih_adapter.cpp: bih's engine over bih.engine/1 (bih_adapter.hpp).
#include "engines/bih_adapter.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <string>

#include "base/errors.hpp"
#include "engines/engine_protocol.hpp"
#include "engines/registry.hpp"
#include "spec/scenario.hpp"

namespace bih {
namespace {

using nlohmann::json;

void send(std::ostream& out, const json& message) { out << message.dump() << "\n" << std::flush; }

// The scenario the init describes: its model folder, its knobs and its limits.
Scenario scenario_of(const json& init) {
  const json& model = init.at("model");
  if (model.at("format") != "hf") {
    throw UnsupportedError("bih adapter loads HF checkpoint folders; model.format is " +
                           model.at("format").dump() + " (use engine.model_format \"hf\")");
  }
  const json& limits = init.at("limits");
  return scenario_from_knobs({{"path", model.at("path")}}, init.at("knobs"),
                             limits.at("max_batch").get<int>(),
                             limits.at("max_model_len").get<int>(),
                             limits.at("max_tokens").get<int>(), "bih adapter init");
}

std::string bits_text(float v) { return fmt::format("0x{:08x}", std::bit_cast<uint32_t>(v)); }

// A request's "top_k" / "row_digest" (absent: none), applied to the engine for this request.
RowExtras extras_of(const json& message) {
  RowExtras extras;
  if (message.contains("top_k")) {
    const json& k = message["top_k"];
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > kMaxTopK) {
      throw InfraError(fmt::format("top_k is {}; valid: an integer in 0..{}", k.dump(), kMaxTopK));
    }
    extras.top_k = k.get<int>();
  }
  if (message.contains("row_digest")) {
    if (!message["row_digest"].is_boolean()) throw InfraError("row_digest: valid: true or false");
    extras.row_digest = message["row_digest"].get<bool>();
  }
  return extras;
}

// The sequences of a result: tokens, values as bit patterns, and the extras that are there.
json sequences_json(const std::vector<SequenceResult>& results) {
  json sequences = json::array();
  for (const SequenceResult& r : results) {
    json values = json::array();
    for (float v : r.logprobs) values.push_back(bits_text(v));
    json seq = {{"tokens", r.tokens}, {"values", values}};
    if (!r.top_k_ids.empty()) {
      json top_values = json::array();
      for (const auto& row : r.top_k_values) {
        json texts = json::array();
        for (float v : row) texts.push_back(bits_text(v));
        top_values.push_back(std::move(texts));
      }
      seq["top_k_ids"] = r.top_k_ids;
      seq["top_k_values"] = std::move(top_values);
    }
    if (!r.row_digests.empty()) {
      json digests = json::array();
      for (uint64_t d : r.row_digests) digests.push_back(fmt::format("{:016x}", d));
      seq["row_digests"] = std::move(digests);
    }
    sequences.push_back(std::move(seq));
  }
  return sequences;
}

}  // namespace

Scenario scenario_from_knobs(const json& model, const json& knobs, int max_batch, int max_model_len,
                             int max_tokens, const std::string& where) {
  max_batch = std::max(1, max_batch);
  json s = {{"model", model},
            {"plan",
             {{"max_model_len", max_model_len},
              {"max_num_seqs", max_batch},
              {"max_tokens", max_tokens},
              {"prompts", {{"min_len", 1}, {"max_len", 1}}},
              {"batch_sizes", max_batch > 1 ? json{1, max_batch} : json{1}}}}};
  for (const auto& [dotted, value] : knobs.items()) {
    std::string path = "/" + dotted;  // "parallel.tp" -> "/parallel/tp"
    std::replace(path.begin(), path.end(), '.', '/');
    s[json::json_pointer(path)] = value;
  }
  // A knob plan.max_num_seqs moves the planned batch with it (unless it is planned too).
  const json& seqs = s["plan"]["max_num_seqs"];
  if (seqs.is_number_integer() && seqs.get<int64_t>() >= 1 && seqs.get<int64_t>() <= 1 << 20 &&
      !knobs.contains("plan.batch_sizes")) {
    const int64_t n = seqs.get<int64_t>();
    s["plan"]["batch_sizes"] = n > 1 ? json{1, n} : json{1};
  }  // else scenario_from_json names what is wrong with it
  Scenario scenario = scenario_from_json(s, where);
  if (scenario.ranks == RankKind::nccl) {
    throw UnsupportedError(
        "bih's engine runs in one process here; parallel.ranks nccl needs one "
        "per GPU");
  }
  return scenario;
}

json resolved_settings(const Scenario& s, const EngineIdentity& id) {
  json settings = s.to_json();
  settings.erase("plan");
  settings.erase("name");
  settings.erase("debug");
  for (const auto& [key, value] : id.details.items()) settings[key] = value;
  return settings;
}

int serve_bih_engine(std::istream& in, std::ostream& out) {
  std::unique_ptr<TestedEngine> engine;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json message;
    try {
      message = protocol::parse_line(line);
    } catch (const protocol::ProtocolError& e) {
      send(out, {{"type", "error"}, {"message", e.what()}});
      return 1;
    }
    const std::string type = message["type"];
    if (type == "shutdown") return 0;
    try {
      if (type == "init") {
        if (message.value("protocol", "") != protocol::kVersion) {
          send(out, {{"type", "error"},
                     {"message", fmt::format("bih adapter speaks {}", protocol::kVersion)}});
          return 1;
        }
        const Scenario s = scenario_of(message);
        if (std::string why = EngineRegistry::instance().unsupported_reason(s); !why.empty()) {
          throw UnsupportedError(why);
        }
        engine = EngineRegistry::instance().make(s, EngineContext{});
        const EngineIdentity& id = engine->identity();
        const json settings = resolved_settings(s, id);
        send(out, {{"type", "hello"},
                   {"protocol", protocol::kVersion},
                   {"engine", {{"name", id.name}, {"version", id.version}}},
                   {"adapter", {{"name", "bih adapter"}, {"version", id.version}}},
                   {"value", id.value},
                   {"settings", settings},
                   {"capabilities",
                    {{"step_stats", true},
                     {"reset_cache", true},
                     {"score", true},
                     {"top_k", true},
                     {"row_digest", true}}}});
      } else if (type == "reset_cache") {
        if (!engine) throw InfraError("reset_cache before init");
        // bih's engine forgets every cached prefix block; the next generate runs cold.
        if (!engine->reset_prefix_cache()) throw InfraError("this engine cannot empty its cache");
        send(out, {{"type", "reset_done"}});
      } else if (type == "generate") {
        if (!engine) throw InfraError("generate before init");
        const auto prompts = message.at("prompts").get<std::vector<std::vector<int32_t>>>();
        GenerateStats stats;
        engine->set_row_extras(extras_of(message));
        const auto results =
            engine->generate(prompts, message.at("max_tokens").get<int>(), &stats, {});
        send(out, {{"type", "result"},
                   {"id", message.at("id")},
                   {"sequences", sequences_json(results)},
                   {"stats", {{"steps", stats.steps}, {"rows", stats.rows}}}});
      } else if (type == "score") {
        if (!engine) throw InfraError("score before init");
        std::vector<ScoreRequest> requests;
        for (const json& seq : message.at("sequences")) {
          requests.push_back({seq.at("prompt").get<std::vector<int32_t>>(),
                              seq.at("tokens").get<std::vector<int32_t>>()});
        }
        engine->set_row_extras(extras_of(message));
        send(out, {{"type", "result"},
                   {"id", message.at("id")},
                   {"sequences", sequences_json(engine->score(requests))}});
      } else {
        send(out, {{"type", "error"}, {"message", "unknown message type '" + type + "'"}});
      }
    } catch (const UnsupportedError& e) {
      send(out, {{"type", "unsupported"}, {"reason", e.what()}});
      return 0;
    } catch (const std::exception& e) {
      json answer = {{"type", "error"}, {"message", e.what()}};
      if (message.contains("id")) answer["id"] = message["id"];
      send(out, answer);
      if (type == "init") return 1;
    }
  }
  return 0;
}

}  // namespace bih
