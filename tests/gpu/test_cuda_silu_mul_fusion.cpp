// test_cuda_silu_mul_fusion.cpp: SiLU-mul in the gate_up GEMM's epilogue (gemm_skinny_stream.cu,
// CudaGemm::gemm_silu_mul) has the bits of the GEMM followed by the silu_mul kernel.
//
// Bitwise on every element, on the gate_up shape one rank of qwen3-1.7b sees at TP 1, 2, 4 and 8,
// at every M the fused kernel takes (1..8), on every ring that takes the shape; rows past M and
// nothing else are left as they were. CudaGemm fuses only where its skinny companion serves, by
// default only while the stream is captured into a graph, and says so by its return value.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/gemm_equivalence.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/kernels.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace {

using bih::bf16;
using bih::KernelFamily;
using bih::test::DeviceBuffer;
using bih::test::random_bf16;

constexpr uint16_t kUnwritten = 0xffff;  // a NaN pattern neither path produces from finite data

std::vector<bf16> unwritten(size_t n) {
  bf16 fill;
  fill.bits = kUnwritten;
  return std::vector<bf16>(n, fill);
}

// One rank's gate_up weight [2I, K] at TP=tp, and x [8, K] large enough that the gates reach
// silu's saturated end (from g = 7 on, silu(g) rounds to g in bf16) as well as its middle. With
// x in [-4, 4) the largest gates were 7.97 and 8.0 at two of the four widths (H100, stop 50).
struct RankCase {
  int tp, I, K;
  DeviceBuffer<bf16> x, w;
  RankCase(int tp_, int I_, int K_)
      : tp(tp_),
        I(I_),
        K(K_),
        x(random_bf16(static_cast<size_t>(8) * K_, 7 + I_, 6.0f)),
        w(random_bf16(static_cast<size_t>(2) * I_ * K_, 13 + I_, std::sqrt(3.0f / K_))) {}
};

std::vector<int> rank_mlp_widths() {
  const auto config = bih::preset_config("qwen3-1.7b");
  std::vector<int> widths;
  for (int tp : {1, 2, 4, 8}) widths.push_back(config->intermediate_size / tp);
  return widths;
}

int hidden_size() { return bih::preset_config("qwen3-1.7b")->hidden_size; }

TEST(CudaSiluMulFusion, FusedKernelGivesTheGemmThenSiluMulBitsOnEveryRankShapeRingAndM) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  const int K = hidden_size();
  int tp = 1;
  for (int I : rank_mlp_widths()) {
    RankCase c(tp, I, K);
    tp *= 2;
    ASSERT_TRUE(bih::cuda::skinny_stream_silu_mul_supports(8, I, K, c.x.get(), c.w.get()))
        << "I=" << I;
    DeviceBuffer<bf16> gate_up(static_cast<size_t>(8) * 2 * I);
    DeviceBuffer<bf16> want(static_cast<size_t>(8) * I);
    const std::vector<std::string> rings = bih::cuda::skinny_stream_rings(2 * I, K);
    ASSERT_FALSE(rings.empty());
    for (const std::string& ring : rings) {
      for (int m = 1; m <= 8; ++m) {
        DeviceBuffer<bf16> got(unwritten(static_cast<size_t>(8) * I));
        bih::cuda::launch_skinny_stream_ring(ring, c.x.get(), c.w.get(), gate_up.get(), m, 2 * I, K,
                                             nullptr);
        bih::cuda::silu_mul(gate_up.get(), want.get(), m, I, nullptr);
        bih::cuda::launch_skinny_stream_silu_mul_ring(ring, c.x.get(), c.w.get(), got.get(), m, I,
                                                      K, nullptr);
        const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
            got.get(), want.get(), static_cast<size_t>(m) * I, nullptr);
        EXPECT_EQ(d.count, 0u) << "I=" << I << " (tp " << c.tp << ") ring " << ring << " M=" << m
                               << ": first at token " << d.first / I << " channel " << d.first % I;
        const std::vector<bf16> rest =
            got.download(static_cast<size_t>(m) * I, static_cast<size_t>(8 - m) * I);
        size_t written = 0;
        for (const bf16& e : rest) written += e.bits != kUnwritten;
        EXPECT_EQ(written, 0u) << "I=" << I << " ring " << ring << " M=" << m
                               << ": rows past M were written";
      }
    }
    // The operands reach silu's saturated end.
    const std::vector<bf16> products = gate_up.download(0, static_cast<size_t>(2) * I);
    float largest = 0;
    for (int i = 0; i < I; ++i) largest = std::max(largest, std::fabs(bih::to_float(products[i])));
    std::cout << "[silu fusion] I=" << I << ": largest |gate| " << largest << "\n";
    EXPECT_GT(largest, 8.0f) << "I=" << I << ": the gates never reached silu's saturated end";
  }
}

