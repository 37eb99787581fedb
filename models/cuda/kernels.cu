// kernels.cu: the CUDA backend's non-GEMM kernels (see kernels.hpp for the contract).
//
// Numerics mirror models/cpu/kernels.cpp and attention.cpp operation for operation:
// - every float op is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, ...), which nvcc never
//   contracts into an FMA, so bits do not depend on compiler flags and match the CPU build
//   (-ffp-contract=off) wherever the reduction order is the same;
// - exp and log are evaluated in double and rounded once to float: correctly rounded in all but
//   vanishingly rare cases, as glibc's expf/logf are, so the CPU's values come out;
// - bf16 rounding is the host's bit recipe (round to nearest even, quiet NaN).
// Reduction orders: attention, head norm and RoPE follow the CPU's order exactly; rms_norm's sum
// and the sampler's sum of exp use fixed trees (a block's, and for the sampler then one over the
// row's slices; they depend on H or V only), so they agree with the CPU within rounding, not
// bitwise.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/cuda/attention_reference.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/kernels.hpp"

namespace bih::cuda {
namespace {

using u16 = uint16_t;

constexpr u16 kBf16QuietNan = 0x7fc0;

// ---- scalar helpers: one IEEE rounding each, never fused -------------------------------------
__device__ __forceinline__ float widen(u16 bits) { return __uint_as_float(uint32_t{bits} << 16); }

__device__ __forceinline__ u16 narrow(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<u16>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<u16>((u + rounding_bias) >> 16);
}

__device__ __forceinline__ float round_bf16(float f) { return widen(narrow(f)); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float divide(float a, float b) { return __fdiv_rn(a, b); }
// std::max(a, b) exactly (b only when a < b).
__device__ __forceinline__ float max_of(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float exp_f(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}
__device__ __forceinline__ float log_f(float x) {
  return static_cast<float>(log(static_cast<double>(x)));
}

// 1 / sqrt(sum_sq / n + eps), the CPU's inverse_rms after its sum.
__device__ __forceinline__ float inverse_rms_from_sum(float sum_sq, int n, float eps) {
  const float variance = divide(sum_sq, static_cast<float>(n));
  return divide(1.0f, __fsqrt_rn(add(variance, eps)));
}

// Sum over the block: a fixed xor butterfly in each warp, then the warp sums in warp order. The
// tree depends on blockDim.x only. warp_sums: shared [blockDim.x / 32]. Every thread gets the sum.
__device__ float block_sum(float value, float* warp_sums) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = add(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  float total = warp_sums[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total = add(total, warp_sums[w]);
  __syncthreads();  // warp_sums may be reused by the caller
  return total;
}

void check_launch() { cudaCheck(cudaGetLastError()); }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// ---- norms ----------------------------------------------------------------------------------
// Thread t owns columns t, t + kNormThreads, ... (kPerThread of them at most); it loads all its
// operands before using any (one memory latency per row, not one per column), then sums its
// squares in column order. kPerThread 0: any H, operands read in a loop (the general case).
// grid [M], block [kNormThreads]. x, y: [M, H]; w: [H].
template <int kPerThread>
__global__ void rms_norm_kernel(const u16* x, const u16* w, u16* y, int H, float eps) {
  __shared__ float warp_sums[kNormThreads / 32];
  const u16* xr = x + static_cast<size_t>(blockIdx.x) * H;
  u16* yr = y + static_cast<size_t>(blockIdx.x) * H;
  float sum_sq = 0.0f;
  if constexpr (kPerThread > 0) {
    float v[kPerThread];
    float wv[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kNormThreads;
      v[j] = i < H ? widen(xr[i]) : 0.0f;
      wv[j] = i < H ? widen(w[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (threadIdx.x + j * kNormThreads < H) sum_sq = add(sum_sq, mul(v[j], v[j]));
    }
    const float inv_rms = inverse_rms_from_sum(block_sum(sum_sq, warp_sums), H, eps);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kNormThreads;
      if (i < H) yr[i] = narrow(mul(round_bf16(mul(v[j], inv_rms)), wv[j]));
    }
  } else {
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      const float v = widen(xr[i]);
      sum_sq = add(sum_sq, mul(v, v));
    }
    const float inv_rms = inverse_rms_from_sum(block_sum(sum_sq, warp_sums), H, eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      yr[i] = narrow(mul(round_bf16(mul(widen(xr[i]), inv_rms)), widen(w[i])));
    }
  }
}

// grid [M], block [kNormThreads]. residual, x, y: [M, H]; w: [H]. Each thread reads back only the
// residual elements it wrote itself, so no barrier is needed between the add and the norm.
template <int kPerThread>
__global__ void add_rms_norm_kernel(u16* residual, const u16* x, const u16* w, u16* y, int H,
                                    float eps) {
  __shared__ float warp_sums[kNormThreads / 32];
  u16* rr = residual + static_cast<size_t>(blockIdx.x) * H;
  const u16* xr = x + static_cast<size_t>(blockIdx.x) * H;
  u16* yr = y + static_cast<size_t>(blockIdx.x) * H;
  float sum_sq = 0.0f;
  if constexpr (kPerThread > 0) {
    float r[kPerThread];
    float xv[kPerThread];
    float wv[kPerThread];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kNormThreads;
      r[j] = i < H ? widen(rr[i]) : 0.0f;
      xv[j] = i < H ? widen(xr[i]) : 0.0f;
      wv[j] = i < H ? widen(w[i]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kNormThreads;
      if (i >= H) continue;
      const u16 sum = narrow(add(r[j], xv[j]));
      rr[i] = sum;
      r[j] = widen(sum);
      sum_sq = add(sum_sq, mul(r[j], r[j]));
    }
    const float inv_rms = inverse_rms_from_sum(block_sum(sum_sq, warp_sums), H, eps);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = threadIdx.x + j * kNormThreads;
      if (i < H) yr[i] = narrow(mul(round_bf16(mul(r[j], inv_rms)), wv[j]));
    }
  } else {
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      const u16 r = narrow(add(widen(rr[i]), widen(xr[i])));
      rr[i] = r;
      const float v = widen(r);
      sum_sq = add(sum_sq, mul(v, v));
    }
    const float inv_rms = inverse_rms_from_sum(block_sum(sum_sq, warp_sums), H, eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
      yr[i] = narrow(mul(round_bf16(mul(widen(rr[i]), inv_rms)), widen(w[i])));
    }
  }
}

// ---- head norm + RoPE -------------------------------------------------------------------------
constexpr int kHeadThreads = 32;  // one warp per (row, head)

// One warp normalizes and ropes one head: rms_norm with w[head_dim], then half-split RoPE at
// `pos`; cos_table, sin_table: [max_pos, head_dim/2]. The head is staged in shared memory
// (values: [head_dim]) by the whole warp, then summed in index order (the CPU's order) from there:
// the bits of a sequential sum at the latency of shared memory. The result goes to out, and to
// also_out when that is not null (the same bits: one value stored twice). in may be out (in
// place): every read of in happens before the first write. A position outside [0, max_pos) gives
// a NaN head: the host should have caught it, so make it loud downstream.
__device__ void norm_rope_head(const u16* in, const u16* w, int pos, int head_dim, float eps,
                               const float* cos_table, const float* sin_table, int max_pos,
                               float* values, u16* out, u16* also_out) {
  const int lane = threadIdx.x;
  if (pos < 0 || pos >= max_pos) {
    for (int i = lane; i < head_dim; i += kHeadThreads) {
      out[i] = kBf16QuietNan;
      if (also_out != nullptr) also_out[i] = kBf16QuietNan;
    }
    return;
  }
  for (int d = lane; d < head_dim; d += kHeadThreads) values[d] = widen(in[d]);
  __syncwarp();
  // Every lane sums all of head_dim in index order (broadcast reads of shared memory).
  float sum_sq = 0.0f;
  for (int d = 0; d < head_dim; ++d) sum_sq = add(sum_sq, mul(values[d], values[d]));
  const float inv_rms = inverse_rms_from_sum(sum_sq, head_dim, eps);
  const int half = head_dim / 2;
  const float* cos_row = cos_table + static_cast<size_t>(pos) * half;
  const float* sin_row = sin_table + static_cast<size_t>(pos) * half;
  for (int i = lane; i < half; i += kHeadThreads) {
    const float x1 = round_bf16(mul(round_bf16(mul(values[i], inv_rms)), widen(w[i])));
    const float x2 =
        round_bf16(mul(round_bf16(mul(values[i + half], inv_rms)), widen(w[i + half])));
    const u16 first = narrow(sub(mul(x1, cos_row[i]), mul(x2, sin_row[i])));
    const u16 second = narrow(add(mul(x2, cos_row[i]), mul(x1, sin_row[i])));
    out[i] = first;
    out[i + half] = second;
    if (also_out != nullptr) {
      also_out[i] = first;
      also_out[i + half] = second;
    }
  }
}

// grid [M * n_heads], block [kHeadThreads]. x: [M, n_heads, head_dim] in place; w: [head_dim];
// positions: [M].
__global__ void head_norm_rope_kernel(u16* x, const u16* w, const int32_t* positions, int n_heads,
                                      int head_dim, float eps, const float* cos_table,
                                      const float* sin_table, int max_pos) {
  __shared__ float values[kMaxHeadDim];
  const int row = blockIdx.x / n_heads;
  const int h = blockIdx.x % n_heads;
  u16* head = x + (static_cast<size_t>(row) * n_heads + h) * head_dim;
  norm_rope_head(head, w, positions[row], head_dim, eps, cos_table, sin_table, max_pos, values,
                 head, nullptr);
}

// grid [M * (n_heads + kv_heads)], block [kHeadThreads]: block (row, j) takes q head j for
// j < n_heads, else k head j - n_heads and the v head beside it. qkv: [M, (n_heads + 2*kv_heads),
// head_dim]; q: [M, n_heads, head_dim]; k: [M, kv_heads, head_dim]; q_norm, k_norm: [head_dim];
// positions, slots: [M]; pool_k, pool_v: [num_slots, kv_heads, head_dim].
__global__ void qkv_norm_rope_write_kv_kernel(const u16* qkv, const u16* q_norm, const u16* k_norm,
                                              const int32_t* positions, const int64_t* slots,
                                              int n_heads, int kv_heads, int head_dim, float eps,
                                              const float* cos_table, const float* sin_table,
                                              int max_pos, u16* pool_k, u16* pool_v,
                                              int64_t num_slots, u16* q, u16* k) {
  __shared__ float values[kMaxHeadDim];
  const int heads = n_heads + kv_heads;
  const int row = blockIdx.x / heads;
  const int j = blockIdx.x % heads;
  const int pos = positions[row];
  const size_t qkv_cols = static_cast<size_t>(heads + kv_heads) * head_dim;  // q | k | v
  const u16* qkv_row = qkv + row * qkv_cols;
  if (j < n_heads) {
    norm_rope_head(qkv_row + static_cast<size_t>(j) * head_dim, q_norm, pos, head_dim, eps,
                   cos_table, sin_table, max_pos, values,
                   q + (static_cast<size_t>(row) * n_heads + j) * head_dim, nullptr);
    return;
  }
  const int h = j - n_heads;
  const u16* k_in = qkv_row + (static_cast<size_t>(n_heads) + h) * head_dim;
  const u16* v_in = k_in + static_cast<size_t>(kv_heads) * head_dim;
  const int64_t slot = slots[row];
  u16* pool_k_head = nullptr;  // stays null for a padding row or a slot past the pool's end
  if (slot >= 0 && slot < num_slots) {
    const size_t pool_head = (static_cast<size_t>(slot) * kv_heads + h) * head_dim;
    pool_k_head = pool_k + pool_head;
    u16* pool_v_head = pool_v + pool_head;
    for (int d = threadIdx.x; d < head_dim; d += kHeadThreads) pool_v_head[d] = v_in[d];
  }
  norm_rope_head(k_in, k_norm, pos, head_dim, eps, cos_table, sin_table, max_pos, values,
                 k + (static_cast<size_t>(row) * kv_heads + h) * head_dim, pool_k_head);
}

// ---- elementwise ------------------------------------------------------------------------------
constexpr int kElementThreads = 256;

// grid-stride over M*I. gate_up: [M, 2I]; y: [M, I].
__global__ void silu_mul_kernel(const u16* gate_up, u16* y, int64_t M, int64_t I) {
  const int64_t total = M * I;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = e / I;
    const int64_t i = e - m * I;
    const float g = widen(gate_up[m * 2 * I + i]);
    const float silu = round_bf16(divide(g, add(1.0f, exp_f(-g))));
    y[e] = narrow(mul(silu, widen(gate_up[m * 2 * I + I + i])));
  }
}

// grid [M], block [kElementThreads]. table: [vocab, H]; ids: [M]; y: [M, H].
__global__ void embedding_kernel(const u16* table, int vocab, const int32_t* ids, u16* y, int H) {
  const int id = ids[blockIdx.x];
  u16* yr = y + static_cast<size_t>(blockIdx.x) * H;
  const bool valid = id >= 0 && id < vocab;
  const u16* src = table + static_cast<size_t>(valid ? id : 0) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) yr[i] = valid ? src[i] : kBf16QuietNan;
}

// grid [M], block [kElementThreads]. k, v: [M, row]; pool_k, pool_v: [num_slots, row].
__global__ void write_kv_kernel(u16* pool_k, u16* pool_v, int64_t num_slots, const u16* k,
                                const u16* v, const int64_t* slots, int row) {
  const int64_t slot = slots[blockIdx.x];
  if (slot < 0 || slot >= num_slots) return;
  const size_t src = static_cast<size_t>(blockIdx.x) * row;
  const size_t dst = static_cast<size_t>(slot) * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    pool_k[dst + i] = k[src + i];
    pool_v[dst + i] = v[src + i];
  }
}

