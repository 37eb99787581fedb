// gemm.hpp: the CUDA backend's bf16 GEMM, y[M, N] = x[M, K] · w[N, K]^T, in both kernel families.
//
// `invariant`: one cuBLASLt algorithm per weight shape (N, K), pinned once and used for every M:
// split-K 1, reduction scheme none, no workspace beyond a tile-scheduler counter (see
// CudaGemmOptions::scheduler_workspace_bytes), every tile/stage/cluster field fixed, and
// cublasLtMatmulAlgoCheck passed for every M in 1..max_m before it is used. A row's bits then
// depend only on that row: each output element is reduced over K inside one tile in an order set
// by the algorithm, never by M. When no cuBLASLt algorithm passes for every M (or the shape is not
// 16-byte aligned), the shape uses an own tiled kernel whose per-element K loop is sequential by
// construction. `vendor`: cuBLASLt's heuristic asked afresh for each (M, N, K) with a 32 MiB
// workspace, like cuBLAS's defaults: split-K and the tile can change with M.
//
// Plain C++ API (no CUDA header): device pointers are bih::bf16*, the stream is cudaStream_t.
// Not thread-safe across concurrent streams for the vendor family (one shared workspace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "models/bf16.hpp"
#include "models/knobs.hpp"

// The CUDA runtime's own spelling of a stream; repeating the typedef is valid C++.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

// What a family runs for one shape: the cuBLASLt configuration, or the own kernel and why.
struct GemmAlgoConfig {
  bool cublaslt = false;  // false: the own tiled kernel (models/cuda/gemm_tiled.cu)
  std::string reason;     // why the own kernel, when it is used
  int algo_id = -1;
  uint32_t tile_id = 0;
  uint32_t stages_id = 0;
  int32_t splitk_num = 1;
  uint32_t reduction_scheme = 0;  // cublasLtReductionScheme_t; 0 = none
  uint32_t cta_swizzling = 0;
  uint32_t custom_option = 0;
  uint16_t inner_shape_id = 0;
  uint16_t cluster_shape_id = 0;
  size_t workspace_bytes = 0;
  uint32_t min_alignment_bytes = 0;  // the largest of the algorithm's A/B/C/D alignment needs
  int chosen_at_m = 0;               // the M whose heuristic offered it
  int validated_max_m = 0;           // AlgoCheck passed at every M in 1..validated_max_m

  // One line, e.g. "cublasLt algo 66 tile 20 stages 8 splitK 1 reduction 0 ... workspace 0".
  std::string describe() const;
};

struct CudaGemmOptions {
  // The engine's largest M (tokens in one step): the pinned algorithm is checked at 1..max_m.
  int max_m = 4096;
  // The M at which the heuristic proposes candidates for the pinned algorithm; the first
  // candidate valid at every M wins, so the choice is deterministic (no timing, same in every
  // process), and tuned for the prefill sizes where GEMM time matters. Measured on H200: 512
  // pins a 128x64 tile for N=2048 (o_proj, down): 1.00x cuBLAS at M=512, ~0.8x at M=4096;
  // 4096 pins 256x128: 1.00x at M=4096 but ~0.4x at M=512 (too few tiles to fill 132 SMs).
  int pin_m = 512;
  // Skip cuBLASLt in the invariant family: every shape runs the own kernel (tests the fallback).
  bool own_kernel_only = false;
  // The most workspace the pinned algorithm may take. cuBLASLt's Hopper kernels (algo 66) ask for
  // 4 bytes once the output has more tiles than a persistent grid covers: a tile counter for
  // their scheduler. 256 bytes can hold such counters but not one fp32 partial tile (a 64x64
  // tile is 16 KiB), so split-K or stream-K partial sums cannot hide in it. 0: zero workspace.
  size_t scheduler_workspace_bytes = 256;
  // The vendor family's workspace; cuBLAS's default on Hopper is 32 MiB.
  size_t vendor_workspace_bytes = size_t{32} << 20;
};

class CudaGemm {
 public:
  explicit CudaGemm(CudaGemmOptions options = {});
  ~CudaGemm();
  CudaGemm(const CudaGemm&) = delete;
  CudaGemm& operator=(const CudaGemm&) = delete;

  // y[M, N] = x[M, K] · w[N, K]^T; all device pointers, row-major, bf16 out, fp32 accumulate.
  // Throws std::invalid_argument on bad sizes or pointers, std::runtime_error on a CUDA error or
  // when the invariant family cannot keep its pinned algorithm at this M (M > max_m and the
  // algorithm is not valid there).
  void gemm(KernelFamily family, const bf16* x, const bf16* w, bf16* y, int M, int N, int K,
            cudaStream_t stream);

  // The invariant family's pinned configuration for (N, K); pins it on first use.
  GemmAlgoConfig invariant_config(int N, int K);
  // The configuration the vendor family runs at (M, N, K) with 256-byte aligned pointers.
  GemmAlgoConfig vendor_config(int M, int N, int K);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bih::cuda
