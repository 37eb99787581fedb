// engine_protocol.cpp: bih.engine/1 messages (engine_protocol.hpp).
#include "engines/engine_protocol.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "base/json_text.hpp"
#include "base/utf8.hpp"

namespace bih::protocol {
namespace {

using nlohmann::json;

const json& field(const json& message, const std::string& key, const std::string& what) {
  auto it = message.find(key);
  if (it == message.end()) {
    throw ProtocolError(fmt::format("{} has no \"{}\": {}", what, key, quote_text(message.dump())));
  }
  return *it;
}

std::string string_field(const json& message, const std::string& key, const std::string& what) {
  const json& v = field(message, key, what);
  if (!v.is_string()) {
    throw ProtocolError(
        fmt::format("{}'s \"{}\" is not a string: {}", what, key, quote_text(v.dump())));
  }
  return v.get<std::string>();
}

}  // namespace

std::string quote_text(const std::string& text, size_t limit) {
  // Cut on a character boundary and repaired: the quote ends up in a JSON report.
  if (text.size() <= limit) return "'" + valid_utf8(text) + "'";
  return "'" + valid_utf8(cut_utf8(text, limit)) + "' (cut; " + std::to_string(text.size()) +
         " bytes)";
}

double widened_float(float value) {
  // The shortest decimal that reads back as this float (fmt's float formatting is shortest
  // round-trip), read as a double: 1e-06f goes out as 1e-06, as config.json says, where a plain
  // widening would send 9.99999997e-07.
  return std::stod(fmt::format("{}", value));
}

json init_message(const ModelHandle& model, const json& knobs, const json& options,
                  const Limits& limits) {
  const ModelConfig& c = model.config;
  return {{"type", "init"},
          {"protocol", kVersion},
          {"model",
           {{"format", model.format},
            {"path", model.path},
            {"id", model.id},
            {"config",
             {{"vocab_size", c.vocab_size},
              {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_heads},
              {"num_key_value_heads", c.num_kv_heads},
              {"head_dim", c.head_dim},
              {"intermediate_size", c.intermediate_size},
              {"rope_theta", c.rope_theta},
              {"rms_norm_eps", widened_float(c.rms_norm_eps)},
              {"tie_word_embeddings", c.tie_word_embeddings}}}}},
          {"knobs", knobs},
          {"options", options},
          {"limits",
           {{"max_batch", limits.max_batch},
            {"max_model_len", limits.max_model_len},
            {"max_tokens", limits.max_tokens}}}};
}

namespace {

void add_extras(json& message, const RowExtras& extras) {
  if (extras.top_k > 0) message["top_k"] = extras.top_k;
  if (extras.row_digest) message["row_digest"] = true;
}

}  // namespace

json generate_message(int64_t id, const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                      const RowExtras& extras) {
  json message = {{"type", "generate"},       {"id", id},       {"prompts", prompts},
                  {"max_tokens", max_tokens}, {"greedy", true}, {"ignore_eos", true}};
  add_extras(message, extras);
  return message;
}

json score_message(int64_t id, const std::vector<ScoreRequest>& requests, const RowExtras& extras) {
  json sequences = json::array();
  for (const ScoreRequest& r : requests) {
    sequences.push_back({{"prompt", r.prompt}, {"tokens", r.tokens}});
  }
  json message = {{"type", "score"}, {"id", id}, {"sequences", std::move(sequences)}};
  add_extras(message, extras);
  return message;
}

json shutdown_message() { return {{"type", "shutdown"}}; }

json reset_cache_message() { return {{"type", "reset_cache"}}; }

void parse_reset_done(const json& message) {
  const std::string type = message.at("type");
  if (type == "reset_done") return;
  if (type == "error") {
    const auto it = message.find("message");
    throw ProtocolError("could not empty its cache: " +
                        (it != message.end() && it->is_string()
                             ? quote_text(it->get<std::string>(), 2000)
                             : quote_text(message.dump())));
  }
  throw ProtocolError(fmt::format("answered reset_cache with a {} message, not reset_done: {}",
                                  quote_text(type), quote_text(message.dump())));
}

json parse_line(const std::string& line) {
  if (const size_t bad = first_invalid_utf8(line); bad != std::string::npos) {
    // nlohmann would refuse it too, quoting the raw byte; say plainly what is wrong instead.
    throw ProtocolError(fmt::format(
        "the adapter wrote a line that is not valid UTF-8 (byte 0x{:02X} at offset {}): {} "
        "(protocol lines are JSON, which is UTF-8: encode text as UTF-8, e.g. Python's "
        "json.dumps(), which escapes it as \\uXXXX)",
        static_cast<unsigned>(static_cast<unsigned char>(line[bad])), bad, quote_text(line)));
  }
  json message;
  try {
    // Strict JSON, bounded nesting, no key twice: a line that breaks a rule is the adapter's bug.
    message = parse_json_text<json>(line, "the adapter's line", {.comments = false});
  } catch (const InputError& e) {
    throw ProtocolError("the adapter wrote a line that is not a valid JSON message (" +
                        valid_utf8(e.what()) + "): " + quote_text(line) +
                        " (stdout must carry only protocol lines; log to stderr)");
  }
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string()) {
    throw ProtocolError(
        "the adapter wrote JSON that is not a message (an object with a string "
        "\"type\"): " +
        quote_text(line));
  }
  return message;
}

