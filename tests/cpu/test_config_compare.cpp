// Configurations against a reference (comparison kind "config", verdict config_variant): the
// matrix file's compare block and its errors, the reference each configuration gets, and whole
// runs of the tiny model whose counts, table, matrix, gate, JUnit and explain are asserted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "harness/config_compare.hpp"
#include "harness/diff.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_config_compare {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kSource;
using testing::write_text;

// The tiny model, 4 prompts, 4 tokens, bs=1 vs bs=4 and the batch twice.
constexpr const char* kBase = R"({
  "model": {"preset": "tiny"}, "backend": "cpu",
  "plan": {"prompts": {"count": 4, "min_len": 6, "max_len": 12}, "max_tokens": 4,
           "batch_sizes": [1, 4], "repeats": 2}})";

std::string matrix_with(const std::string& axes, const std::string& compare) {
  return std::string(R"({"base": )") + kBase + R"(, "axes": )" + axes + R"(, "compare": )" +
         compare + "}";
}

// The message load_scenarios gives for a matrix file with this compare block; "" when it loads.
std::string load_error(const std::string& axes, const std::string& compare) {
  const fs::path dir = testing::fresh_dir("config-parse");
  write_text(dir / "m.json", matrix_with(axes, compare));
  try {
    load_scenarios((dir / "m.json").string());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigCompareParse, BadCompareBlocksNameFileFieldAndWhatIsValid) {
  const std::string axes = R"({"parallel.tp": [1, 4], "kernels": ["invariant", "vendor"]})";
  std::string e =
      load_error(axes, R"({"reference": {"parallel.tp": 1}, "acros": ["parallel.tp"]})");
  EXPECT_NE(e.find("m.json"), std::string::npos) << e;
  EXPECT_NE(e.find("/compare/acros"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'across'"), std::string::npos) << e;

  e = load_error(axes, R"({"reference": {"parallel.tp": 1}, "across": ["parallel.tpp"]})");
  EXPECT_NE(e.find("/compare/across/0"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown scenario key 'parallel.tpp'"), std::string::npos) << e;

  e = load_error(axes,
                 R"({"reference": {"parallel.tp": 1}, "across": ["parallel.tp", "kernels"]})");
  EXPECT_NE(e.find("/compare/across/1"), std::string::npos) << e;
  EXPECT_NE(e.find("'kernels' has no value in compare.reference"), std::string::npos) << e;

  // An axis the reference pins but that is not compared across: ambiguous, refused.
  e = load_error(axes,
                 R"({"reference": {"parallel.tp": 1, "kernels": "invariant"},
                     "across": ["parallel.tp"]})");
  EXPECT_NE(e.find("/compare/reference/kernels"), std::string::npos) << e;
  EXPECT_NE(e.find("varies over the matrix"), std::string::npos) << e;

  // The reference must generate the same things: no plan or model knobs.
  e = load_error(axes, R"({"reference": {"parallel.tp": 1, "plan.max_tokens": 2},
                          "across": ["parallel.tp"]})");
  EXPECT_NE(e.find("/compare/reference/plan.max_tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("same plan"), std::string::npos) << e;
  e = load_error(axes, R"({"reference": {"model.seed": 1}, "across": ["model.seed"]})");
  EXPECT_NE(e.find("/compare/across/0"), std::string::npos) << e;

  e = load_error(axes, R"({"reference": {}, "across": ["parallel.tp"]})");
  EXPECT_NE(e.find("/compare/reference"), std::string::npos) << e;
  e = load_error(axes, R"({"reference": {"parallel.tp": 1}, "across": []})");
  EXPECT_NE(e.find("/compare/across"), std::string::npos) << e;
  e = load_error(axes, R"({"reference": {"parallel.tp": 3}, "across": ["parallel.tp"]})");
  EXPECT_NE(e.find("/compare/reference/parallel.tp"), std::string::npos) << e;

  EXPECT_EQ(load_error(axes, R"({"reference": {"parallel.tp": 1}, "across": ["parallel.tp"]})"),
            "");
}

TEST(ConfigCompareParse, EachConfigurationGetsTheReferenceOfItsGroup) {
  const ScenarioSet set = load_scenarios(kSource + "/scenarios/rl-consistency.json");
  ASSERT_EQ(set.scenarios.size(), 96u);
  std::set<const Scenario*> references;
  for (const Scenario& s : set.scenarios) {
    ASSERT_TRUE(s.config_reference) << s.id();
    const Scenario& r = *s.config_reference;
    references.insert(&r);
    EXPECT_EQ(r.tp, 1);
    EXPECT_FALSE(r.sp_enabled);
    EXPECT_EQ(r.graph_mode, GraphMode::none);
    EXPECT_FALSE(r.prefix_caching);
    EXPECT_EQ(r.kernels, s.kernels) << "kernels is outside across: each family its own reference";
    EXPECT_EQ(is_config_reference(s), s.id() == r.id());
  }
  EXPECT_EQ(references.size(), 3u);  // one per kernel family, built once
  const auto& tp4 = *std::find_if(set.scenarios.begin(), set.scenarios.end(), [](const auto& s) {
    return s.tp == 4 && s.sp_enabled && !s.prefix_caching && s.graph_mode == GraphMode::none;
  });
  EXPECT_EQ(tp4.expect, Verdict::batch_variant);
  const auto changes = knob_changes(tp4, *tp4.config_reference);
  EXPECT_EQ(knob_change_text(changes), "TP=4, SP=on vs TP=1, SP=off");
}

TEST(ConfigCompareVerdict, PrecedenceIsOwnVarianceFirst) {
  Comparison same, differs;
  differs.logprobs_differ = 1;
  auto with = [](Comparison c, const char* kind) {
    c.kind = kind;
    return c;
  };
  EXPECT_EQ(decide_verdict({with(same, "batch"), with(differs, "config")}),
            Verdict::config_variant);
  EXPECT_EQ(decide_verdict({with(differs, "batch"), with(differs, "config")}),
            Verdict::batch_variant);
  EXPECT_EQ(decide_verdict({with(differs, "repeat"), with(differs, "config")}),
            Verdict::nondeterministic);
  EXPECT_EQ(decide_verdict({with(same, "batch"), with(same, "config")}), Verdict::invariant);
  EXPECT_EQ(parse_verdict("config_variant"), Verdict::config_variant);
}

// One run of a small matrix, shared by the tests below: kernels invariant and vendor, TP 1 and 4,
// prefix caching off and on; reference TP=1, prefix off.
class ConfigMatrixRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(testing::fresh_dir("config-run"));
    write_text(*dir_ / "m.json",
               matrix_with(R"({"kernels": ["invariant", "vendor"], "parallel.tp": [1, 4],
                              "prefix_caching.enabled": [false, true]})",
                           R"({"reference": {"parallel.tp": 1, "prefix_caching.enabled": false},
                              "across": ["parallel.tp", "prefix_caching.enabled"]})"));
    run_ = new testing::BihResult(
        testing::run_bih({"run", (*dir_ / "m.json").string(), "--out", (*dir_ / "out").string()}));
  }
  static void TearDownTestSuite() {
    delete run_;
    delete dir_;
  }
  static json report(const std::string& kernels, int tp, bool prefix) {
    for (const auto& f : testing::report_files(*dir_ / "out")) {
      json r = read_json_file(f.string());
      const json& s = r.at("scenario");
      if (s.at("kernels") == kernels && s.at("parallel").at("tp") == tp &&
          s.at("prefix_caching").at("enabled") == prefix) {
        return r;
      }
    }
    ADD_FAILURE() << "no report for " << kernels << " tp=" << tp << " prefix=" << prefix;
    return json::object();
  }
  static std::vector<json> config_comparisons(const json& r) {
    std::vector<json> out;
    for (const json& c : r.at("comparisons")) {
      if (c.at("kind") == "config") out.push_back(c);
    }
    return out;
  }
  static fs::path* dir_;
  static testing::BihResult* run_;
};
fs::path* ConfigMatrixRun::dir_ = nullptr;
testing::BihResult* ConfigMatrixRun::run_ = nullptr;

TEST_F(ConfigMatrixRun, EveryConfigurationHasItsReportAndTheReferenceRunsOnce) {
  EXPECT_EQ(testing::report_files(*dir_ / "out").size(), 8u) << run_->output;
  // Both references are scenarios of the matrix: each ran once, as itself.
  EXPECT_EQ(run_->output.find("run for its generations"), std::string::npos) << run_->output;
  static const testing::SchemaChecker checker(kSource + "/reports/report.schema.json");
  for (const auto& f : testing::report_files(*dir_ / "out")) {
    const json r = read_json_file(f.string());
    EXPECT_EQ(checker.errors(r), "") << f;
    ASSERT_TRUE(r.contains("config_reference")) << f;
    const bool is_reference = r.at("config_reference").at("id") == r.at("id");
    EXPECT_EQ(config_comparisons(r).size(), is_reference ? 0u : 2u) << f;
  }
}

// Vendor kernels are batch variant on their own (split-K follows M): that verdict comes first,
// and the config comparisons are still made and kept.
TEST_F(ConfigMatrixRun, VendorAtTp4IsBatchVariantFirstAndItsConfigCountsAreKept) {
  const json r = report("vendor", 4, false);
  EXPECT_EQ(r.at("verdict"), "batch_variant") << r.at("comparisons").dump(2);
  const auto cs = config_comparisons(r);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("a"), "reference:bs=1");
  EXPECT_EQ(cs[0].at("b"), "bs=1");
  EXPECT_EQ(cs[1].at("a"), "reference:bs=4");
  EXPECT_EQ(cs[1].at("b"), "bs=4");
  EXPECT_EQ(cs[0].at("reference"), report("vendor", 1, false).at("id"));
  EXPECT_EQ(cs[0].at("knobs"),
            json::parse(R"([{"key": "parallel.tp", "value": 4, "reference_value": 1}])"));
  for (const json& c : cs) {
    EXPECT_EQ(c.at("logprobs_compared"), 16);
    EXPECT_EQ(c.at("logprobs_differ"), 16) << c.dump(2);
    EXPECT_EQ(c.at("sequences_diverged"), 1) << c.dump(2);
    EXPECT_EQ(c.at("summary").get<std::string>().rfind(
                  "TP=4 vs TP=1: 16/16 logprobs differ, 1/4 greedy sequences changed", 0),
              0u)
        << c.at("summary");
  }
}

