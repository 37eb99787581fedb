// dialect_openai.cpp: POST /v1/completions, the OpenAI completions API with token-id prompts, as
// vLLM and llama-server serve it.
//
// Request: "prompt" is the token ids (a list of lists for a batch), max_tokens, temperature 0,
// ignore_eos, logprobs 1, and vLLM's extra parameters return_tokens_as_token_ids (logprobs.tokens
// entries read "token_id:N") and return_token_ids (choices[i].token_ids): vLLM docs, "OpenAI-
// Compatible Server", extra parameters (https://docs.vllm.ai/en/latest/serving/
// openai_compatible_server.html). A server ignores the fields it does not know.
//
// Reply: choices[], one per prompt, ordered by "index". Token ids from choices[i].token_ids, else
// logprobs.tokens "token_id:N" (vLLM); values from logprobs.token_logprobs. llama-server answers
// logprobs as {"content": [{"id", "token", "logprob", ...}, ...]} instead (its README's
// completion_probabilities entries, under the OpenAI name; tools/server/README.md of the
// llama.cpp source the npm package ships); both shapes are read. Where two sources of token ids
// are present they must agree.
#include <fmt/core.h>

#include <algorithm>

#include "engines/http/dialect.hpp"
#include "engines/http/dialect_reply.hpp"

namespace bih {
namespace {

using nlohmann::json;

class OpenAiDialect : public Dialect {
 public:
  const std::string& name() const override { return name_; }
  const std::string& path() const override { return path_; }
  bool takes_model() const override { return true; }

  json request_body(const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                    const json& fields) const override {
    json body = {{"prompt", prompts.size() == 1 ? json(prompts[0]) : json(prompts)},
                 {"max_tokens", max_tokens},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"logprobs", 1},
                 {"return_tokens_as_token_ids", true},
                 {"return_token_ids", true},
                 {"stream", false}};
    body.update(fields);
    return body;
  }

  std::vector<SequenceResult> parse_reply(const std::string& body, size_t prompts, int max_tokens,
                                          int vocab_size) const override {
    const ReplyReader r(name_, body);
    const json& choices = r.array_member(r.root(), "choices", "the reply");
    if (choices.size() != prompts) {
      r.fail(fmt::format("{} choices for {} prompts", choices.size(), prompts));
    }
    std::vector<SequenceResult> out(prompts);
    std::vector<bool> seen(prompts, false);
    for (size_t c = 0; c < choices.size(); ++c) {
      const std::string where = fmt::format("choices[{}]", c);
      const json& index = r.member(choices[c], "index", where);
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() >= static_cast<int64_t>(prompts) || seen[index.get<size_t>()]) {
        r.fail(fmt::format("{}.index is {}, not a distinct prompt index in 0..{}", where,
                           index.dump(), prompts - 1));
      }
      seen[index.get<size_t>()] = true;
      out[index.get<size_t>()] = parse_choice(r, choices[c], where, max_tokens, vocab_size);
    }
    return out;
  }

 private:
  static SequenceResult parse_choice(const ReplyReader& r, const json& choice,
                                     const std::string& where, int max_tokens, int vocab_size) {
    SequenceResult s;
    const json& logprobs = r.member(choice, "logprobs", where);
    const std::string lp_where = where + ".logprobs";
    std::vector<int32_t> from_logprobs;
    if (logprobs.is_object() && logprobs.contains("content")) {
      // llama-server: [{"id": N, "logprob": x, ...}, ...]
      const json& content = r.array_member(logprobs, "content", lp_where);
      for (size_t t = 0; t < content.size(); ++t) {
        const std::string at = fmt::format("{}.content[{}]", lp_where, t);
        from_logprobs.push_back(r.token_id(r.member(content[t], "id", at), vocab_size, at + ".id"));
        s.logprobs.push_back(r.logprob(r.member(content[t], "logprob", at), at + ".logprob"));
      }
    } else {
      const json& values = r.array_member(logprobs, "token_logprobs", lp_where);
      for (size_t t = 0; t < values.size(); ++t) {
        s.logprobs.push_back(
            r.logprob(values[t], fmt::format("{}.token_logprobs[{}]", lp_where, t)));
      }
      if (logprobs.contains("tokens")) {
        const json& tokens = r.array_member(logprobs, "tokens", lp_where);
        for (size_t t = 0; t < tokens.size(); ++t) {
          from_logprobs.push_back(
              token_of_text(r, tokens[t], vocab_size, fmt::format("{}.tokens[{}]", lp_where, t)));
        }
      }
    }
    if (choice.contains("token_ids") && !choice["token_ids"].is_null()) {
      const json& ids = r.array_member(choice, "token_ids", where);
      for (size_t t = 0; t < ids.size(); ++t) {
        s.tokens.push_back(
            r.token_id(ids[t], vocab_size, fmt::format("{}.token_ids[{}]", where, t)));
      }
      if (!from_logprobs.empty() && from_logprobs != s.tokens) {
        r.fail(where + ".token_ids and the token ids in its logprobs differ");
      }
    } else {
      if (from_logprobs.empty() && max_tokens > 0) {
        r.fail(where +
               " has neither token_ids nor token ids in its logprobs (ask with "
               "return_token_ids or return_tokens_as_token_ids)");
      }
      s.tokens = std::move(from_logprobs);
    }
    r.check_length(s, max_tokens, where);
    return s;
  }

  // "token_id:1234" (vLLM's return_tokens_as_token_ids).
  static int32_t token_of_text(const ReplyReader& r, const json& text, int vocab_size,
                               const std::string& where) {
    const std::string prefix = "token_id:";
    if (!text.is_string() || text.get<std::string>().rfind(prefix, 0) != 0) {
      r.fail(fmt::format("{} is {}, not \"token_id:N\"", where, text.dump()));
    }
    const std::string digits = text.get<std::string>().substr(prefix.size());
    if (digits.empty() || digits.size() > 10 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      r.fail(fmt::format("{} is {}, not \"token_id:N\"", where, text.dump()));
    }
    return r.token_id(json::parse(digits), vocab_size, where);
  }

  std::string name_ = "openai";
  std::string path_ = "/v1/completions";
};

}  // namespace

std::unique_ptr<Dialect> make_openai_dialect() { return std::make_unique<OpenAiDialect>(); }

}  // namespace bih
