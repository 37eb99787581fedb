// bih_completions.cpp: reading a /v1/completions request, writing its reply (bih_completions.hpp).
#include "engines/http/bih_completions.hpp"

#include <fmt/core.h>

#include <limits>

namespace bih {
namespace {

using nlohmann::json;

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool read_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw BadRequest(name, fmt::format("{} must be a boolean", name));
  return v->get<bool>();
}

std::vector<int32_t> read_ids(const json& list, const std::string& at) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& t : list) {
    if (!t.is_number_integer()) {
      throw BadRequest("prompt", fmt::format("{} holds {}: bih serve takes token-id prompts only "
                                             "(it has no tokenizer), integers",
                                             at, t.dump()));
    }
    const int64_t id = t.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      throw BadRequest("prompt", fmt::format("{} holds token id {}, outside int32", at, id));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// "prompt": [ids] (one prompt) or [[ids], ...] (several, one choice each, in order).
std::vector<std::vector<int32_t>> read_prompts(const json& body) {
  const json* p = field(body, "prompt");
  if (p == nullptr) throw BadRequest("prompt", "prompt is required (token ids)");
  if (!p->is_array() || p->empty()) {
    throw BadRequest("prompt",
                     "prompt must be a non-empty list of token ids or a list of such "
                     "lists (bih serve has no tokenizer: no text prompts)");
  }
  std::vector<std::vector<int32_t>> prompts;
  if (!(*p)[0].is_array()) {
    prompts.push_back(read_ids(*p, "prompt"));
    return prompts;
  }
  for (size_t i = 0; i < p->size(); ++i) {
    const std::string at = fmt::format("prompt[{}]", i);
    if (!(*p)[i].is_array()) {
      throw BadRequest("prompt", at + " is not a list of token ids (mixing forms is not valid)");
    }
    prompts.push_back(read_ids((*p)[i], at));
  }
  return prompts;
}

// Parameters that would change what is generated, answered 400 unless at their neutral value:
// bih's engine decodes greedily, one sequence per prompt, to max_tokens, without stop strings.
void refuse_sampling_changes(const json& body) {
  if (const json* t = field(body, "temperature")) {
    if (!t->is_number() || t->get<double>() != 0.0) {
      throw BadRequest("temperature",
                       "temperature must be 0: bih serve decodes greedily only; got " + t->dump());
    }
  }
  if (read_bool(body, "stream", false)) {
    throw BadRequest("stream", "stream must be false: bih serve answers whole completions only");
  }
  if (!read_bool(body, "ignore_eos", true)) {
    throw BadRequest("ignore_eos",
                     "ignore_eos must be true (or absent): bih's engine has no EOS stop, it "
                     "always generates max_tokens tokens");
  }
  if (read_bool(body, "echo", false)) {
    throw BadRequest("echo", "echo must be false: bih serve returns generated tokens only");
  }
  for (const char* name : {"n", "best_of"}) {
    if (const json* v = field(body, name); v != nullptr && *v != 1) {
      throw BadRequest(name, fmt::format("{} must be 1: one greedy sequence per prompt; got {}",
                                         name, v->dump()));
    }
  }
  for (const char* name : {"stop", "stop_token_ids"}) {
    if (const json* v = field(body, name); v != nullptr && !(v->is_array() && v->empty())) {
      throw BadRequest(name, fmt::format("{} is not supported: bih's engine generates max_tokens "
                                         "tokens without stopping; got {}",
                                         name, v->dump()));
    }
  }
}

}  // namespace

CompletionRequest parse_completion_request(const json& body, const Engine& engine) {
  if (!body.is_object()) throw BadRequest("", "the body must be a JSON object");
  CompletionRequest r;
  refuse_sampling_changes(body);
  if (const json* m = field(body, "max_tokens")) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 ||
        m->get<int64_t>() > std::numeric_limits<int>::max()) {
      throw BadRequest("max_tokens", "max_tokens must be a positive integer; got " + m->dump());
    }
    r.max_tokens = m->get<int>();
  }
  if (const json* l = field(body, "logprobs")) {
    if (!l->is_number_integer() || l->get<int64_t>() < 0 || l->get<int64_t>() > 1) {
      throw BadRequest("logprobs",
                       "logprobs must be 0 or 1: bih serve returns the sampled token's logprob "
                       "only (top_logprobs null); got " +
                           l->dump());
    }
    r.logprobs = true;
  }
  r.return_token_ids = read_bool(body, "return_token_ids", false);
  r.tokens_as_ids = read_bool(body, "return_tokens_as_token_ids", false);
  r.prompts = read_prompts(body);
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    try {
      engine.check(r.prompts[i], r.max_tokens);
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      if (what.rfind("add: ", 0) == 0) what.erase(0, 5);
      const bool length = what.find("max_model_len") != std::string::npos;
      throw BadRequest(length ? "max_tokens" : "prompt",
                       r.prompts.size() == 1 ? what : fmt::format("prompt[{}]: {}", i, what));
    }
  }
  return r;
}

json completion_reply(const CompletionRequest& request, const std::vector<SequenceResult>& results,
                      const std::string& id, const std::string& model, int64_t created,
                      const BatchSeen& seen) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const SequenceResult& r = results[i];
    json choice = {{"index", i}, {"text", ""}};
    if (request.return_token_ids) {
      choice["prompt_token_ids"] = request.prompts[i];
      choice["token_ids"] = r.tokens;
    }
    if (request.logprobs) {
      json tokens = json::array(), values = json::array();
      for (size_t t = 0; t < r.tokens.size(); ++t) {
        tokens.push_back(request.tokens_as_ids ? fmt::format("token_id:{}", r.tokens[t]) : "");
        // The float widened: JSON's shortest round-trip double gives its bits back narrowed.
        values.push_back(static_cast<double>(r.logprobs[t]));
      }
      choice["logprobs"] = {{"tokens", tokens},
                            {"token_logprobs", values},
                            {"top_logprobs", nullptr},
                            {"text_offset", std::vector<int>(r.tokens.size(), 0)}};
    } else {
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = "length";
    choice["stop_reason"] = nullptr;
    choices.push_back(std::move(choice));
    prompt_tokens += static_cast<int64_t>(request.prompts[i].size());
    completion_tokens += static_cast<int64_t>(r.tokens.size());
  }
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}},
          {"bih",
           {{"max_batch", seen.max_batch}, {"min_batch", seen.min_batch}, {"steps", seen.steps}}}};
}

json error_body(const std::string& message, const std::string& type, const std::string& param,
                int code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code}}}};
}

}  // namespace bih
