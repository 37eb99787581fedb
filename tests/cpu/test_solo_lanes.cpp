// plan.solo_lanes: the bs=1 generation spread over several engines in one worker gives the bits
// one engine gives, each prompt's result in its own slot, and the report says how it ran; only
// bih's own engine with emulated ranks runs more than one lane.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engines/engine.hpp"
#include "harness/generation.hpp"
#include "harness/solo_lanes.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_solo_lanes {
namespace {

using testing::write_text;

// 7 prompts over 3 lanes: lanes of 3, 2 and 2 prompts, TP=2 so that every lane has its own group
// of rank threads; top-k and row digests so that a lane's engine must be set up as the worker's.
std::string scenario_with_lanes(int lanes) {
  return R"({"model": {"preset": "tiny"}, "parallel": {"tp": 2},
    "plan": {"prompts": {"count": 7, "min_len": 4, "max_len": 20}, "max_tokens": 5,
             "batch_sizes": [1, 7], "repeats": 2, "solo_lanes": )" +
         std::to_string(lanes) + R"(}, "compare": {"top_k": 2, "row_digest": true}})";
}

struct LanesRun {
  testing::BihResult run;
  nlohmann::json report;
  Generation solo;  // the bs=1 dump
};

LanesRun run_with_lanes(const std::filesystem::path& dir, int lanes) {
  write_text(dir / "s.json", scenario_with_lanes(lanes));
  LanesRun out;
  out.run = testing::run_bih(
      {"run", (dir / "s.json").string(), "--out", (dir / "out").string(), "--keep-work"});
  const auto reports = testing::report_files(dir / "out");
  if (reports.size() == 1) out.report = read_json_file(reports[0].string());
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir / "out")) {
    if (entry.path().filename() == "gen-bs_1.json") {
      out.solo = generation_from_json(read_json_file(entry.path().string()), entry.path().string());
    }
  }
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// An engine that records when it is made, used and shut down (run_solo_lanes' phases).
class RecordingEngine : public TestedEngine {
 public:
  RecordingEngine(int lane, std::function<void(std::string)> log)
      : lane_(lane), log_(std::move(log)) {}
  const EngineIdentity& identity() const override { return identity_; }
  EngineCapabilities capabilities() const override { return {}; }
  int vocab_size() const override { return 16; }
  std::string model_hash() override { return "recording"; }
  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>&, int,
                                       GenerateStats*, const ProgressFn&) override {
    return {};
  }
  void shutdown() override { log_("shutdown " + std::to_string(lane_)); }
  int lane() const { return lane_; }

 private:
  int lane_;
  std::function<void(std::string)> log_;
  EngineIdentity identity_{"bih", "recording", "1"};
};

struct LaneLog {
  std::mutex mutex;
  std::vector<std::string> events;
  void add(std::string event) {
    const std::lock_guard lock(mutex);
    events.push_back(std::move(event));
  }
  // Index of the first and last event starting with `prefix` (-1 when none).
  std::pair<int, int> span(const std::string& prefix) const {
    int first = -1, last = -1;
    for (int i = 0; i < static_cast<int>(events.size()); ++i) {
      if (events[i].rfind(prefix, 0) != 0) continue;
      if (first < 0) first = i;
      last = i;
    }
    return {first, last};
  }
};

