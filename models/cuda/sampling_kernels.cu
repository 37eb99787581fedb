// sampling_kernels.cu: greedy_sample and greedy_sample_scratch_bytes (kernels.hpp), the greedy
// sampler in three launches. Numerics: device_math.cuh.
//
// A row's ids are cut into chunks of kSampleChunk (the row's last chunk may be short) and the
// chunks into kSampleBlocks slices of chunks_per_slice (greedy_sample_slice_length). In launches 1
// and 2 the block of slice b walks the slice's chunks with a fixed stride: thread t takes chunks
// first + t, first + t + kSampleThreads, ... and each chunk's ids in increasing order. That order
// is a function of V alone; a chunk arrives as one 16-byte load when it is whole and the row is
// 16-byte aligned (always when V is a multiple of 8 and logits is), as scalar loads otherwise, and
// the arithmetic on it is the same either way.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"

namespace bih::cuda {
namespace {

using device::add;
using device::bits_of;
using device::block_sum;
using device::check_launch;
using device::exp_f;
using device::log_f;
using device::require;
using device::sub;
using device::u16;
using device::widen;

// A greedy candidate; id < 0 is "no candidate yet". 8 bytes: one store, one load.
struct alignas(8) Candidate {
  float value;
  int32_t id;
};

// The CPU's scan (models/cpu/kernels.cpp) as a total order on candidates: the larger value wins, a
// tie goes to the lower id; a NaN logit never wins, except at id 0, where the scan starts and which
// nothing then beats. Total, so every reduction tree picks the same winner: the CPU's.
__device__ __forceinline__ void keep_better(Candidate& best, float value, int id) {
  if (id < 0 || (id != 0 && isnan(value))) return;
  if (best.id < 0 || isnan(value) ||
      (!isnan(best.value) && (value > best.value || (value == best.value && id < best.id)))) {
    best = Candidate{value, id};
  }
}

// The best candidate of the block: an xor butterfly in each warp, then the warp winners in warp
// order (the order is total, so the tree only matters for speed). warp_best: shared
// [blockDim.x / 32]. Every thread gets the winner.
__device__ Candidate block_best(Candidate best, Candidate* warp_best) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(0xffffffffu, best.value, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, best.id, offset);
    keep_better(best, other_value, other_id);
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  best = warp_best[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
    keep_better(best, warp_best[w].value, warp_best[w].id);
  }
  __syncthreads();  // warp_best may be reused by the caller
  return best;
}

// Chunk `chunk` of a row of V logits, widened, in id order, into x; returns its length (entries
// past it are left 0). aligned: the row starts on a 16-byte boundary, so a whole chunk is one
// 16-byte load (bf16 is little-endian: the low half of each 32-bit word is the lower id).
__device__ __forceinline__ int load_chunk(const u16* row, int V, int chunk, bool aligned,
                                          float (&x)[kSampleChunk]) {
  static_assert(kSampleChunk == 8, "one uint4 of bf16 per chunk");
  const int begin = chunk * kSampleChunk;
  const int count = min(kSampleChunk, V - begin);
  if (aligned && count == kSampleChunk) {
    const uint4 packed = *reinterpret_cast<const uint4*>(row + begin);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      x[2 * w] = __uint_as_float(words[w] << 16);
      x[2 * w + 1] = __uint_as_float(words[w] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kSampleChunk; ++i) x[i] = i < count ? widen(row[begin + i]) : 0.0f;
  }
  return count;
}

// Slice b's chunks of a row: [first, end) (empty past the row's end).
struct SliceChunks {
  int first;
  int end;
};

__device__ __forceinline__ SliceChunks slice_chunks(int V, int chunks_per_slice, int slice) {
  const int chunks = V / kSampleChunk + (V % kSampleChunk != 0);
  const int first = min(chunks, slice * chunks_per_slice);
  return {first, min(chunks, first + chunks_per_slice)};
}

__device__ __forceinline__ bool aligned_16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Launch 1. grid [M, kSampleBlocks], block [kSampleThreads]. logits: [M, V]; slice_best:
// [M, kSampleBlocks], each slice's winner (id -1 for an empty slice).
__global__ void sample_slice_best_kernel(const u16* __restrict__ logits, int V,
                                         int chunks_per_slice, Candidate* __restrict__ slice_best) {
  __shared__ Candidate warp_best[kSampleThreads / 32];
  const u16* row = logits + static_cast<size_t>(blockIdx.x) * V;
  const bool aligned = aligned_16(row);
  const SliceChunks slice = slice_chunks(V, chunks_per_slice, blockIdx.y);
  Candidate best{-INFINITY, -1};
  for (int c = slice.first + threadIdx.x; c < slice.end; c += blockDim.x) {
    float x[kSampleChunk];
    const int count = load_chunk(row, V, c, aligned, x);
#pragma unroll
    for (int i = 0; i < kSampleChunk; ++i) {
      if (i < count) keep_better(best, x[i], c * kSampleChunk + i);
    }
  }
  best = block_best(best, warp_best);
  if (threadIdx.x == 0)
    slice_best[static_cast<size_t>(blockIdx.x) * kSampleBlocks + blockIdx.y] = best;
}

// Launch 2. grid [M, kSampleBlocks], block [kSampleThreads]. logits: [M, V]; slice_best:
// [M, kSampleBlocks] from launch 1; slice_sums: [M, kSampleBlocks], each slice's sum of
// exp(x - x[best]) (per thread in its chunk order, then block_sum's tree); row_best: [M], the row's
// winner, written by the block of slice 0 (every block of the row finds the same one).
__global__ void sample_slice_sum_kernel(const u16* __restrict__ logits, int V, int chunks_per_slice,
                                        const Candidate* __restrict__ slice_best,
                                        float* __restrict__ slice_sums,
                                        Candidate* __restrict__ row_best) {
  __shared__ Candidate warp_best[kSampleThreads / 32];
  __shared__ float warp_sums[kSampleThreads / 32];
  const size_t row_slices = static_cast<size_t>(blockIdx.x) * kSampleBlocks;
  Candidate best{-INFINITY, -1};
  for (int s = threadIdx.x; s < kSampleBlocks; s += blockDim.x) {
    const Candidate other = slice_best[row_slices + s];
    keep_better(best, other.value, other.id);
  }
  best = block_best(best, warp_best);

  const u16* row = logits + static_cast<size_t>(blockIdx.x) * V;
  const bool aligned = aligned_16(row);
  const SliceChunks slice = slice_chunks(V, chunks_per_slice, blockIdx.y);
  float sum_exp = 0.0f;
  for (int c = slice.first + threadIdx.x; c < slice.end; c += blockDim.x) {
    float x[kSampleChunk];
    const int count = load_chunk(row, V, c, aligned, x);
#pragma unroll
    for (int i = 0; i < kSampleChunk; ++i) {
      if (i < count) sum_exp = add(sum_exp, exp_f(sub(x[i], best.value)));
    }
  }
  sum_exp = block_sum(sum_exp, warp_sums);
  if (threadIdx.x == 0) {
    slice_sums[row_slices + blockIdx.y] = sum_exp;
    if (blockIdx.y == 0) row_best[blockIdx.x] = best;
  }
}

// Launch 3. grid [M], block [kSampleBlocks]. slice_sums: [M, kSampleBlocks]; row_best: [M]; tokens,
// logprobs: [M]. The slice sums in block_sum's tree (fixed by kSampleBlocks), then the CPU's
// x[best] - (x[best] + log(sum)): the winner's value is x[best] itself.
__global__ void sample_finish_kernel(const float* __restrict__ slice_sums,
                                     const Candidate* __restrict__ row_best,
                                     int32_t* __restrict__ tokens, float* __restrict__ logprobs) {
  __shared__ float warp_sums[kSampleBlocks / 32];
  const float sum_exp = block_sum(
      slice_sums[static_cast<size_t>(blockIdx.x) * kSampleBlocks + threadIdx.x], warp_sums);
  if (threadIdx.x == 0) {
    const Candidate best = row_best[blockIdx.x];
    tokens[blockIdx.x] = best.id;
    logprobs[blockIdx.x] = sub(best.value, add(best.value, log_f(sum_exp)));
  }
}

static_assert(kSampleThreads % 32 == 0 && kSampleThreads <= 1024, "whole warps in one block");
static_assert(kSampleBlocks % 32 == 0 && kSampleBlocks <= 1024,
              "launch 3 sums the slices with one thread each, in whole warps");

// The scratch of greedy_sample_scratch_bytes(M): [M, kSampleBlocks] slice winners, [M] row
// winners, [M, kSampleBlocks] slice sums, in that order (8-byte parts first).
struct SampleScratch {
  Candidate* slice_best;
  Candidate* row_best;
  float* slice_sums;
};

SampleScratch sample_scratch(void* scratch, int M) {
  const size_t slices = static_cast<size_t>(M) * kSampleBlocks;
  auto* base = static_cast<unsigned char*>(scratch);
  return {reinterpret_cast<Candidate*>(base), reinterpret_cast<Candidate*>(base) + slices,
          reinterpret_cast<float*>(base + (slices + M) * sizeof(Candidate))};
}

}  // namespace

