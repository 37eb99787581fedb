// dialect_reply.hpp: what every dialect's reply reader shares: the parsed body, the failure that
// quotes it, and the checks of one token id and one sequence's length.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/engine.hpp"

namespace bih {

class ReplyReader {
 public:
  // Parses `body`; a body that is not JSON fails here.
  ReplyReader(const std::string& dialect, const std::string& body);
  const nlohmann::json& root() const { return json_; }
  // InfraError: "<dialect> reply: <what>; the reply: <quoted body>".
  [[noreturn]] void fail(const std::string& what) const;
  // `object[key]`, failing when `object` is not an object or lacks it.
  const nlohmann::json& member(const nlohmann::json& object, const std::string& key,
                               const std::string& where) const;
  const nlohmann::json& array_member(const nlohmann::json& object, const std::string& key,
                                     const std::string& where) const;
  int32_t token_id(const nlohmann::json& value, int vocab_size, const std::string& where) const;
  float logprob(const nlohmann::json& value, const std::string& where) const;
  // Fails unless the sequence holds exactly max_tokens tokens and values.
  void check_length(const SequenceResult& r, int max_tokens, const std::string& where) const;

 private:
  std::string dialect_;
  std::string body_;
  nlohmann::json json_;
};

}  // namespace bih
