// gemm_chunk_tree_tiled.cu: the tp_invariant GEMM's shared-memory prefill kernel and its launcher.
//
// Same chains and trees as gemm_chunk_tree.hpp says, laid out for reuse: a block of 256 threads
// computes a (4 TM) x 64 tile of y, staging 64-wide K slices of x and w through shared memory by
// cp.async, 3 slices deep. Thread (j, p) = (tid % 8, tid / 8) owns lane j of the chains of TM
// rows (p / 8) TM + t and 8 columns p % 8 + 8u, so per step it reads TM + 8 bf16 from shared
// memory for 8 TM products; the register kernel (chunk_tree_tiled_kernel) reads 16 bytes of each
// row and column from L2 for every 16 products and ran at about a quarter of the SIMT peak.
// Lane j of a chain sums k = j, j + 8, ... of each slice in slice order, so the slices of a chunk
// continue its lanes exactly as one pass over the chunk would. At a chunk's end the 8 threads of
// a lane group reduce-scatter their 8 TM sums with three butterflies (lane j with j ^ 4, then
// j ^ 2, then j ^ 1): by commutativity each level adds the pairs of the lane tree
// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), and thread j keeps TM of the tile's finished chunk sums.
// Those enter a binary counter over the chunk index, which is pairwise_tree_sum's tree for the
// power-of-two chunk counts the family allows. Shared-memory rows are 72 bf16 (144 bytes): the
// four column groups of a warp then fall on distinct banks, and its x reads are one broadcast.
// With 32-row tiles each slice is added with one fma per product where every operand the block
// staged for it is in band, which is bitwise the rounded multiply and add (exact_product.hpp), else
// the long way; the block decides per slice in the barrier that publishes it. The 16-row tiles,
// chosen when blocks are few, skip the vote: there it cost more than the fmas saved. On an H100 at
// qwen3-1.7b's shapes the register kernel ran at about 7 TFLOP/s, this kernel at about 15 to 18
// without the fused form and 18 to 21 with it (reports/gpu/tp-invariant-smem-2026-12-06 and
// reports/gpu/tp-invariant-fma-2026-12-06).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/device_info.hpp"
#include "models/cuda/gemm_chunk_tree_tiled.hpp"
#include "models/cuda/ptx.cuh"
#include "models/exact_product.hpp"

namespace bih::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kLanes = 8;
constexpr int kSlice = 64;                    // K per shared-memory stage
constexpr int kColumns = 64;                  // columns of y per block
constexpr int kRowPitch = kSlice + kLanes;    // bf16 per shared-memory row (pad: 16 bytes)
constexpr int kStages = 3;                    // cp.async pipeline depth
constexpr int kMaxChunkLevels = 3;            // log2 of the 8 chunks a rank may hold
constexpr int kGroups = kThreads / kLanes;    // 32 lane groups: 4 row groups x 8 column groups
constexpr int kRowGroups = kGroups / kLanes;  // 4

template <int TM>
struct Tile {
  static constexpr int kRows = kRowGroups * TM;
  static constexpr int kStageElems = (kRows + kColumns) * kRowPitch;  // x rows, then w rows
};

// Lane group's butterfly: v[q] (q < kCount) becomes, in the thread whose bit d of j is b, the sum
// of both threads' v[q + b kCount / 2] for q < kCount / 2. Static indices keep v in registers.
template <int kCount>
__device__ __forceinline__ void butterfly(float* v, int j, int d) {
  const bool high = (j & d) != 0;
#pragma unroll
  for (int q = 0; q < kCount / 2; ++q) {
    const float send = high ? v[q] : v[q + kCount / 2];
    const float keep = high ? v[q + kCount / 2] : v[q];
    v[q] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, d));
  }
}

