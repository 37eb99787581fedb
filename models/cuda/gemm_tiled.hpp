// gemm_tiled.hpp: the own bf16 GEMM kernel, batch-invariant by construction (internal to gemm.cpp).
//
// Every output element is computed by one thread as a sequential fp32 fused multiply-add chain
// over k = 0, 1, ..., K-1: nothing about that chain depends on M, the tile or the grid.
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

// y[M, N] = x[M, K] · w[N, K]^T; device pointers to bf16 (raw 16-bit storage), row-major.
// Launches asynchronously on `stream`; throws std::runtime_error if the launch fails.
void launch_tiled_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                       cudaStream_t stream);

}  // namespace bih::cuda
