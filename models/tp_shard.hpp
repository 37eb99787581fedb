// tp_shard.hpp: one tensor-parallel rank's slice of the weights, as vLLM shards Qwen3.
//
// Column-parallel: the merged QKV projection (this rank's query heads, then its KV heads for k and
// v) and the merged gate_up projection (this rank's gate rows, then its up rows). Row-parallel:
// o_proj and down_proj, this rank's input columns. Vocab-parallel lm_head: this rank's vocab rows.
// Norms and the embedding table are replicated (the embedding is read in place, not copied).
//
// shard_layout is the one definition of that layout: which rows and columns of which HF tensors
// make up each shard matrix. shard_for_rank gathers host shards from it, and the CUDA backend
// (models/cuda/device_weights) generates or copies device shards from it.
#pragma once

#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/weights.hpp"

namespace bih {

// A block of a shard matrix: rows [row_begin, row_begin + rows) and columns
// [col_begin, col_begin + cols) of the full HF tensor `source`, row-major [*, source_cols].
struct ShardSlice {
  std::string source;  // HF tensor name (also what a synthetic value's key is derived from)
  int source_cols = 0;
  int row_begin = 0;
  int rows = 0;
  int col_begin = 0;
  int cols = 0;
};

// A shard matrix [rows, cols]: its slices stacked by rows in order, each `cols` wide (a row
// slice of a tensor spans all its columns; a column slice spans all its rows).
struct ShardMatrix {
  int rows = 0;
  int cols = 0;
  std::vector<ShardSlice> slices;
};

struct LayerShardLayout {
  // Replicated: HF names of the full tensors.
  std::string input_layernorm, post_attention_layernorm, q_norm, k_norm;
  ShardMatrix qkv;      // [q_local + 2*kv_local, H]: q_proj, k_proj, v_proj rows of this rank
  ShardMatrix o_proj;   // [H, q_local]: o_proj columns of this rank's heads
  ShardMatrix gate_up;  // [2*I_local, H]: gate_proj rows, then up_proj rows
  ShardMatrix down;     // [H, I_local]: down_proj columns
};

struct ShardLayout {
  int rank = 0;
  int tp = 1;
  int heads_local = 0;
  int kv_heads_local = 0;
  int intermediate_local = 0;
  int vocab_local = 0;
  std::string embed_tokens;  // replicated [V, H]
  std::string final_norm;    // replicated [H]
  std::vector<LayerShardLayout> layers;
  ShardMatrix lm_head;  // [vocab_local, H]: rows of the embedding table when tied, else of lm_head
};

// Rank `rank` of `tp`'s layout. Throws std::invalid_argument unless tp divides the heads, the KV
// heads, the intermediate size and the vocabulary, and 0 <= rank < tp.
ShardLayout shard_layout(const ModelConfig& config, int rank, int tp);

struct RankLayerWeights {
  const bf16* input_layernorm = nullptr;           // [H]
  const bf16* post_attention_layernorm = nullptr;  // [H]
  const bf16* q_norm = nullptr;                    // [hd]
  const bf16* k_norm = nullptr;                    // [hd]
  std::vector<bf16> qkv;                           // [q_local + 2*kv_local, H]
  std::vector<bf16> o_proj;                        // [H, q_local]
  std::vector<bf16> gate_up;                       // [2*I_local, H]
  std::vector<bf16> down;                          // [H, I_local]
};

struct RankWeights {
  int rank = 0;
  int tp = 1;
  int heads_local = 0;
  int kv_heads_local = 0;
  int intermediate_local = 0;
  int vocab_local = 0;
  const bf16* embed_tokens = nullptr;  // [V, H], shared by all ranks
  const bf16* final_norm = nullptr;    // [H]
  std::vector<RankLayerWeights> layers;
  std::vector<bf16> lm_head;  // [vocab_local, H]
};

// The shard of `weights` that rank `rank` of `tp` holds. `weights` must outlive the result.
RankWeights shard_for_rank(const ModelWeights& weights, int rank, int tp);

}  // namespace bih
