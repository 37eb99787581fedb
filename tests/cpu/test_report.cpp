// test_report.cpp: report documents against reports/report.schema.json, report file names,
// reading reports back, atomic writes, the environment block, and the terminal table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "harness/diff.hpp"
#include "harness/environment.hpp"
#include "harness/report.hpp"
#include "harness/table.hpp"
#include "schema_check.hpp"
#include "test_files.hpp"

namespace bih::test_report {
namespace {

namespace fs = std::filesystem;
using testing::read_text;
using json = nlohmann::json;

// A fresh, empty folder per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("bih-" + std::string(info->test_suite_name()) + "-" +
                                         info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Generation small_generation(const std::string& label, int batch_size, int repeat) {
  Generation g;
  g.label = label;
  g.batch_size = batch_size;
  g.repeat = repeat;
  g.wall_s = 0.5;
  g.steps = 4;
  g.tokens_processed = 40;
  for (int p = 0; p < 4; ++p) {
    g.sequences.push_back({{1, 2, 3 + p}, {10 + p, 20 + p, 30 + p}, {-0.5f, -0.25f, -0.125f}});
  }
  return g;
}

// A report as the driver would build it: bs=1 vs bs=4 differ in one logprob, repeats agree.
ReportInput batch_variant_input() {
  const Generation bs1 = small_generation("bs=1", 1, 0);
  Generation bs4 = small_generation("bs=4", 4, 0);
  bs4.sequences[2].logprobs[1] = std::nextafter(bs4.sequences[2].logprobs[1], 0.0f);
  const Generation bs4_again = bs4;
  ReportInput in;
  in.id = "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
  in.scenario = {{"name", "unit"}, {"parallel", {{"tp", 4}}}};
  in.expect = Verdict::batch_variant;
  in.model = {{"preset", "tiny"}, {"seed", 0}, {"weights_hash", "abc123"}};
  in.generations = {timing_of(bs1), timing_of(bs4), timing_of(bs4_again)};
  in.comparisons = {compare(bs1, bs4, "batch"), compare(bs4, bs4_again, "repeat")};
  in.verdict = decide_verdict(in.comparisons);
  in.wall_s = 1.5;
  in.environment = collect_environment();
  return in;
}

TEST(ReportMake, CarriesCountsVerdictAndExpectation) {
  const json r = make_report(batch_variant_input());
  EXPECT_EQ(r["schema"], "bih.report/1");
  EXPECT_EQ(r["verdict"], "batch_variant");
  EXPECT_EQ(r["expect"], "batch_variant");
  EXPECT_EQ(r["expect_met"], true);
  EXPECT_TRUE(r["reason"].is_null());
  ASSERT_EQ(r["comparisons"].size(), 2u);
  const json& batch = r["comparisons"][0];
  EXPECT_EQ(batch["kind"], "batch");
  EXPECT_EQ(batch["logprobs_compared"], 12);
  EXPECT_EQ(batch["logprobs_differ"], 1);
  EXPECT_EQ(batch["tokens_differ"], 0);
  EXPECT_EQ(batch["max_ulp"], 1);
  ASSERT_EQ(batch["first_divergences"].size(), 1u);
  const json& d = batch["first_divergences"][0];
  EXPECT_EQ(d["prompt"], 2);
  EXPECT_EQ(d["step"], 1);
  EXPECT_EQ(d["logprob_a_bits"], hex_bits(std::bit_cast<uint32_t>(-0.25f)));
  EXPECT_EQ(d["logprob_b_bits"], hex_bits(std::bit_cast<uint32_t>(std::nextafter(-0.25f, 0.0f))));
  EXPECT_EQ(d["logprob_a"].get<double>(), -0.25);
  EXPECT_EQ(r["comparisons"][1]["identical"], true);
  EXPECT_EQ(r["generations"][1]["tokens_per_s"].get<double>(), 80.0);
  EXPECT_TRUE(std::regex_match(r["created_at"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));

  ReportInput unexpected = batch_variant_input();
  unexpected.expect = Verdict::invariant;
  EXPECT_EQ(make_report(unexpected)["expect_met"], false);
  unexpected.expect.reset();
  EXPECT_TRUE(make_report(unexpected)["expect_met"].is_null());
  EXPECT_TRUE(make_report(unexpected)["expect"].is_null());
}

class ReportSchema : public ::testing::Test {
 protected:
  std::string errors(const json& doc) const { return checker_.errors(doc); }
  testing::SchemaChecker checker_{std::string(BIH_SOURCE_DIR) + "/reports/report.schema.json"};
};

TEST_F(ReportSchema, MadeReportValidates) {
  EXPECT_EQ(errors(make_report(batch_variant_input())), "");
  ReportInput failed = batch_variant_input();
  failed.verdict = Verdict::error;
  failed.reason = "rank 2 killed by signal 11 (SIGSEGV); stderr tail: ...";
  failed.generations.clear();
  failed.comparisons.clear();
  failed.expect.reset();
  EXPECT_EQ(errors(make_report(failed)), "");
}

TEST_F(ReportSchema, NaNAndInfiniteLogprobsValidateAsNulls) {
  const Generation a = small_generation("bs=1", 1, 0);
  Generation b = small_generation("bs=4", 4, 0);
  b.sequences[0].logprobs[0] = std::numeric_limits<float>::quiet_NaN();
  b.sequences[1].logprobs[0] = -std::numeric_limits<float>::infinity();
  ReportInput in = batch_variant_input();
  in.comparisons = {compare(a, b, "batch")};
  const json r = make_report(in);
  const json& c = r["comparisons"][0];
  EXPECT_TRUE(c["max_ulp"].is_null());        // NaN involved
  EXPECT_TRUE(c["max_abs_delta"].is_null());  // infinite
  EXPECT_TRUE(c["first_divergences"][0]["logprob_b"].is_null());
  EXPECT_TRUE(c["first_divergences"][0]["ulp"].is_null());
  EXPECT_EQ(c["first_divergences"][0]["logprob_b_bits"], "0x7fc00000");
  EXPECT_EQ(errors(r), "");
}

TEST_F(ReportSchema, FixtureValidates) {
  const fs::path fixture = fs::path(BIH_SOURCE_DIR) / "tests/data/reports/example.report.json";
  EXPECT_EQ(errors(json::parse(read_text(fixture))), "");
  EXPECT_NO_THROW(read_report(fixture.string()));
}

TEST_F(ReportSchema, GpuProviderFieldsValidate) {
  set_gpu_environment_provider([] {
    return json{{"name", "NVIDIA H200"}, {"count", 2}, {"cuda_runtime", "13.0"}};
  });
  const json env = collect_environment();
  set_gpu_environment_provider(nullptr);
  EXPECT_EQ(env["gpu"]["name"], "NVIDIA H200");
  EXPECT_EQ(env["gpu"]["count"], 2);
  EXPECT_TRUE(env["gpu"]["driver"].is_null());
  ReportInput in = batch_variant_input();
  in.environment = env;
  EXPECT_EQ(errors(make_report(in)), "");
}

TEST_F(ReportSchema, BrokenReportsFail) {
  const json good = make_report(batch_variant_input());
  ASSERT_EQ(errors(good), "");
  json r = good;
  r.erase("verdict");
  EXPECT_NE(errors(r), "") << "missing verdict accepted";
  r = good;
  r["verdict"] = "mostly_invariant";
  EXPECT_NE(errors(r), "") << "bad verdict accepted";
  r = good;
  r["comparisons"][0].erase("logprobs_differ");
  EXPECT_NE(errors(r), "") << "comparison without logprobs_differ accepted";
  r = good;
  r["comparisons"][0]["first_divergences"][0]["logprob_a_bits"] = "3f800000";
  EXPECT_NE(errors(r), "") << "bits without 0x accepted";
  r = good;
  r["surprise"] = 1;
  EXPECT_NE(errors(r), "") << "unknown top-level key accepted";
  r = good;
  r["verdict"] = "error";  // error needs a reason
  EXPECT_NE(errors(r), "") << "error without reason accepted";
  r = good;
  r["expect"] = nullptr;  // expect_met must then be null
  EXPECT_NE(errors(r), "") << "expect_met without expect accepted";
  r = good;
  r["model"] = json{{"weights_hash", "abc"}};
  EXPECT_NE(errors(r), "") << "model with neither preset nor path accepted";
}

TEST(ReportFileName, SafeStableAndDistinct) {
  const std::string id =
      "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=full,prefix=off,kernels=invariant";
  const std::string name = report_file_name(id);
  // Pinned: the name must be the same on every machine and in every version (reports are
  // found by it across runs).
  EXPECT_EQ(name,
            "tp=4,sp=on_min=1_,ar=tree,rs=ring,graph=full,prefix=off,kernels=invariant-"
            "5eb7b1078bb9.json");
  EXPECT_TRUE(std::regex_match(name, std::regex(R"([A-Za-z0-9._=,+-]+-[0-9a-f]{12}\.json)")))
      << name;
  EXPECT_EQ(name.rfind("tp=4,sp=on_min=1_,ar=tree", 0), 0u) << name;
  // Ids that sanitize to the same stem still get different names.
  EXPECT_NE(report_file_name("a(b)"), report_file_name("a[b]"));
  EXPECT_NE(report_file_name("a/b"), report_file_name("a_b"));
  EXPECT_EQ(report_file_name("../../etc/passwd").find('/'), std::string::npos);
  EXPECT_NE(report_file_name("..")[0], '.');
  EXPECT_LT(report_file_name(std::string(1000, 'x')).size(), 200u);
  std::set<std::string> names;
  for (int tp : {1, 2, 4, 8}) {
    for (const char* sp : {"on", "off"})
      names.insert(report_file_name("tp=" + std::to_string(tp) + ",sp=" + sp));
  }
  EXPECT_EQ(names.size(), 8u);
}

TEST(ReportRead, RoundTripThroughAtomicWrite) {
  TempDir dir;
  const json report = make_report(batch_variant_input());
  const fs::path path = dir.path() / "nested" / report_file_name(report["id"]);
  write_file_atomically(path.string(), report.dump(2));
  EXPECT_EQ(read_report(path.string()), report);
}

TEST(ReportRead, BadFilesAreInputErrors) {
  TempDir dir;
  const json good = make_report(batch_variant_input());
  auto expect_error = [&](const std::string& content, const std::string& pointer) {
    const fs::path path = dir.path() / "r.json";
    write_file_atomically(path.string(), content);
    try {
      read_report(path.string());
      ADD_FAILURE() << "accepted: " << content.substr(0, 80);
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path.string() + ": at " + pointer), std::string::npos)
          << e.what();
    }
  };
  expect_error("{\"schema\": \"bih.report/1\",", "/");
  expect_error("[1, 2]", "/");
  json r = good;
  r["schema"] = "bih.report/2";
  expect_error(r.dump(), "/schema");
  r = good;
  r["verdict"] = "fine";
  expect_error(r.dump(), "/verdict");
  r = good;
  r.erase("id");
  expect_error(r.dump(), "/id");
  r = good;
  r["expect"] = 3;
  expect_error(r.dump(), "/expect");
  EXPECT_THROW(read_report((dir.path() / "missing.json").string()), InputError);
}

TEST(ReportAtomicWrite, ReplacesContentAndLeavesNoTempFile) {
  TempDir dir;
  const fs::path path = dir.path() / "a" / "b" / "report.json";
  write_file_atomically(path.string(), "old content\n");
  EXPECT_EQ(read_text(path), "old content\n");
  const std::string big(1 << 20, 'z');  // more than one write() may take at once
  write_file_atomically(path.string(), big);
  EXPECT_EQ(read_text(path), big);
  write_file_atomically(path.string(), "new");
  EXPECT_EQ(read_text(path), "new");
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "report.json") << "left behind: " << entry.path();
  }
  EXPECT_EQ(entries, 1);
}

