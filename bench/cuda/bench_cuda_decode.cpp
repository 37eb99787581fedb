// bench_cuda_decode.cpp: the CUDA engine's decode step against the HBM floor, side by side.
//
// The floor of a decode step is the time to read every weight once: the model's weight bytes
// (qwen3-1.7b at TP=1: its layers plus the tied embedding that lm_head reads, each once) over the
// device-to-device copy bandwidth measured in the same run (a copy reads and writes, so bandwidth
// = 2 * bytes / time). The step time is the engine's own: generate() over the same prompts with
// max_tokens 8 and 8 + kDecodeSteps, and the difference divided by kDecodeSteps, so prefill,
// warm-up and graph capture cancel out. Counters: step_ms, floor_ms, x_floor (step / floor), and
// device_ms: the same difference of rank 0's GPU timeline per step (its first upload to its last
// download), so step_ms - device_ms is the host's share (scheduler, launches, synchronization).
// Benchmarks: bs 1 and 64, graph modes none and full (the target: bs=1 `full` within 1.3x), and
// beside them the peer: the vendor kernels (cuBLAS's heuristics, split-count decode attention) in
// the same engine with `full` graphs, so the cost of invariance and the cost of the engine show
// apart. The matrix's emulated cells (TP=4 and 8 on one GPU, SP on, reduce_scatter fixed: the
// cell tp8-sp-fixed of scenarios/issue-56370-gpu.json) at bs=1 in every graph mode show what an
// emulated rank costs: the same weights read once in all, against the TP=1 step.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/cuda/copy_bandwidth.hpp"
#include "engines/bih_engine.hpp"
#include "engines/cuda/bih_cuda_engine.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/cuda_forward.hpp"
#include "models/weights.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"

namespace {

constexpr int kDecodeSteps = 32;

void BM_DecodeStep(benchmark::State& state, int batch_size, bih::GraphMode mode,
                   bih::KernelFamily family, int tp) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    state.SkipWithError("no CUDA GPU visible");
    return;
  }
  static const bool registered = (bih::cuda::register_cuda_backend(), true);
  (void)registered;
  bih::Scenario s;
  s.model.preset = "qwen3-1.7b";
  s.backend = bih::Backend::cuda;
  s.tp = tp;
  if (tp > 1) {  // the matrix's emulated cell tp<N>-sp-fixed
    s.ranks = bih::RankKind::emulated;
    s.sp_enabled = true;
    s.reduce_scatter = bih::ReduceOrder::fixed;
  }
  s.graph_mode = mode;
  s.kernels = family;
  bih::EngineBundle bundle = bih::make_engine(s);
  bih::PromptSpec spec;
  spec.count = batch_size;
  spec.min_len = 16;
  spec.max_len = 16;
  const auto prompts = bih::make_prompts(spec, bundle.config.vocab_size, "bench");
  // Every weight once (a tied lm_head is the embedding): what one TP=1 decode step reads.
  uint64_t model_bytes = 0;
  for (const bih::TensorSpec& t : bih::tensor_specs(bundle.config)) {
    model_bytes += t.element_count() * sizeof(bih::bf16);
  }
  const double floor_s = static_cast<double>(model_bytes) / bih::bench::copy_bandwidth();

  auto timed = [&](int max_tokens) {
    const auto start = std::chrono::steady_clock::now();
    bundle.engine->generate(prompts, max_tokens);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  timed(8 + kDecodeSteps);  // warm-up: pins GEMMs, captures graphs for every padded size
  const auto* forward = dynamic_cast<const bih::cuda::CudaForward*>(&bundle.engine->backend());
  auto device_span = [&] {
    return forward != nullptr ? forward->graph_stats().device_span_ms : 0.0;
  };
  double step_s = 0;
  double device_ms = 0;
  for (auto _ : state) {
    const double span_before_short = device_span();
    const double short_run = timed(8);
    const double span_between = device_span();
    const double long_run = timed(8 + kDecodeSteps);
    step_s = (long_run - short_run) / kDecodeSteps;
    device_ms =
        ((device_span() - span_between) - (span_between - span_before_short)) / kDecodeSteps;
    state.SetIterationTime(step_s);
  }
  state.counters["step_ms"] = step_s * 1e3;
  state.counters["floor_ms"] = floor_s * 1e3;
  state.counters["x_floor"] = step_s / floor_s;
  // The GPU timeline of a step (upload to download on rank 0): what is left of step_ms is host.
  state.counters["device_ms"] = device_ms;
  state.counters["device_x_floor"] = device_ms * 1e-3 / floor_s;
  state.counters["weights_GB"] = static_cast<double>(model_bytes) / 1e9;
  state.counters["copy_TBps"] = bih::bench::copy_bandwidth() / 1e12;
}

void register_decode_benchmarks() {
  struct Variant {
    bih::GraphMode mode;
    bih::KernelFamily family;
  };
  const Variant variants[] = {{bih::GraphMode::none, bih::KernelFamily::invariant},
                              {bih::GraphMode::full, bih::KernelFamily::invariant},
                              {bih::GraphMode::full, bih::KernelFamily::vendor},
                              {bih::GraphMode::full, bih::KernelFamily::tp_invariant}};
  auto add = [](int tp, int bs, const Variant& v) {
    benchmark::RegisterBenchmark(
        ("BM_DecodeStep/qwen3-1.7b/tp:" + std::to_string(tp) + "/bs:" + std::to_string(bs) +
         "/graph:" + bih::to_string(v.mode) + "/kernels:" + bih::to_string(v.family))
            .c_str(),
        [tp, bs, v](benchmark::State& state) { BM_DecodeStep(state, bs, v.mode, v.family, tp); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(3);
  };
  for (int bs : {1, 64}) {
    for (const Variant& v : variants) add(1, bs, v);
  }
  for (int tp : {4, 8}) {
    for (bih::GraphMode mode :
         {bih::GraphMode::none, bih::GraphMode::piecewise, bih::GraphMode::full}) {
      add(tp, 1, {mode, bih::KernelFamily::invariant});
    }
  }
}

const bool kRegistered = (register_decode_benchmarks(), true);

}  // namespace
