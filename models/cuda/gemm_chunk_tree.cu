// gemm_chunk_tree.cu: the tp_invariant GEMM kernel and its launcher (gemm_chunk_tree.hpp).
//
// Layout: a block of kThreads threads covers kThreads / chunks output columns; thread t owns
// column n = block's first + t / chunks and chunk c = t % chunks, so one column's chunks sit in
// consecutive lanes of a warp and their tree is three shuffles. blockIdx.x walks the row tiles of
// x fastest, so the tiles that read the same weight rows run together and share them in L2.
// Memory: each step a thread reads 16 bytes of its weight row (8 bf16: one product per lane) and
// the same 16 bytes of each of its TM x rows; at TM = 1 it reads kAhead steps before it adds, so
// a decode GEMV keeps enough bytes in flight.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/gemm_chunk_tree.hpp"
#include "models/cuda/ptx.cuh"
#include "models/cuda/shared_limit.hpp"

namespace bih::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kLanes = 8;

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[kLanes]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// acc[j] += x[j] * w[j], rounded twice (no FMA): the CPU's `acc += xv * wv` lane for lane.
__device__ __forceinline__ void accumulate(float (&acc)[kLanes], const float (&xf)[kLanes],
                                           const float (&wf)[kLanes]) {
#pragma unroll
  for (int j = 0; j < kLanes; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(xf[j], wf[j]));
}

// models/cpu/gemm.cpp's reduce_lanes.
__device__ __forceinline__ float reduce_lanes(const float (&a)[kLanes]) {
  const float t0 = __fadd_rn(a[0], a[4]);
  const float t1 = __fadd_rn(a[1], a[5]);
  const float t2 = __fadd_rn(a[2], a[6]);
  const float t3 = __fadd_rn(a[3], a[7]);
  return __fadd_rn(__fadd_rn(t0, t2), __fadd_rn(t1, t3));
}

// The lane tree, then pairwise_tree_sum over the chunk index (at each level the lower chunk adds
// its neighbour's sum: the chunks of one column sit in consecutive lanes), then chunk 0 stores.
template <int TM>
__device__ __forceinline__ void finish_chunk_tree(const float (&acc)[TM][kLanes], int c, int chunks,
                                                  int n, int m0, int M, int N,
                                                  uint16_t* __restrict__ y_bf16,
                                                  float* __restrict__ y_f32) {
  float part[TM];
#pragma unroll
  for (int t = 0; t < TM; ++t) part[t] = reduce_lanes(acc[t]);
  for (int width = 1; width < chunks; width *= 2) {
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      const float other = __shfl_down_sync(0xffffffffu, part[t], width);
      if (c % (2 * width) == 0) part[t] = __fadd_rn(part[t], other);
    }
  }
  if (c != 0 || n >= N) return;
#pragma unroll
  for (int t = 0; t < TM; ++t) {
    if (m0 + t >= M) break;
    const size_t at = static_cast<size_t>(m0 + t) * N + n;
    if (y_f32 != nullptr) {
      y_f32[at] = part[t];
    } else {
      y_bf16[at] = bits::narrow(part[t]);
    }
  }
}

