// test_prefill_compare.cpp: compare.prefill, compare.top_k and compare.row_digest
// (docs/prefill-and-top-k.md) on the tiny CPU model.
//
// In the engine: scoring a generation in one prefill (Engine::score) against its decode, with
// invariant kernels (M-independent GEMMs and fixed attention tiles: the same bits) and vendor ones
// (split-K chosen by M: other bits); top-k lists and row digests across batch sizes. Through the
// protocol: `bih adapter` scores bitwise as the in-process engine, an adapter that cannot score
// gives an unsupported prefill comparison while the scenario keeps its verdict, and bad compare
// values are refused with exit 2 naming the field.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <fstream>

#include "base/json_file.hpp"
#include "engines/engine_protocol.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/row_extras.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/plan.hpp"

namespace bih::test_prefill_compare {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::shared_ptr<const ModelWeights> tiny_weights() {
  static auto weights =
      std::make_shared<const ModelWeights>(synthetic_weights(*preset_config("tiny"), /*seed=*/0));
  return weights;
}

struct TestEngine {
  std::unique_ptr<EmulatedGroup> group;
  std::unique_ptr<Engine> engine;
};

TestEngine make_engine(KernelFamily kernels, int tp = 1) {
  EngineOptions options;
  options.kernels = kernels;
  options.tp = tp;
  TestEngine t;
  t.group = std::make_unique<EmulatedGroup>(tp, CollectiveOrders{});
  std::vector<Communicator*> comms;
  for (int r = 0; r < tp; ++r) comms.push_back(&t.group->rank(r));
  t.engine = std::make_unique<Engine>(tiny_weights(), options, comms);
  return t;
}

std::vector<std::vector<int32_t>> prompts(int count) {
  PromptSpec spec;
  spec.count = count;
  spec.min_len = 8;
  spec.max_len = 40;
  spec.seed = 3;
  return make_prompts(spec, tiny_weights()->config.vocab_size, "");
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// Every prompt decoded alone, then scored alone: (positions whose logprob bits differ, positions
// whose argmax differs from the decoded token, positions compared).
struct PrefillDiff {
  int logprobs_differ = 0;
  int argmax_differ = 0;
  int compared = 0;
};

PrefillDiff prefill_vs_decode(KernelFamily kernels, int max_tokens) {
  auto t = make_engine(kernels);
  PrefillDiff d;
  for (const auto& prompt : prompts(8)) {
    const SequenceResult decoded = t.engine->generate({prompt}, max_tokens).at(0);
    const SequenceResult scored = t.engine->score({{prompt, decoded.tokens}}).at(0);
    EXPECT_EQ(scored.tokens.size(), decoded.tokens.size());
    for (size_t i = 0; i < decoded.tokens.size(); ++i) {
      ++d.compared;
      d.logprobs_differ += bits(scored.logprobs[i]) != bits(decoded.logprobs[i]);
      d.argmax_differ += scored.tokens[i] != decoded.tokens[i];
    }
  }
  return d;
}

TEST(PrefillCompare, InvariantKernelsScoreTheDecodedBitsExactly) {
  const PrefillDiff d = prefill_vs_decode(KernelFamily::invariant, 6);
  EXPECT_EQ(d.compared, 8 * 6);
  EXPECT_EQ(d.logprobs_differ, 0);
  EXPECT_EQ(d.argmax_differ, 0);
}

TEST(PrefillCompare, VendorKernelsScoreOtherBits) {
  // The vendor GEMM picks its split-K by M: a prefill of ~40 rows sums in another order than a
  // decode step of one row.
  const PrefillDiff d = prefill_vs_decode(KernelFamily::vendor, 6);
  EXPECT_EQ(d.compared, 8 * 6);
  EXPECT_GT(d.logprobs_differ, 0);
}

TEST(PrefillCompare, ScoringReportsTheForcedTokensValueWhereTheArgmaxDiffers) {
  auto t = make_engine(KernelFamily::invariant);
  const auto prompt = prompts(1).at(0);
  const SequenceResult decoded = t.engine->generate({prompt}, 3).at(0);
  std::vector<int32_t> forced = decoded.tokens;
  forced[1] = (forced[1] + 1) % tiny_weights()->config.vocab_size;  // not what decode chose
  const SequenceResult scored = t.engine->score({{prompt, forced}}).at(0);
  EXPECT_EQ(scored.tokens[0], decoded.tokens[0]);
  EXPECT_EQ(bits(scored.logprobs[0]), bits(decoded.logprobs[0]));
  // Position 1: the argmax is still decode's choice (same context), the value the forced token's.
  EXPECT_EQ(scored.tokens[1], decoded.tokens[1]);
  std::vector<int32_t> context = prompt;
  context.push_back(forced[0]);
  const std::vector<bf16> rows = t.engine->prefill_logits(context);
  const int V = tiny_weights()->config.vocab_size;
  const float expected = token_logprob(rows.data() + (context.size() - 1) * V, V, forced[1]);
  EXPECT_EQ(bits(scored.logprobs[1]), bits(expected));
  EXPECT_LT(scored.logprobs[1], decoded.logprobs[1]);  // a worse token than the argmax
}

TEST(PrefillCompare, ScoringRefusesWhatGenerateWouldRefuse) {
  auto t = make_engine(KernelFamily::invariant);
  EXPECT_THROW(t.engine->score({{{1, 2}, {}}}), std::invalid_argument);
  EXPECT_THROW(t.engine->score({{{}, {1}}}), std::invalid_argument);
  EXPECT_THROW(t.engine->score({{{1}, {-1}}}), std::invalid_argument);
  EXPECT_TRUE(t.engine->idle());
}

TEST(PrefillCompare, TopKIsSortedByValueWithTiesToTheLowerId) {
  // Logits 1, 3, 3, 2, 3: the three 3s in id order, then 2.
  std::vector<bf16> row;
  for (float v : {1.0f, 3.0f, 3.0f, 2.0f, 3.0f}) row.push_back(to_bf16(v));
  std::vector<int32_t> ids;
  std::vector<float> values;
  row_top_k(row.data(), 5, 4, ids, values);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(bits(values[0]), bits(values[1]));
  EXPECT_GT(values[2], values[3]);
  EXPECT_EQ(bits(values[0]), bits(token_logprob(row.data(), 5, 1)));
  EXPECT_EQ(row_argmax(row.data(), 5), 1);
}

TEST(PrefillCompare, RowDigestIsFnv1aOverTheWidenedWords) {
  const std::vector<bf16> one{to_bf16(1.0f)};  // 0x3f800000 widened
  const uint64_t expected = (0xcbf29ce484222325ull ^ 0x3f800000ull) * 0x100000001b3ull;
  EXPECT_EQ(row_digest(one.data(), 1), expected);  // adapters/python's row_digest([1.0]) too
  std::vector<bf16> row(64, to_bf16(0.5f));
  const uint64_t before = row_digest(row.data(), 64);
  row[37].bits ^= 1;  // one flipped mantissa bit
  EXPECT_NE(row_digest(row.data(), 64), before);
}

// A generation of prompts in batches of `batch`, with top-k and digests.
std::vector<SequenceResult> with_extras(KernelFamily kernels, int batch, int count = 8) {
  auto t = make_engine(kernels);
  t.engine->set_row_extras(RowExtras{5, true});
  const auto all = prompts(count);
  std::vector<SequenceResult> out;
  for (size_t first = 0; first < all.size(); first += batch) {
    const size_t last = std::min(all.size(), first + batch);
    auto part = t.engine->generate({all.begin() + first, all.begin() + last}, 4);
    for (auto& r : part) out.push_back(std::move(r));
  }
  return out;
}

// (top-k positions differing, digest positions differing, logprob positions differing)
std::array<int, 3> extras_diff(const std::vector<SequenceResult>& a,
                               const std::vector<SequenceResult>& b) {
  std::array<int, 3> d{};
  for (size_t p = 0; p < a.size(); ++p) {
    for (size_t s = 0; s < a[p].tokens.size(); ++s) {
      bool same = a[p].top_k_ids[s] == b[p].top_k_ids[s];
      for (size_t k = 0; k < a[p].top_k_values[s].size(); ++k) {
        same = same && bits(a[p].top_k_values[s][k]) == bits(b[p].top_k_values[s][k]);
      }
      d[0] += !same;
      d[1] += a[p].row_digests[s] != b[p].row_digests[s];
      d[2] += bits(a[p].logprobs[s]) != bits(b[p].logprobs[s]);
    }
  }
  return d;
}

TEST(PrefillCompare, TopKAndDigestsAreConsistentWithTheSampledToken) {
  for (const SequenceResult& r : with_extras(KernelFamily::invariant, 8)) {
    ASSERT_EQ(r.top_k_ids.size(), r.tokens.size());
    ASSERT_EQ(r.row_digests.size(), r.tokens.size());
    for (size_t s = 0; s < r.tokens.size(); ++s) {
      ASSERT_EQ(r.top_k_ids[s].size(), 5u);
      EXPECT_EQ(r.top_k_ids[s][0], r.tokens[s]);
      EXPECT_EQ(bits(r.top_k_values[s][0]), bits(r.logprobs[s]));
      for (size_t k = 1; k < 5; ++k) EXPECT_LE(r.top_k_values[s][k], r.top_k_values[s][k - 1]);
    }
  }
}

TEST(PrefillCompare, InvariantTopKAndDigestsAgreeAcrossBatchSizes) {
  const auto d =
      extras_diff(with_extras(KernelFamily::invariant, 1), with_extras(KernelFamily::invariant, 8));
  EXPECT_EQ(d, (std::array<int, 3>{0, 0, 0}));
}

TEST(PrefillCompare, VendorTopKAndDigestsDifferAcrossBatchSizes) {
  // At 8 rows the tiny model's vendor GEMMs still sum as at 1; at 16 they split differently.
  const auto d = extras_diff(with_extras(KernelFamily::vendor, 1, 16),
                             with_extras(KernelFamily::vendor, 16, 16));
  EXPECT_GT(d[1], 0) << "no row digest moved with the batch";
  // A logprob that moved is a row that moved: the digest always catches it.
  EXPECT_GE(d[1], d[2]);
  EXPECT_GT(d[0], 0) << "no top-k list moved with the batch";
}

TEST(PrefillCompare, DiffCountsTopKAndDigestsAndNotesWhatIsMissing) {
  Generation a;
  a.label = "bs=1";
  SequenceOutput s;
  s.prompt = {1, 2};
  s.tokens = {3, 4};
  s.logprobs = {-0.5f, -0.25f};
  s.top_k_ids = {{3, 7}, {4, 9}};
  s.top_k_values = {{-0.5f, -2.0f}, {-0.25f, -3.0f}};
  s.row_digests = {11, 12};
  a.sequences = {s};
  Generation b = a;
  b.label = "bs=8";
  b.sequences[0].top_k_values[1][1] = std::nextafter(-3.0f, 0.0f);  // one value bit
  b.sequences[0].row_digests[0] = 13;
  CompareSpec asked;
  asked.top_k = 2;
  asked.row_digest = true;
  Comparison c = compare(a, b, "batch", 16, asked);
  EXPECT_EQ(c.top_k_compared, 2);
  EXPECT_EQ(c.top_k_differ, 1);
  EXPECT_EQ(c.row_digests_compared, 2);
  EXPECT_EQ(c.row_digests_differ, 1);
  EXPECT_FALSE(c.identical());  // tokens and logprobs agree, the rows do not
  EXPECT_EQ(decide_verdict({c}), Verdict::batch_variant);
  EXPECT_NE(summarize(c).find("top-k 1/2 differ; row digests 1/2 differ"), std::string::npos)
      << summarize(c);

  // A side without them: not compared, and said so; never a fake equality.
  Generation bare = a;
  bare.label = "bs=8";
  bare.sequences[0].top_k_ids.clear();
  bare.sequences[0].top_k_values.clear();
  bare.sequences[0].row_digests.clear();
  c = compare(a, bare, "batch", 16, asked);
  EXPECT_EQ(c.top_k_compared, 0);
  EXPECT_EQ(c.row_digests_compared, 0);
  ASSERT_EQ(c.notes.size(), 2u);
  EXPECT_NE(c.notes[0].find("\"bs=8\" has no top-k"), std::string::npos) << c.notes[0];
  EXPECT_TRUE(c.identical());

  // The dump round-trips every bit of them.
  const Generation back = generation_from_json(to_json(b), "b.json");
  EXPECT_TRUE(compare(b, back, "repeat", 16, asked).identical());
  EXPECT_EQ(compare(b, back, "repeat", 16, asked).top_k_compared, 2);
}

TEST(PrefillCompare, VerdictPrecedence) {
  const auto differing = [](const std::string& kind) {
    Comparison c;
    c.kind = kind;
    c.logprobs_differ = 1;
    return c;
  };
  Comparison same;
  same.kind = "batch";
  EXPECT_EQ(decide_verdict({same, differing("prefill")}), Verdict::prefill_variant);
  EXPECT_EQ(decide_verdict({differing("prefill"), differing("batch")}), Verdict::batch_variant);
  EXPECT_EQ(decide_verdict({differing("prefill"), differing("repeat")}), Verdict::nondeterministic);
  // An unsupported comparison is skipped, not counted as equal or different.
  const Comparison skipped = unsupported_comparison("prefill", "bs=1", "bs=1(prefill)", "no");
  EXPECT_EQ(decide_verdict({same, skipped}), Verdict::invariant);
  EXPECT_EQ(decide_verdict({skipped}), Verdict::unsupported);
  EXPECT_EQ(to_string(Verdict::prefill_variant), "prefill_variant");
  EXPECT_EQ(parse_verdict("prefill_variant"), Verdict::prefill_variant);
}

TEST(PrefillCompare, ThePlanScoresTheReferenceAndTheBatch) {
  PlanSpec spec;
  spec.batch_sizes = {1, 8};
  CompareSpec compare;
  EXPECT_TRUE(make_plan(spec, false, compare).scorings.empty());
  compare.prefill = true;
  const Plan plan = make_plan(spec, false, compare);
  ASSERT_EQ(plan.scorings.size(), 2u);
  EXPECT_EQ(plan.scorings[0].label, "bs=1(prefill)");
  EXPECT_EQ(plan.scorings[0].of, "bs=1");
  EXPECT_EQ(plan.scorings[0].batch_size, 1);
  EXPECT_EQ(plan.scorings[1].label, "bs=8(prefill)");
  EXPECT_EQ(plan.scorings[1].batch_size, 8);
  int prefill = 0;
  for (const ComparisonSpec& c : plan.comparisons) prefill += c.kind == "prefill";
  EXPECT_EQ(prefill, 2);
}

TEST(PrefillCompare, TheProtocolCarriesScoreAndExtras) {
  const json hello = {{"type", "hello"},
                      {"protocol", protocol::kVersion},
                      {"engine", {{"name", "x"}, {"version", "1"}}},
                      {"capabilities", {{"score", true}, {"top_k", true}, {"row_digest", false}}}};
  const protocol::Hello h = protocol::parse_hello(hello);
  EXPECT_TRUE(h.score);
  EXPECT_TRUE(h.top_k);
  EXPECT_FALSE(h.row_digest);
  EXPECT_THROW(protocol::parse_hello({{"type", "hello"},
                                      {"protocol", protocol::kVersion},
                                      {"engine", {{"name", "x"}, {"version", "1"}}},
                                      {"capabilities", {{"score", "yes"}}}}),
               protocol::ProtocolError);

  const std::vector<ScoreRequest> requests{{{1, 2}, {3, 4}}};
  const json score = protocol::score_message(5, requests, RowExtras{2, true});
  EXPECT_EQ(score["type"], "score");
  EXPECT_EQ(score["top_k"], 2);
  EXPECT_EQ(score["row_digest"], true);
  // Parsed, not braced: nlohmann reads a braced list of string pairs as an object.
  const json result = json::parse(R"({"type": "result", "id": 5, "sequences": [{
      "tokens": [3, 9], "values": ["0xbf000000", "0xc0000000"],
      "top_k_ids": [[3, 1], [9, 4]],
      "top_k_values": [["0xbf000000", "0xc0400000"], ["0xbf800000", -3.0]],
      "row_digests": ["00000000000000ff", "0123456789abcdef"]}]})");
  const testing::SchemaChecker schema(std::string(BIH_SOURCE_DIR) +
                                      "/docs/engine-protocol.schema.json");
  EXPECT_EQ(schema.errors(score), "");
  EXPECT_EQ(schema.errors(result), "");
  EXPECT_EQ(schema.errors(hello), "");
  const auto scored = protocol::parse_score_result(result, 5, requests, 16);
  ASSERT_EQ(scored.size(), 1u);
  EXPECT_EQ(scored[0].tokens, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(bits(scored[0].logprobs[0]), 0xbf000000u);
  EXPECT_EQ(scored[0].top_k_ids[1], (std::vector<int32_t>{9, 4}));
  EXPECT_EQ(scored[0].row_digests[1], 0x0123456789abcdefull);
  // One token short of what was forced: refused, naming it.
  json short_result = result;
  short_result["sequences"][0]["tokens"] = {3};
  try {
    protocol::parse_score_result(short_result, 5, requests, 16);
    ADD_FAILURE() << "a short score result was accepted";
  } catch (const protocol::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("1 tokens for forced tokens 2"), std::string::npos)
        << e.what();
  }
  json bad_digest = result;
  bad_digest["sequences"][0]["row_digests"][0] = "FF";
  EXPECT_THROW(protocol::parse_score_result(bad_digest, 5, requests, 16), protocol::ProtocolError);
}

