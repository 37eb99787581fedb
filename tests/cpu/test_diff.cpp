// test_diff.cpp: ULP distance, the positionwise bitwise diff, the verdict rule, and the
// generation dump's bit-exact JSON round trip.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "base/errors.hpp"
#include "harness/diff.hpp"
#include "harness/generation.hpp"

namespace bih::test_diff {
namespace {

// A generation of `prompts` prompts x `steps` tokens with distinct, reproducible values.
Generation make_generation(const std::string& label, int prompts, int steps) {
  Generation g;
  g.label = label;
  g.batch_size = prompts;
  for (int p = 0; p < prompts; ++p) {
    SequenceOutput s;
    s.prompt = {1, 100 + p, 7};
    for (int t = 0; t < steps; ++t) {
      s.tokens.push_back(1000 + 37 * p + t);
      s.logprobs.push_back(-0.01f * static_cast<float>(1 + p + 3 * t));
    }
    g.sequences.push_back(s);
  }
  return g;
}

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }

TEST(DiffUlp, KnownPairs) {
  EXPECT_EQ(ulp_distance(1.0f, 1.0f), 0u);
  EXPECT_EQ(ulp_distance(1.0f, next_up(1.0f)), 1u);
  EXPECT_EQ(ulp_distance(next_up(1.0f), 1.0f), 1u);
  EXPECT_EQ(ulp_distance(1.0f, next_up(next_up(next_up(1.0f)))), 3u);
  EXPECT_EQ(ulp_distance(-2.0f, std::nextafter(-2.0f, 0.0f)), 1u);
  // 1.0 and 2.0 are one binade apart: 2^23 representable steps.
  EXPECT_EQ(ulp_distance(1.0f, 2.0f), uint64_t{1} << 23);
  EXPECT_EQ(ulp_distance(std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()),
            1u);
}

TEST(DiffUlp, SignedZerosAndAcrossZero) {
  EXPECT_EQ(ulp_distance(0.0f, -0.0f), 0u);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(ulp_distance(0.0f, tiny), 1u);
  EXPECT_EQ(ulp_distance(-0.0f, tiny), 1u);
  EXPECT_EQ(ulp_distance(-tiny, tiny), 2u);
  // Across zero the two sides add: 1.0 to -1.0 is twice 0 to 1.0.
  EXPECT_EQ(ulp_distance(-1.0f, 1.0f), 2 * ulp_distance(0.0f, 1.0f));
}

TEST(DiffUlp, NaNIsFarUnlessIdenticalBits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ulp_distance(nan, nan), 0u);
  EXPECT_EQ(ulp_distance(nan, 1.0f), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ulp_distance(1.0f, -nan), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(ulp_distance(nan, -nan), std::numeric_limits<uint64_t>::max());
}

TEST(DiffHexBits, FormatsEightLowerCaseDigits) {
  EXPECT_EQ(hex_bits(0xbf8a1c00u), "0xbf8a1c00");
  EXPECT_EQ(hex_bits(0u), "0x00000000");
  EXPECT_EQ(hex_bits(std::bit_cast<uint32_t>(1.0f)), "0x3f800000");
}

TEST(DiffCompare, IdenticalGenerationsCountNothing) {
  const Generation a = make_generation("bs=1", 4, 5);
  Generation b = a;
  b.label = "bs=4";
  const Comparison c = compare(a, b, "batch");
  EXPECT_TRUE(c.identical());
  EXPECT_EQ(c.kind, "batch");
  EXPECT_EQ(c.a_label, "bs=1");
  EXPECT_EQ(c.b_label, "bs=4");
  EXPECT_EQ(c.tokens_compared, 20);
  EXPECT_EQ(c.logprobs_compared, 20);
  EXPECT_EQ(c.sequences_compared, 4);
  EXPECT_EQ(c.tokens_differ, 0);
  EXPECT_EQ(c.logprobs_differ, 0);
  EXPECT_EQ(c.sequences_diverged, 0);
  EXPECT_EQ(c.max_abs_delta, 0.0);
  EXPECT_EQ(c.max_ulp, 0u);
  EXPECT_TRUE(c.first_divergences.empty());
  EXPECT_EQ(summarize(c), "0/20 logprobs differ, 0/4 greedy sequences changed");
}

TEST(DiffCompare, OneFlippedLogprobBitIsOneDifferenceAndNoTokenChange) {
  const Generation a = make_generation("bs=1", 3, 4);
  Generation b = a;
  const float before = b.sequences[1].logprobs[2];
  b.sequences[1].logprobs[2] = std::bit_cast<float>(std::bit_cast<uint32_t>(before) ^ 1u);
  const Comparison c = compare(a, b, "batch");
  EXPECT_FALSE(c.identical());
  EXPECT_EQ(c.logprobs_differ, 1);
  EXPECT_EQ(c.tokens_differ, 0);
  EXPECT_EQ(c.sequences_diverged, 0);
  EXPECT_EQ(c.max_ulp, 1u);
  EXPECT_EQ(c.max_abs_delta, std::fabs(static_cast<double>(before) - b.sequences[1].logprobs[2]));
  EXPECT_GT(c.max_abs_delta, 0.0);
  ASSERT_EQ(c.first_divergences.size(), 1u);
  const Divergence& d = c.first_divergences[0];
  EXPECT_EQ(d.prompt, 1);
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.token_a, d.token_b);
  EXPECT_EQ(d.logprob_a_bits, std::bit_cast<uint32_t>(before));
  EXPECT_EQ(d.logprob_b_bits, std::bit_cast<uint32_t>(before) ^ 1u);
  EXPECT_EQ(d.ulp, 1u);
  EXPECT_EQ(summarize(c).rfind("1/12 logprobs differ, 0/3 greedy sequences changed, max |Δ| ", 0),
            0u)
      << summarize(c);
}

