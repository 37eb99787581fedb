// cuda_forward_impl.hpp: the CUDA forward's private state (CudaForward::Impl) and the helper
// types it is made of, shared by the files that implement cuda_forward.hpp; not for other callers.
//
// Internal to cuda_forward.cpp (construction, buffers, step inputs, run), cuda_forward_layers.cpp
// (the decoder's pieces, attention, logits and sampling) and cuda_forward_graphs.cpp (a piece run
// eagerly, captured or replayed on every local rank; a rank's step). Impl is defined here because
// its state and its methods span those files; each method's comment is at its definition. The
// helpers live in forward_detail (a named namespace, so that they are one entity across the three
// files) and are named in bih::cuda by the using-declarations below.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/cuda_forward.hpp"
#include "models/cuda/device_weights.hpp"
#include "models/cuda/kernels.hpp"
#include "models/cuda/op_profiler.hpp"

namespace bih::cuda {
namespace forward_detail {

// Device memory that only grows; growing moves it, so graphs that hold the old address must be
// dropped (reserve says when it moved).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { device_free(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  bool reserve(size_t count) {
    if (count <= capacity_) return false;
    device_free(data_);
    data_ = nullptr;
    capacity_ = 0;
    data_ = static_cast<T*>(device_alloc(std::max<size_t>(count, 1) * sizeof(T)));
    capacity_ = count;
    return true;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// A barrier for the local ranks' threads that a failing rank can break, so that its peers throw
// instead of waiting forever.
class RankBarrier {
 public:
  explicit RankBarrier(int count) : count_(count) {}
  void arrive_and_wait() {
    if (count_ == 1) return;
    std::unique_lock lock(mutex_);
    if (broken_) throw CommAborted("a peer rank failed during the step");
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return generation_ != generation || broken_; });
    if (generation_ == generation) throw CommAborted("a peer rank failed during the step");
  }
  void break_barrier() {
    std::lock_guard lock(mutex_);
    broken_ = true;
    wake_.notify_all();
  }

 private:
  const int count_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// Host memory the GPU copies to and from asynchronously (pageable memory would stage every small
// copy through a driver buffer, synchronously); grows like DeviceArray.
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  void reserve(size_t count) {
    if (count <= capacity_) return;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    cudaCheck(
        cudaMallocHost(reinterpret_cast<void**>(&data_), std::max<size_t>(count, 1) * sizeof(T)));
    capacity_ = count;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// A step input's place in the one buffer every step's inputs travel in.
template <class T>
struct InputSlice {
  T* p = nullptr;
  T* get() const { return p; }
};

// Where each input of a step with M rows (padded) and Ms sampling rows sits in that buffer, in
// bytes: a function of (M, Ms) only, so a graph captured for M finds its inputs at the same
// addresses on every replay. The sampling rows come last (read eagerly, outside graphs).
struct InputOffsets {
  size_t tokens = 0, positions = 0, context_lens = 0, slots = 0, decode = 0, block_tables = 0,
         logit_rows = 0, end = 0;
};

inline InputOffsets input_offsets(size_t M, size_t stride, size_t Ms) {
  auto next = [](size_t at) { return (at + 15) / 16 * 16; };
  InputOffsets o;
  o.tokens = 0;
  o.positions = next(o.tokens + M * sizeof(int32_t));
  o.context_lens = next(o.positions + M * sizeof(int32_t));
  o.slots = next(o.context_lens + M * sizeof(int32_t));
  o.decode = next(o.slots + M * sizeof(int64_t));
  o.block_tables = next(o.decode + M * sizeof(uint8_t));
  o.logit_rows = next(o.block_tables + M * stride * sizeof(int32_t));
  o.end = next(o.logit_rows + Ms * sizeof(int32_t));
  return o;
}

// What a step does with one graph key: the first sight runs eagerly (warm-up), the second
// captures, later ones replay.
enum class GraphAction { eager, capture, replay };

// (padded rows, piece, vendor decode splits, SP): piece -1 is the whole forward (mode full).
using GraphKey = std::tuple<int, int, int, bool>;

struct GraphEntry {
  int seen = 0;
  cudaGraphExec_t exec = nullptr;
};

}  // namespace forward_detail

using forward_detail::DeviceArray;
using forward_detail::GraphAction;
using forward_detail::GraphEntry;
using forward_detail::GraphKey;
using forward_detail::input_offsets;
using forward_detail::InputOffsets;
using forward_detail::InputSlice;
using forward_detail::PinnedArray;
using forward_detail::RankBarrier;

struct CudaForward::Impl {
  struct Rank {
    LocalRank local;
    const DeviceRankWeights* w = nullptr;
    std::unique_ptr<CudaGemm> gemm;  // per rank: the vendor family's workspace is not shareable
    DeviceArray<bf16> kv;            // [layers, 2, pool elements]
    std::vector<KvPool> pools;       // per layer
    // Activations, [capacity rows, cols].
    DeviceArray<bf16> residual, h_local, h_full, partial, reduced, qkv, q, k, attn, gate_up, act;
    // kernels tp_invariant: the row-parallel GEMMs' unrounded fp32 subtrees [capacity rows, H],
    // which the tree collectives finish (models/tree_sum.hpp).
    DeviceArray<float> partial32;
    // Step inputs: one upload per step into `inputs`, laid out by input_offsets.
    DeviceArray<uint8_t> inputs;
    InputSlice<int32_t> tokens, positions, block_tables, context_lens, logit_rows;
    InputSlice<int64_t> slots;
    InputSlice<uint8_t> decode;
    // Logits and sampling.
    DeviceArray<bf16> selected, logits_local, gathered, logits;
    DeviceArray<int32_t> sampled;
    DeviceArray<float> logprobs;
    DeviceArray<uint8_t> sample_scratch;  // greedy_sample_scratch_bytes(logit rows)
    // Split-KV attention's unfolded tiles (attention_with_splits), sized once for max_model_len.
    DeviceArray<uint8_t> attention_split;
    size_t attention_split_bytes = 0;
    // Traced steps only: the traced rows of one tensor land here before one wait for them all.
    PinnedArray<uint8_t> trace_staging;
    cudaEvent_t ready = nullptr;   // the rank's work before a graph launch
    cudaEvent_t joined = nullptr;  // the rank's captured work, joined back to the origin stream
  };

