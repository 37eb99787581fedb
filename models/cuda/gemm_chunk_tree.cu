// gemm_chunk_tree.cu: the tp_invariant GEMM kernels and their launcher (gemm_chunk_tree.hpp).
//
// Layout: a block of kThreads threads covers kThreads / chunks output columns (TN times that in
// the tiled kernel); thread t owns chunk c = t % chunks of its column(s), so one column's chunks
// sit in consecutive lanes of a warp and their tree is three shuffles. blockIdx.x walks the row
// tiles of x fastest, so the tiles that read the same weight rows run together and share them in
// L2. Memory: each step a thread reads 16 bytes of each weight row it owns (8 bf16: one product
// per lane) and the same 16 bytes of each of its x rows.
// - Decode (M <= 8, or any M whose rows are not 16-byte aligned): one column per thread, TM rows;
//   at TM = 1 it reads kAhead steps before it adds, so a GEMV keeps bytes in flight. At M = 1,
//   outputs of 4096 columns or more stage the weight rows through shared memory in whole 128-byte
//   lines (the staged GEMV kernel); narrower ones have four threads share a column's chunk (the
//   GEMV kernel).
// - Prefill (M > 8): 4 columns x 4 rows per thread, so each 16 bytes loaded feed 4 chains instead
//   of re-reading x per column; measured on the H200 at qwen3-1.7b shapes, M=64: one step's GEMMs
//   65.0 ms with one column x 8 rows, 36.1 ms with 2 columns x 8 rows, 29.7 ms with 4 x 4.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/gemm_chunk_tree.hpp"
#include "models/cuda/gemm_chunk_tree_tiled.hpp"
#include "models/cuda/programmatic_launch.cuh"
#include "models/cuda/ptx.cuh"

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

// The prefill kernel (M > 8, 16-byte loads): a thread owns TN columns' chains of one chunk for TM
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

// The GEMV kernel (M = 1, 16-byte aligned rows, N < 4096): kSplit threads share one (column,
// chunk) chain set, each owning kLanes / kSplit of its 8 lanes, which are independent chains until
// the lane tree. So a 2048-wide output has kSplit times the threads of the kernel above to cover
// HBM's latency with, and each thread asks for kBatch steps of w and x before it adds any.
// Measured on the H200 (one step's M=1 GEMMs, tp_invariant): 2.61 ms with one thread per chain
// set, 2.46 ms with kSplit 2, 2.32 ms with kSplit 4 (o_proj 11.2 -> 8.8 us, down 27.1 -> 18.8 us;
// gate_up 29.6 -> 31.3 us, hence the N bound); 32 steps ahead instead of 16: o_proj 8.74 ->
// 8.36 us, down 18.8 -> 17.7 (reports/gpu/tp-invariant-gemv-2026-12-04). The lane
// tree's first levels pair lanes held by different threads (lane j with j + 4, then j with j + 2
// for the partial sums), finished by shuffles in the CPU's order; the rest is the thread's own.
template <int kSplit>
struct SplitPiece;  // the kLanes / kSplit consecutive bf16 a thread reads per step
template <>
struct SplitPiece<4> {
  using Word = uint32_t;
  static constexpr int kLanesHeld = 2;
  __device__ static void widen(const Word& v, float (&f)[2]) {
    f[0] = __uint_as_float(v << 16);
    f[1] = __uint_as_float(v & 0xffff0000u);
  }
};

