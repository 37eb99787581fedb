// attention_split_kv.cu: the fold of a split-KV attention launch (attention_kernel.cu decides the
// split and sizes its scratch).
//
// Where a launch has few (row, head) blocks (a decode step at small batch), one block per pair
// walks its whole context one pass after another while most multiprocessors idle. Split, each
// segment of kSplitKeys keys is its own block and leaves its tiles unfolded in global memory
// (SplitTiles); this kernel then folds them. The invariant family's order is a fold of tiles of
// kAttentionTile absolute positions in increasing order, and each tile's max, sum and weighted V
// sums depend on that tile alone, so the split changes who computes a tile, never its bits, and
// the fold below is the one attention_kernel runs (FoldedSoftmax::fold with fold_factors_of's
// factors): the running max as a max_of chain, each tile's two rescale factors from it (in
// parallel, one tile per thread), then per dim the serial chain of rounded multiplies and adds.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "models/cuda/attention_common.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/device_math.cuh"

namespace bih::cuda {
namespace {

using device::add;
using device::divide;
using device::exp_f;
using device::kAttentionThreads;
using device::kDimsPerThread;
using device::kSplitKeys;
using device::max_of;
using device::mul;
using device::narrow;
using device::SplitTiles;
using device::sub;
using device::tile_acc_stride;
using device::u16;

constexpr int kFoldRound = kAttentionThreads;  // tiles whose factors one round computes

// grid [M * n_heads], block [kAttentionThreads]. Block b folds the tiles of row b / n_heads that
// its split launch left in `tiles` into out [M, n_heads, head_dim]; contexts of one segment or
// less were finished by the split launch itself.
__global__ void __launch_bounds__(kAttentionThreads)
    fold_split_tiles_kernel(SplitTiles tiles, const int32_t* context_lens, int n_heads,
                            int head_dim, u16* out) {
  __shared__ float maxes[kFoldRound];
  __shared__ float sums[kFoldRound];
  __shared__ float before[kFoldRound];  // the running max before each tile, after[] after it
  __shared__ float after[kFoldRound];
  __shared__ float scale_total[kFoldRound];
  __shared__ float scale_part[kFoldRound];
  const int b = blockIdx.x;
  const int t = threadIdx.x;
  const int context = context_lens[b / n_heads];
  if (context <= kSplitKeys) return;
  const int count = (context + kAttentionTile - 1) / kAttentionTile;
  const int stride = tile_acc_stride(head_dim);
  const float* stats = tiles.stats + 2 * static_cast<size_t>(b) * tiles.max_tiles;
  const float* tile_acc = tiles.acc + static_cast<size_t>(b) * tiles.max_tiles * stride;

  float running_max = 0.0f;  // thread 0's
  float sum = 0.0f;          // every thread's, the same chain
  float acc[kDimsPerThread] = {};
  for (int round = 0; round < count; round += kFoldRound) {
    const int n = min(kFoldRound, count - round);
    if (t < n) {
      maxes[t] = stats[2 * (round + t)];
      sums[t] = stats[2 * (round + t) + 1];
    }
    __syncthreads();
    if (t == 0) {
      for (int i = 0; i < n; ++i) {
        if (round + i == 0) {
          running_max = maxes[0];  // the first tile is taken as it is
          continue;
        }
        before[i] = running_max;
        running_max = max_of(running_max, maxes[i]);
        after[i] = running_max;
      }
    }
    __syncthreads();
    if (t < n && round + t > 0) {
      scale_total[t] = exp_f(sub(before[t], after[t]));
      scale_part[t] = exp_f(sub(maxes[t], after[t]));
    }
    __syncthreads();
#pragma unroll 4
    for (int i = 0; i < n; ++i) {
      float part[kDimsPerThread];
#pragma unroll
      for (int j = 0; j < kDimsPerThread; ++j) {
        const int d = t + j * kAttentionThreads;
        part[j] = d < head_dim ? tile_acc[static_cast<size_t>(round + i) * stride + d] : 0.0f;
      }
      if (round + i == 0) {
        sum = sums[0];
#pragma unroll
        for (int j = 0; j < kDimsPerThread; ++j) acc[j] = part[j];
        continue;
      }
      sum = add(mul(sum, scale_total[i]), mul(sums[i], scale_part[i]));
#pragma unroll
      for (int j = 0; j < kDimsPerThread; ++j) {
        acc[j] = add(mul(acc[j], scale_total[i]), mul(part[j], scale_part[i]));
      }
    }
    __syncthreads();  // the round's shared arrays are rewritten by the next
  }
  u16* out_head = out + static_cast<size_t>(b) * head_dim;
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int d = t + j * kAttentionThreads;
    if (d < head_dim) out_head[d] = narrow(divide(acc[j], sum));
  }
}

}  // namespace

namespace device {

void fold_split_tiles(const SplitTiles& tiles, const int32_t* context_lens, int M, int n_heads,
                      int head_dim, u16* out, cudaStream_t stream) {
  fold_split_tiles_kernel<<<static_cast<unsigned>(int64_t{M} * n_heads), kAttentionThreads, 0,
                            stream>>>(tiles, context_lens, n_heads, head_dim, out);
  cudaCheck(cudaGetLastError());
}

}  // namespace device
}  // namespace bih::cuda
