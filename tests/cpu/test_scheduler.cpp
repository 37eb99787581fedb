// The scheduler's contract with a forward backend (models/forward.hpp), checked with a recording
// backend that samples a fixed token: every StepBatch a backend sees is well formed (sizes, padding
// rows with no KV slot, graph padding flagged only where a graph may run), decode rows come before
// prefill rows, and the sampled tokens reach the results in order.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "models/engine.hpp"

namespace bih::test_scheduler {
namespace {

struct Recorded {
  int rows_real = 0;
  int rows_padded = 0;
  bool graph_padded = false;
  bool sp = false;
  int num_decode = 0;
  std::vector<bool> decode;  // [rows_real]
};

class RecordingBackend final : public ForwardBackend {
 public:
  explicit RecordingBackend(std::vector<Recorded>* log) : log_(log) {}
  void run(StepBatch& step) override {
    ASSERT_EQ(step.tokens.size(), static_cast<size_t>(step.rows_padded));
    ASSERT_EQ(step.positions.size(), static_cast<size_t>(step.rows_padded));
    ASSERT_EQ(step.slots.size(), static_cast<size_t>(step.rows_padded));
    ASSERT_EQ(step.queries.size(), static_cast<size_t>(step.rows_real));
    for (int row = step.rows_real; row < step.rows_padded; ++row) {
      EXPECT_EQ(step.slots[row], -1) << "a padding row must not write the KV cache";
    }
    for (int row = 0; row < step.rows_real; ++row) {
      EXPECT_GE(step.slots[row], 0);
      EXPECT_EQ(step.queries[row].context_len, step.positions[row] + 1);
    }
    Recorded r{step.rows_real, step.rows_padded, step.graph_padded, step.sp, step.num_decode, {}};
    for (const auto& q : step.queries) r.decode.push_back(q.decode);
    log_->push_back(r);
    step.sampled.assign(step.logit_rows.size(), 7);
    step.sampled_logprob.assign(step.logit_rows.size(), -0.5f);
  }
  std::string describe() const override { return "recording"; }

 private:
  std::vector<Recorded>* log_;
};

std::vector<Recorded> run(EngineOptions options, const std::vector<std::vector<int32_t>>& prompts,
                          int max_tokens, std::vector<SequenceResult>* results = nullptr) {
  std::vector<Recorded> log;
  Engine engine(100, options, std::make_unique<RecordingBackend>(&log));
  auto out = engine.generate(prompts, max_tokens);
  if (results) *results = std::move(out);
  return log;
}

TEST(Scheduler, GraphPaddingIsFlaggedOnlyWithinTheCaptureSizes) {
  EngineOptions o;
  o.graph_mode = GraphMode::full;
  o.capture_sizes = {1, 2, 4, 8};
  // Prefill of 3 + 5 + 9 tokens (beyond the largest capture size: eager, unpadded), then decode
  // steps of 3 rows (padded to 4, a graph may replay them).
  const auto log = run(o, {{1, 2, 3}, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}, 3);
  ASSERT_GE(log.size(), 3u);
  EXPECT_EQ(log[0].rows_real, 17);
  EXPECT_EQ(log[0].rows_padded, 17);
  EXPECT_FALSE(log[0].graph_padded);
  for (size_t i = 1; i < log.size(); ++i) {
    EXPECT_EQ(log[i].rows_real, 3);
    EXPECT_EQ(log[i].rows_padded, 4);
    EXPECT_TRUE(log[i].graph_padded);
    EXPECT_EQ(log[i].num_decode, 3);
  }
}

TEST(Scheduler, NoGraphsMeansNoPaddingAndNoGraphFlag) {
  EngineOptions o;
  const auto log = run(o, {{1, 2, 3}, {4, 5}}, 3);
  for (const Recorded& r : log) {
    EXPECT_EQ(r.rows_padded, r.rows_real);
    EXPECT_FALSE(r.graph_padded);
  }
}

TEST(Scheduler, SequenceParallelPadsToAMultipleOfTpFromTheThreshold) {
  EngineOptions o;
  o.tp = 4;
  o.sp_enabled = true;
  o.sp_min_tokens = 8;
  // Prefill of 10 rows: SP (padded to 12). Decode of 2 rows: below the threshold, no SP.
  const auto log = run(o, {{1, 2, 3, 4, 5}, {1, 2, 3, 4, 5}}, 2);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_TRUE(log[0].sp);
  EXPECT_EQ(log[0].rows_padded, 12);
  EXPECT_FALSE(log[1].sp);
  EXPECT_EQ(log[1].rows_padded, 2);
}

TEST(Scheduler, DecodeRowsComeBeforePrefillChunks) {
  EngineOptions o;
  o.chunked_prefill_max_tokens = 4;
  // The long prompt needs several chunks while the short one is already decoding.
  const auto log = run(o, {{1, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, 4);
  bool saw_mixed = false;
  for (const Recorded& r : log) {
    EXPECT_LE(r.rows_real, 4);
    bool prefill_seen = false;
    for (bool d : r.decode) {
      if (!d) prefill_seen = true;
      EXPECT_FALSE(d && prefill_seen) << "a decode row after a prefill row";
    }
    saw_mixed = saw_mixed || (r.num_decode > 0 && r.num_decode < r.rows_real);
  }
  EXPECT_TRUE(saw_mixed);
}

TEST(Scheduler, SampledTokensReachTheResults) {
  EngineOptions o;
  std::vector<SequenceResult> results;
  run(o, {{1, 2, 3}, {4}}, 5, &results);
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    EXPECT_EQ(r.tokens, std::vector<int32_t>(5, 7));
    EXPECT_EQ(r.logprobs, std::vector<float>(5, -0.5f));
  }
}

}  // namespace
}  // namespace bih::test_scheduler
