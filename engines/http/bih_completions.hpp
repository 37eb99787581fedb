// bih_completions.hpp: `POST /v1/completions` for bih serve: the request read into what bih's
// engine can run, and the reply written in vLLM's completion shape
// (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html: the OpenAI Completions
// API plus vLLM's extra parameters return_token_ids and return_tokens_as_token_ids).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/engine.hpp"

namespace bih {

// A request bih serve refuses: HTTP 400 with {"error": {"message", "type", "param", "code"}}.
struct BadRequest : std::runtime_error {
  BadRequest(const std::string& param, const std::string& message)
      : std::runtime_error(message), param(param) {}
  std::string param;  // the request field at fault
};

struct CompletionRequest {
  std::vector<std::vector<int32_t>> prompts;  // "prompt": token ids, one list or a list of lists
  int max_tokens = 16;                        // vLLM's default
  bool logprobs = false;                      // "logprobs": 0 or 1
  bool return_token_ids = false;
  bool tokens_as_ids = false;  // return_tokens_as_token_ids
};

// What one request's sequences saw while they ran (the reply's "bih" field).
struct BatchSeen {
  int max_batch = 0;  // the most sequences in one step that ran a sequence of this request
  int min_batch = 0;
  int64_t steps = 0;  // steps that ran a sequence of this request
};

// Reads a /v1/completions body. `engine` checks every prompt against its vocabulary and
// max_model_len (Engine::check is const and reads only immutable options). Throws BadRequest
// naming the field.
CompletionRequest parse_completion_request(const nlohmann::json& body, const Engine& engine);

// The reply: {id, object "text_completion", created, model, choices, usage, bih}.
nlohmann::json completion_reply(const CompletionRequest& request,
                                const std::vector<SequenceResult>& results, const std::string& id,
                                const std::string& model, int64_t created, const BatchSeen& seen);

// {"error": {"message", "type", "param", "code"}}, vLLM's error body.
nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& param, int code);

}  // namespace bih
