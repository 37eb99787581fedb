// reduce_order.cpp: the order models of reduce_order.hpp.
#include "models/comm/reduce_order.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/tree_sum.hpp"

namespace bih {
namespace {

using Chain = std::array<int, kMaxRanks>;

void check_rank_count(int n) {
  if (n < 1 || n > kMaxRanks) {
    throw std::invalid_argument("reduce order: rank count " + std::to_string(n) +
                                " is outside 1.." + std::to_string(kMaxRanks));
  }
}

// Throws unless `seq` (when non-empty, or always when `required`) is a permutation of 0..n-1.
void check_permutation(std::span<const int> seq, int n, bool required, const char* what) {
  if (seq.empty() && !required) return;
  if (static_cast<int>(seq.size()) != n) {
    throw std::invalid_argument(std::string("reduce order: ") + what + " has " +
                                std::to_string(seq.size()) + " entries; expected " +
                                std::to_string(n) + " (a permutation of 0.." +
                                std::to_string(n - 1) + ")");
  }
  uint64_t seen = 0;
  for (int r : seq) {
    if (r < 0 || r >= n || (seen >> r & 1u)) {
      throw std::invalid_argument(std::string("reduce order: ") + what +
                                  " is not a permutation of 0.." + std::to_string(n - 1));
    }
    seen |= uint64_t{1} << r;
  }
}

int ring_rank_at(std::span<const int> ring, int position) {
  return ring.empty() ? position : ring[position];
}

int ring_position_of(std::span<const int> ring, int rank) {
  if (ring.empty()) return rank;
  return static_cast<int>(std::find(ring.begin(), ring.end(), rank) - ring.begin());
}

// The ring chain whose last adder sits at ring position `last_position`: it starts one position
// further and walks the ring, as NCCL's ring passes a chunk from neighbour to neighbour.
void ring_chain(int n, int last_position, std::span<const int> ring, Chain& chain) {
  for (int j = 0; j < n; ++j) chain[j] = ring_rank_at(ring, (last_position + 1 + j) % n);
}

// Fills chain[0..n) for any order but ring (whose chain depends on the collective).
void fixed_chain(ReduceOrder order, int n, std::span<const int> arrival, Chain& chain) {
  switch (order) {
    case ReduceOrder::tree:  // x[n-1] first, then n-2 down to 0
      for (int j = 0; j < n; ++j) chain[j] = n - 1 - j;
      return;
    case ReduceOrder::fixed:
      for (int j = 0; j < n; ++j) chain[j] = j;
      return;
    case ReduceOrder::arrival:
      for (int j = 0; j < n; ++j) chain[j] = arrival[j];
      return;
    case ReduceOrder::ring:
      break;
  }
  throw std::logic_error("fixed_chain: ring has no size-independent chain");
}

void check_sequences(ReduceOrder order, int n, const RankSequences& sequences) {
  check_rank_count(n);
  check_permutation(sequences.ring, n, false, "ring order");
  if (order == ReduceOrder::arrival) {
    check_permutation(sequences.arrival, n, true, "arrival order");
  }
}

// out[i] = sum over j of inputs[chain[j]][offset + i], i in [0, len), in the order's arithmetic.
// Works in tiles (inputs read rank by rank, contiguous, so the inner loops vectorize); each tile
// is read completely before its output is written, which is what makes in-place use safe.
void sum_along_chain(ReduceOrder order, std::span<const bf16* const> inputs, const Chain& chain,
                     int n, size_t offset, size_t len, bf16* out) {
  constexpr size_t kTile = 512;
  float acc[kTile];
  for (size_t tile = 0; tile < len; tile += kTile) {
    const size_t tile_len = std::min(kTile, len - tile);
    const bf16* first = inputs[chain[0]] + offset + tile;
    for (size_t i = 0; i < tile_len; ++i) acc[i] = to_float(first[i]);
    if (order == ReduceOrder::fixed) {
      // fp32 accumulation, rank order, one rounding at the end.
      for (int j = 1; j < n; ++j) {
        const bf16* x = inputs[chain[j]] + offset + tile;
        for (size_t i = 0; i < tile_len; ++i) acc[i] += to_float(x[i]);
      }
    } else {
      // Every hop stores a bf16 partial sum, as a ring/tree step sends bf16 to its neighbour.
      for (int j = 1; j < n; ++j) {
        const bf16* x = inputs[chain[j]] + offset + tile;
        for (size_t i = 0; i < tile_len; ++i) acc[i] = round_bf16(acc[i] + to_float(x[i]));
      }
    }
    for (size_t i = 0; i < tile_len; ++i) out[tile + i] = to_bf16(acc[i]);
  }
}

void build_reduce_scatter_chain(ReduceOrder order, int n, int owner, const RankSequences& sequences,
                                Chain& chain) {
  check_sequences(order, n, sequences);
  if (owner < 0 || owner >= n) {
    throw std::invalid_argument("reduce_scatter: owner rank " + std::to_string(owner) +
                                " is outside 0.." + std::to_string(n - 1));
  }
  if (order == ReduceOrder::ring) {
    ring_chain(n, ring_position_of(sequences.ring, owner), sequences.ring, chain);
  } else {
    fixed_chain(order, n, sequences.arrival, chain);
  }
}

}  // namespace

size_t ring_chunk_size(size_t message_count, int n) {
  check_rank_count(n);
  const size_t ranks = static_cast<size_t>(n);
  return (message_count + ranks - 1) / ranks;
}

std::vector<int> reduce_scatter_chain(ReduceOrder order, int n, int owner,
                                      const RankSequences& sequences) {
  Chain chain{};
  build_reduce_scatter_chain(order, n, owner, sequences, chain);
  return std::vector<int>(chain.begin(), chain.begin() + n);
}

std::vector<int> all_reduce_chain(ReduceOrder order, int n, size_t message_count, size_t index,
                                  const RankSequences& sequences) {
  check_sequences(order, n, sequences);
  if (index >= message_count) {
    throw std::invalid_argument("all_reduce: element " + std::to_string(index) +
                                " is outside a message of " + std::to_string(message_count));
  }
  Chain chain{};
  if (order == ReduceOrder::ring) {
    const int chunk = static_cast<int>(index / ring_chunk_size(message_count, n));
    ring_chain(n, chunk, sequences.ring, chain);
  } else {
    fixed_chain(order, n, sequences.arrival, chain);
  }
  return std::vector<int>(chain.begin(), chain.begin() + n);
}

void reduce_scatter_block(ReduceOrder order, std::span<const bf16* const> rank_inputs, size_t count,
                          int owner, const RankSequences& sequences, bf16* out) {
  const int n = static_cast<int>(rank_inputs.size());
  Chain chain{};
  build_reduce_scatter_chain(order, n, owner, sequences, chain);
  sum_along_chain(order, rank_inputs, chain, n, static_cast<size_t>(owner) * count, count, out);
}

void all_reduce_range(ReduceOrder order, std::span<const bf16* const> rank_inputs,
                      size_t message_count, size_t begin, size_t end,
                      const RankSequences& sequences, bf16* out) {
  const int n = static_cast<int>(rank_inputs.size());
  check_sequences(order, n, sequences);
  if (begin > end || end > message_count) {
    throw std::invalid_argument("all_reduce: range [" + std::to_string(begin) + ", " +
                                std::to_string(end) + ") is outside a message of " +
                                std::to_string(message_count));
  }
  Chain chain{};
  if (order != ReduceOrder::ring) {
    fixed_chain(order, n, sequences.arrival, chain);
    sum_along_chain(order, rank_inputs, chain, n, begin, end - begin, out);
    return;
  }
  // Ring: walk the range chunk by chunk; chunk k's sum ends at ring position k.
  const size_t chunk_size = ring_chunk_size(message_count, n);
  for (size_t i = begin; i < end;) {
    const size_t chunk = i / chunk_size;
    const size_t chunk_end = std::min(end, (chunk + 1) * chunk_size);
    ring_chain(n, static_cast<int>(chunk), sequences.ring, chain);
    sum_along_chain(order, rank_inputs, chain, n, i, chunk_end - i, out + (i - begin));
    i = chunk_end;
  }
}

void tree_f32_sum(std::span<const float* const> rank_inputs, size_t offset, size_t count,
                  bf16* out) {
  const int n = static_cast<int>(rank_inputs.size());
  if (!tp_invariant_tp_ok(n)) {
    throw std::invalid_argument("tree fp32 collective: " + std::to_string(n) +
                                " ranks; the chunk tree needs 1, 2, 4 or 8");
  }
  float values[kTpInvariantChunks];
  for (size_t i = 0; i < count; ++i) {
    for (int r = 0; r < n; ++r) values[r] = rank_inputs[r][offset + i];
    out[i] = to_bf16(pairwise_tree_sum(values, n));
  }
}

std::string describe_emulated(const CollectiveOrders& orders, const std::vector<int>& ring_order) {
  std::string s = "emulated(ar=" + to_string(orders.all_reduce) +
                  ",rs=" + to_string(orders.reduce_scatter) + ",ag=" + to_string(orders.all_gather);
  bool identity = true;
  for (size_t i = 0; i < ring_order.size(); ++i) identity = identity && ring_order[i] == int(i);
  if (!identity) {
    s += ",ring=";
    for (size_t i = 0; i < ring_order.size(); ++i) {
      if (i > 0) s += '-';
      s += std::to_string(ring_order[i]);
    }
  }
  return s + ")";
}

}  // namespace bih