// Lane j of the chains of TM rows and 8 columns over one staged slice: k = j, j + 8, ... in order.
// kFused: one fma per product, which the caller may choose only where every operand of the slice is
// in band (then it is bitwise the rounded multiply and add; exact_product.hpp).
template <int TM, bool kFused>
__device__ __forceinline__ void add_slice(float (&acc)[TM][kLanes], const uint16_t* xs,
                                          const uint16_t* ws) {
#pragma unroll
  for (int i = 0; i < kSlice / kLanes; ++i) {
    float xf[TM], wf[kLanes];
#pragma unroll
    for (int t = 0; t < TM; ++t) xf[t] = bits::widen(xs[t * kRowPitch + i * kLanes]);
#pragma unroll
    for (int u = 0; u < kLanes; ++u) wf[u] = bits::widen(ws[u * kLanes * kRowPitch + i * kLanes]);
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int u = 0; u < kLanes; ++u) {
        acc[t][u] = kFused ? __fmaf_rn(xf[t], wf[u], acc[t][u])
                           : __fadd_rn(acc[t][u], __fmul_rn(xf[t], wf[u]));
      }
    }
  }
}

template <int TM>
__global__ void __launch_bounds__(kThreads, 2)
    chunk_tree_smem_kernel(const uint16_t* __restrict__ x,  // [M, K]
                           const uint16_t* __restrict__ w,  // [N, K]
                           uint16_t* __restrict__ y_bf16,   // [M, N] or null
                           float* __restrict__ y_f32,       // [M, N] or null
                           int M, int N, int K, int chunks) {
  using T = Tile<TM>;
  constexpr bool kFusedSlices = TM == 8;
  __shared__ __align__(16) uint16_t stage[kStages][T::kStageElems];
  const int tid = threadIdx.x;
  const int j = tid % kLanes;
  const int p = tid / kLanes;
  const int row0 = (p / kLanes) * TM;  // first of the thread's TM tile rows
  const int col0 = p % kLanes;         // its columns: col0 + 8u
  const int m_base = blockIdx.x * T::kRows;
  const int n_base = blockIdx.y * kColumns;
  const int slices = K / kSlice;
  const int slices_per_chunk = slices / chunks;

  // Copy slice s into stage b: row r of the stage is x row m_base + r (clamped to M - 1), then
  // w row n_base + r - kRows (clamped to N - 1); clamped rows are computed and never stored.
  const auto issue = [&](int s, int b) {
    constexpr int kPieces = (T::kRows + kColumns) * (kSlice / kLanes);
    const uint32_t base = ptx::shared_address(stage[b]);
#pragma unroll
    for (int i = tid; i < kPieces; i += kThreads) {
      const int r = i / (kSlice / kLanes);
      const int piece = i % (kSlice / kLanes);
      const uint16_t* src = r < T::kRows
                                ? x + static_cast<size_t>(min(m_base + r, M - 1)) * K
                                : w + static_cast<size_t>(min(n_base + r - T::kRows, N - 1)) * K;
      ptx::cp_async_16<0>(base + (r * kRowPitch + piece * kLanes) * 2,
                          src + static_cast<size_t>(s) * kSlice + piece * kLanes);
    }
  };
  // Bit 15 or 31 set where a bf16 of the pieces this thread copied into `slice` is out of band; its
  // own copies are visible to it once its cp.async group is waited for.
  const auto out_of_band_pieces = [&](const uint16_t* slice) {
    constexpr int kPieces = (T::kRows + kColumns) * (kSlice / kLanes);
    uint32_t out = 0;
#pragma unroll
    for (int i = tid; i < kPieces; i += kThreads) {
      const uint4 v = *reinterpret_cast<const uint4*>(slice + (i / (kSlice / kLanes)) * kRowPitch +
                                                      (i % (kSlice / kLanes)) * kLanes);
      out |= exact_product::out_of_band_pair(v.x) | exact_product::out_of_band_pair(v.y) |
             exact_product::out_of_band_pair(v.z) | exact_product::out_of_band_pair(v.w);
    }
    return out;
  };

  float acc[TM][kLanes];  // [t][u]: lane j of the chain of row row0 + t, column col0 + 8u
  float pending[kMaxChunkLevels][TM] = {};  // the chunk counter's unfinished left subtrees
  float sums[TM] = {};
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int u = 0; u < kLanes; ++u) acc[t][u] = 0.0f;
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) issue(s, s);
    ptx::cp_async_commit();
  }
  for (int s = 0; s < slices; ++s) {
    ptx::cp_async_wait<kStages - 2>();
    // The slice's operands are in band (exact_product.hpp) unless some thread's pieces say not;
    // the barrier that makes the slice visible to every thread also takes that vote.
    bool fused = false;
    if constexpr (kFusedSlices) {
      fused = !__syncthreads_or(out_of_band_pieces(stage[s % kStages]) != 0);
    } else {
      __syncthreads();
    }
    if (s + kStages - 1 < slices) issue(s + kStages - 1, (s + kStages - 1) % kStages);
    ptx::cp_async_commit();
    const uint16_t* xs = stage[s % kStages] + row0 * kRowPitch + j;
    const uint16_t* ws = stage[s % kStages] + (T::kRows + col0) * kRowPitch + j;
    if (fused) {
      add_slice<TM, true>(acc, xs, ws);
    } else {
      add_slice<TM, false>(acc, xs, ws);
    }
    if ((s + 1) % slices_per_chunk != 0) continue;

    // The chunk is whole: the lane tree by butterflies; thread j keeps flat sums q = j TM + r of
    // q = 8t + u, i.e. row (j TM + r) / 8, column (j TM + r) % 8.
    float* flat = &acc[0][0];
    butterfly<TM * kLanes>(flat, j, 4);
    butterfly<TM * kLanes / 2>(flat, j, 2);
    butterfly<TM * kLanes / 4>(flat, j, 1);
    const int c = (s + 1) / slices_per_chunk - 1;  // local chunk index
    bool placed = false;
#pragma unroll
    for (int level = 0; level < kMaxChunkLevels; ++level) {
      if (!placed) {
        if ((c >> level) & 1) {
#pragma unroll
          for (int r = 0; r < TM; ++r) flat[r] = __fadd_rn(pending[level][r], flat[r]);
        } else {
#pragma unroll
          for (int r = 0; r < TM; ++r) pending[level][r] = flat[r];
          placed = true;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < TM; ++r) sums[r] = flat[r];
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int u = 0; u < kLanes; ++u) acc[t][u] = 0.0f;
    }
  }

  // After the last chunk (index chunks - 1, all ones) `sums` holds the whole tree.
