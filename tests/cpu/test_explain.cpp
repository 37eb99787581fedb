// bih explain on the tiny model: it must name the first layer's reduce_scatter for TP=4 SP ring,
// the splitting GEMM or attention for kernels: vendor, and find no divergence where there is none.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "harness/explain.hpp"
#include "harness/report.hpp"
#include "models/trace.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/scenario_file.hpp"

namespace bih {
namespace {

namespace fs = std::filesystem;

const std::string kMatrix = std::string(BIH_SOURCE_DIR) + "/scenarios/issue-56370.json";

// A small plan: 8 prompts, 4 tokens, bs=1 vs bs=8.
const std::vector<std::string> kSmallSets{"plan.prompts.count=8", "plan.max_tokens=4",
                                          "plan.batch_sizes=[1,8]"};

Scenario issue_case(const std::string& name) {
  for (const Scenario& s : load_scenarios(kMatrix, kSmallSets).scenarios) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no case " << name << " in " << kMatrix;
  return {};
}

// Runs the issue matrix's case `name` with "localize": true and returns its report.
nlohmann::json localized_report(const std::string& name) {
  const Scenario chosen = issue_case(name);
  const auto out = testing::fresh_dir("explain-" + name);
  std::vector<std::string> args{"run",   kMatrix,         "--only", chosen.id(),
                                "--set", "localize=true", "--out",  out.string()};
  for (const std::string& set : kSmallSets) {
    args.push_back("--set");
    args.push_back(set);
  }
  const auto r = testing::run_bih(args);
  const auto files = testing::report_files(out);
  EXPECT_EQ(files.size(), 1u) << r.output;
  if (files.size() != 1) return nullptr;
  return read_json_file(files[0].string());
}

void expect_valid_report(const nlohmann::json& report) {
  static const testing::SchemaChecker checker(std::string(BIH_SOURCE_DIR) +
                                              "/reports/report.schema.json");
  EXPECT_EQ(checker.errors(report), "");
}

TEST(Explain, Tp4SpRingNamesTheFirstLayersReduceScatter) {
  const auto report = localized_report("tp4-sp-ring");
  ASSERT_EQ(report.at("verdict"), "batch_variant");
  ASSERT_TRUE(report.contains("localization")) << report.dump(2);
  const auto& l = report.at("localization");
  EXPECT_TRUE(l.at("diverged").get<bool>());
  const auto& first = l.at("first");
  EXPECT_EQ(first.at("layer"), 0);
  EXPECT_EQ(first.at("op"), "attn_reduce") << l.at("summary");
  EXPECT_NE(first.at("detail_b").get<std::string>().find("reduce_scatter"), std::string::npos);
  EXPECT_TRUE(first.at("inputs_equal").get<bool>());
  EXPECT_NE(first.at("bits_a"), first.at("bits_b"));
  EXPECT_GE(first.at("ulp").get<int>(), 1);
  expect_valid_report(report);
}

TEST(Explain, SpThresholdCrossingShowsBothCollectives) {
  const auto report = localized_report("tp4-sp-threshold-tree-vs-ring");
  ASSERT_EQ(report.at("verdict"), "batch_variant");
  const auto& first = report.at("localization").at("first");
  EXPECT_EQ(first.at("op"), "attn_reduce");
  EXPECT_NE(first.at("detail_a").get<std::string>().find("all_reduce"), std::string::npos);
  EXPECT_NE(first.at("detail_b").get<std::string>().find("reduce_scatter"), std::string::npos);
}

TEST(Explain, VendorKernelsNameTheSplittingGemmOrAttention) {
  const auto report = localized_report("tp1-vendor-kernels");
  ASSERT_EQ(report.at("verdict"), "batch_variant");
  const auto& first = report.at("localization").at("first");
  const std::string op = first.at("op");
  const std::string details =
      first.at("detail_a").get<std::string>() + " | " + first.at("detail_b").get<std::string>();
  const bool gemm =
      op == "qkv" || op == "o_proj" || op == "gate_up" || op == "down" || op == "lm_head";
  EXPECT_TRUE(gemm || op == "attention") << op;
  EXPECT_TRUE(details.find("split-K") != std::string::npos ||
              details.find("KV splits") != std::string::npos)
      << details;
  EXPECT_TRUE(first.at("inputs_equal").get<bool>());
}

// A localization runs beside the scenarios after it: the driver settles it before it reaps the
// next worker's process tree (which would kill it), so each variant report still gets its
// section, and the text is printed under the id it explains. The last localization runs beside
// a scenario whose adapter quits at once (`true`): its worker is over in a tenth of a second,
// long before the explain, and the reaping after it must wait.
TEST(Explain, LocalizationsRunBesideTheNextScenarioAndEachLands) {
  const std::vector<std::string> names{"tp4-sp-ring", "tp4-sp-fixed", "tp4-nosp-ring"};
  const fs::path dir = testing::fresh_dir("explain-beside"), out = dir / "out";
  const fs::path quits = dir / "quits.json";
  std::ofstream(quits) << R"({"name": "quits-at-once",
    "engine": {"kind": "command", "name": "quits", "command": ["true"]}})";
  std::vector<std::string> args{"run",           kMatrix,      quits.string(),
                                "--out",         out.string(), "--set",
                                "localize=true", "--only",     "engine=quits"};
  for (const std::string& name : names) {
    args.push_back("--only");
    args.push_back(issue_case(name).id());
  }
  for (const std::string& set : kSmallSets) {
    args.push_back("--set");
    args.push_back(set);
  }
  const auto r = testing::run_bih(args);
  ASSERT_EQ(r.exit_code, 3) << "the adapter that quits is an error, the rest as expected\n"
                            << r.output;
  EXPECT_NE(r.output.find("4 scenario(s) in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(2 localized by bih explain beside the run"), std::string::npos)
      << r.output;
  std::map<std::string, nlohmann::json> by_id;
  for (const auto& f : testing::report_files(out)) {
    const nlohmann::json report = read_json_file(f.string());
    by_id[report.at("id")] = report;
  }
  ASSERT_EQ(by_id.size(), 4u) << r.output;
  for (const std::string& name : names) {
    const std::string id = issue_case(name).id();
    const nlohmann::json& report = by_id.at(id);
    const std::string header = "localization of " + id + " (bih explain, ";
    if (report.at("verdict") == "invariant") {
      EXPECT_FALSE(report.contains("localization")) << name;
      EXPECT_EQ(r.output.find(header), std::string::npos) << r.output;
      continue;
    }
    ASSERT_EQ(report.at("verdict"), "batch_variant") << name;
    ASSERT_TRUE(report.contains("localization")) << name << ": " << r.output;
    EXPECT_EQ(report.at("localization").at("first").at("op"), "attn_reduce") << name;
    const size_t verdict_line = r.output.find(id + " -> batch_variant");
    const size_t printed = r.output.find(header);
    ASSERT_NE(printed, std::string::npos) << r.output;
    EXPECT_LT(verdict_line, printed) << r.output;
    EXPECT_NE(r.output.find("first divergence of prompt", printed), std::string::npos) << r.output;
    // Its work folder went with it (the quitting scenario keeps its own, for a look).
    EXPECT_FALSE(fs::exists(out / "work" / fs::path(report_file_name(id)).stem())) << name;
  }
}

