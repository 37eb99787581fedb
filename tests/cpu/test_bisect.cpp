// bih bisect: ddmin on synthetic predicates (1-minimal, exact on monotone ones, unresolved
// subsets handled), the knob diff and the intermediate scenarios, the search's bookkeeping with a
// synthetic verdict function, and end to end: the issue's serving configuration is bisected to SP
// with a ring reduce_scatter, and neither CUDA graphs nor prefix caching are blamed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "harness/bisect.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"

namespace bih::test_bisect {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDataDir = std::string(BIH_SOURCE_DIR) + "/tests/data/bisect";

std::string fixture(const std::string& name) { return kDataDir + "/" + name; }

Scenario load_one(const std::string& path, const std::vector<std::string>& sets = {}) {
  ScenarioSet set = load_scenarios(path, sets);
  EXPECT_EQ(set.scenarios.size(), 1u) << path;
  return set.scenarios.at(0);
}

bool contains_all(const std::vector<size_t>& subset, const std::vector<size_t>& needed) {
  return std::includes(subset.begin(), subset.end(), needed.begin(), needed.end());
}

// Checks ddmin's contract on `test`: every asked subset is sorted, non-empty, proper and asked
// once; the result flips and is 1-minimal (dropping any one change does not flip).
std::vector<size_t> checked_ddmin(
    size_t count, const std::function<TrialOutcome(const std::vector<size_t>&)>& test,
    std::vector<std::vector<size_t>>* asked_out = nullptr) {
  std::set<std::vector<size_t>> asked;
  std::vector<std::vector<size_t>> order;
  const std::vector<size_t> result = ddmin(count, [&](const std::vector<size_t>& subset) {
    EXPECT_TRUE(std::is_sorted(subset.begin(), subset.end()));
    EXPECT_FALSE(subset.empty());
    EXPECT_LT(subset.size(), count);
    EXPECT_TRUE(asked.insert(subset).second) << "a subset was asked twice";
    order.push_back(subset);
    return test(subset);
  });
  EXPECT_TRUE(std::is_sorted(result.begin(), result.end()));
  if (result.size() < count) {
    EXPECT_EQ(test(result), TrialOutcome::flips);
  }
  for (size_t drop = 0; drop < result.size() && result.size() > 1; ++drop) {
    std::vector<size_t> fewer = result;
    fewer.erase(fewer.begin() + static_cast<long>(drop));
    EXPECT_NE(test(fewer), TrialOutcome::flips) << "not 1-minimal: drop " << result[drop];
  }
  if (asked_out) *asked_out = order;
  return result;
}

TEST(BisectDdmin, FindsTheOneChangeThatFlips) {
  const auto result = checked_ddmin(5, [](const std::vector<size_t>& s) {
    return contains_all(s, {1}) ? TrialOutcome::flips : TrialOutcome::holds;
  });
  EXPECT_EQ(result, (std::vector<size_t>{1}));
}

TEST(BisectDdmin, FindsTwoChangesThatOnlyFlipTogether) {
  // a and c of {a, b, c, d, e, f}: each alone holds, so the search must keep both.
  const auto result = checked_ddmin(6, [](const std::vector<size_t>& s) {
    return contains_all(s, {0, 2}) ? TrialOutcome::flips : TrialOutcome::holds;
  });
  EXPECT_EQ(result, (std::vector<size_t>{0, 2}));
}

TEST(BisectDdmin, UnresolvedSubsetsAreNeitherKeptNorDiscarded) {
  // Change 1 (say tp=2) is invalid without change 0 (the ring order that fits it). The flip
  // needs 3 alone; subsets with 1 but not 0 cannot be judged.
  const auto result = checked_ddmin(4, [](const std::vector<size_t>& s) {
    const bool has0 = contains_all(s, {0}), has1 = contains_all(s, {1});
    if (has1 && !has0) return TrialOutcome::unresolved;
    return contains_all(s, {3}) ? TrialOutcome::flips : TrialOutcome::holds;
  });
  EXPECT_EQ(result, (std::vector<size_t>{3}));

  // The flip needs 1, which needs 0: the answer is the pair, reached through unresolved subsets.
  const auto pair = checked_ddmin(4, [](const std::vector<size_t>& s) {
    const bool has0 = contains_all(s, {0}), has1 = contains_all(s, {1});
    if (has1 && !has0) return TrialOutcome::unresolved;
    return has1 ? TrialOutcome::flips : TrialOutcome::holds;
  });
  EXPECT_EQ(pair, (std::vector<size_t>{0, 1}));
}

TEST(BisectDdmin, EverythingUnresolvedKeepsTheFullSet) {
  std::vector<std::vector<size_t>> asked;
  const auto result = checked_ddmin(
      3, [](const std::vector<size_t>&) { return TrialOutcome::unresolved; }, &asked);
  EXPECT_EQ(result, (std::vector<size_t>{0, 1, 2}));
  EXPECT_FALSE(asked.empty());
}

TEST(BisectDdmin, ExactOnRandomMonotonePredicates) {
  // "Flips iff every change of a hidden target is present" has exactly one minimal answer: the
  // target. 300 random targets over up to 12 changes, from a fixed seed.
  std::mt19937 rng(12345);
  for (int round = 0; round < 300; ++round) {
    const size_t count = 1 + rng() % 12;
    std::vector<size_t> target;
    for (size_t i = 0; i < count; ++i) {
      if (rng() % 3 == 0) target.push_back(i);
    }
    if (target.empty()) target.push_back(rng() % count);
    const auto result = checked_ddmin(count, [&](const std::vector<size_t>& s) {
      return contains_all(s, target) ? TrialOutcome::flips : TrialOutcome::holds;
    });
    ASSERT_EQ(result, target) << "round " << round << ", " << count << " changes";
  }
}

TEST(BisectKnobs, FixturesDifferInFourKnobsInFileOrder) {
  const Scenario good = load_one(fixture("good.json"));
  const Scenario bad = load_one(fixture("bad.json"));
  const std::vector<KnobChange> changes = differing_knobs(good, bad);
  std::vector<std::string> keys;
  for (const auto& c : changes) keys.push_back(c.key);
  // "name" and "expect" differ too, but carry no knob.
  EXPECT_EQ(keys,
            (std::vector<std::string>{"sequence_parallel.enabled", "collectives.reduce_scatter",
                                      "cudagraph.mode", "prefix_caching.enabled"}));
  EXPECT_EQ(describe(changes.at(0)), "sequence_parallel.enabled (false -> true)");
  EXPECT_EQ(describe(changes.at(1)), "collectives.reduce_scatter (tree -> ring)");
}

TEST(BisectKnobs, ApplyingChangesBuildsGoodWithThoseKnobsOfBad) {
  const Scenario good = load_one(fixture("good.json"));
  const Scenario bad = load_one(fixture("bad.json"));
  const std::vector<KnobChange> changes = differing_knobs(good, bad);
  const Scenario mid = apply_changes(good, {changes.at(0), changes.at(3)}, "mid");
  Scenario expected = good;
  expected.sp_enabled = bad.sp_enabled;
  expected.prefix_caching = bad.prefix_caching;
  EXPECT_EQ(mid.id(), expected.id());
  json mid_json = mid.to_json(), expected_json = expected.to_json();
  mid_json.erase("expect"), mid_json.erase("name");
  expected_json.erase("expect"), expected_json.erase("name");
  EXPECT_EQ(mid_json, expected_json);
  EXPECT_EQ(mid.name, "mid");
  EXPECT_FALSE(mid.expect.has_value()) << "a trial checks no expectation";
  // All of them: BAD's knobs.
  EXPECT_EQ(apply_changes(good, changes, "all").id(), bad.id());
}

TEST(BisectKnobs, TpChangeTakesItsDefaultRingAndAMisfitRingIsInvalid) {
  const Scenario tp4 = load_one(fixture("good.json"));
  const Scenario tp2 = load_one(fixture("good.json"), {"parallel.tp=2"});
  // The identity ring follows tp, so it is no knob of its own.
  auto changes = differing_knobs(tp4, tp2);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "parallel.tp");
  EXPECT_EQ(apply_changes(tp4, changes, "x").tp, 2);

