// attention_split_fold.cuh: the fold of a split-KV attention launch, run by the launch's own last
// block of each (row, head) (attention_kernel.cu decides the split and sizes its scratch).
//
// Where a launch has few (row, head) blocks (a decode step at small batch), one block per pair
// walks its whole context one pass after another while most multiprocessors idle. Split, each
// segment of kSplitKeys keys is its own block and leaves its tiles unfolded in global memory
// (SplitTiles), then counts itself in the pair's arrival counter; the block that arrives last
// folds every tile of the pair and resets the counter for the next launch. No second kernel: a
// fold launch cost about 2.5 us a layer in a graph whatever the context, more than the split
// saved at short contexts (reports/gpu/fma-and-short-passes-2026-12-06).
//
// Bits: the invariant family's order is a fold of tiles of kAttentionTile absolute positions in
// increasing order, and each tile's max, sum and weighted V sums depend on that tile alone, so the
// split changes who computes a tile, never its bits, and the fold below is the one
// attention_kernel runs (FoldedSoftmax::fold with fold_factors_of's factors): the running max as a
// max_of chain, each tile's two rescale factors from it (in parallel, one tile per thread), then
// per dim the serial chain of rounded multiplies and adds. Which block folds changes nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "models/cuda/attention_common.cuh"
#include "models/cuda/device_math.cuh"

namespace bih::cuda::device {

// Floats of shared memory split_fold_last_arrival needs from its caller: six arrays of one entry
// per thread.
inline constexpr int kSplitFoldSharedFloats = 6 * kAttentionThreads;

// Called by every thread of block (b, segment) once its tiles are stored: true in the block that
// arrived last among the `segments` blocks of pair b (the one to fold), with every other block's
// tiles visible to it. The threadfence-then-count pattern of the CUDA programming guide's
// "last block" reduction; the last block sets the counter back to zero.
__device__ inline bool split_fold_last_arrival(const SplitTiles& tiles, int b, int segments) {
  __shared__ bool last;
  __threadfence();  // this block's tiles reach device scope before its arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned before = atomicAdd(tiles.arrivals + b, 1u);
    last = before == static_cast<unsigned>(segments - 1);
    if (last) tiles.arrivals[b] = 0;  // every block of the pair has counted: ready for the next
  }
  __syncthreads();
  if (last) __threadfence();  // order the reads of the other blocks' tiles after the count
  return last;
}

// Folds the `count` tiles of pair b into out_head [head_dim]; shared: kSplitFoldSharedFloats
// floats the caller no longer uses. Tiles are read through L2 (__ldcg): other blocks wrote them
// during this launch, and L1 is not coherent with their writes.
__device__ inline void fold_split_tiles_in_block(const SplitTiles& tiles, int b, int count,
                                                 int head_dim, float* shared, u16* out_head) {
  constexpr int kRound = kAttentionThreads;  // tiles whose factors one round computes
  float* maxes = shared;
  float* sums = maxes + kRound;
  float* before = sums + kRound;  // the running max before each tile, after[] after it
  float* after = before + kRound;
  float* scale_total = after + kRound;
  float* scale_part = scale_total + kRound;
  const int t = threadIdx.x;
  const int stride = tile_acc_stride(head_dim);
  const float* stats = tiles.stats + 2 * static_cast<size_t>(b) * tiles.max_tiles;
  const float* tile_acc = tiles.acc + static_cast<size_t>(b) * tiles.max_tiles * stride;

  float running_max = 0.0f;  // thread 0's
  float sum = 0.0f;          // every thread's, the same chain
  float acc[kDimsPerThread] = {};
  for (int round = 0; round < count; round += kRound) {
    const int n = min(kRound, count - round);
    if (t < n) {
      maxes[t] = __ldcg(stats + 2 * (round + t));
      sums[t] = __ldcg(stats + 2 * (round + t) + 1);
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
        part[j] =
            d < head_dim ? __ldcg(tile_acc + static_cast<size_t>(round + i) * stride + d) : 0.0f;
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
#pragma unroll
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int d = t + j * kAttentionThreads;
    if (d < head_dim) out_head[d] = narrow(divide(acc[j], sum));
  }
}

}  // namespace bih::cuda::device
