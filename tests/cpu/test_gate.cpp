// The CI gate: the expectations file (parse, validate, match by exact id or glob, point at lines),
// the decision per scenario, `bih gate`'s exit codes and messages, and its JUnit XML, checked
// against a minimal JUnit XSD (tests/data/gate/junit.xsd) and queried with xmllint.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "base/errors.hpp"
#include "harness/expectations.hpp"
#include "harness/gate.hpp"
#include "harness/junit.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_gate {
namespace {

namespace fs = std::filesystem;
using testing::kSource;
using testing::read_text;
using testing::run_bih;
using testing::write_text;

const std::string kData = kSource + "/tests/data/gate/";

// Ids shaped like the issue matrix's.
const std::string kTp2 =
    "tp=2,sp=on(min=1),ar=ring,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kTp4SpRing =
    "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kTp4SpFixed =
    "tp=4,sp=on(min=1),ar=fixed,rs=fixed,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kTp4Arrival =
    "tp=4,sp=off,ar=arrival,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
const std::string kVendor =
    "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=vendor,model=tiny";
const std::string kNccl =
    "tp=4,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny,ranks=nccl";

struct ShellResult {
  int exit_code = -1;
  std::string output;
};

ShellResult shell(const std::string& command) {
  ShellResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool have_xmllint() { return shell("command -v xmllint").exit_code == 0; }

// `xmllint --xpath EXPR FILE`'s output (a number or string for count()/string() expressions).
std::string xpath(const fs::path& file, const std::string& expr) {
  const ShellResult r =
      shell("xmllint --xpath " + testing::shell_quote(expr) + " " + file.string());
  EXPECT_EQ(r.exit_code, 0) << expr << "\n" << r.output;
  std::string value = r.output;
  if (!value.empty() && value.back() == '\n') value.pop_back();  // newer xmllint adds one
  return value;
}

// A report like the example fixture, with this id and verdict. Comparisons are made consistent
// with the verdict: invariant -> all identical; batch_variant -> the batch one differs;
// nondeterministic -> both differ; error/unsupported -> none and a reason.
nlohmann::json report_with(const std::string& id, Verdict verdict, const std::string& reason = "",
                           double wall_s = 1.5) {
  nlohmann::json r = read_json_file(kSource + "/tests/data/reports/example.report.json");
  r["id"] = id;
  r["verdict"] = to_string(verdict);
  r["expect"] = nullptr;
  r["expect_met"] = nullptr;
  r["wall_s"] = wall_s;
  r["scenario"]["kernels"] =
      id.find("kernels=vendor") != std::string::npos ? "vendor" : "invariant";
  r["scenario"]["backend"] = "cpu";
  auto& comparisons = r["comparisons"];
  const nlohmann::json differing = comparisons[0];
  const nlohmann::json identical = comparisons[1];
  if (verdict == Verdict::invariant) {
    comparisons[0] = identical;
    comparisons[0]["kind"] = "batch";
  } else if (verdict == Verdict::nondeterministic) {
    comparisons[1] = differing;
    comparisons[1]["kind"] = "repeat";
    comparisons[1]["summary"] = "7/1536 logprobs differ, 1/64 greedy sequences changed";
  } else if (verdict == Verdict::error || verdict == Verdict::unsupported) {
    comparisons = nlohmann::json::array();
  }
  r["reason"] = reason.empty() ? nlohmann::json() : nlohmann::json(reason);
  return r;
}

void write_report(const fs::path& dir, const nlohmann::json& report) {
  write_text(dir / report_file_name(report.at("id")), report.dump(2));
}

// The 1-based line of `needle` in `text` outside // comments; 0 when absent.
int line_of(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const auto at = line.find(needle);
    const auto comment = line.find("//");
    if (at != std::string::npos && (comment == std::string::npos || comment > at)) return n;
  }
  return 0;
}

std::string schema_errors(const nlohmann::json& doc) {
  static const testing::SchemaChecker checker(kSource + "/ci/expectations.schema.json");
  return checker.errors(doc);
}

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// ---------------------------------------------------------------------------------------------
// Expectations file

TEST(ExpectationsFile, ExactIdBeatsGlobAndTheFirstGlobWins) {
  const ExpectationsFile file = load_expectations(kData + "expectations.json");
  ASSERT_EQ(file.entries.size(), 4u);
  EXPECT_TRUE(file.entries[0].glob);
  EXPECT_FALSE(file.entries[2].glob);

  // Matched by both "tp=4,*" (first) and the exact entry (third): the exact one decides.
  const Expectation* exact = match_expectation(file, kTp4SpFixed);
  ASSERT_NE(exact, nullptr);
  EXPECT_EQ(exact->index, 2u);
  EXPECT_EQ(exact->verdict, Verdict::invariant);

  // Matched by "tp=4,*", "tp=4,sp=off,*" and nothing exact: the first glob in file order.
  const Expectation* glob = match_expectation(file, kTp4Arrival);
  ASSERT_NE(glob, nullptr);
  EXPECT_EQ(glob->index, 0u);
  EXPECT_EQ(glob->verdict, Verdict::batch_variant);

  // '?' matches one character; "tp=2,..." reaches the fourth entry only.
  const Expectation* question = match_expectation(file, kTp2);
  ASSERT_NE(question, nullptr);
  EXPECT_EQ(question->index, 3u);

  // A glob matches the whole id, not a substring: nothing matches the vendor id.
  EXPECT_EQ(match_expectation(file, kVendor), nullptr);
  EXPECT_EQ(kDefaultExpectation, Verdict::invariant);
}

TEST(ExpectationsFile, EachEntryKnowsTheLineOfItsId) {
  const std::string path = kData + "expectations.json";
  const std::string text = read_text(path);
  const ExpectationsFile file = load_expectations(path);
  for (const Expectation& e : file.entries) {
    const int expected = line_of(text, "\"id\": \"" + e.id + "\"");
    ASSERT_GT(expected, 0) << e.id;
    EXPECT_EQ(e.line, expected) << e.id << ": the comments above must not shift the count";
  }
}

TEST(ExpectationsFile, UnknownKeyNamesFilePointerAndNearestKey) {
  const std::string path = kData + "bad-unknown-key.json";
  const std::string message = input_error_of([&] { load_expectations(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("/expectations/1/verdcit"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'verdict'"), std::string::npos) << message;
}

TEST(ExpectationsFile, BadVerdictNamesTheValidOnes) {
  const std::string path = kData + "bad-verdict.json";
  const std::string message = input_error_of([&] { load_expectations(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("/expectations/0/verdict"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'batch_variant'"), std::string::npos) << message;
  for (const char* v : {"invariant", "nondeterministic", "error", "unsupported"}) {
    EXPECT_NE(message.find(v), std::string::npos) << message;
  }
}

TEST(ExpectationsFile, RejectsWrongSchemaDuplicatesAndSyntaxErrors) {
  auto parse = [](const std::string& text) {
    return input_error_of([&] { parse_expectations(text, "x.json"); });
  };
  EXPECT_NE(parse(R"({"schema": "bih.expectations/2", "expectations": []})").find("/schema"),
            std::string::npos);
  EXPECT_NE(parse(R"({"expectations": []})").find("/schema"), std::string::npos);
  const std::string duplicate = parse(R"({"schema": "bih.expectations/1", "expectations": [
      {"id": "a*", "verdict": "error"}, {"id": "a*", "verdict": "invariant"}]})");
  EXPECT_NE(duplicate.find("/expectations/1/id"), std::string::npos) << duplicate;
  EXPECT_NE(duplicate.find("twice"), std::string::npos) << duplicate;
  EXPECT_NE(parse(R"({"schema": "bih.expectations/1", "expectations": [{"verdict": "error"}]})")
                .find("/expectations/0/id"),
            std::string::npos);
  EXPECT_NE(parse(R"({"schema": "bih.expectations/1", "expectations": [)").find("x.json"),
            std::string::npos);
  EXPECT_NE(parse(R"({"schema": "bih.expectations/1", "expectatoins": []})")
                .find("did you mean 'expectations'"),
            std::string::npos);
}

TEST(ExpectationsFile, SchemaAgreesWithTheParser) {
  for (const std::string good : {kSource + "/ci/expectations.json", kData + "expectations.json"}) {
    EXPECT_NO_THROW(load_expectations(good));
    EXPECT_EQ(schema_errors(read_json_file(good)), "") << good;
  }
  for (const std::string bad : {kData + "bad-unknown-key.json", kData + "bad-verdict.json"}) {
    EXPECT_THROW(load_expectations(bad), InputError);
    EXPECT_FALSE(schema_errors(read_json_file(bad)).empty()) << bad;
  }
}

TEST(ExpectationsFile, CiBaselineCoversTheIssueMatrix) {
  // Every accepted variance in ci/expectations.json is the one scenarios/issue-56370.json states,
  // and every scenario the baseline leaves to the default is one the matrix expects invariant.
  const ExpectationsFile baseline = load_expectations(kSource + "/ci/expectations.json");
  const auto scenarios = load_scenarios(kSource + "/scenarios/issue-56370.json").scenarios;
  std::set<size_t> used;
  for (const Scenario& s : scenarios) {
    ASSERT_TRUE(s.expect.has_value()) << s.id();
    const Expectation* e = match_expectation(baseline, s.id());
    EXPECT_EQ(e ? e->verdict : kDefaultExpectation, *s.expect) << s.id();
    if (e) used.insert(e->index);
  }
  EXPECT_EQ(used.size(), baseline.entries.size()) << "an entry of the baseline matches nothing";
}

TEST(ExpectationsFile, GpuBaselineCoversTheGpuMatrix) {
  // The same agreement for the GPU matrix: every nccl case too (it claims what the GPUs give).
  const ExpectationsFile baseline = load_expectations(kSource + "/ci/expectations-gpu.json");
  const auto scenarios = load_scenarios(kSource + "/scenarios/issue-56370-gpu.json").scenarios;
  std::set<size_t> used;
  for (const Scenario& s : scenarios) {
    ASSERT_TRUE(s.expect.has_value()) << s.id();
    const Expectation* e = match_expectation(baseline, s.id());
    EXPECT_EQ(e ? e->verdict : kDefaultExpectation, *s.expect) << s.id();
    if (e) used.insert(e->index);
  }
  EXPECT_EQ(used.size(), baseline.entries.size()) << "an entry of the baseline matches nothing";
}

TEST(ExpectationsFile, NcclCellsGetNoExpectationFromEmulatedRuns) {
  // The baseline's entries were measured with emulated ranks (and the TP=2 NCCL cells on real
  // NCCL). A real-NCCL cell at TP>=3 is what checks the emulated order models: an expectation
  // that matched it would be the emulation judging itself.
  const ExpectationsFile baseline = load_expectations(kSource + "/ci/expectations-gpu.json");
  for (const char* file : {"/scenarios/issue-56370-nccl.json", "/scenarios/issue-56370-gpu.json"}) {
    for (const Scenario& s : load_scenarios(kSource + file).scenarios) {
      if (s.ranks != RankKind::nccl) continue;
      const Expectation* e = match_expectation(baseline, s.id());
      EXPECT_EQ(e, nullptr) << s.id() << " matched by " << (e ? e->id : "");
    }
  }
}

TEST(GatePublished, TheH200ReportsPassTheGpuBaselineAndTheSchema) {
  // The published GPU reports (2x H200) are real bih.report/1 documents and meet the baseline
  // that a GPU CI job would gate on.
  const std::string dir = kSource + "/reports/gpu/cuda-engine-2026-11-29/issue-56370-gpu";
  const auto r = run_bih({"gate", "--expect", kSource + "/ci/expectations-gpu.json", dir});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("33 passed, 0 failed"), std::string::npos) << r.output;
  const testing::SchemaChecker checker(kSource + "/reports/report.schema.json");
  int reports = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    EXPECT_EQ(checker.errors(read_json_file(entry.path().string())), "") << entry.path();
    ++reports;
  }
  EXPECT_EQ(reports, 33);
}

// ---------------------------------------------------------------------------------------------
// Gate decision

TEST(GateDecision, ClassifiesEveryKindOfChange) {
  using V = Verdict;
  using O = GateOutcome;
  for (V v : {V::invariant, V::batch_variant, V::nondeterministic, V::error, V::unsupported}) {
    EXPECT_EQ(classify(v, v), O::pass) << to_string(v);
  }
  // Expected invariant, got anything else: a regression.
  for (V got : {V::batch_variant, V::nondeterministic, V::error, V::unsupported}) {
    EXPECT_EQ(classify(V::invariant, got), O::regression) << to_string(got);
  }
  // An error where anything else was expected is a regression too.
  for (V expected : {V::batch_variant, V::nondeterministic, V::unsupported}) {
    EXPECT_EQ(classify(expected, V::error), O::regression) << to_string(expected);
  }
  // A variance (or an error, or unsupported) that went away.
  for (V expected : {V::batch_variant, V::nondeterministic, V::error, V::unsupported}) {
    EXPECT_EQ(classify(expected, V::invariant), O::unexpected_pass) << to_string(expected);
  }
  EXPECT_EQ(classify(V::batch_variant, V::nondeterministic), O::changed);
  EXPECT_EQ(classify(V::nondeterministic, V::batch_variant), O::changed);
  EXPECT_EQ(classify(V::unsupported, V::batch_variant), O::changed);
  EXPECT_EQ(classify(V::error, V::unsupported), O::changed);
}

TEST(GateDecision, StrictTurnsUnexpectedPassesIntoFailures) {
  const ExpectationsFile file = parse_expectations(
      R"({"schema": "bih.expectations/1", "expectations": [
            {"id": "*,kernels=vendor,*", "verdict": "batch_variant"}]})",
      "e.json");
  ReportSet set;
  set.reports = {report_with(kVendor, Verdict::invariant), report_with(kTp2, Verdict::invariant)};
  const GateResult lenient = decide_gate(file, set);
  ASSERT_EQ(lenient.cases.size(), 2u);
  EXPECT_EQ(lenient.cases[0].id, kVendor);  // sorted by id
  EXPECT_EQ(lenient.cases[0].outcome, GateOutcome::unexpected_pass);
  EXPECT_FALSE(lenient.cases[0].failure);
  EXPECT_EQ(lenient.warnings, 1);
  EXPECT_EQ(lenient.exit_code(), 0);
  // The glob stays right for other vendor scenarios: the fix is an exact entry for this one.
  EXPECT_NE(lenient.cases[0].fix.find("\"id\": \"" + kVendor + "\", \"verdict\": \"invariant\""),
            std::string::npos)
      << lenient.cases[0].fix;

  const GateResult strict = decide_gate(file, set, GateOptions{.strict = true});
  EXPECT_TRUE(strict.cases[0].failure);
  EXPECT_EQ(strict.failures, 1);
  EXPECT_EQ(strict.exit_code(), 1);
}

TEST(GateDecision, NondeterministicEvidenceIsTheRepeatComparison) {
  const nlohmann::json r = report_with(kTp4Arrival, Verdict::nondeterministic);
  const std::string evidence = verdict_evidence(r);
  EXPECT_EQ(evidence.rfind("repeat ", 0), 0u) << evidence;
  EXPECT_NE(evidence.find(r["comparisons"][1]["summary"].get<std::string>()), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// `bih gate`

class GateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    reports_ = dir_ / "reports";
    fs::create_directories(reports_);
    expect_ = dir_ / "expectations.json";
    write_text(expect_, R"(// baseline
{
  "schema": "bih.expectations/1",
  "expectations": [
    {"id": ")" + kTp4SpRing +
                            R"(", "verdict": "batch_variant", "why": "vLLM #56370"},
    {"id": "*,ar=arrival,*", "verdict": "nondeterministic"},
    {"id": "*,ranks=nccl*", "verdict": "unsupported", "why": "no GPUs in CI"}
  ]
}
)");
    write_report(reports_, report_with(kTp2, Verdict::invariant));
    write_report(reports_, report_with(kTp4SpRing, Verdict::batch_variant));
    write_report(reports_, report_with(kTp4Arrival, Verdict::nondeterministic));
    write_report(reports_, report_with(kNccl, Verdict::unsupported, "ranks nccl need 4 GPUs"));
  }
  testing::BihResult gate(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"gate", "--expect", expect_.string(), reports_.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_bih(args);
  }
  fs::path dir_, reports_, expect_;
};

TEST_F(GateCli, PassesWhenEveryScenarioMeetsItsExpectation) {
  const auto r = gate();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4 passed, 0 failed, 0 warning(s) -> PASS"), std::string::npos)
      << r.output;
}

TEST_F(GateCli, RegressionExitsOneAndSaysWhichLineToChange) {
  // The tp=4 SP ring scenario became nondeterministic: its exact entry must change.
  write_report(reports_, report_with(kTp4SpRing, Verdict::nondeterministic));
  // A scenario no entry names went variant: expected invariant by default.
  write_report(reports_, report_with(kTp4SpFixed, Verdict::batch_variant));
  const auto r = gate();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const int line = line_of(read_text(expect_.string()), kTp4SpRing);
  ASSERT_GT(line, 0);
  EXPECT_NE(r.output.find("FAIL changed: " + kTp4SpRing), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("change " + expect_.string() + ":" + std::to_string(line) +
                          " to: {\"id\": \"" + kTp4SpRing +
                          "\", \"verdict\": \"nondeterministic\", \"why\": \"vLLM #56370\"}"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("FAIL regression: " + kTp4SpFixed + ": expected invariant"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("{\"id\": \"" + kTp4SpFixed + "\", \"verdict\": \"batch_variant\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("3 passed, 2 failed"), std::string::npos) << r.output;
}

TEST_F(GateCli, ErrorWhereInvariantWasExpectedIsARegression) {
  write_report(reports_, report_with(kTp2, Verdict::error, "worker killed by signal 9 (SIGKILL)"));
  const auto r = gate();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL regression: " + kTp2 + ": expected invariant"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
}

TEST_F(GateCli, UnexpectedPassWarnsAndFailsWithStrict) {
  write_report(reports_, report_with(kTp4SpRing, Verdict::invariant));
  const auto lenient = gate();
  EXPECT_EQ(lenient.exit_code, 0) << lenient.output;
  const int line = line_of(read_text(expect_.string()), kTp4SpRing);
  EXPECT_NE(lenient.output.find("warning unexpected_pass: " + kTp4SpRing), std::string::npos)
      << lenient.output;
  EXPECT_NE(lenient.output.find(expect_.string() + ":" + std::to_string(line)), std::string::npos)
      << lenient.output;
  const auto strict = gate({"--strict"});
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("FAIL unexpected_pass: " + kTp4SpRing), std::string::npos)
      << strict.output;
}

TEST_F(GateCli, MissingScenarioFailsTheGate) {
  RunManifest manifest;
  manifest.all_ids = {kTp2, kTp4SpRing, kTp4Arrival, kNccl, kTp4SpFixed};
  manifest.shard_ids = manifest.all_ids;
  write_manifest(reports_.string(), manifest);
  const fs::path xml = dir_ / "gate.xml";
  const auto r = gate({"--junit", xml.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL missing: " + kTp4SpFixed +
                          ": no report: scenario missing from the run (shard not gathered?)"),
            std::string::npos)
      << r.output;
  ASSERT_TRUE(have_xmllint()) << "xmllint missing: bash ci/setup.sh installs libxml2-utils";
  EXPECT_EQ(xpath(xml, "string(//testcase[@name='" + kTp4SpFixed + "']/failure/@message)"),
            "no report: scenario missing from the run (shard not gathered?)");
  EXPECT_EQ(xpath(xml, "string(//testcase[@name='" + kTp4SpFixed + "']/failure/@type)"), "missing");
}

TEST_F(GateCli, BadInputExitsTwo) {
  write_text(
      expect_,
      R"({"schema": "bih.expectations/1", "expectations": [{"id": "x", "verdict": "flaky"}]})");
  const auto bad_file = gate();
  EXPECT_EQ(bad_file.exit_code, 2) << bad_file.output;
  EXPECT_NE(bad_file.output.find("/expectations/0/verdict"), std::string::npos) << bad_file.output;

  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  const auto no_reports =
      run_bih({"gate", "--expect", (kSource + "/ci/expectations.json"), empty.string()});
  EXPECT_EQ(no_reports.exit_code, 2) << no_reports.output;
  const auto no_folder =
      run_bih({"gate", "--expect", (kSource + "/ci/expectations.json"), (dir_ / "nope").string()});
  EXPECT_EQ(no_folder.exit_code, 2) << no_folder.output;
}

TEST(GateHelp, StatesTheDefaultExpectation) {
  const auto r = run_bih({"gate", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("no entry\nmatches is expected to be `invariant`"), std::string::npos)
      << r.output;
}

// ---------------------------------------------------------------------------------------------
// JUnit XML

TEST_F(GateCli, JunitXmlHasTheRequiredStructure) {
  ASSERT_TRUE(have_xmllint()) << "xmllint missing: bash ci/setup.sh installs libxml2-utils";
  write_report(reports_, report_with(kTp4SpFixed, Verdict::batch_variant, "", 2.25));  // regression
  write_report(reports_, report_with(kVendor, Verdict::invariant));  // no entry: pass
  const fs::path xml = dir_ / "out" / "gate.xml";
  const auto r = gate({"--junit", xml.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const ShellResult valid =
      shell("xmllint --noout --schema " + kData + "junit.xsd " + xml.string());
  EXPECT_EQ(valid.exit_code, 0) << valid.output << read_text(xml.string());

  // One test case per scenario, named by its id.
  const std::set<std::string> ids = {kTp2, kTp4SpRing, kTp4Arrival, kNccl, kTp4SpFixed, kVendor};
  EXPECT_EQ(xpath(xml, "count(/testsuites/testsuite/testcase)"), std::to_string(ids.size()));
  for (const auto& id : ids) {
    EXPECT_EQ(xpath(xml, "count(//testcase[@name='" + id + "'])"), "1") << id;
  }
  // The counting attributes agree with the elements, on both levels.
  for (const std::string level : {"/testsuites", "/testsuites/testsuite"}) {
    EXPECT_EQ(xpath(xml, "string(" + level + "/@tests)"), std::to_string(ids.size()));
    EXPECT_EQ(xpath(xml, "string(" + level + "/@failures)"), xpath(xml, "count(//failure)"));
    EXPECT_EQ(xpath(xml, "string(" + level + "/@skipped)"), xpath(xml, "count(//skipped)"));
    EXPECT_EQ(xpath(xml, "string(" + level + "/@errors)"), "0");
  }
  EXPECT_EQ(xpath(xml, "count(//failure)"), "1");
  // The regression: message and type, counts and first divergences with bit patterns.
  const std::string fail = "//testcase[@name='" + kTp4SpFixed + "']";
  EXPECT_EQ(xpath(xml, "string(" + fail + "/@classname)"), "bih.invariant.cpu");
  EXPECT_EQ(xpath(xml, "string(" + fail + "/@time)"), "2.250");
  EXPECT_EQ(xpath(xml, "string(" + fail + "/failure/@type)"), "regression");
  const std::string message = xpath(xml, "string(" + fail + "/failure/@message)");
  EXPECT_EQ(message.rfind("expected invariant, got batch_variant: batch bs=1 vs bs=64: 1522/1536 "
                          "logprobs differ",
                          0),
            0u)
      << message;
  const std::string text = xpath(xml, "string(" + fail + "/failure)");
  EXPECT_NE(text.find("logprobs differ 1522/1536, sequences diverged 11/64"), std::string::npos)
      << text;
  EXPECT_NE(text.find("prompt 3 step 0: token 812 vs 812, logprob bits 0xbf8a1c00 vs 0xbf8a1c02"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("fix: "), std::string::npos) << text;
  // An expected `unsupported` is skipped (nothing checked here), with the reason.
  EXPECT_EQ(xpath(xml, "count(//testcase[@name='" + kNccl + "']/skipped)"), "1");
  EXPECT_NE(xpath(xml, "string(//testcase[@name='" + kNccl + "']/skipped/@message)")
                .find("ranks nccl need 4 GPUs"),
            std::string::npos);
  EXPECT_EQ(xpath(xml, "string(//testcase[@name='" + kVendor + "']/@classname)"), "bih.vendor.cpu");
}

TEST_F(GateCli, JunitXmlSurvivesHostileText) {
  ASSERT_TRUE(have_xmllint()) << "xmllint missing: bash ci/setup.sh installs libxml2-utils";
  // A stderr tail with markup, quotes, a control character and a CDATA end. (Invalid UTF-8
  // cannot reach the XML through a report: JSON parsing rejects it; JunitEscape covers it.)
  const std::string reason = "boom <tag attr=\"v\"> & 'q' \x01 ]]> done\nsecond line";
  write_report(reports_, report_with(kTp2, Verdict::error, reason));
  const fs::path xml = dir_ / "gate.xml";
  const auto r = gate({"--junit", xml.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const ShellResult valid =
      shell("xmllint --noout --schema " + kData + "junit.xsd " + xml.string());
  EXPECT_EQ(valid.exit_code, 0) << valid.output;
  const std::string message =
      xpath(xml, "string(//testcase[@name='" + kTp2 + "']/failure/@message)");
  EXPECT_NE(message.find("boom <tag attr=\"v\"> & 'q' \xEF\xBF\xBD ]]> done"), std::string::npos)
      << message;
  // The full reason, second line included, is in the failure's text.
  const std::string text = xpath(xml, "string(//testcase[@name='" + kTp2 + "']/failure)");
  EXPECT_NE(text.find("]]> done\nsecond line"), std::string::npos) << text;
}

TEST(JunitEscape, EscapesMarkupAndReplacesWhatXmlForbids) {
  EXPECT_EQ(xml_escape("a<b>&c\"d'e", false), "a&lt;b&gt;&amp;c\"d'e");
  EXPECT_EQ(xml_escape("a<b>&c\"d'e", true), "a&lt;b&gt;&amp;c&quot;d&apos;e");
  EXPECT_EQ(xml_escape("l1\nl2\tx", true), "l1&#10;l2&#9;x");
  EXPECT_EQ(xml_escape("l1\nl2\tx", false), "l1\nl2\tx");
  EXPECT_EQ(xml_escape(std::string("a\x01z", 3), false), "a\xEF\xBF\xBDz");
  EXPECT_EQ(xml_escape(std::string("nul\0!", 5), false), "nul\xEF\xBF\xBD!");
  EXPECT_EQ(xml_escape("max |\xCE\x94| 0.5", false), "max |\xCE\x94| 0.5");  // Δ kept
  EXPECT_EQ(xml_escape("\xFF", false), "\xEF\xBF\xBD");                      // not UTF-8
  EXPECT_EQ(xml_escape("\xC0\xAF", false), "\xEF\xBF\xBD\xEF\xBF\xBD");      // overlong '/'
  EXPECT_EQ(xml_escape("\xED\xA0\x80", false),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");                     // a UTF-16 surrogate
  EXPECT_EQ(xml_escape("\xE2\x82", false), "\xEF\xBF\xBD\xEF\xBF\xBD");  // truncated
}

}  // namespace
}  // namespace bih::test_gate
