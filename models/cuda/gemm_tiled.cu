// gemm_tiled.cu: the own tiled bf16 GEMM kernel (see gemm_tiled.hpp for why it is invariant).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_tiled.hpp"

namespace bih::cuda {
namespace {

constexpr int kTile = 64;      // output rows and columns per block
constexpr int kDepth = 32;     // k values staged in shared memory per step
constexpr int kThreads = 256;  // 16 x 16 threads, each owning a 4 x 4 set of outputs
constexpr int kSide = 16;

__global__ void tiled_gemm_kernel(const __nv_bfloat16* __restrict__ x,  // [M, K]
                                  const __nv_bfloat16* __restrict__ w,  // [N, K]
                                  __nv_bfloat16* __restrict__ y,        // [M, N]
                                  int M, int N, int K) {
  __shared__ float x_tile[kDepth][kTile + 1];  // [k, row of this block]
  __shared__ float w_tile[kDepth][kTile + 1];  // [k, column of this block]
  const int row0 = blockIdx.y * kTile;
  const int col0 = blockIdx.x * kTile;
  const int tx = threadIdx.x % kSide;
  const int ty = threadIdx.x / kSide;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kDepth) {
    // Consecutive threads read consecutive k of one row: coalesced. Out-of-range entries are
    // zero; they only ever meet out-of-range outputs, or add +0 at the K tail for every M alike.
    for (int i = threadIdx.x; i < kTile * kDepth; i += kThreads) {
      const int r = i / kDepth;
      const int k = i % kDepth;
      const int gk = k0 + k;
      const int gm = row0 + r;
      const int gn = col0 + r;
      x_tile[k][r] =
          (gm < M && gk < K) ? __bfloat162float(x[static_cast<size_t>(gm) * K + gk]) : 0.0f;
      w_tile[k][r] =
          (gn < N && gk < K) ? __bfloat162float(w[static_cast<size_t>(gn) * K + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < kDepth; ++k) {
      float a[4];
      float b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = x_tile[k][ty + kSide * i];
        b[i] = w_tile[k][tx + kSide * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int gm = row0 + ty + kSide * i;
    if (gm >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int gn = col0 + tx + kSide * j;
      if (gn < N) y[static_cast<size_t>(gm) * N + gn] = __float2bfloat16_rn(acc[i][j]);
    }
  }
}

}  // namespace

void launch_tiled_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                       cudaStream_t stream) {
  const dim3 grid((N + kTile - 1) / kTile, (M + kTile - 1) / kTile);
  tiled_gemm_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                   static_cast<const __nv_bfloat16*>(w),
                                                   static_cast<__nv_bfloat16*>(y), M, N, K);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda
