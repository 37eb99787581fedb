// test_cuda_step_chain.cpp: a decode step's kernels launched back to back, each allowed to start
// before the one ahead of it ends (programmatic_launch.cuh), read only what that one finished.
//
// The chain is the MLP half of a layer at M=1 on qwen3-1.7b's shapes: add_rms_norm, the gate_up
// GEMM, silu_mul, the down GEMM, add_rms_norm; the GEMMs are the invariant family's skinny stream
// kernel or the tp_invariant family's GEMVs. Each output buffer is first filled with NaN bits,
// then the chain runs kRounds times on one stream with nothing but kernels between them; every
// round's outputs must have the bits of the same chain run with a synchronize after each kernel. A
// kernel that touched its input before its griddepcontrol.wait would read the NaN fill or a
// half-written row. By default (BIH_STEP_PDL=3) the GEMMs start early after the norms and SiLU-mul,
// and those start early once every block of the GEMM before has asked for its last weights; under
// BIH_STEP_PDL=2 every kernel starts as the one before starts (ci/device-check.sh runs both).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/gemm_equivalence.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/kernels.hpp"
#include "models/knobs.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace {

using bih::bf16;
using bih::test::DeviceBuffer;

// Uniform in [-scale, scale) plus offset, from a 64-bit LCG (fast for the 25M-element gate_up).
std::vector<bf16> uniform_bf16(size_t n, uint64_t seed, float scale, float offset = 0.0f) {
  std::vector<bf16> v(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& e : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float unit = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    e = bih::to_bf16(offset + (2.0f * unit - 1.0f) * scale);
  }
  return v;
}

