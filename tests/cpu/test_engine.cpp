// Engine-level properties on the tiny model: numerical agreement with an fp64 reference, and the
// bitwise guarantees the harness relies on (prefix-cache hits, graph padding, chunked prefill).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"
#include "spec/plan.hpp"

namespace bih::test_engine {
namespace {

std::shared_ptr<const ModelWeights> tiny_weights() {
  static auto weights =
      std::make_shared<const ModelWeights>(synthetic_weights(*preset_config("tiny"), /*seed=*/0));
  return weights;
}

// An engine and the emulated group it talks through.
struct TestEngine {
  std::unique_ptr<EmulatedGroup> group;
  std::unique_ptr<Engine> engine;
};

TestEngine make_engine(EngineOptions options, CollectiveOrders orders = {}) {
  TestEngine t;
  t.group = std::make_unique<EmulatedGroup>(options.tp, orders);
  std::vector<Communicator*> comms;
  for (int r = 0; r < options.tp; ++r) comms.push_back(&t.group->rank(r));
  t.engine = std::make_unique<Engine>(tiny_weights(), options, comms);
  return t;
}

std::vector<std::vector<int32_t>> prompts(int count, int min_len, int max_len, uint64_t seed) {
  PromptSpec spec;
  spec.count = count;
  spec.min_len = min_len;
  spec.max_len = max_len;
  spec.seed = seed;
  return make_prompts(spec, tiny_weights()->config.vocab_size, "");
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

void expect_bitwise_equal(const std::vector<SequenceResult>& a,
                          const std::vector<SequenceResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].tokens, b[i].tokens) << "prompt " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t) {
      ASSERT_EQ(bits(a[i].logprobs[t]), bits(b[i].logprobs[t])) << "prompt " << i << " step " << t;
    }
  }
}

// Tolerance: the engine rounds to bf16 after every op (relative step 2^-8) through 4 layers; the
// logits have a standard deviation of about 0.3. We accept |engine - fp64| <= 0.03 per logit and
// a mean absolute error below 0.005, far under the spread between different tokens' logits.
constexpr double kLogitMaxAbsErr = 0.03;
constexpr double kLogitMeanAbsErr = 0.005;

void expect_close_to_reference(int tp, CollectiveOrders orders, bool sp) {
  EngineOptions options;
  options.tp = tp;
  options.sp_enabled = sp;
  auto t = make_engine(options, orders);
  const auto prompt = prompts(1, 40, 40, 7)[0];
  const std::vector<bf16> logits = t.engine->prefill_logits(prompt);
  const std::vector<double> ref = reference_logits_fp64(*tiny_weights(), prompt);
  ASSERT_EQ(logits.size(), ref.size());
  double max_err = 0, sum_err = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::abs(static_cast<double>(to_float(logits[i])) - ref[i]);
    max_err = std::max(max_err, err);
    sum_err += err;
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  const double mean_err = sum_err / static_cast<double>(ref.size());
  EXPECT_GT(max_ref, 0.1) << "logits are degenerate; the comparison would prove nothing";
  EXPECT_LE(max_err, kLogitMaxAbsErr) << "tp=" << tp;
  EXPECT_LE(mean_err, kLogitMeanAbsErr) << "tp=" << tp;
  std::printf("tp=%d sp=%d: max |engine - fp64| = %.5f, mean %.6f, max |logit| %.3f\n", tp, sp,
              max_err, mean_err, max_ref);
}

TEST(EngineReference, Tp1LogitsMatchFp64Reference) { expect_close_to_reference(1, {}, false); }

TEST(EngineReference, Tp4SpRingLogitsMatchFp64Reference) {
  expect_close_to_reference(4, {ReduceOrder::ring, ReduceOrder::ring, ReduceOrder::ring}, true);
}