// ---- attention --------------------------------------------------------------------------------
// One block per (row, head). Every output element's arithmetic is the CPU's (attention.cpp), op
// for op through the rounding helpers above. Only the way operands arrive is tuned: a pass of up
// to kKeysPerPass keys looks its block table up once per key, stages its K and V rows in shared
// memory with coalesced asynchronous copies (V lands while the keys are scored), and the softmax
// factors whose operands are known early (the fold rescales of tiles and vendor parts, the
// vendor per-key weights) are computed once, in parallel, each by the very chain of operations
// the serial code would run, then read by the serial chains that remain.
constexpr int kAttentionThreads = 128;
constexpr int kDimsPerThread = kMaxHeadDim / kAttentionThreads;  // head dims one thread owns
constexpr int kDimsPerLane = kMaxHeadDim / 32;                   // head dims one lane owns
constexpr int kWarpsPerBlock = kAttentionThreads / 32;
constexpr int kMaxVendorSplits = 16;
// Keys scored at once: one per thread, a whole number of aligned tiles. The pass length changes
// no arithmetic (tiles are absolute positions, vendor parts carry their state across passes).
constexpr int kKeysPerPass = kAttentionThreads;
static_assert(kKeysPerPass % kAttentionTile == 0, "a pass must hold whole tiles");
constexpr int kTilesPerPass = kKeysPerPass / kAttentionTile;
static_assert(kTilesPerPass <= kMaxVendorSplits, "the fold factor arrays serve tiles and parts");

