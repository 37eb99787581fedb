// dialect_reply.cpp: the shared reply checks (dialect_reply.hpp) and the float32 narrowing rule
// (dialect.hpp).
#include "engines/http/dialect_reply.hpp"

#include <fmt/core.h>

#include <cmath>

#include "base/errors.hpp"
#include "engines/engine_protocol.hpp"
#include "engines/http/dialect.hpp"

namespace bih {

using nlohmann::json;

float narrow_logprob(const json& value, const std::string& where) {
  if (!value.is_number()) {
    throw InfraError(fmt::format("{} is {} {}, not a number", where, value.type_name(),
                                 protocol::quote_text(value.dump(), 60)));
  }
  const double d = value.get<double>();
  const float f = static_cast<float>(d);
  // Exactly a float widened (nlohmann and Python print a double's shortest digits), or a float's
  // own shortest decimal read back as a double: either way the server had this float.
  // (std::stod, under widened_float, refuses a subnormal's decimal: those compare exactly.)
  if (std::isfinite(f) && (static_cast<double>(f) == d ||
                           (std::fpclassify(f) == FP_NORMAL && protocol::widened_float(f) == d))) {
    return f;
  }
  throw InfraError(fmt::format(
      "{}: value {} does not round-trip through float32 (nearest float32 {}): the server "
      "computed or printed it at another precision, and bih does not compare rounded values",
      where, value.dump(), fmt::format("{}", f)));
}

std::unique_ptr<Dialect> make_dialect(const std::string& name) {
  if (name == "openai") return make_openai_dialect();
  if (name == "sglang") return make_sglang_dialect();
  if (name == "llama.cpp") return make_llama_cpp_dialect();
  throw InfraError("unknown dialect '" + name + "'; valid: openai, sglang, llama.cpp");
}

ReplyReader::ReplyReader(const std::string& dialect, const std::string& body)
    : dialect_(dialect), body_(body) {
  json_ = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json_.is_discarded()) fail("the body is not JSON");
}

void ReplyReader::fail(const std::string& what) const {
  throw InfraError(
      fmt::format("{} reply: {}; the reply: {}", dialect_, what, protocol::quote_text(body_, 400)));
}

const json& ReplyReader::member(const json& object, const std::string& key,
                                const std::string& where) const {
  if (!object.is_object()) fail(fmt::format("{} is {}, not an object", where, object.type_name()));
  const auto it = object.find(key);
  if (it == object.end()) fail(fmt::format("{} has no \"{}\"", where, key));
  return *it;
}

const json& ReplyReader::array_member(const json& object, const std::string& key,
                                      const std::string& where) const {
  const json& v = member(object, key, where);
  if (!v.is_array()) fail(fmt::format("{}.{} is {}, not an array", where, key, v.type_name()));
  return v;
}

int32_t ReplyReader::token_id(const json& value, int vocab_size, const std::string& where) const {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() >= vocab_size) {
    fail(fmt::format("{} is {}, not a token id in 0..{}", where, value.dump(), vocab_size - 1));
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

float ReplyReader::logprob(const json& value, const std::string& where) const {
  try {
    return narrow_logprob(value, where);
  } catch (const InfraError& e) {
    fail(e.what());
  }
}

void ReplyReader::check_length(const SequenceResult& r, int max_tokens,
                               const std::string& where) const {
  if (r.tokens.size() != static_cast<size_t>(max_tokens) ||
      r.logprobs.size() != static_cast<size_t>(max_tokens)) {
    fail(fmt::format("{} holds {} tokens and {} values, but {} were asked for (EOS ignored)", where,
                     r.tokens.size(), r.logprobs.size(), max_tokens));
  }
}

}  // namespace bih