// TM: rows of x per thread. kVector: 16-byte loads (chunk length a multiple of 8, rows aligned).
template <int TM, bool kVector>
__global__ void __launch_bounds__(kThreads)
    chunk_tree_gemm_kernel(const uint16_t* __restrict__ x,  // [M, K]
                           const uint16_t* __restrict__ w,  // [N, K]
                           uint16_t* __restrict__ y_bf16,   // [M, N] or null
                           float* __restrict__ y_f32,       // [M, N] or null
                           int M, int N, int K, int chunks) {
  const int chunk_len = K / chunks;
  const int c = threadIdx.x % chunks;
  const int n = blockIdx.y * (kThreads / chunks) + threadIdx.x / chunks;
  const int m0 = blockIdx.x * TM;
  float acc[TM][kLanes];
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int j = 0; j < kLanes; ++j) acc[t][j] = 0.0f;
  }
  if (n < N) {
    const size_t k0 = static_cast<size_t>(c) * chunk_len;
    const uint16_t* w_row = w + static_cast<size_t>(n) * K + k0;
    const uint16_t* x_row[TM];
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      // Rows past M read row M-1 and are never written: every lane's chain stays the same.
      x_row[t] = x + static_cast<size_t>(min(m0 + t, M - 1)) * K + k0;
    }
    const int steps = chunk_len / kLanes;
    int step = 0;
    if constexpr (kVector) {
      // At TM = 1 the thread loads kAhead steps of w and x before it adds any of them.
      constexpr int kAhead = TM == 1 ? 8 : TM == 2 ? 4 : 1;
      for (; step + kAhead <= steps; step += kAhead) {
        uint4 wv[kAhead];
        uint4 xv[TM][kAhead];
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          wv[a] = __ldg(reinterpret_cast<const uint4*>(w_row) + step + a);
#pragma unroll
          for (int t = 0; t < TM; ++t)
            xv[t][a] = __ldg(reinterpret_cast<const uint4*>(x_row[t]) + step + a);
        }
#pragma unroll
        for (int a = 0; a < kAhead; ++a) {
          float wf[kLanes];
          unpack8(wv[a], wf);
#pragma unroll
          for (int t = 0; t < TM; ++t) {
            float xf[kLanes];
            unpack8(xv[t][a], xf);
            accumulate(acc[t], xf, wf);
          }
        }
      }
    }
    for (; step < steps; ++step) {
      float wf[kLanes];
#pragma unroll
      for (int j = 0; j < kLanes; ++j) wf[j] = bits::widen(w_row[step * kLanes + j]);
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        float xf[kLanes];
#pragma unroll
        for (int j = 0; j < kLanes; ++j) xf[j] = bits::widen(x_row[t][step * kLanes + j]);
        accumulate(acc[t], xf, wf);
      }
    }
    // The chunk's tail continues the lane pattern: element k0 + j + 8i lands in lane j.
    const int tail0 = steps * kLanes;
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {  // static lane indices keep acc in registers
      if (tail0 + j >= chunk_len) break;
      const float wv = bits::widen(w_row[tail0 + j]);
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        acc[t][j] = __fadd_rn(acc[t][j], __fmul_rn(bits::widen(x_row[t][tail0 + j]), wv));
      }
    }
  }
  finish_chunk_tree<TM>(acc, c, chunks, n, m0, M, N, y_bf16, y_f32);
}

// The prefill instance (M > 8, 16-byte loads): a thread owns TN columns' chains of one chunk for TM
// rows, so each 16 bytes of x it loads feed TN columns and each 16 bytes of w feed TM rows (the
// kernel above re-reads x for every column). Same chains, same trees: only which thread adds
// which chain changes. Column j of group g in block b is b * TN * groups + g + j * groups.
template <int TM, int TN>
__global__ void __launch_bounds__(kThreads)
    chunk_tree_tiled_kernel(const uint16_t* __restrict__ x,  // [M, K]
                            const uint16_t* __restrict__ w,  // [N, K]
                            uint16_t* __restrict__ y_bf16,   // [M, N] or null
                            float* __restrict__ y_f32,       // [M, N] or null
                            int M, int N, int K, int chunks) {
  const int chunk_len = K / chunks;
  const int steps = chunk_len / kLanes;
  const int c = threadIdx.x % chunks;
  const int groups = kThreads / chunks;
  const int n_first = blockIdx.y * groups * TN + threadIdx.x / chunks;
  const int m0 = blockIdx.x * TM;
  const size_t k0 = static_cast<size_t>(c) * chunk_len;
  const uint4* w_row[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    // Columns past N read column N-1 and rows past M row M-1; neither is ever stored.
    w_row[j] = reinterpret_cast<const uint4*>(
        w + static_cast<size_t>(min(n_first + j * groups, N - 1)) * K + k0);
  }
  const uint4* x_row[TM];
#pragma unroll
  for (int t = 0; t < TM; ++t) {
    x_row[t] = reinterpret_cast<const uint4*>(x + static_cast<size_t>(min(m0 + t, M - 1)) * K + k0);
  }
  float acc[TN][TM][kLanes];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int l = 0; l < kLanes; ++l) acc[j][t][l] = 0.0f;
    }
  }
