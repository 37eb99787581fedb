// norm_kernels.cu: rms_norm, add_rms_norm, head_norm_rope and qkv_norm_rope_write_kv
// (kernels.hpp), the per-row and per-head norms, with RoPE fused into the per-head ones. The
// numerics (rounding helpers, reduction orders) are device_math.cuh's.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"
#include "models/cuda/programmatic_launch.cuh"
#include "models/cuda/ptx.cuh"

namespace bih::cuda {
namespace {

using device::add;
using device::bits_of;
using device::block_sum;
using device::check_launch;
using device::inverse_rms_from_sum;
using device::kBf16QuietNan;
using device::mul;
using device::narrow;
using device::require;
using device::round_bf16;
using device::sub;
using device::u16;
using device::widen;

// ---- norms ----------------------------------------------------------------------------------
// Thread t owns columns t, t + kNormThreads, ... (kPerThread of them at most); it loads all its
// operands before using any (one memory latency per row, not one per column), then sums its
// squares in column order. kPerThread 0: any H, operands read in a loop (the general case).
// grid [M], block [kNormThreads]. x, y: [M, H]; w: [H].
template <int kPerThread>
__global__ void rms_norm_kernel(const u16* x, const u16* w, u16* y, int H, float eps) {
  ptx::allow_dependent_launch();  // a GEMM after it may stream its weights meanwhile
  ptx::wait_for_prerequisites();  // launched early (programmatic_launch.cuh)
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
  ptx::allow_dependent_launch();
  ptx::wait_for_prerequisites();
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
  ptx::allow_dependent_launch();  // attention after it may be resident meanwhile
  ptx::wait_for_prerequisites();  // launched early (programmatic_launch.cuh)
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

// ---- launchers --------------------------------------------------------------------------------
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
    launch_early(rms_norm_kernel<decltype(width)::value>, dim3(M), dim3(kNormThreads), 0, stream,
                 bits_of(x), bits_of(w), bits_of(y), H, eps);
  });
}

void add_rms_norm(bf16* residual, const bf16* x, const bf16* w, bf16* y, int M, int H, float eps,
                  Stream stream) {
  require(M >= 0 && H > 0, "add_rms_norm: need M >= 0 and H > 0");
  if (M == 0) return;
  launch_norm_width(H, [&](auto width) {
    launch_early(add_rms_norm_kernel<decltype(width)::value>, dim3(M), dim3(kNormThreads), 0,
                 stream, bits_of(residual), bits_of(x), bits_of(w), bits_of(y), H, eps);
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
      bits_of(x), bits_of(w), positions, n_heads, head_dim, eps, rope.cos(), rope.sin(),
      rope.max_pos());
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
  launch_early(qkv_norm_rope_write_kv_kernel, dim3(static_cast<unsigned>(blocks)),
               dim3(kHeadThreads), 0, stream, bits_of(qkv), bits_of(q_norm), bits_of(k_norm),
               positions, slots, n_heads, kv_heads, head_dim, eps, rope.cos(), rope.sin(),
               rope.max_pos(), bits_of(kv.k), bits_of(kv.v), num_slots, bits_of(q), bits_of(k));
  check_launch();
}

}  // namespace bih::cuda
