// test_protocol_reset.cpp: reset_cache in bih.engine/1. The hello's capabilities.reset_cache is
// read and type-checked, the answer must be reset_done (an error reply or anything else is an
// error naming it), the messages follow the published schema, and a prefix-caching scenario runs
// for an adapter that can reset: `bih adapter` with prefix caching on gives bitwise the in-process
// engine's cold and warm generations, and the same rows through the model (a cold generation runs
// every prompt token, so the reset happened), while an adapter that does not announce it is still
// declined (unsupported), as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "base/json_file.hpp"
#include "engines/engine_protocol.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"

namespace bih::test_protocol_reset {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using protocol::ProtocolError;

json hello_with(const json& capabilities) {
  return {{"type", "hello"},
          {"protocol", protocol::kVersion},
          {"engine", {{"name", "x"}, {"version", "1"}}},
          {"capabilities", capabilities}};
}

std::string protocol_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "";
}

TEST(ProtocolReset, TheHelloSaysWhetherTheAdapterCanReset) {
  EXPECT_TRUE(protocol::parse_hello(hello_with({{"reset_cache", true}})).reset_cache);
  EXPECT_FALSE(protocol::parse_hello(hello_with({{"reset_cache", false}})).reset_cache);
  // Absent: an adapter written before reset_cache existed is never sent it.
  EXPECT_FALSE(protocol::parse_hello(hello_with({{"step_stats", true}})).reset_cache);
  json no_caps = hello_with({});
  no_caps.erase("capabilities");
  EXPECT_FALSE(protocol::parse_hello(no_caps).reset_cache);
  const std::string why = protocol_error_of([] {
    protocol::parse_hello(hello_with({{"reset_cache", "yes"}}));
  });
  EXPECT_NE(why.find("\"capabilities\".\"reset_cache\" is '\"yes\"'; valid: true or false"),
            std::string::npos)
      << why;
}

TEST(ProtocolReset, OnlyResetDoneAnswersAReset) {
  EXPECT_EQ(protocol::reset_cache_message(), json({{"type", "reset_cache"}}));
  EXPECT_EQ(protocol_error_of([] { protocol::parse_reset_done({{"type", "reset_done"}}); }), "");
  const std::string failed = protocol_error_of([] {
    protocol::parse_reset_done({{"type", "error"}, {"message", "the cache is locked"}});
  });
  EXPECT_EQ(failed, "could not empty its cache: 'the cache is locked'");
  const std::string other = protocol_error_of([] {
    protocol::parse_reset_done({{"type", "result"}, {"id", 1}, {"sequences", json::array()}});
  });
  EXPECT_NE(other.find("answered reset_cache with a 'result' message, not reset_done"),
            std::string::npos)
      << other;
}

TEST(ProtocolReset, TheMessagesFollowTheSchema) {
  const testing::SchemaChecker schema(std::string(BIH_SOURCE_DIR) +
                                      "/docs/engine-protocol.schema.json");
  EXPECT_EQ(schema.errors(protocol::reset_cache_message()), "");
  EXPECT_EQ(schema.errors(json{{"type", "reset_done"}}), "");
  EXPECT_EQ(schema.errors(hello_with({{"reset_cache", true}, {"step_stats", true}})), "");
  EXPECT_NE(schema.errors(hello_with({{"reset_cache", 1}})), "");
}

std::string meta_labels(const std::map<std::string, int64_t>& rows) {
  std::string out;
  for (const auto& [label, n] : rows) out += label + "=" + std::to_string(n) + " ";
  return out;
}

fs::path work_of(const fs::path& out) {
  const auto reports = testing::report_files(out);
  EXPECT_EQ(reports.size(), 1u);
  return out / "work" / reports.at(0).stem();
}

