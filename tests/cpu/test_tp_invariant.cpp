// kernels tp_invariant (models/tree_sum.hpp): bits independent of the batch AND of the TP size.
//
// GEMM level: a row's bits do not depend on M; column-parallel slices and row-parallel partials
// recombined through the emulated fp32 tree collectives give TP=1's bits at TP 2, 4 and 8, while
// the invariant family's bf16 partials do not. Engine level on the tiny preset: every TP, SP,
// graph-padding, prefix-cache and chunked-prefill setting generates bitwise what TP=1 eager does,
// alone and in a batch; the invariant and vendor families at TP=4 do not. Driver level: `bih run`
// says invariant at TP=4 with SP, and `unsupported` where tp_invariant cannot be honoured.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/json_file.hpp"
#include "engines/bih_engine.hpp"
#include "models/comm/emulated.hpp"
#include "models/cpu/kernels.hpp"
#include "models/engine.hpp"
#include "models/tree_sum.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"
#include "test_util.hpp"

namespace bih::test_tp_invariant {
namespace {

using nlohmann::json;

// "" when equal; else the first differing element with both bit patterns in hex.
std::string first_difference(const std::vector<bf16>& got, const std::vector<bf16>& want) {
  if (got.size() != want.size()) {
    return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].bits != want[i].bits) {
      char text[96];
      std::snprintf(text, sizeof text, "element %zu: got 0x%04x, want 0x%04x", i, got[i].bits,
                    want[i].bits);
      return text;
    }
  }
  return "";
}

std::vector<bf16> gemm_of(KernelFamily family, const std::vector<bf16>& x,
                          const std::vector<bf16>& w, int M, int N, int K) {
  std::vector<bf16> y(static_cast<size_t>(M) * N);
  cpu::gemm(family, x.data(), w.data(), y.data(), M, N, K);
  return y;
}

// Columns [c0, c0 + cols) of a row-major [rows, ld] matrix.
std::vector<bf16> columns(const std::vector<bf16>& a, int rows, int ld, int c0, int cols) {
  std::vector<bf16> out;
  for (int r = 0; r < rows; ++r) {
    const bf16* row = a.data() + static_cast<size_t>(r) * ld + c0;
    out.insert(out.end(), row, row + cols);
  }
  return out;
}

// Rank r's row-parallel share at TP=tp: K columns [r*K/tp, (r+1)*K/tp) of x and of w.
struct RowParallelShard {
  std::vector<bf16> x, w;
  int K_local = 0;
};
RowParallelShard row_shard(const std::vector<bf16>& x, const std::vector<bf16>& w, int M, int N,
                           int K, int tp, int r) {
  const int K_local = K / tp;
  return {columns(x, M, K, r * K_local, K_local), columns(w, N, K, r * K_local, K_local), K_local};
}

TEST(TpInvariantGemm, ARowsBitsDoNotDependOnM) {
  for (int K : {256, 768}) {
    const int N = 37;  // not a multiple of the 4-row block: the one-row tail path too
    const int M_max = 513;
    const auto x = testing::random_bf16(static_cast<size_t>(M_max) * K, 1);
    const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 2);
    const auto all = gemm_of(KernelFamily::tp_invariant, x, w, M_max, N, K);
    for (int M : {1, 7, 64, 513}) {
      const std::vector<bf16> x_m(x.begin(), x.begin() + static_cast<size_t>(M) * K);
      const std::vector<bf16> want(all.begin(), all.begin() + static_cast<size_t>(M) * N);
      EXPECT_EQ(first_difference(gemm_of(KernelFamily::tp_invariant, x_m, w, M, N, K), want), "")
          << "K=" << K << " M=" << M;
    }
  }
}