Hello parse_hello(const json& message) {
  const std::string what = "the adapter's hello";
  Hello h;
  if (const std::string p = string_field(message, "protocol", what); p != kVersion) {
    throw ProtocolError(
        fmt::format("the adapter speaks protocol {}, bih speaks {}", quote_text(p), kVersion));
  }
  const json& engine = field(message, "engine", what);
  if (!engine.is_object()) throw ProtocolError(what + "'s \"engine\" is not an object");
  h.engine_name = string_field(engine, "name", what + "'s engine");
  h.engine_version = string_field(engine, "version", what + "'s engine");
  if (h.engine_name.empty()) throw ProtocolError(what + " names no engine");
  h.value = message.contains("value") ? string_field(message, "value", what) : "logprob";
  if (h.value != "logprob" && h.value != "probability") {
    throw ProtocolError(fmt::format("{}'s \"value\" is {}; valid: \"logprob\" or \"probability\"",
                                    what, quote_text(h.value)));
  }
  if (message.contains("settings")) {
    if (!message["settings"].is_object()) {
      throw ProtocolError(what + "'s \"settings\" is not an object");
    }
    h.settings = message["settings"];
  }
  // Optional fields, but of their type when present: a wrong one is the adapter's bug, better
  // named now than silently dropped.
  for (const char* key : {"adapter", "capabilities"}) {
    if (message.contains(key) && !message[key].is_object()) {
      throw ProtocolError(fmt::format("{}'s \"{}\" is {}; valid: an object", what, key,
                                      quote_text(message[key].dump())));
    }
  }
  if (message.contains("adapter")) h.adapter = message["adapter"];
  if (message.contains("capabilities")) {
    // Checked, not value()'d: value() throws nlohmann's type_error for "step_stats": "yes".
    const json& caps = message["capabilities"];
    for (auto [key, flag] :
         {std::pair{"step_stats", &h.step_stats}, std::pair{"reset_cache", &h.reset_cache},
          std::pair{"score", &h.score}, std::pair{"top_k", &h.top_k},
          std::pair{"row_digest", &h.row_digest}}) {
      if (!caps.contains(key)) continue;
      if (!caps[key].is_boolean()) {
        throw ProtocolError(fmt::format("{}'s \"capabilities\".\"{}\" is {}; valid: true or false",
                                        what, key, quote_text(caps[key].dump())));
      }
      *flag = caps[key].get<bool>();
    }
  }
  return h;
}

