// gemm_chunk_tree_tiled.cu: the tp_invariant GEMM's shared-memory prefill kernel and its launcher.
//
// Same chains and trees as gemm_chunk_tree.hpp says, laid out for reuse: a block of 256 threads
// computes a (4 TM) x 64 tile of y over 64-wide K slices of x and w. Each thread copies its share
// of the slices two ahead (16-byte pieces of bf16, cp.async) into a ring in shared memory while the
// block adds the current one, then widens its own pieces of the next into shared memory as fp32,
// transposed to [k][row] (double buffered). Thread (j, p) = (tid % 8, tid / 8) owns lane j of the
// chains of TM adjacent rows (p / 8) TM + t and 8 adjacent columns 8 (p % 8) + u, so each step's
// operands are (TM + 8) / 4 16-byte loads for
// 8 TM products, with no widening in the loop (Nsight Compute on the kernel before, which staged
// bf16 rows and read one bf16 per operand: 2.2 instructions issued per product, 68% of issue
// slots busy, limited by its 128 registers to 16 warps a multiprocessor).
// Lane j of a chain sums k = j, j + 8, ... of each slice in slice order, so the slices of a chunk
// continue its lanes exactly as one pass over the chunk would. At a chunk's end the 8 threads of
// a lane group reduce-scatter their 8 TM sums with three butterflies (lane j with j ^ 4, then
// j ^ 2, then j ^ 1): by commutativity each level adds the pairs of the lane tree
// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), and thread j keeps TM of the tile's finished chunk sums.
// Those enter a binary counter over the chunk index, which is pairwise_tree_sum's tree for the
// power-of-two chunk counts the family allows.
// Each slice is added with one fma per product where every operand the block staged for it is in
// band, which is bitwise the rounded multiply and add (exact_product.hpp), else the long way; the
// block decides per slice in the barrier that publishes it, each thread testing the pieces it
// widened (before, the test was a second pass over shared memory, which the 16-row tiles skipped).
// Earlier versions on an H100 at qwen3-1.7b's shapes: the register kernel about 7 TFLOP/s, the
// bf16-staged one 15 to 18 without the fused form and 18 to 21 with it
// (reports/gpu/tp-invariant-smem-2026-12-06, reports/gpu/fma-and-short-passes-2026-12-06).
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
constexpr int kMaxChunkLevels = 3;            // log2 of the 8 chunks a rank may hold
constexpr int kGroups = kThreads / kLanes;    // 32 lane groups: 4 row groups x 8 column groups
constexpr int kRowGroups = kGroups / kLanes;  // 4
constexpr int kPieces = kSlice / 8;           // 16-byte pieces of bf16 per staged row and slice
// Staged slices are fp32 and transposed, [k][row]: lane j's operands of one k are then adjacent,
// one 16-byte load per four rows or columns. A row pitch of 4 mod 32 words puts the 8 k of one
// quarter warp's loads in 8 distinct bank groups.
constexpr int kWPitch = kColumns + 4;
// Slices of raw bf16 pieces in flight or landed (cp.async): two ahead of the one being added, so
// that a launch of one block per multiprocessor (a decode-sized M) still hides the trip to memory.
constexpr int kRing = 3;