// Small enough for compute-sanitizer's racecheck (the up warps' hand-over in shared memory): one
// CTA of each ring, M = 1..8.
TEST(CudaSiluMulFusion, SmallShapesOnEveryRing) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  const int I = 16;
  const int K = 256;
  RankCase c(0, I, K);
  DeviceBuffer<bf16> gate_up(static_cast<size_t>(8) * 2 * I);
  DeviceBuffer<bf16> want(static_cast<size_t>(8) * I);
  const std::vector<std::string> rings = bih::cuda::skinny_stream_rings(2 * I, K);
  EXPECT_EQ(rings.size(), 2u) << "[32, 256] is one CTA of the wide ring, two of decode";
  for (const std::string& ring : rings) {
    for (int m = 1; m <= 8; ++m) {
      DeviceBuffer<bf16> got(unwritten(static_cast<size_t>(8) * I));
      bih::cuda::launch_skinny_stream_ring(ring, c.x.get(), c.w.get(), gate_up.get(), m, 2 * I, K,
                                           nullptr);
      bih::cuda::silu_mul(gate_up.get(), want.get(), m, I, nullptr);
      bih::cuda::launch_skinny_stream_silu_mul_ring(ring, c.x.get(), c.w.get(), got.get(), m, I, K,
                                                    nullptr);
      const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
          got.get(), want.get(), static_cast<size_t>(m) * I, nullptr);
      EXPECT_EQ(d.count, 0u) << "ring " << ring << " M=" << m << ": first at " << d.first;
    }
  }
}

TEST(CudaSiluMulFusion, CudaGemmFusesOnlyWhereItsSkinnyCompanionServes) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  const int K = hidden_size();
  const int I = rank_mlp_widths()[2];  // TP=4's share keeps the pin short
  RankCase c(4, I, K);
  bih::cuda::CudaGemmOptions options;
  options.max_m = 64;
  options.fuse_silu_mul = bih::cuda::SiluMulFusion::always;
  bih::cuda::CudaGemm gemm(options);
  DeviceBuffer<bf16> gate_up(static_cast<size_t>(16) * 2 * I);
  DeviceBuffer<bf16> want(static_cast<size_t>(16) * I);
  DeviceBuffer<bf16> got(static_cast<size_t>(16) * I);
  DeviceBuffer<bf16> x16(random_bf16(static_cast<size_t>(16) * K, 5, 4.0f));
  const auto config = gemm.invariant_config(2 * I, K);
  for (int m : {1, 2, 8, 9, 16}) {
    const bool skinny = config.serving(m).skinny;
    const bool fused = gemm.gemm_silu_mul(KernelFamily::invariant, x16.get(), c.w.get(), got.get(),
                                          m, I, K, nullptr);
    EXPECT_EQ(fused, skinny && m <= 8) << "M=" << m << " served by " << config.describe();
    if (!fused) continue;
    gemm.gemm(KernelFamily::invariant, x16.get(), c.w.get(), gate_up.get(), m, 2 * I, K, nullptr);
    bih::cuda::silu_mul(gate_up.get(), want.get(), m, I, nullptr);
    const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
        got.get(), want.get(), static_cast<size_t>(m) * I, nullptr);
    EXPECT_EQ(d.count, 0u) << "M=" << m << ": first at " << d.first;
  }
  // On Hopper the skinny kernel serves M=1 (SkinnyCompanionServesSmallMOnHopperWithTheReference-
  // Bits), so the fused path must have been taken there.
  EXPECT_TRUE(config.serving(1).skinny) << config.describe();
  for (KernelFamily other : {KernelFamily::vendor, KernelFamily::tp_invariant}) {
    EXPECT_FALSE(gemm.gemm_silu_mul(other, x16.get(), c.w.get(), got.get(), 1, I, K, nullptr));
  }
  bih::cuda::CudaGemmOptions off = options;
  off.fuse_silu_mul = bih::cuda::SiluMulFusion::never;
  bih::cuda::CudaGemm unfused(off);
  EXPECT_FALSE(unfused.gemm_silu_mul(KernelFamily::invariant, x16.get(), c.w.get(), got.get(), 1, I,
                                     K, nullptr));
  bih::test::device_synchronize();
}

