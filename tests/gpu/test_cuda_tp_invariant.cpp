// Tests of kernels tp_invariant on CUDA (models/cuda/gemm_chunk_tree.hpp, the tree collectives of
// the GPU communicators, and the CUDA engine with that family).
//
// - The GEMM is bit for bit the CPU family (models/cpu/gemm.cpp) on every GEMM shape of qwen3-1.7b
//   at M = 1, 7, 64 and 513, and every row of a batch is bitwise the row computed alone.
// - Wide M = 1 outputs (the staged GEMV) at chunk lengths below, across and beyond one stage,
//   with every block shape BIH_TPINV_STAGED may choose.
// - M > 8 on the shared-memory tiles: both tile heights, partial tiles, one- and three-slice
// chunks,
//   and its fused multiply-add only where the operands are in band (an out-of-band tie otherwise).
// - A row-parallel rank's fp32 partial is bitwise the CPU's subtree at TP 2, 4 and 8, and the
//   emulated GPU group's tree collectives are bitwise the host's tree_f32_sum.
// - The engine (tiny model, emulated ranks on one GPU) at TP 1, 2, 4 and 8, with SP, graphs, the
//   prefix cache and chunked prefill, generates bitwise the tokens and logprobs of TP=1 eager,
//   alone and in a batch, and so does qwen3-1.7b at TP 2, 4 and 8; the invariant family at TP=4
//   does not (so the comparison can fail).
// Every test skips without a GPU (fails under BIH_REQUIRE_GPU=1).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../cpu/test_util.hpp"
#include "engines/bih_engine.hpp"
#include "engines/cuda/bih_cuda_engine.hpp"
#include "gpu_test_util.hpp"
#include "models/bf16.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/cpu/kernels.hpp"
#include "models/cuda/emulated_gpu.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/gemm_chunk_tree.hpp"
#include "models/engine.hpp"
#include "models/tree_sum.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"

namespace bih {
namespace {

using test::DeviceBuffer;
using testing::random_bf16;

// Rows n of w[N, K] (the CPU's reference is computed for these columns only: each output's bits
// depend on its own row of w, so a sample of columns checks the kernel on that column).
std::vector<int> sample_columns(int N) {
  std::vector<int> cols;
  for (int n = 0; n < std::min(N, 8); ++n) cols.push_back(n);
  for (int i = 0; i < 40; ++i) cols.push_back(static_cast<int>((1103515245ull * (i + 7)) % N));
  for (int n = std::max(0, N - 8); n < N; ++n) cols.push_back(n);
  return cols;
}

std::vector<bf16> rows_of(const std::vector<bf16>& w, int K, const std::vector<int>& rows) {
  std::vector<bf16> out(rows.size() * static_cast<size_t>(K));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(out.data() + i * K, w.data() + static_cast<size_t>(rows[i]) * K, K * sizeof(bf16));
  }
  return out;
}

std::string hex(uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", bits);
  return text;
}

struct Shape {
  const char* name;
  int N;
  int K;
};

// qwen3-1.7b at TP=1: hidden 2048, 16 q heads and 8 kv heads of 128, intermediate 6144.
const Shape kQwen3Shapes[] = {{"qkv", 4096, 2048},
                              {"o_proj", 2048, 2048},
                              {"gate_up", 12288, 2048},
                              {"down", 2048, 6144},
                              {"lm_head", 151936, 2048}};

TEST(CudaTpInvariantGemm, EqualsTheCpuFamilyOnEveryQwen3ShapeAtEveryM) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  for (const Shape& shape : kQwen3Shapes) {
    const std::vector<bf16> w =
        random_bf16(static_cast<size_t>(shape.N) * shape.K, static_cast<uint32_t>(shape.N));
    const DeviceBuffer<bf16> w_dev(w);
    const std::vector<int> cols = sample_columns(shape.N);
    const std::vector<bf16> w_cols = rows_of(w, shape.K, cols);
    const std::vector<bf16> x =
        random_bf16(static_cast<size_t>(513) * shape.K, static_cast<uint32_t>(shape.K + 1));
    const DeviceBuffer<bf16> x_dev(x);
    // Row 0 alone: every batch's row 0 must carry its bits on every column.
    DeviceBuffer<bf16> alone_dev(shape.N);
    gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), alone_dev.get(), 1, shape.N,
              shape.K, nullptr);
    const std::vector<bf16> alone = alone_dev.download(0, shape.N);
    for (int M : {1, 7, 64, 513}) {
      DeviceBuffer<bf16> y_dev(static_cast<size_t>(M) * shape.N);
      gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), y_dev.get(), M, shape.N,
                shape.K, nullptr);
      const std::vector<bf16> y = y_dev.download(0, y_dev.size());
      std::vector<bf16> want(static_cast<size_t>(M) * cols.size());
      cpu::gemm(KernelFamily::tp_invariant, x.data(), w_cols.data(), want.data(), M,
                static_cast<int>(cols.size()), shape.K);
      int differ = 0;
      std::string first;
      for (int m = 0; m < M; ++m) {
        for (size_t i = 0; i < cols.size(); ++i) {
          const uint16_t got = y[static_cast<size_t>(m) * shape.N + cols[i]].bits;
          const uint16_t cpu = want[static_cast<size_t>(m) * cols.size() + i].bits;
          if (got != cpu && differ++ == 0) {
            first = "row " + std::to_string(m) + " col " + std::to_string(cols[i]) + ": gpu " +
                    hex(got) + " cpu " + hex(cpu);
          }
        }
      }
      EXPECT_EQ(differ, 0) << shape.name << " M=" << M << ": " << differ << " of "
                           << M * cols.size() << " sampled outputs differ from the CPU; first "
                           << first;
      int row0_differ = 0;
      for (int n = 0; n < shape.N; ++n) row0_differ += y[n].bits != alone[n].bits;
      EXPECT_EQ(row0_differ, 0) << shape.name << " M=" << M << ": row 0 differs from M=1 in "
                                << row0_differ << " of " << shape.N << " columns";
    }
  }
}

