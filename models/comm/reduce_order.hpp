// reduce_order.hpp: the summation-order models of the emulated collectives, as pure functions.
//
// DESIGN.md, "Collectives and their summation order", states for each ReduceOrder the order in
// which the ranks' bf16 values of one element are summed. These functions compute exactly that,
// from all ranks' inputs at once, with no threads: the emulated communicator calls them between
// its barriers, and tests and the localizer call them directly to predict a collective's bits.
//
// Every order except `fixed` is a *chain*: acc = value of chain[0]; then for each next rank,
// acc = round_bf16(acc + value). `fixed` sums in fp32 in rank order 0..n-1 and rounds once; it
// starts from rank 0's value rather than from 0.f, which only matters for a sum of all -0.0 (0.f
// would make it +0.0) and keeps TP=2 `fixed` bitwise equal to the two-term chains.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/knobs.hpp"

namespace bih {

// The order model of each collective of a group (a scenario's ar=, rs=, ag= knobs).
struct CollectiveOrders {
  ReduceOrder all_reduce = ReduceOrder::tree;
  ReduceOrder reduce_scatter = ReduceOrder::ring;
  ReduceOrder all_gather = ReduceOrder::ring;  // numbers never depend on it: a bitwise copy
};

// Rank sequences some orders need besides the rank count.
struct RankSequences {
  // ring[position] = rank; empty means 0..n-1. Must be a permutation of 0..n-1.
  std::span<const int> ring = {};
  // arrival[k] = the k-th rank to arrive at the collective. Needed only by ReduceOrder::arrival.
  std::span<const int> arrival = {};
};

// Largest group the models accept (rank sets are validated with a 64-bit mask).
inline constexpr int kMaxRanks = 64;

// Size of each of the n contiguous chunks a ring all_reduce splits a message of message_count
// elements into: ceil(message_count / n). Element i lies in chunk i / ring_chunk_size(...).
size_t ring_chunk_size(size_t message_count, int n);

// How an emulated group names itself in reports: "emulated(ar=tree,rs=ring,ag=ring)", plus
// ",ring=0-2-1-3" when the ring is not 0..n-1. Shared by the CPU and the GPU emulation.
std::string describe_emulated(const CollectiveOrders& orders, const std::vector<int>& ring_order);

// The ranks in the order their values enter the sum of one element, chain[0] first.
// For `fixed` this is 0..n-1 (fp32 accumulation, one rounding); for the other orders bf16 rounding
// follows every add. Throws std::invalid_argument for a bad ring/arrival sequence or owner.
std::vector<int> reduce_scatter_chain(ReduceOrder order, int n, int owner,
                                      const RankSequences& sequences = {});
std::vector<int> all_reduce_chain(ReduceOrder order, int n, size_t message_count, size_t index,
                                  const RankSequences& sequences = {});

// One reduce_scatter output block. rank_inputs[r] points to rank r's input [n * count];
// out[count] = the elementwise sum over ranks of block `owner` ([owner*count, (owner+1)*count)).
// out may be rank_inputs[owner] + owner*count (NCCL's in-place layout); otherwise it must not
// overlap any input.
void reduce_scatter_block(ReduceOrder order, std::span<const bf16* const> rank_inputs, size_t count,
                          int owner, const RankSequences& sequences, bf16* out);

// Elements [begin, end) of an all_reduce of a message of message_count elements. rank_inputs[r]
// points to rank r's message [message_count]; out[end - begin] receives the sums. For `ring` an
// element's order depends on message_count (its chunk), not only on its index. out may alias
// rank_inputs[r] + begin for any r (each tile is read fully before it is written); no other
// overlap is allowed.
void all_reduce_range(ReduceOrder order, std::span<const bf16* const> rank_inputs,
                      size_t message_count, size_t begin, size_t end,
                      const RankSequences& sequences, bf16* out);

// kernels tp_invariant's fp32 collectives (Communicator::*_tree_f32): out[i] =
// to_bf16(pairwise_tree_sum over r of rank_inputs[r][offset + i]) for i in [0, count), the ranks
// in rank order (models/tree_sum.hpp). No order knob applies. Throws std::invalid_argument unless
// the rank count is 1, 2, 4 or 8. out must not overlap any input (they are fp32, it is bf16).
void tree_f32_sum(std::span<const float* const> rank_inputs, size_t offset, size_t count,
                  bf16* out);

}  // namespace bih
