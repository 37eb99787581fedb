// engine.hpp: the Qwen3 engine under test on the CPU backend, TP ranks as threads.
//
// Engine::generate runs a group of prompts to completion the way a serving engine does: a
// scheduler fills each step with decode rows and (chunks of) prefills, the paged KV cache (with
// prefix caching) gives every row its context, the batch is padded to a CUDA graph capture size,
// and every TP rank runs its shard of the forward on its own thread, combining partial sums
// through its Communicator. All knobs that can move bits are in EngineOptions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/cpu/kernels.hpp"
#include "models/knobs.hpp"
#include "models/kv_cache.hpp"
#include "models/tp_shard.hpp"
#include "models/trace.hpp"
#include "models/weights.hpp"

namespace bih {

struct EngineOptions {
  KernelFamily kernels = KernelFamily::invariant;
  int tp = 1;
  bool sp_enabled = false;
  int sp_min_tokens = 1;
  GraphMode graph_mode = GraphMode::none;
  std::vector<int> capture_sizes{1, 2, 4, 8, 16, 32, 64};
  bool prefix_caching = false;
  int block_size = 16;
  int chunked_prefill_max_tokens = 0;  // 0: whole prompts in one step
  int max_model_len = 512;
  int max_num_seqs = 64;
};

struct SequenceResult {
  std::vector<int32_t> tokens;  // [max_tokens]
  std::vector<float> logprobs;  // [max_tokens]
};

struct GenerateStats {
  int64_t steps = 0;
  int64_t rows = 0;               // rows through the model, graph and SP padding included
  int64_t real_rows = 0;          // rows of real tokens
  int64_t prefix_hit_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int64_t sp_steps = 0;           // steps that ran with sequence parallelism
};

// Called between steps: (steps done, sequences finished, sequences total).
using StepCallback = std::function<void(int64_t, int, int)>;

class Engine {
 public:
  // `comms[r]` is rank r's communicator (size tp); they must outlive the engine.
  Engine(std::shared_ptr<const ModelWeights> weights, EngineOptions options,
         std::vector<Communicator*> comms);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return options_; }

  // Generates max_tokens greedy tokens for every prompt, all of them in flight together (so
  // prompts.size() is the batch size; at most max_num_seqs). The KV cache, prefix cache included,
  // persists across calls, as in a long-lived serving engine.
  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, GenerateStats* stats = nullptr,
                                       const StepCallback& on_step = {});

  // Captures, during the next generate() calls, the row that produces token request.step of batch
  // sequence request.sequence into `sink` (nullptr stops capturing).
  void set_trace(TraceRequest request, TraceSink* sink) {
    trace_request_ = request;
    trace_sink_ = sink;
  }

  // One prefill of `tokens` (no cache reuse), returning the logits of every position: [T, V].
  std::vector<bf16> prefill_logits(const std::vector<int32_t>& tokens);

 private:
  struct Step;
  struct RankState;
  void pad_step(Step& step) const;
  void run_step(Step& step);
  void forward_rank(int rank, Step& step);

  std::shared_ptr<const ModelWeights> weights_;
  EngineOptions options_;
  std::vector<Communicator*> comms_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  cpu::RopeTable rope_;
  BlockManager blocks_;
  TraceRequest trace_request_;
  TraceSink* trace_sink_ = nullptr;
};

// Pads a step of `rows` tokens to the next capture size (graphs on and rows <= the largest size).
int graph_padded_rows(GraphMode mode, const std::vector<int>& capture_sizes, int rows);

}  // namespace bih