// Small shapes, every M from 1 to 17: chunk lengths that are not a multiple of 8 (the scalar
// path and the lane tail), a column count that leaves a block part empty, and the partials. Small
// enough for compute-sanitizer (ci/device-check.sh, stage sanitize).
TEST(CudaTpInvariantGemm, SmallAndUnalignedShapesEqualTheCpuAtEveryM) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  const Shape shapes[] = {{"chunk 3", 37, 24}, {"chunk 8", 130, 64}, {"chunk 13", 19, 104}};
  for (const Shape& shape : shapes) {
    const std::vector<bf16> w = random_bf16(static_cast<size_t>(shape.N) * shape.K, 5);
    const DeviceBuffer<bf16> w_dev(w);
    for (int M = 1; M <= 17; ++M) {
      const std::vector<bf16> x = random_bf16(static_cast<size_t>(M) * shape.K, 6 + M);
      const DeviceBuffer<bf16> x_dev(x);
      DeviceBuffer<bf16> y_dev(static_cast<size_t>(M) * shape.N);
      gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), y_dev.get(), M, shape.N,
                shape.K, nullptr);
      std::vector<bf16> want(static_cast<size_t>(M) * shape.N);
      cpu::gemm(KernelFamily::tp_invariant, x.data(), w.data(), want.data(), M, shape.N, shape.K);
      const std::vector<bf16> got = y_dev.download(0, y_dev.size());
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
      EXPECT_EQ(differ, 0) << shape.name << " M=" << M;
      for (int chunks : {1, 2, 4}) {  // a rank of TP=8/chunks holding the first K/(8/chunks)
        const int K_local = shape.K * chunks / kTpInvariantChunks;
        DeviceBuffer<float> p_dev(static_cast<size_t>(M) * shape.N);
        // Strided slices are not what the engine passes; a dense rank-local copy is.
        std::vector<bf16> x_local(static_cast<size_t>(M) * K_local);
        std::vector<bf16> w_local(static_cast<size_t>(shape.N) * K_local);
        for (int m = 0; m < M; ++m) {
          std::memcpy(x_local.data() + static_cast<size_t>(m) * K_local,
                      x.data() + static_cast<size_t>(m) * shape.K, K_local * sizeof(bf16));
        }
        for (int n = 0; n < shape.N; ++n) {
          std::memcpy(w_local.data() + static_cast<size_t>(n) * K_local,
                      w.data() + static_cast<size_t>(n) * shape.K, K_local * sizeof(bf16));
        }
        const DeviceBuffer<bf16> xl_dev(x_local), wl_dev(w_local);
        gemm.gemm_tp_invariant_partial(xl_dev.get(), wl_dev.get(), p_dev.get(), M, shape.N, K_local,
                                       chunks, nullptr);
        std::vector<float> want32(static_cast<size_t>(M) * shape.N);
        cpu::gemm_tp_invariant_partial(x_local.data(), w_local.data(), want32.data(), M, shape.N,
                                       K_local, chunks);
        const std::vector<float> got32 = p_dev.download(0, p_dev.size());
        int differ32 = 0;
        for (size_t i = 0; i < got32.size(); ++i) {
          differ32 += std::bit_cast<uint32_t>(got32[i]) != std::bit_cast<uint32_t>(want32[i]);
        }
        EXPECT_EQ(differ32, 0) << shape.name << " M=" << M << " partial of " << chunks << " chunks";
      }
    }
  }
}

