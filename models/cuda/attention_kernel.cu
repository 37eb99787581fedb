// attention_kernel.cu: attention_with_splits (kernels.hpp), the staged attention kernel of both
// families and its launcher. attention_reference_kernel.cu keeps the kernel it replaced as its
// bitwise reference; what the two share is attention_common.cuh, the numerics device_math.cuh.
//
// One block per (row, head). Every output element's arithmetic is the CPU's (attention.cpp), op
// for op through device_math.cuh's rounding helpers. Only the way operands arrive is tuned: a pass
// of up to kKeysPerPass keys looks its block table up once per key, stages its K and V rows in
// shared memory with coalesced asynchronous copies (V lands while the keys are scored), and the
// softmax factors whose operands are known early (the fold rescales of tiles and vendor parts, the
// vendor per-key weights) are computed once, in parallel, each by the very chain of operations
// the serial code would run, then read by the serial chains that remain.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "models/cuda/attention_common.cuh"
#include "models/cuda/attention_split_fold.cuh"
#include "models/cuda/attention_staging.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/device_info.hpp"
#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"
#include "models/cuda/programmatic_launch.cuh"
#include "models/cuda/ptx.cuh"

namespace bih::cuda {
namespace {

using device::add;
using device::attention_smem_bytes;
using device::bits_of;
using device::check_attention_args;
using device::check_launch;
using device::commit_copies;
using device::divide;
using device::exp_f;
using device::fold_split_tiles_in_block;
using device::kAttentionThreads;
using device::kDimsPerLane;
using device::kDimsPerThread;
using device::KeyView;
using device::kKeysPerPass;
using device::kMaxVendorSplits;
using device::kMinKeysPerPass;
using device::kSplitFoldSharedFloats;
using device::kSplitKeys;
using device::kTilesPerPass;
using device::kWarpsPerBlock;
using device::max_of;
using device::mul;
using device::narrow;
using device::require;
using device::split_fold_last_arrival;
using device::SplitTiles;
using device::stage_rows;
using device::staged_key_stride;
using device::staged_score;
using device::staged_value_stride;
using device::sub;
using device::tile_acc_stride;
using device::u16;
using device::wait_copies;
using device::widen;

// The fold factors of partial i of a sequence folded in order into a running total (the CPU's
// combine(), RunningSoftmax::fold in attention_reference_kernel.cu): the total's max before
// partial i comes from the same max_of chain fold() walks, so scale_total, scale_part and new_max
// are fold()'s own values. maxes: the partials' maxima; before partial 0 the total is empty or has
// max total_max. Not for partial 0 of an empty total, which is taken as it is.
struct FoldFactors {
  float scale_total;
  float scale_part;
  float new_max;
};
__device__ FoldFactors fold_factors_of(const float* maxes, int i, bool total_empty,
                                       float total_max) {
  float before = total_empty ? maxes[0] : total_max;
  for (int k = total_empty ? 1 : 0; k < i; ++k) before = max_of(before, maxes[k]);
  const float after = max_of(before, maxes[i]);
  return {exp_f(sub(before, after)), exp_f(sub(maxes[i], after)), after};
}
// fold_factors_of() stored at index i of the three arrays.
__device__ void fold_factors(const float* maxes, int i, bool total_empty, float total_max,
                             float* scale_total, float* scale_part, float* new_max) {
  const FoldFactors f = fold_factors_of(maxes, i, total_empty, total_max);
  scale_total[i] = f.scale_total;
  scale_part[i] = f.scale_part;
  new_max[i] = f.new_max;
}

// The running softmax total of one thread's head dims, folded with factors from fold_factors():
// the operations of RunningSoftmax::fold. max and sum are held identically by every thread.
template <int kDims>
struct FoldedSoftmax {
  bool empty = true;
  float max = -INFINITY;
  float sum = 0.0f;
  float acc[kDims] = {};

