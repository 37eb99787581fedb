// test_bih_adapter.cpp: the command path is exact. bih's own engine run in process (engine.kind
// bih) and the same engine behind the engine protocol (`bih adapter`, engine.kind command, the
// preset handed over as an exported HF folder) give bitwise the same generations, on a scenario
// whose batch and bs=1 runs really differ (vendor kernels), so equality is not trivial.
#include <gtest/gtest.h>

#include <fstream>

#include "base/json_file.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "run_bih.hpp"

namespace bih::test_bih_adapter {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path work_of(const fs::path& out) {
  const auto reports = testing::report_files(out);
  EXPECT_EQ(reports.size(), 1u);
  return out / "work" / reports.at(0).stem();
}

Generation generation(const fs::path& work, const std::string& label_file) {
  const std::string path = (work / label_file).string();
  return generation_from_json(read_json_file(path), path);
}

TEST(BihAdapter, TheProtocolPathGivesTheInProcessEnginesBits) {
  const auto dir = testing::fresh_dir("bih-adapter");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json knobs = {
      {"kernels", "vendor"},
      {"parallel", {{"tp", 2}}},
      {"sequence_parallel", {{"enabled", true}, {"min_tokens", 4}}},
      {"plan",
       {{"prompts", {{"count", 6}, {"seed", 3}}}, {"max_tokens", 5}, {"batch_sizes", {1, 6}}}}};
  json in_process = knobs;
  json adapter = knobs;
  adapter["engine"] = {{"kind", "command"},
                       {"name", "bih-adapter"},
                       {"command", {BIH_BINARY, "adapter"}},
                       {"model_format", "hf"}};
  std::ofstream(dir / "a.json") << in_process.dump();
  std::ofstream(dir / "b.json") << adapter.dump();
  const auto ra = testing::run_bih(
      {"run", (dir / "a.json").string(), "--out", (dir / "a").string(), "--keep-work"});
  const auto rb = testing::run_bih(
      {"run", (dir / "b.json").string(), "--out", (dir / "b").string(), "--keep-work"});
  ASSERT_NE(ra.output.find("batch_variant"), std::string::npos) << ra.output;
  ASSERT_NE(rb.output.find("batch_variant"), std::string::npos) << rb.output;

  const fs::path wa = work_of(dir / "a"), wb = work_of(dir / "b");
  for (const std::string file : {"gen-bs_1.json", "gen-bs_6.json", "gen-bs_6_2.json"}) {
    const Comparison c = compare(generation(wa, file), generation(wb, file), "batch", 4);
    EXPECT_TRUE(c.identical()) << file << ": " << summarize(c);
    EXPECT_EQ(c.tokens_compared, 6 * 5);
  }
  const json report = read_json_file(testing::report_files(dir / "b").at(0).string());
  EXPECT_EQ(report["id"], "tp=2,sp=on(min=4),kernels=vendor,model=tiny,engine=bih-adapter");
  EXPECT_EQ(report["engine"]["name"], "bih");
  EXPECT_EQ(report["engine"]["settings"]["kernels"], "vendor");
  EXPECT_EQ(report["engine"]["settings"]["parallel"]["tp"], 2);
}

}  // namespace
}  // namespace bih::test_bih_adapter
