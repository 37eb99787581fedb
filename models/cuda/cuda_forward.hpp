// cuda_forward.hpp: the CUDA backend's forward step (a ForwardBackend, models/forward.hpp).
//
// Each local TP rank runs the Qwen3 decoder on its own CUDA stream with the kernels of
// kernels.hpp and gemm.hpp, on its shard of the device weights (device_weights.hpp) and its slice
// of a device paged KV cache, and combines partial sums through its Communicator, whose pointers
// are device pointers: an EmulatedGpuRank (every rank of the group on one GPU, one host thread
// each) or an NCCL rank (one process per GPU, one local rank).
//
// CUDA graphs (EngineOptions::graph_mode) cover steps the scheduler padded to a capture size:
//   none       every op launched eagerly;
//   piecewise  per layer boundary one graph for the ops between two attentions (collectives
//              included); attention runs eagerly between them, as vLLM's piecewise mode does;
//   full       the whole model forward (attention and collectives included) as one graph.
// The first step of each (padded size, piece) runs eagerly (warm-up: pinned GEMM algorithms,
// communicator scratch); the second captures, and later ones replay. With several local ranks a
// graph spans all their streams (one capture joined by events), so collectives between the ranks'
// streams are captured too. lm_head, the logits all_gather and sampling run eagerly after the
// forward on the rows that sample (as vLLM computes logits outside the graph).
// Steps that trace activations (bih explain) run eagerly: a replay launches the same kernels with
// the same arguments as the eager run it was captured from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/cuda/gemm.hpp"
#include "models/forward.hpp"

struct CUstream_st;

namespace bih::cuda {

class DeviceModel;

// One TP rank run by this process: its communicator and the stream its work goes on (the
// communicator's own stream, so that collectives follow the rank's kernels in order).
struct LocalRank {
  int rank = 0;
  Communicator* comm = nullptr;
  CUstream_st* stream = nullptr;
  // Waits for the stream's work; empty: cudaStreamSynchronize. An NCCL rank passes its
  // watchdog's wait, so a dead peer becomes CommAborted instead of a hang.
  std::function<void()> wait;
};

struct GraphStats {
  int64_t graphs_captured = 0;
  int64_t graph_launches = 0;
  int64_t eager_steps = 0;  // steps with no graph: mode none, too large, warm-up or tracing
  // Rank index 0's GPU timeline per step, from its input upload to its sampled tokens' download:
  // a step's wall time minus this is host time (scheduler, launches, synchronization).
  double device_span_ms = 0.0;  // summed over every step
  int64_t steps = 0;
};

class CudaForward final : public ForwardBackend {
 public:
  // `model` holds the shards of every rank in `ranks` on `device`; the communicators outlive this.
  CudaForward(std::shared_ptr<const DeviceModel> model, EngineOptions options,
              std::vector<LocalRank> ranks, int device, CudaGemmOptions gemm_options = {});
  ~CudaForward() override;

  void run(StepBatch& step) override;
  std::string describe() const override;
  GraphStats graph_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bih::cuda
