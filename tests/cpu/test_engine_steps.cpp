// The engine's step API (add / step / done / take): continuous batching on the tiny model.
// Sequences that join a running batch between steps must, under invariant kernels, give bitwise
// what they give alone; generate() must be exactly add-all + step-until-done; max_num_seqs holds.
#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <stdexcept>

#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"
#include "spec/plan.hpp"

namespace bih::test_engine_steps {
namespace {

std::shared_ptr<const ModelWeights> tiny_weights() {
  static auto weights =
      std::make_shared<const ModelWeights>(synthetic_weights(*preset_config("tiny"), /*seed=*/0));
  return weights;
}

struct TestEngine {
  std::unique_ptr<EmulatedGroup> group;
  std::unique_ptr<Engine> engine;
};

TestEngine make_engine(EngineOptions options) {
  TestEngine t;
  t.group = std::make_unique<EmulatedGroup>(options.tp, CollectiveOrders{});
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

void expect_bitwise_equal(const SequenceResult& a, const SequenceResult& b, int prompt) {
  ASSERT_EQ(a.tokens, b.tokens) << "prompt " << prompt;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "prompt " << prompt;
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    ASSERT_EQ(std::bit_cast<uint32_t>(a.logprobs[t]), std::bit_cast<uint32_t>(b.logprobs[t]))
        << "prompt " << prompt << " token " << t;
  }
}

// Steps until every id is done and takes the results, in id order.
std::vector<SequenceResult> run_to_end(Engine& engine, const std::vector<SequenceId>& ids) {
  for (int guard = 0; !engine.idle() && guard < 10000; ++guard) engine.step();
  std::vector<SequenceResult> out;
  for (SequenceId id : ids) out.push_back(engine.take(id));
  return out;
}

TEST(EngineSteps, SequencesJoiningMidFlightGiveTheirAloneBitsUnderInvariantKernels) {
  EngineOptions options;                    // invariant kernels
  options.chunked_prefill_max_tokens = 24;  // prefills split across steps, beside decodes
  auto t = make_engine(options);
  const auto batch = prompts(6, 8, 40, 21);
  std::vector<SequenceResult> alone;
  for (const auto& p : batch) alone.push_back(t.engine->generate({p}, 7)[0]);

  std::vector<SequenceId> ids;
  ids.push_back(t.engine->add(batch[0], 7));
  ids.push_back(t.engine->add(batch[1], 7));
  int max_ran = 0;
  for (int s = 0; s < 3; ++s) max_ran = std::max<int>(max_ran, t.engine->step().ran.size());
  ids.push_back(t.engine->add(batch[2], 7));  // joins while 0 and 1 decode
  for (int s = 0; s < 2; ++s) max_ran = std::max<int>(max_ran, t.engine->step().ran.size());
  for (int i = 3; i < 6; ++i) ids.push_back(t.engine->add(batch[i], 7));
  const auto joined = run_to_end(*t.engine, ids);
  EXPECT_GE(max_ran, 3);  // the joiners really shared steps with the running ones
  for (size_t i = 0; i < batch.size(); ++i) {
    expect_bitwise_equal(alone[i], joined[i], static_cast<int>(i));
  }
}

// generate() is add-all + step-until-done: the same schedule, so the same bits even where the
// kernels are batch variant, and the same stats.
TEST(EngineSteps, GenerateIsAddAllThenStepUntilDone) {
  EngineOptions options;
  options.kernels = KernelFamily::vendor;
  options.prefix_caching = true;
  options.chunked_prefill_max_tokens = 32;
  auto a = make_engine(options);
  auto b = make_engine(options);
  const auto batch = prompts(12, 4, 40, 5);
  GenerateStats stats;
  const auto generated = a.engine->generate(batch, 5, &stats);
  std::vector<SequenceId> ids;
  for (const auto& p : batch) ids.push_back(b.engine->add(p, 5));
  GenerateStats step_stats;
  while (!b.engine->idle()) b.engine->step(&step_stats);
  for (size_t i = 0; i < batch.size(); ++i) {
    expect_bitwise_equal(generated[i], b.engine->take(ids[i]), static_cast<int>(i));
  }
  EXPECT_EQ(stats.steps, step_stats.steps);
  EXPECT_EQ(stats.rows, step_stats.rows);
  EXPECT_EQ(stats.real_rows, step_stats.real_rows);
  EXPECT_EQ(stats.prefix_hit_tokens, step_stats.prefix_hit_tokens);
}

TEST(EngineSteps, SequencesBeyondMaxNumSeqsWaitInOrder) {
  EngineOptions options;
  options.max_num_seqs = 2;
  auto t = make_engine(options);
  const auto batch = prompts(3, 6, 6, 9);
  const SequenceId first = t.engine->add(batch[0], 1);
  const SequenceId second = t.engine->add(batch[1], 3);
  const SequenceId third = t.engine->add(batch[2], 2);
  const StepReport one = t.engine->step();
  EXPECT_EQ(one.ran, (std::vector<SequenceId>{first, second}));
  EXPECT_EQ(one.finished, std::vector<SequenceId>{first});
  EXPECT_EQ(t.engine->waiting(), 1);
  EXPECT_TRUE(t.engine->done(first));
  EXPECT_FALSE(t.engine->done(third));
  const StepReport two = t.engine->step();  // the third takes the freed place
  EXPECT_EQ(two.ran, (std::vector<SequenceId>{second, third}));
  EXPECT_EQ(t.engine->waiting(), 0);
  EXPECT_EQ(t.engine->running(), 2);
  const auto results = run_to_end(*t.engine, {second, third});
  EXPECT_EQ(results[0].tokens.size(), 3u);
  EXPECT_EQ(results[1].tokens.size(), 2u);
  EXPECT_EQ(t.engine->take(first).tokens.size(), 1u);
  // generate() still refuses a group larger than max_num_seqs, as before.
  EXPECT_THROW(t.engine->generate(batch, 1), std::invalid_argument);
}

TEST(EngineSteps, AddRefusesWhatTheEngineCannotRun) {
  EngineOptions options;
  options.max_model_len = 32;
  auto t = make_engine(options);
  const int vocab = tiny_weights()->config.vocab_size;
  EXPECT_THROW(t.engine->add({}, 4), std::invalid_argument);
  EXPECT_THROW(t.engine->add({1, vocab}, 4), std::invalid_argument);
  EXPECT_THROW(t.engine->add({1, -1}, 4), std::invalid_argument);
  EXPECT_THROW(t.engine->add({1, 2, 3}, 30), std::invalid_argument);  // 33 > 32
  EXPECT_THROW(t.engine->add({1, 2, 3}, 0), std::invalid_argument);
  EXPECT_TRUE(t.engine->idle());                                    // nothing refused was queued
  const SequenceId id = t.engine->add({1, 2, 3}, 29);               // exactly max_model_len
  EXPECT_THROW(t.engine->take(id), std::logic_error);               // not done yet
  EXPECT_THROW(t.engine->generate({{1, 2}}, 2), std::logic_error);  // not idle
  t.engine->abort_all();
  EXPECT_TRUE(t.engine->idle());
  EXPECT_EQ(t.engine->generate({{1, 2}}, 2)[0].tokens.size(), 2u);
}

}  // namespace
}  // namespace bih::test_engine_steps
