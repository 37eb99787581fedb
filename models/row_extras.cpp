// row_extras.cpp: top-k, token logprob and digest of one logits row (row_extras.hpp).
#include "models/row_extras.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace bih {

float log_softmax_normaliser(const bf16* row, int vocab_size) {
  if (vocab_size <= 0) throw std::invalid_argument("log_softmax_normaliser: empty row");
  // The same loops as cpu::greedy_sample, so the CPU's values match its sampled logprob bitwise.
  float best_value = to_float(row[0]);
  for (int j = 1; j < vocab_size; ++j) best_value = std::max(best_value, to_float(row[j]));
  float sum_exp = 0.0f;
  for (int j = 0; j < vocab_size; ++j) sum_exp += std::exp(to_float(row[j]) - best_value);
  return best_value + std::log(sum_exp);
}

float token_logprob(const bf16* row, int vocab_size, int32_t token) {
  if (token < 0 || token >= vocab_size) throw std::out_of_range("token_logprob: token id");
  return to_float(row[token]) - log_softmax_normaliser(row, vocab_size);
}

int32_t row_argmax(const bf16* row, int vocab_size) {
  int32_t best = 0;
  float best_value = to_float(row[0]);
  for (int j = 1; j < vocab_size; ++j) {
    if (to_float(row[j]) > best_value) {  // strict: a tie keeps the lower id
      best = j;
      best_value = to_float(row[j]);
    }
  }
  return best;
}

void row_top_k(const bf16* row, int vocab_size, int k, std::vector<int32_t>& ids,
               std::vector<float>& logprobs) {
  k = std::clamp(k, 0, vocab_size);
  std::vector<int32_t> order(vocab_size);
  std::iota(order.begin(), order.end(), 0);
  const auto better = [row](int32_t a, int32_t b) {
    const float va = to_float(row[a]);
    const float vb = to_float(row[b]);
    return va != vb ? va > vb : a < b;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  const float normaliser = log_softmax_normaliser(row, vocab_size);
  ids.assign(order.begin(), order.begin() + k);
  logprobs.clear();
  for (int32_t id : ids) logprobs.push_back(to_float(row[id]) - normaliser);
}

uint64_t row_digest(const bf16* row, int vocab_size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int j = 0; j < vocab_size; ++j) {
    h = (h ^ (static_cast<uint32_t>(row[j].bits) << 16)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace bih