// On a GPU, making or shutting down an engine while another lane captures a CUDA graph
// invalidates that capture (docs/solo-lanes.md), so no engine may be made while any lane runs a
// request, nor shut down before the last request is done. The make and the requests take a
// while, so overlapping phases would interleave in the log.
TEST(SoloLanes, EnginesAreMadeBeforeAnyRequestRunsAndShutDownAfterTheLast) {
  LaneLog log;
  const auto add = [&](std::string e) { log.add(std::move(e)); };
  RecordingEngine own(0, add);
  std::atomic<int> next_lane{1};
  GenerateStats stats;
  std::vector<int> ran(9, 0);
  run_solo_lanes(
      own,
      [&] {
        const int lane = next_lane++;
        std::this_thread::sleep_for(std::chrono::milliseconds(30 * lane));
        add("make " + std::to_string(lane));
        return std::make_unique<RecordingEngine>(lane, add);
      },
      3, 9,
      [&](TestedEngine& e, int i, GenerateStats& into) {
        add("run " + std::to_string(i) + " on " +
            std::to_string(static_cast<RecordingEngine&>(e).lane()));
        ++ran[i];
        ++into.steps;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      [](int) {}, [&](const std::string& why) { add("not made: " + why); }, stats);
  const auto makes = log.span("make ");
  const auto runs = log.span("run ");
  const auto shutdowns = log.span("shutdown ");
  ASSERT_GE(makes.first, 0);
  ASSERT_GE(runs.first, 0);
  EXPECT_LT(makes.second, runs.first) << "an engine was made while a request ran";
  EXPECT_GT(shutdowns.first, runs.second) << "an engine was shut down before the last request";
  EXPECT_EQ(log.span("shutdown 0").first, -1) << "the worker's own engine is the worker's to stop";
  EXPECT_EQ(std::count_if(log.events.begin(), log.events.end(),
                          [](const std::string& e) { return e.rfind("shutdown ", 0) == 0; }),
            2);
  EXPECT_EQ(ran, std::vector<int>(9, 1)) << "every request exactly once";
  EXPECT_EQ(stats.steps, 9);
  EXPECT_EQ(log.span("not made").first, -1);
}

// A lane that cannot make its engine (another process filled the GPU, as two matrix shards side by
// side did on an 80 GB H100: reports/gpu/decode-pipeline-2026-12-06) is left out: the lanes that
// have an engine run every request exactly once, the reason names the lane and how many lanes
// run, and the engines that were made are shut down once, after the last request.
TEST(SoloLanes, ALaneThatCannotMakeItsEngineLeavesItsRequestsToTheOthers) {
  LaneLog log;
  const auto add = [&](std::string e) { log.add(std::move(e)); };
  RecordingEngine own(0, add);
  std::atomic<int> next_lane{1};
  GenerateStats stats;
  std::vector<int> ran(9, 0);
  std::vector<std::string> reasons;
  const int running = run_solo_lanes(
      own,
      [&]() -> std::unique_ptr<TestedEngine> {
        const int lane = next_lane++;
        if (lane == 2) throw std::runtime_error("out of device memory");
        return std::make_unique<RecordingEngine>(lane, add);
      },
      4, 9,
      [&](TestedEngine& e, int i, GenerateStats& into) {
        add("run " + std::to_string(i) + " on " +
            std::to_string(static_cast<RecordingEngine&>(e).lane()));
        ++ran[i];
        ++into.steps;
      },
      [](int) {}, [&](const std::string& why) { reasons.push_back(why); }, stats);
  EXPECT_EQ(running, 3);
  ASSERT_EQ(reasons.size(), 1u);
  // Which lane's thread asks second is up to the scheduler: some lane of 1..3 has no engine.
  EXPECT_NE(reasons[0].find(" of 4 could not make its engine: out of device memory"),
            std::string::npos)
      << reasons[0];
  EXPECT_NE(reasons[0].find("run on 3 lanes"), std::string::npos) << reasons[0];
  EXPECT_EQ(ran, std::vector<int>(9, 1)) << "every request exactly once";
  EXPECT_EQ(stats.steps, 9);
  std::vector<int> used;
  for (const std::string& e : log.events) {
    if (e.rfind("run ", 0) == 0) used.push_back(std::stoi(e.substr(e.rfind(' ') + 1)));
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  EXPECT_EQ(used.size(), 3u) << "three lanes ran requests";
  EXPECT_EQ(std::count_if(log.events.begin(), log.events.end(),
                          [](const std::string& e) { return e.rfind("shutdown ", 0) == 0; }),
            2)
      << "the two engines that were made are shut down once each";
  EXPECT_GT(log.span("shutdown ").first, log.span("run ").second);
}

// A request that fails stops every lane before its next request; the engines are shut down and
// the first failure is rethrown.
TEST(SoloLanes, ARequestThatFailsStopsEveryLaneAndIsRethrown) {
  LaneLog log;
  const auto add = [&](std::string e) { log.add(std::move(e)); };
  RecordingEngine own(0, add);
  std::atomic<int> next_lane{1};
  GenerateStats stats;
  std::string error;
  try {
    run_solo_lanes(
        own, [&] { return std::make_unique<RecordingEngine>(next_lane++, add); }, 3, 30,
        [&](TestedEngine&, int i, GenerateStats&) {
          add("run " + std::to_string(i));
          if (i == 4) throw std::runtime_error("request 4 broke");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        },
        [](int) {}, [](const std::string&) {}, stats);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_EQ(error, "request 4 broke");
  EXPECT_LT(std::count_if(log.events.begin(), log.events.end(),
                          [](const std::string& e) { return e.rfind("run ", 0) == 0; }),
            30)
      << "the lanes went on after the failure";
  EXPECT_EQ(std::count_if(log.events.begin(), log.events.end(),
                          [](const std::string& e) { return e.rfind("shutdown ", 0) == 0; }),
            2);
}

TEST(SoloLanes, GiveTheBitsOfOneEngineInEachPromptsOwnSlot) {
  const LanesRun one = run_with_lanes(testing::fresh_dir("lanes-1"), 1);
  const LanesRun three = run_with_lanes(testing::fresh_dir("lanes-3"), 3);
  ASSERT_EQ(one.run.exit_code, 0) << one.run.output;
  ASSERT_EQ(three.run.exit_code, 0) << three.run.output;
  EXPECT_EQ(three.report.at("verdict"), "invariant") << three.run.output;
  ASSERT_EQ(one.solo.sequences.size(), 7u);
  ASSERT_EQ(three.solo.sequences.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    const SequenceOutput& a = one.solo.sequences[i];
    const SequenceOutput& b = three.solo.sequences[i];
    EXPECT_EQ(a.prompt, b.prompt) << "prompt " << i << " is in another prompt's slot";
    EXPECT_EQ(a.tokens, b.tokens) << "prompt " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "prompt " << i;
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      EXPECT_TRUE(same_bits(a.logprobs[t], b.logprobs[t]))
          << "prompt " << i << " token " << t << ": " << a.logprobs[t] << " vs " << b.logprobs[t];
    }
    ASSERT_EQ(b.top_k_ids.size(), a.tokens.size()) << "prompt " << i << ": no top-k from its lane";
    EXPECT_EQ(a.top_k_ids, b.top_k_ids) << "prompt " << i;
    EXPECT_EQ(a.row_digests, b.row_digests) << "prompt " << i;
    for (size_t t = 0; t < a.top_k_values.size(); ++t) {
      for (size_t r = 0; r < a.top_k_values[t].size(); ++r) {
        EXPECT_TRUE(same_bits(a.top_k_values[t][r], b.top_k_values[t][r]))
            << "prompt " << i << " token " << t << " rank " << r;
      }
    }
  }
  // Every prompt ran alone, each step counted once: the lanes' steps add up to one engine's.
  EXPECT_EQ(three.solo.steps, one.solo.steps);
  EXPECT_EQ(three.solo.solo_lanes, 3);
  EXPECT_EQ(one.solo.solo_lanes, 1);
  // The report says how the generation ran; a scenario without lanes reads as it always did.
  const nlohmann::json& gen = three.report.at("generations").at(0);
  EXPECT_EQ(gen.at("label"), "bs=1");
  EXPECT_EQ(gen.at("solo_lanes"), 3) << gen.dump();
  EXPECT_EQ(three.report.at("scenario").at("plan").at("solo_lanes"), 3);
  EXPECT_FALSE(one.report.at("scenario").at("plan").contains("solo_lanes"));
  EXPECT_FALSE(one.report.at("generations").at(0).contains("solo_lanes"));
  // The batch generation is one engine's, lanes or not.
  EXPECT_FALSE(three.report.at("generations").at(1).contains("solo_lanes"));
  // The id does not change: lanes change the wall time, not what is compared.
  EXPECT_EQ(three.report.at("id"), one.report.at("id"));
}

TEST(SoloLanes, ADryRunSaysHowTheRequestsAloneWouldRun) {
  const auto dir = testing::fresh_dir("lanes-dry");
  write_text(dir / "s.json", scenario_with_lanes(3));
  const auto r = testing::run_bih({"run", (dir / "s.json").string(), "--dry-run"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bs=1: up to 3 engines at once"), std::string::npos) << r.output;
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "backend": "cuda",
      "parallel": {"tp": 2, "ranks": "nccl"}, "plan": {"solo_lanes": 4}})");
  const auto nccl = testing::run_bih({"run", (dir / "s.json").string(), "--dry-run"});
  EXPECT_NE(nccl.output.find("bs=1: one engine (plan.solo_lanes 4"), std::string::npos)
      << nccl.output;
  write_text(dir / "s.json", scenario_with_lanes(1));
  const auto one = testing::run_bih({"run", (dir / "s.json").string(), "--dry-run"});
  EXPECT_EQ(one.output.find("bs=1:"), std::string::npos) << one.output;
}

TEST(SoloLanes, OutOfRangeExitsTwoNamingTheField) {
  const auto dir = testing::fresh_dir("lanes-bad");
  for (const int lanes : {0, 17}) {
    write_text(dir / "s.json", scenario_with_lanes(lanes));
    const auto r =
        testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
    EXPECT_EQ(r.exit_code, 2) << lanes << ": " << r.output;
    EXPECT_NE(r.output.find("/plan/solo_lanes"), std::string::npos) << lanes << ": " << r.output;
    EXPECT_NE(r.output.find("1..16"), std::string::npos) << lanes << ": " << r.output;
    EXPECT_TRUE(!std::filesystem::exists(dir / "out") || testing::report_files(dir / "out").empty())
        << lanes << ": nothing half-written";
  }
}

Scenario only_scenario(const std::filesystem::path& dir, const std::string& text) {
  write_text(dir / "s.json", text);
  ScenarioSet set = load_scenarios((dir / "s.json").string(), {});
  EXPECT_EQ(set.scenarios.size(), 1u);
  return set.scenarios.at(0);
}

TEST(SoloLanes, OnlyBihsOwnEngineWithEmulatedRanksRunsMoreThanOne) {
  const auto dir = testing::fresh_dir("lanes-which");
  EXPECT_EQ(solo_lanes_for(only_scenario(dir, scenario_with_lanes(3)), 7), 3);
  EXPECT_EQ(solo_lanes_for(only_scenario(dir, scenario_with_lanes(16)), 7), 7)
      << "at most one lane per request";
  EXPECT_EQ(solo_lanes_for(only_scenario(dir, scenario_with_lanes(1)), 7), 1);
  // An NCCL rank owns its GPU's communicator; an adapter is one engine outside the worker.
  EXPECT_EQ(solo_lanes_for(only_scenario(dir, R"({"model": {"preset": "tiny"}, "backend": "cuda",
      "parallel": {"tp": 2, "ranks": "nccl"}, "plan": {"solo_lanes": 4}})"),
                           64),
            1);
  EXPECT_EQ(solo_lanes_for(only_scenario(dir, R"({"model": {"preset": "tiny"},
      "engine": {"kind": "command", "name": "x", "command": ["/bin/true"]},
      "plan": {"solo_lanes": 4}})"),
                           64),
            1);
}

}  // namespace
}  // namespace bih::test_solo_lanes