template <int kSplit, int kBatch>
__global__ void __launch_bounds__(kThreads)
    chunk_tree_gemv_kernel(const uint16_t* __restrict__ x,  // [1, K]
                           const uint16_t* __restrict__ w,  // [N, K]
                           uint16_t* __restrict__ y_bf16,   // [1, N] or null
                           float* __restrict__ y_f32,       // [1, N] or null
                           int N, int K, int chunks, int release) {
  if (release == kReleaseAtStart) ptx::allow_dependent_launch();  // BIH_STEP_PDL=2
  ptx::wait_for_prerequisites();  // launched early (programmatic_launch.cuh)
  using Piece = SplitPiece<kSplit>;
  using Word = typename Piece::Word;
  constexpr int kHeld = Piece::kLanesHeld;
  const int chunk_len = K / chunks;
  const int steps = chunk_len / kLanes;
  const int h = threadIdx.x % kSplit;  // which lanes: h * kHeld .. + kHeld - 1
  const int c = threadIdx.x / kSplit % chunks;
  const int n = blockIdx.x * (kThreads / (kSplit * chunks)) + threadIdx.x / (kSplit * chunks);
  const size_t k0 = static_cast<size_t>(c) * chunk_len + h * kHeld;
  // Columns past N read column N-1 and are never stored: every warp stays whole for the trees.
  const Word* w_at = reinterpret_cast<const Word*>(w + static_cast<size_t>(min(n, N - 1)) * K + k0);
  const Word* x_at = reinterpret_cast<const Word*>(x + k0);
  constexpr int kStride = kLanes / kHeld;  // Words per step
  float acc[kHeld];
#pragma unroll
  for (int i = 0; i < kHeld; ++i) acc[i] = 0.0f;
  int step = 0;
  for (; step + kBatch <= steps; step += kBatch) {
    Word wv[kBatch];
    Word xv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      wv[b] = __ldg(w_at + (step + b) * kStride);
      xv[b] = __ldg(x_at + (step + b) * kStride);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float wf[kHeld], xf[kHeld];
      Piece::widen(wv[b], wf);
      Piece::widen(xv[b], xf);
#pragma unroll
      for (int i = 0; i < kHeld; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(xf[i], wf[i]));
    }
  }
  if (release == kReleaseAfterLastLoad) ptx::allow_dependent_launch();  // the last batch is in
  for (; step < steps; ++step) {
    float wf[kHeld], xf[kHeld];
    Piece::widen(__ldg(w_at + step * kStride), wf);
    Piece::widen(__ldg(x_at + step * kStride), xf);
#pragma unroll
    for (int i = 0; i < kHeld; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(xf[i], wf[i]));
  }
  // The lane tree: levels over the lane index's high bits pair threads (the lower adds its
  // partner's), the rest are this thread's own: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
#pragma unroll
  for (int d = kSplit / 2; d >= 1; d /= 2) {
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const float other = __shfl_down_sync(0xffffffffu, acc[i], d);
      if ((h & d) == 0) acc[i] = __fadd_rn(acc[i], other);
    }
  }
#pragma unroll
  for (int b = kHeld / 2; b >= 1; b /= 2) {
#pragma unroll
    for (int i = 0; i < b; ++i) acc[i] = __fadd_rn(acc[i], acc[i + b]);
  }
  // The chunk tree over the chunks' first threads, kSplit lanes apart.
  float part = acc[0];
  for (int width = 1; width < chunks; width *= 2) {
    const float other = __shfl_down_sync(0xffffffffu, part, width * kSplit);
    if (h == 0 && c % (2 * width) == 0) part = __fadd_rn(part, other);
  }
  if (h != 0 || c != 0 || n >= N) return;
  if (y_f32 != nullptr) {
    y_f32[n] = part;
  } else {
    y_bf16[n] = bits::narrow(part);
  }
}