TEST(TpInvariantGemm, FullPartialRoundedOnceIsTheGemm) {
  const int M = 9, N = 13, K = 768;
  const auto x = testing::random_bf16(static_cast<size_t>(M) * K, 3);
  const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 4);
  std::vector<float> partial(static_cast<size_t>(M) * N);
  cpu::gemm_tp_invariant_partial(x.data(), w.data(), partial.data(), M, N, K, kTpInvariantChunks);
  std::vector<bf16> rounded;
  for (float f : partial) rounded.push_back(to_bf16(f));
  EXPECT_EQ(first_difference(rounded, gemm_of(KernelFamily::tp_invariant, x, w, M, N, K)), "");
}

TEST(TpInvariantGemm, ColumnParallelSlicesAreTp1Columns) {
  const int M = 7, N = 64, K = 256;
  const auto x = testing::random_bf16(static_cast<size_t>(M) * K, 5);
  const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 6);
  const auto full = gemm_of(KernelFamily::tp_invariant, x, w, M, N, K);
  for (int tp : {2, 4, 8}) {
    const int N_local = N / tp;
    for (int r = 0; r < tp; ++r) {
      const std::vector<bf16> w_r(w.begin() + static_cast<size_t>(r) * N_local * K,
                                  w.begin() + static_cast<size_t>(r + 1) * N_local * K);
      EXPECT_EQ(first_difference(gemm_of(KernelFamily::tp_invariant, x, w_r, M, N_local, K),
                                 columns(full, M, N, r * N_local, N_local)),
                "")
          << "tp=" << tp << " rank " << r;
    }
  }
}

// Row-parallel at TP=tp: each rank's fp32 subtree, then the emulated group's tree all_reduce.
// The group's bf16 orders are set to `arrival` on purpose: the tree collectives ignore them.
std::vector<bf16> row_parallel_all_reduce(const std::vector<bf16>& x, const std::vector<bf16>& w,
                                          int M, int N, int K, int tp) {
  EmulatedGroup group(tp, {ReduceOrder::arrival, ReduceOrder::arrival, ReduceOrder::ring});
  std::vector<std::vector<bf16>> out(tp, std::vector<bf16>(static_cast<size_t>(M) * N));
  const auto failures = testing::run_rank_threads(tp, [&](int r) {
    const RowParallelShard s = row_shard(x, w, M, N, K, tp, r);
    std::vector<float> partial(static_cast<size_t>(M) * N);
    cpu::gemm_tp_invariant_partial(s.x.data(), s.w.data(), partial.data(), M, N, s.K_local,
                                   kTpInvariantChunks / tp);
    group.rank(r).all_reduce_tree_f32(partial.data(), out[r].data(), partial.size());
  });
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(failures[r], "") << "rank " << r;
    EXPECT_EQ(first_difference(out[r], out[0]), "") << "rank " << r << " disagrees with rank 0";
  }
  return out[0];
}

TEST(TpInvariantGemm, RowParallelThroughTheTreeAllReduceIsTp1) {
  for (int K : {256, 768}) {
    const int M = 5, N = 48;
    const auto x = testing::random_bf16(static_cast<size_t>(M) * K, 7);
    const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 8);
    const auto tp1 = gemm_of(KernelFamily::tp_invariant, x, w, M, N, K);
    for (int tp : {1, 2, 4, 8}) {
      EXPECT_EQ(first_difference(row_parallel_all_reduce(x, w, M, N, K, tp), tp1), "")
          << "K=" << K << " tp=" << tp;
    }
  }
}