TEST(ReportAtomicWrite, FailureThrowsInfraErrorAndLeavesNoTempFile) {
  TempDir dir;
  // The target is an existing non-empty folder: rename(file, folder) fails after the temp file
  // was written, so the cleanup path runs.
  const fs::path target = dir.path() / "occupied";
  fs::create_directories(target / "inside");
  EXPECT_THROW(write_file_atomically(target.string(), "x"), InfraError);
  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(entry.path().filename(), "occupied") << "left behind: " << entry.path();
  }
  EXPECT_EQ(entries, 1);
  // A parent that is a file cannot become a folder.
  write_file_atomically((dir.path() / "plain").string(), "x");
  EXPECT_THROW(write_file_atomically((dir.path() / "plain" / "r.json").string(), "x"), InfraError);
}

TEST(ReportEnvironment, RecordsHostBuildAndNcclVariables) {
  ::setenv("NCCL_ALGO", "allreduce:tree", 1);
  ::setenv("NOT_NCCL_THING", "x", 1);
  const json env = collect_environment();
  ::unsetenv("NCCL_ALGO");
  ::unsetenv("NOT_NCCL_THING");
  EXPECT_EQ(env["nccl_env"]["NCCL_ALGO"], "allreduce:tree");
  EXPECT_FALSE(env["nccl_env"].contains("NOT_NCCL_THING"));
  EXPECT_GE(env["cpu"]["cores"].get<int>(), 1);
  EXPECT_TRUE(env["os"]["sysname"].is_string());
  EXPECT_TRUE(env["host"].is_string());
  EXPECT_TRUE(env["bih"]["commit"].is_string());
  EXPECT_FALSE(env["bih"]["version"].get<std::string>().empty());
  for (const std::string& key : gpu_environment_keys()) EXPECT_TRUE(env["gpu"][key].is_null());
  set_gpu_environment_provider([] { return json{{"gpu_temperature", 40}}; });
  EXPECT_THROW(collect_environment(), std::logic_error);
  set_gpu_environment_provider(nullptr);
  EXPECT_NO_THROW(collect_environment());
}