TEST(EngineReference, GreedyTokensAreTheReferenceArgmaxWhereClear) {
  // Where the fp64 reference's top two logits are far apart, the engine picks the same token.
  EngineOptions options;
  auto t = make_engine(options);
  const auto prompt = prompts(1, 30, 30, 11)[0];
  const std::vector<bf16> logits = t.engine->prefill_logits(prompt);
  const std::vector<double> ref = reference_logits_fp64(*tiny_weights(), prompt);
  const int V = tiny_weights()->config.vocab_size;
  int checked = 0;
  for (size_t pos = 0; pos < prompt.size(); ++pos) {
    int best = 0, second = -1;
    for (int v = 1; v < V; ++v) {
      if (ref[pos * V + v] > ref[pos * V + best]) {
        second = best;
        best = v;
      } else if (second < 0 || ref[pos * V + v] > ref[pos * V + second]) {
        second = v;
      }
    }
    if (ref[pos * V + best] - ref[pos * V + second] < 2 * kLogitMaxAbsErr) continue;
    int engine_best = 0;
    for (int v = 1; v < V; ++v) {
      if (to_float(logits[pos * V + v]) > to_float(logits[pos * V + engine_best])) engine_best = v;
    }
    EXPECT_EQ(engine_best, best) << "position " << pos;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(EngineBitwise, PrefixCacheHitEqualsMiss) {
  EngineOptions options;
  options.prefix_caching = true;
  options.tp = 2;
  auto cached = make_engine(options);
  const auto batch = prompts(4, 33, 47, 3);
  GenerateStats miss_stats, hit_stats;
  const auto miss = cached.engine->generate(batch, 6, &miss_stats);
  const auto hit = cached.engine->generate(batch, 6, &hit_stats);
  EXPECT_EQ(miss_stats.prefix_hit_tokens, 0);
  // Every prompt has at least two full 16-token blocks to reuse.
  EXPECT_GE(hit_stats.prefix_hit_tokens, 4 * 32);
  expect_bitwise_equal(miss, hit);
  // And the same as an engine that never caches.
  options.prefix_caching = false;
  auto uncached = make_engine(options);
  expect_bitwise_equal(miss, uncached.engine->generate(batch, 6));
}

TEST(EngineBitwise, GraphPaddingNeverChangesARealRow) {
  for (int tp : {1, 4}) {
    EngineOptions options;
    options.tp = tp;
    auto eager = make_engine(options);
    options.graph_mode = GraphMode::full;
    options.capture_sizes = {4, 8, 16};
    auto graphs = make_engine(options);
    const auto batch = prompts(3, 8, 20, 5);  // 3 decode rows pad to 4
    GenerateStats eager_stats, graph_stats;
    const auto a = eager.engine->generate(batch, 8, &eager_stats);
    const auto b = graphs.engine->generate(batch, 8, &graph_stats);
    EXPECT_EQ(eager_stats.rows, eager_stats.real_rows);
    EXPECT_GT(graph_stats.rows, graph_stats.real_rows) << "padding never happened";
    expect_bitwise_equal(a, b);
  }
}

TEST(EngineBitwise, ChunkedPrefillEqualsOneShotPrefill) {
  EngineOptions options;
  options.tp = 2;
  auto one_shot = make_engine(options);
  options.chunked_prefill_max_tokens = 7;
  auto chunked = make_engine(options);
  const auto batch = prompts(5, 10, 40, 9);
  GenerateStats one_stats, chunk_stats;
  const auto a = one_shot.engine->generate(batch, 5, &one_stats);
  const auto b = chunked.engine->generate(batch, 5, &chunk_stats);
  EXPECT_GT(chunk_stats.steps, one_stats.steps) << "prefill was not chunked";
  expect_bitwise_equal(a, b);
}

TEST(EngineBitwise, InvariantKernelsAreBatchInvariantAtTp1) {
  EngineOptions options;
  auto t = make_engine(options);
  const auto batch = prompts(8, 8, 30, 13);
  const auto together = t.engine->generate(batch, 6);
  std::vector<SequenceResult> alone;
  for (const auto& p : batch) alone.push_back(t.engine->generate({p}, 6)[0]);
  expect_bitwise_equal(alone, together);
}

TEST(EngineBitwise, VendorKernelsAreBatchVariantAtTp1) {
  EngineOptions options;
  options.kernels = KernelFamily::vendor;
  auto t = make_engine(options);
  const auto batch = prompts(16, 8, 30, 13);
  const auto together = t.engine->generate(batch, 6);
  int differing = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto alone = t.engine->generate({batch[i]}, 6)[0];
    for (size_t s = 0; s < alone.logprobs.size(); ++s) {
      differing += bits(alone.logprobs[s]) != bits(together[i].logprobs[s]);
    }
  }
  EXPECT_GT(differing, 0);
}

TEST(EngineBitwise, SpThresholdDecidesPerStep) {
  EngineOptions options;
  options.tp = 4;
  options.sp_enabled = true;
  options.sp_min_tokens = 16;
  auto t = make_engine(options);
  GenerateStats stats;
  t.engine->generate(prompts(2, 20, 20, 1), 3, &stats);  // prefill 40 rows: SP; decode 2: not
  EXPECT_EQ(stats.sp_steps, 1);
  EXPECT_EQ(stats.steps, 3);
}

}  // namespace
}  // namespace bih::test_engine
