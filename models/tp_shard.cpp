#include "models/tp_shard.hpp"

#include <stdexcept>

namespace bih {
namespace {

// Appends rows [row_begin, row_end) of a row-major [rows, cols] matrix.
void append_rows(std::vector<bf16>& out, const std::vector<bf16>& m, int cols, int row_begin,
                 int row_end) {
  out.insert(out.end(), m.begin() + static_cast<size_t>(row_begin) * cols,
             m.begin() + static_cast<size_t>(row_end) * cols);
}

// Columns [col_begin, col_end) of a row-major [rows, cols] matrix, as [rows, col_end-col_begin].
std::vector<bf16> column_slice(const std::vector<bf16>& m, int rows, int cols, int col_begin,
                               int col_end) {
  std::vector<bf16> out;
  out.reserve(static_cast<size_t>(rows) * (col_end - col_begin));
  for (int r = 0; r < rows; ++r) {
    const bf16* row = m.data() + static_cast<size_t>(r) * cols;
    out.insert(out.end(), row + col_begin, row + col_end);
  }
  return out;
}

}  // namespace

RankWeights shard_for_rank(const ModelWeights& weights, int rank, int tp) {
  const ModelConfig& c = weights.config;
  if (tp < 1 || rank < 0 || rank >= tp || c.num_heads % tp || c.num_kv_heads % tp ||
      c.intermediate_size % tp || c.vocab_size % tp) {
    throw std::invalid_argument("shard_for_rank: tp=" + std::to_string(tp) +
                                " does not divide the model's heads, KV heads, intermediate size "
                                "and vocabulary");
  }
  RankWeights out;
  out.rank = rank;
  out.tp = tp;
  out.heads_local = c.num_heads / tp;
  out.kv_heads_local = c.num_kv_heads / tp;
  out.intermediate_local = c.intermediate_size / tp;
  out.vocab_local = c.vocab_size / tp;
  out.embed_tokens = weights.embed_tokens.data();
  out.final_norm = weights.norm.data();
  const int H = c.hidden_size;
  const int hd = c.head_dim;
  const int q_rows = out.heads_local * hd;
  const int kv_rows = out.kv_heads_local * hd;
  const int I = out.intermediate_local;

  for (const LayerWeights& layer : weights.layers) {
    RankLayerWeights r;
    r.input_layernorm = layer.input_layernorm.data();
    r.post_attention_layernorm = layer.post_attention_layernorm.data();
    r.q_norm = layer.q_norm.data();
    r.k_norm = layer.k_norm.data();
    r.qkv.reserve(static_cast<size_t>(q_rows + 2 * kv_rows) * H);
    append_rows(r.qkv, layer.q_proj, H, rank * q_rows, (rank + 1) * q_rows);
    append_rows(r.qkv, layer.k_proj, H, rank * kv_rows, (rank + 1) * kv_rows);
    append_rows(r.qkv, layer.v_proj, H, rank * kv_rows, (rank + 1) * kv_rows);
    r.o_proj = column_slice(layer.o_proj, H, c.q_size(), rank * q_rows, (rank + 1) * q_rows);
    r.gate_up.reserve(static_cast<size_t>(2 * I) * H);
    append_rows(r.gate_up, layer.gate_proj, H, rank * I, (rank + 1) * I);
    append_rows(r.gate_up, layer.up_proj, H, rank * I, (rank + 1) * I);
    r.down = column_slice(layer.down_proj, H, c.intermediate_size, rank * I, (rank + 1) * I);
    out.layers.push_back(std::move(r));
  }
  append_rows(out.lm_head, weights.output_embedding(), H, rank * out.vocab_local,
              (rank + 1) * out.vocab_local);
  return out;
}

}  // namespace bih
