// attention_reference_kernel.cu: attention_with_splits_reference (attention_reference.hpp).
//
// The attention kernel as it was before the staged rewrite (attention_kernel.cu), unchanged but for
// its name: the test-only bitwise reference behind attention_with_splits_reference
// (attention_reference.hpp). It reads every operand straight from global memory, so it is slow; it
// must stay as it is.
//
// Block shape, KV addressing and argument checks: attention_common.cuh (shared with the staged
// kernel); numerics: device_math.cuh.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "models/cuda/attention_common.cuh"
#include "models/cuda/attention_reference.hpp"
#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"

namespace bih::cuda {
namespace {

using device::add;
using device::bits_of;
using device::check_attention_args;
using device::check_launch;
using device::divide;
using device::exp_f;
using device::kAttentionThreads;
using device::kDimsPerLane;
using device::kDimsPerThread;
using device::KeyView;
using device::kKeysPerPass;
using device::kMaxVendorSplits;
using device::kTilesPerPass;
using device::max_of;
using device::mul;
using device::narrow;
using device::sub;
using device::u16;
using device::widen;

// The running softmax state of one thread's head dims: the CPU's SoftmaxPartial and combine().
// max and sum are held redundantly (identically) by every thread.
template <int kDims>
struct RunningSoftmax {
  bool empty = true;
  float max = -INFINITY;
  float sum = 0.0f;
  float acc[kDims] = {};

  // Folds a later partial in; the first partial is taken as it is.
  __device__ void fold(float part_max, float part_sum, const float* part_acc) {
    if (empty) {
      empty = false;
      max = part_max;
      sum = part_sum;
      for (int j = 0; j < kDims; ++j) acc[j] = part_acc[j];
      return;
    }
    const float new_max = max_of(max, part_max);
    const float scale_total = exp_f(sub(max, new_max));
    const float scale_part = exp_f(sub(part_max, new_max));
    sum = add(mul(sum, scale_total), mul(part_sum, scale_part));
    for (int j = 0; j < kDims; ++j)
      acc[j] = add(mul(acc[j], scale_total), mul(part_acc[j], scale_part));
    max = new_max;
  }
};

// grid [M * n_heads], block [kAttentionThreads]. q: [M, n_heads, head_dim]; out: same shape.
__global__ void attention_reference_kernel(const u16* q, const u16* pool_k, const u16* pool_v,
                                           int block_size, int num_kv_heads, int head_dim,
                                           AttentionBatch batch, int n_heads, int group,
                                           float scale, bool vendor, int vendor_splits, u16* out) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float scores[kKeysPerPass];
  __shared__ float weights[kKeysPerPass];
  __shared__ float tile_max[kTilesPerPass];
  __shared__ float part_max[kMaxVendorSplits];
  __shared__ float part_sum[kMaxVendorSplits];
  __shared__ float part_acc[kMaxVendorSplits][kMaxHeadDim];

  const int row = blockIdx.x / n_heads;
  const int h = blockIdx.x % n_heads;
  const int t = threadIdx.x;
  const int context = batch.context_lens[row];
  const KeyView keys{pool_k,
                     pool_v,
                     batch.block_tables + static_cast<size_t>(row) * batch.block_table_stride,
                     block_size,
                     num_kv_heads,
                     head_dim,
                     h / group};
  const u16* q_head = q + static_cast<size_t>(blockIdx.x) * head_dim;
  for (int d = t; d < head_dim; d += blockDim.x) q_s[d] = widen(q_head[d]);
  __syncthreads();