TEST(Explain, ArrivalOrderNamesAnAllReduceRunToRun) {
  const auto report = localized_report("tp4-arrival");
  ASSERT_EQ(report.at("verdict"), "nondeterministic");
  const auto& l = report.at("localization");
  EXPECT_EQ(l.at("comparison"), "repeat");
  const std::string op = l.at("first").at("op");
  EXPECT_TRUE(op == "attn_reduce" || op == "mlp_reduce") << op;
}

TEST(Explain, InvariantScenarioHasNoDivergence) {
  const Scenario fixed = issue_case("tp4-sp-fixed");
  // Trace every op of prompt 3's first and last token in bs=1 and bs=8: all bitwise equal.
  for (int step : {0, 3}) {
    const Localization l = localize(fixed, "batch", "bs=1", "bs=8", 3, step);
    EXPECT_FALSE(l.diverged) << l.summary;
    // 4 layers x 4 ranks of sharded ops plus the residual stream, for every prompt row.
    EXPECT_GT(l.entries_compared, 4 * 4 * 8) << l.summary;
  }
}

TEST(Explain, LocalizeSeesADifferenceTheCliReported) {
  // localize() on a variant scenario's own first divergence reproduces it.
  const Scenario ring = issue_case("tp4-nosp-ring");
  const Localization l = localize(ring, "batch", "bs=1", "bs=8", 0, 0);
  EXPECT_TRUE(l.diverged);
  EXPECT_EQ(l.op, "attn_reduce");
  EXPECT_NE(l.detail_a.find("all_reduce"), std::string::npos);
  EXPECT_NE(l.detail_a, l.detail_b) << "the message sizes differ between the contexts";
}

TEST(ExplainTrace, PipelineOrderIsLayerOpPositionRank) {
  TraceSink sink;
  sink.record(TraceEntry{0, "attn_reduce", -1, 0, "", {1}});
  sink.record(TraceEntry{-1, "logprob", -1, 5, "", {1}});
  sink.record(TraceEntry{0, "qkv", 1, 0, "", {1}});
  sink.record(TraceEntry{0, "qkv", 0, 1, "", {1}});
  sink.record(TraceEntry{0, "qkv", 0, 0, "", {1}});
  sink.record(TraceEntry{-1, "embedding", -1, 0, "", {1}});
  sink.record(TraceEntry{1, "attn_norm", -1, 0, "", {1}});
  const auto sorted = sink.sorted();
  std::vector<std::string> order;
  for (const auto& e : sorted) {
    order.push_back(e.op + "@" + std::to_string(e.layer) + "/" + std::to_string(e.position) + "/" +
                    std::to_string(e.rank));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"embedding@-1/0/-1", "qkv@0/0/0", "qkv@0/0/1",
                                             "qkv@0/1/0", "attn_reduce@0/0/-1", "attn_norm@1/0/-1",
                                             "logprob@-1/5/-1"}));
}

}  // namespace
}  // namespace bih
