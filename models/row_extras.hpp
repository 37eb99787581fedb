// row_extras.hpp: what a logits row says beyond the sampled token (compare.top_k, row_digest).
//
// The engine reports, on request, the k best tokens of a step's row with their log-probabilities
// and a 64-bit digest of the whole row, in decode and when scoring a sequence in one prefill
// (Engine::score). Both are computed on the host from the bf16 logits the backend returns, the
// same way for every backend, so that two runs compare only their logits, never this code.
#pragma once

#include <cstdint>
#include <vector>

#include "models/bf16.hpp"

namespace bih {

// Most tokens compare.top_k may ask for.
inline constexpr int kMaxTopK = 20;

// What a caller wants per step besides the token and its logprob.
struct RowExtras {
  int top_k = 0;            // 0: none
  bool row_digest = false;  // the digest of the row
  bool any() const { return top_k > 0 || row_digest; }
};

// The row's log-softmax normaliser, in greedy_sample's own order (max, then the sum of exp(x-max)
// over the vocabulary in id order): log_softmax(j) = logit(j) - normaliser.
float log_softmax_normaliser(const bf16* row, int vocab_size);

// log_softmax of token `token` in the row, bit-identical to greedy_sample's for its argmax.
float token_logprob(const bf16* row, int vocab_size, int32_t token);

// The first id of the row's largest logit (ties to the lowest id, as greedy_sample).
int32_t row_argmax(const bf16* row, int vocab_size);

// The k best ids of the row (by logit, descending; ties by lower id) and their log_softmax values.
void row_top_k(const bf16* row, int vocab_size, int k, std::vector<int32_t>& ids,
               std::vector<float>& logprobs);

// FNV-1a 64 over the row's logits as fp32 bit patterns (bf16 widened), in id order, one 32-bit
// word at a time: h = (h ^ word) * 0x100000001b3, from 0xcbf29ce484222325. Equal digests: equal
// rows (up to a 2^-64 collision); a single flipped bit anywhere changes it.
uint64_t row_digest(const bf16* row, int vocab_size);

}  // namespace bih