// M = 1 from 4096 columns on runs the staged GEMV (gemm_chunk_tree.cu): a column count that
// leaves the last block part empty, chunk lengths of 3, 13 and 40 steps of 8 (less than one
// stage of 8 steps, a partial last stage, several stages), bf16 outputs and every rank's fp32
// partial (1, 2 and 4 chunks), each bitwise the CPU on every column. Small enough for
// compute-sanitizer (SANITIZE_FILTER=CudaTpInvariantGemm.Staged*).
TEST(CudaTpInvariantGemm, StagedGemvEqualsTheCpuOnWideOutputs) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  const int N = 4096 + 13;
  for (int steps : {3, 13, 40}) {
    const int K = kTpInvariantChunks * 8 * steps;
    const std::vector<bf16> w = random_bf16(static_cast<size_t>(N) * K, 21 + steps);
    const std::vector<bf16> x = random_bf16(K, 22 + steps);
    const DeviceBuffer<bf16> w_dev(w), x_dev(x);
    DeviceBuffer<bf16> y_dev(N);
    gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), y_dev.get(), 1, N, K, nullptr);
    std::vector<bf16> want(N);
    cpu::gemm(KernelFamily::tp_invariant, x.data(), w.data(), want.data(), 1, N, K);
    const std::vector<bf16> got = y_dev.download(0, N);
    int differ = 0;
    std::string first;
    for (int n = 0; n < N; ++n) {
      if (got[n].bits != want[n].bits && differ++ == 0) {
        first =
            "col " + std::to_string(n) + ": gpu " + hex(got[n].bits) + " cpu " + hex(want[n].bits);
      }
    }
    EXPECT_EQ(differ, 0) << "K=" << K << ": " << differ << " of " << N << " differ; first "
                         << first;
    // Every block shape BIH_TPINV_STAGED may choose: the same bits.
    for (const char* shape : cuda::chunk_tree_staged_shapes()) {
      DeviceBuffer<bf16> y_shape(N);
      ASSERT_TRUE(cuda::launch_chunk_tree_gemv_staged(shape, x_dev.get(), w_dev.get(),
                                                      y_shape.get(), nullptr, N, K,
                                                      kTpInvariantChunks, nullptr))
          << shape;
      const std::vector<bf16> got_shape = y_shape.download(0, N);
      int differ_shape = 0;
      for (int n = 0; n < N; ++n) differ_shape += got_shape[n].bits != want[n].bits;
      EXPECT_EQ(differ_shape, 0) << "staged shape " << shape << ", K=" << K;
    }
    EXPECT_THROW(
        cuda::launch_chunk_tree_gemv_staged("64x1x1", x_dev.get(), w_dev.get(), y_dev.get(),
                                            nullptr, N, K, kTpInvariantChunks, nullptr),
        std::invalid_argument);
    for (int chunks : {1, 2, 4}) {  // a rank's dense copy of the first K * chunks / 8 columns
      const int K_local = K * chunks / kTpInvariantChunks;
      std::vector<bf16> w_local(static_cast<size_t>(N) * K_local);
      for (int n = 0; n < N; ++n) {
        std::memcpy(w_local.data() + static_cast<size_t>(n) * K_local,
                    w.data() + static_cast<size_t>(n) * K, K_local * sizeof(bf16));
      }
      const DeviceBuffer<bf16> wl_dev(w_local);
      DeviceBuffer<float> p_dev(N);
      gemm.gemm_tp_invariant_partial(x_dev.get(), wl_dev.get(), p_dev.get(), 1, N, K_local, chunks,
                                     nullptr);
      std::vector<float> want32(N);
      cpu::gemm_tp_invariant_partial(x.data(), w_local.data(), want32.data(), 1, N, K_local,
                                     chunks);
      const std::vector<float> got32 = p_dev.download(0, N);
      int differ32 = 0;
      for (int n = 0; n < N; ++n) {
        differ32 += std::bit_cast<uint32_t>(got32[n]) != std::bit_cast<uint32_t>(want32[n]);
      }
      EXPECT_EQ(differ32, 0) << "K=" << K_local << " partial of " << chunks << " chunks";
    }
  }
}