// Staged key rows: head_dim in 16-byte pieces, plus a piece when their count is even, so that
// the rows of 8 consecutive threads start in distinct 16-byte bank groups and the per-thread dot
// products read shared memory without bank conflicts.
__host__ __device__ constexpr int staged_key_stride(int head_dim) {
  const int pieces = (head_dim + 7) / 8;
  return 8 * (pieces % 2 == 0 ? pieces + 1 : pieces);
}
// Staged value rows are read along head_dim by consecutive threads: no padding needed.
__host__ __device__ constexpr int staged_value_stride(int head_dim) {
  return (head_dim + 7) / 8 * 8;
}

// attention_kernel's dynamic shared memory: k_s [kKeysPerPass, staged_key_stride] and v_s
// [kKeysPerPass, staged_value_stride] bf16, then (vendor launches) part_acc [kMaxVendorSplits,
// head_dim] fp32. Every region starts 16-byte aligned (strides are multiples of 8 elements).
__host__ __device__ constexpr size_t attention_smem_bytes(int head_dim, bool vendor) {
  return sizeof(u16) * kKeysPerPass *
             static_cast<size_t>(staged_key_stride(head_dim) + staged_value_stride(head_dim)) +
         (vendor ? sizeof(float) * kMaxVendorSplits * static_cast<size_t>(head_dim) : 0);
}