#pragma unroll 2
  for (int step = 0; step < steps; ++step) {
    float wf[TN][kLanes];
#pragma unroll
    for (int j = 0; j < TN; ++j) unpack8(__ldg(w_row[j] + step), wf[j]);
#pragma unroll
    for (int t = 0; t < TM; ++t) {
      float xf[kLanes];
      unpack8(__ldg(x_row[t] + step), xf);
#pragma unroll
      for (int j = 0; j < TN; ++j) accumulate(acc[j][t], xf, wf[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    finish_chunk_tree<TM>(acc[j], c, chunks, n_first + j * groups, m0, M, N, y_bf16, y_f32);
  }
}

template <int TM, int TN>
void launch_tiled(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N, int K,
                  int chunks, cudaStream_t stream) {
  const int columns_per_block = kThreads / chunks * TN;
  const dim3 grid((M + TM - 1) / TM, (N + columns_per_block - 1) / columns_per_block);
  chunk_tree_tiled_kernel<TM, TN><<<grid, kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
      static_cast<uint16_t*>(y_bf16), y_f32, M, N, K, chunks);
  cudaCheck(cudaGetLastError());
}

// The decode instance (M <= 8, one row tile): the same chains, with the block's weight rows staged
// in shared memory first. The register look-ahead above has each thread read 16 bytes of its
// own row, so one warp instruction touches 32 rows: at M=1 that reached only 0.8 to 2 TB/s. Here
// the block copies its rows with cp.async in row order (consecutive threads, consecutive 16-byte
// pieces: whole 128-byte lines per instruction) into a layout where each (column, chunk) chain
// is one stretch of chunk_len + 8 bf16; the thread that owns the chain then reads it back 16
// bytes per step. The pad puts the 8 chunks of a column (8 threads reading the same step) in
// different bank quads whenever chunk_len is a multiple of 16. The copy is in kGroups groups of
// rows, so the first rows' warps add while the last rows are still in flight.
constexpr int kGroups = 2;

size_t stream_shared_bytes(int chunk_len) {
  return static_cast<size_t>(kThreads) * (chunk_len + kLanes) * sizeof(uint16_t);
}

template <int TM>
__global__ void __launch_bounds__(kThreads)
    chunk_tree_stream_kernel(const uint16_t* __restrict__ x,  // [M, K], M <= TM
                             const uint16_t* __restrict__ w,  // [N, K]
                             uint16_t* __restrict__ y_bf16,   // [M, N] or null
                             float* __restrict__ y_f32,       // [M, N] or null
                             int M, int N, int K, int chunks) {
  extern __shared__ __align__(16) unsigned char smem[];  // [rows][chunks][chunk_len + 8] bf16
  const int chunk_len = K / chunks;
  const int steps = chunk_len / kLanes;
  const int rows = kThreads / chunks;  // the block's output columns
  const int n_first = blockIdx.x * rows;
  const uint32_t stretch_bytes = static_cast<uint32_t>(chunk_len + kLanes) * 2;
  const uint32_t smem_base = ptx::shared_address(smem);
  const int pieces = K / kLanes;  // 16-byte pieces per weight row
  const int rows_per_group = rows / kGroups;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    for (int r = g * rows_per_group; r < (g + 1) * rows_per_group; ++r) {
      // Rows past N copy row N-1: their chains run and are never stored.
      const uint16_t* src = w + static_cast<size_t>(min(n_first + r, N - 1)) * K;
      int chunk = threadIdx.x / steps;
      int step = threadIdx.x % steps;
      for (int q = threadIdx.x; q < pieces; q += kThreads) {
        ptx::cp_async_16<0>(smem_base + (r * chunks + chunk) * stretch_bytes + step * 16,
                            src + q * kLanes);
        step += kThreads;
        while (step >= steps) {
          step -= steps;
          ++chunk;
        }
      }
    }
    ptx::cp_async_commit();
  }

  const int c = threadIdx.x % chunks;
  const int row = threadIdx.x / chunks;
  const int n = n_first + row;
  const unsigned char* mine = smem + static_cast<size_t>(threadIdx.x) * stretch_bytes;
  const size_t k0 = static_cast<size_t>(c) * chunk_len;
  const uint16_t* x_row[TM];
#pragma unroll
  for (int t = 0; t < TM; ++t) x_row[t] = x + static_cast<size_t>(min(t, M - 1)) * K + k0;
  float acc[TM][kLanes];
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int j = 0; j < kLanes; ++j) acc[t][j] = 0.0f;
  }
  ptx::static_for<kGroups>([&](auto group_constant) {
    constexpr int kGroup = decltype(group_constant)::value;
    ptx::cp_async_wait<kGroups - 1 - kGroup>();  // this thread's pieces of group kGroup ...
    __syncthreads();                             // ... and every thread's
    if (row / rows_per_group != kGroup) return;
#pragma unroll 4
    for (int step = 0; step < steps; ++step) {
      float wf[kLanes];
      unpack8(*reinterpret_cast<const uint4*>(mine + step * 16), wf);
#pragma unroll
      for (int t = 0; t < TM; ++t) {
        float xf[kLanes];
        unpack8(__ldg(reinterpret_cast<const uint4*>(x_row[t]) + step), xf);
        accumulate(acc[t], xf, wf);
      }
    }
  });
  finish_chunk_tree<TM>(acc, c, chunks, n, 0, M, N, y_bf16, y_f32);
}