  // A custom ring at TP=4 does not fit TP=2: tp alone is an invalid combination.
  const Scenario custom = load_one(fixture("good.json"), {"parallel.ring_order=[3,2,1,0]"});
  changes = differing_knobs(custom, tp2);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "parallel.tp");
  EXPECT_EQ(changes[1].key, "parallel.ring_order");
  EXPECT_EQ(describe(changes[1]), "parallel.ring_order ([3,2,1,0] -> (absent))");
  EXPECT_THROW(apply_changes(custom, {changes[0]}, "x"), InputError);
  EXPECT_EQ(apply_changes(custom, changes, "x").id(), tp2.id());
}

TEST(BisectKnobs, NcclEnvEntriesAreKnobsOfTheirOwn) {
  const Scenario plain = load_one(fixture("good.json"));
  const Scenario pinned = load_one(
      fixture("good.json"), {"nccl_env.NCCL_ALGO=allreduce:tree", "nccl_env.NCCL_PROTO=Simple"});
  const auto changes = differing_knobs(plain, pinned);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(describe(changes[0]), "nccl_env.NCCL_ALGO ((absent) -> allreduce:tree)");
  EXPECT_EQ(changes[1].key, "nccl_env.NCCL_PROTO");
  const Scenario one = apply_changes(plain, {changes[1]}, "x");
  EXPECT_EQ(one.nccl_env, (std::map<std::string, std::string>{{"NCCL_PROTO", "Simple"}}));
}