std::vector<TableRow> sample_rows() {
  return {
      {"tp=2,sp=off", Verdict::invariant, Verdict::invariant,
       "0/1536 logprobs differ, 0/64 greedy sequences changed",
       "0/1536 logprobs differ, 0/64 greedy sequences changed", 3.25},
      {"tp=4,sp=on(min=1),rs=ring", Verdict::nondeterministic, Verdict::invariant,
       "1522/1536 logprobs differ, 11/64 greedy sequences changed, max |Δ| 0.031, max 4011 ulp",
       "17/1536 logprobs differ, 1/64 greedy sequences changed, max |Δ| 0.002, max 40 ulp", 12.5},
      {"tp=4,ranks=nccl", Verdict::unsupported, std::nullopt, "", "", 0.0},
  };
}

TEST(TableRender, ShowsIdsVerdictsMarksAndTotals) {
  const std::string table = render_table(sample_rows(), false);
  for (const char* needle :
       {"tp=2,sp=off", "tp=4,sp=on(min=1),rs=ring", "tp=4,ranks=nccl", "invariant",
        "nondeterministic", "unsupported", "1522/1536", "17/1536", "12.5s"}) {
    EXPECT_NE(table.find(needle), std::string::npos) << needle << "\n" << table;
  }
  EXPECT_EQ(table.find("\x1b["), std::string::npos) << "colour without the flag";
  std::vector<std::string> lines;
  std::stringstream in(table);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u) << table;               // header, 3 rows, totals
  EXPECT_EQ(lines[1].rfind("✓", 0), 0u) << lines[1];  // met
  EXPECT_EQ(lines[2].rfind("✗", 0), 0u) << lines[2];  // not met
  // No expectation means invariant: an unsupported verdict misses it, as the exit code says.
  EXPECT_EQ(lines[3].rfind("✗", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4],
            "3 scenarios: 1 invariant, 0 batch_variant, 1 nondeterministic, 0 error, "
            "1 unsupported; 2 not as expected");
  // Aligned: the verdict column starts at the same display column on every row.
  auto column_of = [](const std::string& line, const std::string& word) {
    const size_t byte = line.find(word);
    size_t width = 0;
    for (size_t i = 0; i < byte; ++i) width += (static_cast<unsigned char>(line[i]) & 0xc0) != 0x80;
    return width;
  };
  EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[1], "invariant"));
  EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[2], "nondeterministic"));
  EXPECT_EQ(column_of(lines[0], "verdict"), column_of(lines[3], "unsupported"));
  EXPECT_EQ(column_of(lines[0], "repeat"), column_of(lines[2], "17/1536"));
}

TEST(TableRender, ColourWrapsOnlyTheVerdict) {
  const std::string table = render_table(sample_rows(), true);
  EXPECT_NE(table.find("\x1b[31mnondeterministic\x1b[0m"), std::string::npos) << table;
  EXPECT_NE(table.find("\x1b[32minvariant\x1b[0m"), std::string::npos) << table;
  // Without the escape codes the coloured table is the plain one.
  EXPECT_EQ(std::regex_replace(table, std::regex("\x1b\\[[0-9;]*m"), ""),
            render_table(sample_rows(), false));
}

TEST(TableRender, NoColourWhenNoColorIsSetOrNotATerminal) {
  ::setenv("NO_COLOR", "1", 1);
  EXPECT_FALSE(should_use_color(STDOUT_FILENO));
  ::unsetenv("NO_COLOR");
  TempDir dir;
  const fs::path file = dir.path() / "out.txt";
  std::ofstream(file) << "";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(should_use_color(fileno(f)));
  std::fclose(f);
}

}  // namespace
}  // namespace bih::test_report