// Asynchronous 16-byte global -> shared copies (cp.async, sm_80+; a plain copy before that).
__device__ __forceinline__ void copy_16_async(void* shared_dst, const void* global_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  const size_t src = __cvta_generic_to_global(global_src);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
#else
  *static_cast<uint4*>(shared_dst) = *static_cast<const uint4*>(global_src);
#endif
}
// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commit_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most kPending of this thread's groups are in flight (a barrier must follow
// before other threads read the data).
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Copies `rows` rows of head_dim bf16, row r from pool + key_offset[r], to shared dst + r *
// stride, with all threads of the block. vector (head_dim % 8 == 0, 16-byte aligned pool): 16-byte
// asynchronous pieces, consecutive threads on consecutive pieces; otherwise element by element.
__device__ void stage_rows(u16* dst, int stride, const u16* pool, const size_t* key_offset,
                           int rows, int head_dim, bool vector) {
  if (vector) {
    const int pieces = head_dim / 8;  // per row
    const int count = rows * pieces;
    // Copy piece i is (row, piece) = (i / pieces, i % pieces), stepped without a division.
    int row = static_cast<int>(threadIdx.x) / pieces;
    int piece = static_cast<int>(threadIdx.x) % pieces;
    const int row_step = static_cast<int>(blockDim.x) / pieces;
    const int piece_step = static_cast<int>(blockDim.x) % pieces;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
      copy_16_async(dst + row * stride + 8 * piece, pool + key_offset[row] + 8 * piece);
      row += row_step;
      piece += piece_step;
      if (piece >= pieces) {
        piece -= pieces;
        ++row;
      }
    }
  } else {
    for (int i = threadIdx.x; i < rows * head_dim; i += blockDim.x) {
      const int row = i / head_dim;
      const int d = i - row * head_dim;
      dst[row * stride + d] = pool[key_offset[row] + d];
    }
  }
}