// By default the fused kernel serves only a stream being captured into a CUDA graph: eager, the
// GEMM and silu_mul run apart; captured, the graph holds the fused kernel, with the same bits.
TEST(CudaSiluMulFusion, FusesByDefaultOnlyWhileTheStreamIsCaptured) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  const int K = hidden_size();
  const int I = rank_mlp_widths()[2];
  RankCase c(4, I, K);
  bih::cuda::CudaGemmOptions options;
  options.max_m = 64;
  ASSERT_EQ(options.fuse_silu_mul, bih::cuda::SiluMulFusion::in_graphs);
  bih::cuda::CudaGemm gemm(options);
  ASSERT_TRUE(gemm.invariant_config(2 * I, K).serving(1).skinny);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer<bf16> got(unwritten(static_cast<size_t>(8) * I));
  EXPECT_FALSE(gemm.gemm_silu_mul(KernelFamily::invariant, c.x.get(), c.w.get(), got.get(), 1, I, K,
                                  stream));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(got.download(0, 1)[0].bits, kUnwritten) << "the eager call launched a kernel";

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const bool fused =
      gemm.gemm_silu_mul(KernelFamily::invariant, c.x.get(), c.w.get(), got.get(), 1, I, K, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  EXPECT_TRUE(fused) << "not fused while capturing";
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 1u);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  DeviceBuffer<bf16> gate_up(static_cast<size_t>(8) * 2 * I);
  DeviceBuffer<bf16> want(static_cast<size_t>(8) * I);
  gemm.gemm(KernelFamily::invariant, c.x.get(), c.w.get(), gate_up.get(), 1, 2 * I, K, stream);
  bih::cuda::silu_mul(gate_up.get(), want.get(), 1, I, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const bih::cuda::BitDifferences d =
      bih::cuda::count_bit_differences(got.get(), want.get(), static_cast<size_t>(I), nullptr);
  EXPECT_EQ(d.count, 0u) << "first at " << d.first;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  bih::test::device_synchronize();
}

TEST(CudaSiluMulFusion, RefusesWhatItDoesNotTake) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  DeviceBuffer<bf16> buffer(static_cast<size_t>(64) * 512);
  EXPECT_FALSE(bih::cuda::skinny_stream_silu_mul_supports(9, 16, 256, buffer.get(), buffer.get()));
  EXPECT_FALSE(bih::cuda::skinny_stream_silu_mul_supports(1, 4, 256, buffer.get(), buffer.get()));
  EXPECT_FALSE(bih::cuda::skinny_stream_silu_mul_supports(1, 16, 128, buffer.get(), buffer.get()));
  EXPECT_FALSE(
      bih::cuda::skinny_stream_silu_mul_supports(1, 16, 256, buffer.get() + 1, buffer.get()));
  EXPECT_TRUE(bih::cuda::skinny_stream_silu_mul_supports(1, 16, 256, buffer.get(), buffer.get()));
  EXPECT_THROW(bih::cuda::launch_skinny_stream_silu_mul(buffer.get(), buffer.get(), buffer.get(), 1,
                                                        12, 256, nullptr),
               std::invalid_argument);
  EXPECT_THROW(bih::cuda::launch_skinny_stream_silu_mul_ring("wide", buffer.get(), buffer.get(),
                                                             buffer.get(), 1, 8, 256, nullptr),
               std::invalid_argument);
}

}  // namespace