// The chain kRounds times back to back against once with a synchronize after each kernel; `gemm`
// runs y[M, N] = x[M, K] . w[N, K]^T on the stream.
template <class Gemm>
void expect_early_chain_equals_synchronized_chain(const char* family, Gemm&& gemm) {
  constexpr int H = 2048;  // hidden
  constexpr int I = 6144;  // MLP width
  constexpr int M = 1;
  constexpr float kEps = 1e-6f;
  constexpr int kRounds = 64;
  const DeviceBuffer<bf16> norm_w(uniform_bf16(H, 1, 0.25f, 1.0f));               // [H]
  const DeviceBuffer<bf16> gate_up_w(uniform_bf16(size_t{2} * I * H, 2, 0.03f));  // [2I, H]
  const DeviceBuffer<bf16> down_w(uniform_bf16(size_t{H} * I, 3, 0.02f));         // [H, I]
  const DeviceBuffer<bf16> attention_out(uniform_bf16(size_t{M} * H, 4, 1.0f));   // [M, H]
  const std::vector<bf16> residual_in = uniform_bf16(size_t{M} * H, 5, 1.0f);     // [M, H]

  // One round's buffers: residual [M, H] (updated in place twice), normed [M, H], gate_up
  // [M, 2I], act [M, I], down [M, H], out [M, H].
  struct Round {
    std::unique_ptr<DeviceBuffer<bf16>> residual, normed, gate_up, act, down, out;
  };
  auto make_round = [&] {
    Round r;
    r.residual = std::make_unique<DeviceBuffer<bf16>>(residual_in);
    r.normed = std::make_unique<DeviceBuffer<bf16>>(size_t{M} * H);
    r.gate_up = std::make_unique<DeviceBuffer<bf16>>(size_t{M} * 2 * I);
    r.act = std::make_unique<DeviceBuffer<bf16>>(size_t{M} * I);
    r.down = std::make_unique<DeviceBuffer<bf16>>(size_t{M} * H);
    r.out = std::make_unique<DeviceBuffer<bf16>>(size_t{M} * H);
    for (const auto* b :
         {r.normed.get(), r.gate_up.get(), r.act.get(), r.down.get(), r.out.get()}) {
      if (cudaMemset(b->get(), 0xff, b->size() * sizeof(bf16)) != cudaSuccess) {  // NaN bits
        throw std::runtime_error("cudaMemset failed");
      }
    }
    return r;
  };
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto run_chain = [&](const Round& r, bool synchronize_each) {
    auto step = [&] {
      if (synchronize_each) ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    };
    bih::cuda::add_rms_norm(r.residual->get(), attention_out.get(), norm_w.get(), r.normed->get(),
                            M, H, kEps, stream);
    step();
    gemm(r.normed->get(), gate_up_w.get(), r.gate_up->get(), M, 2 * I, H, stream);
    step();
    bih::cuda::silu_mul(r.gate_up->get(), r.act->get(), M, I, stream);
    step();
    gemm(r.act->get(), down_w.get(), r.down->get(), M, H, I, stream);
    step();
    bih::cuda::add_rms_norm(r.residual->get(), r.down->get(), norm_w.get(), r.out->get(), M, H,
                            kEps, stream);
    step();
  };

  Round reference = make_round();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  run_chain(reference, true);
  std::vector<Round> rounds;
  for (int i = 0; i < kRounds; ++i) rounds.push_back(make_round());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const Round& r : rounds) run_chain(r, false);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  const std::vector<bf16> out = reference.out->download(0, size_t{M} * H);
  int finite = 0;
  for (bf16 v : out) finite += std::isfinite(bih::to_float(v)) ? 1 : 0;
  ASSERT_EQ(finite, M * H) << "the reference chain itself gave non-finite outputs";

  uint64_t total = 0;
  for (int i = 0; i < kRounds; ++i) {
    const Round& r = rounds[i];
    const std::pair<const char*, std::pair<const DeviceBuffer<bf16>*, const DeviceBuffer<bf16>*>>
        outputs[] = {{"normed", {r.normed.get(), reference.normed.get()}},
                     {"gate_up", {r.gate_up.get(), reference.gate_up.get()}},
                     {"act", {r.act.get(), reference.act.get()}},
                     {"down", {r.down.get(), reference.down.get()}},
                     {"residual", {r.residual.get(), reference.residual.get()}},
                     {"out", {r.out.get(), reference.out.get()}}};
    for (const auto& [name, pair] : outputs) {
      const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
          pair.first->get(), pair.second->get(), pair.first->size(), nullptr);
      total += d.count;
      EXPECT_EQ(d.count, 0u) << family << ", round " << i << ", " << name << ": first at element "
                             << d.first;
    }
  }
  std::cout << "[step chain] " << family << ": " << kRounds
            << " rounds of 5 kernels launched early: " << total
            << " output elements differed from the synchronized chain\n";
}

TEST(CudaStepChain, InvariantKernelsLaunchedEarlyReadOnlyTheFinishedOutputOfTheKernelBefore) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  ASSERT_TRUE(bih::cuda::skinny_stream_supports(1, 12288, 2048, reinterpret_cast<void*>(256),
                                                reinterpret_cast<void*>(256)));
  expect_early_chain_equals_synchronized_chain(
      "invariant (skinny stream GEMM)",
      [](const bf16* x, const bf16* w, bf16* y, int M, int N, int K, cudaStream_t stream) {
        bih::cuda::launch_skinny_stream(x, w, y, M, N, K, stream);
      });
}

// The tp_invariant family at M=1: the staged GEMV (gate_up, N=12288), which asks for its first
// weight stages before its wait, and the register GEMV (down, N=2048).
TEST(CudaStepChain, TpInvariantKernelsLaunchedEarlyReadOnlyTheFinishedOutputOfTheKernelBefore) {
  BIH_SKIP_WITHOUT_GPU();
  bih::cuda::CudaGemm gemm;
  expect_early_chain_equals_synchronized_chain(
      "tp_invariant (chunk-tree GEMVs)",
      [&](const bf16* x, const bf16* w, bf16* y, int M, int N, int K, cudaStream_t stream) {
        gemm.gemm(bih::KernelFamily::tp_invariant, x, w, y, M, N, K, stream);
      });
}

}  // namespace