TEST(TpInvariantGemm, RowParallelThroughTheTreeReduceScatterIsTp1) {
  const int M = 16, N = 40, K = 768;  // M rows split in tp blocks of rows, as SP does
  const auto x = testing::random_bf16(static_cast<size_t>(M) * K, 9);
  const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 10);
  const auto tp1 = gemm_of(KernelFamily::tp_invariant, x, w, M, N, K);
  for (int tp : {2, 4, 8}) {
    EmulatedGroup group(tp, {ReduceOrder::ring, ReduceOrder::arrival, ReduceOrder::ring});
    const size_t block = static_cast<size_t>(M / tp) * N;
    std::vector<std::vector<bf16>> out(tp, std::vector<bf16>(block));
    const auto failures = testing::run_rank_threads(tp, [&](int r) {
      const RowParallelShard s = row_shard(x, w, M, N, K, tp, r);
      std::vector<float> partial(static_cast<size_t>(M) * N);
      cpu::gemm_tp_invariant_partial(s.x.data(), s.w.data(), partial.data(), M, N, s.K_local,
                                     kTpInvariantChunks / tp);
      group.rank(r).reduce_scatter_tree_f32(partial.data(), out[r].data(), block);
    });
    for (int r = 0; r < tp; ++r) {
      ASSERT_EQ(failures[r], "") << "rank " << r;
      const std::vector<bf16> want(tp1.begin() + r * block, tp1.begin() + (r + 1) * block);
      EXPECT_EQ(first_difference(out[r], want), "") << "tp=" << tp << " rank " << r;
    }
  }
}

// The negative: the invariant family's ranks round their partials to bf16 and the collective adds
// bf16 values, so TP=4 moves bits that TP=1 does not. (Otherwise the tests above prove nothing.)
TEST(TpInvariantGemm, InvariantFamilyRowParallelDiffersFromTp1) {
  const int M = 8, N = 64, K = 768, tp = 4;
  const auto x = testing::random_bf16(static_cast<size_t>(M) * K, 11);
  const auto w = testing::random_bf16(static_cast<size_t>(N) * K, 12);
  const auto tp1 = gemm_of(KernelFamily::invariant, x, w, M, N, K);
  EmulatedGroup group(tp, {ReduceOrder::tree, ReduceOrder::ring, ReduceOrder::ring});
  std::vector<std::vector<bf16>> partials(tp);
  const auto failures = testing::run_rank_threads(tp, [&](int r) {
    const RowParallelShard s = row_shard(x, w, M, N, K, tp, r);
    partials[r] = gemm_of(KernelFamily::invariant, s.x, s.w, M, N, s.K_local);
    group.rank(r).all_reduce(partials[r].data(), partials[r].size());
  });
  for (const auto& f : failures) ASSERT_EQ(f, "");
  EXPECT_NE(first_difference(partials[0], tp1), "");
}

TEST(TpInvariantGemm, KThatDoesNotSplitIntoEightChunksIsRefused) {
  const auto x = testing::random_bf16(12, 13);
  std::vector<bf16> y(1);
  EXPECT_THROW(cpu::gemm(KernelFamily::tp_invariant, x.data(), x.data(), y.data(), 1, 1, 12),
               std::invalid_argument);
  std::vector<float> y32(1);
  EXPECT_THROW(cpu::gemm_tp_invariant_partial(x.data(), x.data(), y32.data(), 1, 1, 12, 8),
               std::invalid_argument);
  EXPECT_THROW(cpu::gemm_tp_invariant_partial(x.data(), x.data(), y32.data(), 1, 1, 12, 3),
               std::invalid_argument);
}

TEST(TpInvariantCollective, TreeOverEightRanksIsTheChunkTree) {
  // Values whose sum depends on the grouping: the tree must be ((0+1)+(2+3))+((4+5)+(6+7)).
  const float v[8] = {1e8f, 1.f, -1e8f, 1.f, 3.f, 1e-8f, 5.f, -2.f};
  std::vector<const float*> inputs;
  for (const float& f : v) inputs.push_back(&f);
  bf16 out;
  tree_f32_sum(inputs, 0, 1, &out);
  const float want = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  EXPECT_EQ(out.bits, to_bf16(want).bits);
  EXPECT_NE(to_bf16(want).bits, to_bf16(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]).bits)
      << "the values do not tell the tree from a chain";
  inputs.pop_back();  // 7 ranks: no whole subtrees
  EXPECT_THROW(tree_f32_sum(inputs, 0, 1, &out), std::invalid_argument);
}

// ---- scenario validation ------------------------------------------------------------------------

