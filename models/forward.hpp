// forward.hpp: one forward step as the scheduler hands it to a backend, and the backend interface.
//
// The Engine (engine.hpp) owns scheduling, the paged KV block manager and padding; a
// ForwardBackend owns the weights, the KV tensors and the ranks, and runs one StepBatch through
// the model: the CPU backend (cpu_forward.hpp, ranks as threads) or the CUDA backend
// (models/cuda/cuda_forward.hpp). Both see exactly the same StepBatch, so the scheduler cannot be
// a reason for their outputs to differ.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cpu/kernels.hpp"
#include "models/knobs.hpp"
#include "models/trace.hpp"

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

// Blocks in the paged KV pool: every running sequence at max_model_len, twice over with prefix
// caching (finished sequences' blocks stay cached for later requests), plus one. Computed in 64
// bits: a count that does not fit an int (block ids and slots are ints) throws length_error;
// spec/size_bounds.cpp refuses such plans long before, this keeps the engine safe on its own.
int kv_pool_blocks(const EngineOptions& options);
// Bytes of K and V cache one TP rank reserves up front for a model with `kv_heads_local` KV heads
// of `head_dim` on that rank and `num_layers` layers (bf16 entries), from kv_pool_blocks.
uint64_t kv_cache_bytes_per_rank(const EngineOptions& options, int num_layers, int kv_heads_local,
                                 int head_dim);
// Entries of a block table: blocks of one sequence at max_model_len.
int max_blocks_per_sequence(const EngineOptions& options);

// FNV-1a over the K and V rows a query attends to on one rank, in position order: equal hashes,
// equal attention context (trace entries of the attention op carry it).
uint64_t kv_context_hash(const cpu::KvPool& kv, const cpu::AttentionQuery& query);

// One forward pass: the rows every rank runs, identical on all ranks.
struct StepBatch {
  int rows_real = 0;    // M: real tokens
  int rows_padded = 0;  // after graph padding, then SP padding to a multiple of tp
  bool graph_padded =
      false;  // graphs on and rows_real within the capture sizes: a graph may run it
  bool sp = false;
  std::vector<int32_t> tokens;               // [rows_padded]
  std::vector<int32_t> positions;            // [rows_padded]
  std::vector<int64_t> slots;                // [rows_padded], -1 for padding
  std::vector<cpu::AttentionQuery> queries;  // [rows_real]
  int num_decode = 0;
  std::vector<int> logit_rows;         // rows whose logits are computed
  std::vector<bf16> logits;            // [logit_rows, V] when !sample
  std::vector<int32_t> sampled;        // [logit_rows] when sample
  std::vector<float> sampled_logprob;  // [logit_rows] when sample
  bool sample = true;
  // With sample: also hand back the logit rows' full logits (the CPU backend always does; the
  // CUDA one downloads them only when asked).
  bool keep_logits = false;
  // Rows whose activations are captured (every row of the traced sequence in this step) and
  // their positions in the sequence.
  std::vector<int> trace_rows;
  std::vector<int> trace_positions;
  TraceSink* trace = nullptr;
};

// Runs work(i) for every rank index i in 0..n-1: index 0 on the calling thread, the others on
// threads of their own. When work(i) throws, on_failure(i) runs at once (it aborts i's
// communicator, so that peers waiting in a collective wake with CommAborted). Afterwards the root
// cause is rethrown: a rank's own error in preference to the CommAborted it caused on its peers.
void run_ranks(int n, const std::function<void(int)>& work,
               const std::function<void(int)>& on_failure);

// Trace helpers both backends use, so that their traces read the same.
// "attention over N keys (...)": how the family reduced this query's keys in this step.
std::string attention_trace_detail(KernelFamily family, const cpu::AttentionQuery& query,
                                   int num_decode);
// Records the sampled token of logit row `index` (its logprob bits and id) in step.trace.
void trace_sampled_token(StepBatch& step, size_t index, int vocab_size);

// kernels tp_invariant, as both backends describe and check it (models/tree_sum.hpp).
// Throws std::invalid_argument unless every rank of TP=tp holds whole subtrees of the K chunk
// tree: tp is 1, 2, 4 or 8 and every contraction's K (hidden, heads*head_dim, intermediate) is a
// multiple of kTpInvariantChunks. The message names the dimension.
void check_tp_invariant_model(const ModelConfig& c, int tp);
// "gemm M=.. N=.. K=.. (tp_invariant: 8 fixed K chunks, one tree, for every M and TP)"
std::string tp_invariant_gemm_detail(int M, int N, int K);
// A row-parallel rank's fp32 subtree: "... (tp_invariant: 2 of 8 K chunks, fp32 subtree, ...)"
std::string tp_invariant_partial_detail(int M, int N, int K_local, int tp);
// The tree collective that finishes a row-parallel GEMM, for traces.
std::string tp_invariant_reduce_detail(bool sp, int tp);

class ForwardBackend {
 public:
  virtual ~ForwardBackend() = default;
  // Runs `step` through the model on every rank: sampled/sampled_logprob for the logit rows, or
  // their full logits when !step.sample; trace entries when step.trace is set. Throws on failure
  // (a rank's error, a CommAborted from a peer's failure).
  virtual void run(StepBatch& step) = 0;
  // "cpu", "cuda(H200 x1)": for messages.
  virtual std::string describe() const = 0;
};

}  // namespace bih