TEST(DiffCompare, NegativeZeroDiffersInBitsButNotInUlp) {
  Generation a = make_generation("a", 1, 2);
  a.sequences[0].logprobs[0] = 0.0f;
  Generation b = a;
  b.sequences[0].logprobs[0] = -0.0f;
  const Comparison c = compare(a, b, "repeat");
  EXPECT_EQ(c.logprobs_differ, 1);
  EXPECT_EQ(c.max_ulp, 0u);
  EXPECT_FALSE(c.identical());
}

TEST(DiffCompare, TokenChangeCountsEveryDifferingPositionAndDivergesTheSequence) {
  const Generation a = make_generation("bs=1", 4, 6);
  Generation b = a;
  // Prompt 2 takes another path from step 3 on: three tokens and their logprobs change.
  for (int t = 3; t < 6; ++t) {
    b.sequences[2].tokens[t] += 1;
    b.sequences[2].logprobs[t] -= 0.5f;
  }
  const Comparison c = compare(a, b, "batch");
  EXPECT_EQ(c.tokens_differ, 3);
  EXPECT_EQ(c.logprobs_differ, 3);
  EXPECT_EQ(c.sequences_diverged, 1);
  EXPECT_NEAR(c.max_abs_delta, 0.5, 1e-6);  // float rounding of x - 0.5f; stated tolerance
  ASSERT_EQ(c.first_divergences.size(), 1u);
  EXPECT_EQ(c.first_divergences[0].prompt, 2);
  EXPECT_EQ(c.first_divergences[0].step, 3);
  EXPECT_EQ(c.first_divergences[0].token_a, a.sequences[2].tokens[3]);
  EXPECT_EQ(c.first_divergences[0].token_b, a.sequences[2].tokens[3] + 1);
  EXPECT_NE(summarize(c).find("1/4 greedy sequences changed"), std::string::npos);
}

TEST(DiffCompare, FirstDivergencesSortedByStepThenPromptAndCapped) {
  const Generation a = make_generation("bs=1", 6, 8);
  Generation b = a;
  // First differing step per prompt: p0 -> 5, p1 -> none, p2 -> 1, p3 -> 5, p4 -> 0, p5 -> 3.
  // Later differences in the same prompt must not add entries.
  const int first_step[6] = {5, -1, 1, 5, 0, 3};
  for (int p = 0; p < 6; ++p) {
    if (first_step[p] < 0) continue;
    for (int t = first_step[p]; t < 8; t += 2) b.sequences[p].tokens[t] += 1;
  }
  const Comparison all = compare(a, b, "batch");
  ASSERT_EQ(all.first_divergences.size(), 5u);
  const int want_prompt[5] = {4, 2, 5, 0, 3};
  const int want_step[5] = {0, 1, 3, 5, 5};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(all.first_divergences[i].prompt, want_prompt[i]) << i;
    EXPECT_EQ(all.first_divergences[i].step, want_step[i]) << i;
  }
  EXPECT_EQ(all.sequences_diverged, 5);

  const Comparison capped = compare(a, b, "batch", 2);
  ASSERT_EQ(capped.first_divergences.size(), 2u);
  EXPECT_EQ(capped.first_divergences[0].prompt, 4);
  EXPECT_EQ(capped.first_divergences[1].prompt, 2);
  // The cap limits the list, never the counts.
  EXPECT_EQ(capped.tokens_differ, all.tokens_differ);
  EXPECT_EQ(capped.sequences_diverged, 5);
}

