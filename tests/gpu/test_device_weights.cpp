// Tests of the device weights (models/cuda/device_weights.hpp): every shard that DeviceModel
// generates (synthetic) or uploads (from_host) must equal, bit for bit, the host's shard_for_rank
// of the same weights; the shared tensors must be stored once per GPU; the GPU weights hash must
// equal weights_hash of the host model. The qwen3-1.7b test checks sampled values against the
// documented formula with vLLM's layout written out independently, and times the generation.
// Every test skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cuda/device_weights.hpp"
#include "models/tp_shard.hpp"
#include "models/weights.hpp"

namespace bih {
namespace {

using cuda::DeviceModel;
using cuda::DeviceRankWeights;

constexpr int kDevice = 0;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int> all_ranks(int tp) {
  std::vector<int> ranks(tp);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

std::vector<bf16> download(const bf16* device, size_t count) {
  std::vector<bf16> host(count);
  test::copy_to_host(host.data(), device, count * sizeof(bf16));
  return host;
}

// "" when `count` device values equal `host`'s bit for bit, else the first difference, named.
std::string compare(const std::string& what, const bf16* device, const bf16* host, size_t count) {
  if (device == nullptr) return what + ": null device pointer";
  const std::vector<bf16> got = download(device, count);
  for (size_t i = 0; i < count; ++i) {
    if (got[i].bits != host[i].bits) {
      char detail[96];
      std::snprintf(detail, sizeof(detail), " of %zu: device 0x%04x, host 0x%04x", count,
                    got[i].bits, host[i].bits);
      return what + ": first difference at index " + std::to_string(i) + detail;
    }
  }
  return "";
}

// Every tensor of a device shard against the host shard: the first difference, or "".
std::string compare_rank(const DeviceRankWeights& d, const RankWeights& h, const ModelConfig& c) {
  if (d.rank != h.rank || d.tp != h.tp || d.heads_local != h.heads_local ||
      d.kv_heads_local != h.kv_heads_local || d.intermediate_local != h.intermediate_local ||
      d.vocab_local != h.vocab_local || d.layers.size() != h.layers.size()) {
    return "rank " + std::to_string(d.rank) + ": the shape fields or the layer count differ";
  }
  const size_t H = c.hidden_size, hd = c.head_dim, V = c.vocab_size;
  std::string difference;
  auto check = [&](const std::string& what, const bf16* device, const bf16* host, size_t count) {
    if (difference.empty()) difference = compare(what, device, host, count);
  };
  check("embed_tokens", d.embed_tokens, h.embed_tokens, V * H);
  check("final_norm", d.final_norm, h.final_norm, H);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const cuda::DeviceLayerWeights& dl = d.layers[l];
    const RankLayerWeights& hl = h.layers[l];
    const std::string layer = "layer " + std::to_string(l) + " ";
    check(layer + "input_layernorm", dl.input_layernorm, hl.input_layernorm, H);
    check(layer + "post_attention_layernorm", dl.post_attention_layernorm,
          hl.post_attention_layernorm, H);
    check(layer + "q_norm", dl.q_norm, hl.q_norm, hd);
    check(layer + "k_norm", dl.k_norm, hl.k_norm, hd);
    check(layer + "qkv", dl.qkv, hl.qkv.data(), hl.qkv.size());
    check(layer + "o_proj", dl.o_proj, hl.o_proj.data(), hl.o_proj.size());
    check(layer + "gate_up", dl.gate_up, hl.gate_up.data(), hl.gate_up.size());
    check(layer + "down", dl.down, hl.down.data(), hl.down.size());
  }
  check("lm_head", d.lm_head, h.lm_head.data(), h.lm_head.size());
  return difference;
}

// Every held rank of `model` against shard_for_rank(host, r, tp).
void expect_equal_to_host(const DeviceModel& model, const ModelWeights& host,
                          const std::vector<int>& ranks) {
  for (int r : ranks) {
    SCOPED_TRACE("tp " + std::to_string(model.tp()) + " rank " + std::to_string(r));
    EXPECT_EQ(compare_rank(model.rank(r), shard_for_rank(host, r, model.tp()), host.config), "");
  }
}

ModelConfig untied_config() {
  ModelConfig c;
  c.name = "small-untied";
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.vocab_size = 100;
  c.tie_word_embeddings = false;
  return c;
}

// ---- synthetic ----------------------------------------------------------------------------------

TEST(DeviceWeightsSynthetic, TinyShardsEqualHostShardsBitwise) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("tiny");
  const uint64_t seed = 3;
  const ModelWeights host = synthetic_weights(c, seed);
  for (int tp : {1, 2, 4, 8}) {
    const DeviceModel model = DeviceModel::synthetic(c, seed, tp, all_ranks(tp), kDevice);
    EXPECT_EQ(model.config().name, "tiny");
    EXPECT_EQ(model.tp(), tp);
    EXPECT_EQ(model.device(), kDevice);
    expect_equal_to_host(model, host, all_ranks(tp));
    const DeviceRankWeights& first = model.rank(0);
    for (int r = 0; r < tp; ++r) {
      const DeviceRankWeights& d = model.rank(r);
      // Tied: the head is this rank's rows of the one embedding table, not a copy.
      EXPECT_EQ(d.lm_head, d.embed_tokens + static_cast<size_t>(r) * d.vocab_local * c.hidden_size);
      // Replicated tensors are stored once per device.
      EXPECT_EQ(d.embed_tokens, first.embed_tokens);
      EXPECT_EQ(d.final_norm, first.final_norm);
      EXPECT_EQ(d.layers[1].q_norm, first.layers[1].q_norm);
      EXPECT_EQ(d.layers[1].input_layernorm, first.layers[1].input_layernorm);
      if (r > 0) {
        EXPECT_NE(d.layers[1].qkv, first.layers[1].qkv);
      }
    }
  }
}

TEST(DeviceWeightsSynthetic, HoldsOnlyTheGivenRanks) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("tiny");
  const ModelWeights host = synthetic_weights(c, 4);
  const DeviceModel some = DeviceModel::synthetic(c, 4, 4, {2, 1}, kDevice);
  expect_equal_to_host(some, host, {2, 1});
  EXPECT_THROW(some.rank(0), std::out_of_range);
  EXPECT_THROW(some.rank(3), std::out_of_range);
  const DeviceModel all = DeviceModel::synthetic(c, 4, 4, all_ranks(4), kDevice);
  EXPECT_LT(some.bytes(), all.bytes());
}