size_t greedy_sample_scratch_bytes(int M) {
  require(M >= 0, "greedy_sample_scratch_bytes: need M >= 0");
  const size_t slices = static_cast<size_t>(M) * kSampleBlocks;
  return (slices + M) * sizeof(Candidate) + slices * sizeof(float);
}

void greedy_sample(const bf16* logits, int M, int V, int32_t* tokens, float* logprobs,
                   void* scratch, Stream stream) {
  require(V > 0, "greedy_sample: empty vocabulary row");
  require(M >= 0, "greedy_sample: need M >= 0");
  if (M == 0) return;
  require(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % alignof(Candidate) == 0,
          "greedy_sample: scratch must be greedy_sample_scratch_bytes(M) bytes, 8-byte aligned");
  const int chunks_per_slice = greedy_sample_slice_length(V) / kSampleChunk;
  const SampleScratch parts = sample_scratch(scratch, M);
  const dim3 grid(static_cast<unsigned>(M), kSampleBlocks);
  sample_slice_best_kernel<<<grid, kSampleThreads, 0, stream>>>(bits_of(logits), V,
                                                                chunks_per_slice, parts.slice_best);
  check_launch();
  sample_slice_sum_kernel<<<grid, kSampleThreads, 0, stream>>>(
      bits_of(logits), V, chunks_per_slice, parts.slice_best, parts.slice_sums, parts.row_best);
  check_launch();
  sample_finish_kernel<<<M, kSampleBlocks, 0, stream>>>(parts.slice_sums, parts.row_best, tokens,
                                                        logprobs);
  check_launch();
}

}  // namespace bih::cuda
