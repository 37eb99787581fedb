// Large matrices: `bih run --shard I/N` splits a matrix into disjoint parts that cover it, `bih
// gate` over the shards' folders names what was not gathered, and `bih run --resume` reruns
// exactly the scenarios whose report is gone or was made from another resolved scenario.
// All on scenarios/issue-56370.json with a small plan (4 prompts, 3 tokens, batch sizes 1 and 4).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness/report.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_shard_resume {
namespace {

namespace fs = std::filesystem;
using testing::kSource;
using testing::read_text;
using testing::run_bih;

const std::string kMatrix = kSource + "/scenarios/issue-56370.json";
const std::string kBaseline = kSource + "/ci/expectations.json";
const std::vector<std::string> kSmallPlan = {"--set", "plan.prompts.count=4",
                                             "--set", "plan.max_tokens=3",
                                             "--set", "plan.batch_sizes=[1,4]"};

std::vector<std::string> with_plan(std::vector<std::string> args) {
  args.insert(args.end(), kSmallPlan.begin(), kSmallPlan.end());
  return args;
}

std::set<std::string> report_ids(const fs::path& dir) {
  std::set<std::string> ids;
  for (const auto& f : testing::report_files(dir)) ids.insert(read_report(f.string()).at("id"));
  return ids;
}

// `bih list` of the matrix with the same overrides: the whole selection, one id a line.
std::vector<std::string> listed_ids() {
  const auto r = run_bih(with_plan({"list", kMatrix}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> ids;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) ids.push_back(line.substr(0, line.find("  ")));
  }
  return ids;
}

// The three shards of the matrix, run once for the suite.
class Shard : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (int i = 1; i <= kShards; ++i) {
      // ctest runs each test in its own process, maybe side by side: one set of folders each.
      const fs::path dir =
          testing::fresh_dir("shard-" + std::to_string(getpid()) + "-" + std::to_string(i));
      const auto r = run_bih(
          with_plan({"run", kMatrix, "--shard", std::to_string(i) + "/3", "--out", dir.string()}));
      runs_.push_back(r);
      dirs_.push_back(dir);
    }
  }
  static constexpr int kShards = 3;
  static inline std::vector<fs::path> dirs_;
  static inline std::vector<testing::BihResult> runs_;
};

TEST_F(Shard, ShardsAreDisjointAndCoverTheMatrix) {
  const std::vector<std::string> all = listed_ids();
  ASSERT_EQ(all.size(), 11u);
  std::vector<std::set<std::string>> parts;
  for (int i = 0; i < kShards; ++i) {
    EXPECT_EQ(runs_[i].exit_code, 0) << runs_[i].output;
    parts.push_back(report_ids(dirs_[i]));
    EXPECT_FALSE(parts.back().empty()) << "shard " << i + 1;
  }
  std::set<std::string> united;
  size_t total = 0;
  for (int i = 0; i < kShards; ++i) {
    for (int j = i + 1; j < kShards; ++j) {
      std::vector<std::string> common;
      std::set_intersection(parts[i].begin(), parts[i].end(), parts[j].begin(), parts[j].end(),
                            std::back_inserter(common));
      EXPECT_TRUE(common.empty()) << "shards " << i + 1 << " and " << j + 1 << " share "
                                  << common.front();
    }
    united.insert(parts[i].begin(), parts[i].end());
    total += parts[i].size();
  }
  EXPECT_EQ(total, all.size());
  EXPECT_EQ(united, std::set<std::string>(all.begin(), all.end()));
  // The split is the documented one: scenario k (0-based, list order) goes to shard k % 3 + 1.
  for (size_t k = 0; k < all.size(); ++k) {
    EXPECT_EQ(parts[k % kShards].count(all[k]), 1u) << all[k];
  }
}