  __device__ void fold(float part_max, float part_sum, const float* part_acc, float scale_total,
                       float scale_part, float new_max) {
    if (empty) {
      empty = false;
      max = part_max;
      sum = part_sum;
      for (int j = 0; j < kDims; ++j) acc[j] = part_acc[j];
      return;
    }
    sum = add(mul(sum, scale_total), mul(part_sum, scale_part));
    for (int j = 0; j < kDims; ++j)
      acc[j] = add(mul(acc[j], scale_total), mul(part_acc[j], scale_part));
    max = new_max;
  }
};

// grid [M * n_heads], block [kAttentionThreads], dynamic shared memory attention_smem_bytes(
// head_dim, kVendor, keys_per_pass). q: [M, n_heads, head_dim]; out: same shape. vector_copies:
// head_dim % 8 == 0 and both pools 16-byte aligned. keys_per_pass: a multiple of kAttentionTile
// up to kKeysPerPass; it changes no arithmetic, only how many blocks fit on a multiprocessor (the
// launcher's choice). One instantiation per family: the invariant one carries no flash-decoding
// code (a smaller kernel, fewer instruction-cache misses). kShort (passes shorter than
// kKeysPerPass): at most 64 registers per thread, so that 8 blocks fit on a multiprocessor (a
// bs=64 decode step's 1024 (row, head) blocks in one wave); the long passes keep 74 to 78, whose
// spill-free code is 3 to 4% faster for the few blocks of a bs=1 step. kSplit (invariant only):
// the split-KV launch, whose partials and fold live in their own instances, so that the others
// keep their registers (with them inlined, a bs=64 step's short passes went 12.8 -> 14.0 us).
template <bool kVendor, bool kShort, bool kSplit>
__global__ void __launch_bounds__(kAttentionThreads, kShort ? 8 : 1)
    attention_kernel(const u16* q, const u16* pool_k, const u16* pool_v, int block_size,
                     int num_kv_heads, int head_dim, AttentionBatch batch, int n_heads, int group,
                     float scale, int vendor_splits, bool vector_copies, int keys_per_pass,
                     SplitTiles split_tiles, u16* out) {
  ptx::allow_dependent_launch();  // the o_proj GEMM after it may stream its weights meanwhile
  ptx::wait_for_prerequisites();  // launched early (programmatic_launch.cuh)
  extern __shared__ __align__(16) unsigned char attention_smem[];
  __shared__ __align__(16) float q_s[kMaxHeadDim];
  __shared__ size_t key_offset[kKeysPerPass];  // the pass's keys' row offsets in the pools
  __shared__ float scores[kKeysPerPass];
  __shared__ float weights[kKeysPerPass];
  __shared__ float rescales[kKeysPerPass];     // vendor: each key's rescale of its part's state
  __shared__ float running_max[kKeysPerPass];  // vendor: its part's max after each key
  __shared__ float tile_max[kTilesPerPass];
  __shared__ float tile_sum[kTilesPerPass];
  __shared__ float fold_scale_total[kMaxVendorSplits];  // per tile or part, from fold_factors
  __shared__ float fold_scale_part[kMaxVendorSplits];
  __shared__ float fold_max[kMaxVendorSplits];
  __shared__ float part_max[kMaxVendorSplits];
  __shared__ float part_sum[kMaxVendorSplits];

  const int k_stride = staged_key_stride(head_dim);
  const int v_stride = staged_value_stride(head_dim);
  const int acc_stride = tile_acc_stride(head_dim);
  u16* k_s = reinterpret_cast<u16*>(attention_smem);  // [keys_per_pass, k_stride]
  u16* v_s = k_s + keys_per_pass * k_stride;          // [keys_per_pass, v_stride]
  // The pass's tiles' weighted V sums: [keys_per_pass / kAttentionTile, acc_stride].
  float* tile_acc = reinterpret_cast<float*>(v_s + keys_per_pass * v_stride);
  float* part_acc = tile_acc + keys_per_pass / kAttentionTile * acc_stride;  // [splits, head_dim]

  const int row = blockIdx.x / n_heads;
  const int h = blockIdx.x % n_heads;
  const int t = threadIdx.x;
  const int lane = t % 32;
  const int warp = t / 32;
  const int context = batch.context_lens[row];
  const bool split = kVendor && batch.decode[row] != 0;
  // Split KV (invariant, split_tiles set, a context past one segment): block (b, y) computes the
  // tiles of segment y, keys [y kSplitKeys, (y + 1) kSplitKeys), into split_tiles, unfolded, and
  // the segment's block that stores last folds them all (attention_split_fold.cuh). Otherwise
  // block (b, 0) folds the whole context itself.
  const bool partials = kSplit && context > kSplitKeys;
  const int first_key = partials ? static_cast<int>(blockIdx.y) * kSplitKeys : 0;
  const int last_key = partials ? min(context, first_key + kSplitKeys) : context;
  if (blockIdx.y > 0 && (!partials || first_key >= context)) return;
  const KeyView keys{pool_k,
                     pool_v,
                     batch.block_tables + static_cast<size_t>(row) * batch.block_table_stride,
                     block_size,
                     num_kv_heads,
                     head_dim,
                     h / group};
  // Key t's block table entry for a pass is read a pass ahead, without waiting for the context
  // length (every entry of the row's table is in bounds; those past the context go unused): the
  // first pass's load overlaps those of context and q, a later pass's the pass before it.
  const auto table_entry = [&](int pos) -> int32_t {
    return pos / block_size < batch.block_table_stride ? keys.block_table[pos / block_size] : 0;
  };
  int32_t pass_block = table_entry(first_key + t);
  const u16* q_head = q + static_cast<size_t>(blockIdx.x) * head_dim;
  for (int d = t; d < head_dim; d += blockDim.x) q_s[d] = widen(q_head[d]);

  // Vendor (flash-decoding): `parts` contiguous parts of `chunk` keys, each reduced key by key
  // (by warp part % kWarpsPerBlock), its state kept in part_max/part_sum/part_acc between passes.
  const int chunk = split ? (context + vendor_splits - 1) / vendor_splits : 1;
  const int parts = split && context > 0 ? (context + chunk - 1) / chunk : 0;

  FoldedSoftmax<kDimsPerThread> total;
  for (int pass_begin = first_key; pass_begin < last_key; pass_begin += keys_per_pass) {
    const int pass_keys = min(keys_per_pass, last_key - pass_begin);
    const int pass_end = pass_begin + pass_keys;
    if (t < pass_keys) key_offset[t] = keys.offset_in(pass_block, pass_begin + t);
    pass_block = table_entry(pass_begin + keys_per_pass + t);
    __syncthreads();  // key_offset (and q_s)
    stage_rows(k_s, k_stride, pool_k, key_offset, pass_keys, head_dim, vector_copies);
    commit_copies();
    stage_rows(v_s, v_stride, pool_v, key_offset, pass_keys, head_dim, vector_copies);
    commit_copies();
    wait_copies<1>();  // this thread's K pieces; V may still be in flight
    __syncthreads();
    if (t < pass_keys) {
      scores[t] = staged_score(q_s, k_s + t * k_stride, head_dim, scale, vector_copies);
    }
    __syncthreads();

    if (split) {
      // Key t's online-softmax step within its part: the part's max before it (the same max_of
      // chain as the serial loop, from the part's first key or from its state at pass start),
      // then the step's rescale and weight.
      if (t < pass_keys) {
        const int key = pass_begin + t;
        const int part_begin = key / chunk * chunk;
        if (key != part_begin) {
          float before;
          int from;
          if (part_begin >= pass_begin) {
            before = scores[part_begin - pass_begin];
            from = part_begin + 1;
          } else {
            before = part_max[key / chunk];
            from = pass_begin;
          }
          for (int i = from; i < key; ++i) before = max_of(before, scores[i - pass_begin]);
          const float new_max = max_of(before, scores[t]);
          rescales[t] = exp_f(sub(before, new_max));
          weights[t] = exp_f(sub(scores[t], new_max));
          running_max[t] = new_max;
        }
      }
      wait_copies<0>();
      __syncthreads();  // V, rescales, weights
      for (int part = warp; part < parts; part += kWarpsPerBlock) {
        const int part_begin = part * chunk;
        const int begin = max(part_begin, pass_begin);
        const int end = min(min(context, part_begin + chunk), pass_end);
        if (begin >= end) continue;
        float max = -INFINITY;
        float sum = 0.0f;
        float acc[kDimsPerLane] = {};
        if (begin != part_begin) {  // the part began in an earlier pass
          max = part_max[part];
          sum = part_sum[part];
          for (int i = 0; i < kDimsPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < head_dim) acc[i] = part_acc[part * head_dim + d];
          }
        }
        for (int key = begin; key < end; ++key) {
          const int k = key - pass_begin;
          const u16* value = v_s + k * v_stride;
          if (key == part_begin) {
            max = scores[k];
            sum = 1.0f;
            for (int i = 0; i < kDimsPerLane; ++i) {
              const int d = lane + 32 * i;
              if (d < head_dim) acc[i] = widen(value[d]);
            }
            continue;
          }
          const float rescale = rescales[k];
          const float weight = weights[k];
          sum = add(mul(sum, rescale), weight);
          for (int i = 0; i < kDimsPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < head_dim) acc[i] = add(mul(acc[i], rescale), mul(weight, widen(value[d])));
          }
          max = running_max[k];
        }
        __syncwarp();  // every lane has read the part's old state
        if (lane == 0) {
          part_max[part] = max;
          part_sum[part] = sum;
        }
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < head_dim) part_acc[part * head_dim + d] = acc[i];
        }
      }
    } else {
      // Invariant: tiles of kAttentionTile absolute positions. Each key's tile max (every key of
      // a tile computes the same value, the tile's scores loaded before the max_of chain), then
      // its weight.
      const int tiles = (pass_keys + kAttentionTile - 1) / kAttentionTile;
      if (t < pass_keys) {
        const int tile_begin = t - t % kAttentionTile;
        const int tile_keys = min(kAttentionTile, pass_keys - tile_begin);
        float tile_scores[kAttentionTile];  // past tile_keys: stale, unused
#pragma unroll
        for (int p = 0; p < kAttentionTile; ++p) tile_scores[p] = scores[tile_begin + p];
        float m = -INFINITY;
#pragma unroll
        for (int p = 0; p < kAttentionTile; ++p) {
          if (p < tile_keys) m = max_of(m, tile_scores[p]);
        }
        if (t == tile_begin) tile_max[t / kAttentionTile] = m;
        weights[t] = exp_f(sub(scores[t], m));
      }
      wait_copies<0>();
      __syncthreads();  // weights, tile maxima, V
      // Warp w builds whole tiles w, w + kWarpsPerBlock, ... into shared partials: the tile's fold
      // factors, its sum of weights in key order, and its weighted V sums, each dim's in key order
      // (lane: 4 adjacent dims in every 128). Tiles are independent; only their fold is serial.
      for (int tile = warp; tile < tiles; tile += kWarpsPerBlock) {
        const int tile_begin = tile * kAttentionTile;
        const int tile_keys = min(kAttentionTile, pass_keys - tile_begin);
        float w[kAttentionTile];  // past tile_keys: stale, unused
#pragma unroll
        for (int p = 0; p < kAttentionTile; ++p) w[p] = weights[tile_begin + p];
        float sum = 0.0f;
#pragma unroll
        for (int p = 0; p < kAttentionTile; ++p) {
          if (p < tile_keys) sum = add(sum, w[p]);
        }
        // Every lane computes the (warp-uniform) factors, so no lane waits on another's branch.
        FoldFactors factors{};
        if (!partials && !(total.empty && tile == 0)) {
          factors = fold_factors_of(tile_max, tile, total.empty, total.max);
        }
        if (lane == 0) {
          tile_sum[tile] = sum;
          fold_scale_total[tile] = factors.scale_total;
          fold_scale_part[tile] = factors.scale_part;
          fold_max[tile] = factors.new_max;
        }
#pragma unroll 1
        for (int d0 = 4 * lane; d0 < head_dim; d0 += 128) {
          float a[4] = {};
#pragma unroll
          for (int p = 0; p < kAttentionTile; ++p) {
            // little endian: dim d0 + 2i is the low half of 32-bit word i
            const uint2 piece =
                *reinterpret_cast<const uint2*>(v_s + (tile_begin + p) * v_stride + d0);
            if (p < tile_keys) {
              a[0] = add(a[0], mul(w[p], __uint_as_float(piece.x << 16)));
              a[1] = add(a[1], mul(w[p], __uint_as_float(piece.x & 0xffff0000u)));
              a[2] = add(a[2], mul(w[p], __uint_as_float(piece.y << 16)));
              a[3] = add(a[3], mul(w[p], __uint_as_float(piece.y & 0xffff0000u)));
            }
          }
          *reinterpret_cast<float4*>(&tile_acc[tile * acc_stride + d0]) =
              make_float4(a[0], a[1], a[2], a[3]);
        }
      }
      __syncthreads();  // tile partials and factors
      if (partials) {
        // Left unfolded for the pair's last block, at the tiles' absolute indices.
        const size_t first_tile =
            static_cast<size_t>(blockIdx.x) * split_tiles.max_tiles + pass_begin / kAttentionTile;
        if (t < tiles) {
          split_tiles.stats[2 * (first_tile + t)] = tile_max[t];
          split_tiles.stats[2 * (first_tile + t) + 1] = tile_sum[t];
        }
        for (int i = t; i < tiles * acc_stride; i += kAttentionThreads) {
          split_tiles.acc[first_tile * acc_stride + i] = tile_acc[i];
        }
        __syncthreads();  // the pass's shared arrays are rewritten by the next pass
        continue;
      }
      // The tiles folded in order into the total, each thread its own dims.
      for (int tile = 0; tile < tiles; ++tile) {
        float part[kDimsPerThread];
#pragma unroll
        for (int j = 0; j < kDimsPerThread; ++j) {
          const int d = t + j * kAttentionThreads;
          part[j] = d < head_dim ? tile_acc[tile * acc_stride + d] : 0.0f;
        }
        total.fold(tile_max[tile], tile_sum[tile], part, fold_scale_total[tile],
                   fold_scale_part[tile], fold_max[tile]);
      }
    }
    __syncthreads();  // the pass's shared arrays are rewritten by the next pass
  }

  if (split && parts > 0) {
    // The parts folded in order into the total.
    if (t > 0 && t < parts) {
      fold_factors(part_max, t, true, -INFINITY, fold_scale_total, fold_scale_part, fold_max);
    }
    __syncthreads();
    for (int part = 0; part < parts; ++part) {
      float mine[kDimsPerThread];
      for (int j = 0; j < kDimsPerThread; ++j) {
        const int d = t + j * kAttentionThreads;
        mine[j] = d < head_dim ? part_acc[part * head_dim + d] : 0.0f;
      }
      total.fold(part_max[part], part_sum[part], mine, fold_scale_total[part],
                 fold_scale_part[part], fold_max[part]);
    }
  }

  u16* out_head = out + static_cast<size_t>(blockIdx.x) * head_dim;
  if constexpr (kSplit) {
    if (partials) {
      const int segments = (context + kSplitKeys - 1) / kSplitKeys;
      if (!split_fold_last_arrival(split_tiles, blockIdx.x, segments)) return;
      // The staging area is free now (a split launch sizes it for them): the fold's arrays.
      fold_split_tiles_in_block(split_tiles, blockIdx.x,
                                (context + kAttentionTile - 1) / kAttentionTile, head_dim,
                                reinterpret_cast<float*>(attention_smem), out_head);
      return;
    }
  }
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int d = t + j * kAttentionThreads;
    if (d < head_dim) out_head[d] = total.empty ? u16{0} : narrow(divide(total.acc[j], total.sum));
  }
}

