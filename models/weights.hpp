// weights.hpp: a Qwen3 model's weights in bf16, from a seed or a Hugging Face checkpoint.
//
// Tensor names and layouts are HF's (model.layers.{i}.self_attn.q_proj.weight is [q_size, hidden],
// row-major, out x in). Synthetic weights are counter-based (value i of tensor t is a function of
// seed, t's name and i), so any backend regenerates them bit for bit without a host copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"

namespace bih {

struct LayerWeights {
  std::vector<bf16> input_layernorm;           // [H]
  std::vector<bf16> q_proj;                    // [heads*hd, H]
  std::vector<bf16> k_proj;                    // [kv_heads*hd, H]
  std::vector<bf16> v_proj;                    // [kv_heads*hd, H]
  std::vector<bf16> q_norm;                    // [hd]
  std::vector<bf16> k_norm;                    // [hd]
  std::vector<bf16> o_proj;                    // [H, heads*hd]
  std::vector<bf16> post_attention_layernorm;  // [H]
  std::vector<bf16> gate_proj;                 // [I, H]
  std::vector<bf16> up_proj;                   // [I, H]
  std::vector<bf16> down_proj;                 // [H, I]
};

struct ModelWeights {
  ModelConfig config;
  std::vector<bf16> embed_tokens;  // [V, H]
  std::vector<LayerWeights> layers;
  std::vector<bf16> norm;     // [H]
  std::vector<bf16> lm_head;  // [V, H]; empty when config.tie_word_embeddings

  const std::vector<bf16>& output_embedding() const {
    return config.tie_word_embeddings ? embed_tokens : lm_head;
  }
};

// One tensor of a model: its HF name and shape. tensor_specs lists them in the canonical order
// (checkpoint files, weights_hash): the embedding; per layer input_layernorm, q, k, v, o_proj,
// q_norm, k_norm, post_attention_layernorm, gate, up, down; the final norm; lm_head when untied.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  bool is_norm = false;  // a norm weight: synthetic 1.0 or synthetic_norm (else Normal(0, 0.02))

  uint64_t element_count() const;
};

// Throws std::invalid_argument for a config with an invalid shape.
std::vector<TensorSpec> tensor_specs(const ModelConfig& config);

// HF name of a decoder layer's tensor: layer_tensor_name(3, "mlp.up_proj.weight") is
// "model.layers.3.mlp.up_proj.weight".
std::string layer_tensor_name(int layer, const std::string& suffix);

// Every tensor of `weights` by HF name, pointing into `weights`. Throws std::invalid_argument when
// a tensor's size does not match its shape (a hand-built model), so readers may trust the sizes.
std::map<std::string, const std::vector<bf16>*> tensors_by_name(const ModelWeights& weights);

// How synthetic norm weights are drawn. `ones` is HF's init (and the default every fixture's bits
// depend on); with all-ones norms a norm applied to the wrong heads or rows computes the same
// thing, so `perturbed` draws each norm weight as 1 + 0.1 * N(0, 1) (synthetic_norm below) to
// make such a mistake visible. The CUDA generator implements `ones` only.
enum class NormInit { ones, perturbed };

// "ones" / "perturbed" (a CLI flag's value); nullopt for anything else.
std::optional<NormInit> norm_init_from_name(const std::string& name);
const char* norm_init_name(NormInit init);

// Normal(0, 0.02) for linear and embedding weights; norm weights as `norms` says (HF's init: 1.0).
ModelWeights synthetic_weights(const ModelConfig& config, uint64_t seed,
                               NormInit norms = NormInit::ones);

// The per-tensor part of the formula below: mix64(seed ^ mix64(name_hash)).
uint64_t synthetic_key(uint64_t seed, const std::string& tensor_name);

// The value synthetic_weights puts at index i of the tensor named `tensor_name` (HF name).
// Exact formula (all integer arithmetic mod 2^64; a CUDA port must match it bit for bit):
//   mix64(z):   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
//               return z ^ (z >> 31)                              (splitmix64's finalizer)
//   name_hash = FNV-1a 64 of the name's bytes (offset 0xcbf29ce484222325, prime 0x100000001b3)
//   key       = mix64(seed ^ mix64(name_hash))
//   golden    = 0x9e3779b97f4a7c15
//   r1 = mix64(key + (2i + 1) * golden),   r2 = mix64(key + (2i + 2) * golden)
//   u1 = ((r1 >> 11) + 1) * 2^-53   in (0, 1],   u2 = (r2 >> 11) * 2^-53   in [0, 1)   (double)
//   z  = sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2)                              (double)
//   return (float)(0.02 * z)         (round to nearest; the caller then rounds float -> bf16 RNE)
// log and cos are libm's on the host and CUDA's double log/cos on a GPU; both are within 1-2 ulp
// of exact, so after rounding to bf16 a mismatch needs a double within ~1 ulp of a bf16 rounding
// boundary (probability ~1e-13 per value). Tests compare the GPU copy against this function.
float synthetic_normal(uint64_t seed, const std::string& tensor_name, uint64_t i);

// The value NormInit::perturbed puts at index i of a norm weight: the same z as above (same key,
// same counters), then (float)(1.0 + 0.1 * z) in place of (float)(0.02 * z); bf16 RNE after.
float synthetic_norm(uint64_t seed, const std::string& tensor_name, uint64_t i);

// Reads config.json and the safetensors file(s) of `folder` (model.safetensors, or the shards of
// model.safetensors.index.json). bf16, f16 and f32 tensors are accepted and stored as bf16.
// Throws InputError naming the file and tensor on anything missing or mis-shaped.
ModelWeights load_checkpoint(const std::string& folder);
// Everything load_checkpoint checks (config.json, every safetensors header against its file's
// size, each tensor's presence, dtype and shape against the config) without reading the
// weights: a scenario's checkpoint is refused at load time, before any worker starts.
void validate_checkpoint(const std::string& folder);

// Writes config.json (as transformers 5 writes it), generation_config.json and model.safetensors
// (bf16) to `folder`; with max_shard_bytes > 0, shards model-0000i-of-0000n.safetensors plus
// model.safetensors.index.json.
void save_checkpoint(const ModelWeights& weights, const std::string& folder,
                     uint64_t max_shard_bytes = 0);

// Hex digest of every tensor's name, shape and bits: identifies the weights in a report.
std::string weights_hash(const ModelWeights& weights);

// weights_hash fed piecewise, for callers that never hold the whole model (the GPU backend hashes
// its generated weights chunk by chunk): begin_tensor for each tensor of tensor_specs in order,
// then its values in order, in chunks of any sizes; digest() ends it and returns the hex digest.
class WeightsHasher {
 public:
  void begin_tensor(const std::string& name, const std::vector<uint64_t>& shape);
  void absorb_values(const bf16* values, size_t count);
  std::string digest();

 private:
  void absorb(uint64_t word);
  void flush_partial_word();

  uint64_t state_ = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  uint64_t partial_word_ = 0;               // values not yet absorbed, little-endian
  int partial_count_ = 0;                   // 0..3 values in partial_word_
};

// A straightforward fp64 forward of one sequence (no KV cache, no TP, no bf16 rounding after the
// weights are widened): logits[T, V] for every position of `tokens`. The numerical reference.
std::vector<double> reference_logits_fp64(const ModelWeights& weights,
                                          const std::vector<int32_t>& tokens);

}  // namespace bih
