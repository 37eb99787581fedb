// dialect.hpp: how one kind of server is asked for greedy tokens with logprobs, and how its
// answer is read (engine.dialect: openai, sglang, llama.cpp; docs/http-engine.md).
//
// A dialect builds the body of one request for a batch of token-id prompts and reads the reply
// into one SequenceResult per prompt, in prompt order. It computes nothing and trusts nothing:
// a reply that is not JSON, has the wrong shape or count, more or fewer tokens than asked for,
// a token id outside the vocabulary, or a value that does not round-trip through float32 is an
// InfraError quoting the reply. The HTTP engine (http_engine.hpp) does the sending.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/engine.hpp"

namespace bih {

class Dialect {
 public:
  virtual ~Dialect() = default;
  virtual const std::string& name() const = 0;  // "openai" | "sglang" | "llama.cpp"
  virtual const std::string& path() const = 0;  // "/v1/completions": POSTed to, after the url
  // Whether the request names the served model in "model" (engine.served_model).
  virtual bool takes_model() const { return false; }
  // One request asking for max_tokens greedy tokens (EOS ignored) and their logprobs for every
  // prompt; `fields` (the profile's request fields, "model") are merged over it.
  virtual nlohmann::json request_body(const std::vector<std::vector<int32_t>>& prompts,
                                      int max_tokens, const nlohmann::json& fields) const = 0;
  // The reply to a request of `prompts` prompts. Throws InfraError quoting it when it is wrong.
  virtual std::vector<SequenceResult> parse_reply(const std::string& body, size_t prompts,
                                                  int max_tokens, int vocab_size) const = 0;
};

// The dialect of that name; throws InfraError for another name (scenario parsing checks it).
std::unique_ptr<Dialect> make_dialect(const std::string& name);
std::unique_ptr<Dialect> make_openai_dialect();
std::unique_ptr<Dialect> make_sglang_dialect();
std::unique_ptr<Dialect> make_llama_cpp_dialect();

// A logprob as a server wrote it, narrowed to float32. Taken only when nothing is lost: the
// double is the float widened, or the reply's decimal is the float's shortest round-trip decimal
// (what a C++ or Python server prints for a float). Otherwise InfraError naming `where`.
float narrow_logprob(const nlohmann::json& value, const std::string& where);

}  // namespace bih