// `bih run` of `scenario` into dir/name; returns the report.
json run_scenario(const fs::path& dir, const std::string& name, const json& scenario,
                  testing::BihResult* out = nullptr) {
  std::ofstream(dir / (name + ".json")) << scenario.dump();
  const auto r = testing::run_bih(
      {"run", (dir / (name + ".json")).string(), "--out", (dir / name).string(), "--keep-work"});
  if (out != nullptr) *out = r;
  const auto reports = testing::report_files(dir / name);
  EXPECT_EQ(reports.size(), 1u) << r.output;
  if (reports.empty()) return json();
  return read_json_file(reports.at(0).string());
}

const json* comparison_of(const json& report, const std::string& kind, const std::string& b) {
  for (const json& c : report["comparisons"]) {
    if (c["kind"] == kind && c["b"] == b) return &c;
  }
  return nullptr;
}

json plan_json() {
  return {{"prompts", {{"count", 4}, {"seed", 2}}},
          {"max_tokens", 4},
          {"batch_sizes", {1, 4}},
          {"repeats", 1}};
}

TEST(PrefillCompare, ARunComparesPrefillTopKAndDigests) {
  const auto dir = testing::fresh_dir("prefill-run");
  testing::BihResult r;
  const json report = run_scenario(
      dir, "inv",
      {{"plan", plan_json()}, {"compare", {{"prefill", true}, {"top_k", 3}, {"row_digest", true}}}},
      &r);
  EXPECT_EQ(report["verdict"], "invariant") << report.dump(1);
  EXPECT_NE(report["id"].get<std::string>().find("prefill=on,top_k=3,digest=on"),
            std::string::npos);
  const json* prefill = comparison_of(report, "prefill", "bs=1(prefill)");
  ASSERT_NE(prefill, nullptr) << report.dump(1);
  EXPECT_EQ((*prefill)["tokens_compared"], 16);
  EXPECT_EQ((*prefill)["top_k_compared"], 16);
  EXPECT_EQ((*prefill)["row_digests_compared"], 16);
  ASSERT_NE(comparison_of(report, "prefill", "bs=4(prefill)"), nullptr);
  const json* batch = comparison_of(report, "batch", "bs=4");
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ((*batch)["top_k_compared"], 16);
  EXPECT_EQ((*batch)["top_k_differ"], 0);
  EXPECT_NE(r.output.find("prefill vs decode, bs=1: 0/16 logprobs differ"), std::string::npos)
      << r.output;
  const testing::SchemaChecker schema(std::string(BIH_SOURCE_DIR) + "/reports/report.schema.json");
  EXPECT_EQ(schema.errors(report), "");

  // Vendor kernels, one generation: only the prefill comparison can tell, and it does.
  json plan = plan_json();
  plan["batch_sizes"] = {1};
  const json vendor = run_scenario(
      dir, "vendor", {{"plan", plan}, {"kernels", "vendor"}, {"compare", {{"prefill", true}}}});
  EXPECT_EQ(vendor["verdict"], "prefill_variant") << vendor.dump(1);
  EXPECT_EQ(schema.errors(vendor), "");
}

