// gemm.hpp: the CUDA backend's bf16 GEMM, y[M, N] = x[M, K] · w[N, K]^T, in both kernel families.
//
// `tp_invariant`: the own CUDA-core kernel of gemm_chunk_tree.hpp, bit for bit the CPU family of
// the same name (8 fixed K chunks, one tree) at every M; row-parallel ranks take their subtree
// unrounded in fp32 (gemm_tp_invariant_partial) for the tree collectives to finish.
//
// `invariant`: one cuBLASLt algorithm per weight shape (N, K), the reference, pinned once: split-K
// 1, reduction scheme none, no workspace beyond a tile-scheduler counter (see
// CudaGemmOptions::scheduler_workspace_bytes), every tile/stage/cluster field fixed, and
// cublasLtMatmulAlgoCheck passed for every M in 1..max_m before it is used. A row's bits then
// depend only on that row: each output element is reduced over K inside one tile in an order set
// by the algorithm, never by M. When no cuBLASLt algorithm passes for every M (or the shape is not
// 16-byte aligned), the shape uses an own tiled kernel whose per-element K loop is sequential by
// construction. `vendor`: cuBLASLt's heuristic asked afresh for each (M, N, K) with a 32 MiB
// workspace, like cuBLAS's defaults: split-K and the tile can change with M.
//
// Companions: the reference is chosen for prefill sizes and is slow at small M (a 128x64 tile at
// M=1 reads the weight with too few CTAs). With skinny_max_m, the first candidate for a
// small-M band is the own skinny tensor-core kernel (gemm_skinny.hpp: a sequential k16 mma chain
// per element), then the cuBLASLt heuristic's. An element's bits depend only on the order in which
// its K products are accumulated, and Hopper kernels with split-K 1 and no reduction plausibly
// share that order (the same k-steps in K order into one fp32 accumulator) whatever their tile. So
// for each band of M (CudaGemmOptions::companion_bands) the heuristic, asked at the band's M, may
// propose another configuration, filtered like the reference (split-K 1, reduction none,
// workspace <= scheduler_workspace_bytes, AlgoCheck at every M of the band), and that
// configuration serves the band only after it produced bit-identical outputs to the reference on
// the GPU, at pin time, over every element of every tested M (all of a short band, the ends,
// powers of two +-1 and interior points of a long one), on operands built so that any change in
// accumulation order shows (gemm_equivalence.hpp). A candidate that differs anywhere is dropped
// and the band keeps the reference. The choice uses no timing: the heuristic's order and
// deterministic kernels, so every process picks the same (except where a process cannot allocate
// the check's buffers: it keeps the reference alone, slower but with the same bits, and its
// companion_notes say so). Pinning therefore runs GPU work on a private stream with temporary
// buffers; it must happen outside CUDA graph capture (gemm() throws if the stream it is given is
// capturing and the shape is not pinned yet). The rows' invariance across M still rests on each
// configuration alone (one tile per element's K loop); companions only add that the bits are the
// same whichever configuration serves an M.
//
// Plain C++ API (no CUDA header): device pointers are bih::bf16*, the stream is cudaStream_t.
// Not thread-safe across concurrent streams for the vendor family (one shared workspace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/knobs.hpp"

// The CUDA runtime's own spelling of a stream; repeating the typedef is valid C++.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace bih::cuda {

struct GemmCompanion;

// What a family runs for one shape: the cuBLASLt configuration, or the own kernel and why. For the
// invariant family this is the reference, with the companions that serve some ranges of M.
struct GemmAlgoConfig {
  bool cublaslt = false;  // false: an own kernel, tiled (gemm_tiled.cu) or skinny
  bool skinny = false;  // the own tensor-core kernel for small M (gemm_skinny.cu); companions only
  std::string reason;   // why the own tiled kernel, when it is used
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
  int validated_min_m = 1;           // AlgoCheck passed at every M in
  int validated_max_m = 0;           //   validated_min_m..validated_max_m

  // Invariant family only: configurations serving M ranges in place of this one, each verified
  // bitwise equal to it; sorted by first_m, disjoint, inside 1..validated_max_m. Empty: this
  // configuration serves every M.
  std::vector<GemmCompanion> companions;
  // What the companion search found for each band (accepted, differed, none valid) and how long
  // the pin took; for logs and the benchmark, not part of describe().
  std::string companion_notes;

  // One line, e.g. "cublasLt algo 66 tile 20 stages 8 splitK 1 reduction 0 ... workspace 0"; with
  // companions, followed by the M ranges each configuration serves.
  std::string describe() const;
  // The configuration that runs at M: a companion's, or this one.
  const GemmAlgoConfig& serving(int M) const;
};

struct GemmCompanion {
  int first_m = 0;  // serves M in first_m..last_m
  int last_m = 0;
  GemmAlgoConfig config;       // its own companions are empty
  std::vector<int> tested_ms;  // every M where all its output bits equalled the reference's
};