// M > 8 with chunks of whole 64-wide K slices runs the shared-memory kernel
// (gemm_chunk_tree_tiled.cu): chunks of one and of three slices, a last column tile of 16 of its
// 64 columns, M that leaves the last row tile part empty, both tile heights (32-row tiles from two
// blocks per multiprocessor on: M=513 here on a 132-SM H100 or H200, 16-row tiles below), bf16
// outputs and every rank's fp32 partial (1, 2 and 4 chunks), each bitwise the CPU on every output.
// Small enough for compute-sanitizer (SANITIZE_FILTER=CudaTpInvariantGemm.SharedMemory*).
TEST(CudaTpInvariantGemm, SharedMemoryTilesEqualTheCpuOnEveryOutput) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  const int N = 16 * 64 + 16;
  for (int slices : {1, 3}) {
    const int K = kTpInvariantChunks * 64 * slices;
    const std::vector<bf16> w = random_bf16(static_cast<size_t>(N) * K, 31 + slices);
    const DeviceBuffer<bf16> w_dev(w);
    for (int M : {9, 33, 100, 513}) {
      const std::vector<bf16> x = random_bf16(static_cast<size_t>(M) * K, 40 + M + slices);
      const DeviceBuffer<bf16> x_dev(x);
      DeviceBuffer<bf16> y_dev(static_cast<size_t>(M) * N);
      gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), y_dev.get(), M, N, K,
                nullptr);
      std::vector<bf16> want(static_cast<size_t>(M) * N);
      cpu::gemm(KernelFamily::tp_invariant, x.data(), w.data(), want.data(), M, N, K);
      const std::vector<bf16> got = y_dev.download(0, y_dev.size());
      int differ = 0;
      std::string first;
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i].bits != want[i].bits && differ++ == 0) {
          first = "row " + std::to_string(i / N) + " col " + std::to_string(i % N) + ": gpu " +
                  hex(got[i].bits) + " cpu " + hex(want[i].bits);
        }
      }
      EXPECT_EQ(differ, 0) << "K=" << K << " M=" << M << ": " << differ << " of " << got.size()
                           << " differ; first " << first;
      if (M != 33 && M != 513) continue;
      for (int chunks : {1, 2, 4}) {  // a rank's dense copy of the first K * chunks / 8 columns
        const int K_local = K * chunks / kTpInvariantChunks;
        std::vector<bf16> x_local(static_cast<size_t>(M) * K_local);
        std::vector<bf16> w_local(static_cast<size_t>(N) * K_local);
        for (int m = 0; m < M; ++m) {
          std::memcpy(x_local.data() + static_cast<size_t>(m) * K_local,
                      x.data() + static_cast<size_t>(m) * K, K_local * sizeof(bf16));
        }
        for (int n = 0; n < N; ++n) {
          std::memcpy(w_local.data() + static_cast<size_t>(n) * K_local,
                      w.data() + static_cast<size_t>(n) * K, K_local * sizeof(bf16));
        }
        const DeviceBuffer<bf16> xl_dev(x_local), wl_dev(w_local);
        DeviceBuffer<float> p_dev(static_cast<size_t>(M) * N);
        gemm.gemm_tp_invariant_partial(xl_dev.get(), wl_dev.get(), p_dev.get(), M, N, K_local,
                                       chunks, nullptr);
        std::vector<float> want32(static_cast<size_t>(M) * N);
        cpu::gemm_tp_invariant_partial(x_local.data(), w_local.data(), want32.data(), M, N, K_local,
                                       chunks);
        const std::vector<float> got32 = p_dev.download(0, p_dev.size());
        int differ32 = 0;
        for (size_t i = 0; i < got32.size(); ++i) {
          differ32 += std::bit_cast<uint32_t>(got32[i]) != std::bit_cast<uint32_t>(want32[i]);
        }
        EXPECT_EQ(differ32, 0) << "K=" << K_local << " M=" << M << " partial of " << chunks
                               << " chunks";
      }
    }
  }
}

