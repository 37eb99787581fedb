// bench_cuda_launch_rate.cpp: how fast one GPU takes in tiny kernels from parallel work: B
// branches of one CUDA graph, or B graphs replayed side by side on B streams (what solo lanes and
// emulated ranks ask of it).
//
// An emulated TP=4 decode step is about 1,300 small kernels (28 layers x ~12 kernels x 4 ranks);
// on 4 solo lanes the GPU matrix's TP=4 cells ran no faster per step than one lane alone. These
// rows say whether parallel branches or graphs raise the rate at which the GPU starts kernels at
// all. Each branch is kLaunches back-to-back launches of the empty kernel (bench/cuda/
// empty_kernel.cu) at grid [blocks] x [256 threads] (1 x 32 for blocks=1); one replay warms up,
// then each iteration times a replay (of the one graph, or of all B graphs, each on its stream,
// the streams joined to the timing stream) between two events after a lead-in replay.
// us_per_node = window / (B x kLaunches): below the one-branch figure, parallel work is taken in
// faster; equal to it, the GPU front end starts one kernel at a time whatever the branches.
//
// Benchmarks: Launch/branches=<1|2|4|16>/blocks=<1|132>/<one_graph|side_by_side>.
// Run: bih_cuda_bench --benchmark_filter=Launch (without a GPU every benchmark is skipped).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/cuda/empty_kernel.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/cuda_handles.hpp"

namespace {

using bih::cuda::OwnedEvent;
using bih::cuda::OwnedStream;

constexpr int kLaunches = 200;  // per branch
constexpr int kIterations = 30;

bool gpu_visible() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// A graph captured from `origin`: `branches` forks, each `kLaunches` empty kernels on its own
// stream, joined back into origin.
cudaGraphExec_t capture(cudaStream_t origin, const std::vector<cudaStream_t>& branch_streams,
                        int branches, int blocks, int threads) {
  const OwnedEvent fork(cudaEventDisableTiming);
  std::vector<std::unique_ptr<OwnedEvent>> joins;
  cudaCheck(cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal));
  cudaCheck(cudaEventRecord(fork.get(), origin));
  for (int b = 0; b < branches; ++b) {
    cudaStream_t s = branch_streams[b];
    cudaCheck(cudaStreamWaitEvent(s, fork.get(), 0));
    for (int i = 0; i < kLaunches; ++i) bih::bench::launch_empty_kernel(s, blocks, threads);
    joins.push_back(std::make_unique<OwnedEvent>(cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(joins.back()->get(), s));
    cudaCheck(cudaStreamWaitEvent(origin, joins.back()->get(), 0));
  }
  cudaGraph_t graph = nullptr;
  cudaCheck(cudaStreamEndCapture(origin, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cudaCheck(instantiated);
  return exec;
}

void BM_LaunchRate(benchmark::State& state, int branches, int blocks, bool side_by_side) {
  if (!gpu_visible()) {
    state.SkipWithError("no CUDA GPU visible");
    return;
  }
  const int threads = blocks == 1 ? 32 : 256;
  const OwnedStream timing;
  std::vector<std::unique_ptr<OwnedStream>> streams;
  std::vector<cudaStream_t> raw;
  for (int b = 0; b < branches; ++b) {
    streams.push_back(std::make_unique<OwnedStream>());
    raw.push_back(streams.back()->get());
  }
  // one_graph: one graph of `branches` branches; side_by_side: one single-branch graph per
  // stream, each captured from (and replayed on) that stream.
  std::vector<cudaGraphExec_t> graphs;
  if (side_by_side) {
    for (int b = 0; b < branches; ++b)
      graphs.push_back(capture(raw[b], {raw[b]}, 1, blocks, threads));
  } else {
    graphs.push_back(capture(timing.get(), raw, branches, blocks, threads));
  }
  const OwnedEvent start(cudaEventDefault);
  const OwnedEvent stop(cudaEventDefault);
  const OwnedEvent go(cudaEventDisableTiming);
  std::vector<std::unique_ptr<OwnedEvent>> done;
  for (int b = 0; b < branches; ++b)
    done.push_back(std::make_unique<OwnedEvent>(cudaEventDisableTiming));
  const auto replay = [&] {
    if (!side_by_side) {
      cudaCheck(cudaGraphLaunch(graphs[0], timing.get()));
      return;
    }
    cudaCheck(cudaEventRecord(go.get(), timing.get()));
    for (int b = 0; b < branches; ++b) {
      cudaCheck(cudaStreamWaitEvent(raw[b], go.get(), 0));
      cudaCheck(cudaGraphLaunch(graphs[b], raw[b]));
      cudaCheck(cudaEventRecord(done[b]->get(), raw[b]));
      cudaCheck(cudaStreamWaitEvent(timing.get(), done[b]->get(), 0));
    }
  };
  replay();
  cudaCheck(cudaStreamSynchronize(timing.get()));
  double total = 0.0;
  for (auto _ : state) {
    replay();  // lead-in: the timed window opens with the GPU busy
    cudaCheck(cudaEventRecord(start.get(), timing.get()));
    replay();
    cudaCheck(cudaEventRecord(stop.get(), timing.get()));
    cudaCheck(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    const double seconds = ms * 1e-3;
    total += seconds;
    state.SetIterationTime(seconds);
  }
  for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
  const double nodes = static_cast<double>(branches) * kLaunches;
  state.counters["us_per_node"] = total / static_cast<double>(state.iterations()) / nodes * 1e6;
  state.counters["nodes"] = nodes;
}

const bool kRegistered = [] {
  for (bool side_by_side : {false, true}) {
    for (int blocks : {1, 132}) {
      for (int branches : {1, 2, 4, 16}) {
        const std::string name = "Launch/branches=" + std::to_string(branches) +
                                 "/blocks=" + std::to_string(blocks) +
                                 (side_by_side ? "/side_by_side" : "/one_graph");
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) { BM_LaunchRate(state, branches, blocks, side_by_side); })
            ->UseManualTime()
            ->Iterations(kIterations)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}();

}  // namespace
