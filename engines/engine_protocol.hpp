// engine_protocol.hpp: the messages of bih.engine/1 (docs/engine-protocol.md), built and checked.
//
// Pure functions over JSON, so that every rule an adapter can break is tested (and fuzzed) without
// a process: each check throws ProtocolError with what was wrong, quoting the adapter's own words.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/config.hpp"
#include "models/engine.hpp"

namespace bih::protocol {

inline constexpr const char* kVersion = "bih.engine/1";

class ProtocolError : public std::runtime_error {
 public:
  explicit ProtocolError(const std::string& what) : std::runtime_error(what) {}
};

// The model as handed to an adapter.
struct ModelHandle {
  std::string format;  // "hf" | "gguf"
  std::string path;    // absolute
  std::string id;      // "preset:tiny(seed=0)" or the checkpoint path
  ModelConfig config;
};

struct Limits {
  int max_batch = 0;
  int max_model_len = 0;
  int max_tokens = 0;
};

nlohmann::json init_message(const ModelHandle& model, const nlohmann::json& knobs,
                            const nlohmann::json& options, const Limits& limits);
// `extras` (compare.top_k / row_digest) adds "top_k": K and "row_digest": true, sent only to an
// adapter whose hello announced them (capabilities.top_k / row_digest).
nlohmann::json generate_message(int64_t id, const std::vector<std::vector<int32_t>>& prompts,
                                int max_tokens, const RowExtras& extras = {});
// {"type": "score", "id", "sequences": [{"prompt": [...], "tokens": [...]}], "top_k"?,
// "row_digest"?}: score each sequence's prompt + tokens in one prefill (teacher forcing); sent only
// to an adapter whose hello said capabilities.score: true. Answered by a "result" message of the
// same shape as generate's: per forced token the prefill's argmax and the forced token's value.
nlohmann::json score_message(int64_t id, const std::vector<ScoreRequest>& requests,
                             const RowExtras& extras = {});
nlohmann::json shutdown_message();
// {"type": "reset_cache"}: empty your prefix (KV) cache, so that the next generate runs cold. Sent
// only to an adapter whose hello said capabilities.reset_cache: true, between generations.
nlohmann::json reset_cache_message();

// A line the adapter wrote, as a message: a JSON object with a string "type". Throws
// ProtocolError quoting the line (cut to 200 characters) otherwise.
nlohmann::json parse_line(const std::string& line);

// Quotes outside text for a message: cut to at most `limit` bytes on a character boundary,
// marking the cut, with bytes that are not UTF-8 written as \xNN (the message may end up in a
// JSON report).
std::string quote_text(const std::string& text, size_t limit = 200);

// A float32 model config value as init.model.config sends it: the shortest decimal that reads
// back as that float, as a double (rms_norm_eps 1e-06f is sent as 1e-06, not 9.99999997e-07).
double widened_float(float value);

struct Hello {
  std::string engine_name;
  std::string engine_version;
  std::string value;  // "logprob" | "probability"
  nlohmann::json settings = nlohmann::json::object();
  nlohmann::json adapter = nlohmann::json::object();
  bool step_stats = false;
  bool reset_cache = false;  // it answers reset_cache (capabilities.reset_cache)
  bool score = false;        // it answers score (capabilities.score)
  bool top_k = false;        // results carry top_k_ids / top_k_values when asked
  bool row_digest = false;   // results carry row_digests when asked
};

// The answer to init of type "hello"; throws ProtocolError for a missing or wrong field.
Hello parse_hello(const nlohmann::json& message);

// The answer to reset_cache: {"type": "reset_done"}. Throws ProtocolError for an error reply
// (quoting its message) or any other message.
void parse_reset_done(const nlohmann::json& message);

// One value of a result: "0x3f800000" (float32 bits, exact) or a JSON number rounded to float32.
float parse_value(const nlohmann::json& value);

// The answer to generate `id` of type "result": exactly `prompts` sequences of exactly max_tokens
// tokens in 0..vocab_size-1 and max_tokens values. `stats` (may be null) gets result.stats.
// Optional per sequence: "top_k_ids" ([max_tokens][k] ids, k <= 20) with "top_k_values" (the same
// shape of values) and "row_digests" ([max_tokens] 16 lower-case hex digits); checked when present.
std::vector<SequenceResult> parse_result(const nlohmann::json& message, int64_t id, size_t prompts,
                                         int max_tokens, int vocab_size, GenerateStats* stats);

// The answer to score `id`: a "result" with one sequence per request, each of exactly as many
// tokens and values as that request forced (plus the optional top-k and digest fields).
std::vector<SequenceResult> parse_score_result(const nlohmann::json& message, int64_t id,
                                               const std::vector<ScoreRequest>& requests,
                                               int vocab_size);

}  // namespace bih::protocol