// Lets attention_kernel<kVendor, kShort, kSplit> launch with `bytes` of dynamic shared memory.
template <bool kVendor, bool kShort, bool kSplit>
void allow_attention_smem(size_t bytes) {
  allow_dynamic_shared_memory(
      reinterpret_cast<const void*>(&attention_kernel<kVendor, kShort, kSplit>), bytes);
}

// Blocks of attention_kernel<kVendor, kShort, kSplit> resident on one multiprocessor with passes of
// `keys` keys at this head_dim, once per (device, head_dim, keys) per instantiation.
template <bool kVendor, bool kShort, bool kSplit>
int resident_attention_blocks(int head_dim, int keys) {
  const size_t smem = attention_smem_bytes(head_dim, kVendor, keys);
  allow_attention_smem<kVendor, kShort, kSplit>(smem);
  int device = 0;
  cudaCheck(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, int> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, head_dim, keys);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int blocks = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // no stream work (see above)
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t got = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, attention_kernel<kVendor, kShort, kSplit>, kAttentionThreads, smem);
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaCheck(got);
  known.emplace(key, blocks);
  return blocks;
}

// Blocks a launch may have and still split its KV: at most half the multiprocessors, so that
// each (row, head) gets at least two of them.
int64_t max_split_blocks() { return multiprocessor_count() / 2; }