// The shared-memory kernel adds a slice with one fma per product only where every operand the
// block staged for it is in band (models/exact_product.hpp). Row 0, column 5 is crafted so that
// the fused form would move its fp32 bits: lane 0 of its chain holds 2^-125 (2^-63 * 2^-62, in
// band) when the out-of-band pair (1 + 2^-7) 2^-75 * 2^-74 arrives in slice 2, whose product
// rounds to a tie of the sum (tests/cpu/test_exact_product.cpp, OutOfBandOperandsCanBreak...).
// Only blocks of row 0's tile stage that x value, and only in slice 2: every other slice and tile
// takes the fused form. The other rows are random. Every output, fp32 partial and bf16, equals
// the CPU, through both tile heights the launcher picks: 32-row tiles where they make two blocks
// per multiprocessor (257 column tiles, the last of 16 columns, by 2 row tiles), 16-row tiles
// where they do not (9 column tiles by 3 row tiles).
TEST(CudaTpInvariantGemm, OutOfBandOperandsTakeTheRoundedMultiplyAndAdd) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  int device = 0, multiprocessors = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device),
            cudaSuccess);
  ASSERT_GE(257 * 2, 2 * multiprocessors) << "too few blocks for the 32-row tiles on this GPU";
  ASSERT_LT(9 * 2, 2 * multiprocessors) << "too many blocks for the 16-row tiles on this GPU";
  const int K = kTpInvariantChunks * 64, M = 40;
  for (const int N : {256 * 64 + 16, 8 * 64 + 16}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    std::vector<bf16> w = random_bf16(static_cast<size_t>(N) * K, 51);
    std::vector<bf16> x = random_bf16(static_cast<size_t>(M) * K, 52);
    const auto set = [](std::vector<bf16>& v, size_t at, uint16_t bits) { v[at].bits = bits; };
    const int column = 5;
    const int crafted = 2 * 64;                     // slice 2, lane 0
    for (int k = 0; k < K; ++k) set(x, k, 0x0000);  // row 0 is zero but for lane 0 of slice 2
    set(x, crafted, 0x2000);                        // 2^-63
    set(w, static_cast<size_t>(column) * K + crafted, 0x2080);               // 2^-62
    set(x, crafted + 8, static_cast<uint16_t>(((127 - 75) << 7) | 1));       // (1 + 2^-7) 2^-75
    set(w, static_cast<size_t>(column) * K + crafted + 8, (127 - 74) << 7);  // 2^-74
    const DeviceBuffer<bf16> x_dev(x), w_dev(w);
    DeviceBuffer<float> p_dev(static_cast<size_t>(M) * N);
    gemm.gemm_tp_invariant_partial(x_dev.get(), w_dev.get(), p_dev.get(), M, N, K, 1, nullptr);
    std::vector<float> want32(static_cast<size_t>(M) * N);
    cpu::gemm_tp_invariant_partial(x.data(), w.data(), want32.data(), M, N, K, 1);
    ASSERT_EQ(std::bit_cast<uint32_t>(want32[column]),
              std::bit_cast<uint32_t>(std::ldexp(1.0f, -125)))
        << "the crafted chain is not the tie this test needs";
    const std::vector<float> got32 = p_dev.download(0, p_dev.size());
    int differ32 = 0;
    for (size_t i = 0; i < got32.size(); ++i) {
      differ32 += std::bit_cast<uint32_t>(got32[i]) != std::bit_cast<uint32_t>(want32[i]);
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got32[column]), std::bit_cast<uint32_t>(want32[column]))
        << "row 0 column 5: gpu " << hex(std::bit_cast<uint32_t>(got32[column])) << " cpu "
        << hex(std::bit_cast<uint32_t>(want32[column]));
    EXPECT_EQ(differ32, 0) << "of " << got32.size() << " fp32 partials";
    DeviceBuffer<bf16> y_dev(static_cast<size_t>(M) * N);
    gemm.gemm(KernelFamily::tp_invariant, x_dev.get(), w_dev.get(), y_dev.get(), M, N, K, nullptr);
    std::vector<bf16> want(static_cast<size_t>(M) * N);
    cpu::gemm(KernelFamily::tp_invariant, x.data(), w.data(), want.data(), M, N, K);
    const std::vector<bf16> got = y_dev.download(0, y_dev.size());
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
    EXPECT_EQ(differ, 0) << "of " << got.size() << " bf16 outputs";
  }
}