// A stand-in for the engine with the issue's physics: at TP >= 3, SP with a ring reduce_scatter
// is batch variant; nothing else is. Counts the runs of each set of knobs.
struct SyntheticEngine {
  std::map<std::string, int> runs;  // id -> runs
  std::vector<bool> reuse_flags;
  std::function<Verdict(const Scenario&, int run)> verdict_of = [](const Scenario& s, int) {
    return s.tp >= 3 && s.sp_enabled && s.reduce_scatter == ReduceOrder::ring
               ? Verdict::batch_variant
               : Verdict::invariant;
  };
  TrialRunner runner() {
    return [this](const Scenario& s, bool allow_reuse) {
      reuse_flags.push_back(allow_reuse);
      const int run = ++runs[s.id()];
      TrialRun r;
      r.verdict = verdict_of(s, run);
      r.report_path = "/reports/" + s.id();
      return r;
    };
  }
};

TEST(BisectSearch, NamesSpAndRingReduceScatterAndRunsEachScenarioOnce) {
  SyntheticEngine engine;
  std::vector<std::string> lines;
  const BisectOutcome o =
      bisect(load_one(fixture("good.json")), load_one(fixture("bad.json")), engine.runner(),
             [&](const Trial& t) { lines.push_back(format_trial(t)); });
  EXPECT_EQ(o.result, BisectResult::culprit_found) << o.message;
  EXPECT_EQ(o.exit_code(), 0);
  std::vector<std::string> culprit;
  for (const auto& c : o.culprit) culprit.push_back(describe(c));
  EXPECT_EQ(culprit, (std::vector<std::string>{"sequence_parallel.enabled (false -> true)",
                                               "collectives.reduce_scatter (tree -> ring)"}));
  EXPECT_EQ(o.good_verdict, Verdict::invariant);
  EXPECT_EQ(o.bad_verdict, Verdict::batch_variant);
  EXPECT_EQ(o.minimal_verdict, Verdict::batch_variant);
  Scenario expected = load_one(fixture("good.json"));
  expected.sp_enabled = true;
  expected.reduce_scatter = ReduceOrder::ring;
  EXPECT_EQ(o.minimal_id, expected.id());

  // Every scenario ran once, but the minimal one, which is confirmed by one more run that may
  // not reuse a report.
  for (const auto& [id, n] : engine.runs) EXPECT_EQ(n, id == o.minimal_id ? 2 : 1) << id;
  ASSERT_FALSE(engine.reuse_flags.empty());
  EXPECT_FALSE(engine.reuse_flags.back());
  EXPECT_EQ(std::count(engine.reuse_flags.begin(), engine.reuse_flags.end(), false), 1);

  ASSERT_EQ(lines.size(), o.trials.size());
  EXPECT_EQ(lines.front(), "[trial 1] " + o.good_id + " -> invariant (good)");
  EXPECT_EQ(lines.at(1), "[trial 2] " + o.bad_id + " -> batch_variant (bad: all 4 changes)");
  EXPECT_EQ(o.trials.back().role, "confirm");
  const json summary = o.to_json();
  EXPECT_EQ(summary.at("schema"), "bih.bisect/1");
  EXPECT_EQ(summary.at("culprit").size(), 2u);
  EXPECT_EQ(summary.at("culprit").at(1).at("bad"), "ring");
  EXPECT_EQ(summary.at("trials").size(), o.trials.size());
}

