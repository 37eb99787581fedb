// gemm_skinny.cu: the own tensor-core GEMM for decode-sized M (see gemm_skinny.hpp).
//
// mma.sync m16n8k16 with the tokens as the 16-row A operand and 8 weight rows as the 8-column B
// operand (B[k][n] = w[n][k], so .col B reads each weight row along K as stored). Fragment
// ownership (PTX ISA, m16n8k16 .bf16): lane = 4 * g + t; A registers {row g, k 2t..2t+1},
// {row g+8, same k}, {row g, k 2t+8..2t+9}, {row g+8, same k}; B registers {k 2t..2t+1, n g},
// {k 2t+8..2t+9, n g}; C {row g, n 2t..2t+1}, {row g+8, same n}. Every register holds two bf16
// that are adjacent in memory, so each is one 32-bit load.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_skinny.hpp"

namespace bih::cuda {
namespace {

constexpr int kRowsPerWarp = 8;  // weight rows (output columns) per warp: mma's n

__device__ __forceinline__ void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4],
                                               const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One k16 step's operands for this lane: the weight words and each token tile's words.
template <int kTokenTiles>
struct StepOperands {
  uint32_t b[2];
  uint32_t a[kTokenTiles][4];
};

// x: [M, K/2] words; w: [N, K/2] words; y: [M, N] bf16. grid [N / 8], block [32]: one warp owns
// weight rows n0..n0+7 and every token. kUnroll k16 steps are loaded before any is multiplied,
// so a warp has kUnroll * 256 bytes of weights in flight. kTokenRows (8, 16 or 32) is the M the
// instance is built for: rows past it are constant zeros, rows past M load row 0 (cached, no
// branch) and are zeroed.
template <int kTokenRows, int kUnroll>
__global__ void __launch_bounds__(32)
    skinny_gemm_kernel(const uint32_t* __restrict__ x, const uint32_t* __restrict__ w,
                       __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  constexpr int kTokenTiles = (kTokenRows + 15) / 16;
  constexpr int kLoadedRows = kTokenRows / 8;  // rows g + 8 * r this lane loads
  const int lane = threadIdx.x;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int n0 = blockIdx.x * kRowsPerWarp;
  const size_t words_per_row = static_cast<size_t>(K) / 2;
  const uint32_t* w_row = w + static_cast<size_t>(n0 + g) * words_per_row + t;
  const uint32_t* x_rows[kLoadedRows];
  bool has_row[kLoadedRows];
#pragma unroll
  for (int r = 0; r < kLoadedRows; ++r) {
    const int m = g + 8 * r;
    has_row[r] = m < M;
    x_rows[r] = x + static_cast<size_t>(has_row[r] ? m : 0) * words_per_row + t;
  }
  float acc[kTokenTiles][4] = {};

  auto load = [&](int step, StepOperands<kTokenTiles>& op) {
    const size_t word = static_cast<size_t>(step) * 8;  // 16 bf16 per step
    op.b[0] = __ldg(w_row + word);
    op.b[1] = __ldg(w_row + word + 4);
    // Register 0/2: row g + 16 * tile, k 2t and 2t + 8; register 1/3: that row + 8.
#pragma unroll
    for (int tile = 0; tile < kTokenTiles; ++tile) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 2 * tile + half;
        if (r < kLoadedRows) {
          const uint32_t lo = __ldg(x_rows[r] + word);
          const uint32_t hi = __ldg(x_rows[r] + word + 4);
          op.a[tile][half] = has_row[r] ? lo : 0u;
          op.a[tile][half + 2] = has_row[r] ? hi : 0u;
        } else {
          op.a[tile][half] = 0u;
          op.a[tile][half + 2] = 0u;
        }
      }
    }
  };
  auto multiply = [&](const StepOperands<kTokenTiles>& op) {
#pragma unroll
    for (int tile = 0; tile < kTokenTiles; ++tile) mma_bf16_16816(acc[tile], op.a[tile], op.b);
  };

  const int steps = K / 16;
  int step = 0;
  for (; step + kUnroll <= steps; step += kUnroll) {
    StepOperands<kTokenTiles> ops[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) load(step + u, ops[u]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) multiply(ops[u]);
  }
  // The tail, one step at a time: the same chain, in the same order.
  for (; step < steps; ++step) {
    StepOperands<kTokenTiles> op;
    load(step, op);
    multiply(op);
  }

  // acc[tile][0..1]: token g + 16 * tile, columns n0 + 2t, n0 + 2t + 1; [2..3]: token + 8.
#pragma unroll
  for (int tile = 0; tile < kTokenTiles; ++tile) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = g + 16 * tile + 8 * half;
      if (m >= M) continue;
      const __nv_bfloat162 pair =
          __floats2bfloat162_rn(acc[tile][2 * half], acc[tile][2 * half + 1]);
      *reinterpret_cast<__nv_bfloat162*>(y + static_cast<size_t>(m) * N + n0 + 2 * t) = pair;
    }
  }
}

}  // namespace

bool skinny_gemm_supports(int M, int N, int K) {
  return M >= 1 && M <= kSkinnyMaxM && N >= kRowsPerWarp && N % kRowsPerWarp == 0 && K >= 16 &&
         K % 16 == 0;
}

void launch_skinny_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                        cudaStream_t stream) {
  if (!skinny_gemm_supports(M, N, K)) {
    throw std::invalid_argument(
        "launch_skinny_gemm: needs 1 <= M <= " + std::to_string(kSkinnyMaxM) +
        ", N a multiple of 8 and K a multiple of 16; got M=" + std::to_string(M) +
        " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  const dim3 grid(N / kRowsPerWarp);
  const auto* xw = static_cast<const uint32_t*>(x);
  const auto* ww = static_cast<const uint32_t*>(w);
  auto* yb = static_cast<__nv_bfloat16*>(y);
  if (M <= 8) {
    skinny_gemm_kernel<8, 16><<<grid, 32, 0, stream>>>(xw, ww, yb, M, N, K);
  } else if (M <= 16) {
    skinny_gemm_kernel<16, 16><<<grid, 32, 0, stream>>>(xw, ww, yb, M, N, K);
  } else {
    skinny_gemm_kernel<32, 8><<<grid, 32, 0, stream>>>(xw, ww, yb, M, N, K);
  }
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda
