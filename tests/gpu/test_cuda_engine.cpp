// Tests of the CUDA engine (models/cuda/cuda_forward.hpp through the harness's make_engine) on the
// tiny model: its logits within bf16 tolerance of the CPU backend; the invariant family bitwise
// batch invariant at TP 1, 2 and 4 (emulated ranks on one GPU) in every graph mode; graph replays
// bitwise equal to eager steps; and the TP=4 SP ring setting batch variant, as on the
// CPU. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "engines/bih_engine.hpp"
#include "engines/cuda/bih_cuda_engine.hpp"
#include "gpu_test_util.hpp"
#include "models/engine.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"

namespace bih {
namespace {

void register_cuda_backend_once() {
  static const bool registered = (cuda::register_cuda_backend(), true);
  (void)registered;
}

Scenario tiny_scenario(Backend backend, int tp) {
  Scenario s;
  s.model.preset = "tiny";
  s.backend = backend;
  s.tp = tp;
  s.plan.max_model_len = 128;
  s.plan.max_num_seqs = 16;
  return s;
}

std::vector<std::vector<int32_t>> prompts(int count) {
  PromptSpec spec;
  spec.count = count;
  spec.min_len = 5;
  spec.max_len = 40;
  spec.seed = 3;
  return make_prompts(spec, 2048, "test");
}

struct BothRuns {
  std::vector<SequenceResult> batched;
  std::vector<SequenceResult> alone;
};

// The prompts together in one batch, then each alone, in one engine.
BothRuns run_both(const Scenario& s, int count, int max_tokens) {
  register_cuda_backend_once();
  EngineBundle b = make_engine(s);
  const auto ps = prompts(count);
  BothRuns run;
  run.batched = b.engine->generate(ps, max_tokens);
  for (const auto& p : ps) run.alone.push_back(b.engine->generate({p}, max_tokens)[0]);
  return run;
}

// Number of sequences whose tokens or logprob bits differ.
int differing(const std::vector<SequenceResult>& a, const std::vector<SequenceResult>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool same = a[i].tokens == b[i].tokens && a[i].logprobs.size() == b[i].logprobs.size();
    for (size_t t = 0; same && t < a[i].logprobs.size(); ++t) {
      same = std::bit_cast<uint32_t>(a[i].logprobs[t]) == std::bit_cast<uint32_t>(b[i].logprobs[t]);
    }
    n += same ? 0 : 1;
  }
  return n;
}

TEST(CudaEngine, LogitsWithinBf16ToleranceOfTheCpuBackend) {
  BIH_SKIP_WITHOUT_GPU();
  register_cuda_backend_once();
  const std::vector<int32_t> tokens = prompts(1)[0];
  for (int tp : {1, 4}) {
    EngineBundle cpu = make_engine(tiny_scenario(Backend::cpu, tp));
    EngineBundle gpu = make_engine(tiny_scenario(Backend::cuda, tp));
    EXPECT_EQ(gpu.backend.rfind("cuda(", 0), 0u) << gpu.backend;
    const std::vector<bf16> a = cpu.engine->prefill_logits(tokens);
    const std::vector<bf16> g = gpu.engine->prefill_logits(tokens);
    ASSERT_EQ(a.size(), g.size());
    // Tolerance: the two backends reduce GEMMs in different K orders, so logits agree to bf16
    // rounding compounded over 4 layers; the CPU backend is within 0.011 of fp64 on this model.
    double max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double(to_float(a[i])) - double(to_float(g[i]))));
    }
    EXPECT_LE(max_abs, 0.03) << "tp=" << tp;
  }
}

class CudaEngineInvariance : public ::testing::TestWithParam<std::tuple<int, GraphMode>> {};

TEST_P(CudaEngineInvariance, InvariantFamilyIsBitwiseBatchInvariant) {
  BIH_SKIP_WITHOUT_GPU();
  const auto [tp, mode] = GetParam();
  Scenario s = tiny_scenario(Backend::cuda, tp);
  s.graph_mode = mode;
  s.sp_enabled = tp > 1;
  s.reduce_scatter = ReduceOrder::fixed;  // an invariant order, so any difference is a kernel's
  s.all_reduce = ReduceOrder::tree;
  const BothRuns run = run_both(s, 12, 8);
  EXPECT_EQ(differing(run.batched, run.alone), 0);
}

INSTANTIATE_TEST_SUITE_P(TpAndGraphs, CudaEngineInvariance,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(GraphMode::none, GraphMode::piecewise,
                                                              GraphMode::full)),
                         [](const auto& info) {
                           return "tp" + std::to_string(std::get<0>(info.param)) + "_graph_" +
                                  to_string(std::get<1>(info.param));
                         });

TEST(CudaEngine, GraphReplaysEqualEagerSteps) {
  BIH_SKIP_WITHOUT_GPU();
  register_cuda_backend_once();
  const auto ps = prompts(6);
  std::vector<std::vector<SequenceResult>> results;
  for (GraphMode mode : {GraphMode::none, GraphMode::piecewise, GraphMode::full}) {
    Scenario s = tiny_scenario(Backend::cuda, 2);
    s.graph_mode = mode;
    EngineBundle b = make_engine(s);
    // Twice: the first run warms up and captures, the second replays the graphs.
    b.engine->generate(ps, 10);
    results.push_back(b.engine->generate(ps, 10));
  }
  EXPECT_EQ(differing(results[0], results[1]), 0) << "piecewise";
  EXPECT_EQ(differing(results[0], results[2]), 0) << "full";
}

TEST(CudaEngine, Tp4SequenceParallelRingIsBatchVariantAsOnTheCpu) {
  BIH_SKIP_WITHOUT_GPU();
  Scenario s = tiny_scenario(Backend::cuda, 4);
  s.sp_enabled = true;
  s.reduce_scatter = ReduceOrder::ring;
  const BothRuns run = run_both(s, 12, 8);
  EXPECT_GT(differing(run.batched, run.alone), 0);
}

TEST(CudaEngine, VendorKernelsAreBatchVariant) {
  BIH_SKIP_WITHOUT_GPU();
  Scenario s = tiny_scenario(Backend::cuda, 1);
  s.kernels = KernelFamily::vendor;
  const BothRuns run = run_both(s, 12, 8);
  EXPECT_GT(differing(run.batched, run.alone), 0);
}

}  // namespace
}  // namespace bih