template <int TM>
void launch_stream_tm(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N, int K,
                      int chunks, cudaStream_t stream) {
  const int columns_per_block = kThreads / chunks;
  auto* kernel = chunk_tree_stream_kernel<TM>;
  allow_max_dynamic_shared(reinterpret_cast<const void*>(kernel));
  kernel<<<(N + columns_per_block - 1) / columns_per_block, kThreads,
           stream_shared_bytes(K / chunks), stream>>>(
      static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
      static_cast<uint16_t*>(y_bf16), y_f32, M, N, K, chunks);
  cudaCheck(cudaGetLastError());
}

template <int TM>
void launch_tm(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N, int K,
               int chunks, cudaStream_t stream) {
  const int columns_per_block = kThreads / chunks;
  const dim3 grid((M + TM - 1) / TM, (N + columns_per_block - 1) / columns_per_block);
  const auto* xb = static_cast<const uint16_t*>(x);
  const auto* wb = static_cast<const uint16_t*>(w);
  auto* yb = static_cast<uint16_t*>(y_bf16);
  const bool aligned = (K / chunks) % kLanes == 0 && K % kLanes == 0 &&
                       reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (aligned) {
    chunk_tree_gemm_kernel<TM, true>
        <<<grid, kThreads, 0, stream>>>(xb, wb, yb, y_f32, M, N, K, chunks);
  } else {
    chunk_tree_gemm_kernel<TM, false>
        <<<grid, kThreads, 0, stream>>>(xb, wb, yb, y_f32, M, N, K, chunks);
  }
  cudaCheck(cudaGetLastError());
}

}  // namespace

void launch_chunk_tree_gemm(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N,
                            int K, int chunks, cudaStream_t stream) {
  const int chunk_len = K / chunks;
  const bool streams = M <= 8 && chunk_len % kLanes == 0 &&
                       stream_shared_bytes(chunk_len) <= kMaxDynamicSharedBytes &&
                       reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (streams) {
    if (M == 1) return launch_stream_tm<1>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
    if (M == 2) return launch_stream_tm<2>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
    if (M <= 4) return launch_stream_tm<4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
    return launch_stream_tm<8>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  }
  const bool vector = chunk_len % kLanes == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(w) % 16 == 0;
  if (M > 8 && vector) {
    // Temporary tuning switch (bench only): BIH_CHUNK_TREE_TILE=44 for 4 rows x 4 columns.
    static const int tile = [] {
      const char* v = std::getenv("BIH_CHUNK_TREE_TILE");
      return v != nullptr ? std::atoi(v) : 82;
    }();
    if (tile == 44) return launch_tiled<4, 4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
    if (tile == 81) return launch_tm<8>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
    return launch_tiled<8, 2>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  }
  if (M == 1) return launch_tm<1>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  if (M == 2) return launch_tm<2>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  if (M <= 4) return launch_tm<4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  launch_tm<8>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
}

}  // namespace bih::cuda