// Invariant kernels: bs=1 equals the batch at TP=4, but four rank partials summed by the tree
// all-reduce round differently from TP=1's single GEMM: config_variant, every logprob.
TEST_F(ConfigMatrixRun, InvariantKernelsAtTp4AgainstTp1IsConfigVariantWithExactCounts) {
  const json r = report("invariant", 4, false);
  EXPECT_EQ(r.at("verdict"), "config_variant") << r.at("comparisons").dump(2);
  for (const json& c : r.at("comparisons")) {
    if (c.at("kind") != "config") EXPECT_EQ(c.at("identical"), true) << c.dump(2);
  }
  const auto cs = config_comparisons(r);
  ASSERT_EQ(cs.size(), 2u);
  for (const json& c : cs) {
    EXPECT_EQ(c.at("logprobs_differ"), 16) << c.dump(2);
    EXPECT_EQ(c.at("tokens_compared"), 16);
    EXPECT_EQ(c.at("sequences_diverged"), 1) << c.dump(2);
    EXPECT_EQ(c.at("reference"), report("invariant", 1, false).at("id"));
  }
  // Prefix caching on as well: both knobs are named, the counts are the same.
  const auto both = config_comparisons(report("invariant", 4, true));
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].at("summary").get<std::string>().rfind(
                "TP=4, prefix=on vs TP=1, prefix=off: 16/16 logprobs differ", 0),
            0u)
      << both[0].at("summary");
}