TEST(BisectSearch, InvalidCombinationsAreUnresolvedTrials) {
  // GOOD: TP=4 with a custom ring; BAD: TP=2 (identity ring) with SP on. At TP=2 nothing is
  // variant in the synthetic engine, so make the flip the ring order itself.
  SyntheticEngine engine;
  engine.verdict_of = [](const Scenario& s, int) {
    return s.ring_order.empty() ? Verdict::invariant : Verdict::batch_variant;
  };
  const Scenario good = load_one(fixture("good.json"), {"parallel.ring_order=[3,2,1,0]"});
  const Scenario bad = load_one(fixture("good.json"), {"parallel.tp=2", "cudagraph.mode=full"});
  const BisectOutcome o = bisect(good, bad, engine.runner());
  ASSERT_EQ(o.result, BisectResult::culprit_found) << o.message;
  ASSERT_EQ(o.culprit.size(), 1u);
  EXPECT_EQ(o.culprit[0].key, "parallel.ring_order");
  const bool some_invalid = std::any_of(o.trials.begin(), o.trials.end(), [](const Trial& t) {
    return !t.verdict && t.outcome == TrialOutcome::unresolved &&
           t.reason.find("ring_order") != std::string::npos;
  });
  EXPECT_TRUE(some_invalid) << "tp=2 with a 4-rank ring must have been tried and found invalid";
}

TEST(BisectSearch, FlakyConfirmationIsInconsistent) {
  SyntheticEngine engine;
  const auto physics = engine.verdict_of;
  // The second run of any scenario disagrees with the first: nothing is reproducible.
  engine.verdict_of = [physics](const Scenario& s, int run) {
    return run == 1 ? physics(s, run) : Verdict::invariant;
  };
  const BisectOutcome o =
      bisect(load_one(fixture("good.json")), load_one(fixture("bad.json")), engine.runner());
  EXPECT_EQ(o.result, BisectResult::inconsistent);
  EXPECT_EQ(o.exit_code(), 1);
  EXPECT_NE(o.message.find("not reproducible"), std::string::npos) << o.message;
}

TEST(BisectSearch, AnErroredTrialThatTheDecisionNeedsLeavesItUndecided) {
  SyntheticEngine engine;
  const auto physics = engine.verdict_of;
  // SP on with a tree reduce_scatter crashes: whether SP alone flips cannot be known.
  engine.verdict_of = [physics](const Scenario& s, int run) {
    if (s.sp_enabled && s.reduce_scatter == ReduceOrder::tree) return Verdict::error;
    return physics(s, run);
  };
  const BisectOutcome o =
      bisect(load_one(fixture("good.json")),
             load_one(fixture("good.json"),
                      {"sequence_parallel.enabled=true", "collectives.reduce_scatter=ring"}),
             engine.runner());
  EXPECT_EQ(o.result, BisectResult::undecided);
  EXPECT_EQ(o.exit_code(), 3);
  EXPECT_NE(o.message.find("gave verdict error"), std::string::npos) << o.message;
}

TEST(BisectSearch, SameVerdictsOrSameKnobsAreInputErrors) {
  SyntheticEngine engine;
  const Scenario good = load_one(fixture("good.json"));
  try {
    bisect(good, load_one(fixture("good.json"), {"cudagraph.mode=full"}), engine.runner());
    ADD_FAILURE() << "equal verdicts must be refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("both give verdict invariant"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      bisect(good, load_one(fixture("good.json"), {"name=other", "expect=null"}), engine.runner()),
      InputError);
}

// End to end with real worker processes. The plan is small but still shows the flip (the test
// checks GOOD and BAD's verdicts rather than assuming them).
const std::vector<std::string> kSmallPlan{"--set", "plan.prompts.count=8",
                                          "--set", "plan.max_tokens=4",
                                          "--set", "plan.batch_sizes=[1,8]"};