TEST(CudaTpInvariantGemm, RowParallelPartialsAreTheCpuSubtreesAtEveryTp) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  const int N = 2048, K = 6144, M = 7;  // qwen3-1.7b's down projection
  const std::vector<bf16> w = random_bf16(static_cast<size_t>(N) * K, 11);
  const std::vector<bf16> x = random_bf16(static_cast<size_t>(M) * K, 12);
  const std::vector<int> cols = sample_columns(N);
  for (int tp : {2, 4, 8}) {
    const int K_local = K / tp;
    for (int rank : {0, tp - 1}) {
      // Rank `rank` holds columns [rank*K_local, (rank+1)*K_local) of x and of every w row.
      std::vector<bf16> x_local(static_cast<size_t>(M) * K_local);
      std::vector<bf16> w_local(static_cast<size_t>(N) * K_local);
      for (int m = 0; m < M; ++m) {
        std::memcpy(x_local.data() + static_cast<size_t>(m) * K_local,
                    x.data() + static_cast<size_t>(m) * K + rank * K_local, K_local * sizeof(bf16));
      }
      for (int n = 0; n < N; ++n) {
        std::memcpy(w_local.data() + static_cast<size_t>(n) * K_local,
                    w.data() + static_cast<size_t>(n) * K + rank * K_local, K_local * sizeof(bf16));
      }
      const DeviceBuffer<bf16> x_dev(x_local), w_dev(w_local);
      DeviceBuffer<float> y_dev(static_cast<size_t>(M) * N);
      gemm.gemm_tp_invariant_partial(x_dev.get(), w_dev.get(), y_dev.get(), M, N, K_local,
                                     kTpInvariantChunks / tp, nullptr);
      const std::vector<float> y = y_dev.download(0, y_dev.size());
      const std::vector<bf16> w_cols = rows_of(w_local, K_local, cols);
      std::vector<float> want(static_cast<size_t>(M) * cols.size());
      cpu::gemm_tp_invariant_partial(x_local.data(), w_cols.data(), want.data(), M,
                                     static_cast<int>(cols.size()), K_local,
                                     kTpInvariantChunks / tp);
      int differ = 0;
      for (int m = 0; m < M; ++m) {
        for (size_t i = 0; i < cols.size(); ++i) {
          differ += std::bit_cast<uint32_t>(y[static_cast<size_t>(m) * N + cols[i]]) !=
                    std::bit_cast<uint32_t>(want[static_cast<size_t>(m) * cols.size() + i]);
        }
      }
      EXPECT_EQ(differ, 0) << "tp=" << tp << " rank " << rank;
    }
  }
}