TEST(PrefillCompare, BihAdapterScoresTheInProcessBits) {
  const auto dir = testing::fresh_dir("prefill-adapter");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const json compare_keys = {{"prefill", true}, {"top_k", 2}, {"row_digest", true}};
  const json in_process =
      run_scenario(dir, "a", {{"plan", plan_json()}, {"compare", compare_keys}});
  const json adapted = run_scenario(dir, "b",
                                    {{"plan", plan_json()},
                                     {"compare", compare_keys},
                                     {"engine",
                                      {{"kind", "command"},
                                       {"name", "bih-adapter"},
                                       {"command", {BIH_BINARY, "adapter"}},
                                       {"model_format", "hf"}}}});
  ASSERT_EQ(adapted["verdict"], in_process["verdict"]) << adapted.dump(1);
  const auto work = [&](const std::string& name) {
    return dir / name / "work" / testing::report_files(dir / name).at(0).stem();
  };
  for (const char* file : {"gen-bs_1_prefill_.json", "gen-bs_4_prefill_.json", "gen-bs_1.json"}) {
    const auto load = [&](const std::string& name) {
      const std::string path = (work(name) / file).string();
      return generation_from_json(read_json_file(path), path);
    };
    CompareSpec asked;
    asked.top_k = 2;
    asked.row_digest = true;
    const Comparison c = compare(load("a"), load("b"), "repeat", 4, asked);
    EXPECT_TRUE(c.identical()) << file << ": " << summarize(c);
    EXPECT_EQ(c.top_k_compared, 16) << file;
    EXPECT_EQ(c.row_digests_compared, 16) << file;
  }
}

