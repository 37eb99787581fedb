// dialect_llama_cpp.cpp: POST /completion, llama-server's own (not OpenAI) endpoint.
//
// From tools/server/README.md of the llama.cpp source our npm package ships: "prompt" may be a
// sequence of token ids, and "multiple prompts are also supported. In this case, the completion
// result will be an array" (so a batch is an array of token arrays); n_predict, temperature,
// ignore_eos, n_probs (> 0: completion_probabilities, one entry per predicted token with "id"
// and "logprob"), return_tokens (the generated ids in "tokens"). cache_prompt is left to the
// request fields (a profile's mapping of prefix caching).
#include <fmt/core.h>

#include "engines/http/dialect.hpp"
#include "engines/http/dialect_reply.hpp"

namespace bih {
namespace {

using nlohmann::json;

class LlamaCppDialect : public Dialect {
 public:
  const std::string& name() const override { return name_; }
  const std::string& path() const override { return path_; }

  json request_body(const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                    const json& fields) const override {
    json body = {{"prompt", prompts.size() == 1 ? json(prompts[0]) : json(prompts)},
                 {"n_predict", max_tokens},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"n_probs", 1},
                 {"return_tokens", true},
                 {"stream", false}};
    body.update(fields);
    return body;
  }

  std::vector<SequenceResult> parse_reply(const std::string& body, size_t prompts, int max_tokens,
                                          int vocab_size) const override {
    const ReplyReader r(name_, body);
    const json& reply = r.root();
    if (prompts == 1 && reply.is_object()) {
      return {parse_one(r, reply, "the reply", max_tokens, vocab_size)};
    }
    if (!reply.is_array()) {
      r.fail(fmt::format("the reply is {}, not an array of {} completions", reply.type_name(),
                         prompts));
    }
    if (reply.size() != prompts) {
      r.fail(fmt::format("{} completions for {} prompts", reply.size(), prompts));
    }
    std::vector<SequenceResult> out;
    for (size_t i = 0; i < reply.size(); ++i) {
      out.push_back(parse_one(r, reply[i], fmt::format("[{}]", i), max_tokens, vocab_size));
    }
    return out;
  }

 private:
  static SequenceResult parse_one(const ReplyReader& r, const json& c, const std::string& where,
                                  int max_tokens, int vocab_size) {
    const json& probs = r.array_member(c, "completion_probabilities", where);
    SequenceResult s;
    for (size_t t = 0; t < probs.size(); ++t) {
      const std::string at = fmt::format("{}.completion_probabilities[{}]", where, t);
      s.tokens.push_back(r.token_id(r.member(probs[t], "id", at), vocab_size, at + ".id"));
      s.logprobs.push_back(r.logprob(r.member(probs[t], "logprob", at), at + ".logprob"));
    }
    // "tokens" (return_tokens), when filled, must say the same as the probabilities' ids.
    if (c.contains("tokens")) {
      const json& tokens = r.array_member(c, "tokens", where);
      std::vector<int32_t> ids;
      for (size_t t = 0; t < tokens.size(); ++t) {
        ids.push_back(r.token_id(tokens[t], vocab_size, fmt::format("{}.tokens[{}]", where, t)));
      }
      if (!ids.empty() && ids != s.tokens)
        r.fail(where + ".tokens and its completion_probabilities ids differ");
    }
    r.check_length(s, max_tokens, where);
    return s;
  }

  std::string name_ = "llama.cpp";
  std::string path_ = "/completion";
};

}  // namespace

std::unique_ptr<Dialect> make_llama_cpp_dialect() { return std::make_unique<LlamaCppDialect>(); }

}  // namespace bih