TEST(CudaTpInvariantGemm, AKThatDoesNotSplitIntoTheChunksIsRefused) {
  BIH_SKIP_WITHOUT_GPU();
  cuda::CudaGemm gemm;
  DeviceBuffer<bf16> x(100), w(100), y(10);
  DeviceBuffer<float> y32(10);
  EXPECT_THROW(gemm.gemm(KernelFamily::tp_invariant, x.get(), w.get(), y.get(), 1, 10, 10, nullptr),
               std::invalid_argument);
  EXPECT_THROW(gemm.gemm_tp_invariant_partial(x.get(), w.get(), y32.get(), 1, 10, 8, 3, nullptr),
               std::invalid_argument);
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  const std::vector<bf16> a = random_bf16(n, seed), b = random_bf16(n, seed + 1);
  std::vector<float> out(n);
  // Products of two bf16 values carry up to 16 significant bits: a bf16 rounding would show.
  for (size_t i = 0; i < n; ++i) out[i] = to_float(a[i]) * to_float(b[i]);
  return out;
}

TEST(CudaTpInvariantCollective, EmulatedGpuTreeCollectivesAreTheHostTree) {
  BIH_SKIP_WITHOUT_GPU();
  const size_t count = 3000;
  for (int n : {1, 2, 4, 8}) {
    cuda::EmulatedGpuGroup group(
        n, CollectiveOrders{ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring});
    std::vector<std::vector<float>> host(n);
    std::vector<std::unique_ptr<DeviceBuffer<float>>> in;
    std::vector<std::unique_ptr<DeviceBuffer<bf16>>> reduced, scattered;
    for (int r = 0; r < n; ++r) {
      host[r] = random_floats(count * n, 100 + r);
      in.push_back(std::make_unique<DeviceBuffer<float>>(host[r]));
      reduced.push_back(std::make_unique<DeviceBuffer<bf16>>(count * n));
      scattered.push_back(std::make_unique<DeviceBuffer<bf16>>(count));
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        cuda::EmulatedGpuRank& rank = group.rank(r);
        rank.all_reduce_tree_f32(in[r]->get(), reduced[r]->get(), count * n);
        rank.reduce_scatter_tree_f32(in[r]->get(), scattered[r]->get(), count);
        rank.synchronize();
      });
    }
    for (auto& t : threads) t.join();
    std::vector<const float*> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(host[r].data());
    std::vector<bf16> want(count * n);
    tree_f32_sum(inputs, 0, count * n, want.data());
    for (int r = 0; r < n; ++r) {
      const std::vector<bf16> got = reduced[r]->download(0, count * n);
      const std::vector<bf16> got_block = scattered[r]->download(0, count);
      int differ = 0, block_differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
      for (size_t i = 0; i < count; ++i) {
        block_differ += got_block[i].bits != want[static_cast<size_t>(r) * count + i].bits;
      }
      EXPECT_EQ(differ, 0) << "all_reduce_tree_f32, " << n << " ranks, rank " << r;
      EXPECT_EQ(block_differ, 0) << "reduce_scatter_tree_f32, " << n << " ranks, rank " << r;
    }
  }
}

// ---- the engine -------------------------------------------------------------------------------

void register_cuda_backend_once() {
  static const bool registered = (cuda::register_cuda_backend(), true);
  (void)registered;
}

Scenario tp_invariant_scenario(int tp, const std::string& preset = "tiny") {
  Scenario s;
  s.model.preset = preset;
  s.backend = Backend::cuda;
  s.tp = tp;
  s.kernels = KernelFamily::tp_invariant;
  s.all_reduce = ReduceOrder::fixed;
  s.reduce_scatter = ReduceOrder::fixed;
  s.plan.max_model_len = 128;
  s.plan.max_num_seqs = 16;
  return s;
}

struct Generations {
  std::vector<SequenceResult> batch;
  std::vector<SequenceResult> alone;
};

Generations generate(const Scenario& s, int count = 8, int max_tokens = 6) {
  register_cuda_backend_once();
  EngineBundle b = make_engine(s);
  PromptSpec spec;
  spec.count = count;
  spec.min_len = 5;
  spec.max_len = 40;
  spec.seed = 21;
  const auto prompts = make_prompts(spec, 2048, "");
  Generations g;
  g.batch = b.engine->generate(prompts, max_tokens);
  if (s.prefix_caching) g.batch = b.engine->generate(prompts, max_tokens);  // the second run hits
  for (const auto& p : prompts) g.alone.push_back(b.engine->generate({p}, max_tokens)[0]);
  return g;
}