// q . k in index order over head_dim, fp32, times the softmax scale (the CPU's score()); q and
// the key row in shared memory (vector: 16-byte aligned, head_dim % 8 == 0).
__device__ __forceinline__ float staged_score(const float* q, const u16* key, int head_dim,
                                              float scale, bool vector) {
  float dot = 0.0f;
  if (vector) {
#pragma unroll 2
    for (int d = 0; d < head_dim; d += 8) {
      const uint4 piece = *reinterpret_cast<const uint4*>(key + d);
      const float4 q_lo = *reinterpret_cast<const float4*>(q + d);
      const float4 q_hi = *reinterpret_cast<const float4*>(q + d + 4);
      const float qs[8] = {q_lo.x, q_lo.y, q_lo.z, q_lo.w, q_hi.x, q_hi.y, q_hi.z, q_hi.w};
      const uint32_t pairs[4] = {piece.x, piece.y, piece.z, piece.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // little endian: element d + 2i is the low half of pair i
        dot = add(dot, mul(qs[2 * i], __uint_as_float(pairs[i] << 16)));
        dot = add(dot, mul(qs[2 * i + 1], __uint_as_float(pairs[i] & 0xffff0000u)));
      }
    }
  } else {
    for (int d = 0; d < head_dim; ++d) dot = add(dot, mul(q[d], widen(key[d])));
  }
  return mul(dot, scale);
}

// The fold factors of partial i of a sequence folded in order into a running total (the CPU's
// combine(), RunningSoftmax::fold below): the total's max before partial i comes from the same
// max_of chain fold() walks, so scale_total, scale_part and new_max are fold()'s own values.
// maxes: the partials' maxima; before partial 0 the total is empty or has max total_max. Not
// for partial 0 of an empty total, which is taken as it is.
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

// grid [M * n_heads], block [kAttentionThreads], dynamic shared memory attention_smem_bytes(
// head_dim, kVendor). q: [M, n_heads, head_dim]; out: same shape. vector_copies: head_dim % 8 ==
// 0 and both pools 16-byte aligned. One instantiation per family: the invariant one carries no
// flash-decoding code (a smaller kernel, fewer instruction-cache misses).
template <bool kVendor>
__global__ void __launch_bounds__(kAttentionThreads, 1)
    attention_kernel(const u16* q, const u16* pool_k, const u16* pool_v, int block_size,
                     int num_kv_heads, int head_dim, AttentionBatch batch, int n_heads, int group,
                     float scale, int vendor_splits, bool vector_copies, u16* out) {
  extern __shared__ __align__(16) unsigned char attention_smem[];
  __shared__ __align__(16) float q_s[kMaxHeadDim];
  __shared__ size_t key_offset[kKeysPerPass];  // the pass's keys' row offsets in the pools
  __shared__ float scores[kKeysPerPass];
  __shared__ float weights[kKeysPerPass];
  __shared__ float rescales[kKeysPerPass];     // vendor: each key's rescale of its part's state
  __shared__ float running_max[kKeysPerPass];  // vendor: its part's max after each key
  __shared__ float tile_max[kTilesPerPass];
  __shared__ float tile_sum[kTilesPerPass];
  __shared__ __align__(16) float tile_acc[kTilesPerPass][kMaxHeadDim];  // tiles' weighted V sums
  __shared__ float fold_scale_total[kMaxVendorSplits];  // per tile or part, from fold_factors
  __shared__ float fold_scale_part[kMaxVendorSplits];
  __shared__ float fold_max[kMaxVendorSplits];
  __shared__ float part_max[kMaxVendorSplits];
  __shared__ float part_sum[kMaxVendorSplits];

  const int k_stride = staged_key_stride(head_dim);
  const int v_stride = staged_value_stride(head_dim);
  u16* k_s = reinterpret_cast<u16*>(attention_smem);  // [kKeysPerPass, k_stride]
  u16* v_s = k_s + kKeysPerPass * k_stride;           // [kKeysPerPass, v_stride]
  float* part_acc = reinterpret_cast<float*>(v_s + kKeysPerPass * v_stride);  // [splits, head_dim]

  const int row = blockIdx.x / n_heads;
  const int h = blockIdx.x % n_heads;
  const int t = threadIdx.x;
  const int lane = t % 32;
  const int warp = t / 32;
  const int context = batch.context_lens[row];
  const bool split = kVendor && batch.decode[row] != 0;
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
  int32_t pass_block = table_entry(t);
  const u16* q_head = q + static_cast<size_t>(blockIdx.x) * head_dim;
  for (int d = t; d < head_dim; d += blockDim.x) q_s[d] = widen(q_head[d]);

  // Vendor (flash-decoding): `parts` contiguous parts of `chunk` keys, each reduced key by key
  // (by warp part % kWarpsPerBlock), its state kept in part_max/part_sum/part_acc between passes.
  const int chunk = split ? (context + vendor_splits - 1) / vendor_splits : 1;
  const int parts = split && context > 0 ? (context + chunk - 1) / chunk : 0;

  FoldedSoftmax<kDimsPerThread> total;
  for (int pass_begin = 0; pass_begin < context; pass_begin += kKeysPerPass) {
    const int pass_keys = min(kKeysPerPass, context - pass_begin);
    const int pass_end = pass_begin + pass_keys;
    if (t < pass_keys) key_offset[t] = keys.offset_in(pass_block, pass_begin + t);
    pass_block = table_entry(pass_begin + kKeysPerPass + t);
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
        if (!(total.empty && tile == 0)) {
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
          *reinterpret_cast<float4*>(&tile_acc[tile][d0]) = make_float4(a[0], a[1], a[2], a[3]);
        }
      }
      __syncthreads();  // tile partials and factors
      // The tiles folded in order into the total, each thread its own dims.
      for (int tile = 0; tile < tiles; ++tile) {
        float part[kDimsPerThread];
#pragma unroll
        for (int j = 0; j < kDimsPerThread; ++j)
          part[j] = tile_acc[tile][t + j * kAttentionThreads];
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
  for (int j = 0; j < kDimsPerThread; ++j) {
    const int d = t + j * kAttentionThreads;
    if (d < head_dim) out_head[d] = total.empty ? u16{0} : narrow(divide(total.acc[j], total.sum));
  }
}

// ---- attention reference ----------------------------------------------------------------------
// The attention kernel as it was before the staged rewrite above, unchanged but for its name: the
// test-only bitwise reference behind attention_with_splits_reference (attention_reference.hpp).
// It reads every operand straight from global memory, so it is slow; it must stay as it is.

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

// ---- sampling ---------------------------------------------------------------------------------
// A row's ids are cut into chunks of kSampleChunk (the row's last chunk may be short) and the
// chunks into kSampleBlocks slices of chunks_per_slice (greedy_sample_slice_length). In launches 1
// and 2 the block of slice b walks the slice's chunks with a fixed stride: thread t takes chunks
// first + t, first + t + kSampleThreads, ... and each chunk's ids in increasing order. That order
// is a function of V alone; a chunk arrives as one 16-byte load when it is whole and the row is
// 16-byte aligned (always when V is a multiple of 8 and logits is), as scalar loads otherwise, and
// the arithmetic on it is the same either way.

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

const u16* bits(const bf16* p) { return reinterpret_cast<const u16*>(p); }
u16* bits(bf16* p) { return reinterpret_cast<u16*>(p); }

}  // namespace