  std::shared_ptr<const DeviceModel> model;
  EngineOptions options;
  int device = 0;
  std::string device_name;
  DeviceRopeTable rope;
  std::vector<std::unique_ptr<Rank>> ranks;
  size_t row_capacity = 0;
  size_t logit_capacity = 0;
  // Graphs span every local rank's stream, launched from an origin stream.
  cudaStream_t origin = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t launched = nullptr;
  cudaEvent_t step_start = nullptr;  // timing events on rank index 0's stream
  cudaEvent_t step_end = nullptr;
  std::map<GraphKey, GraphEntry> graphs;
  GraphStats stats;
  OpProfiler profiler;          // rank index 0's eager steps, when BIH_CUDA_PROFILE is set
  bool profiling_step = false;  // this step runs eagerly and is profiled

  // Per-step host copies of the inputs (identical for every rank), and the pinned staging buffer
  // every rank uploads from (input_offsets layout); the sampled tokens and logprobs come back to
  // pinned memory too.
  std::vector<int32_t> host_block_tables, host_context_lens;
  std::vector<uint8_t> host_decode;
  InputOffsets staged;
  PinnedArray<uint8_t> staging;
  PinnedArray<int32_t> host_sampled;
  PinnedArray<float> host_logprobs;

  void drop_graphs() {
    for (auto& [key, entry] : graphs) {
      if (entry.exec != nullptr) cudaGraphExecDestroy(entry.exec);
    }
    graphs.clear();
  }
  void reserve(const StepBatch& step);
  void stage_inputs(const StepBatch& step);  // into `staging`; sets `staged`
  void upload_inputs(Rank& r);
  void run_rank(int index, StepBatch& step, const std::vector<GraphKey>& keys,
                const std::vector<GraphAction>& actions, RankBarrier& barrier);
  void run_piece(int index, GraphAction action, const GraphKey& key, RankBarrier& barrier,
                 const std::function<void()>& enqueue);
  void enqueue_piece(Rank& r, StepBatch& step, int piece);
  void enqueue_attention(Rank& r, StepBatch& step, int layer);
  void logits_and_sample(int index, StepBatch& step);
  void mark(const Rank& r, const StepBatch& step, const char* op) {
    if (profiling_step && &r == ranks[0].get() && step.trace == nullptr) {
      profiler.mark(op, r.local.stream);
    }
  }
  static void wait_for(const Rank& r) {
    if (r.local.wait) {
      r.local.wait();
    } else {
      cudaCheck(cudaStreamSynchronize(r.local.stream));
    }
  }
  std::string gemm_detail(Rank& r, int M, int N, int K) const;
};

}  // namespace bih::cuda