// The longest pass (fewest passes over a long context) whose blocks all fit in one wave; the
// shortest where none does. A function of the launch's shape, never of the contexts.
template <bool kVendor, bool kSplit>
int pick_keys_per_pass(int head_dim, int64_t blocks) {
  const int64_t sms = multiprocessor_count();
  if (blocks <= sms * resident_attention_blocks<kVendor, false, kSplit>(head_dim, kKeysPerPass)) {
    return kKeysPerPass;
  }
  if (blocks <=
      sms * resident_attention_blocks<kVendor, true, kSplit>(head_dim, kKeysPerPass / 2)) {
    return kKeysPerPass / 2;
  }
  return kMinKeysPerPass;
}

// The arrival counters first (one per block, rounded up to 16 bytes), then the tiles' stats and
// weighted V sums.
size_t split_counter_bytes() { return static_cast<size_t>((max_split_blocks() + 3) / 4 * 16); }

}  // namespace

size_t attention_split_scratch_bytes(int head_dim, int max_context) {
  const int64_t max_tiles = (int64_t{max_context} + kAttentionTile - 1) / kAttentionTile;
  return split_counter_bytes() +
         static_cast<size_t>(max_split_blocks() * max_tiles * (2 + tile_acc_stride(head_dim))) *
             sizeof(float);
}