float parse_value(const json& value) {
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    const bool hex = text.size() == 10 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X') &&
                     text.find_first_not_of("0123456789abcdefABCDEF", 2) == std::string::npos;
    if (!hex) {
      throw ProtocolError("value " + quote_text(text) +
                          " is not a float32 bit pattern; valid: \"0x\" and 8 hex digits, "
                          "or a JSON number");
    }
    return std::bit_cast<float>(static_cast<uint32_t>(std::stoul(text.substr(2), nullptr, 16)));
  }
  if (value.is_number()) return static_cast<float>(value.get<double>());
  throw ProtocolError("value " + quote_text(value.dump()) +
                      " is neither a float32 bit pattern string nor a number");
}

namespace {

// A sequence's optional top-k and digest fields, `n` entries each when present.
void parse_row_extras(const json& seq, const std::string& where, size_t n, int vocab_size,
                      SequenceResult& out) {
  if (seq.contains("top_k_ids") != seq.contains("top_k_values")) {
    throw ProtocolError(where + " has one of top_k_ids and top_k_values; valid: both or neither");
  }
  if (seq.contains("top_k_ids")) {
    const json& ids = seq["top_k_ids"];
    const json& values = seq["top_k_values"];
    if (!ids.is_array() || !values.is_array() || ids.size() != n || values.size() != n) {
      throw ProtocolError(fmt::format(
          "{}'s top_k_ids and top_k_values must be lists of {} lists (one per token)", where, n));
    }
    for (size_t t = 0; t < n; ++t) {
      if (!ids[t].is_array() || !values[t].is_array() || ids[t].size() != values[t].size() ||
          ids[t].size() > static_cast<size_t>(kMaxTopK)) {
        throw ProtocolError(
            fmt::format("{} top-k of token {}: valid: two lists of the same length, at most {}: {}",
                        where, t, kMaxTopK, quote_text(ids[t].dump())));
      }
      out.top_k_ids.emplace_back();
      out.top_k_values.emplace_back();
      for (size_t k = 0; k < ids[t].size(); ++k) {
        const json& token = ids[t][k];
        if (!token.is_number_integer() || token.get<int64_t>() < 0 ||
            token.get<int64_t>() >= vocab_size) {
          throw ProtocolError(fmt::format("{} top-k id {} of token {} is {}; valid: 0..{}", where,
                                          k, t, quote_text(token.dump()), vocab_size - 1));
        }
        out.top_k_ids.back().push_back(static_cast<int32_t>(token.get<int64_t>()));
        try {
          out.top_k_values.back().push_back(parse_value(values[t][k]));
        } catch (const ProtocolError& e) {
          throw ProtocolError(
              fmt::format("{} top-k value {} of token {}: {}", where, k, t, e.what()));
        }
      }
    }
  }
  if (seq.contains("row_digests")) {
    const json& digests = seq["row_digests"];
    if (!digests.is_array() || digests.size() != n) {
      throw ProtocolError(
          fmt::format("{}'s row_digests must be a list of {} digests (one per token)", where, n));
    }
    for (size_t t = 0; t < n; ++t) {
      const json& d = digests[t];
      const bool hex =
          d.is_string() && d.get<std::string>().size() == 16 &&
          d.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!hex) {
        throw ProtocolError(fmt::format("{} row digest {} is {}; valid: 16 lower-case hex digits",
                                        where, t, quote_text(d.dump())));
      }
      out.row_digests.push_back(std::stoull(d.get<std::string>(), nullptr, 16));
    }
  }
}

