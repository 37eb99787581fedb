// tp_shard.hpp: one tensor-parallel rank's slice of the weights, as vLLM shards Qwen3.
//
// Column-parallel: the merged QKV projection (this rank's query heads, then its KV heads for k and
// v) and the merged gate_up projection (this rank's gate rows, then its up rows). Row-parallel:
// o_proj and down_proj, this rank's input columns. Vocab-parallel lm_head: this rank's vocab rows.
// Norms and the embedding table are replicated (the embedding is read in place, not copied).
#pragma once

#include <vector>

#include "models/bf16.hpp"
#include "models/weights.hpp"

namespace bih {

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