// The staged GEMV kernel (M = 1, 16-byte aligned rows, chunk length a multiple of 8): the block's
// weight rows come into shared memory by cp.async in full 128-byte lines (a warp's copy covers
// four lines), kP stages deep, and thread t then owns the (row, chunk) chain set t as in the
// one-thread kernel: 16 bytes of its own row per step, from shared memory. The global loads of
// the register kernels touch 32 rows per warp instruction (16 bytes of each); here every request
// is a whole line, and kP - 1 stages are in flight while one is added. Launched as 256 threads,
// 8 steps a stage, 3 stages: the fastest of 21 shared-memory configurations measured on the H200;
// persistent blocks and one bulk copy per chain set and stage were slower
// (reports/gpu/tp-invariant-gemv-2026-12-04). Shared memory: ring [kP][kT][kS + 1] uint4 (one pad
// per chain set keeps 8 consecutive threads on distinct banks), then x [chunks][steps + 1] uint4.
template <int kT, int kS, int kP>
__global__ void __launch_bounds__(kT)
    chunk_tree_gemv_staged_kernel(const uint16_t* __restrict__ x,  // [1, K]
                                  const uint16_t* __restrict__ w,  // [N, K]
                                  uint16_t* __restrict__ y_bf16,   // [1, N] or null
                                  float* __restrict__ y_f32,       // [1, N] or null
                                  int N, int K, int chunks, int release) {
  extern __shared__ uint4 staged[];
  const int chunk_len = K / chunks;
  const int steps = chunk_len / kLanes;
  const int stages = (steps + kS - 1) / kS;
  const int t = threadIdx.x;
  const int c = t % chunks;
  const int rows = kT / chunks;
  const int n = blockIdx.x * rows + t / chunks;
  uint4* ring = staged;
  uint4* xs = staged + kP * kT * (kS + 1);
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  const uint4* wg = reinterpret_cast<const uint4*>(w);
  if (release == kReleaseAtStart) ptx::allow_dependent_launch();  // BIH_STEP_PDL=2
  const auto issue = [&](int g) {
    uint4* buffer = ring + (g % kP) * kT * (kS + 1);
#pragma unroll
    for (int q = 0; q < kS; ++q) {
      const int i = t + kT * q;
      const int p = i / kS;
      const int j = i % kS;
      const int step = g * kS + j;
      if (step < steps) {
        // Rows past N copy row N-1; they are never stored.
        const size_t row =
            static_cast<size_t>(min(static_cast<int>(blockIdx.x) * rows + p / chunks, N - 1));
        const uint4* src = wg + (row * K + static_cast<size_t>(p % chunks) * chunk_len) / kLanes;
        ptx::cp_async_16<0>(ptx::shared_address(buffer + p * (kS + 1) + j), src + step);
      }
    }
  };
  // The weights depend on no kernel before this one: the first kP - 1 stages are asked for before
  // the wait for those kernels (launched early, this runs while the one before it ends), x after
  // it, by plain loads (the first stage's __syncthreads publishes them).
#pragma unroll
  for (int g = 0; g < kP - 1; ++g) {
    if (g < stages) issue(g);
    ptx::cp_async_commit();
  }
  if (stages <= kP - 1 && release == kReleaseAfterLastLoad) ptx::allow_dependent_launch();
  ptx::wait_for_prerequisites();
  for (int i = t; i < K / kLanes; i += kT) xs[i / steps * (steps + 1) + i % steps] = xg[i];
  float acc[1][kLanes];
#pragma unroll
  for (int j = 0; j < kLanes; ++j) acc[0][j] = 0.0f;
  const uint4* x_chunk = xs + c * (steps + 1);
  for (int g = 0; g < stages; ++g) {
    ptx::cp_async_wait<kP - 2>();
    __syncthreads();
    if (g + kP - 1 < stages) issue(g + kP - 1);
    if (g + kP - 1 == stages - 1 && release == kReleaseAfterLastLoad) {
      ptx::allow_dependent_launch();  // the last stage is asked for
    }
    ptx::cp_async_commit();
    const uint4* mine = ring + ((g % kP) * kT + t) * (kS + 1);
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int step = g * kS + j;
      if (step < steps) {
        float wf[kLanes], xf[kLanes];
        unpack8(mine[j], wf);
        unpack8(x_chunk[step], xf);
        accumulate(acc[0], xf, wf);
      }
    }
  }
  finish_chunk_tree<1>(acc, c, chunks, n, 0, 1, N, y_bf16, y_f32);
}

