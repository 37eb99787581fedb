// cuda_forward_graphs.cpp: how the CUDA forward runs a step on each local rank
// (cuda_forward_impl.hpp): a piece eagerly, captured into one graph over every local rank's
// stream or replayed from it, and one rank's step (upload, pieces, attention, logits, timing).
#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "models/cuda/cuda_forward_impl.hpp"

namespace bih::cuda {

// One piece on every local rank: eagerly, or as one graph over all their streams. Every local
// rank's thread calls this with the same action and key, in the same order.
void CudaForward::Impl::run_piece(int index, GraphAction action, const GraphKey& key,
                                  RankBarrier& barrier, const std::function<void()>& enqueue) {
  Rank& r = *ranks[index];
  if (action == GraphAction::eager) {
    enqueue();
    return;
  }
  GraphEntry& entry = graphs.at(key);  // created by run() before the threads started
  if (action == GraphAction::capture) {
    barrier.arrive_and_wait();
    if (index == 0) {
      cudaCheck(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed));
      cudaCheck(cudaEventRecord(fork, origin));
    }
    barrier.arrive_and_wait();
    cudaCheck(cudaStreamWaitEvent(r.local.stream, fork, 0));  // joins the capture
    try {
      enqueue();
      cudaCheck(cudaEventRecord(r.joined, r.local.stream));
    } catch (...) {
      barrier.break_barrier();
      if (index == 0) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(origin, &partial);
        if (partial != nullptr) cudaGraphDestroy(partial);
        cudaGetLastError();
      }
      throw;
    }
    barrier.arrive_and_wait();
    if (index == 0) {
      for (auto& peer : ranks) cudaCheck(cudaStreamWaitEvent(origin, peer->joined, 0));
      cudaGraph_t graph = nullptr;
      cudaCheck(cudaStreamEndCapture(origin, &graph));
      const cudaError_t instantiated = cudaGraphInstantiate(&entry.exec, graph, 0);
      cudaGraphDestroy(graph);
      cudaCheck(instantiated);
      ++stats.graphs_captured;
    }
    // Until the capture has ended, the ranks' streams still belong to it: nothing may be
    // recorded on them for the replay before that.
    barrier.arrive_and_wait();
  }
  // Replay: after every rank's earlier work, and before its later work.
  cudaCheck(cudaEventRecord(r.ready, r.local.stream));
  barrier.arrive_and_wait();
  if (index == 0) {
    for (auto& peer : ranks) cudaCheck(cudaStreamWaitEvent(origin, peer->ready, 0));
    cudaCheck(cudaGraphLaunch(entry.exec, origin));
    cudaCheck(cudaEventRecord(launched, origin));
    ++stats.graph_launches;
  }
  barrier.arrive_and_wait();
  cudaCheck(cudaStreamWaitEvent(r.local.stream, launched, 0));
}

void CudaForward::Impl::run_rank(int index, StepBatch& step, const std::vector<GraphKey>& keys,
                                 const std::vector<GraphAction>& actions, RankBarrier& barrier) {
  Rank& r = *ranks[index];
  cudaCheck(cudaSetDevice(device));
  if (index == 0) cudaCheck(cudaEventRecord(step_start, r.local.stream));
  upload_inputs(r);
  const int L = model->config().num_layers;
  if (options.graph_mode == GraphMode::full) {
    run_piece(index, actions[0], keys[0], barrier, [&] {
      for (int p = 0; p <= L; ++p) {
        enqueue_piece(r, step, p);
        if (p < L) enqueue_attention(r, step, p);
      }
    });
  } else {
    for (int p = 0; p <= L; ++p) {
      run_piece(index, actions[p], keys[p], barrier, [&] { enqueue_piece(r, step, p); });
      if (p < L) enqueue_attention(r, step, p);
    }
  }
  logits_and_sample(index, step);
  if (index == 0) cudaCheck(cudaEventRecord(step_end, r.local.stream));
  wait_for(r);
  if (index == 0) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, step_start, step_end));
    stats.device_span_ms += ms;
    ++stats.steps;
  }
  if (profiling_step && index == 0) profiler.end_step(r.local.stream);
}

}  // namespace bih::cuda
