// http_exchange.hpp: one HTTP exchange with a server under test, over cpp-httplib: a POST of a
// JSON body whose answer must be status 200, or a GET whose answer is optional (a version).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace bih {

// A base url split for cpp-httplib: "http://127.0.0.1:8000/v2" -> origin "http://127.0.0.1:8000",
// prefix "/v2" (put before every path).
struct HttpTarget {
  std::string origin;
  std::string prefix;
  std::string url() const { return origin + prefix; }
};
HttpTarget split_http_url(const std::string& url);

// POSTs `body` to target.prefix + path and returns the reply's body. Throws InfraError, quoting
// the reply, for no connection, no answer within timeout_s, or a status other than 200.
std::string post_json(const HttpTarget& target, const std::string& path, const nlohmann::json& body,
                      double timeout_s);

// GET target.prefix + path: its body on status 200, nothing on any failure.
std::optional<std::string> get_if_ok(const HttpTarget& target, const std::string& path,
                                     double timeout_s);

}  // namespace bih