#pragma unroll
  for (int r = 0; r < TM; ++r) {
    const int q = j * TM + r;
    const int m = m_base + row0 + q / kLanes;
    const int n = n_base + col0 + kLanes * (q % kLanes);
    if (m >= M || n >= N) continue;
    const size_t at = static_cast<size_t>(m) * N + n;
    if (y_f32 != nullptr) {
      y_f32[at] = sums[r];
    } else {
      y_bf16[at] = bits::narrow(sums[r]);
    }
  }
}

template <int TM>
void launch(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N, int K,
            int chunks, cudaStream_t stream) {
  const dim3 grid((M + Tile<TM>::kRows - 1) / Tile<TM>::kRows, (N + kColumns - 1) / kColumns);
  chunk_tree_smem_kernel<TM><<<grid, kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
      static_cast<uint16_t*>(y_bf16), y_f32, M, N, K, chunks);
  cudaCheck(cudaGetLastError());
}

}  // namespace

bool launch_chunk_tree_smem(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N,
                            int K, int chunks, cudaStream_t stream) {
  if (chunks < 1 || chunks > (1 << kMaxChunkLevels) || K % chunks != 0 ||
      (K / chunks) % kSlice != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return false;
  }
  // 32-row tiles read each weight slice half as often as 16-row ones, but only while there are
  // blocks enough to fill every multiprocessor twice.
  const long long column_tiles = (N + kColumns - 1) / kColumns;
  const long long tall_blocks = column_tiles * ((M + Tile<8>::kRows - 1) / Tile<8>::kRows);
  if (tall_blocks >= 2LL * multiprocessor_count()) {
    launch<8>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  } else {
    launch<4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  }
  return true;
}

}  // namespace bih::cuda
