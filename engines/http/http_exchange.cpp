// http_exchange.cpp: one HTTP exchange (http_exchange.hpp).
#include "engines/http/http_exchange.hpp"

#include <fmt/core.h>
#include <httplib.h>

#include <cmath>

#include "base/errors.hpp"
#include "engines/engine_protocol.hpp"

namespace bih {
namespace {

void set_timeouts(httplib::Client& client, double timeout_s) {
  const auto sec = static_cast<time_t>(std::floor(timeout_s));
  const auto usec = static_cast<time_t>((timeout_s - std::floor(timeout_s)) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
}

}  // namespace

HttpTarget split_http_url(const std::string& url) {
  const size_t authority = url.find("://");
  const size_t slash = url.find('/', authority == std::string::npos ? 0 : authority + 3);
  if (slash == std::string::npos) return {url, ""};
  std::string prefix = url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, slash), prefix};
}

std::string post_json(const HttpTarget& target, const std::string& path, const nlohmann::json& body,
                      double timeout_s) {
  httplib::Client client(target.origin);
  set_timeouts(client, timeout_s);
  const std::string where = fmt::format("POST {}{}", target.url(), path);
  const httplib::Result result = client.Post(
      (target.prefix + path).c_str(),
      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
  if (!result) {
    const httplib::Error error = result.error();
    const bool timed_out = error == httplib::Error::Read || error == httplib::Error::Write;
    throw InfraError(fmt::format(
        "{}: {}{}", where, httplib::to_string(error),
        timed_out ? fmt::format(" (no complete answer within {:g} s: engine.reply_timeout_s, or "
                                "the server closed the connection)",
                                timeout_s)
                  : ""));
  }
  if (result->status != 200) {
    throw InfraError(fmt::format("{}: HTTP status {}; the reply: {}", where, result->status,
                                 protocol::quote_text(result->body, 400)));
  }
  return result->body;
}

std::optional<std::string> get_if_ok(const HttpTarget& target, const std::string& path,
                                     double timeout_s) {
  httplib::Client client(target.origin);
  set_timeouts(client, timeout_s);
  const httplib::Result result = client.Get((target.prefix + path).c_str());
  if (!result || result->status != 200) return std::nullopt;
  return result->body;
}

}  // namespace bih