TEST(DeviceWeightsSynthetic, UntiedHeadIsEachRanksRowsOfLmHead) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = untied_config();
  const ModelWeights host = synthetic_weights(c, 8);
  const DeviceModel model = DeviceModel::synthetic(c, 8, 2, all_ranks(2), kDevice);
  expect_equal_to_host(model, host, all_ranks(2));
  for (int r = 0; r < 2; ++r) {
    const DeviceRankWeights& d = model.rank(r);
    const size_t table = static_cast<size_t>(c.vocab_size) * c.hidden_size;
    EXPECT_TRUE(d.lm_head < d.embed_tokens || d.lm_head >= d.embed_tokens + table)
        << "an untied head must not alias the embedding";
  }
}

// vLLM's layout written out: the HF tensor and flat index behind element (row, col) of rank
// `rank`'s shard matrix `matrix` in layer `layer`.
struct SourceElement {
  std::string name;
  uint64_t index = 0;
};

SourceElement source_of(const ModelConfig& c, const std::string& matrix, int layer, int rank,
                        int tp, uint64_t row, uint64_t col) {
  const uint64_t H = c.hidden_size, I = c.intermediate_size / tp;
  const uint64_t q = c.num_heads / tp * c.head_dim, kv = c.num_kv_heads / tp * c.head_dim;
  auto name = [layer](const char* suffix) { return layer_tensor_name(layer, suffix); };
  if (matrix == "qkv") {
    if (row < q) return {name("self_attn.q_proj.weight"), (rank * q + row) * H + col};
    if (row < q + kv) return {name("self_attn.k_proj.weight"), (rank * kv + row - q) * H + col};
    return {name("self_attn.v_proj.weight"), (rank * kv + row - q - kv) * H + col};
  }
  if (matrix == "o_proj") {
    return {name("self_attn.o_proj.weight"), row * c.q_size() + rank * q + col};
  }
  if (matrix == "gate_up") {
    if (row < I) return {name("mlp.gate_proj.weight"), (rank * I + row) * H + col};
    return {name("mlp.up_proj.weight"), (rank * I + row - I) * H + col};
  }
  if (matrix == "down") {
    return {name("mlp.down_proj.weight"), row * c.intermediate_size + rank * I + col};
  }
  // lm_head, tied: rows of the embedding table.
  const uint64_t vocab_local = c.vocab_size / tp;
  return {"model.embed_tokens.weight", (rank * vocab_local + row) * H + col};
}

