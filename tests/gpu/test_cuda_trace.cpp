// test_cuda_trace.cpp: the CUDA engine's trace capture, which bih explain walks, against the CPU
// engine's. Both trace the same entries (layer, op, rank, position, row length); the embedding
// rows, an exact lookup of weights both backends make bit for bit, are bitwise equal; and the
// divergence the CPU localizes at TP=4 with SP's ring reduce_scatter is localized on CUDA too.
// The CUDA side downloads each op's traced rows with one wait (cuda_forward_layers.cpp): a wrong
// residual-stream row offset shows up here as an embedding row that differs, a lost entry as a
// missing key; the sharded ops' values are only compared between the CUDA contexts (localize).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engines/bih_engine.hpp"
#include "engines/cuda/bih_cuda_engine.hpp"
#include "gpu_test_util.hpp"
#include "harness/explain.hpp"
#include "models/trace.hpp"
#include "spec/plan.hpp"
#include "spec/scenario_file.hpp"

namespace bih {
namespace {

const std::string kMatrix = std::string(BIH_SOURCE_DIR) + "/scenarios/issue-56370.json";

void register_cuda_backend_once() {
  static const bool registered = (cuda::register_cuda_backend(), true);
  (void)registered;
}

// The CPU issue matrix's case `name` on `backend`, with a small plan: 8 prompts, bs=1 vs bs=8.
Scenario issue_case(const std::string& name, const std::string& backend) {
  const std::vector<std::string> sets{"plan.prompts.count=8", "plan.max_tokens=4",
                                      "plan.batch_sizes=[1,8]", "backend=" + backend};
  for (const Scenario& s : load_scenarios(kMatrix, sets).scenarios) {
    if (s.name == name) return s;
  }
  ADD_FAILURE() << "no case " << name << " in " << kMatrix;
  return {};
}

using Key = std::tuple<int, std::string, int, int>;  // layer, op, rank, position

// Prompt `prompt` alone, its token `step` traced.
std::map<Key, TraceEntry> trace_alone(const Scenario& s, int prompt, int step) {
  EngineBundle b = make_engine(s);
  const auto prompts = make_prompts(s.plan.prompts, b.config.vocab_size, s.source_file);
  TraceSink sink;
  b.engine->set_trace(TraceRequest{0, step}, &sink);
  b.engine->generate({prompts.at(prompt)}, step + 1);
  b.engine->set_trace({}, nullptr);
  std::map<Key, TraceEntry> by_key;
  for (TraceEntry& e : sink.sorted()) {
    const Key key{e.layer, e.op, e.rank, e.position};
    by_key[key] = std::move(e);
  }
  return by_key;
}

TEST(CudaTrace, SameEntriesAsTheCpuEngineAndExactEmbeddingRows) {
  BIH_SKIP_WITHOUT_GPU();
  register_cuda_backend_once();
  // SP on: the residual stream's rows are traced by the rank that holds them (offsets by rank).
  for (int step : {0, 2}) {  // the prefill (every prompt row) and a decode step (one row)
    const auto cpu = trace_alone(issue_case("tp4-sp-fixed", "cpu"), 3, step);
    const auto gpu = trace_alone(issue_case("tp4-sp-fixed", "cuda"), 3, step);
    ASSERT_GT(cpu.size(), 4u * 4 * 8) << "step " << step;
    EXPECT_EQ(gpu.size(), cpu.size()) << "step " << step;
    int embeddings = 0;
    for (const auto& [key, c] : cpu) {
      const auto it = gpu.find(key);
      ASSERT_NE(it, gpu.end()) << "step " << step << ": no CUDA entry for layer "
                               << std::get<0>(key) << " " << std::get<1>(key) << " rank "
                               << std::get<2>(key) << " position " << std::get<3>(key);
      const TraceEntry& g = it->second;
      ASSERT_EQ(g.bits.size(), c.bits.size()) << c.op;
      EXPECT_EQ(g.float32, c.float32) << c.op;
      if (c.op == "embedding") {
        ++embeddings;
        EXPECT_EQ(g.bits, c.bits) << "the embedding row of position " << c.position;
      }
    }
    EXPECT_GT(embeddings, 0) << "step " << step;
  }
}

TEST(CudaTrace, LocalizesTheTp4SpRingReduceScatter) {
  BIH_SKIP_WITHOUT_GPU();
  register_cuda_backend_once();
  const Localization ring =
      localize(issue_case("tp4-sp-ring", "cuda"), "batch", "bs=1", "bs=8", 0, 0);
  ASSERT_TRUE(ring.diverged) << ring.summary;
  EXPECT_EQ(ring.layer, 0) << ring.summary;
  EXPECT_EQ(ring.op, "attn_reduce") << ring.summary;
  EXPECT_TRUE(ring.inputs_equal) << ring.summary;
  EXPECT_NE(ring.detail_b.find("reduce_scatter"), std::string::npos) << ring.detail_b;

  // The fixed reduce_scatter: every traced op equal, and as many compared as on the CPU.
  const Localization fixed_gpu =
      localize(issue_case("tp4-sp-fixed", "cuda"), "batch", "bs=1", "bs=8", 3, 0);
  const Localization fixed_cpu =
      localize(issue_case("tp4-sp-fixed", "cpu"), "batch", "bs=1", "bs=8", 3, 0);
  EXPECT_FALSE(fixed_gpu.diverged) << fixed_gpu.summary;
  EXPECT_EQ(fixed_gpu.entries_compared, fixed_cpu.entries_compared);
}

}  // namespace
}  // namespace bih