TEST_F(ConfigMatrixRun, SameTpWithPrefixCachingOnInvariantKernelsIsInvariant) {
  const json r = report("invariant", 1, true);
  EXPECT_EQ(r.at("verdict"), "invariant") << r.at("comparisons").dump(2);
  const auto cs = config_comparisons(r);
  ASSERT_EQ(cs.size(), 2u);
  for (const json& c : cs) {
    EXPECT_EQ(c.at("identical"), true);
    EXPECT_EQ(c.at("summary").get<std::string>().rfind("prefix=on vs prefix=off: 0/16", 0), 0u)
        << c.at("summary");
  }
}

TEST_F(ConfigMatrixRun, TheTableShowsTheComparisonAgainstTheReference) {
  EXPECT_NE(run_->output.find("vs reference"), std::string::npos) << run_->output;
  EXPECT_NE(run_->output.find("  TP=4 vs TP=1: "), std::string::npos) << run_->output;
  EXPECT_NE(run_->output.find("  the reference  "), std::string::npos) << run_->output;
  EXPECT_NE(run_->output.find(" config_variant"), std::string::npos) << run_->output;
}

TEST_F(ConfigMatrixRun, TheMatrixHasAConfigurationVsReferenceView) {
  const fs::path out = *dir_ / "matrix";
  const auto m = testing::run_bih({"matrix", (*dir_ / "out").string(), "--out", out.string()});
  ASSERT_EQ(m.exit_code, 0) << m.output;
  std::ifstream md_file(out / "matrix.md");
  const std::string md((std::istreambuf_iterator<char>(md_file)), {});
  EXPECT_NE(md.find("## Against the reference"), std::string::npos) << md;
  EXPECT_NE(md.find("| TP=4 vs TP=1 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| the reference |"), std::string::npos) << md;
  const json j = read_json_file((out / "matrix.json").string());
  ASSERT_EQ(j.at("config_comparisons").size(), 8u);
  int references = 0;
  for (const json& row : j.at("config_comparisons")) {
    references += row.at("is_reference").get<bool>();
    if (!row.at("is_reference").get<bool>()) {
      EXPECT_EQ(row.at("counts").size(), 2u) << row.dump();
    }
  }
  EXPECT_EQ(references, 2);
}

