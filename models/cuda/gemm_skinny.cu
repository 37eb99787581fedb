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
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/ptx.cuh"

namespace bih::cuda {
namespace {

constexpr int kRowsPerWarp = 8;     // weight rows (output columns) per warp: mma's n
constexpr int kChunk = 64;          // k per pipeline stage: 4 mma steps
constexpr int kPitch = kChunk + 8;  // bf16 per staged row: 144 bytes, so the 8 rows that one
                                    // ldmatrix reads start in 8 different bank quads

using ptx::cp_async_16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::mma_bf16_16816;
using ptx::shared_address;
using ptx::static_for;

// x: [M, K]; w: [N, K]; y: [M, N], all bf16. grid [N / 8], block [32]: one warp owns weight rows
// n0..n0+7 and every token. K goes through a kStages-deep ring of shared-memory stages of kChunk
// k each, filled by cp.async (a warp keeps up to kStages * 2 KiB of weights in flight without
// holding them in registers) and read into mma fragments by ldmatrix. The ring loop is unrolled
// kStages times, so every shared-memory offset is an immediate and a k16 step costs little more
// than its mma: the kernel is bound by how fast one warp issues, there being as few as one warp
// per scheduler at decode sizes. kTokenRows (8, 16 or 32) is the M the instance is built for;
// token rows past M are zeroed once and never staged.
template <int kTokenRows, int kStages>
__global__ void __launch_bounds__(32)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                       __nv_bfloat16* __restrict__ y, int M, int N, int K) {
  constexpr int kTiles = (kTokenRows + 15) / 16;  // m16 token tiles
  constexpr int kPieces = kChunk / 8;             // 16-byte pieces per staged row (16)
  constexpr int kRowsPerRound = 32 / kPieces;     // rows one cp.async round of the warp covers
  constexpr int kWeightRounds = kRowsPerWarp / kRowsPerRound;
  constexpr int kTokenRounds = kTokenRows / kRowsPerRound;
  constexpr int kRowBytes = kPitch * 2;
  constexpr int kWeightSlotBytes = kRowsPerWarp * kRowBytes;
  constexpr int kTokenSlotBytes = kTokenRows * kRowBytes;
  extern __shared__ __align__(16) __nv_bfloat16 smem[];
  __nv_bfloat16* w_stage = smem;                                    // [kStages, 8, kPitch]
  __nv_bfloat16* x_stage = smem + kStages * kRowsPerWarp * kPitch;  // [kStages, rows, kPitch]
  const int lane = threadIdx.x;
  const int n0 = blockIdx.x * kRowsPerWarp;
  const int chunks = K / kChunk;

  // Token rows past M: zero in every slot, once.
  for (int i = lane; i < kStages * kTokenRows * (kPitch / 8); i += 32) {
    const int row = (i / (kPitch / 8)) % kTokenRows;
    if (row >= M) reinterpret_cast<uint4*>(x_stage)[i] = make_uint4(0, 0, 0, 0);
  }

  // This lane's 16-byte pieces: row lane / kPieces (+ kRowsPerRound per round), column
  // (lane % kPieces) * 8; sources advance by kChunk per staged chunk.
  const int piece_row = lane / kPieces;
  const int piece_col = (lane % kPieces) * 8;
  const __nv_bfloat16* w_src[kWeightRounds];
#pragma unroll
  for (int r = 0; r < kWeightRounds; ++r) {
    w_src[r] = w + static_cast<size_t>(n0 + piece_row + r * kRowsPerRound) * K + piece_col;
  }
  const __nv_bfloat16* x_src[kTokenRounds];
  bool x_real[kTokenRounds];
#pragma unroll
  for (int r = 0; r < kTokenRounds; ++r) {
    const int row = piece_row + r * kRowsPerRound;
    x_real[r] = row < M;
    x_src[r] = x + static_cast<size_t>(x_real[r] ? row : 0) * K + piece_col;
  }
  const uint32_t w_dst = shared_address(w_stage + piece_row * kPitch + piece_col);
  const uint32_t x_dst = shared_address(x_stage + piece_row * kPitch + piece_col);

  // Stages the next chunk (in order) into slot kSlot.
  auto stage = [&](auto slot_constant) {
    constexpr int kSlot = decltype(slot_constant)::value;
#pragma unroll
    for (int r = 0; r < kWeightRounds; ++r) {
      cp_async_16<0>(w_dst + kSlot * kWeightSlotBytes + r * kRowsPerRound * kRowBytes, w_src[r]);
      w_src[r] += kChunk;
    }
#pragma unroll
    for (int r = 0; r < kTokenRounds; ++r) {
      if (x_real[r]) {
        cp_async_16<0>(x_dst + kSlot * kTokenSlotBytes + r * kRowsPerRound * kRowBytes, x_src[r]);
      }
      x_src[r] += kChunk;
    }
  };

  // ldmatrix bases: lane gives row lane % 8 of matrix lane / 8.
  const int matrix = lane / 8;
  const int row_in_matrix = lane % 8;
  // B: matrices at k 0, 8, 16, 24 of a 32-k pair: b0, b1 of two mma steps.
  const uint32_t b_base = shared_address(w_stage + row_in_matrix * kPitch + matrix * 8);
  // A: with 8 token rows, matrices at k 0, 8, 16, 24 (a0, a2 of two steps); otherwise per m16
  // tile and step, matrix j covers rows 8 (j % 2) .. +7 at k 8 (j / 2): a0, a1, a2, a3.
  const uint32_t a_base =
      kTokenRows == 8 ? shared_address(x_stage + row_in_matrix * kPitch + matrix * 8)
                      : shared_address(x_stage + ((matrix % 2) * 8 + row_in_matrix) * kPitch +
                                       (matrix / 2) * 8);

  float acc[kTiles][4] = {};
  // One chunk from slot kSlot: kChunk / 32 pairs of k16 steps.
  auto compute = [&](auto slot_constant) {
    constexpr int kSlot = decltype(slot_constant)::value;
    auto pair_steps = [&](auto pair_constant) {
      constexpr int kPair = decltype(pair_constant)::value;
      uint32_t b[4];
      ldmatrix_x4<kSlot * kWeightSlotBytes + kPair * 64>(b, b_base);
      uint32_t a[kTiles][2][4];  // [tile][step][register]
      if constexpr (kTokenRows == 8) {
        uint32_t r[4];
        ldmatrix_x4<kSlot * kTokenSlotBytes + kPair * 64>(r, a_base);
        a[0][0][0] = r[0];
        a[0][0][1] = 0u;
        a[0][0][2] = r[1];
        a[0][0][3] = 0u;
        a[0][1][0] = r[2];
        a[0][1][1] = 0u;
        a[0][1][2] = r[3];
        a[0][1][3] = 0u;
      } else {
        static_for<kTiles>([&](auto tile_constant) {
          constexpr int kTile = decltype(tile_constant)::value;
          ldmatrix_x4<kSlot * kTokenSlotBytes + kTile * 16 * kRowBytes + kPair * 64>(a[kTile][0],
                                                                                     a_base);
          ldmatrix_x4<kSlot * kTokenSlotBytes + kTile * 16 * kRowBytes + kPair * 64 + 32>(
              a[kTile][1], a_base);
        });
      }
#pragma unroll
      for (int step = 0; step < 2; ++step) {
#pragma unroll
        for (int tile = 0; tile < kTiles; ++tile) {
          mma_bf16_16816(acc[tile], a[tile][step], b[2 * step], b[2 * step + 1]);
        }
      }
    };
    static_for<kChunk / 32>(pair_steps);
  };

  // Prologue: chunks 0 .. kStages-2 into slots 0 .. kStages-2 (empty groups past the end keep
  // the wait count uniform).
  static_for<kStages - 1>([&](auto slot_constant) {
    constexpr int kSlot = decltype(slot_constant)::value;
    if (kSlot < chunks) stage(slot_constant);
    cp_async_commit();
  });
  for (int base = 0; base < chunks; base += kStages) {
    bool done = false;
    static_for<kStages>([&](auto slot_constant) {
      constexpr int kSlot = decltype(slot_constant)::value;
      const int c = base + kSlot;
      if (done || c >= chunks) {
        done = true;
        return;
      }
      cp_async_wait<kStages - 2>();  // chunk c has landed (this lane's pieces)
      __syncwarp();                  // ... and every lane's; slot (c - 1) % kStages is free
      if (c + kStages - 1 < chunks) {
        stage(std::integral_constant<int, (kSlot + kStages - 1) % kStages>{});
      }
      cp_async_commit();
      compute(slot_constant);
    });
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
      0;
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

void launch_skinny_registers(const void* x, const void* w, void* y, int M, int N, int K,
                             cudaStream_t stream) {
  if (!skinny_gemm_supports(M, N, K)) {
    throw std::invalid_argument(
        "skinny GEMM: needs 1 <= M <= " + std::to_string(kSkinnyMaxM) +
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

bool skinny_stream_instance_on() {
  // BIH_GEMM_SKINNY_STREAM=0 (a diagnostic, reports/gpu/skinny-race-2026-12-06): the register
  // instance serves every M.
  static const bool on = [] {
    const char* v = std::getenv("BIH_GEMM_SKINNY_STREAM");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

void launch_skinny_gemm(const void* x, const void* w, void* y, int M, int N, int K,
                        cudaStream_t stream) {
  if (skinny_stream_instance_on() && skinny_gemm_supports(M, N, K) &&
      skinny_stream_supports(M, N, K, x, w)) {
    if (skinny_verify_on()) {
      launch_skinny_stream_verified(x, w, y, M, N, K, stream);
    } else {
      launch_skinny_stream(x, w, y, M, N, K, stream);
    }
    return;
  }
  launch_skinny_registers(x, w, y, M, N, K, stream);
}

}  // namespace bih::cuda
