// config.hpp: the Qwen3 dense decoder's shape, from a preset name or a checkpoint's config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bih {

struct ModelConfig {
  std::string name;  // preset name, or the checkpoint folder
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  double rope_theta = 1e6;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = true;
  int max_position_embeddings = 40960;

  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
};

// One GEMM weight of the decoder at TP=1: y[M, N] = x[M, K] . w[N, K]^T.
struct LinearShape {
  std::string name;  // "qkv", "o_proj", "gate_up", "down", "lm_head"
  int N = 0;
  int K = 0;
};

// The engine's GEMM shapes in forward order: merged qkv, o_proj, merged gate_up, down, lm_head.
std::vector<LinearShape> linear_shapes(const ModelConfig& config);

// Presets of DESIGN.md: "tiny", "qwen3-0.6b", "qwen3-1.7b". nullopt for an unknown name.
std::optional<ModelConfig> preset_config(const std::string& name);
std::vector<std::string> preset_names();

// Parses a Hugging Face Qwen3 config.json, as transformers 4 or 5 writes it (rope_theta at the top
// level or in rope_parameters). Throws InputError naming the file and field for a malformed value
// and for every field whose value would change the math to something bih does not implement
// (scaled RoPE, sliding windows, biases, another activation or architecture, quantization).
ModelConfig load_config_json(const std::string& path);

}  // namespace bih
