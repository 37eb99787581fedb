// gemm_skinny_stream.cu: the skinny GEMM's decode instance, M <= 8, at HBM bandwidth.
//
// Same arithmetic as gemm_skinny.cu (one mma.sync m16n8k16 chain per output element over k16
// steps in K order, from zero), different memory plan. At M=1 the ring kernel keeps only ~8 KiB
// in flight per warp, and with N / 8 warps (256 for a 2048-wide output) that is too little to
// cover HBM latency: qwen3-1.7b's o_proj ran at ~1 TB/s. Here each one-warp CTA asks for its whole
// weight slice (8 rows x K) and its M token rows at once: the copy engine's bulk copies
// (cp.async.bulk, one per row and 256-k stage, 512 bytes each) land in shared memory and arrive on
// one mbarrier per stage, while the warp walks the stages in order as they complete. So every
// byte of the weight is in flight from the start, the loop body is two ldmatrix and two mma per
// 32 k, and the chain's latency overlaps the other CTAs' loads.
//
// Shared memory: kMaxStages mbarriers, then 8 weight rows and M token rows of K + 8 bf16 each;
// the 16-byte pad staggers the rows over the bank quads, so one ldmatrix (8 rows at one k) is
// conflict-free. Token rows past M are not staged: their ldmatrix lanes read row M-1, which only
// feeds output rows past M, never stored (rows of an mma are independent).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/ptx.cuh"
#include "models/cuda/shared_limit.hpp"

namespace bih::cuda {
namespace {

constexpr int kRowsPerWarp = 8;  // weight rows (output columns) per CTA: mma's n
constexpr int kStageK = 256;     // k per mbarrier stage: 512 bytes of each row
constexpr int kMaxStages = 32;   // K <= 8192
constexpr int kMaxTokens = 8;
constexpr int kBarrierBytes = kMaxStages * 8;

__host__ __device__ inline size_t row_bytes(int K) {
  return (static_cast<size_t>(K) + 8) * sizeof(__nv_bfloat16);
}

size_t shared_bytes(int M, int K, int tiles) {
  return kBarrierBytes + (kRowsPerWarp * tiles + M) * row_bytes(K);
}

// x: [M, K]; w: [N, K]; y: [M, N], bf16. grid [N / (8 kTiles)], block [32]: the warp owns
// kTiles n8 tiles of weight rows, whose chains are independent and interleave, so one chain's mma
// latency hides behind the others'.
template <int kTiles>
__global__ void __launch_bounds__(32)
    skinny_stream_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                         __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  constexpr int kCols = kRowsPerWarp * kTiles;
  constexpr int kPairs = kStageK / 32;
  extern __shared__ __align__(128) unsigned char smem[];
  const int lane = threadIdx.x;
  const int n0 = blockIdx.x * kCols;
  const int stages = K / kStageK;
  const uint32_t pitch = static_cast<uint32_t>(row_bytes(K));
  const uint32_t barriers = ptx::shared_address(smem);
  const uint32_t w_base = barriers + kBarrierBytes;  // [kCols][pitch]
  const uint32_t x_base = w_base + kCols * pitch;    // [M][pitch]