// A band of M for companions: the heuristic is asked at heuristic_m, and its best candidate that
// is valid over first_m..last_m and bitwise equal to the reference serves the band. last_m and
// heuristic_m may be kUpToMaxM (max_m); a band beyond max_m is dropped, one reaching past it is
// cut there.
struct GemmBand {
  static constexpr int kUpToMaxM = 0;
  int first_m = 1;
  int last_m = 1;
  int heuristic_m = 1;
};

// Where CudaGemm::gemm_silu_mul fuses: never, only on a stream being captured into a CUDA graph,
// or always. The bits are the same in all three; only the speed differs.
enum class SiluMulFusion { never, in_graphs, always };

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
  // Companion configurations for bands of M (see the top of this file); false: the reference
  // serves every M, as before companions existed.
  bool companions = true;
  // Sorted, disjoint. Decode batches (1..128) take the heuristic's small-M tiles; 129..2047 stay
  // with the reference (chosen at pin_m = 512); 2048..max_m take the heuristic's choice at max_m
  // (measured: the reference reaches only ~0.8x cuBLAS at M=4096 for N=2048).
  // M=1 (a lone decode row) is a band of its own, so that it can take a kernel that only wins
  // there.
  std::vector<GemmBand> companion_bands = {{1, 1, 1},
                                           {2, 8, 1},
                                           {9, 32, 16},
                                           {33, 128, 64},
                                           {2048, GemmBand::kUpToMaxM, GemmBand::kUpToMaxM}};
  // Candidates per band whose bits are compared with the reference before the band gives up.
  int companion_tries = 3;
  // Offer the own skinny tensor-core kernel (gemm_skinny.hpp) first to every band whose last M is
  // at most this (0: never; bands past kSkinnyMaxM never): it serves a band only if bitwise equal
  // to the reference, like any companion. On H200 and H100 it passed that check on every
  // qwen3-1.7b shape and band (mma.sync's k16 chain has the bits of cuBLASLt's wgmma one). At
  // M <= 8 its stream instance (gemm_skinny_stream.cu) made the bs=1 full-graph decode step 5.7%
  // faster than cuBLASLt's companions on an H100 (reports/gpu/decode-chain-2026-12-06). The
  // environment variable BIH_GEMM_SKINNY_MAX_M overrides this (0 compares whole decode steps
  // against cuBLASLt's companions).
  int skinny_max_m = 8;
  // Where gemm_silu_mul may run the skinny stream kernel with SiLU-mul in its epilogue (the bits
  // of the GEMM then silu_mul, one kernel fewer). On an H100 the fused kernel made the bs=1 step
  // 0.5-1.3% faster in full graphs and 1.2-1.5% slower eager (reports/gpu/silu-mul-fusion-
  // 2026-12-07), so by default it serves only while the stream is being captured into a graph.
  // BIH_GEMM_FUSE_SILU_MUL (0, 1 or graphs) overrides it, to time each.
  SiluMulFusion fuse_silu_mul = SiluMulFusion::in_graphs;
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
  // Throws std::invalid_argument on bad sizes or pointers, std::runtime_error on a CUDA error,
  // when the invariant family cannot keep its pinned algorithm at this M (M > max_m and the
  // algorithm is not valid there), or when (N, K) would be pinned while `stream` is capturing.
  void gemm(KernelFamily family, const bf16* x, const bf16* w, bf16* y, int M, int N, int K,
            cudaStream_t stream);

  // act[M, I] = silu(gate) * up of the gate_up product x[M, K] · w^T, w = [gate; up] of [2I, K],
  // in one kernel, where the invariant family's own skinny kernel serves gemm(x, w) at this M:
  // the same bits as gemm() into [M, 2I] then silu_mul (kernels.hpp). Returns false, launching
  // nothing, anywhere else (another family or configuration, fuse_silu_mul never, or in_graphs
  // while `stream` is not capturing, a shape the fused kernel does not take); the caller then runs
  // the two. Throws as gemm() does.
  bool gemm_silu_mul(KernelFamily family, const bf16* x, const bf16* w, bf16* act, int M, int I,
                     int K, cudaStream_t stream);

  // kernels tp_invariant, a row-parallel rank's share: y[M, N] fp32, unrounded, = the subtree of
  // the kTpInvariantChunks-chunk tree over this rank's `chunks` consecutive chunks of K (the rank
  // holds K = full K * chunks / 8). Throws std::invalid_argument unless chunks is 1, 2, 4 or 8 and
  // divides K.
  void gemm_tp_invariant_partial(const bf16* x, const bf16* w, float* y, int M, int N, int K,
                                 int chunks, cudaStream_t stream);

  // The invariant family's configuration for (N, K), companions included; pins it on first use
  // (GPU work when companions are on: call outside graph capture).
  GemmAlgoConfig invariant_config(int N, int K);
  // The configuration the vendor family runs at (M, N, K) with 256-byte aligned pointers.
  GemmAlgoConfig vendor_config(int M, int N, int K);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bih::cuda