TEST_F(ConfigMatrixRun, TheGateHonoursExpectConfigVariantAndJunitCarriesIt) {
  // The gate over the one config_variant report: invariant kernels at TP=4.
  const json tp4 = report("invariant", 4, false);
  const std::string id = tp4.at("id");
  const fs::path reports = *dir_ / "gate-reports";
  fs::create_directories(reports);
  for (const auto& f : testing::report_files(*dir_ / "out")) {
    if (read_json_file(f.string()).at("id") == id) fs::copy_file(f, reports / f.filename());
  }
  auto gate = [&](const std::string& verdict) {
    const fs::path expect = *dir_ / ("expect-" + verdict + ".json");
    write_text(expect, R"({"schema": "bih.expectations/1", "expectations": [
      {"id": ")" + id + R"(", "verdict": ")" +
                           verdict + R"("}]})");
    const fs::path xml = *dir_ / ("gate-" + verdict + ".xml");
    const auto r = testing::run_bih(
        {"gate", "--expect", expect.string(), reports.string(), "--junit", xml.string()});
    std::ifstream in(xml);
    return std::make_pair(r, std::string((std::istreambuf_iterator<char>(in)), {}));
  };
  const auto [pass, pass_xml] = gate("config_variant");
  EXPECT_EQ(pass.exit_code, 0) << pass.output;
  EXPECT_NE(pass.output.find("1 passed, 0 failed"), std::string::npos) << pass.output;
  EXPECT_EQ(pass_xml.find("<failure"), std::string::npos) << pass_xml;

  const auto [fail, fail_xml] = gate("invariant");
  EXPECT_EQ(fail.exit_code, 1) << fail.output;
  EXPECT_NE(fail_xml.find("expected invariant, got config_variant: config reference:bs=1 vs "
                          "bs=1: TP=4 vs TP=1: 16/16 logprobs differ"),
            std::string::npos)
      << fail_xml;
  EXPECT_NE(fail_xml.find("against the reference configuration " +
                          report("invariant", 1, false).at("id").get<std::string>()),
            std::string::npos)
      << fail_xml;
}