TEST(DiffCompare, NaNLogprobShowsInUlpAndSummary) {
  const Generation a = make_generation("a", 2, 2);
  Generation b = a;
  b.sequences[0].logprobs[1] = std::numeric_limits<float>::quiet_NaN();
  const Comparison c = compare(a, b, "repeat");
  EXPECT_EQ(c.logprobs_differ, 1);
  EXPECT_EQ(c.max_ulp, std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(std::isfinite(c.max_abs_delta));
  EXPECT_NE(summarize(c).find("NaN"), std::string::npos);
}

TEST(DiffCompare, SummaryUsesTheIssuesTerms) {
  Comparison c;
  c.kind = "batch";
  c.logprobs_compared = c.tokens_compared = 1536;
  c.logprobs_differ = 1522;
  c.tokens_differ = 40;
  c.sequences_compared = 64;
  c.sequences_diverged = 11;
  c.max_abs_delta = 0.0312;
  c.max_ulp = 4011;
  EXPECT_EQ(summarize(c),
            "1522/1536 logprobs differ, 11/64 greedy sequences changed, max |Δ| 0.0312, max 4011 "
            "ulp");
}

// The dump fixtures in tests/data/reports (also handy for `bih diff`): bs=3 moves prompt 1's
// step-2 logprob by 3 ulp and changes prompt 2's last token.
TEST(DiffGenerationJson, FixtureDumpsCompareAsDocumented) {
  auto load = [](const std::string& name) {
    const std::string path = std::string(BIH_SOURCE_DIR) + "/tests/data/reports/" + name;
    std::ifstream in(path);
    return generation_from_json(nlohmann::json::parse(in), path);
  };
  const Comparison c = compare(load("generation.bs1.json"), load("generation.bs3.json"), "batch");
  EXPECT_EQ(c.tokens_compared, 12);
  EXPECT_EQ(c.logprobs_differ, 2);
  EXPECT_EQ(c.tokens_differ, 1);
  EXPECT_EQ(c.sequences_diverged, 1);
  EXPECT_EQ(c.max_ulp, 3u);
  ASSERT_EQ(c.first_divergences.size(), 2u);
  EXPECT_EQ(c.first_divergences[0].prompt, 1);
  EXPECT_EQ(c.first_divergences[0].step, 2);
  EXPECT_EQ(c.first_divergences[0].ulp, 3u);
  EXPECT_EQ(c.first_divergences[1].prompt, 2);
  EXPECT_EQ(c.first_divergences[1].step, 3);
}

TEST(DiffCompare, MismatchedPromptsOrLengthsAreInputErrors) {
  const Generation a = make_generation("bs=1", 3, 4);
  EXPECT_THROW(compare(a, make_generation("bs=2", 2, 4), "batch"), InputError);
  Generation other_prompt = a;
  other_prompt.sequences[1].prompt.push_back(5);
  EXPECT_THROW(compare(a, other_prompt, "batch"), InputError);
  Generation shorter = a;
  shorter.sequences[2].tokens.pop_back();
  shorter.sequences[2].logprobs.pop_back();
  try {
    compare(a, shorter, "batch");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/sequences/2/tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare(a, a, "sideways"), std::invalid_argument);
}

Comparison comparison_of(const std::string& kind, bool differs) {
  const Generation a = make_generation("a", 2, 3);
  Generation b = a;
  if (differs) b.sequences[1].logprobs[0] = next_up(b.sequences[1].logprobs[0]);
  return compare(a, b, kind);
}

TEST(DiffVerdict, DecidesFromComparisonKinds) {
  EXPECT_EQ(decide_verdict({comparison_of("batch", false), comparison_of("repeat", false)}),
            Verdict::invariant);
  EXPECT_EQ(decide_verdict({comparison_of("batch", true), comparison_of("repeat", false)}),
            Verdict::batch_variant);
  EXPECT_EQ(decide_verdict({comparison_of("batch", true), comparison_of("repeat", true)}),
            Verdict::nondeterministic);
  // Run-to-run variance wins even when bs=1 vs bs=N happened to agree.
  EXPECT_EQ(decide_verdict({comparison_of("batch", false), comparison_of("repeat", true)}),
            Verdict::nondeterministic);
  EXPECT_EQ(decide_verdict({comparison_of("batch", false), comparison_of("repeat", false),
                            comparison_of("fresh", true)}),
            Verdict::nondeterministic);
  EXPECT_THROW(decide_verdict({}), std::invalid_argument);
}

TEST(DiffGenerationJson, RoundTripIsBitwiseIncludingNaNAndNegativeZero) {
  Generation g = make_generation("bs=64#2", 3, 4);
  g.batch_size = 64;
  g.repeat = 1;
  g.fresh_process = true;
  g.scenario_id = "tp=4,sp=on(min=1)";
  g.wall_s = 1.25;
  g.steps = 25;
  g.tokens_processed = 1234;
  const float nan_with_payload = std::bit_cast<float>(0x7fc01234u);
  g.sequences[0].logprobs[1] = nan_with_payload;
  g.sequences[1].logprobs[0] = -0.0f;
  g.sequences[2].logprobs[3] = -std::numeric_limits<float>::infinity();
  g.sequences[2].logprobs[2] = std::numeric_limits<float>::denorm_min();

  const nlohmann::json j = to_json(g);
  // Through text, as a dump travels between processes.
  const Generation back = generation_from_json(nlohmann::json::parse(j.dump()), "dump.json");
  EXPECT_EQ(back.label, g.label);
  EXPECT_EQ(back.batch_size, 64);
  EXPECT_EQ(back.repeat, 1);
  EXPECT_TRUE(back.fresh_process);
  EXPECT_EQ(back.scenario_id, g.scenario_id);
  EXPECT_EQ(back.wall_s, 1.25);
  EXPECT_EQ(back.steps, 25);
  EXPECT_EQ(back.tokens_processed, 1234);
  ASSERT_EQ(back.sequences.size(), g.sequences.size());
  for (size_t p = 0; p < g.sequences.size(); ++p) {
    EXPECT_EQ(back.sequences[p].prompt, g.sequences[p].prompt);
    EXPECT_EQ(back.sequences[p].tokens, g.sequences[p].tokens);
    ASSERT_EQ(back.sequences[p].logprobs.size(), g.sequences[p].logprobs.size());
    for (size_t t = 0; t < g.sequences[p].logprobs.size(); ++t) {
      EXPECT_EQ(std::bit_cast<uint32_t>(back.sequences[p].logprobs[t]),
                std::bit_cast<uint32_t>(g.sequences[p].logprobs[t]))
          << "prompt " << p << " step " << t;
    }
  }
  EXPECT_TRUE(compare(g, back, "repeat").identical());
  // The decimal copy is for people: NaN and infinity are null there, -0.0 keeps its sign.
  EXPECT_TRUE(j["sequences"][0]["logprobs"][1].is_null());
  EXPECT_TRUE(j["sequences"][2]["logprobs"][3].is_null());
  EXPECT_TRUE(std::signbit(j["sequences"][1]["logprobs"][0].get<double>()));
}

TEST(DiffGenerationJson, DecimalLogprobsAreIgnoredOnRead) {
  nlohmann::json j = to_json(make_generation("a", 1, 2));
  j["sequences"][0]["logprobs"] = {123.0, "not even a number"};
  const Generation g = generation_from_json(j, "x.json");
  EXPECT_EQ(std::bit_cast<uint32_t>(g.sequences[0].logprobs[0]),
            j["sequences"][0]["logprob_bits"][0].get<uint32_t>());
}

// Each malformed dump must name the offending pointer.
void expect_input_error(const nlohmann::json& j, const std::string& pointer) {
  try {
    generation_from_json(j, "bad.json");
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: at " + pointer), std::string::npos) << e.what();
  }
}

TEST(DiffGenerationJson, MalformedInputNamesThePointer) {
  const nlohmann::json good = to_json(make_generation("a", 2, 3));
  expect_input_error(nlohmann::json::array(), "/");
  nlohmann::json j = good;
  j.erase("sequences");
  expect_input_error(j, "/");
  j = good;
  j["surprise"] = 1;
  expect_input_error(j, "/surprise");
  j = good;
  j["sequences"][1]["logprob_bits"].push_back(0);
  expect_input_error(j, "/sequences/1/logprob_bits");
  j = good;
  j["sequences"][0]["logprob_bits"][2] = 4294967296ull;  // 2^32: not a float32 pattern
  expect_input_error(j, "/sequences/0/logprob_bits/2");
  j = good;
  j["sequences"][0]["logprob_bits"][0] = -1.5;
  expect_input_error(j, "/sequences/0/logprob_bits/0");
  j = good;
  j["sequences"][1]["tokens"][0] = -3;
  expect_input_error(j, "/sequences/1/tokens/0");
  j = good;
  j["sequences"][1]["prompt"] = "1 2 3";
  expect_input_error(j, "/sequences/1/prompt");
  j = good;
  j["batch_size"] = "64";
  expect_input_error(j, "/batch_size");
  j = good;
  j["schema"] = "bih.generation/9";
  expect_input_error(j, "/schema");
}

}  // namespace
}  // namespace bih::test_diff
