// engine.hpp: the Qwen3 engine under test: a serving scheduler over a forward backend.
//
// The engine runs sequences the way a serving engine does: a scheduler fills each step with decode
// rows and (chunks of) prefills, the paged KV cache (with prefix caching) gives every row its
// context, the batch is padded to a CUDA graph capture size (and to a multiple of tp under SP),
// and the ForwardBackend (forward.hpp) runs the step on every TP rank: the CPU backend (ranks as
// threads) or the CUDA one. All knobs that can move bits are in EngineOptions.
//
// Two ways in. generate() runs a group to completion (the harness's batch). The step API (add,
// step, done, take) is continuous batching: a sequence added between steps joins the running set
// at the next step with room under max_num_seqs, so whatever is in flight decodes together
// (bih serve). generate() is add-all + step-until-done, so both schedule a group identically.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/forward.hpp"
#include "models/knobs.hpp"
#include "models/kv_cache.hpp"
#include "models/row_extras.hpp"
#include "models/tp_shard.hpp"
#include "models/trace.hpp"
#include "models/weights.hpp"

namespace bih {

struct SequenceResult {
  std::vector<int32_t> tokens;  // [max_tokens]
  std::vector<float> logprobs;  // [max_tokens]
  // Only when asked for (RowExtras, row_extras.hpp); empty otherwise or when the engine cannot.
  std::vector<std::vector<int32_t>> top_k_ids;   // [max_tokens][k] best ids, value desc
  std::vector<std::vector<float>> top_k_values;  // [max_tokens][k] their logprobs
  std::vector<uint64_t> row_digests;             // [max_tokens] row_digest of the step's logits
};

// A sequence to score: the prompt and the tokens forced after it (a generation's output).
struct ScoreRequest {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
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

// A sequence added with Engine::add; valid until its result is taken.
using SequenceId = int64_t;

// What one Engine::step did.
struct StepReport {
  std::vector<SequenceId> ran;       // sequences with rows in the step (the batch it ran)
  std::vector<SequenceId> finished;  // sequences whose last token the step sampled
};

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
  // persists across calls, as in a long-lived serving engine. The engine must be idle().
  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, GenerateStats* stats = nullptr,
                                       const StepCallback& on_step = {});

  // Throws std::invalid_argument when the engine cannot run `prompt` for max_tokens tokens (empty,
  // longer than max_model_len with them, a token id outside the vocabulary, max_tokens < 1).
  void check(const std::vector<int32_t>& prompt, int max_tokens) const;
  // Queues a sequence (check()ed). It joins the running set at the first step() with room under
  // max_num_seqs, in the order added; until then it waits.
  SequenceId add(std::vector<int32_t> prompt, int max_tokens);
  // Admits waiting sequences, then runs one scheduler step over every running sequence (decode
  // rows first, then prefill chunks within the chunked-prefill budget). Nothing to run: a no-op.
  // After a step that throws, the running sequences are lost: call abort_all() to go on.
  StepReport step(GenerateStats* stats = nullptr);
  // Whether `id` has all its tokens; take() hands its result over (and forgets it).
  bool done(SequenceId id) const;
  SequenceResult take(SequenceId id);
  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  // Drops every waiting, running and untaken sequence, returning their KV blocks.
  void abort_all();

  // Captures, during the next generate() calls, the row that produces token request.step of batch
  // sequence request.sequence into `sink` (nullptr stops capturing). With the step API, a
  // sequence's batch index is its place among those added since the engine was last idle.
  void set_trace(TraceRequest request, TraceSink* sink) {
    trace_request_ = request;
    trace_sink_ = sink;
  }

  // Forgets every cached prefix block (between generate() calls, or while idle()): the next call
  // runs cold.
  void reset_prefix_cache() { blocks_.reset_prefix_cache(); }

  // What every later step reports besides token and logprob (top-k, row digest): from the next
  // step on, for every sequence that samples in it.
  void set_row_extras(RowExtras extras) { extras_ = extras; }
  const RowExtras& row_extras() const { return extras_; }

  // Teacher forcing, as a trainer scores text: every request's prompt + tokens (all but the last,
  // whose row would predict nothing compared) in ONE prefill step, no prefix cache reuse. Per
  // forced token: `tokens` is the prefill's greedy choice at that position (argmax, ties to the
  // lowest id), `logprobs` the prefill's logprob OF THE FORCED TOKEN, and top-k / digests of the
  // row as set_row_extras asks. The engine must be idle(); requests.size() <= max_num_seqs.
  // Throws std::invalid_argument for requests check() would refuse or without tokens.
  std::vector<SequenceResult> score(const std::vector<ScoreRequest>& requests);

  // One prefill of `tokens` (no cache reuse), returning the logits of every position: [T, V].
  std::vector<bf16> prefill_logits(const std::vector<int32_t>& tokens);

 private:
  struct Seq {
    SequenceId id = 0;
    int index = 0;  // batch index (set_trace): order added since last idle
    int max_tokens = 0;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int prompt_len = 0;
    int num_computed = 0;  // tokens whose KV is in the cache
    std::vector<int32_t> table;
    int registered = 0;
    SequenceResult out;
  };

  void pad_step(StepBatch& step) const;
  // Appends logit row `row` of `step`'s extras (top-k, digest) to `out`, as extras_ asks.
  void append_row_extras(const StepBatch& step, size_t row, SequenceResult& out) const;
  void check_sequence(const char* who, const std::vector<int32_t>& prompt, int max_tokens) const;

  int vocab_size_ = 0;
  EngineOptions options_;
  std::unique_ptr<ForwardBackend> forward_;
  BlockManager blocks_;
  TraceRequest trace_request_;
  TraceSink* trace_sink_ = nullptr;
  RowExtras extras_;
  SequenceId next_id_ = 0;
  int next_index_ = 0;
  std::deque<Seq> waiting_;
  std::vector<Seq> running_;  // in admission order: the order the scheduler fills a step
  std::unordered_map<SequenceId, SequenceResult> finished_;
};

// Pads a step of `rows` tokens to the next capture size (graphs on and rows <= the largest size).
int graph_padded_rows(GraphMode mode, const std::vector<int>& capture_sizes, int rows);

}  // namespace bih
