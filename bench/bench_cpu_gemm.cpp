// bench_cpu_gemm.cpp: the CPU GEMM's invariant, vendor and tp_invariant families on the tiny
// preset's projections (tp_invariant: K as 8 fixed chunks combined by a tree, the cost of TP
// invariance at TP=1; every K here is a multiple of 8).
//
// Arguments: {M, N, K}. M covers a lone decode step (1), the vendor split-K threshold (16), a full
// decode batch (64) and a prefill batch (256). The FLOP/s counter is 2*M*N*K per iteration.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "models/bf16.hpp"
#include "models/cpu/kernels.hpp"

namespace {

using bih::bf16;
using bih::KernelFamily;

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<bf16> v(n);
  for (auto& e : v) e = bih::to_bf16(dist(rng));
  return v;
}

void run_gemm(benchmark::State& state, KernelFamily family) {
  const int M = static_cast<int>(state.range(0));
  const int N = static_cast<int>(state.range(1));
  const int K = static_cast<int>(state.range(2));
  const std::vector<bf16> x = random_bf16(static_cast<size_t>(M) * K, 1);
  const std::vector<bf16> w = random_bf16(static_cast<size_t>(N) * K, 2);
  std::vector<bf16> y(static_cast<size_t>(M) * N);
  for (auto _ : state) {
    bih::cpu::gemm(family, x.data(), w.data(), y.data(), M, N, K);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemmInvariant(benchmark::State& state) { run_gemm(state, KernelFamily::invariant); }
void BM_GemmVendor(benchmark::State& state) { run_gemm(state, KernelFamily::vendor); }
void BM_GemmTpInvariant(benchmark::State& state) { run_gemm(state, KernelFamily::tp_invariant); }

// The tiny preset's GEMMs as {N, K}: qkv, o_proj, gate_up, down, lm_head.
void tiny_shapes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"M", "N", "K"});
  const int shapes[][2] = {{512, 256}, {256, 256}, {1536, 256}, {256, 768}, {2048, 256}};
  for (int m : {1, 16, 64, 256}) {
    for (const auto& shape : shapes) bench->Args({m, shape[0], shape[1]});
  }
}

// Wall time: the kernels are single-threaded, and CPU time under-reports on shared, busy hosts.
BENCHMARK(BM_GemmInvariant)->Apply(tiny_shapes)->UseRealTime();
BENCHMARK(BM_GemmVendor)->Apply(tiny_shapes)->UseRealTime();
BENCHMARK(BM_GemmTpInvariant)->Apply(tiny_shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
