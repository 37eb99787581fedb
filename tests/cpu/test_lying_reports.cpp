// Issue 15, item 6: a report is never trusted by its verdict field. Every reader (bih gate, bih
// matrix, bih run --resume, bih explain) re-derives the verdict from the report's comparisons and
// refuses, with exit 2 naming the file, the stored and the derived verdict, a report that
// contradicts itself in either direction. The reports are real ones written by `bih run`, then
// edited the way a careless hand or a buggy writer would.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "base/errors.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_lying_reports {
namespace {

namespace fs = std::filesystem;
using testing::kSource;
using testing::read_text;
using testing::run_bih;
using testing::write_text;

// tp=1, 3 prompts, 2 tokens: a real invariant run in well under a second.
constexpr const char* kScenario = R"({
  "model": {"preset": "tiny"}, "parallel": {"tp": 1},
  "plan": {"prompts": {"count": 3, "min_len": 4, "max_len": 6}, "max_tokens": 2,
           "batch_sizes": [1, 3], "repeats": 2}})";

// One real run, shared: the scenario file, its --out folder and its one report.
struct RealRun {
  fs::path dir, scenario, out, report;
  nlohmann::json json;
};

const RealRun& real_run() {
  static const RealRun run = [] {
    RealRun r;
    r.dir = testing::fresh_dir("lying-reports");
    r.scenario = r.dir / "s.json";
    write_text(r.scenario, kScenario);
    r.out = r.dir / "out";
    const auto ran = run_bih({"run", r.scenario.string(), "--out", r.out.string()});
    EXPECT_EQ(ran.exit_code, 0) << ran.output;
    const auto files = testing::report_files(r.out);
    EXPECT_EQ(files.size(), 1u) << ran.output;
    r.report = files.at(0);
    r.json = read_json_file(r.report.string());
    EXPECT_EQ(r.json.at("verdict"), "invariant") << ran.output;
    return r;
  }();
  return run;
}

// A copy of the real run's --out folder whose report is `report`.
fs::path out_with(const std::string& name, const nlohmann::json& report) {
  const RealRun& run = real_run();
  const fs::path out = run.dir / name;
  fs::remove_all(out);
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(run.out)) {
    if (e.is_regular_file() && e.path().extension() == ".json")
      fs::copy_file(e.path(), out / e.path().filename());
  }
  write_text(out / run.report.filename(), report.dump(2));
  return out;
}

// The real report saying batch_variant although every comparison is identical.
nlohmann::json claims_variance() {
  nlohmann::json r = real_run().json;
  r["verdict"] = "batch_variant";
  return r;
}

// The real report still saying invariant although its repeat comparison now differs (counts,
// identical flag and a first divergence all say so, consistently).
nlohmann::json hides_variance() {
  nlohmann::json r = real_run().json;
  for (auto& c : r["comparisons"]) {
    if (c.at("kind") != "repeat") continue;
    c["identical"] = false;
    c["logprobs_differ"] = 1;
    c["summary"] = "1/6 logprobs differ, 0/3 greedy sequences changed";
    c["first_divergences"] = nlohmann::json::array({{{"prompt", 0},
                                                     {"step", 1},
                                                     {"token_a", 5},
                                                     {"token_b", 5},
                                                     {"logprob_a_bits", "0xbf800000"},
                                                     {"logprob_b_bits", "0xbf800001"},
                                                     {"logprob_a", -1.0},
                                                     {"logprob_b", -1.0000001},
                                                     {"ulp", 1}}});
  }
  return r;
}

void expect_refused(const testing::BihResult& r, const fs::path& report, const std::string& stored,
                    const std::string& derived) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(report.filename().string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("says \"" + stored + "\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("give \"" + derived + "\""), std::string::npos) << r.output;
}

TEST(LyingReports, TheRealReportIsAcceptedEverywhere) {
  const RealRun& run = real_run();
  EXPECT_EQ(derive_verdict(run.json, run.report.string()), Verdict::invariant);
  const fs::path exp = run.dir / "exp.json";
  write_text(exp, R"({"schema": "bih.expectations/1", "expectations": []})");
  EXPECT_EQ(run_bih({"gate", "--expect", exp.string(), run.out.string()}).exit_code, 0);
  EXPECT_EQ(run_bih({"matrix", run.out.string(), "--out", (run.dir / "m").string()}).exit_code, 0);
  const auto resumed =
      run_bih({"run", run.scenario.string(), "--resume", "--out", run.out.string()});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed"), std::string::npos) << resumed.output;
}