template <int TM>
struct Tile {
  static constexpr int kRows = kRowGroups * TM;  // rows of y per block
  static constexpr int kXPitch = kRows + 4;
  static constexpr int kStageFloats = kSlice * (kXPitch + kWPitch);  // x, then w
  static constexpr int kItems = (kRows + kColumns) * kPieces;        // 16-byte loads per slice
  static constexpr int kItemsPerThread = (kItems + kThreads - 1) / kThreads;
  // The fp32 stages, double buffered, then a ring of kRing slices of raw pieces.
  static constexpr size_t kRawOffset = 2 * kStageFloats * sizeof(float);
  static constexpr size_t kSmemBytes = kRawOffset + kRing * kItems * sizeof(uint4);
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
// xs, ws: the slice's row k = j of this thread's rows and columns. kFused: one fma per product,
// which the caller may choose only where every operand of the slice is in band (then it is
// bitwise the rounded multiply and add; exact_product.hpp).
template <int TM, bool kFused>
__device__ __forceinline__ void add_slice(float (&acc)[TM][kLanes], const float* xs,
                                          const float* ws) {
#pragma unroll
  for (int i = 0; i < kSlice / kLanes; ++i) {
    float xf[TM], wf[kLanes];
#pragma unroll
    for (int t = 0; t < TM; t += 4) {
      const float4 v = *reinterpret_cast<const float4*>(xs + i * kLanes * Tile<TM>::kXPitch + t);
      xf[t] = v.x, xf[t + 1] = v.y, xf[t + 2] = v.z, xf[t + 3] = v.w;
    }
#pragma unroll
    for (int u = 0; u < kLanes; u += 4) {
      const float4 v = *reinterpret_cast<const float4*>(ws + i * kLanes * kWPitch + u);
      wf[u] = v.x, wf[u + 1] = v.y, wf[u + 2] = v.z, wf[u + 3] = v.w;
    }
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
  extern __shared__ __align__(16) float stage[];  // [2][kSlice][kXPitch], then [2][kSlice][kWPitch]
  const int tid = threadIdx.x;
  const int j = tid % kLanes;
  const int p = tid / kLanes;
  const int row0 = (p / kLanes) * TM;      // first of the thread's TM tile rows
  const int col0 = (p % kLanes) * kLanes;  // first of its 8 adjacent columns
  const int m_base = blockIdx.x * T::kRows;
  const int n_base = blockIdx.y * kColumns;
  const int slices = K / kSlice;
  const int slices_per_chunk = slices / chunks;
  const auto x_stage = [&](int b) { return stage + b * kSlice * T::kXPitch; };
  const auto w_stage = [&](int b) {
    return stage + 2 * kSlice * T::kXPitch + b * kSlice * kWPitch;
  };

  // Item q of a slice: staged row r = q % (kRows + kColumns) (x row m_base + r, clamped to M - 1,
  // then w row n_base + r - kRows, clamped to N - 1; clamped rows are computed, never stored),
  // piece q / (kRows + kColumns). Each thread copies its items into the raw ring and later widens
  // the very same items, so its own cp.async wait is all the ordering that needs. A warp's items
  // are 32 adjacent rows of one piece, so its transposed stores fill 32 adjacent words.
  uint4* raw = reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(stage) + T::kRawOffset);
  const auto for_each_item = [&](auto&& f) {
#pragma unroll
    for (int i = 0; i < T::kItemsPerThread; ++i) {
      const int q = tid + i * kThreads;
      if (T::kItems % kThreads != 0 && q >= T::kItems) break;
      f(q, q % (T::kRows + kColumns), q / (T::kRows + kColumns));
    }
  };
  const auto issue = [&](int s) {
    const uint32_t base = ptx::shared_address(raw + (s % kRing) * T::kItems);
    for_each_item([&](int q, int r, int piece) {
      const uint16_t* src = r < T::kRows
                                ? x + static_cast<size_t>(min(m_base + r, M - 1)) * K
                                : w + static_cast<size_t>(min(n_base + r - T::kRows, N - 1)) * K;
      ptx::cp_async_16<0>(base + q * sizeof(uint4),
                          src + static_cast<size_t>(s) * kSlice + piece * 8);
    });
  };
  // Widens this thread's pieces of slice s into stage b, transposed; returns bit 15 or 31 set
  // where one of them is out of band.
  const auto widen = [&](int s, int b) {
    const uint4* held = raw + (s % kRing) * T::kItems;
    uint32_t out_of_band = 0;
    for_each_item([&](int q, int r, int piece) {
      float* dst = r < T::kRows ? x_stage(b) + piece * 8 * T::kXPitch + r
                                : w_stage(b) + piece * 8 * kWPitch + (r - T::kRows);
      const int pitch = r < T::kRows ? T::kXPitch : kWPitch;
      const uint4 v = held[q];
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        out_of_band |= exact_product::out_of_band_pair(words[e]);
        dst[(2 * e) * pitch] = __uint_as_float(words[e] << 16);  // little endian: k 2e is low
        dst[(2 * e + 1) * pitch] = __uint_as_float(words[e] & 0xffff0000u);
      }
    });
    return out_of_band;
  };