  // Barrier s completes when every lane's copies of stage s have landed (one arrival per lane).
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) ptx::mbarrier_init(barriers + 8 * s, 32);
  }
  __syncwarp();
  // Stage s of a row is 512 bytes, one 16-byte piece per lane: each cp.async of the warp reads
  // 512 contiguous bytes. Every stage is asked for before any is used.
  const __nv_bfloat16* w_src = w + static_cast<size_t>(n0) * K + lane * 8;
  const __nv_bfloat16* x_src = x + lane * 8;
  const uint32_t w_dst = w_base + lane * 16;
  const uint32_t x_dst = x_base + lane * 16;
  for (int s = 0; s < stages; ++s) {
#pragma unroll
    for (int r = 0; r < kCols; ++r) {
      ptx::cp_async_16<0>(w_dst + r * pitch + s * kStageK * 2,
                          w_src + static_cast<size_t>(r) * K + s * kStageK);
    }
    for (int m = 0; m < M; ++m) {
      ptx::cp_async_16<0>(x_dst + m * pitch + s * kStageK * 2,
                          x_src + static_cast<size_t>(m) * K + s * kStageK);
    }
    ptx::cp_async_arrive(barriers + 8 * s);
  }

  // ldmatrix: lane gives row lane % 8 of matrix lane / 8, the matrices at k 0, 8, 16, 24 of a
  // 32-k pair. B: weight rows (b0, b1 of two k16 steps). A: token rows 0..7 (a0, a2 of two steps;
  // rows 8..15 of the m16 tile are zero).
  const int matrix = lane / 8;
  const int row_in_matrix = lane % 8;
  const uint32_t b_base = w_base + row_in_matrix * pitch + matrix * 16;
  const uint32_t a_base = x_base + min(row_in_matrix, M - 1) * pitch + matrix * 16;

  struct Fragments {
    uint32_t a[4];
    uint32_t b[kTiles][4];
  };
  // The fragments of one 32-k pair; offsets are immediates, the stage's base a register.
  auto load = [&](auto pair_constant, uint32_t offset, Fragments& f) {
    constexpr int kPair = decltype(pair_constant)::value;
    ptx::ldmatrix_x4<kPair * 64>(f.a, a_base + offset);
    ptx::static_for<kTiles>([&](auto tile_constant) {
      constexpr int kTile = decltype(tile_constant)::value;
      ptx::ldmatrix_x4<kPair * 64>(f.b[kTile], b_base + kTile * 8 * pitch + offset);
    });
  };
  float acc[kTiles][4] = {};
  auto multiply = [&](const Fragments& f) {
    const uint32_t a0[4] = {f.a[0], 0u, f.a[1], 0u};
    const uint32_t a1[4] = {f.a[2], 0u, f.a[3], 0u};
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile)
      ptx::mma_bf16_16816(acc[tile], a0, f.b[tile][0], f.b[tile][1]);
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile)
      ptx::mma_bf16_16816(acc[tile], a1, f.b[tile][2], f.b[tile][3]);
  };
  for (int s = 0; s < stages; ++s) {
    ptx::mbarrier_wait(barriers + 8 * s, 0);
    const uint32_t offset = s * kStageK * 2;
    // One pair of look-ahead: pair p + 1's ldmatrix issue before pair p's mma wait on them.
    Fragments f[2];
    load(std::integral_constant<int, 0>{}, offset, f[0]);
    ptx::static_for<kPairs>([&](auto pair_constant) {
      constexpr int kPair = decltype(pair_constant)::value;
      if constexpr (kPair + 1 < kPairs) {
        load(std::integral_constant<int, kPair + 1>{}, offset, f[(kPair + 1) % 2]);
      }
      multiply(f[kPair % 2]);
    });
  }

  // acc[tile][0..1]: token g, columns n0 + 8 tile + 2t, +1 (acc[..][2..3]: the zero rows 8..15).
  const int g = lane >> 2;
  const int t = lane & 3;
  if (g < M) {
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile) {
      *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(g) * N + n0 + 8 * tile + 2 * t) =
          __floats2bfloat162_rn(acc[tile][0], acc[tile][1]);
    }
  }
}

// The tiles per warp for a shape (when the caller does not say): the most, up to 4, that still
// give at least two CTAs per SM of the H200 (132 SMs) and fit in shared memory.
int auto_tiles(int M, int N, int K) {
  for (int tiles : {4, 2}) {
    if (N % (8 * tiles) == 0 && N / (8 * tiles) >= 2 * 132 &&
        shared_bytes(M, K, tiles) <= kMaxDynamicSharedBytes) {
      return tiles;
    }
  }
  return 1;
}

template <int kTiles>
void launch_tiles(const void* x, const void* w, void* y, int M, int N, int K, cudaStream_t stream) {
  auto* kernel = skinny_stream_kernel<kTiles>;
  allow_max_dynamic_shared(reinterpret_cast<const void*>(kernel));
  kernel<<<N / (kRowsPerWarp * kTiles), 32, shared_bytes(M, K, kTiles), stream>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
      static_cast<__nv_bfloat16*>(y), M, N, K);
  cudaCheck(cudaGetLastError());
}

}  // namespace

bool skinny_stream_gemm_supports(int M, int N, int K) {
  return M >= 1 && M <= kMaxTokens && N >= kRowsPerWarp && N % kRowsPerWarp == 0 && K > 0 &&
         K % kStageK == 0 && K / kStageK <= kMaxStages &&
         shared_bytes(M, K, 1) <= kMaxDynamicSharedBytes;
}

void launch_skinny_stream_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                               cudaStream_t stream, int tiles) {
  if (!skinny_stream_gemm_supports(M, N, K)) {
    throw std::invalid_argument(
        "launch_skinny_stream_gemm: needs 1 <= M <= 8, N a multiple of 8, K a multiple of 256 up "
        "to 8192 whose staged rows fit in shared memory; got M=" +
        std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  if (tiles == 0) tiles = auto_tiles(M, N, K);
  if ((tiles != 1 && tiles != 2 && tiles != 4) || N % (8 * tiles) != 0 ||
      shared_bytes(M, K, tiles) > kMaxDynamicSharedBytes) {
    throw std::invalid_argument("launch_skinny_stream_gemm: tiles " + std::to_string(tiles) +
                                " does not fit N=" + std::to_string(N) + " K=" + std::to_string(K) +
                                " (1, 2 or 4 n8 tiles per warp, dividing N, within shared memory)");
  }
  if (tiles == 4) return launch_tiles<4>(x, w, y, M, N, K, stream);
  if (tiles == 2) return launch_tiles<2>(x, w, y, M, N, K, stream);
  launch_tiles<1>(x, w, y, M, N, K, stream);
}

}  // namespace bih::cuda
