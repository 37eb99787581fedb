// trace.hpp: activation capture of one token's row through the forward pass, for localization.
//
// When a TraceRequest is set, the engine records every op's output for each row of batch sequence
// `sequence` in the step that samples its token `step` (all its prompt rows when that step is the
// prefill, so that a difference in any row the token attends to is seen where it starts):
// rank-sharded ops once per rank, residual stream ops once (the rank that holds the row). Two
// traces of the same token in two batch contexts are compared in pipeline order (layer, op,
// position, rank); the first entry whose bits differ names the op that moved them.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace bih {

struct TraceRequest {
  int sequence = 0;  // index in the batch passed to Engine::generate
  int step = 0;      // generated-token index
};

struct TraceEntry {
  int layer = -1;    // -1: before the first or after the last layer
  std::string op;    // "embedding", "attn_norm", "qkv", "qk_norm_rope", "attention", ...
  int rank = -1;     // the rank whose shard this is; -1 for the residual stream (one value)
  int position = 0;  // the row's position in its sequence
  std::string
      detail;  // how it was computed: "gemm M=1 (vendor: split-K 4)", "reduce_scatter(ring)"
  std::vector<uint32_t> bits;  // the row: bf16 patterns widened, or float32 patterns
  bool float32 = false;        // bits are float32 patterns (the logprob)
  uint64_t context_hash = 0;   // attention: hash of the K/V rows the query attends to
};

class TraceSink {
 public:
  void record(TraceEntry entry) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(entry));
  }
  // Entries in pipeline order: layer, then op order, then position, then rank.
  std::vector<TraceEntry> sorted() const;

 private:
  mutable std::mutex mu_;
  std::vector<TraceEntry> entries_;
};

// Position of an op in the pipeline (for sorting); unknown ops sort last.
int op_order(const std::string& op);

}  // namespace bih