  float acc[TM][kLanes];  // [t][u]: lane j of the chain of row row0 + t, column col0 + u
  float pending[kMaxChunkLevels][TM];  // the chunk counter's unfinished left subtrees
#pragma unroll
  for (int t = 0; t < TM; ++t) {
#pragma unroll
    for (int u = 0; u < kLanes; ++u) acc[t][u] = 0.0f;
  }

#pragma unroll
  for (int ahead = 0; ahead < kRing - 1; ++ahead) {
    if (ahead < slices) issue(ahead);
    ptx::cp_async_commit();  // empty groups keep the count of groups per slice fixed
  }
  // The slice's operands are in band (exact_product.hpp) unless some thread's pieces say not;
  // the barrier that makes the slice visible to every thread also takes that vote.
  ptx::cp_async_wait<kRing - 2>();
  bool fused = !__syncthreads_or(widen(0, 0) != 0);
  for (int s = 0; s < slices; ++s) {
    // Slice s + kRing - 1 goes where slice s - 1 was, widened by this thread an iteration ago.
    if (s + kRing - 1 < slices) issue(s + kRing - 1);
    ptx::cp_async_commit();
    const float* xs = x_stage(s % 2) + j * T::kXPitch + row0;
    const float* ws = w_stage(s % 2) + j * kWPitch + col0;
    if (fused) {
      add_slice<TM, true>(acc, xs, ws);
    } else {
      add_slice<TM, false>(acc, xs, ws);
    }
    if (s + 1 < slices) {
      // Stage (s + 1) % 2 was last read while adding slice s - 1, before the previous barrier.
      ptx::cp_async_wait<kRing - 2>();
      fused = !__syncthreads_or(widen(s + 1, (s + 1) % 2) != 0);
    }
    if ((s + 1) % slices_per_chunk != 0) continue;

    // The chunk is whole: the lane tree by butterflies; thread j keeps flat sums q = j TM + r of
    // q = 8t + u, i.e. row (j TM + r) / 8, column (j TM + r) % 8.
    float* flat = &acc[0][0];
    butterfly<TM * kLanes>(flat, j, 4);
    butterfly<TM * kLanes / 2>(flat, j, 2);
    butterfly<TM * kLanes / 4>(flat, j, 1);
    const int c = (s + 1) / slices_per_chunk - 1;  // local chunk index
    // Not unrolled: `pending` is indexed at run time and so stays in local memory (L1), read and
    // written once a chunk, leaving the registers to the slice loop.
#pragma unroll 1
    for (int level = 0; level < kMaxChunkLevels; ++level) {
      if ((c >> level) & 1) {
#pragma unroll
        for (int r = 0; r < TM; ++r) flat[r] = __fadd_rn(pending[level][r], flat[r]);
      } else {
#pragma unroll
        for (int r = 0; r < TM; ++r) pending[level][r] = flat[r];
        break;
      }
    }
    if (s + 1 == slices) break;  // flat[0, TM) holds the whole tree (the last chunk is all ones)
#pragma unroll
    for (int t = 0; t < TM; ++t) {
#pragma unroll
      for (int u = 0; u < kLanes; ++u) acc[t][u] = 0.0f;
    }
  }

  const float* sums = &acc[0][0];
#pragma unroll
  for (int r = 0; r < TM; ++r) {
    const int q = j * TM + r;
    const int m = m_base + row0 + q / kLanes;
    const int n = n_base + col0 + q % kLanes;
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
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(&chunk_tree_smem_kernel<TM>),
                              Tile<TM>::kSmemBytes);
  const dim3 grid((M + Tile<TM>::kRows - 1) / Tile<TM>::kRows, (N + kColumns - 1) / kColumns);
  chunk_tree_smem_kernel<TM><<<grid, kThreads, Tile<TM>::kSmemBytes, stream>>>(
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
