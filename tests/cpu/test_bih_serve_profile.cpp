// test_bih_serve_profile.cpp: the HTTP path is exact end to end. bih's engine in process
// (engine.kind bih) and the same engine behind `bih serve`, launched by bih from the shipped
// profile (engine.kind http, profile bih, dialect openai), give bitwise the same generations: on
// vendor kernels, whose batch and bs=1 runs really differ, in `request` mode (one request carries
// the batch, so the server's schedule is the in-process one); and on invariant kernels under
// `concurrent` load, where the requests reach the server one by one and still decode as alone.
#include <gtest/gtest.h>

#include <fstream>

#include "base/json_file.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "run_bih.hpp"

namespace bih::test_bih_serve_profile {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#ifdef BIH_HAVE_HTTP

fs::path work_of(const fs::path& out) {
  const auto reports = testing::report_files(out);
  EXPECT_EQ(reports.size(), 1u);
  return out / "work" / reports.at(0).stem();
}

Generation generation(const fs::path& work, const std::string& label_file) {
  const std::string path = (work / label_file).string();
  return generation_from_json(read_json_file(path), path);
}

json report_of(const fs::path& out) {
  return read_json_file(testing::report_files(out).at(0).string());
}

// Runs `knobs` in process and through `bih serve` with `batching`; returns both out folders.
std::pair<fs::path, fs::path> run_both(const fs::path& dir, const json& knobs,
                                       const std::string& batching) {
  json served = knobs;
  served["engine"] = {{"kind", "http"}, {"profile", "bih"}, {"batching", batching}};
  std::ofstream(dir / "in-process.json") << knobs.dump();
  std::ofstream(dir / "served.json") << served.dump();
  const auto a = testing::run_bih(
      {"run", (dir / "in-process.json").string(), "--out", (dir / "a").string(), "--keep-work"});
  const auto b = testing::run_bih(
      {"run", (dir / "served.json").string(), "--out", (dir / "b").string(), "--keep-work"});
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(b.exit_code, 0) << b.output;
  return {dir / "a", dir / "b"};
}

TEST(BihServeProfile, OneRequestPerBatchGivesTheInProcessEnginesBits) {
  const auto dir = testing::fresh_dir("serve-profile-request");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json knobs = {
      {"kernels", "vendor"},
      {"parallel", {{"tp", 2}}},
      {"sequence_parallel", {{"enabled", true}, {"min_tokens", 4}}},
      {"expect", "batch_variant"},
      {"plan",
       {{"prompts", {{"count", 6}, {"seed", 3}}}, {"max_tokens", 5}, {"batch_sizes", {1, 6}}}}};
  const auto [a, b] = run_both(dir, knobs, "request");
  const fs::path wa = work_of(a), wb = work_of(b);
  for (const std::string file : {"gen-bs_1.json", "gen-bs_6.json", "gen-bs_6_2.json"}) {
    const Comparison c = compare(generation(wa, file), generation(wb, file), "batch", 4);
    EXPECT_TRUE(c.identical()) << file << ": " << summarize(c);
    EXPECT_EQ(c.tokens_compared, 6 * 5);
  }
  const json report = report_of(b);
  EXPECT_EQ(report["verdict"], "batch_variant");
  EXPECT_EQ(report["id"],
            "tp=2,sp=on(min=4),kernels=vendor,model=tiny,engine=bih,dialect=openai,"
            "batching=request");
  EXPECT_EQ(report["engine"]["kind"], "http");
}

TEST(BihServeProfile, ConcurrentRequestsOnInvariantKernelsDecodeAsAlone) {
  const auto dir = testing::fresh_dir("serve-profile-concurrent");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json knobs = {
      {"kernels", "invariant"},
      {"parallel", {{"tp", 2}}},
      {"expect", "invariant"},
      {"plan",
       {{"prompts", {{"count", 8}, {"seed", 5}}}, {"max_tokens", 5}, {"batch_sizes", {1, 8}}}}};
  const auto [a, b] = run_both(dir, knobs, "concurrent");
  const fs::path wa = work_of(a), wb = work_of(b);
  // The served bs=1 pass equals the in-process one, and (the verdict) the concurrent batch too.
  const Comparison alone =
      compare(generation(wa, "gen-bs_1.json"), generation(wb, "gen-bs_1.json"), "batch", 4);
  EXPECT_TRUE(alone.identical()) << summarize(alone);
  const Comparison batch =
      compare(generation(wa, "gen-bs_1.json"), generation(wb, "gen-bs_8.json"), "batch", 4);
  EXPECT_TRUE(batch.identical()) << summarize(batch);
  const json report = report_of(b);
  EXPECT_EQ(report["verdict"], "invariant");
  bool saw_concurrency = false;
  for (const json& g : report["generations"]) {
    if (g.value("batch_size", 0) == 8) {
      ASSERT_TRUE(g.contains("requests_in_flight")) << g.dump();
      saw_concurrency |= g["requests_in_flight"].get<int>() > 1;
    }
  }
  EXPECT_TRUE(saw_concurrency) << "the batch's requests were never in flight together";
}

#else

TEST(BihServeProfile, ABuildWithoutHttpSaysWhatToInstall) {
  const auto dir = testing::fresh_dir("serve-profile-nohttp");
  std::ofstream(dir / "s.json") << R"({"engine": {"kind": "http", "profile": "bih"}})";
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "o").string()});
  EXPECT_NE(r.output.find("libcpp-httplib-dev"), std::string::npos) << r.output;
}

#endif

}  // namespace
}  // namespace bih::test_bih_serve_profile