void attention_with_splits(KernelFamily family, const bf16* q, const KvPool& kv,
                           const AttentionBatch& batch, int M, int n_heads, int vendor_splits,
                           bf16* out, Stream stream, int keys_per_pass, void* split_scratch,
                           size_t split_scratch_bytes) {
  check_attention_args(kv, M, n_heads, vendor_splits);
  require(
      keys_per_pass == 0 || (keys_per_pass >= kMinKeysPerPass && keys_per_pass <= kKeysPerPass &&
                             keys_per_pass % kAttentionTile == 0),
      "attention: keys_per_pass " + std::to_string(keys_per_pass) +
          " is neither 0 (chosen by the launch's shape) nor a multiple of " +
          std::to_string(kAttentionTile) + " in [" + std::to_string(kMinKeysPerPass) + ", " +
          std::to_string(kKeysPerPass) + "]");
  if (M == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim));  // as on the CPU
  const int64_t blocks = int64_t{M} * n_heads;
  const bool vendor = family == KernelFamily::vendor;
  const bool vector_copies = kv.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 &&
                             reinterpret_cast<uintptr_t>(kv.v) % 16 == 0;
  // Split KV where the scratch is given, the family is invariant, a context may pass one segment
  // and the blocks are few: a function of the launch's shape, never of the contexts.
  const int64_t max_context = int64_t{batch.block_table_stride} * kv.block_size;
  SplitTiles split_tiles;
  unsigned segments = 1;
  if (!vendor && split_scratch != nullptr && max_context > kSplitKeys &&
      blocks <= max_split_blocks()) {
    const size_t needed = attention_split_scratch_bytes(kv.head_dim, static_cast<int>(max_context));
    require(split_scratch_bytes >= needed,
            "attention: split_scratch_bytes " + std::to_string(split_scratch_bytes) +
                " is under attention_split_scratch_bytes(" + std::to_string(kv.head_dim) + ", " +
                std::to_string(max_context) + ") = " + std::to_string(needed));
    split_tiles.max_tiles = static_cast<int>((max_context + kAttentionTile - 1) / kAttentionTile);
    split_tiles.arrivals = static_cast<unsigned*>(split_scratch);
    split_tiles.stats = reinterpret_cast<float*>(static_cast<unsigned char*>(split_scratch) +
                                                 split_counter_bytes());
    split_tiles.acc = split_tiles.stats + 2 * blocks * split_tiles.max_tiles;
    segments = static_cast<unsigned>((max_context + kSplitKeys - 1) / kSplitKeys);
  }
  const bool split = split_tiles.stats != nullptr;
  if (keys_per_pass == 0) {
    keys_per_pass = vendor  ? pick_keys_per_pass<true, false>(kv.head_dim, blocks)
                    : split ? pick_keys_per_pass<false, true>(kv.head_dim, blocks * segments)
                            : pick_keys_per_pass<false, false>(kv.head_dim, blocks);
  }
  size_t smem = attention_smem_bytes(kv.head_dim, vendor, keys_per_pass);
  // A split launch's folding block reuses the staging area for the fold's arrays.
  if (split) smem = std::max(smem, kSplitFoldSharedFloats * sizeof(float));
  const auto launch = [&](auto kernel) {
    allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), smem);
    launch_early(kernel, dim3(static_cast<unsigned>(blocks), segments), dim3(kAttentionThreads),
                 smem, stream, bits_of(q), bits_of(kv.k), bits_of(kv.v), kv.block_size,
                 kv.num_kv_heads, kv.head_dim, batch, n_heads, n_heads / kv.num_kv_heads, scale,
                 vendor_splits, vector_copies, keys_per_pass, split_tiles, bits_of(out));
  };
  const bool short_passes = keys_per_pass < kKeysPerPass;
  if (vendor) {
    launch(short_passes ? attention_kernel<true, true, false>
                        : attention_kernel<true, false, false>);
  } else if (split) {
    launch(short_passes ? attention_kernel<false, true, true>
                        : attention_kernel<false, false, true>);
  } else {
    launch(short_passes ? attention_kernel<false, true, false>
                        : attention_kernel<false, false, false>);
  }
  check_launch();
}

}  // namespace bih::cuda
