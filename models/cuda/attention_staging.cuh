// attention_staging.cuh: how the staged attention kernel (attention_kernel.cu) brings its operands
// in: the shared-memory layout of a pass's K and V rows, the asynchronous 16-byte copies that stage
// them, and the dot product of q with a staged key row, in the CPU's order (device_math.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "models/cuda/attention_common.cuh"
#include "models/cuda/device_math.cuh"

namespace bih::cuda::device {

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

// attention_kernel's dynamic shared memory for passes of `keys` keys: k_s [keys,
// staged_key_stride] and v_s [keys, staged_value_stride] bf16, tile_acc [keys / kAttentionTile,
// tile_acc_stride] fp32, then (vendor launches) part_acc [kMaxVendorSplits, head_dim] fp32. Every
// region starts 16-byte aligned (strides are multiples of 8 bf16 or 4 fp32).
__host__ __device__ constexpr size_t attention_smem_bytes(int head_dim, bool vendor, int keys) {
  return sizeof(u16) * static_cast<size_t>(keys) *
             (staged_key_stride(head_dim) + staged_value_stride(head_dim)) +
         sizeof(float) * static_cast<size_t>(keys / kAttentionTile) * tile_acc_stride(head_dim) +
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
__device__ inline void stage_rows(u16* dst, int stride, const u16* pool, const size_t* key_offset,
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

}  // namespace bih::cuda::device
