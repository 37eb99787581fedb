// test_engine_protocol.cpp: bih.engine/1 messages: values exact to the bit, every broken rule a
// ProtocolError that says which.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "engines/engine_protocol.hpp"
#include "schema_check.hpp"

namespace bih::protocol::test_engine_protocol {
namespace {

using nlohmann::json;

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(EngineProtocolValues, BitPatternStringsAreExact) {
  for (uint32_t pattern :
       {0x00000000u, 0x80000000u /* -0.0 */, 0x00000001u /* denormal */, 0xff800000u /* -inf */,
        0x7fc00001u /* a NaN payload */, 0xbf800000u, 0x3c0a3d71u}) {
    const std::string text = fmt::format("0x{:08x}", pattern);
    EXPECT_EQ(bits(parse_value(json(text))), pattern) << text;
  }
  EXPECT_EQ(bits(parse_value(json("0X3F800000"))), 0x3f800000u);
}

TEST(EngineProtocolValues, NumbersRoundToFloat32) {
  const float f = -2.7182817459106445f;
  EXPECT_EQ(bits(parse_value(json(static_cast<double>(f)))), bits(f));
  EXPECT_EQ(bits(parse_value(json(-0.0))), 0x80000000u);
  EXPECT_EQ(bits(parse_value(json(1))), bits(1.0f));
}

TEST(EngineProtocolValues, AnythingElseIsRefused) {
  for (const json& bad :
       {json("0x3f80000"), json("0x3f8000000"), json("3f800000"), json("0xzzzzzzzz"), json("-1.5"),
        json(nullptr), json::array(), json(true)}) {
    EXPECT_THROW(parse_value(bad), ProtocolError) << bad.dump();
  }
}

TEST(EngineProtocolLines, NonMessagesAreQuoted) {
  try {
    parse_line("loading model... done");
    FAIL() << "no error";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("'loading model... done'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_line("[1, 2]"), ProtocolError);
  EXPECT_THROW(parse_line("{\"type\": 3}"), ProtocolError);
  EXPECT_EQ(parse_line("{\"type\":\"progress\",\"text\":\"x\"}")["type"], "progress");
  const std::string long_line(5000, 'x');
  try {
    parse_line(long_line);
  } catch (const ProtocolError& e) {
    EXPECT_LT(std::string(e.what()).size(), 600u) << "a flood is cut in the message";
  }
}

json good_hello() {
  return {{"type", "hello"},
          {"protocol", kVersion},
          {"engine", {{"name", "llama.cpp"}, {"version", "b6123"}}},
          {"value", "probability"},
          {"settings", {{"threads", 2}}}};
}

TEST(EngineProtocolHello, ReadsIdentityAndSettings) {
  const Hello h = parse_hello(good_hello());
  EXPECT_EQ(h.engine_name, "llama.cpp");
  EXPECT_EQ(h.engine_version, "b6123");
  EXPECT_EQ(h.value, "probability");
  EXPECT_EQ(h.settings["threads"], 2);
  json no_value = good_hello();
  no_value.erase("value");
  EXPECT_EQ(parse_hello(no_value).value, "logprob");
}

TEST(EngineProtocolHello, RefusesWrongProtocolAndFields) {
  json wrong = good_hello();
  wrong["protocol"] = "bih.engine/2";
  EXPECT_THROW(parse_hello(wrong), ProtocolError);
  json no_engine = good_hello();
  no_engine.erase("engine");
  EXPECT_THROW(parse_hello(no_engine), ProtocolError);
  json bad_value = good_hello();
  bad_value["value"] = "logit";
  EXPECT_THROW(parse_hello(bad_value), ProtocolError);
  json bad_settings = good_hello();
  bad_settings["settings"] = "fast";
  EXPECT_THROW(parse_hello(bad_settings), ProtocolError);
}

json result(int64_t id, int sequences, int tokens) {
  json seqs = json::array();
  for (int i = 0; i < sequences; ++i) {
    json t = json::array(), v = json::array();
    for (int k = 0; k < tokens; ++k) {
      t.push_back(i + k);
      v.push_back(fmt::format("0x{:08x}", 0xbf000000u + static_cast<uint32_t>(k)));
    }
    seqs.push_back({{"tokens", t}, {"values", v}});
  }
  return {{"type", "result"}, {"id", id}, {"sequences", seqs}, {"stats", {{"steps", 7}}}};
}

TEST(EngineProtocolResult, ReadsTokensValuesAndStats) {
  GenerateStats stats;
  const auto out = parse_result(result(3, 2, 4), 3, 2, 4, 100, &stats);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(bits(out[1].logprobs[3]), 0xbf000003u);
  EXPECT_EQ(stats.steps, 7);
}

TEST(EngineProtocolResult, EveryBrokenRuleIsAnError) {
  EXPECT_THROW(parse_result(result(3, 2, 4), 4, 2, 4, 100, nullptr), ProtocolError) << "id";
  EXPECT_THROW(parse_result(result(3, 1, 4), 3, 2, 4, 100, nullptr), ProtocolError) << "count";
  EXPECT_THROW(parse_result(result(3, 2, 3), 3, 2, 4, 100, nullptr), ProtocolError) << "tokens";
  EXPECT_THROW(parse_result(result(3, 2, 4), 3, 2, 4, 4, nullptr), ProtocolError) << "vocab";
  json short_values = result(3, 2, 4);
  short_values["sequences"][0]["values"].erase(0);
  EXPECT_THROW(parse_result(short_values, 3, 2, 4, 100, nullptr), ProtocolError);
  json negative = result(3, 2, 4);
  negative["sequences"][0]["tokens"][0] = -1;
  EXPECT_THROW(parse_result(negative, 3, 2, 4, 100, nullptr), ProtocolError);
  json fractional = result(3, 2, 4);
  fractional["sequences"][0]["tokens"][0] = 1.5;
  EXPECT_THROW(parse_result(fractional, 3, 2, 4, 100, nullptr), ProtocolError);
  json not_list = result(3, 2, 4);
  not_list["sequences"] = "none";
  EXPECT_THROW(parse_result(not_list, 3, 2, 4, 100, nullptr), ProtocolError);
}

TEST(EngineProtocolInit, CarriesModelKnobsOptionsAndLimits) {
  ModelHandle model;
  model.format = "gguf";
  model.path = "/cache/tiny.gguf";
  model.id = "preset:tiny(seed=0)";
  model.config.vocab_size = 2048;
  model.config.rope_theta = 1e6;
  const json init = init_message(model, {{"parallel.tp", 2}}, {{"threads", 2}}, {64, 512, 24});
  EXPECT_EQ(init["type"], "init");
  EXPECT_EQ(init["protocol"], kVersion);
  EXPECT_EQ(init["model"]["format"], "gguf");
  EXPECT_EQ(init["model"]["config"]["vocab_size"], 2048);
  EXPECT_EQ(init["model"]["config"]["rope_theta"], 1e6);
  EXPECT_EQ(init["knobs"]["parallel.tp"], 2);
  EXPECT_EQ(init["options"]["threads"], 2);
  EXPECT_EQ(init["limits"]["max_batch"], 64);
  const json gen = generate_message(5, {{1, 2}, {3}}, 24);
  EXPECT_EQ(gen["prompts"], json::parse("[[1,2],[3]]"));
  EXPECT_EQ(gen["greedy"], true);
  EXPECT_EQ(gen["ignore_eos"], true);
}

// The messages bih sends and the documented example exchange follow the published schema.
TEST(EngineProtocolSchema, BihsMessagesAndTheDocumentedExampleValidate) {
  const testing::SchemaChecker schema(std::string(BIH_SOURCE_DIR) +
                                      "/docs/engine-protocol.schema.json");
  ModelHandle model{"hf", "/m", "preset:tiny(seed=0)", {}};
  model.config.vocab_size = 2048;
  EXPECT_EQ(schema.errors(init_message(model, json::object(), json::object(), {64, 512, 24})), "");
  EXPECT_EQ(schema.errors(generate_message(1, {{1, 2}}, 3)), "");
  EXPECT_EQ(schema.errors(shutdown_message()), "");
  EXPECT_EQ(schema.errors(good_hello()), "");
  EXPECT_EQ(schema.errors(result(1, 2, 3)), "");
  EXPECT_NE(
      schema.errors(json{
          {"type", "result"}, {"id", 1}, {"sequences", {{{"tokens", {1}}, {"values", {"one"}}}}}}),
      "")
      << "a value that is neither bits nor a number";

  // Every JSON line of the page's example exchange, and bih parses the adapter's lines.
  std::ifstream page(std::string(BIH_SOURCE_DIR) + "/docs/engine-protocol.md");
  std::string line;
  int checked = 0;
  while (std::getline(page, line)) {
    if (line.rfind("{\"type\":", 0) != 0) continue;
    const json message = json::parse(line);
    EXPECT_EQ(schema.errors(message), "") << line;
    if (message["type"] == "hello") EXPECT_EQ(parse_hello(message).engine_name, "llama.cpp");
    if (message["type"] == "result") {
      EXPECT_EQ(parse_result(message, 1, 2, 3, 2048, nullptr).size(), 2u);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5) << "init, hello, generate, result, shutdown";
}

}  // namespace
}  // namespace bih::protocol::test_engine_protocol
