// test_llama_server.cpp: the real llama.cpp server under bih's test, end to end. bih launches
// llama-server (built from the llama.cpp source node-llama-cpp ships: ci/test.sh runs
// adapters/llama-cpp/build-server.sh and exports BIH_LLAMA_SERVER) from the shipped profile on the
// tiny model's GGUF export, in each batching mode and each dialect. With one slot (-np 1) the
// server runs a batch's sequences one after another, so every scenario is invariant
// (docs/llama-server-notes.md measured it); and the two dialects, read by two different parsers,
// must give bitwise the same tokens and values on the same server configuration.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "base/json_file.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "run_bih.hpp"

namespace bih::test_llama_server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#ifdef BIH_HAVE_HTTP

// The built server, or why the test cannot run; in CI a missing server is a failure, not a skip.
std::string llama_server_or_skip_reason(bool* fail) {
  const char* server = std::getenv("BIH_LLAMA_SERVER");
  if (server != nullptr && *server != '\0' && fs::exists(server)) return "";
  const char* ci = std::getenv("CI");
  *fail = ci != nullptr && std::string(ci) == "true";
  return "BIH_LLAMA_SERVER does not name a built llama-server (run "
         "`export BIH_LLAMA_SERVER=$(bash adapters/llama-cpp/build-server.sh | tail -n1)`)";
}

TEST(LlamaServer, EachBatchingAndDialectOnOneSlotIsInvariantAndTheDialectsAgreeBitwise) {
  bool fail = false;
  if (const std::string why = llama_server_or_skip_reason(&fail); !why.empty()) {
    if (fail) FAIL() << why;
    GTEST_SKIP() << why;
  }
  const auto dir = testing::fresh_dir("llama-server");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json matrix = {
      {"name", "llama-server in CI"},
      {"base",
       {{"model", {{"preset", "tiny"}, {"seed", 0}}},
        {"engine",
         {{"kind", "http"},
          {"profile", "llama-server"},
          {"options",
           {{"threads", 1}, {"ctx_size", 1024}, {"parallel", 1}, {"cache_prompt", false}}}}},
        {"plan",
         {{"prompts", {{"count", 4}, {"min_len", 8}, {"max_len", 16}, {"seed", 1}}},
          {"max_tokens", 4},
          {"batch_sizes", {1, 4}},
          {"repeats", 1},
          {"fresh_process", false}}},
        {"expect", "invariant"},
        {"timeout_s", 120}}},
      {"axes",
       {{"engine.batching", {"request", "concurrent"}},
        {"engine.dialect", {"openai", "llama.cpp"}}}}};
  std::ofstream(dir / "m.json") << matrix.dump(2);
  const auto r = testing::run_bih(
      {"run", (dir / "m.json").string(), "--out", (dir / "out").string(), "--keep-work"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::map<std::string, fs::path> work;  // id -> work folder
  for (const fs::path& file : testing::report_files(dir / "out")) {
    const json report = read_json_file(file.string());
    EXPECT_EQ(report["verdict"], "invariant") << report["id"] << "\n" << r.output;
    EXPECT_EQ(report["engine"]["kind"], "http");
    work[report["id"].get<std::string>()] = dir / "out" / "work" / file.stem();
  }
  ASSERT_EQ(work.size(), 4u) << r.output;
  auto gen = [&](const std::string& id, const std::string& file) {
    const auto it = work.find(id);
    EXPECT_NE(it, work.end()) << id;
    const std::string path = (it->second / file).string();
    return generation_from_json(read_json_file(path), path);
  };
  for (const std::string batching : {"request", "concurrent"}) {
    std::string openai, llama;
    for (const auto& [id, folder] : work) {
      if (id.find("batching=" + batching) == std::string::npos) continue;
      (id.find("dialect=openai") != std::string::npos ? openai : llama) = id;
    }
    ASSERT_FALSE(openai.empty() || llama.empty()) << batching;
    for (const std::string file : {"gen-bs_1.json", "gen-bs_4.json"}) {
      const Comparison c = compare(gen(openai, file), gen(llama, file), "batch", 4);
      EXPECT_TRUE(c.identical()) << batching << " " << file << ": " << summarize(c);
      EXPECT_EQ(c.tokens_compared, 4 * 4);
    }
  }
}

#endif

}  // namespace
}  // namespace bih::test_llama_server
