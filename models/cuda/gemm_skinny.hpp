// gemm_skinny.hpp: the own tensor-core GEMM for decode-sized M (internal to gemm.cpp and
// gemm_companion.cpp).
//
// Why: at M=1 a decode step reads each weight once, so its GEMMs are bound by HBM bandwidth, and
// cuBLASLt's split-K-1 tiles spread too few CTAs over the weight to reach it (qwen3-1.7b's o_proj
// at M=1 runs at ~1 TB/s of the H200's ~4). This kernel gives every warp 8 weight rows and walks
// the whole K in k16 steps with mma.sync m16n8k16 (bf16 in, fp32 accumulate): 8x more CTAs than a
// 64-wide tile, each streaming its rows through a deep cp.async ring in shared memory.
//
// Invariance: each output element is one accumulator chain acc = mma(x[m, k0:k0+16],
// w[n, k0:k0+16], acc) for k0 = 0, 16, ..., K-16, on the tensor cores: nothing about it depends on
// M, on the row's position among the tokens, or on the grid. Whether that chain is also bitwise
// the same as the pinned cuBLASLt reference's (Hopper's wgmma k16 steps in K order into one fp32
// accumulator) is not assumed: CudaGemm lets this kernel serve a band of M only after the bitwise
// equivalence check (gemm_equivalence.hpp) found every output equal to the reference's.
#pragma once

#include <string>
#include <vector>

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

// The largest M the kernel takes: two m16 token tiles per warp.
inline constexpr int kSkinnyMaxM = 32;

// Whether the kernel takes the shape: 1 <= M <= kSkinnyMaxM, N % 8 == 0, K % 128 == 0 (and x, w
// 16-byte aligned, which the caller's alignment rule covers).
bool skinny_gemm_supports(int M, int N, int K);

// y[M, N] = x[M, K] · w[N, K]^T; device pointers to bf16 (raw 16-bit storage), row-major.
// Launches asynchronously on `stream`; throws std::invalid_argument for a shape it does not take,
// std::runtime_error if the launch fails. M <= 8 on a shape the stream instance takes runs that
// (gemm_skinny_stream.cu: the same chains, the weights fed by the tensor copy engine).
void launch_skinny_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                        cudaStream_t stream);

// The register instance alone (gemm_skinny.cu: cp.async into shared memory, ldmatrix), at any M
// the kernel takes.
void launch_skinny_registers(const void* x, const void* w, void* y, int M, int N, int K,
                             cudaStream_t stream);

// The decode instance (gemm_skinny_stream.cu, sm_90): 1 <= M <= 8, N % 16 == 0, K % 256 == 0,
// x and w 16-byte aligned.
bool skinny_stream_supports(int M, int N, int K, const void* x, const void* w);
void launch_skinny_stream(const void* x, const void* w, void* y, int M, int N, int K,
                          cudaStream_t stream);

// The stream instance's rings (its shared-memory depths and widths; the chains and bits are the
// same in every one): those that take [N, K], the one launch_skinny_stream picks for it, and a
// launch on a named one (std::invalid_argument where it does not take the shape).
std::vector<std::string> skinny_stream_rings(int N, int K);
std::string skinny_stream_ring_for(int N, int K);
void launch_skinny_stream_ring(const std::string& ring, const void* x, const void* w, void* y,
                               int M, int N, int K, cudaStream_t stream);

// The gate_up projection with SiLU-mul in its epilogue: act[M, I] = silu(g) * u, where
// [g | u] = x[M, K] · w^T and w = [gate; up] is [2I, K] (gate rows first, as DeviceLayerWeights
// holds them). Bit for bit launch_skinny_stream(x, w, gate_up, M, 2I, K) then silu_mul
// (kernels.hpp) on the same ring, without the [M, 2I] intermediate. Supported where the stream
// instance takes [2I, K] and I is a multiple of half its ring's rows (8 or 16). The _ring form runs
// a named ring.
bool skinny_stream_silu_mul_supports(int M, int I, int K, const void* x, const void* w);
void launch_skinny_stream_silu_mul(const void* x, const void* w, void* act, int M, int I, int K,
                                   cudaStream_t stream);
void launch_skinny_stream_silu_mul_ring(const std::string& ring, const void* x, const void* w,
                                        void* act, int M, int I, int K, cudaStream_t stream);
// Whether launch_skinny_gemm runs the stream instance where it takes a shape
// (BIH_GEMM_SKINNY_STREAM=0, a diagnostic, turns it off).
bool skinny_stream_instance_on();

// BIH_GEMM_SKINNY_VERIFY=1 (gemm_skinny_verify.cu, a diagnostic): each stream-instance launch
// is checked against the register instance before and after it, counts on stderr.
bool skinny_verify_on();
void launch_skinny_stream_verified(const void* x, const void* w, void* y, int M, int N, int K,
                                   cudaStream_t stream);

}  // namespace bih::cuda
