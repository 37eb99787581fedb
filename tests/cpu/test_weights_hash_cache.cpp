// test_weights_hash_cache.cpp: a run hashes each synthetic model once (harness/weights_hash_cache):
// the first scenario computes, the others read its answer; the answer is per model, and nothing
// of it is left once the run is over.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/json_file.hpp"
#include "harness/weights_hash_cache.hpp"
#include "models/config.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"

namespace bih::test_weights_hash_cache {
namespace {

namespace fs = std::filesystem;

TEST(WeightsHashCache, ComputesOncePerKeyAndAnswersFromTheFileAfter) {
  const auto dir = testing::fresh_dir("hash-cache-once");
  const std::string file = weights_hash_cache_file(dir.string());
  int computed = 0;
  const auto compute = [&](const std::string& value) {
    return [&computed, value] {
      ++computed;
      return value;
    };
  };
  EXPECT_EQ(cached_weights_hash(file, "a", compute("hash-a")), "hash-a");
  EXPECT_EQ(cached_weights_hash(file, "a", compute("other")), "hash-a");
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(cached_weights_hash(file, "b", compute("hash-b")), "hash-b");
  EXPECT_EQ(computed, 2);
  const nlohmann::json recorded = read_json_file(file);
  EXPECT_EQ(recorded, (nlohmann::json{{"a", "hash-a"}, {"b", "hash-b"}}));
}

TEST(WeightsHashCache, AMalformedFileIsComputedAgainAndAnEmptyAnswerIsNotKept) {
  const auto dir = testing::fresh_dir("hash-cache-malformed");
  const std::string file = weights_hash_cache_file(dir.string());
  std::ofstream(file) << "{\"a\": ";
  int computed = 0;
  EXPECT_EQ(cached_weights_hash(file, "a",
                                [&] {
                                  ++computed;
                                  return std::string("hash-a");
                                }),
            "hash-a");
  EXPECT_EQ(computed, 1);
  EXPECT_EQ(read_json_file(file), (nlohmann::json{{"a", "hash-a"}}));
  // An engine that cannot say (a running server's model) answers "": asked again next time.
  EXPECT_EQ(cached_weights_hash(file, "b", [] { return std::string(); }), "");
  EXPECT_FALSE(read_json_file(file).contains("b"));
}

TEST(WeightsHashCache, KeysNameTheEngineAndTheModel) {
  const nlohmann::json seed0 = {{"preset", "tiny"}, {"seed", 0}};
  const nlohmann::json seed1 = {{"preset", "tiny"}, {"seed", 1}};
  EXPECT_EQ(weights_hash_key("bih", seed0), weights_hash_key("bih", seed0));
  EXPECT_NE(weights_hash_key("bih", seed0), weights_hash_key("bih", seed1));
  EXPECT_NE(weights_hash_key("bih", seed0), weights_hash_key("command", seed0));
}

// Four scenarios of one run, two per seed: each report carries its own model's hash, as computed
// directly, and the run leaves no work folder (nor the cache in it) behind.
TEST(WeightsHashCache, EachScenarioOfARunReportsItsOwnModelsHash) {
  const auto dir = testing::fresh_dir("hash-cache-run");
  std::ofstream(dir / "m.json") << R"({"base": {"model": {"preset": "tiny"},
    "plan": {"prompts": {"count": 2, "min_len": 8, "max_len": 10}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 1}},
    "axes": {"model.seed": [0, 1], "parallel.tp": [1, 2]}})";
  const auto r =
      testing::run_bih({"run", (dir / "m.json").string(), "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto config = preset_config("tiny");
  ASSERT_TRUE(config.has_value());
  const std::string hash0 = weights_hash(synthetic_weights(*config, 0));
  const std::string hash1 = weights_hash(synthetic_weights(*config, 1));
  ASSERT_NE(hash0, hash1);
  int reports = 0;
  for (const fs::path& f : testing::report_files(dir / "out")) {
    const nlohmann::json report = read_json_file(f.string());
    const int seed = report.at("scenario").at("model").at("seed").get<int>();
    EXPECT_EQ(report.at("model").at("weights_hash"), seed == 0 ? hash0 : hash1) << f;
    ++reports;
  }
  EXPECT_EQ(reports, 4) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out" / "work")) << r.output;
}

}  // namespace
}  // namespace bih::test_weights_hash_cache