TEST(LyingReports, GateRefusesBothDirections) {
  const fs::path exp = real_run().dir / "exp-bv.json";
  // An expectation that each lie would satisfy: the lie must not pass as a met expectation.
  write_text(exp, R"({"schema": "bih.expectations/1",
    "expectations": [{"id": "*", "verdict": "batch_variant"}]})");
  const fs::path a = out_with("gate-claims", claims_variance());
  expect_refused(run_bih({"gate", "--expect", exp.string(), a.string()}), real_run().report,
                 "batch_variant", "invariant");
  const fs::path exp_inv = real_run().dir / "exp-inv.json";
  write_text(exp_inv, R"({"schema": "bih.expectations/1", "expectations": []})");
  const fs::path b = out_with("gate-hides", hides_variance());
  expect_refused(run_bih({"gate", "--expect", exp_inv.string(), b.string()}), real_run().report,
                 "invariant", "nondeterministic");
}

TEST(LyingReports, MatrixRefusesBothDirections) {
  const fs::path a = out_with("matrix-claims", claims_variance());
  expect_refused(run_bih({"matrix", a.string(), "--out", (a / "m").string()}), real_run().report,
                 "batch_variant", "invariant");
  const fs::path b = out_with("matrix-hides", hides_variance());
  expect_refused(run_bih({"matrix", b.string(), "--out", (b / "m").string()}), real_run().report,
                 "invariant", "nondeterministic");
}

TEST(LyingReports, ResumeRefusesBothDirections) {
  const RealRun& run = real_run();
  const fs::path a = out_with("resume-claims", claims_variance());
  expect_refused(run_bih({"run", run.scenario.string(), "--resume", "--out", a.string()}),
                 run.report, "batch_variant", "invariant");
  const fs::path b = out_with("resume-hides", hides_variance());
  expect_refused(run_bih({"run", run.scenario.string(), "--resume", "--out", b.string()}),
                 run.report, "invariant", "nondeterministic");
}

TEST(LyingReports, ExplainRefusesADivergenceInAnInvariantReport) {
  const fs::path b = out_with("explain-hides", hides_variance());
  const fs::path report = b / real_run().report.filename();
  const std::string before = read_text(report);
  expect_refused(run_bih({"explain", report.string()}), real_run().report, "invariant",
                 "nondeterministic");
  EXPECT_EQ(read_text(report), before) << "a refused report is left as it was";
  const fs::path a = out_with("explain-claims", claims_variance());
  expect_refused(run_bih({"explain", (a / real_run().report.filename()).string()}),
                 real_run().report, "batch_variant", "invariant");
}

TEST(LyingReports, SelfContradictionsInsideAComparison) {
  const RealRun& run = real_run();
  // "identical" against its own counts.
  nlohmann::json r = run.json;
  r["comparisons"][0]["logprobs_differ"] = 2;
  try {
    derive_verdict(r, "r.json");
    FAIL() << "identical=true with 2 differing logprobs was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/comparisons/0/identical"), std::string::npos)
        << e.what();
  }
  // A count that is not a count.
  r = run.json;
  r["comparisons"][1]["tokens_differ"] = "0";
  EXPECT_THROW(derive_verdict(r, "r.json"), InputError);
  // A verdict on invariance with nothing compared.
  r = run.json;
  r["comparisons"] = nlohmann::json::array();
  EXPECT_THROW(derive_verdict(r, "r.json"), InputError);
  // unsupported that compared something: something did run.
  r = run.json;
  r["verdict"] = "unsupported";
  r["reason"] = "needs 2 GPUs";
  EXPECT_EQ(derive_verdict(r, "r.json"), Verdict::invariant);
  EXPECT_THROW(check_report_verdict(r, "r.json"), InputError);
  // An unhealthy output is an error, whatever the comparisons say.
  r = run.json;
  r["health"]["healthy"] = false;
  EXPECT_EQ(derive_verdict(r, "r.json"), Verdict::error);
  EXPECT_THROW(check_report_verdict(r, "r.json"), InputError);
}

}  // namespace
}  // namespace bih::test_lying_reports