  RunningSoftmax<kDimsPerThread> total;
  if (vendor && batch.decode[row] != 0) {
    // Flash-decoding: `splits` contiguous parts, each reduced key by key by one warp, in parallel.
    const int chunk = (context + vendor_splits - 1) / vendor_splits;
    const int parts = context > 0 ? (context + chunk - 1) / chunk : 0;
    const int lane = t % 32;
    for (int part = t / 32; part < parts; part += blockDim.x / 32) {
      const int begin = part * chunk;
      const int end = min(context, begin + chunk);
      bool empty = true;
      float max = -INFINITY;
      float sum = 0.0f;
      float acc[kDimsPerLane] = {};
      for (int batch_begin = begin; batch_begin < end; batch_begin += 32) {
        // 32 keys scored at once (one per lane, each in the CPU's order), then folded in order.
        const int count = min(32, end - batch_begin);
        const float my_score = lane < count ? keys.score(q_s, batch_begin + lane, scale) : 0.0f;
        for (int j = 0; j < count; ++j) {
          const float s = __shfl_sync(0xffffffffu, my_score, j);
          const u16* value = keys.v + keys.offset(batch_begin + j);
          if (empty) {
            empty = false;
            max = s;
            sum = 1.0f;
            for (int i = 0; i < kDimsPerLane; ++i) {
              const int d = lane + 32 * i;
              if (d < head_dim) acc[i] = widen(value[d]);
            }
            continue;
          }
          const float new_max = max_of(max, s);
          const float rescale = exp_f(sub(max, new_max));
          const float weight = exp_f(sub(s, new_max));
          sum = add(mul(sum, rescale), weight);
          for (int i = 0; i < kDimsPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < head_dim) acc[i] = add(mul(acc[i], rescale), mul(weight, widen(value[d])));
          }
          max = new_max;
        }
      }
      if (lane == 0) {
        part_max[part] = max;
        part_sum[part] = sum;
      }
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int d = lane + 32 * i;
        if (d < head_dim) part_acc[part][d] = acc[i];
      }
    }
    __syncthreads();
    for (int part = 0; part < parts; ++part) {
      float mine[kDimsPerThread];
      for (int j = 0; j < kDimsPerThread; ++j) {
        const int d = t + j * kAttentionThreads;
        mine[j] = d < head_dim ? part_acc[part][d] : 0.0f;
      }
      total.fold(part_max[part], part_sum[part], mine);
    }
  } else {
    // Invariant: tiles of kAttentionTile absolute positions, kTilesPerPass tiles scored per pass.
    for (int pass_begin = 0; pass_begin < context; pass_begin += kKeysPerPass) {
      const int pass_keys = min(kKeysPerPass, context - pass_begin);
      if (t < pass_keys) scores[t] = keys.score(q_s, pass_begin + t, scale);
      __syncthreads();
      if (t < pass_keys) {
        // This key's tile max (every key of a tile computes the same value), then its weight.
        const int tile_begin = t - t % kAttentionTile;
        const int tile_end = min(pass_keys, tile_begin + kAttentionTile);
        float m = -INFINITY;
        for (int p = tile_begin; p < tile_end; ++p) m = max_of(m, scores[p]);
        if (t == tile_begin) tile_max[t / kAttentionTile] = m;
        weights[t] = exp_f(sub(scores[t], m));
      }
      __syncthreads();
      const int tiles = (pass_keys + kAttentionTile - 1) / kAttentionTile;
      for (int tile = 0; tile < tiles; ++tile) {
        const int tile_begin = tile * kAttentionTile;
        const int tile_end = min(pass_keys, tile_begin + kAttentionTile);
        float tile_sum = 0.0f;
        for (int p = tile_begin; p < tile_end; ++p) tile_sum = add(tile_sum, weights[p]);
        float tile_acc[kDimsPerThread];
        for (int j = 0; j < kDimsPerThread; ++j) {
          const int d = t + j * kAttentionThreads;
          float a = 0.0f;
          if (d < head_dim) {
            for (int p = tile_begin; p < tile_end; ++p) {
              a = add(a, mul(weights[p], widen(keys.v[keys.offset(pass_begin + p) + d])));
            }
          }
          tile_acc[j] = a;
        }
        total.fold(tile_max[tile], tile_sum, tile_acc);
      }
      __syncthreads();  // scores and weights are rewritten by the next pass
    }
  }

  u16* out_head = out + static_cast<size_t>(blockIdx.x) * head_dim;
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int d = t + j * kAttentionThreads;
    if (d < head_dim) out_head[d] = total.empty ? u16{0} : narrow(divide(total.acc[j], total.sum));
  }
}

}  // namespace

void attention_with_splits_reference(KernelFamily family, const bf16* q, const KvPool& kv,
                                     const AttentionBatch& batch, int M, int n_heads,
                                     int vendor_splits, bf16* out, Stream stream) {
  check_attention_args(kv, M, n_heads, vendor_splits);
  if (M == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim));  // as on the CPU
  const int64_t blocks = int64_t{M} * n_heads;
  attention_reference_kernel<<<static_cast<unsigned>(blocks), kAttentionThreads, 0, stream>>>(
      bits_of(q), bits_of(kv.k), bits_of(kv.v), kv.block_size, kv.num_kv_heads, kv.head_dim, batch,
      n_heads, n_heads / kv.num_kv_heads, scale, family == KernelFamily::vendor, vendor_splits,
      bits_of(out));
  check_launch();
}

}  // namespace bih::cuda