TEST_F(ConfigMatrixRun, ExplainNamesTheFirstResidualOpWhereTheConfigurationsPart) {
  auto file_of = [&](const json& r) {
    for (const auto& f : testing::report_files(*dir_ / "out")) {
      if (read_json_file(f.string()).at("id") == r.at("id")) return f;
    }
    return fs::path();
  };
  // config_variant: explain picks the config comparison by itself.
  const auto e =
      testing::run_bih({"explain", file_of(report("invariant", 4, false)).string(), "--no-write"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("first divergence of prompt 0 token 0 (reference:bs=1 vs bs=1): layer "
                          "0 attn_reduce (residual stream)"),
            std::string::npos)
      << e.output;
  EXPECT_NE(e.output.find("TP=1 vs TP=4: only the residual stream"), std::string::npos) << e.output;
  // On stderr, where the re-run's time went: each configuration in an engine of its own.
  EXPECT_NE(e.output.find("bih explain: re-run times: engine "), std::string::npos) << e.output;
  EXPECT_NE(e.output.find(" s, bs=1 "), std::string::npos) << e.output;
  EXPECT_NE(e.output.find(" s, engine "), std::string::npos) << e.output;
  // batch_variant: the config comparison on request.
  const auto v = testing::run_bih({"explain", file_of(report("vendor", 4, false)).string(),
                                   "--comparison", "config", "--no-write"});
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("(reference:bs=1 vs bs=1): layer 0"), std::string::npos) << v.output;
  // Same TP size (prefix caching on vs off): every traced op is compared, and none differs.
  const auto same = testing::run_bih({"explain", file_of(report("invariant", 1, true)).string(),
                                      "--comparison", "config", "--no-write"});
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("no divergence"), std::string::npos) << same.output;
  EXPECT_EQ(same.output.find("only the residual stream"), std::string::npos) << same.output;
}

TEST(ConfigCompareShards, AShardWithoutTheReferenceRunsItWithoutWritingItsReport) {
  const fs::path dir = testing::fresh_dir("config-shard");
  write_text(dir / "m.json",
             matrix_with(R"({"parallel.tp": [1, 4]})",
                         R"({"reference": {"parallel.tp": 1}, "across": ["parallel.tp"]})"));
  // Scenario 0 (tp=1, the reference) is shard 1's, scenario 1 (tp=4) shard 2's.
  const auto r = testing::run_bih(
      {"run", (dir / "m.json").string(), "--out", (dir / "out").string(), "--shard", "2/2"});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // tp=4 is config_variant, expected invariant
  EXPECT_NE(r.output.find("run for its generations, no report of its own here"), std::string::npos)
      << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u) << r.output;
  const json report = read_json_file(files[0].string());
  EXPECT_EQ(report.at("scenario").at("parallel").at("tp"), 4);
  int config = 0;
  for (const json& c : report.at("comparisons")) config += c.at("kind") == "config";
  EXPECT_EQ(config, 2);
  EXPECT_EQ(report.at("verdict"), "config_variant");
}

