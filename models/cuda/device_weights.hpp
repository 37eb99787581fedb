// device_weights.hpp: a Qwen3 model's weights in GPU memory, one tensor-parallel shard per rank.
//
// DeviceModel owns, on one GPU, the shards of the ranks that live there (all of them under
// emulated TP, one under real TP). The layout is the host's (models/tp_shard.hpp, shard_layout):
// merged qkv rows, merged gate_up rows, o_proj/down input columns, vocab rows of lm_head. Tensors
// that every rank needs whole (the embedding, the norms) are stored once per GPU and shared.
// Synthetic weights are generated on the GPU straight into that layout, bit for bit the host's
// synthetic_weights (models/weights.hpp) sharded by shard_for_rank; a loaded checkpoint is copied
// slice by slice from the host model.
//
// Plain C++ header: callers include no CUDA header (bf16 is only named through pointers, so .cu
// files may include it too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/config.hpp"

namespace bih {
struct bf16;          // models/bf16.hpp: a bfloat16 bit pattern
struct ModelWeights;  // models/weights.hpp
}  // namespace bih

namespace bih::cuda {

// One layer of one rank; device pointers into the DeviceModel that owns them.
struct DeviceLayerWeights {
  const bf16* input_layernorm = nullptr;           // [H], shared by the ranks on this device
  const bf16* post_attention_layernorm = nullptr;  // [H], shared
  const bf16* q_norm = nullptr;                    // [hd], shared
  const bf16* k_norm = nullptr;                    // [hd], shared
  const bf16* qkv = nullptr;                       // [q_local + 2*kv_local, H]
  const bf16* o_proj = nullptr;                    // [H, q_local]
  const bf16* gate_up = nullptr;                   // [2*I_local, H]
  const bf16* down = nullptr;                      // [H, I_local]
};

// One rank's shard (the device twin of bih::RankWeights).
struct DeviceRankWeights {
  int rank = 0, tp = 1, heads_local = 0, kv_heads_local = 0, intermediate_local = 0,
      vocab_local = 0;
  const bf16* embed_tokens = nullptr;  // [V, H], shared by the ranks on this device
  const bf16* final_norm = nullptr;    // [H], shared
  std::vector<DeviceLayerWeights> layers;
  // [vocab_local, H]. Tied embeddings: points into embed_tokens at row rank * vocab_local (the
  // rows are contiguous, so nothing is copied).
  const bf16* lm_head = nullptr;
};

// Owns the device memory of the shards of `ranks` (a subset of 0..tp-1) on one GPU: one
// allocation, freed by the destructor. Move-only. The factories throw std::invalid_argument for a
// bad config, a tp that does not divide the model (see shard_layout), or ranks that are empty,
// repeated or outside [0, tp); std::runtime_error for a failed CUDA call. They leave the calling
// thread's current device as they found it.
class DeviceModel {
 public:
  // Synthetic weights generated on `device` from the seed, directly in the shard layout (no host
  // copy of the model): bitwise equal to shard_for_rank(synthetic_weights(config, seed), r, tp).
  static DeviceModel synthetic(const ModelConfig& config, uint64_t seed, int tp,
                               std::vector<int> ranks, int device);
  // From host weights (a loaded checkpoint): each rank's shard is copied slice by slice
  // (cudaMemcpy2D for column slices), never through a full host copy per rank.
  static DeviceModel from_host(const ModelWeights& weights, int tp, std::vector<int> ranks,
                               int device);

  DeviceModel(DeviceModel&& other) noexcept;
  DeviceModel& operator=(DeviceModel&& other) noexcept;
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;
  ~DeviceModel();

  const ModelConfig& config() const { return config_; }
  int device() const { return device_; }
  int tp() const { return tp_; }
  // Throws std::out_of_range for a rank this model does not hold.
  const DeviceRankWeights& rank(int r) const;
  size_t bytes() const { return bytes_; }  // device bytes held (alignment padding included)

 private:
  DeviceModel() = default;
  void allocate(size_t bytes);  // the arena, on the current device
  void release() noexcept;

  ModelConfig config_;
  int device_ = 0;
  int tp_ = 1;
  void* arena_ = nullptr;  // every tensor of every held rank, 256-byte aligned
  size_t bytes_ = 0;
  std::vector<DeviceRankWeights> ranks_;  // in the order the factory was given
};

// bih::weights_hash(synthetic_weights(config, seed)) without building the host model: each tensor
// is regenerated on `device` in chunks, downloaded to pinned host memory (double-buffered, so the
// GPU generates the next chunk while the host absorbs this one) and fed to bih::WeightsHasher.
std::string synthetic_weights_hash_on_gpu(const ModelConfig& config, uint64_t seed, int device);

}  // namespace bih::cuda
