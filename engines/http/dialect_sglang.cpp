// dialect_sglang.cpp: POST /generate, SGLang's native API.
//
// Request: "input_ids" (a list of lists for a batch), sampling_params {max_new_tokens,
// temperature 0, ignore_eos}, return_logprob (SGLang docs, "SGLang Native APIs" and "Sampling
// Parameters": https://docs.sglang.io/basic_usage/native_api.html,
// https://docs.sglang.io/basic_usage/sampling_params.html).
// Reply: one object for one prompt, a list of them (in prompt order) for a batch, each with
// meta_info.output_token_logprobs = [[logprob, token_id, text or null], ...].
#include <fmt/core.h>

#include "engines/http/dialect.hpp"
#include "engines/http/dialect_reply.hpp"

namespace bih {
namespace {

using nlohmann::json;

class SglangDialect : public Dialect {
 public:
  const std::string& name() const override { return name_; }
  const std::string& path() const override { return path_; }

  json request_body(const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                    const json& fields) const override {
    json body = {{"input_ids", prompts.size() == 1 ? json(prompts[0]) : json(prompts)},
                 {"sampling_params",
                  {{"max_new_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}},
                 {"return_logprob", true},
                 {"stream", false}};
    body.update(fields);
    return body;
  }

  std::vector<SequenceResult> parse_reply(const std::string& body, size_t prompts, int max_tokens,
                                          int vocab_size) const override {
    const ReplyReader r(name_, body);
    const json& reply = r.root();
    if (prompts == 1 && reply.is_object())
      return {parse_one(r, reply, "the reply", max_tokens, vocab_size)};
    if (!reply.is_array()) {
      r.fail(fmt::format("the reply is {}, not a list of {} results", reply.type_name(), prompts));
    }
    if (reply.size() != prompts)
      r.fail(fmt::format("{} results for {} prompts", reply.size(), prompts));
    std::vector<SequenceResult> out;
    for (size_t i = 0; i < reply.size(); ++i) {
      out.push_back(parse_one(r, reply[i], fmt::format("[{}]", i), max_tokens, vocab_size));
    }
    return out;
  }

 private:
  static SequenceResult parse_one(const ReplyReader& r, const json& result,
                                  const std::string& where, int max_tokens, int vocab_size) {
    const json& meta = r.member(result, "meta_info", where);
    const json& entries = r.array_member(meta, "output_token_logprobs", where + ".meta_info");
    SequenceResult s;
    for (size_t t = 0; t < entries.size(); ++t) {
      const std::string at = fmt::format("{}.meta_info.output_token_logprobs[{}]", where, t);
      const json& e = entries[t];
      if (!e.is_array() || e.size() < 2 || e.size() > 3) {
        r.fail(fmt::format("{} is {}, not [logprob, token_id, text]", at, e.dump()));
      }
      s.logprobs.push_back(r.logprob(e[0], at + "[0]"));
      s.tokens.push_back(r.token_id(e[1], vocab_size, at + "[1]"));
    }
    r.check_length(s, max_tokens, where);
    return s;
  }

  std::string name_ = "sglang";
  std::string path_ = "/generate";
};

}  // namespace

std::unique_ptr<Dialect> make_sglang_dialect() { return std::make_unique<SglangDialect>(); }

}  // namespace bih
