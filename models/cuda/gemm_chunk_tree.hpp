// gemm_chunk_tree.hpp: the tp_invariant family's CUDA GEMM (internal to gemm.cpp and its tests).
//
// y[M, N] = x[M, K] . w[N, K]^T with K split into `chunks` equal chunks, bit for bit
// models/cpu/gemm.cpp's tp_invariant plan: inside a chunk, lane j of 8 fp32 accumulators sums
// the products at k0 + j, k0 + j + 8, ... from zero (IEEE multiply, then add: never fused, as the
// CPU build's -ffp-contract=off); the lanes combine as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)); the
// chunk partials combine by pairwise_tree_sum over the chunk index (models/tree_sum.hpp). A thread
// owns whole (output column, chunk) chains (one column for up to 8 rows at decode sizes, 4
// columns x 4 rows beyond), so nothing about an output's arithmetic depends on M, the grid, or
// which rows share a launch: which kernel ran changes which thread adds a chain, never its order.
#pragma once

#include <span>
#include <string>

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

// Device pointers, row-major: x [M, K] and w [N, K] bf16 bits. Exactly one output is set:
// y_bf16 [M, N] (the tree's sum rounded to bf16 once) or y_f32 [M, N] (unrounded, a row-parallel
// rank's subtree). chunks: 1, 2, 4 or 8, dividing K (checked by the caller). Launches on `stream`;
// throws std::runtime_error (file:line) if the launch fails.
void launch_chunk_tree_gemm(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N,
                            int K, int chunks, cudaStream_t stream);

// The M = 1 staged GEMV's block shapes ("threads x steps a stage x stages"): the one the launcher
// above uses from BIH_TPINV_STAGED_MIN_N columns on (4096) is BIH_TPINV_STAGED (the first, by
// default), read once. Every shape gives the same bits; the choice is a measurement.
std::span<const char* const> chunk_tree_staged_shapes();
// One M = 1 launch with the given shape, whatever N (tests). False where the device's shared
// memory cannot hold the block's ring (the caller then runs another kernel, with the same bits);
// std::invalid_argument for a shape not in the list.
bool launch_chunk_tree_gemv_staged(const std::string& shape, const void* x, const void* w,
                                   void* y_bf16, float* y_f32, int N, int K, int chunks,
                                   cudaStream_t stream);

}  // namespace bih::cuda
