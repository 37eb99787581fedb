// fuzz_protocol.cpp: libFuzzer target for the engine protocol's checks (engines/engine_protocol).
//
// The input is one line an adapter could write. It goes through parse_line, then through each
// answer check as if it were the answer bih waits for: parse_hello, and parse_result for the
// docs' example request (generate id 1, two prompts, max_tokens 3, vocab 2048, the tiny model);
// parse_value sees every "value" and each element of "values" wherever they appear.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_input.hpp"

namespace {

// Feeds every value-looking member anywhere in `j` to parse_value (bounded by the JSON's size).
void visit_values(const nlohmann::json& j) {
  if (j.is_object()) {
    for (const auto& item : j.items()) {  // no structured binding: clang 14 cannot capture one
      const std::string& key = item.key();
      const nlohmann::json& v = item.value();
      if (key == "value") bih::fuzz::rejects([&] { (void)bih::protocol::parse_value(v); });
      if (key == "values" && v.is_array()) {
        for (const auto& x : v) bih::fuzz::rejects([&] { (void)bih::protocol::parse_value(x); });
      }
      visit_values(v);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) visit_values(v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  bih::fuzz::rejects([&] {
    const nlohmann::json message = bih::protocol::parse_line(line);
    bih::fuzz::rejects([&] { (void)bih::protocol::parse_hello(message); });
    bih::fuzz::rejects([&] {
      bih::GenerateStats stats;
      (void)bih::protocol::parse_result(message, 1, 2, 3, 2048, &stats);
    });
    visit_values(message);
  });
  return 0;
}