// A config-only checkpoint folder (enough for validation) with the given sizes.
std::string config_folder(const std::string& name, int hidden, int heads, int head_dim,
                          int intermediate, int vocab) {
  const auto dir = testing::fresh_dir("tp-invariant-" + name);
  const json config = {{"architectures", {"Qwen3ForCausalLM"}},
                       {"model_type", "qwen3"},
                       {"hidden_size", hidden},
                       {"num_hidden_layers", 1},
                       {"num_attention_heads", heads},
                       {"num_key_value_heads", heads},
                       {"head_dim", head_dim},
                       {"intermediate_size", intermediate},
                       {"vocab_size", vocab},
                       {"rms_norm_eps", 1e-6},
                       {"rope_theta", 10000},
                       {"max_position_embeddings", 512},
                       {"tie_word_embeddings", true}};
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir.string();
}

TEST(TpInvariantScenario, AKThatDoesNotSplitIntoEightChunksIsAnInputError) {
  const std::string path = config_folder("k", 100, 5, 20, 300, 64);
  const std::string e = testing::input_error_of([&] {
    scenario_from_json({{"model", {{"path", path}}}, {"kernels", "tp_invariant"}}, "s.json");
  });
  EXPECT_NE(e.find("s.json"), std::string::npos) << e;
  EXPECT_NE(e.find("at /kernels"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size=100"), std::string::npos) << e;
  EXPECT_NE(e.find("intermediate_size=300"), std::string::npos) << e;
  EXPECT_NO_THROW(
      scenario_from_json({{"model", {{"path", path}}}, {"kernels", "invariant"}}, "s.json"));
}

TEST(TpInvariantScenario, ATpThatHoldsNoWholeSubtreeIsAnInputError) {
  // tp=6 divides every sharded size of this model, but 6 ranks cannot split 8 chunks.
  const std::string path = config_folder("tp", 96, 12, 8, 192, 96);
  const json base = {{"model", {{"path", path}}}, {"parallel", {{"tp", 6}}}};
  EXPECT_NO_THROW(scenario_from_json(base, "s.json"));
  json s = base;
  s["kernels"] = "tp_invariant";
  const std::string e = testing::input_error_of([&] { scenario_from_json(s, "s.json"); });
  EXPECT_NE(e.find("at /parallel/tp"), std::string::npos) << e;
  EXPECT_NE(e.find("1, 2, 4 or 8"), std::string::npos) << e;
  s["parallel"]["tp"] = 4;
  const Scenario ok = scenario_from_json(s, "s.json");
  EXPECT_NE(ok.id().find("kernels=tp_invariant"), std::string::npos) << ok.id();
}

// ---- engine level, tiny preset ----------------------------------------------------------------

std::shared_ptr<const ModelWeights> tiny_weights() {
  static auto weights =
      std::make_shared<const ModelWeights>(synthetic_weights(*preset_config("tiny"), /*seed=*/0));
  return weights;
}

std::vector<std::vector<int32_t>> batch_prompts() {
  PromptSpec spec;
  spec.count = 6;
  spec.min_len = 5;
  spec.max_len = 40;
  spec.seed = 21;
  return make_prompts(spec, tiny_weights()->config.vocab_size, "");
}

constexpr int kMaxTokens = 6;

struct Generations {
  std::vector<SequenceResult> batch;  // all prompts together
  std::vector<SequenceResult> alone;  // each prompt at bs=1
  GenerateStats stats;                // of the batch run
};

Generations generate(EngineOptions options, CollectiveOrders orders = {}) {
  EmulatedGroup group(options.tp, orders);
  std::vector<Communicator*> comms;
  for (int r = 0; r < options.tp; ++r) comms.push_back(&group.rank(r));
  Engine engine(tiny_weights(), options, comms);
  const auto prompts = batch_prompts();
  Generations g;
  g.batch = engine.generate(prompts, kMaxTokens, &g.stats);
  if (options.prefix_caching) {  // the second run hits the cache
    GenerateStats hit;
    g.batch = engine.generate(prompts, kMaxTokens, &hit);
    EXPECT_GT(hit.prefix_hit_tokens, 0) << "the prefix cache was never hit";
  }
  for (const auto& p : prompts) g.alone.push_back(engine.generate({p}, kMaxTokens)[0]);
  return g;
}

// Steps of `got` whose token or logprob bits differ from `want`.
int differing_steps(const std::vector<SequenceResult>& got,
                    const std::vector<SequenceResult>& want) {
  int differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t t = 0; t < want[i].tokens.size(); ++t) {
      differ +=
          got[i].tokens[t] != want[i].tokens[t] || std::bit_cast<uint32_t>(got[i].logprobs[t]) !=
                                                       std::bit_cast<uint32_t>(want[i].logprobs[t]);
    }
  }
  return differ;
}

