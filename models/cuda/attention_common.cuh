// attention_common.cuh: what the staged attention kernel (attention_kernel.cu) and its bitwise
// reference (attention_reference_kernel.cu) share: the block shape, the addressing of the paged KV
// pool and the argument checks. One definition for both, so the reference cannot drift from the
// kernel it vouches for in how it finds a key or what it accepts. Numerics: device_math.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"

namespace bih::cuda::device {

// One block per (row, head) in both kernels: its threads, and the bounds of their shared arrays.
inline constexpr int kAttentionThreads = 128;
inline constexpr int kDimsPerThread = kMaxHeadDim / kAttentionThreads;  // head dims one thread owns
inline constexpr int kDimsPerLane = kMaxHeadDim / 32;                   // head dims one lane owns
inline constexpr int kWarpsPerBlock = kAttentionThreads / 32;
inline constexpr int kMaxVendorSplits = 16;
// Keys scored at once: one per thread, a whole number of aligned tiles. The pass length changes
// no arithmetic (tiles are absolute positions, vendor parts carry their state across passes).
inline constexpr int kKeysPerPass = kAttentionThreads;
static_assert(kKeysPerPass % kAttentionTile == 0, "a pass must hold whole tiles");
inline constexpr int kTilesPerPass = kKeysPerPass / kAttentionTile;
// The shortest pass the staged kernel's launcher picks: two tiles.
inline constexpr int kMinKeysPerPass = 2 * kAttentionTile;
static_assert(kTilesPerPass <= kMaxVendorSplits, "the fold factor arrays serve tiles and parts");

// A tile's weighted V sums: head_dim fp32, rounded up to whole float4 stores.
__host__ __device__ constexpr int tile_acc_stride(int head_dim) { return (head_dim + 3) / 4 * 4; }

// Split KV (attention_split_fold.cuh): the keys of one segment, one block's share of a context.
inline constexpr int kSplitKeys = 128;
static_assert(kSplitKeys % kKeysPerPass == 0, "a segment is whole passes of any length");
// The unfolded tiles of a split launch, for block b = row * n_heads + head and absolute tile i:
// stats[2 (b max_tiles + i)] its max and [.. + 1] its sum of weights; acc[(b max_tiles + i)
// tile_acc_stride(head_dim) + d] its weighted V sum of dim d; arrivals[b] the segments of pair b
// stored so far in this launch (zero between launches). stats null: no split.
struct SplitTiles {
  unsigned* arrivals = nullptr;
  float* stats = nullptr;
  float* acc = nullptr;
  int max_tiles = 0;
};

// Addresses one KV head of one sequence by absolute position through its block table.
struct KeyView {
  const u16* k;
  const u16* v;
  const int32_t* block_table;
  int block_size;
  int num_kv_heads;
  int head_dim;
  int kv_head;

  __device__ size_t offset(int pos) const { return offset_in(block_table[pos / block_size], pos); }
  // offset(pos), given pos's block table entry.
  __device__ size_t offset_in(int32_t block, int pos) const {
    const int64_t slot = static_cast<int64_t>(block) * block_size + pos % block_size;
    return (static_cast<size_t>(slot) * num_kv_heads + kv_head) * head_dim;
  }
  // q . k in index order over head_dim, fp32, times the softmax scale (the CPU's score()).
  __device__ float score(const float* q, int pos, float scale) const {
    const u16* key = k + offset(pos);
    float dot = 0.0f;
    for (int d = 0; d < head_dim; ++d) dot = add(dot, mul(q[d], widen(key[d])));
    return mul(dot, scale);
  }
};

// The attention arguments both kernels take, checked as the contract says.
inline void check_attention_args(const KvPool& kv, int M, int n_heads, int vendor_splits) {
  require(kv.num_kv_heads > 0 && n_heads > 0 && n_heads % kv.num_kv_heads == 0,
          "attention: n_heads " + std::to_string(n_heads) + " is not a multiple of num_kv_heads " +
              std::to_string(kv.num_kv_heads));
  require(kv.head_dim > 0 && kv.head_dim <= kMaxHeadDim,
          "attention: head_dim " + std::to_string(kv.head_dim) + " outside (0, " +
              std::to_string(kMaxHeadDim) + "]");
  require(vendor_splits >= 1 && vendor_splits <= kMaxVendorSplits,
          "attention: vendor_splits " + std::to_string(vendor_splits) + " outside [1, " +
              std::to_string(kMaxVendorSplits) + "]");
  require(M >= 0 && kv.block_size > 0, "attention: need M >= 0 and block_size > 0");
}

}  // namespace bih::cuda::device