TEST(PrefillCompare, AnAdapterThatCannotScoreKeepsItsVerdict) {
  const auto dir = testing::fresh_dir("prefill-unsupported");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  testing::BihResult r;
  const json report = run_scenario(
      dir, "text",
      {{"plan", plan_json()},
       {"compare", {{"prefill", true}, {"top_k", 2}}},
       {"engine",
        {{"kind", "command"},
         {"name", "text"},
         {"command",
          {"python3", std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/text_adapter.py"}}}}},
      &r);
  const json* prefill = comparison_of(report, "prefill", "bs=1(prefill)");
  ASSERT_NE(prefill, nullptr) << report.dump(1);
  EXPECT_TRUE((*prefill)["identical"].is_null());
  EXPECT_NE((*prefill)["unsupported"].get<std::string>().find("capabilities.score"),
            std::string::npos);
  // The verdict comes from the other comparisons: the batch one ran.
  const json* batch = comparison_of(report, "batch", "bs=4");
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(report["verdict"], (*batch)["identical"].get<bool>() ? "invariant" : "batch_variant");
  ASSERT_TRUE(batch->contains("notes")) << batch->dump();
  EXPECT_NE((*batch)["notes"][0].get<std::string>().find("has no top-k"), std::string::npos);
  EXPECT_NE(r.output.find("prefill vs decode, bs=1: not compared:"), std::string::npos) << r.output;
}

TEST(PrefillCompare, BadCompareValuesExitTwoNamingTheField) {
  const auto dir = testing::fresh_dir("prefill-bad");
  const std::vector<std::pair<json, std::string>> cases{
      {{{"top_k", 21}}, "/compare/top_k"},
      {{{"top_k", "3"}}, "/compare/top_k"},
      {{{"prefill", 1}}, "/compare/prefill"},
      {{{"row_digest", "yes"}}, "/compare/row_digest"},
      {{{"prefil", true}}, "/compare/prefil"}};
  for (const auto& [compare, field] : cases) {
    std::ofstream(dir / "bad.json") << json{{"compare", compare}}.dump();
    const auto r = testing::run_bih(
        {"run", (dir / "bad.json").string(), "--out", (dir / "out").string(), "--dry-run"});
    EXPECT_EQ(r.exit_code, 2) << compare.dump() << "\n" << r.output;
    EXPECT_NE(r.output.find(field), std::string::npos) << compare.dump() << "\n" << r.output;
  }
}

}  // namespace
}  // namespace bih::test_prefill_compare
