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

constexpr int kRowsPerWarp = 8;     // weight rows (output columns) per warp: mma's n
constexpr int kChunk = 64;          // k per pipeline stage: 4 mma steps
constexpr int kPitch = kChunk + 8;  // bf16 per staged row: 144 bytes, so the 8 rows that one
                                    // ldmatrix reads start in 8 different bank quads

__device__ __forceinline__ void mma_bf16_16816(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8 and receives, of each matrix, row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// 16 bytes global -> shared without registers; src_bytes 0 writes zeros (rows past M).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// x: [M, K]; w: [N, K]; y: [M, N], all bf16. grid [N / 8], block [32]: one warp owns weight rows
// n0..n0+7 and every token. K goes through a kStages-deep ring of shared-memory stages of kChunk
// k each, filled by cp.async (a warp keeps up to kStages * 2 KiB of weights in flight without
// holding them in registers) and read into mma fragments by ldmatrix. kTokenRows (8, 16 or 32)
// is the M the instance is built for; only the M real token rows are staged, and the fragments of
// the others read a block of zeros.
template <int kTokenRows, int kStages>
__global__ void __launch_bounds__(32)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  constexpr int kTiles = (kTokenRows + 15) / 16;              // m16 token tiles
  constexpr int kPieces = kChunk / 8;                         // 16-byte pieces per staged row
  constexpr int kWeightPieces = kRowsPerWarp * kPieces / 32;  // per lane per chunk
  extern __shared__ __align__(16) __nv_bfloat16 smem[];
  __nv_bfloat16* w_stage = smem;                                    // [kStages, 8, kPitch]
  __nv_bfloat16* x_stage = smem + kStages * kRowsPerWarp * kPitch;  // [kStages, rows, kPitch]
  __nv_bfloat16* zeros = x_stage + kStages * kTokenRows * kPitch;   // [8]
  const int lane = threadIdx.x;
  const int n0 = blockIdx.x * kRowsPerWarp;
  const int chunks = K / kChunk;
  if (lane == 0) *reinterpret_cast<uint4*>(zeros) = make_uint4(0, 0, 0, 0);

  // This lane's weight pieces: rows lane / kPieces + r * (32 / kPieces), column (lane % kPieces)
  // * 8; their sources advance by kChunk per chunk.
  const int piece_row = lane / kPieces;
  const int piece_col = (lane % kPieces) * 8;
  const __nv_bfloat16* w_src = w + static_cast<size_t>(n0 + piece_row) * K + piece_col;
  const size_t w_src_step = static_cast<size_t>(32 / kPieces) * K;
  const int w_dst = piece_row * kPitch + piece_col;
  constexpr int w_dst_step = (32 / kPieces) * kPitch;
  const int x_pieces = M * kPieces;

  auto stage = [&](int chunk) {
    const int slot = chunk % kStages;
    const size_t k0 = static_cast<size_t>(chunk) * kChunk;
    __nv_bfloat16* w_slot = w_stage + slot * kRowsPerWarp * kPitch + w_dst;
#pragma unroll
    for (int r = 0; r < kWeightPieces; ++r) {
      cp_async_16(w_slot + r * w_dst_step, w_src + r * w_src_step + k0, 16);
    }
    __nv_bfloat16* x_slot = x_stage + slot * kTokenRows * kPitch;
    for (int piece = lane; piece < x_pieces; piece += 32) {
      const int row = piece / kPieces;
      const int col = (piece % kPieces) * 8;
      cp_async_16(x_slot + row * kPitch + col, x + static_cast<size_t>(row) * K + k0 + col, 16);
    }
  };

#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) {
    if (c < chunks) stage(c);
    cp_async_commit();  // empty groups too: the wait count below stays uniform
  }

  float acc[kTiles][4] = {};
  // ldmatrix addressing: lane gives row lane % 8 of matrix lane / 8.
  const int matrix = lane / 8;
  const int row_in_matrix = lane % 8;
  // A rows this lane addresses (per tile) and whether they are real token rows.
  int a_row[kTiles];
  bool a_real[kTiles];
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    a_row[tile] = kTokenRows == 8 ? row_in_matrix : tile * 16 + (matrix % 2) * 8 + row_in_matrix;
    a_real[tile] = a_row[tile] < M;
  }
  for (int c = 0; c < chunks; ++c) {
    cp_async_wait<kStages - 2>();  // chunk c has landed (this lane's pieces)
    __syncwarp();                  // ... and every lane's; slot (c - 1) % kStages is free
    if (c + kStages - 1 < chunks) stage(c + kStages - 1);
    cp_async_commit();
    const int slot = c % kStages;
    const __nv_bfloat16* ws = w_stage + slot * kRowsPerWarp * kPitch;
    const __nv_bfloat16* xs = x_stage + slot * kTokenRows * kPitch;
#pragma unroll
    for (int pair = 0; pair < kChunk / 32; ++pair) {  // two mma steps of k16 per pair
      uint32_t b[4];
      ldmatrix_x4(b, ws + row_in_matrix * kPitch + pair * 32 + matrix * 8);
      uint32_t a[kTiles][2][4];  // [tile][step][register]
      if constexpr (kTokenRows == 8) {
        // Matrices (rows 0-7) at k 0, 8, 16, 24: a0, a2 of both steps; rows 8-15 are zeros.
        uint32_t r[4];
        ldmatrix_x4(r, a_real[0] ? xs + a_row[0] * kPitch + pair * 32 + matrix * 8 : zeros);
        a[0][0][0] = r[0];
        a[0][0][1] = 0u;
        a[0][0][2] = r[1];
        a[0][0][3] = 0u;
        a[0][1][0] = r[2];
        a[0][1][1] = 0u;
        a[0][1][2] = r[3];
        a[0][1][3] = 0u;
      } else {
#pragma unroll
        for (int tile = 0; tile < kTiles; ++tile) {
#pragma unroll
          for (int step = 0; step < 2; ++step) {
            // Matrix j: rows 8 (j % 2) .. +7 of the tile, k 8 (j / 2): a0, a1, a2, a3.
            ldmatrix_x4(a[tile][step], a_real[tile] ? xs + a_row[tile] * kPitch + pair * 32 +
                                                          step * 16 + (matrix / 2) * 8
                                                    : zeros);
          }
        }
      }
#pragma unroll
      for (int step = 0; step < 2; ++step) {
#pragma unroll
        for (int tile = 0; tile < kTiles; ++tile) {
          mma_bf16_16816(acc[tile], a[tile][step], b[2 * step], b[2 * step + 1]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // acc[tile][0..1]: token g + 16 tile, columns n0 + 2t, n0 + 2t + 1; [2..3]: token + 8.
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
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

template <int kTokenRows, int kStages>
void launch(const void* x, const void* w, void* y, int M, int N, int K, cudaStream_t stream) {
  constexpr size_t bytes =
      static_cast<size_t>(kStages) * (kRowsPerWarp + kTokenRows) * kPitch * sizeof(__nv_bfloat16) +
      16;  // the zero block
  static_assert(bytes <= 48 * 1024, "more than the default dynamic shared memory limit");
  auto* kernel = skinny_gemm_kernel<kTokenRows, kStages>;
  kernel<<<N / kRowsPerWarp, 32, bytes, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                  static_cast<const __nv_bfloat16*>(w),
                                                  static_cast<__nv_bfloat16*>(y), M, N, K);
  cudaCheck(cudaGetLastError());
}

}  // namespace

bool skinny_gemm_supports(int M, int N, int K) {
  return M >= 1 && M <= kSkinnyMaxM && N >= kRowsPerWarp && N % kRowsPerWarp == 0 && K >= kChunk &&
         K % kChunk == 0;
}

void launch_skinny_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                        cudaStream_t stream) {
  if (!skinny_gemm_supports(M, N, K)) {
    throw std::invalid_argument(
        "launch_skinny_gemm: needs 1 <= M <= " + std::to_string(kSkinnyMaxM) +
        ", N a multiple of 8 and K a multiple of 128; got M=" + std::to_string(M) +
        " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  if (M <= 8) {
    launch<8, 8>(x, w, y, M, N, K, stream);
  } else if (M <= 16) {
    launch<16, 6>(x, w, y, M, N, K, stream);
  } else {
    launch<32, 4>(x, w, y, M, N, K, stream);
  }
}

}  // namespace bih::cuda