TEST(ConfigCompareResume, AResumedRunReRunsTheReferenceOnlyForWhatItLacks) {
  const fs::path dir = testing::fresh_dir("config-resume");
  write_text(dir / "m.json",
             matrix_with(R"({"parallel.tp": [1, 2, 4]})",
                         R"({"reference": {"parallel.tp": 1}, "across": ["parallel.tp"]})"));
  const std::vector<std::string> run{"run", (dir / "m.json").string(), "--out",
                                     (dir / "out").string()};
  ASSERT_EQ(testing::run_bih(run).exit_code, 1);  // tp=2 and tp=4 are config_variant
  fs::path reference_file, tp4_file;
  for (const auto& f : testing::report_files(dir / "out")) {
    const json r = read_json_file(f.string());
    if (r.at("scenario").at("parallel").at("tp") == 1) reference_file = f;
    if (r.at("scenario").at("parallel").at("tp") == 4) tp4_file = f;
  }
  const std::string reference_text = [&] {
    std::ifstream in(reference_file);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }();
  fs::remove(tp4_file);
  auto resumed_run = run;
  resumed_run.push_back("--resume");
  const auto r = testing::run_bih(resumed_run);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // tp=4 lost its report: it runs again, and its reference runs for its generations only.
  EXPECT_NE(r.output.find("run for its generations"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(tp4_file)) << r.output;
  EXPECT_EQ(read_json_file(tp4_file.string()).at("verdict"), "config_variant");
  EXPECT_NE(r.output.find("resumed: report already there"), std::string::npos) << r.output;
  std::ifstream in(reference_file);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), reference_text)
      << "the reference's report was written again";
}

// The shipped example, whole: every configuration meets the expect the file gives it.
TEST(ConfigCompareRlConsistency, EveryConfigurationGivesWhatTheFileExpects) {
  const fs::path dir = testing::fresh_dir("config-rl");
  const auto r = testing::run_bih(
      {"run", kSource + "/scenarios/rl-consistency.json", "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("96 scenarios: 40 invariant, 40 batch_variant, 0 nondeterministic, 16 "
                          "config_variant, 0 error, 0 unsupported; 0 not as expected"),
            std::string::npos)
      << r.output;
  // TP=2 with invariant kernels: batch invariant, yet not the reference's bits.
  const std::string tp2 =
      "tp=2,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny,prefill=on,"
      "top_k=4,digest=on";
  bool seen = false;
  for (const auto& f : testing::report_files(dir / "out")) {
    const json report = read_json_file(f.string());
    if (report.at("id") != tp2) continue;
    seen = true;
    EXPECT_EQ(report.at("verdict"), "config_variant");
    for (const json& c : report.at("comparisons")) {
      if (c.at("kind") == "config") EXPECT_EQ(c.at("logprobs_differ"), 16) << c.dump(2);
    }
  }
  EXPECT_TRUE(seen) << r.output;
  // TP=8 with SP, graphs and a prefix cache on tp_invariant kernels: the reference's bits in every
  // token, logprob, top-k entry and row digest, and prefill equal to decode.
  const std::string tp8 =
      "tp=8,sp=on(min=1),ar=fixed,rs=fixed,graph=full,prefix=on,kernels=tp_invariant,model=tiny,"
      "block=4,prefill=on,top_k=4,digest=on";
  int config_seen = 0;
  int prefill_seen = 0;
  for (const auto& f : testing::report_files(dir / "out")) {
    const json report = read_json_file(f.string());
    if (report.at("id") != tp8) continue;
    EXPECT_EQ(report.at("verdict"), "invariant");
    for (const json& c : report.at("comparisons")) {
      if (c.at("kind") == "config") {
        ++config_seen;
        EXPECT_EQ(c.at("logprobs_differ"), 0) << c.dump(2);
        EXPECT_GT(c.at("top_k_compared"), 0) << c.dump(2);
        EXPECT_EQ(c.at("top_k_differ"), 0) << c.dump(2);
        EXPECT_GT(c.at("row_digests_compared"), 0) << c.dump(2);
        EXPECT_EQ(c.at("row_digests_differ"), 0) << c.dump(2);
      }
      if (c.at("kind") == "prefill") {
        ++prefill_seen;
        EXPECT_EQ(c.at("logprobs_compared"), 16) << c.dump(2);
        EXPECT_EQ(c.at("logprobs_differ"), 0) << c.dump(2);
      }
    }
  }
  EXPECT_EQ(config_seen, 2) << r.output;
  EXPECT_GE(prefill_seen, 1) << r.output;
}

// The real llama.cpp (adapters/llama-cpp, node-llama-cpp's CPU binary) across its thread count:
// skipped without the install, a failure without it under CI=true (as tests/cpu/test_llama_cpp).
TEST(ConfigCompareLlamaCpp, ThreadsAgainstOneThread) {
  if (!fs::exists(kSource + "/adapters/llama-cpp/node_modules/node-llama-cpp/package.json")) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") {
      FAIL() << "CI=true but adapters/llama-cpp/node_modules is missing: ci/test.sh must run "
                "bash adapters/llama-cpp/setup.sh";
    }
    GTEST_SKIP() << "llama.cpp adapter not installed (bash adapters/llama-cpp/setup.sh)";
  }
  const fs::path dir = testing::fresh_dir("config-llama");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  // Each prompt alone, twice in one adapter: llama.cpp's own batching (which follows timing) is
  // left out, so what is left to differ is the thread count.
  write_text(dir / "m.json", R"({
    "base": {"model": {"preset": "tiny", "seed": 0},
             "engine": {"kind": "command", "name": "llama.cpp",
                        "command": ["node", ")" +
                                 kSource + R"(/adapters/llama-cpp/adapter.mjs"],
                        "model_format": "gguf"},
             "plan": {"prompts": {"count": 4, "min_len": 6, "max_len": 12}, "max_tokens": 4,
                      "batch_sizes": [1], "repeats": 2},
             "compare": {"top_k": 3, "prefill": true},
             "timeout_s": 600},
    "axes": {"engine.options.threads": [1, 2]},
    "compare": {"reference": {"engine.options.threads": 1}, "across": ["engine.options.threads"]}
  })");
  const auto r =
      testing::run_bih({"run", (dir / "m.json").string(), "--out", (dir / "out").string()});
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 2u) << r.output;
  json two;
  for (const auto& f : files) {
    const json report = read_json_file(f.string());
    if (report.at("id").get<std::string>().find("threads=2") != std::string::npos) two = report;
  }
  ASSERT_TRUE(two.is_object()) << r.output;
  std::vector<json> config;
  for (const json& c : two.at("comparisons")) {
    if (c.at("kind") == "config") config.push_back(c);
  }
  ASSERT_EQ(config.size(), 1u) << two.dump(2);  // one batch size: bs=1 only
  EXPECT_EQ(config[0].at("tokens_compared"), 16);
  EXPECT_EQ(config[0].at("summary").get<std::string>().rfind(
                "engine.options.threads=2 vs engine.options.threads=1: ", 0),
            0u)
      << config[0].at("summary");
  // Measured: ggml's thread count does not move a bit on this model (docs/config-comparison.md).
  EXPECT_EQ(config[0].at("logprobs_differ"), 0) << config[0].dump(2);
  EXPECT_EQ(config[0].at("tokens_differ"), 0) << config[0].dump(2);
  // The adapter's top 3 per step (node-llama-cpp's probabilities) compared too, bitwise.
  EXPECT_EQ(config[0].at("top_k_compared"), 16) << config[0].dump(2);
  EXPECT_EQ(config[0].at("top_k_differ"), 0) << config[0].dump(2);
  // llama.cpp cannot score: its prefill comparison says so, and the verdict comes from the rest.
  int prefill = 0;
  for (const json& c : two.at("comparisons")) {
    if (c.at("kind") != "prefill") continue;
    ++prefill;
    EXPECT_NE(c.at("unsupported").get<std::string>().find("capabilities.score"), std::string::npos)
        << c.dump(2);
    EXPECT_TRUE(c.at("identical").is_null()) << c.dump(2);
  }
  EXPECT_EQ(prefill, 1) << two.at("comparisons").dump(2);
  EXPECT_EQ(two.at("verdict"), "invariant") << two.at("comparisons").dump(2);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace bih::test_config_compare
