// engine.hpp: the Qwen3 engine under test: a serving scheduler over a forward backend.
//
// Engine::generate runs a group of prompts to completion the way a serving engine does: a
// scheduler fills each step with decode rows and (chunks of) prefills, the paged KV cache (with
// prefix caching) gives every row its context, the batch is padded to a CUDA graph capture size
// (and to a multiple of tp under SP), and the ForwardBackend (forward.hpp) runs the step on every
// TP rank: the CPU backend (ranks as threads) or the CUDA one. All knobs that can move bits are in
// EngineOptions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/forward.hpp"
#include "models/knobs.hpp"
#include "models/kv_cache.hpp"
#include "models/tp_shard.hpp"
#include "models/trace.hpp"
#include "models/weights.hpp"

namespace bih {

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
  int64_t max_in_flight = 0;      // HTTP engine: most requests at once; 0: none
};

// Called between steps: (steps done, sequences finished, sequences total).
using StepCallback = std::function<void(int64_t, int, int)>;

class Engine {
 public:
  // Over any backend; vocab_size bounds the prompts' token ids.
  Engine(int vocab_size, EngineOptions options, std::unique_ptr<ForwardBackend> forward);
  // The CPU backend: `comms[r]` is rank r's communicator (size tp); they must outlive the engine.
  Engine(std::shared_ptr<const ModelWeights> weights, EngineOptions options,
         std::vector<Communicator*> comms);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return options_; }
  const ForwardBackend& backend() const { return *forward_; }

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

  // Forgets every cached prefix block (between generate() calls): the next call runs cold.
  void reset_prefix_cache() { blocks_.reset_prefix_cache(); }

  // One prefill of `tokens` (no cache reuse), returning the logits of every position: [T, V].
  std::vector<bf16> prefill_logits(const std::vector<int32_t>& tokens);

 private:
  void pad_step(StepBatch& step) const;

  int vocab_size_ = 0;
  EngineOptions options_;
  std::unique_ptr<ForwardBackend> forward_;
  BlockManager blocks_;
  TraceRequest trace_request_;
  TraceSink* trace_sink_ = nullptr;
};

// Pads a step of `rows` tokens to the next capture size (graphs on and rows <= the largest size).
int graph_padded_rows(GraphMode mode, const std::vector<int>& capture_sizes, int rows);

}  // namespace bih