TEST(DeviceWeightsSynthetic, Qwen3_1_7bSampledValuesFollowTheFormula) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("qwen3-1.7b");
  const uint64_t seed = 17;
  const int tp = 2;
  const auto start = std::chrono::steady_clock::now();
  const DeviceModel model = DeviceModel::synthetic(c, seed, tp, all_ranks(tp), kDevice);
  std::printf("qwen3-1.7b, tp 2, both ranks: generated %.2f GB on the GPU in %.3f s\n",
              static_cast<double>(model.bytes()) / 1e9, seconds_since(start));

  const uint64_t H = c.hidden_size;
  std::mt19937_64 random(1);
  for (int r = 0; r < tp; ++r) {
    const DeviceRankWeights& d = model.rank(r);
    const uint64_t q = d.heads_local * c.head_dim, kv = d.kv_heads_local * c.head_dim,
                   I = d.intermediate_local;
    struct Matrix {
      std::string name;
      int layer;
      const bf16* data;
      uint64_t rows, cols;
    };
    std::vector<Matrix> matrices = {{"lm_head", 0, d.lm_head, uint64_t(d.vocab_local), H}};
    for (int l : {0, c.num_layers - 1}) {
      const cuda::DeviceLayerWeights& L = d.layers[l];
      matrices.push_back({"qkv", l, L.qkv, q + 2 * kv, H});
      matrices.push_back({"o_proj", l, L.o_proj, H, q});
      matrices.push_back({"gate_up", l, L.gate_up, 2 * I, H});
      matrices.push_back({"down", l, L.down, H, I});
    }
    for (const Matrix& m : matrices) {
      // The four corners, the first rows of k and v (qkv) and of up (gate_up), and random points.
      std::vector<std::pair<uint64_t, uint64_t>> points = {
          {0, 0}, {0, m.cols - 1}, {m.rows - 1, 0}, {m.rows - 1, m.cols - 1},
          {q, 1}, {q + kv, 2},     {I, 3}};
      for (int k = 0; k < 48; ++k) points.push_back({random() % m.rows, random() % m.cols});
      for (const auto& [row, col] : points) {
        if (row >= m.rows) continue;
        const SourceElement s = source_of(c, m.name, m.layer, r, tp, row, col);
        const bf16 expected = to_bf16(synthetic_normal(seed, s.name, s.index));
        const bf16 got = download(m.data + row * m.cols + col, 1)[0];
        ASSERT_EQ(got.bits, expected.bits)
            << "rank " << r << " layer " << m.layer << " " << m.name << " (" << row << ", " << col
            << ") = " << s.name << "[" << s.index << "]";
      }
    }
    EXPECT_EQ(download(d.layers[5].k_norm, 1)[0].bits, 0x3f80) << "norm weights are 1.0";
    EXPECT_EQ(download(d.final_norm + H - 1, 1)[0].bits, 0x3f80);
  }
}

// ---- from host ----------------------------------------------------------------------------------

// Host weights whose norms are all different (synthetic norms are all 1.0, so a norm copied to
// the wrong place would not show).
ModelWeights weights_with_distinct_norms(const ModelConfig& c, uint64_t seed) {
  ModelWeights w = synthetic_weights(c, seed);
  int k = 0;
  auto distinct = [&k](std::vector<bf16>& norm) {
    for (size_t i = 0; i < norm.size(); ++i) {
      norm[i] = to_bf16(0.5f + 0.01f * static_cast<float>(k) + 0.0001f * static_cast<float>(i));
    }
    ++k;
  };
  distinct(w.norm);
  for (LayerWeights& L : w.layers) {
    distinct(L.input_layernorm);
    distinct(L.post_attention_layernorm);
    distinct(L.q_norm);
    distinct(L.k_norm);
  }
  return w;
}

TEST(DeviceWeightsFromHost, TinyShardsEqualHostShardsBitwise) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelWeights host = weights_with_distinct_norms(*preset_config("tiny"), 5);
  for (int tp : {1, 2, 4}) {
    const DeviceModel model = DeviceModel::from_host(host, tp, all_ranks(tp), kDevice);
    expect_equal_to_host(model, host, all_ranks(tp));
    EXPECT_EQ(model.rank(tp - 1).lm_head,
              model.rank(tp - 1).embed_tokens + static_cast<size_t>(tp - 1) *
                                                    (host.config.vocab_size / tp) *
                                                    host.config.hidden_size);
  }
}

TEST(DeviceWeightsFromHost, UntiedAndOneRankOfTwo) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelWeights host = weights_with_distinct_norms(untied_config(), 6);
  const DeviceModel model = DeviceModel::from_host(host, 2, {1}, kDevice);
  expect_equal_to_host(model, host, {1});
  EXPECT_THROW(model.rank(0), std::out_of_range);
}

TEST(DeviceWeightsFromHost, RejectsAMisSizedTensor) {
  BIH_SKIP_WITHOUT_GPU();
  ModelWeights host = synthetic_weights(untied_config(), 6);
  host.layers[1].down_proj.resize(host.layers[1].down_proj.size() - 1);
  EXPECT_THROW(DeviceModel::from_host(host, 2, {0, 1}, kDevice), std::invalid_argument);
}

// ---- memory, ownership, arguments
// -----------------------------------------------------------------