std::vector<std::string> args_with(std::vector<std::string> args,
                                   const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string line_starting(const std::string& output, const std::string& prefix) {
  size_t at = output.rfind("\n" + prefix);
  at = at == std::string::npos ? (output.rfind(prefix, 0) == 0 ? 0 : std::string::npos) : at + 1;
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

TEST(BisectCli, IssueServingConfigIsBisectedToSpWithRingReduceScatter) {
  const fs::path dir = testing::fresh_dir("bisect-issue");
  const std::vector<std::string> base =
      args_with({"bisect", fixture("good.json"), fixture("bad.json"), "--out",
                 (dir / "out").string(), "--json", (dir / "summary.json").string()},
                kSmallPlan);
  const auto r = testing::run_bih(base);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("] tp=4,sp=off,ar=tree,rs=tree,graph=none,prefix=off"), std::string::npos)
      << r.output;
  EXPECT_NE(line_starting(r.output, "[trial 1] ").find("-> invariant (good)"), std::string::npos)
      << r.output;
  EXPECT_NE(line_starting(r.output, "[trial 2] ").find("-> batch_variant (bad: all 4 changes)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(line_starting(r.output, "culprit: "),
            "culprit: sequence_parallel.enabled (false -> true), collectives.reduce_scatter "
            "(tree -> ring)")
      << r.output;
  const std::string minimal = line_starting(r.output, "minimal flipping scenario: ");
  EXPECT_NE(minimal.find("sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off"), std::string::npos)
      << r.output;

  const json summary = read_json_file((dir / "summary.json").string());
  EXPECT_EQ(summary.at("result"), "culprit_found");
  std::set<std::string> culprit_keys;
  for (const auto& c : summary.at("culprit")) culprit_keys.insert(c.at("key"));
  EXPECT_EQ(culprit_keys,
            (std::set<std::string>{"sequence_parallel.enabled", "collectives.reduce_scatter"}));
  EXPECT_FALSE(culprit_keys.count("cudagraph.mode"));
  EXPECT_FALSE(culprit_keys.count("prefix_caching.enabled"));
  // Every trial that ran left its report, named by id.
  for (const auto& t : summary.at("trials")) {
    if (t.at("report").is_string()) {
      EXPECT_TRUE(fs::exists(t.at("report").get<std::string>())) << t.dump();
    }
  }
  EXPECT_GE(testing::report_files(dir / "out").size(), 3u);

  // Again into the same folder: every report is reused, only the confirmation runs.
  const auto again = testing::run_bih(base);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(line_starting(again.output, "culprit: "), line_starting(r.output, "culprit: "));
  const json again_summary = read_json_file((dir / "summary.json").string());
  for (const auto& t : again_summary.at("trials")) {
    if (!t.at("verdict").is_string()) continue;
    EXPECT_EQ(t.at("reused"), t.at("role") != "confirm") << t.dump();
  }
}

TEST(BisectCli, BadAsChangesToGood) {
  const fs::path dir = testing::fresh_dir("bisect-bad-set");
  const auto r = testing::run_bih(
      args_with({"bisect", fixture("good.json"), "--bad-set", "collectives.reduce_scatter=ring",
                 "--bad-set", "sequence_parallel.enabled=true", "--bad-set",
                 "prefix_caching.enabled=true", "--out", (dir / "out").string()},
                kSmallPlan));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(line_starting(r.output, "culprit: "),
            "culprit: sequence_parallel.enabled (false -> true), collectives.reduce_scatter "
            "(tree -> ring)")
      << r.output;
}

TEST(BisectCli, InputErrorsExitTwo) {
  const fs::path dir = testing::fresh_dir("bisect-errors");
  // Same verdict on both sides: graphs alone do not flip anything.
  const auto same =
      testing::run_bih(args_with({"bisect", fixture("good.json"), "--bad-set",
                                  "cudagraph.mode=full", "--out", (dir / "out").string()},
                                 kSmallPlan));
  EXPECT_EQ(same.exit_code, 2) << same.output;
  EXPECT_NE(same.output.find("both give verdict invariant"), std::string::npos) << same.output;

  // A matrix file holds several scenarios.
  const auto matrix = testing::run_bih({"bisect", fixture("good.json"), fixture("matrix.json")});
  EXPECT_EQ(matrix.exit_code, 2) << matrix.output;
  EXPECT_NE(matrix.output.find("matrix.json"), std::string::npos) << matrix.output;
  EXPECT_NE(matrix.output.find("holds 2 scenarios"), std::string::npos) << matrix.output;

  // BAD must be given one way, not none or both.
  const auto none = testing::run_bih({"bisect", fixture("good.json")});
  EXPECT_EQ(none.exit_code, 2) << none.output;
  const auto both = testing::run_bih(
      {"bisect", fixture("good.json"), fixture("bad.json"), "--bad-set", "parallel.tp=2"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_NE(both.output.find("not both"), std::string::npos) << both.output;
}

}  // namespace
}  // namespace bih::test_bisect
