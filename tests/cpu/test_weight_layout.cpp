// test_weight_layout.cpp: the host helpers the GPU weights share with the CPU engine: the tensor
// list (tensor_specs, tensors_by_name), the piecewise weights hash (WeightsHasher), and the TP
// layout (shard_layout) with the host shards gathered from it (shard_for_rank), checked element by
// element against vLLM's layout written out independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/config.hpp"
#include "models/tp_shard.hpp"
#include "models/weights.hpp"

namespace bih::test_weight_layout {
namespace {

ModelConfig small_config(bool tied) {
  ModelConfig c;
  c.name = "small";
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.vocab_size = 52;
  c.tie_word_embeddings = tied;
  return c;
}

// ---- tensor list ------------------------------------------------------------------------------

TEST(TensorSpecs, CanonicalOrderShapesAndNorms) {
  const ModelConfig c = small_config(/*tied=*/false);
  const std::vector<TensorSpec> specs = tensor_specs(c);
  ASSERT_EQ(specs.size(), 1u + 11u * 2u + 2u);
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs.front().shape, (std::vector<uint64_t>{52, 32}));
  EXPECT_EQ(specs[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[2].shape, (std::vector<uint64_t>{32, 32}));
  EXPECT_EQ(specs[3].shape, (std::vector<uint64_t>{16, 32}));  // k_proj: 2 KV heads of 8
  EXPECT_EQ(specs[11].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(specs[11].shape, (std::vector<uint64_t>{32, 48}));
  EXPECT_EQ(specs[11].element_count(), 32u * 48u);
  EXPECT_EQ(specs[specs.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  std::set<std::string> names;
  for (const TensorSpec& s : specs) {
    names.insert(s.name);
    const bool norm_name = s.name.find("norm.weight") != std::string::npos;
    EXPECT_EQ(s.is_norm, norm_name) << s.name;
  }
  EXPECT_EQ(names.size(), specs.size());
  EXPECT_EQ(tensor_specs(small_config(/*tied=*/true)).size(), specs.size() - 1);
  EXPECT_EQ(layer_tensor_name(3, "mlp.up_proj.weight"), "model.layers.3.mlp.up_proj.weight");
}

TEST(TensorSpecs, InvalidConfigThrows) {
  ModelConfig c = small_config(true);
  c.num_kv_heads = 3;  // does not divide the heads
  EXPECT_THROW(tensor_specs(c), std::invalid_argument);
}

TEST(TensorsByName, PointsIntoTheModelAndChecksSizes) {
  ModelWeights w = synthetic_weights(small_config(/*tied=*/true), 1);
  const auto tensors = tensors_by_name(w);
  EXPECT_EQ(tensors.size(), tensor_specs(w.config).size());
  EXPECT_EQ(tensors.at("model.embed_tokens.weight"), &w.embed_tokens);
  EXPECT_EQ(tensors.at("model.layers.1.self_attn.v_proj.weight"), &w.layers[1].v_proj);
  EXPECT_EQ(tensors.count("lm_head.weight"), 0u);  // tied
  w.layers[1].up_proj.pop_back();
  EXPECT_THROW(tensors_by_name(w), std::invalid_argument);
}

// ---- piecewise hash ---------------------------------------------------------------------------

TEST(WeightsHasher, AnyChunkingGivesWeightsHash) {
  const ModelWeights w = synthetic_weights(small_config(/*tied=*/false), 3);
  const std::string expected = weights_hash(w);
  const auto tensors = tensors_by_name(w);
  for (size_t chunk : {1, 2, 3, 5, 7, 4096}) {
    WeightsHasher hasher;
    for (const TensorSpec& s : tensor_specs(w.config)) {
      hasher.begin_tensor(s.name, s.shape);
      const std::vector<bf16>& v = *tensors.at(s.name);
      for (size_t i = 0; i < v.size(); i += chunk) {
        hasher.absorb_values(v.data() + i, std::min(chunk, v.size() - i));
      }
    }
    EXPECT_EQ(hasher.digest(), expected) << "chunk " << chunk;
  }
}

TEST(WeightsHasher, PartialWordsDoNotSpillIntoTheNextTensor) {
  // [1 value] then [3 values] must differ from [4 values] in one tensor and from [] then [4].
  const std::vector<bf16> v = {bf16{1}, bf16{2}, bf16{3}, bf16{4}};
  auto digest = [&](size_t first) {
    WeightsHasher h;
    h.begin_tensor("a", {first});
    h.absorb_values(v.data(), first);
    h.begin_tensor("a", {4 - first});
    h.absorb_values(v.data() + first, 4 - first);
    return h.digest();
  };
  EXPECT_NE(digest(1), digest(0));
  EXPECT_NE(digest(1), digest(3));
  // Absorbing a tensor's values in pieces gives the digest of absorbing them at once.
  WeightsHasher pieces;
  pieces.begin_tensor("a", {1});
  pieces.absorb_values(v.data(), 1);
  pieces.begin_tensor("a", {3});
  pieces.absorb_values(v.data() + 1, 2);
  pieces.absorb_values(v.data() + 3, 1);
  EXPECT_EQ(pieces.digest(), digest(1));
}

TEST(WeightsHasher, TinySeedZeroDigestIsStable) {
  // Reports identify weights by this digest: a change to the formula, the tensor list or the hash
  // shows here.
  EXPECT_EQ(weights_hash(synthetic_weights(*preset_config("tiny"), 0)), "7296c8864c6846cb");
}

// ---- TP layout --------------------------------------------------------------------------------

// vLLM's layout, written out element by element: the value rank `rank` of `tp` holds at
// (row, col) of each shard matrix.
struct ExpectedShard {
  const ModelWeights& w;
  int rank, tp;

  const ModelConfig& c() const { return w.config; }
  int q_local() const { return c().num_heads / tp * c().head_dim; }
  int kv_local() const { return c().num_kv_heads / tp * c().head_dim; }
  int i_local() const { return c().intermediate_size / tp; }
  int v_local() const { return c().vocab_size / tp; }

  bf16 qkv(const LayerWeights& L, int row, int col) const {
    const int H = c().hidden_size;
    if (row < q_local()) return L.q_proj[(rank * q_local() + row) * H + col];
    row -= q_local();
    if (row < kv_local()) return L.k_proj[(rank * kv_local() + row) * H + col];
    row -= kv_local();
    return L.v_proj[(rank * kv_local() + row) * H + col];
  }
  bf16 o_proj(const LayerWeights& L, int row, int col) const {
    return L.o_proj[row * c().q_size() + rank * q_local() + col];
  }
  bf16 gate_up(const LayerWeights& L, int row, int col) const {
    const int H = c().hidden_size;
    if (row < i_local()) return L.gate_proj[(rank * i_local() + row) * H + col];
    return L.up_proj[(rank * i_local() + row - i_local()) * H + col];
  }
  bf16 down(const LayerWeights& L, int row, int col) const {
    return L.down_proj[row * c().intermediate_size + rank * i_local() + col];
  }
  bf16 lm_head(int row, int col) const {
    return w.output_embedding()[(rank * v_local() + row) * c().hidden_size + col];
  }
};

// First element of `got` [rows, cols] that differs from expected(row, col), or "".
template <class Expected>
std::string first_difference(const char* what, const std::vector<bf16>& got, int rows, int cols,
                             Expected expected) {
  if (got.size() != static_cast<size_t>(rows) * cols) {
    return std::string(what) + ": " + std::to_string(got.size()) + " values, expected " +
           std::to_string(rows * cols);
  }
  for (int r = 0; r < rows; ++r) {
    for (int col = 0; col < cols; ++col) {
      if (got[static_cast<size_t>(r) * cols + col] != expected(r, col)) {
        return std::string(what) + " differs at (" + std::to_string(r) + ", " +
               std::to_string(col) + ")";
      }
    }
  }
  return "";
}

void check_shards(const ModelConfig& config, int tp) {
  const ModelWeights w = synthetic_weights(config, 9);
  const int H = config.hidden_size;
  for (int rank = 0; rank < tp; ++rank) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " rank " + std::to_string(rank));
    const ExpectedShard e{w, rank, tp};
    const RankWeights s = shard_for_rank(w, rank, tp);
    EXPECT_EQ(s.heads_local, config.num_heads / tp);
    EXPECT_EQ(s.kv_heads_local, config.num_kv_heads / tp);
    EXPECT_EQ(s.intermediate_local, e.i_local());
    EXPECT_EQ(s.vocab_local, e.v_local());
    EXPECT_EQ(s.embed_tokens, w.embed_tokens.data());
    EXPECT_EQ(s.final_norm, w.norm.data());
    ASSERT_EQ(s.layers.size(), w.layers.size());
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& L = w.layers[l];
      const RankLayerWeights& r = s.layers[l];
      EXPECT_EQ(r.input_layernorm, L.input_layernorm.data());
      EXPECT_EQ(r.post_attention_layernorm, L.post_attention_layernorm.data());
      EXPECT_EQ(r.q_norm, L.q_norm.data());
      EXPECT_EQ(r.k_norm, L.k_norm.data());
      EXPECT_EQ(first_difference("qkv", r.qkv, e.q_local() + 2 * e.kv_local(), H,
                                 [&](int i, int j) { return e.qkv(L, i, j); }),
                "");
      EXPECT_EQ(first_difference("o_proj", r.o_proj, H, e.q_local(),
                                 [&](int i, int j) { return e.o_proj(L, i, j); }),
                "");
      EXPECT_EQ(first_difference("gate_up", r.gate_up, 2 * e.i_local(), H,
                                 [&](int i, int j) { return e.gate_up(L, i, j); }),
                "");
      EXPECT_EQ(first_difference("down", r.down, H, e.i_local(),
                                 [&](int i, int j) { return e.down(L, i, j); }),
                "");
    }
    EXPECT_EQ(first_difference("lm_head", s.lm_head, e.v_local(), H,
                               [&](int i, int j) { return e.lm_head(i, j); }),
              "");
  }
}

TEST(ShardForRank, FollowsVllmLayoutTied) {
  for (int tp : {1, 2}) check_shards(small_config(/*tied=*/true), tp);
}

TEST(ShardForRank, FollowsVllmLayoutUntied) {
  for (int tp : {1, 2}) check_shards(small_config(/*tied=*/false), tp);
}

TEST(ShardForRank, FollowsVllmLayoutTinyTp4) { check_shards(*preset_config("tiny"), 4); }

TEST(ShardLayout, RanksTileEverySourceTensorOnce) {
  const ModelConfig c = *preset_config("tiny");
  for (int tp : {1, 2, 4, 8}) {
    std::map<std::string, std::vector<int>> covered;  // source -> times each element is taken
    for (const TensorSpec& s : tensor_specs(c)) covered[s.name].assign(s.element_count(), 0);
    for (int rank = 0; rank < tp; ++rank) {
      const ShardLayout layout = shard_layout(c, rank, tp);
      std::vector<const ShardMatrix*> matrices = {&layout.lm_head};
      for (const LayerShardLayout& L : layout.layers) {
        for (const ShardMatrix* m : {&L.qkv, &L.o_proj, &L.gate_up, &L.down}) matrices.push_back(m);
      }
      for (const ShardMatrix* m : matrices) {
        int rows = 0;
        for (const ShardSlice& s : m->slices) {
          ASSERT_EQ(s.cols, m->cols) << s.source;
          rows += s.rows;
          std::vector<int>& count = covered.at(s.source);
          for (int r = s.row_begin; r < s.row_begin + s.rows; ++r) {
            for (int col = s.col_begin; col < s.col_begin + s.cols; ++col) {
              ++count.at(static_cast<size_t>(r) * s.source_cols + col);
            }
          }
        }
        EXPECT_EQ(rows, m->rows);
      }
    }
    for (const auto& [name, count] : covered) {
      if (name.find("norm") != std::string::npos) continue;  // replicated, not in the slices
      // Every sharded element exactly once; the (tied) embedding once, as the vocab-parallel head.
      for (size_t i = 0; i < count.size(); ++i) {
        ASSERT_EQ(count[i], 1) << "tp " << tp << ": " << name << " element " << i;
      }
    }
  }
}

TEST(ShardLayout, RejectsRanksAndTpThatDoNotFit) {
  const ModelConfig c = *preset_config("tiny");
  EXPECT_THROW(shard_layout(c, 0, 3), std::invalid_argument);  // 3 does not divide 16 heads
  EXPECT_THROW(shard_layout(c, 2, 2), std::invalid_argument);
  EXPECT_THROW(shard_layout(c, -1, 2), std::invalid_argument);
  EXPECT_THROW(shard_layout(c, 0, 0), std::invalid_argument);
  EXPECT_THROW(shard_layout(c, 0, 16), std::invalid_argument);  // 8 KV heads
}

}  // namespace
}  // namespace bih::test_weight_layout