// ---- device memory ----------------------------------------------------------------------------
void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  cudaCheck(cudaMalloc(&ptr, bytes));
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr != nullptr) cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void synchronize(Stream stream) { cudaCheck(cudaStreamSynchronize(stream)); }

// ---- RoPE table -------------------------------------------------------------------------------
DeviceRopeTable::DeviceRopeTable(const float* host_cos, const float* host_sin, int head_dim,
                                 int max_pos)
    : head_dim_(head_dim), max_pos_(max_pos) {
  require(head_dim > 0 && head_dim % 2 == 0 && max_pos >= 0,
          "DeviceRopeTable: need an even head_dim > 0 and max_pos >= 0; got head_dim " +
              std::to_string(head_dim) + ", max_pos " + std::to_string(max_pos));
  const size_t bytes = sizeof(float) * static_cast<size_t>(max_pos) * (head_dim / 2);
  cos_ = static_cast<float*>(device_alloc(bytes));
  sin_ = static_cast<float*>(device_alloc(bytes));
  if (bytes > 0) {
    cudaCheck(cudaMemcpy(cos_, host_cos, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(sin_, host_sin, bytes, cudaMemcpyHostToDevice));
  }
}

DeviceRopeTable::~DeviceRopeTable() {
  device_free(cos_);
  device_free(sin_);
}

DeviceRopeTable::DeviceRopeTable(DeviceRopeTable&& other) noexcept
    : cos_(std::exchange(other.cos_, nullptr)),
      sin_(std::exchange(other.sin_, nullptr)),
      head_dim_(std::exchange(other.head_dim_, 0)),
      max_pos_(std::exchange(other.max_pos_, 0)) {}

DeviceRopeTable& DeviceRopeTable::operator=(DeviceRopeTable&& other) noexcept {
  if (this != &other) {
    device_free(cos_);
    device_free(sin_);
    cos_ = std::exchange(other.cos_, nullptr);
    sin_ = std::exchange(other.sin_, nullptr);
    head_dim_ = std::exchange(other.head_dim_, 0);
    max_pos_ = std::exchange(other.max_pos_, 0);
  }
  return *this;
}

// ---- launchers --------------------------------------------------------------------------------
namespace {

// launch(std::integral_constant<int, k>{}) for the norm kernels' k: the smallest of 1, 2, 4, 8, 16
// with k * kNormThreads >= H (operands held in registers), or 0 beyond (the looping kernel).
template <class Launch>
void launch_norm_width(int H, Launch&& launch) {
  const int per_thread = (H + kNormThreads - 1) / kNormThreads;
  if (per_thread <= 1) {
    launch(std::integral_constant<int, 1>{});
  } else if (per_thread <= 2) {
    launch(std::integral_constant<int, 2>{});
  } else if (per_thread <= 4) {
    launch(std::integral_constant<int, 4>{});
  } else if (per_thread <= 8) {
    launch(std::integral_constant<int, 8>{});
  } else if (per_thread <= 16) {
    launch(std::integral_constant<int, 16>{});
  } else {
    launch(std::integral_constant<int, 0>{});
  }
  check_launch();
}

}  // namespace

void rms_norm(const bf16* x, const bf16* w, bf16* y, int M, int H, float eps, Stream stream) {
  require(M >= 0 && H > 0, "rms_norm: need M >= 0 and H > 0");
  if (M == 0) return;
  launch_norm_width(H, [&](auto width) {
    rms_norm_kernel<decltype(width)::value>
        <<<M, kNormThreads, 0, stream>>>(bits(x), bits(w), bits(y), H, eps);
  });
}

void add_rms_norm(bf16* residual, const bf16* x, const bf16* w, bf16* y, int M, int H, float eps,
                  Stream stream) {
  require(M >= 0 && H > 0, "add_rms_norm: need M >= 0 and H > 0");
  if (M == 0) return;
  launch_norm_width(H, [&](auto width) {
    add_rms_norm_kernel<decltype(width)::value>
        <<<M, kNormThreads, 0, stream>>>(bits(residual), bits(x), bits(w), bits(y), H, eps);
  });
}

void head_norm_rope(bf16* x, const bf16* w, const int32_t* positions, int M, int n_heads,
                    int head_dim, float eps, const DeviceRopeTable& rope, Stream stream) {
  require(rope.head_dim() == head_dim, "head_norm_rope: RoPE table built for head_dim " +
                                           std::to_string(rope.head_dim()) + ", tensor has " +
                                           std::to_string(head_dim));
  require(head_dim > 0 && head_dim <= kMaxHeadDim && M >= 0 && n_heads > 0,
          "head_norm_rope: need 0 < head_dim <= " + std::to_string(kMaxHeadDim) +
              ", M >= 0, n_heads > 0; got head_dim " + std::to_string(head_dim));
  if (M == 0) return;
  const int64_t blocks = int64_t{M} * n_heads;
  require(blocks <= 2147483647, "head_norm_rope: M * n_heads exceeds the grid");
  head_norm_rope_kernel<<<static_cast<unsigned>(blocks), kHeadThreads, 0, stream>>>(
      bits(x), bits(w), positions, n_heads, head_dim, eps, rope.cos(), rope.sin(), rope.max_pos());
  check_launch();
}

void qkv_norm_rope_write_kv(const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
                            const int32_t* positions, const int64_t* slots, int M, int n_heads,
                            int kv_heads, int head_dim, float eps, const DeviceRopeTable& rope,
                            const KvPool& kv, bf16* q, bf16* k, Stream stream) {
  require(rope.head_dim() == head_dim, "qkv_norm_rope_write_kv: RoPE table built for head_dim " +
                                           std::to_string(rope.head_dim()) + ", tensor has " +
                                           std::to_string(head_dim));
  require(head_dim > 0 && head_dim <= kMaxHeadDim && M >= 0 && n_heads > 0 && kv_heads > 0,
          "qkv_norm_rope_write_kv: need 0 < head_dim <= " + std::to_string(kMaxHeadDim) +
              ", M >= 0, n_heads > 0, kv_heads > 0; got head_dim " + std::to_string(head_dim) +
              ", n_heads " + std::to_string(n_heads) + ", kv_heads " + std::to_string(kv_heads));
  require(kv.num_kv_heads == kv_heads && kv.head_dim == head_dim,
          "qkv_norm_rope_write_kv: KV pool holds " + std::to_string(kv.num_kv_heads) +
              " heads of " + std::to_string(kv.head_dim) + ", the step has " +
              std::to_string(kv_heads) + " of " + std::to_string(head_dim));
  if (M == 0) return;
  const int64_t blocks = int64_t{M} * (n_heads + kv_heads);
  require(blocks <= 2147483647,
          "qkv_norm_rope_write_kv: M * (n_heads + kv_heads) exceeds the grid");
  const int64_t num_slots = int64_t{kv.num_blocks} * kv.block_size;
  qkv_norm_rope_write_kv_kernel<<<static_cast<unsigned>(blocks), kHeadThreads, 0, stream>>>(
      bits(qkv), bits(q_norm), bits(k_norm), positions, slots, n_heads, kv_heads, head_dim, eps,
      rope.cos(), rope.sin(), rope.max_pos(), bits(kv.k), bits(kv.v), num_slots, bits(q), bits(k));
  check_launch();
}

void silu_mul(const bf16* gate_up, bf16* y, int M, int I, Stream stream) {
  require(M >= 0 && I > 0, "silu_mul: need M >= 0 and I > 0");
  if (M == 0) return;
  const int64_t total = int64_t{M} * I;
  const int64_t blocks = std::min<int64_t>((total + kElementThreads - 1) / kElementThreads, 65536);
  silu_mul_kernel<<<static_cast<unsigned>(blocks), kElementThreads, 0, stream>>>(bits(gate_up),
                                                                                 bits(y), M, I);
  check_launch();
}

void embedding(const bf16* table, int vocab, const int32_t* ids, bf16* y, int M, int H,
               Stream stream) {
  require(M >= 0 && H > 0 && vocab > 0, "embedding: need M >= 0, H > 0 and vocab > 0");
  if (M == 0) return;
  embedding_kernel<<<M, kElementThreads, 0, stream>>>(bits(table), vocab, ids, bits(y), H);
  check_launch();
}

void write_kv(const KvPool& kv, const bf16* k, const bf16* v, const int64_t* slots, int M,
              Stream stream) {
  require(M >= 0, "write_kv: need M >= 0");
  if (M == 0) return;
  const int64_t num_slots = int64_t{kv.num_blocks} * kv.block_size;
  write_kv_kernel<<<M, kElementThreads, 0, stream>>>(bits(kv.k), bits(kv.v), num_slots, bits(k),
                                                     bits(v), slots, kv.num_kv_heads * kv.head_dim);
  check_launch();
}

namespace {

// The attention arguments both kernels take, checked as the contract says.
void check_attention_args(const KvPool& kv, int M, int n_heads, int vendor_splits) {
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

// Lets attention_kernel launch with `bytes` of dynamic shared memory on the current device. Past
// the 48 KiB default that takes an opt-in per device, made once per size increase (the call
// synchronizes the runtime, so not on every launch).
template <bool kVendor>
void allow_attention_smem(size_t bytes) {
  constexpr size_t kDefaultDynamicSmem = 48 * 1024;
  if (bytes <= kDefaultDynamicSmem) return;
  int device = 0;
  cudaCheck(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::vector<size_t> allowed;  // per device, for this instantiation
  const std::lock_guard<std::mutex> lock(mutex);
  if (allowed.size() <= static_cast<size_t>(device)) allowed.resize(device + 1, 0);
  if (allowed[device] >= bytes) return;
  // The first launch may come inside a caller's graph capture: the attribute is no stream work,
  // so this thread's capture mode is relaxed around the call, then restored.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t set =
      cudaFuncSetAttribute(attention_kernel<kVendor>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaCheck(set);
  allowed[device] = bytes;
}

}  // namespace

void attention_with_splits(KernelFamily family, const bf16* q, const KvPool& kv,
                           const AttentionBatch& batch, int M, int n_heads, int vendor_splits,
                           bf16* out, Stream stream) {
  check_attention_args(kv, M, n_heads, vendor_splits);
  if (M == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim));  // as on the CPU
  const int64_t blocks = int64_t{M} * n_heads;
  const bool vendor = family == KernelFamily::vendor;
  const bool vector_copies = kv.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 &&
                             reinterpret_cast<uintptr_t>(kv.v) % 16 == 0;
  const size_t smem = attention_smem_bytes(kv.head_dim, vendor);
  const auto launch = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kAttentionThreads, smem, stream>>>(
        bits(q), bits(kv.k), bits(kv.v), kv.block_size, kv.num_kv_heads, kv.head_dim, batch,
        n_heads, n_heads / kv.num_kv_heads, scale, vendor_splits, vector_copies, bits(out));
  };
  if (vendor) {
    allow_attention_smem<true>(smem);
    launch(attention_kernel<true>);
  } else {
    allow_attention_smem<false>(smem);
    launch(attention_kernel<false>);
  }
  check_launch();
}

void attention_with_splits_reference(KernelFamily family, const bf16* q, const KvPool& kv,
                                     const AttentionBatch& batch, int M, int n_heads,
                                     int vendor_splits, bf16* out, Stream stream) {
  check_attention_args(kv, M, n_heads, vendor_splits);
  if (M == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kv.head_dim));  // as on the CPU
  const int64_t blocks = int64_t{M} * n_heads;
  attention_reference_kernel<<<static_cast<unsigned>(blocks), kAttentionThreads, 0, stream>>>(
      bits(q), bits(kv.k), bits(kv.v), kv.block_size, kv.num_kv_heads, kv.head_dim, batch, n_heads,
      n_heads / kv.num_kv_heads, scale, family == KernelFamily::vendor, vendor_splits, bits(out));
  check_launch();
}

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
  sample_slice_best_kernel<<<grid, kSampleThreads, 0, stream>>>(bits(logits), V, chunks_per_slice,
                                                                parts.slice_best);
  check_launch();
  sample_slice_sum_kernel<<<grid, kSampleThreads, 0, stream>>>(
      bits(logits), V, chunks_per_slice, parts.slice_best, parts.slice_sums, parts.row_best);
  check_launch();
  sample_finish_kernel<<<M, kSampleBlocks, 0, stream>>>(parts.slice_sums, parts.row_best, tokens,
                                                        logprobs);
  check_launch();
}

}  // namespace bih::cuda
