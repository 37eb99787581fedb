// test_protocol_rules.cpp: the loose ends of bih.engine/1 and of a scenario's `engine` section:
// env entries that cannot be set, reply timeouts too short to wait, option ids that are
// injective and bounded, option nesting that keeps every report readable, step stats checked,
// hello fields of the wrong type, errors that name the generation, and float32 config values
// sent as config.json writes them.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "base/json_file.hpp"
#include "engines/engine_protocol.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "spec/size_bounds.hpp"

namespace bih::test_protocol_rules {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::report_files;
using testing::run_bih;

const std::string kFaulty = std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/faulty_adapter.py";

json engine_with(const json& extra) {
  json e = {{"kind", "command"}, {"name", "x"}, {"command", {"python3", kFaulty}}};
  for (const auto& [k, v] : extra.items()) e[k] = v;
  return e;
}

// Loads one scenario written to a fresh file; the id, or the InputError's text as "ERROR: ...".
std::string load_one(const fs::path& dir, const json& scenario) {
  std::ofstream(dir / "s.json") << scenario.dump(-1, ' ', false, json::error_handler_t::strict);
  try {
    return load_scenarios((dir / "s.json").string()).scenarios.at(0).id();
  } catch (const InputError& e) {
    return std::string("ERROR: ") + e.what();
  }
}

TEST(EngineSection, EnvEntriesThatCannotBeSetAreRefused) {
  const auto dir = fresh_dir("rules-env");
  const std::vector<std::pair<json, std::string>> bad{
      {{{"", "1"}}, "/engine/env/: bad variable name"},
      {{{"A=B", "1"}}, "/engine/env/A=B: bad variable name"},
      {{{std::string("A\0B", 3), "1"}}, "/engine/env: bad variable name \"A\\u0000B\""},
      {{{"A", std::string("1\0"
                          "2",
                          3)}},
       "/engine/env/A: the value"}};
  for (const auto& [env, message] : bad) {
    const std::string got = load_one(dir, {{"engine", engine_with({{"env", env}})}});
    EXPECT_EQ(got.rfind("ERROR: ", 0), 0u) << env.dump() << " was accepted: " << got;
    EXPECT_NE(got.find(message), std::string::npos) << got;
  }
  EXPECT_EQ(load_one(dir, {{"engine", engine_with({{"env", {{"OMP_NUM_THREADS", "2"}}}})}}),
            "model=tiny,engine=x");
  // An argument with a NUL would reach exec cut short.
  const std::string nul =
      load_one(dir, {{"engine", engine_with({{"command", {"python3", std::string("a\0b", 3)}}})}});
  EXPECT_NE(nul.find("/engine/command/1: argument"), std::string::npos) << nul;
}

TEST(EngineSection, AReplyTimeoutBelowAMillisecondIsRefused) {
  const auto dir = fresh_dir("rules-timeout");
  for (double t : {0.0009, 1e-9, -1.0}) {
    const std::string got = load_one(dir, {{"engine", engine_with({{"reply_timeout_s", t}})}});
    EXPECT_NE(got.find("ERROR: "), std::string::npos) << t << ": " << got;
    EXPECT_NE(got.find("/engine/reply_timeout_s"), std::string::npos) << got;
  }
  for (double t : {0.0, 0.001, 5.0}) {
    EXPECT_EQ(load_one(dir, {{"engine", engine_with({{"reply_timeout_s", t}})}}),
              "model=tiny,engine=x")
        << t;
  }
}

TEST(EngineSection, DistinctOptionsGiveDistinctIds) {
  const auto dir = fresh_dir("rules-ids");
  // Pairs that gave one id before: a string vs a number / bool / list written the same, and a
  // string holding ",k=v" vs two options.
  const std::vector<json> options{
      {{"a", "1"}},     {{"a", 1}},      {{"a", "true"}},       {{"a", true}},
      {{"a", "[1,2]"}}, {{"a", {1, 2}}}, {{"a", "x,b=y"}},      {{"a", "x"}, {"b", "y"}},
      {{"a=x", "y"}},   {{"a", "x=y"}},  {{"a", ""}},           {{"a", "null"}},
      {{"a", nullptr}}, {{"a", 1.0}},    {{"a", {{"k", "v"}}}}, {{"a", "{\"k\":\"v\"}"}}};
  std::map<std::string, json> seen;
  for (const json& o : options) {
    const std::string id = load_one(dir, {{"engine", engine_with({{"options", o}})}});
    ASSERT_EQ(id.find("ERROR"), std::string::npos) << id;
    EXPECT_FALSE(seen.count(id)) << o.dump() << " and " << seen[id].dump() << " share id " << id;
    seen[id] = o;
  }
  // Plain words stay bare, as ids always read.
  EXPECT_EQ(load_one(dir, {{"engine", engine_with({{"options", {{"attn", "sdpa"}, {"t", 2}}}})}}),
            "model=tiny,engine=x(attn=sdpa,t=2)");
}

TEST(EngineSection, LongOptionsAppearInTheIdAsAStableHash) {
  const auto dir = fresh_dir("rules-long");
  const json big = {{"prompt_template", std::string(300 * 1024, 'x')}};
  json other = big;
  other["prompt_template"] = std::string(300 * 1024, 'y');
  const std::string a = load_one(dir, {{"engine", engine_with({{"options", big}})}});
  const std::string a_again = load_one(dir, {{"engine", engine_with({{"options", big}})}});
  const std::string b = load_one(dir, {{"engine", engine_with({{"options", other}})}});
  EXPECT_LT(a.size(), 100u) << a.substr(0, 300);
  EXPECT_EQ(a.rfind("model=tiny,engine=x(options#", 0), 0u) << a.substr(0, 300);
  EXPECT_EQ(a, a_again);
  EXPECT_NE(a, b);
  // The resolved scenario (and so the report) keeps them whole.
  std::ofstream(dir / "s.json") << json{{"engine", engine_with({{"options", big}})}}.dump();
  const auto set = load_scenarios((dir / "s.json").string());
  EXPECT_EQ(set.scenarios.at(0).to_json()["engine"]["options"], big);
}

json nested(int depth) {
  // {"fault": "", "deep": [[...[0]...]]}: the options object is level 1, `deep` adds depth - 1.
  json v = 0;
  for (int i = 0; i < depth - 1; ++i) v = json::array({v});
  return {{"fault", ""}, {"deep", v}};
}

TEST(EngineSection, OptionsAtTheDeepestAcceptedLevelMakeAReportGateAndMatrixRead) {
  const auto dir = fresh_dir("rules-deep");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  // One level more is refused when the file is read, naming the bound.
  const std::string refused =
      load_one(dir, {{"engine", engine_with({{"options", nested(kMaxOptionsDepth + 1)}})}});
  EXPECT_NE(refused.find("/engine/options: the options nest " +
                         std::to_string(kMaxOptionsDepth + 1) + " levels deep"),
            std::string::npos)
      << refused;
  std::ofstream(dir / "s.json") << json{
      {"engine", engine_with({{"options", nested(kMaxOptionsDepth)}})},
      {"plan",
       {{"prompts", {{"count", 2}}},
        {"max_tokens", 2}}}}.dump();
  const auto run = run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ofstream(dir / "expect.json") << R"({"schema": "bih.expectations/1", "expectations": []})";
  const auto gate =
      run_bih({"gate", "--expect", (dir / "expect.json").string(), (dir / "out").string()});
  EXPECT_EQ(gate.exit_code, 0) << gate.output;
  const auto matrix =
      run_bih({"matrix", (dir / "out").string(), "--out", (dir / "matrix").string()});
  EXPECT_EQ(matrix.exit_code, 0) << matrix.output;
}

TEST(Protocol, StepStatsOfTheWrongTypeOrSignAreProtocolErrors) {
  const json seqs = json::array({{{"tokens", {1, 2}}, {"values", {"0x3f800000", 0.5}}}});
  const auto result_with = [&](const json& stats) {
    return json{{"type", "result"}, {"id", 4}, {"sequences", seqs}, {"stats", stats}};
  };
  const std::vector<std::pair<json, std::string>> bad{
      {{{"steps", "six"}}, "\"stats\".\"steps\" is '\"six\"'; valid: an integer >= 0"},
      {{{"rows", -1}}, "\"stats\".\"rows\" is '-1'; valid: an integer >= 0"},
      {{{"steps", 1.5}}, "\"stats\".\"steps\""},
      {"fast", "\"stats\" is '\"fast\"'; valid: an object"}};
  for (const auto& [stats, message] : bad) {
    GenerateStats got;
    try {
      protocol::parse_result(result_with(stats), 4, 1, 2, 100, &got);
      ADD_FAILURE() << stats.dump() << " was accepted as steps " << got.steps;
    } catch (const protocol::ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  GenerateStats got;
  protocol::parse_result(result_with({{"steps", 6}, {"rows", 12}}), 4, 1, 2, 100, &got);
  EXPECT_EQ(got.steps, 6);
  EXPECT_EQ(got.rows, 12);
}

TEST(Protocol, HelloFieldsOfTheWrongTypeAreProtocolErrors) {
  const json good = {{"type", "hello"},
                     {"protocol", "bih.engine/1"},
                     {"engine", {{"name", "e"}, {"version", ""}}}};
  const protocol::Hello h = protocol::parse_hello(good);  // value and settings are optional
  EXPECT_EQ(h.value, "logprob");
  EXPECT_EQ(h.settings, json::object());
  for (const char* key : {"adapter", "capabilities", "settings"}) {
    json bad = good;
    bad[key] = "x";
    EXPECT_THROW(protocol::parse_hello(bad), protocol::ProtocolError) << key;
  }
  json no_version = good;
  no_version["engine"].erase("version");
  EXPECT_THROW(protocol::parse_hello(no_version), protocol::ProtocolError);
}

TEST(Protocol, Float32ConfigValuesGoOutAsConfigJsonWritesThem) {
  ModelConfig c;
  c.rms_norm_eps = 1e-6f;
  const json init = protocol::init_message({"hf", "/m", "preset:tiny(seed=0)", c}, json::object(),
                                           json::object(), {1, 64, 2});
  // Before: 9.99999997e-07 (1e-6f widened); config.json says 1e-06.
  EXPECT_EQ(init["model"]["config"]["rms_norm_eps"].get<double>(), 1e-06);
  EXPECT_EQ(init["model"]["config"]["rms_norm_eps"].dump(), "1e-06");
  // And it always reads back as the same float32, bit for bit.
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (!std::isfinite(f)) continue;
    const float back = static_cast<float>(protocol::widened_float(f));
    ASSERT_EQ(std::bit_cast<uint32_t>(back), std::bit_cast<uint32_t>(f)) << f;
  }
}

TEST(CommandEngineErrors, AFailedRequestIsNamedByItsGeneration) {
  const auto dir = fresh_dir("rules-generation");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  std::ofstream(dir / "s.json") << json{
      {"engine", engine_with({{"options", {{"fault", "error_reply"}}}})},
      {"plan", {{"prompts", {{"count", 3}}}, {"max_tokens", 2}}},
      {"expect", "error"}}.dump();
  const auto r = run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const json report = read_json_file(report_files(dir / "out").at(0).string());
  const std::string reason = report["reason"];
  EXPECT_NE(reason.find("generation bs=1 (batch of prompts 0..0 of 3): engine x"),
            std::string::npos)
      << reason;
}

}  // namespace
}  // namespace bih::test_protocol_rules