void expect_bitwise(const std::vector<SequenceResult>& got, const std::vector<SequenceResult>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].tokens, want[i].tokens) << what << ", prompt " << i;
    for (size_t t = 0; t < want[i].logprobs.size(); ++t) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i].logprobs[t]),
                std::bit_cast<uint32_t>(want[i].logprobs[t]))
          << what << ", prompt " << i << " step " << t;
    }
  }
}

EngineOptions tp_invariant_options(int tp) {
  EngineOptions o;
  o.kernels = KernelFamily::tp_invariant;
  o.tp = tp;
  return o;
}

const Generations& tp1_eager() {
  static const Generations g = generate(tp_invariant_options(1));
  return g;
}

TEST(TpInvariantEngine, Tp1EagerIsBatchInvariant) {
  expect_bitwise(tp1_eager().alone, tp1_eager().batch, "tp=1 bs=1 vs batch");
}

struct Variant {
  std::string name;
  EngineOptions options;
  CollectiveOrders orders;
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (int tp : {1, 2, 4, 8}) {
    for (bool sp : {false, true}) {
      if (tp == 1 && sp) continue;
      EngineOptions o = tp_invariant_options(tp);
      o.sp_enabled = sp;
      o.sp_min_tokens = 1;
      out.push_back({"tp=" + std::to_string(tp) + (sp ? " sp=on(min=1)" : " sp=off"), o, {}});
    }
  }
  EngineOptions graphs = tp_invariant_options(4);
  graphs.graph_mode = GraphMode::full;
  graphs.capture_sizes = {4, 8, 16};
  out.push_back({"tp=4 graph=full capture=4-8-16", graphs, {}});
  EngineOptions graphs_sp = graphs;
  graphs_sp.tp = 8;
  graphs_sp.sp_enabled = true;
  out.push_back({"tp=8 sp=on graph=full", graphs_sp, {}});
  EngineOptions prefix = tp_invariant_options(2);
  prefix.prefix_caching = true;
  out.push_back({"tp=2 prefix=on", prefix, {}});
  EngineOptions chunked = tp_invariant_options(4);
  chunked.chunked_prefill_max_tokens = 7;
  chunked.sp_enabled = true;
  out.push_back({"tp=4 sp=on chunk=7", chunked, {}});
  // The bf16 collective orders are irrelevant: the row-parallel sums never use them.
  EngineOptions sp4 = tp_invariant_options(4);
  sp4.sp_enabled = true;
  out.push_back({"tp=4 sp=on ar=arrival rs=arrival",
                 sp4,
                 {ReduceOrder::arrival, ReduceOrder::arrival, ReduceOrder::ring}});
  return out;
}

TEST(TpInvariantEngine, EveryTpSpGraphCacheAndChunkSettingGivesTp1EagerBits) {
  for (const Variant& v : variants()) {
    const Generations g = generate(v.options, v.orders);
    expect_bitwise(g.batch, tp1_eager().batch, v.name + ", batch");
    expect_bitwise(g.alone, tp1_eager().batch, v.name + ", bs=1");
    if (v.options.sp_enabled) EXPECT_GT(g.stats.sp_steps, 0) << v.name << ": SP never applied";
    if (v.options.graph_mode == GraphMode::full) {
      EXPECT_GT(g.stats.rows, g.stats.real_rows) << v.name << ": graph padding never happened";
    }
    if (v.options.chunked_prefill_max_tokens > 0) {
      EXPECT_GT(g.stats.steps, tp1_eager().stats.steps) << v.name << ": prefill was not chunked";
    }
  }
}