int differing_steps(const std::vector<SequenceResult>& got,
                    const std::vector<SequenceResult>& want) {
  int differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    for (size_t t = 0; t < want[i].tokens.size(); ++t) {
      differ += t >= got[i].tokens.size() || got[i].tokens[t] != want[i].tokens[t] ||
                std::bit_cast<uint32_t>(got[i].logprobs[t]) !=
                    std::bit_cast<uint32_t>(want[i].logprobs[t]);
    }
  }
  return differ;
}

TEST(CudaTpInvariantEngine, EveryTpSpGraphCacheAndChunkSettingGivesTp1EagerBits) {
  BIH_SKIP_WITHOUT_GPU();
  const Generations reference = generate(tp_invariant_scenario(1));
  EXPECT_EQ(differing_steps(reference.alone, reference.batch), 0) << "tp=1: bs=1 vs batch";
  struct Variant {
    std::string name;
    Scenario s;
  };
  std::vector<Variant> variants;
  for (int tp : {1, 2, 4, 8}) {
    for (bool sp : {false, true}) {
      if (tp == 1 && sp) continue;
      for (GraphMode mode : {GraphMode::none, GraphMode::piecewise, GraphMode::full}) {
        Scenario s = tp_invariant_scenario(tp);
        s.sp_enabled = sp;
        s.graph_mode = mode;
        variants.push_back(
            {"tp=" + std::to_string(tp) + (sp ? " sp=on" : " sp=off") + " graph=" + to_string(mode),
             s});
      }
    }
  }
  Scenario prefix = tp_invariant_scenario(2);
  prefix.prefix_caching = true;
  variants.push_back({"tp=2 prefix=on", prefix});
  Scenario chunked = tp_invariant_scenario(4);
  chunked.sp_enabled = true;
  chunked.chunked_prefill_max_tokens = 7;
  variants.push_back({"tp=4 sp=on chunk=7", chunked});
  for (const Variant& v : variants) {
    const Generations g = generate(v.s);
    EXPECT_EQ(differing_steps(g.batch, reference.batch), 0) << v.name << ", batch vs tp=1 eager";
    EXPECT_EQ(differing_steps(g.alone, reference.batch), 0) << v.name << ", bs=1 vs tp=1 eager";
  }
}

// At the real scale: qwen3-1.7b (synthetic weights from seed 0), every rank emulated on one GPU,
// TP 2, 4 and 8 (SP on at 8, full graphs at 4) against TP=1 eager, batch and bs=1.
TEST(CudaTpInvariantEngine, Qwen3At1p7bGivesTp1EagerBitsAtTp2To8) {
  BIH_SKIP_WITHOUT_GPU();
  const Generations reference = generate(tp_invariant_scenario(1, "qwen3-1.7b"), 4, 4);
  EXPECT_EQ(differing_steps(reference.alone, reference.batch), 0) << "tp=1: bs=1 vs batch";
  for (int tp : {2, 4, 8}) {
    Scenario s = tp_invariant_scenario(tp, "qwen3-1.7b");
    s.sp_enabled = tp == 8;
    s.graph_mode = tp == 4 ? GraphMode::full : GraphMode::none;
    const Generations g = generate(s, 4, 4);
    const std::string name = "qwen3-1.7b tp=" + std::to_string(tp) +
                             (s.sp_enabled ? " sp=on" : "") + " graph=" + to_string(s.graph_mode);
    EXPECT_EQ(differing_steps(g.batch, reference.batch), 0) << name << ", batch vs tp=1 eager";
    EXPECT_EQ(differing_steps(g.alone, reference.batch), 0) << name << ", bs=1 vs tp=1 eager";
  }
}

TEST(CudaTpInvariantEngine, TheInvariantFamilyMovesBitsWithTp) {
  BIH_SKIP_WITHOUT_GPU();
  Scenario one = tp_invariant_scenario(1);
  one.kernels = KernelFamily::invariant;
  Scenario four = one;
  four.tp = 4;
  EXPECT_GT(differing_steps(generate(four).batch, generate(one).batch), 0)
      << "the invariant family gave TP=1's bits at TP=4: this test could not tell the families "
         "apart";
}

}  // namespace
}  // namespace bih