// False where the block's shared memory would exceed what the device allows (a K far beyond the
// presets'); the caller then runs the register kernel, whose bits are the same.
template <int kT, int kS, int kP>
bool launch_gemv_staged(const void* x, const void* w, void* y_bf16, float* y_f32, int N, int K,
                        int chunks, cudaStream_t stream) {
  const int steps = K / chunks / kLanes;
  const size_t bytes =
      (static_cast<size_t>(kP) * kT * (kS + 1) + static_cast<size_t>(chunks) * (steps + 1)) *
      sizeof(uint4);
  static const int max_bytes = [] {  // once per process (bih drives one device per process)
    int device = 0;
    int optin = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaCheck(cudaFuncSetAttribute(chunk_tree_gemv_staged_kernel<kT, kS, kP>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return optin;
  }();
  if (bytes > static_cast<size_t>(max_bytes)) return false;
  const int rows = kT / chunks;
  launch_early(chunk_tree_gemv_staged_kernel<kT, kS, kP>, dim3((N + rows - 1) / rows), dim3(kT),
               bytes, stream, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
               static_cast<uint16_t*>(y_bf16), y_f32, N, K, chunks, gemm_release());
  return true;
}

// The staged GEMV's block shapes to measure (threads x steps a stage x stages), each with its
// launcher; the bits are the same for every one.
using StagedLauncher = bool (*)(const void*, const void*, void*, float*, int, int, int,
                                cudaStream_t);
struct StagedShape {
  const char* name;
  StagedLauncher launch;
};
constexpr StagedShape kStagedShapes[] = {{"256x8x3", launch_gemv_staged<256, 8, 3>},
                                         {"256x4x3", launch_gemv_staged<256, 4, 3>},
                                         {"256x8x2", launch_gemv_staged<256, 8, 2>},
                                         {"128x8x3", launch_gemv_staged<128, 8, 3>},
                                         {"128x4x4", launch_gemv_staged<128, 4, 4>}};

// The shape named `name`; std::invalid_argument naming `what` and the valid names otherwise.
const StagedShape& staged_shape(const std::string& name, const std::string& what) {
  for (const StagedShape& shape : kStagedShapes) {
    if (name == shape.name) return shape;
  }
  std::string valid;
  for (const StagedShape& shape : kStagedShapes) {
    valid += (valid.empty() ? "" : ", ") + std::string(shape.name);
  }
  throw std::invalid_argument(what + "=" + name + ": valid values are " + valid);
}

// What serves M = 1 from which N on, read once: BIH_TPINV_STAGED (256x8x3 by default) and
// BIH_TPINV_STAGED_MIN_N (4096 by default).
struct StagedGemv {
  StagedLauncher launch = nullptr;
  int min_n = 4096;
};
const StagedGemv& staged_gemv() {
  static const StagedGemv chosen = [] {
    StagedGemv g;
    const char* shape = std::getenv("BIH_TPINV_STAGED");
    g.launch =
        staged_shape(shape != nullptr ? shape : kStagedShapes[0].name, "BIH_TPINV_STAGED").launch;
    if (const char* v = std::getenv("BIH_TPINV_STAGED_MIN_N")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || n < 1) {
        throw std::invalid_argument(std::string("BIH_TPINV_STAGED_MIN_N=") + v +
                                    ": valid values are whole numbers from 1");
      }
      g.min_n = static_cast<int>(std::min<long>(n, 1 << 30));
    }
    return g;
  }();
  return chosen;
}

template <int kSplit>
void launch_gemv(const void* x, const void* w, void* y_bf16, float* y_f32, int N, int K, int chunks,
                 cudaStream_t stream) {
  const int columns_per_block = kThreads / (kSplit * chunks);
  launch_early(chunk_tree_gemv_kernel<kSplit, 32>,
               dim3((N + columns_per_block - 1) / columns_per_block), dim3(kThreads), 0, stream,
               static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
               static_cast<uint16_t*>(y_bf16), y_f32, N, K, chunks, gemm_release());
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

std::span<const char* const> chunk_tree_staged_shapes() {
  static const auto names = [] {
    std::array<const char*, std::size(kStagedShapes)> out{};
    for (size_t i = 0; i < out.size(); ++i) out[i] = kStagedShapes[i].name;
    return out;
  }();
  return names;
}

bool launch_chunk_tree_gemv_staged(const std::string& shape, const void* x, const void* w,
                                   void* y_bf16, float* y_f32, int N, int K, int chunks,
                                   cudaStream_t stream) {
  return staged_shape(shape, "staged GEMV shape").launch(x, w, y_bf16, y_f32, N, K, chunks, stream);
}

void launch_chunk_tree_gemm(const void* x, const void* w, void* y_bf16, float* y_f32, int M, int N,
                            int K, int chunks, cudaStream_t stream) {
  const bool vector = (K / chunks) % kLanes == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(w) % 16 == 0;
  // M > 8: the shared-memory kernel (gemm_chunk_tree_tiled.cu) where each chunk is whole 64-wide
  // slices, else the register-tiled one.
  if (M > 8 && launch_chunk_tree_smem(x, w, y_bf16, y_f32, M, N, K, chunks, stream)) return;
  if (M > 8 && vector) return launch_tiled<4, 4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  // M = 1, measured on the H200 at qwen3-1.7b's shapes (reports/gpu/tp-invariant-gemv-2026-12-04):
  // from 4096 columns on the staged kernel (qkv 12.5 -> 10.7 us, gate_up 29.5 -> 24.4, lm_head
  // 310 -> 191); narrower outputs have too few chain sets to fill the GPU from shared memory, and
  // the four-threads-per-chain-set register kernel is faster there (o_proj 8.4 us, down 17.7).
  if (M == 1 && vector && N >= staged_gemv().min_n &&
      staged_gemv().launch(x, w, y_bf16, y_f32, N, K, chunks, stream))
    return;
  if (M == 1 && vector) return launch_gemv<4>(x, w, y_bf16, y_f32, N, K, chunks, stream);
  if (M == 1) return launch_tm<1>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  if (M == 2) return launch_tm<2>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  if (M <= 4) return launch_tm<4>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
  launch_tm<8>(x, w, y_bf16, y_f32, M, N, K, chunks, stream);
}

}  // namespace bih::cuda