TEST(TpInvariantEngine, InvariantAndVendorFamiliesMoveBitsWithTp) {
  for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
    EngineOptions one;
    one.kernels = family;
    EngineOptions four = one;
    four.tp = 4;
    const int differ = differing_steps(generate(four).batch, generate(one).batch);
    EXPECT_GT(differ, 0) << to_string(family) << " at tp=4 gave tp=1's bits: the negative is gone";
  }
}

// ---- driver level: bih run ----------------------------------------------------------------------

json run_one(const std::string& name, const json& scenario) {
  const auto dir = testing::fresh_dir("tp-invariant-" + name);
  std::ofstream(dir / "s.json") << scenario.dump(2);
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "o").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "o");
  if (files.size() != 1) {
    ADD_FAILURE() << "expected one report\n" << r.output;
    return json::object();
  }
  return read_json_file(files[0].string());
}

json scenario_at_tp4_sp() {
  return {{"model", {{"preset", "tiny"}}},
          {"backend", "cpu"},
          {"parallel", {{"tp", 4}}},
          {"sequence_parallel", {{"enabled", true}, {"min_tokens", 1}}},
          {"kernels", "tp_invariant"},
          {"plan", {{"prompts", {{"count", 8}}}, {"max_tokens", 4}}}};
}

TEST(TpInvariantDriver, BihRunAtTp4WithSpIsInvariant) {
  json s = scenario_at_tp4_sp();
  s["expect"] = "invariant";
  const json report = run_one("tp4", s);
  EXPECT_EQ(report.value("verdict", ""), "invariant") << report.dump(2);
  // Unset orders resolve to fixed under tp_invariant: the id never names an order it does not use.
  EXPECT_EQ(report.value("id", ""),
            "tp=4,sp=on(min=1),ar=fixed,rs=fixed,graph=none,prefix=off,kernels=tp_invariant,"
            "model=tiny");
}

// The family runs on CUDA too (tests/gpu/test_cuda_tp_invariant.cpp): a machine without a GPU
// refuses the backend, never the family.
TEST(TpInvariantDriver, CudaIsRefusedOnlyForAMissingGpu) {
  if (bih_gpu_count() > 0) GTEST_SKIP() << "a GPU is visible: the GPU tests run this family";
  json s = scenario_at_tp4_sp();
  s["backend"] = "cuda";
  s["expect"] = "unsupported";
  const json report = run_one("cuda", s);
  EXPECT_EQ(report.value("verdict", ""), "unsupported") << report.dump(2);
  const std::string reason = report.value("reason", "");
  EXPECT_EQ(reason.rfind("backend cuda: ", 0), 0u) << reason;
  EXPECT_EQ(reason.find("tp_invariant"), std::string::npos) << reason;
}

TEST(TpInvariantDriver, AnExplicitRingOrArrivalCollectiveIsUnsupported) {
  json s = scenario_at_tp4_sp();
  s["collectives"] = {{"reduce_scatter", "ring"}};
  s["expect"] = "unsupported";
  const json report = run_one("ring", s);
  EXPECT_EQ(report.value("verdict", ""), "unsupported") << report.dump(2);
  EXPECT_NE(report.value("reason", "").find("collectives.reduce_scatter ring"), std::string::npos)
      << report.value("reason", "");
  s["collectives"] = {{"reduce_scatter", "fixed"}, {"all_reduce", "tree"}};
  s["expect"] = "invariant";
  EXPECT_EQ(run_one("fixed", s).value("verdict", ""), "invariant");
}

}  // namespace
}  // namespace bih::test_tp_invariant
