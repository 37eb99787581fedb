// gemm_chunk_tree_tiled.hpp: the tp_invariant GEMM's shared-memory prefill kernel (internal to
// gemm_chunk_tree.cu, which dispatches to it).
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

// launch_chunk_tree_gemm's contract and bits (gemm_chunk_tree.hpp), for the shapes this kernel
// takes: each chunk a multiple of 64 long, x and w 16-byte aligned. Returns false, launching
// nothing, for any other shape; throws std::runtime_error (file:line) if the launch fails.
bool launch_chunk_tree_smem(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N,
                            int K, int chunks, cudaStream_t stream);

}  // namespace bih::cuda