std::vector<std::string> generation_files(const fs::path& work) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(work)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("gen-", 0) == 0 && entry.path().extension() == ".json") files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ProtocolReset, BihAdapterWithPrefixCachingGivesTheInProcessBits) {
  const auto dir = testing::fresh_dir("protocol-reset");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  // Shared prefixes, so that warm generations really hit the cache.
  const json knobs = {{"prefix_caching", {{"enabled", true}}},
                      {"plan",
                       {{"prompts", {{"count", 4}, {"seed", 5}}},
                        {"max_tokens", 3},
                        {"batch_sizes", {1, 4}},
                        {"fresh_process", false}}}};
  json adapter = knobs;
  adapter["engine"] = {{"kind", "command"},
                       {"name", "bih-adapter"},
                       {"command", {BIH_BINARY, "adapter"}},
                       {"model_format", "hf"}};
  std::ofstream(dir / "a.json") << knobs.dump();
  std::ofstream(dir / "b.json") << adapter.dump();
  const auto ra = testing::run_bih(
      {"run", (dir / "a.json").string(), "--out", (dir / "a").string(), "--keep-work"});
  const auto rb = testing::run_bih(
      {"run", (dir / "b.json").string(), "--out", (dir / "b").string(), "--keep-work"});
  const json report = read_json_file(testing::report_files(dir / "b").at(0).string());
  ASSERT_NE(report["verdict"], "unsupported") << report.dump() << "\n" << rb.output;
  ASSERT_NE(report["verdict"], "error") << report.dump() << "\n" << rb.output;

  const fs::path wa = work_of(dir / "a"), wb = work_of(dir / "b");
  const std::vector<std::string> files = generation_files(wa);
  ASSERT_EQ(generation_files(wb), files) << ra.output << rb.output;
  bool warm = false;
  for (const std::string& file : files) {
    warm = warm || file.find("warm") != std::string::npos;
    const auto load = [&](const fs::path& work) {
      const std::string path = (work / file).string();
      return generation_from_json(read_json_file(path), path);
    };
    const Comparison c = compare(load(wa), load(wb), "batch", 4);
    EXPECT_TRUE(c.identical()) << file << ": " << summarize(c);
    EXPECT_EQ(c.tokens_compared, 4 * 3) << file;
  }
  EXPECT_TRUE(warm) << "no warm generation in the plan: the reset was not exercised";
  EXPECT_EQ(report["verdict"],
            read_json_file(testing::report_files(dir / "a").at(0).string())["verdict"]);

  // The bits of a hit and a miss can agree; the rows through the model cannot: a cold generation
  // whose cache was not emptied would reuse the previous one's prompts and run fewer rows.
  const auto rows = [](const fs::path& work) {
    std::map<std::string, int64_t> out;
    const json meta = read_json_file((work / "meta.json").string());  // kept: the loop reads it
    for (const json& g : meta["generations"]) out[g["label"]] = g["rows"];
    return out;
  };
  const auto in_process = rows(wa), adapted = rows(wb);
  EXPECT_EQ(adapted, in_process);
  ASSERT_TRUE(adapted.count("bs=4") && adapted.count("bs=4(warm)")) << meta_labels(adapted);
  EXPECT_LT(adapted.at("bs=4(warm)"), adapted.at("bs=4")) << "the warm generation hit nothing";
}

TEST(ProtocolReset, AnAdapterThatCannotResetIsStillDeclined) {
  const auto dir = testing::fresh_dir("protocol-reset-declined");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json scenario = {
      {"prefix_caching", {{"enabled", true}}},
      {"expect", "unsupported"},
      {"engine",
       {{"kind", "command"},
        {"name", "text"},
        {"command",
         {"python3", std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/text_adapter.py"}}}},
      {"plan", {{"prompts", {{"count", 2}}}, {"max_tokens", 2}, {"batch_sizes", {1, 2}}}}};
  std::ofstream(dir / "s.json") << scenario.dump();
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  const json report = read_json_file(testing::report_files(dir / "out").at(0).string());
  EXPECT_EQ(report["verdict"], "unsupported") << r.output;
  EXPECT_NE(report.value("reason", "").find("cannot empty its prefix cache"), std::string::npos)
      << report.dump();
}

}  // namespace
}  // namespace bih::test_protocol_reset
