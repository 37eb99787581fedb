// test_audit_harness.cpp: gaps a mutation audit found in harness/ (issue 20): the health check at
// the edges of [0, 1] for engines that report probabilities, and the gate's advice for a scenario
// missing from a sharded run (which shard's folder to pass, not "run it again").
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/gate.hpp"
#include "harness/generation.hpp"
#include "harness/health.hpp"

namespace bih::test_audit_harness {
namespace {

// Two prompts of distinct tokens whose values are `values` (the second prompt repeats them).
Generation generation_of(const std::vector<float>& values) {
  Generation g;
  g.label = "bs=2";
  g.batch_size = 2;
  for (int p = 0; p < 2; ++p) {
    SequenceOutput s;
    s.prompt = {1, 2};
    for (size_t t = 0; t < values.size(); ++t) s.tokens.push_back(static_cast<int32_t>(t + p));
    s.logprobs = values;
    g.sequences.push_back(s);
  }
  return g;
}

// 1.0 (a confident token) and 0.0 are probabilities; the floats just outside are not. Every value
// is checked on its own, so that one edge cannot hide behind another.
TEST(AuditHealth, ProbabilitiesAreHealthyOnTheClosedUnitIntervalOnly) {
  const float above_one = std::nextafter(1.0f, 2.0f);
  const float below_zero = std::nextafter(-0.0f, -1.0f);
  struct Case {
    float value;
    bool healthy;
  };
  const std::vector<Case> cases{
      {1.0f, true},  {0.0f, true},       {-0.0f, true},
      {0.5f, true},  {above_one, false}, {below_zero, false},
      {2.0f, false}, {-1.0f, false},     {std::numeric_limits<float>::infinity(), false}};
  for (const Case& c : cases) {
    const Generation g = generation_of({0.25f, c.value, 0.75f});
    const Health h = check_health({&g}, "probability");
    EXPECT_EQ(h.healthy(), c.healthy) << "probability " << c.value;
    if (!c.healthy && !h.problems.empty()) {
      EXPECT_NE(h.problems[0].find("first: prompt 0 step 1"), std::string::npos) << h.problems[0];
    }
  }
  // A logprob of 0.0 (probability 1) and large negative logprobs are healthy logprobs.
  const Generation logprobs = generation_of({0.0f, -0.0f, -87.5f});
  EXPECT_TRUE(check_health({&logprobs}, "logprob").healthy());
}

// A matrix of 6 scenarios in 3 shards: a manifest's all_ids is the whole selection, shard k runs
// the ids at k-1, k-1+3, ... (owning_shard's rule).
RunManifest shard_manifest(int index, const std::vector<std::string>& all) {
  RunManifest m;
  m.path = "out" + std::to_string(index) + "/manifest-" + std::to_string(index) + "-of-3.json";
  m.all_ids = all;
  m.shard_index = index;
  m.shard_count = 3;
  for (size_t i = index - 1; i < all.size(); i += 3) m.shard_ids.push_back(all[i]);
  return m;
}

// Shards 1/3 and 2/3 gathered, 3/3 not: its scenarios are missing because its folder was not
// passed, and the fix says so. A scenario that shard 1/3 ran without leaving a report is the one
// to run again with --resume.
TEST(AuditGate, MissingScenarioOfAShardNotGatheredNamesThatShardsFolder) {
  const std::vector<std::string> all{"a", "b", "c", "d", "e", "f"};
  ReportSet reports;
  reports.manifests = {shard_manifest(1, all), shard_manifest(2, all)};
  // Shard 3/3 owns c and f; shard 1/3 ran a and d but left no report for d.
  reports.missing_ids = {"c", "d", "f"};
  ExpectationsFile file;
  file.path = "ci/expectations.json";
  const GateResult result = decide_gate(file, reports);
  ASSERT_EQ(result.cases.size(), 3u);
  for (const GateCase& c : result.cases) {
    EXPECT_EQ(c.outcome, GateOutcome::missing) << c.id;
    EXPECT_TRUE(c.failure) << c.id;
    if (c.id == "d") {
      EXPECT_NE(c.fix.find("the run of shard 1/3 was asked to run it but left no report"),
                std::string::npos)
          << c.fix;
      EXPECT_NE(c.fix.find("--resume"), std::string::npos) << c.fix;
    } else {
      EXPECT_NE(c.fix.find("pass the report folder of shard 3/3"), std::string::npos)
          << c.id << ": " << c.fix;
      EXPECT_NE(c.fix.find("--shard 3/3"), std::string::npos) << c.id << ": " << c.fix;
      EXPECT_EQ(c.fix.find("--resume"), std::string::npos) << c.id << ": " << c.fix;
    }
  }
}

}  // namespace
}  // namespace bih::test_audit_harness
