// tp_shard.cpp: the TP layout (shard_layout) and host shards gathered from it (shard_for_rank).
#include "models/tp_shard.hpp"

#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace bih {
namespace {

// Rows [row_begin, row_begin + rows) of a tensor with `cols` columns: a slice of whole rows.
ShardSlice row_slice(std::string source, int cols, int row_begin, int rows) {
  return {std::move(source), cols, row_begin, rows, 0, cols};
}

// Columns [col_begin, col_begin + cols) of a [rows, source_cols] tensor, all rows.
ShardSlice column_slice(std::string source, int rows, int source_cols, int col_begin, int cols) {
  return {std::move(source), source_cols, 0, rows, col_begin, cols};
}

ShardMatrix stack(std::vector<ShardSlice> slices) {
  ShardMatrix m;
  m.cols = slices.front().cols;
  for (const ShardSlice& s : slices) m.rows += s.rows;
  m.slices = std::move(slices);
  return m;
}

// The shard matrix `m` gathered from the host tensors.
std::vector<bf16> gather(const ShardMatrix& m,
                         const std::map<std::string, const std::vector<bf16>*>& tensors) {
  std::vector<bf16> out;
  out.reserve(static_cast<size_t>(m.rows) * m.cols);
  for (const ShardSlice& s : m.slices) {
    const bf16* source = tensors.at(s.source)->data();
    for (int r = s.row_begin; r < s.row_begin + s.rows; ++r) {
      const bf16* row = source + static_cast<size_t>(r) * s.source_cols + s.col_begin;
      out.insert(out.end(), row, row + s.cols);
    }
  }
  return out;
}

}  // namespace

ShardLayout shard_layout(const ModelConfig& c, int rank, int tp) {
  if (tp < 1 || rank < 0 || rank >= tp || c.num_heads % tp || c.num_kv_heads % tp ||
      c.intermediate_size % tp || c.vocab_size % tp) {
    throw std::invalid_argument("tp shard layout: tp=" + std::to_string(tp) + " (rank " +
                                std::to_string(rank) +
                                ") does not divide the model's heads, KV heads, intermediate "
                                "size and vocabulary");
  }
  ShardLayout out;
  out.rank = rank;
  out.tp = tp;
  out.heads_local = c.num_heads / tp;
  out.kv_heads_local = c.num_kv_heads / tp;
  out.intermediate_local = c.intermediate_size / tp;
  out.vocab_local = c.vocab_size / tp;
  out.embed_tokens = "model.embed_tokens.weight";
  out.final_norm = "model.norm.weight";
  const int H = c.hidden_size;
  const int q_rows = out.heads_local * c.head_dim;
  const int kv_rows = out.kv_heads_local * c.head_dim;
  const int I = out.intermediate_local;

  for (int l = 0; l < c.num_layers; ++l) {
    auto name = [l](const char* suffix) { return layer_tensor_name(l, suffix); };
    LayerShardLayout L;
    L.input_layernorm = name("input_layernorm.weight");
    L.post_attention_layernorm = name("post_attention_layernorm.weight");
    L.q_norm = name("self_attn.q_norm.weight");
    L.k_norm = name("self_attn.k_norm.weight");
    L.qkv = stack({row_slice(name("self_attn.q_proj.weight"), H, rank * q_rows, q_rows),
                   row_slice(name("self_attn.k_proj.weight"), H, rank * kv_rows, kv_rows),
                   row_slice(name("self_attn.v_proj.weight"), H, rank * kv_rows, kv_rows)});
    L.o_proj = stack(
        {column_slice(name("self_attn.o_proj.weight"), H, c.q_size(), rank * q_rows, q_rows)});
    L.gate_up = stack({row_slice(name("mlp.gate_proj.weight"), H, rank * I, I),
                       row_slice(name("mlp.up_proj.weight"), H, rank * I, I)});
    L.down =
        stack({column_slice(name("mlp.down_proj.weight"), H, c.intermediate_size, rank * I, I)});
    out.layers.push_back(std::move(L));
  }
  const std::string output_embedding = c.tie_word_embeddings ? out.embed_tokens : "lm_head.weight";
  out.lm_head = stack({row_slice(output_embedding, H, rank * out.vocab_local, out.vocab_local)});
  return out;
}

RankWeights shard_for_rank(const ModelWeights& weights, int rank, int tp) {
  const ShardLayout layout = shard_layout(weights.config, rank, tp);
  const auto tensors = tensors_by_name(weights);
  auto data = [&tensors](const std::string& name) { return tensors.at(name)->data(); };
  RankWeights out;
  out.rank = rank;
  out.tp = tp;
  out.heads_local = layout.heads_local;
  out.kv_heads_local = layout.kv_heads_local;
  out.intermediate_local = layout.intermediate_local;
  out.vocab_local = layout.vocab_local;
  out.embed_tokens = data(layout.embed_tokens);
  out.final_norm = data(layout.final_norm);
  for (const LayerShardLayout& L : layout.layers) {
    RankLayerWeights r;
    r.input_layernorm = data(L.input_layernorm);
    r.post_attention_layernorm = data(L.post_attention_layernorm);
    r.q_norm = data(L.q_norm);
    r.k_norm = data(L.k_norm);
    r.qkv = gather(L.qkv, tensors);
    r.o_proj = gather(L.o_proj, tensors);
    r.gate_up = gather(L.gate_up, tensors);
    r.down = gather(L.down, tensors);
    out.layers.push_back(std::move(r));
  }
  out.lm_head = gather(layout.lm_head, tensors);
  return out;
}

}  // namespace bih