TEST(DeviceWeights, BytesHoldEveryTensorOnce) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("tiny");
  const size_t H = c.hidden_size, L = c.num_layers, tp = 2;
  const size_t q = c.q_size() / tp, kv = c.kv_size() / tp, I = c.intermediate_size / tp;
  const size_t shared = c.vocab_size * H + H + L * (2 * H + 2 * c.head_dim);
  const size_t per_rank = L * ((q + 2 * kv) * H + H * q + 2 * I * H + H * I);
  const size_t tensors = 2 + 4 * L + tp * 4 * L;
  const size_t expected = 2 * (shared + tp * per_rank);  // bf16 bytes, no padding

  const DeviceModel two = DeviceModel::synthetic(c, 0, 2, {0, 1}, kDevice);
  EXPECT_GE(two.bytes(), expected);
  EXPECT_LE(two.bytes(), expected + 256 * tensors);
  // Emulated TP costs no memory: both ranks of tp 2 hold what tp 1 holds, up to padding.
  const DeviceModel one = DeviceModel::synthetic(c, 0, 1, {0}, kDevice);
  const size_t whole = 2 * (shared + 2 * per_rank);
  EXPECT_GE(one.bytes(), whole);
  EXPECT_LE(one.bytes(), whole + 256 * (2 + 8 * L));
}

TEST(DeviceWeights, MoveKeepsTheDeviceMemory) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("tiny");
  const ModelWeights host = synthetic_weights(c, 2);
  DeviceModel model = DeviceModel::synthetic(c, 2, 2, {0, 1}, kDevice);
  const bf16* qkv = model.rank(1).layers[0].qkv;
  const size_t bytes = model.bytes();
  DeviceModel moved = std::move(model);
  EXPECT_EQ(moved.rank(1).layers[0].qkv, qkv);
  EXPECT_EQ(moved.bytes(), bytes);
  EXPECT_EQ(model.bytes(), 0u);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_THROW(model.rank(1), std::out_of_range);
  DeviceModel assigned = DeviceModel::synthetic(c, 9, 1, {0}, kDevice);
  assigned = std::move(moved);  // frees the tp 1 model, takes the tp 2 one
  EXPECT_EQ(assigned.tp(), 2);
  expect_equal_to_host(assigned, host, {0, 1});
}

TEST(DeviceWeights, RejectsTpAndRanksThatDoNotFit) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("tiny");
  EXPECT_THROW(DeviceModel::synthetic(c, 0, 3, {0}, kDevice), std::invalid_argument);
  EXPECT_THROW(DeviceModel::synthetic(c, 0, 2, {}, kDevice), std::invalid_argument);
  EXPECT_THROW(DeviceModel::synthetic(c, 0, 2, {1, 1}, kDevice), std::invalid_argument);
  EXPECT_THROW(DeviceModel::synthetic(c, 0, 2, {2}, kDevice), std::invalid_argument);
  ModelConfig bad = c;
  bad.head_dim = 15;
  EXPECT_THROW(DeviceModel::synthetic(bad, 0, 1, {0}, kDevice), std::invalid_argument);
}

// ---- weights hash -------------------------------------------------------------------------------

TEST(DeviceWeightsHash, EqualsHostHashOnSmallModels) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig tiny = *preset_config("tiny");
  for (uint64_t seed : {0, 1}) {
    EXPECT_EQ(cuda::synthetic_weights_hash_on_gpu(tiny, seed, kDevice),
              weights_hash(synthetic_weights(tiny, seed)))
        << "tiny seed " << seed;
  }
  EXPECT_EQ(cuda::synthetic_weights_hash_on_gpu(untied_config(), 3, kDevice),
            weights_hash(synthetic_weights(untied_config(), 3)));
  EXPECT_NE(cuda::synthetic_weights_hash_on_gpu(tiny, 0, kDevice),
            cuda::synthetic_weights_hash_on_gpu(tiny, 1, kDevice));
}

TEST(DeviceWeightsHash, EqualsHostHashOnQwen3_0_6b) {
  BIH_SKIP_WITHOUT_GPU();
  const ModelConfig c = *preset_config("qwen3-0.6b");
  auto start = std::chrono::steady_clock::now();
  const std::string on_gpu = cuda::synthetic_weights_hash_on_gpu(c, 0, kDevice);
  const double gpu_seconds = seconds_since(start);
  start = std::chrono::steady_clock::now();
  const std::string on_host = weights_hash(synthetic_weights(c, 0));
  std::printf("qwen3-0.6b weights hash: GPU %.2f s, host %.2f s\n", gpu_seconds,
              seconds_since(start));
  EXPECT_EQ(on_gpu, on_host);
}

}  // namespace
}  // namespace bih