TEST_F(Shard, ShardingIsDeterministic) {
  const fs::path again = testing::fresh_dir("shard-2-again");
  const auto r = run_bih(with_plan({"run", kMatrix, "--shard", "2/3", "--out", again.string()}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report_ids(again), report_ids(dirs_[1]));
}

TEST_F(Shard, GateOverSomeShardsNamesTheMissingScenarios) {
  const fs::path xml = testing::fresh_dir("shard-gate") / "gate.xml";
  const auto partial = run_bih({"gate", "--expect", kBaseline, dirs_[0].string(), dirs_[1].string(),
                                "--junit", xml.string()});
  EXPECT_EQ(partial.exit_code, 1) << partial.output;
  const std::set<std::string> missing = report_ids(dirs_[2]);
  ASSERT_FALSE(missing.empty());
  for (const auto& id : missing) {
    EXPECT_NE(partial.output.find("FAIL missing: " + id +
                                  ": no report: scenario missing from the run (shard not "
                                  "gathered?)"),
              std::string::npos)
        << id << "\n"
        << partial.output;
  }
  // The fix names the shard that has them.
  EXPECT_NE(partial.output.find("shard 3/3"), std::string::npos) << partial.output;
  // Nothing that was gathered is called missing.
  size_t missing_lines = 0;
  for (size_t at = 0; (at = partial.output.find("FAIL missing: ", at)) != std::string::npos; ++at) {
    ++missing_lines;
  }
  EXPECT_EQ(missing_lines, missing.size()) << partial.output;
  // One JUnit failure per missing scenario.
  const std::string xml_text = read_text(xml);
  size_t failures = 0;
  for (size_t at = 0; (at = xml_text.find("<failure ", at)) != std::string::npos; ++at) ++failures;
  EXPECT_EQ(failures, missing.size()) << xml_text;

  // All shards gathered: the gate passes against the CI baseline.
  const auto full = run_bih(
      {"gate", "--expect", kBaseline, dirs_[0].string(), dirs_[1].string(), dirs_[2].string()});
  EXPECT_EQ(full.exit_code, 0) << full.output;
  EXPECT_EQ(full.output.find("missing"), std::string::npos) << full.output;
}

// ---------------------------------------------------------------------------------------------
// --resume

struct ReportFile {
  std::string content;
  fs::file_time_type mtime;
};

std::map<std::string, ReportFile> snapshot(const fs::path& dir) {
  std::map<std::string, ReportFile> files;
  for (const auto& f : testing::report_files(dir)) {
    files[f.filename().string()] = {read_text(f), fs::last_write_time(f)};
  }
  return files;
}

// The ids that the run's progress lines show as resumed, and those it started.
struct Progress {
  std::set<std::string> resumed, started;
};

Progress progress_of(const std::string& output) {
  Progress p;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[", 0) != 0) continue;
    const auto space = line.find("] ");
    if (space == std::string::npos) continue;
    const std::string rest = line.substr(space + 2);
    if (rest.find(" (resumed: report already there)") != std::string::npos) {
      p.resumed.insert(rest.substr(0, rest.find(" -> ")));
    } else if (rest.size() > 11 && rest.compare(rest.size() - 11, 11, " | starting") == 0) {
      p.started.insert(rest.substr(0, rest.size() - 11));
    }
  }
  return p;
}

TEST(Resume, SkipsExactlyTheFinishedScenarios) {
  const fs::path out = testing::fresh_dir("resume");
  const auto first = run_bih(with_plan({"run", kMatrix, "--out", out.string()}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto before = snapshot(out);
  ASSERT_EQ(before.size(), 11u);

  // Delete two reports; change nothing else.
  const std::vector<std::string> all = listed_ids();
  const std::set<std::string> deleted = {all[1], all[6]};
  for (const auto& id : deleted) ASSERT_TRUE(fs::remove(out / report_file_name(id))) << id;

  const auto second = run_bih(with_plan({"run", kMatrix, "--out", out.string(), "--resume"}));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const Progress p = progress_of(second.output);
  EXPECT_EQ(p.started, deleted) << second.output;
  std::set<std::string> others(all.begin(), all.end());
  for (const auto& id : deleted) others.erase(id);
  EXPECT_EQ(p.resumed, others) << second.output;

  const auto after = snapshot(out);
  ASSERT_EQ(after.size(), 11u);
  for (const auto& id : all) {
    const std::string name = report_file_name(id);
    ASSERT_TRUE(after.contains(name)) << id;
    if (deleted.contains(id)) continue;
    EXPECT_EQ(after.at(name).content, before.at(name).content) << id;
    EXPECT_EQ(after.at(name).mtime, before.at(name).mtime)
        << id << ": a resumed report was rewritten";
  }
  // The rerun reports are new files for the same scenarios, with the same verdicts.
  for (const auto& id : deleted) {
    const nlohmann::json old_report =
        nlohmann::json::parse(before.at(report_file_name(id)).content);
    const nlohmann::json new_report = read_report((out / report_file_name(id)).string());
    EXPECT_EQ(new_report.at("id"), id);
    EXPECT_EQ(new_report.at("verdict"), old_report.at("verdict")) << id;
    EXPECT_EQ(new_report.at("scenario"), old_report.at("scenario")) << id;
  }

  // A changed knob makes every existing report stale: all run again.
  auto changed = with_plan({"run", kMatrix, "--out", out.string(), "--resume"});
  changed.insert(changed.end(), {"--set", "plan.max_tokens=2"});
  const auto third = run_bih(changed);
  ASSERT_EQ(third.exit_code, 0) << third.output;
  const Progress q = progress_of(third.output);
  EXPECT_TRUE(q.resumed.empty()) << third.output;
  EXPECT_EQ(q.started, std::set<std::string>(all.begin(), all.end())) << third.output;
  for (const auto& id : all) {
    const nlohmann::json report = read_report((out / report_file_name(id)).string());
    EXPECT_EQ(report.at("scenario").at("plan").at("max_tokens"), 2) << id;
  }
}

TEST(Resume, ErrorReportsAreRunAgain) {
  const fs::path out = testing::fresh_dir("resume-error");
  const std::vector<std::string> all = listed_ids();
  const std::string id = all[0];
  const auto first = run_bih(with_plan({"run", kMatrix, "--only", id, "--out", out.string()}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Pretend the run had crashed: same scenario and environment, but an error verdict.
  const fs::path path = out / report_file_name(id);
  nlohmann::json report = read_report(path.string());
  report["verdict"] = "error";
  report["reason"] = "worker killed by signal 9";
  std::ofstream(path) << report.dump(2);
  const auto second =
      run_bih(with_plan({"run", kMatrix, "--only", id, "--out", out.string(), "--resume"}));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const Progress p = progress_of(second.output);
  EXPECT_EQ(p.started, std::set<std::string>{id}) << second.output;
  EXPECT_NE(read_report(path.string()).at("verdict"), "error");
}

}  // namespace
}  // namespace bih::test_shard_resume