// The sequences of a result: sequence i has exactly lengths[i] tokens and values.
std::vector<SequenceResult> parse_sequences(const json& message, int64_t id,
                                            const std::vector<size_t>& lengths, int vocab_size,
                                            const std::string& what, const char* length_name) {
  const json& got_id = field(message, "id", what);
  if (!got_id.is_number_integer() || got_id.get<int64_t>() != id) {
    throw ProtocolError(fmt::format("{} carries id {}", what, quote_text(got_id.dump())));
  }
  const size_t prompts = lengths.size();
  const json& sequences = field(message, "sequences", what);
  if (!sequences.is_array() || sequences.size() != prompts) {
    throw ProtocolError(fmt::format(
        "{} has {} sequences for {} prompts", what,
        sequences.is_array() ? std::to_string(sequences.size()) : "no list of", prompts));
  }
  std::vector<SequenceResult> out(prompts);
  for (size_t i = 0; i < prompts; ++i) {
    const std::string where = fmt::format("{}, sequence {}", what, i);
    const json& seq = sequences[i];
    if (!seq.is_object()) throw ProtocolError(where + " is not an object");
    const json& tokens = field(seq, "tokens", where);
    const json& values = field(seq, "values", where);
    for (const auto* list : {&tokens, &values}) {
      if (!list->is_array() || list->size() != lengths[i]) {
        throw ProtocolError(
            fmt::format("{} has {} {} for {} {}", where,
                        list->is_array() ? std::to_string(list->size()) : "no list of",
                        list == &tokens ? "tokens" : "values", length_name, lengths[i]));
      }
    }
    for (size_t t = 0; t < lengths[i]; ++t) {
      const json& token = tokens[t];
      if (!token.is_number_integer() || token.get<int64_t>() < 0 ||
          token.get<int64_t>() >= vocab_size) {
        throw ProtocolError(fmt::format("{} token {} is {}; valid: a token id in 0..{}", where, t,
                                        quote_text(token.dump()), vocab_size - 1));
      }
      out[i].tokens.push_back(static_cast<int32_t>(token.get<int64_t>()));
      try {
        out[i].logprobs.push_back(parse_value(values[t]));
      } catch (const ProtocolError& e) {
        throw ProtocolError(fmt::format("{} value {}: {}", where, t, e.what()));
      }
    }
    parse_row_extras(seq, where, lengths[i], vocab_size, out[i]);
  }
  return out;
}

}  // namespace

std::vector<SequenceResult> parse_score_result(const json& message, int64_t id,
                                               const std::vector<ScoreRequest>& requests,
                                               int vocab_size) {
  std::vector<size_t> lengths;
  for (const ScoreRequest& r : requests) lengths.push_back(r.tokens.size());
  return parse_sequences(message, id, lengths, vocab_size,
                         fmt::format("the adapter's result for score request {}", id),
                         "forced tokens");
}

std::vector<SequenceResult> parse_result(const json& message, int64_t id, size_t prompts,
                                         int max_tokens, int vocab_size, GenerateStats* stats) {
  const std::string what = fmt::format("the adapter's result for request {}", id);
  if (max_tokens < 0) throw ProtocolError(what + ": max_tokens below 0");
  std::vector<SequenceResult> out =
      parse_sequences(message, id, std::vector<size_t>(prompts, static_cast<size_t>(max_tokens)),
                      vocab_size, what, "max_tokens");
  if (message.contains("stats")) {
    // Checked whether or not the hello promised stats: a wrong one is the adapter's bug, and a
    // silent 0 (or a negative count reaching the report) would hide it.
    const json& s = message["stats"];
    if (!s.is_object()) {
      throw ProtocolError(
          fmt::format("{}'s \"stats\" is {}; valid: an object such as "
                      "{{\"steps\": 24, \"rows\": 1536}}",
                      what, quote_text(s.dump())));
    }
    const auto count = [&](const char* key) -> int64_t {
      if (!s.contains(key)) return 0;
      const json& v = s[key];
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
        throw ProtocolError(fmt::format("{}'s \"stats\".\"{}\" is {}; valid: an integer >= 0", what,
                                        key, quote_text(v.dump())));
      }
      if (v.is_number_unsigned() &&
          v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw ProtocolError(
            fmt::format("{}'s \"stats\".\"{}\" is {}; valid: an integer in "
                        "0..{}",
                        what, key, quote_text(v.dump()), std::numeric_limits<int64_t>::max()));
      }
      return v.get<int64_t>();
    };
    const int64_t steps = count("steps");
    const int64_t rows = count("rows");
    if (stats != nullptr) {
      stats->steps += steps;
      stats->rows += rows;
    }
  }
  return out;
}

}  // namespace bih::protocol
