// Tests of the collectives' order models (models/comm/reduce_order.hpp), bitwise.
//
// The crafted values below use bf16's 8-bit significand: at 1.0 the spacing is 2^-7, so
// 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7 and rounds to even, i.e. to 1.0. Adding
// three 2^-8 to 1.0 one at a time therefore loses all of them, while summing the small ones first
// (3 * 2^-8) keeps them: that is the order dependence TP>=3 exposes and TP=2 cannot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "models/bf16.hpp"
#include "models/comm/reduce_order.hpp"
#include "test_util.hpp"

namespace bih::test_reduce_order {
namespace {

using testing::pointers;
using testing::random_bf16;

constexpr uint16_t kBitsOne = 0x3F80;         // 1.0
constexpr uint16_t kBitsOnePlus2m7 = 0x3F81;  // 1 + 2^-7 = 1.0078125
constexpr uint16_t kBitsOnePlus2m6 = 0x3F82;  // 1 + 2^-6 = 1.015625
const bf16 kOne = to_bf16(1.0f);
const bf16 kTiny = to_bf16(0x1p-8f);  // 2^-8, exact in bf16

TEST(ReduceOrderTest, CraftedConstantsAreWhatTheCommentsSay) {
  EXPECT_EQ(kOne.bits, kBitsOne);
  EXPECT_EQ(to_float(kTiny), 0.00390625f);
  EXPECT_EQ(to_bf16(1.0078125f).bits, kBitsOnePlus2m7);
  EXPECT_EQ(to_bf16(1.015625f).bits, kBitsOnePlus2m6);
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f).bits, kBitsOne);  // tie -> even
}

TEST(ReduceOrderTest, ChainsFollowTheDesignTable) {
  // ring reduce_scatter: block d starts at the rank after d and d adds last.
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::ring, 4, 0), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::ring, 4, 1), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::ring, 4, 3), (std::vector<int>{0, 1, 2, 3}));
  // With ring 0-2-1-3, rank 2 sits at position 1: the chain walks positions 2, 3, 0, 1.
  const std::vector<int> ring{0, 2, 1, 3};
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::ring, 4, 2, {.ring = ring}),
            (std::vector<int>{1, 3, 0, 2}));
  // ring all_reduce of 10 elements over 4 ranks: chunks of ceil(10/4) = 3: [0,3) [3,6) [6,9) [9].
  EXPECT_EQ(ring_chunk_size(10, 4), 3u);
  EXPECT_EQ(all_reduce_chain(ReduceOrder::ring, 4, 10, 2), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(all_reduce_chain(ReduceOrder::ring, 4, 10, 3), (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(all_reduce_chain(ReduceOrder::ring, 4, 10, 9), (std::vector<int>{0, 1, 2, 3}));
  // Chunk k ends at ring *position* k: with ring 0-2-1-3, chunk 1 ends at rank 2.
  EXPECT_EQ(all_reduce_chain(ReduceOrder::ring, 4, 4, 1, {.ring = ring}),
            (std::vector<int>{1, 3, 0, 2}));
  // tree and fixed ignore size and owner; arrival is the arrival order.
  for (size_t count : {4u, 10u, 1000u}) {
    EXPECT_EQ(all_reduce_chain(ReduceOrder::tree, 4, count, 3), (std::vector<int>{3, 2, 1, 0}));
    EXPECT_EQ(all_reduce_chain(ReduceOrder::fixed, 4, count, 3), (std::vector<int>{0, 1, 2, 3}));
  }
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::tree, 4, 1), (std::vector<int>{3, 2, 1, 0}));
  const std::vector<int> arrival{2, 0, 3, 1};
  EXPECT_EQ(reduce_scatter_chain(ReduceOrder::arrival, 4, 1, {.arrival = arrival}), arrival);
  EXPECT_EQ(all_reduce_chain(ReduceOrder::arrival, 4, 7, 6, {.arrival = arrival}), arrival);
}

TEST(ReduceOrderTest, RingAllReduceOfWholeChunksMatchesReduceScatterBlocks) {
  // NCCL's ring all_reduce is a reduce_scatter followed by an all_gather: chunk k of a message of
  // n*c elements is reduced exactly like the reduce_scatter block of the rank at ring position k.
  const std::vector<int> ring{3, 0, 2, 1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(
        all_reduce_chain(ReduceOrder::ring, 4, 4 * 5, static_cast<size_t>(k) * 5, {.ring = ring}),
        reduce_scatter_chain(ReduceOrder::ring, 4, ring[k], {.ring = ring}));
  }
}

TEST(ReduceOrderTest, RingReduceScatterDependsOnWhichRankOwnsTheTokenAtTp4) {
  // SP at TP=4: [tokens=8, hidden=16] padded rows, each rank owns 2 rows (count = 2*16). The same
  // token (same 4 per-rank partial sums) is placed at every batch row in turn.
  constexpr int kRanks = 4, kRowsPerRank = 2, kHidden = 16, kTokens = kRanks * kRowsPerRank;
  constexpr size_t kCount = kRowsPerRank * kHidden;
  const bf16 token_partials[kRanks] = {kOne, kTiny, kTiny, kTiny};

  std::map<ReduceOrder, std::set<uint16_t>> bits_seen;
  std::map<ReduceOrder, std::vector<uint16_t>> bits_by_owner;
  for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::fixed, ReduceOrder::tree}) {
    for (int row = 0; row < kTokens; ++row) {
      std::vector<std::vector<bf16>> inputs;  // [rank][tokens * hidden]
      for (int r = 0; r < kRanks; ++r) {
        inputs.push_back(random_bf16(kTokens * kHidden, 100 + r));  // the other tokens
        for (int h = 0; h < kHidden; ++h) inputs[r][row * kHidden + h] = token_partials[r];
      }
      const int owner = row / kRowsPerRank;
      std::vector<bf16> out(kCount);
      reduce_scatter_block(order, pointers(inputs), kCount, owner, {}, out.data());
      const size_t local_row = row % kRowsPerRank;
      for (int h = 0; h < kHidden; ++h) {
        // Every hidden element of the token carries the same partials: same bits.
        ASSERT_EQ(out[local_row * kHidden + h].bits, out[local_row * kHidden].bits);
      }
      bits_seen[order].insert(out[local_row * kHidden].bits);
      if (row % kRowsPerRank == 0) bits_by_owner[order].push_back(out[local_row * kHidden].bits);
    }
  }
  // Hand-computed ring results (x0 = 1, x1 = x2 = x3 = 2^-8, rounding after every hop):
  //  owner 0, chain 1,2,3,0: 2^-8+2^-8 = 2^-7; +2^-8 = 3*2^-8; +1 = 1+1.5*2^-7, a tie -> even:
  //           1 + 2^-6 (0x3F82).
  //  owner 1, chain 2,3,0,1: 2^-7; +1 = 1+2^-7 (exact); +2^-8 = 1+1.5*2^-7 -> 1+2^-6 (0x3F82).
  //  owner 2, chain 3,0,1,2: 2^-8+1 = tie -> 1; +2^-8 -> 1; +2^-8 -> 1 (0x3F80).
  //  owner 3, chain 0,1,2,3: 1+2^-8 -> 1, and twice more -> 1 (0x3F80).
  EXPECT_EQ(bits_by_owner[ReduceOrder::ring],
            (std::vector<uint16_t>{kBitsOnePlus2m6, kBitsOnePlus2m6, kBitsOne, kBitsOne}));
  EXPECT_EQ(bits_seen[ReduceOrder::ring].size(), 2u);
  // fixed: fp32 1 + 3*2^-8 = 1.01171875 exactly, rounded once (a tie) -> 1 + 2^-6, every row.
  EXPECT_EQ(bits_seen[ReduceOrder::fixed], (std::set<uint16_t>{kBitsOnePlus2m6}));
  // tree: chain 3,2,1,0 keeps the small ones together -> 1 + 2^-6, every row.
  EXPECT_EQ(bits_seen[ReduceOrder::tree], (std::set<uint16_t>{kBitsOnePlus2m6}));
}

TEST(ReduceOrderTest, FixedRoundsOnceWhileChainsRoundEveryHop) {
  // x0 = 1, x1..x3 = 2^-9. fp32: 1 + 3*2^-9 = 1 + 0.75*2^-7 -> rounds once to 1 + 2^-7.
  // ring owner 3 (chain 0,1,2,3): 1 + 2^-9 is below the half-way point -> 1, three times -> 1.
  const bf16 small = to_bf16(0x1p-9f);
  std::vector<std::vector<bf16>> inputs{{kOne}, {small}, {small}, {small}};
  for (auto& v : inputs) v.resize(4, v[0]);  // [n * count], count = 1, all blocks alike
  bf16 fixed_out, ring_out;
  reduce_scatter_block(ReduceOrder::fixed, pointers(inputs), 1, 3, {}, &fixed_out);
  reduce_scatter_block(ReduceOrder::ring, pointers(inputs), 1, 3, {}, &ring_out);
  EXPECT_EQ(fixed_out.bits, kBitsOnePlus2m7);
  EXPECT_EQ(ring_out.bits, kBitsOne);
}

TEST(ReduceOrderTest, TwoRanksAllOrdersAgreeBitwise) {
  // A two-term sum rounds once whatever the order (a+b == b+a in IEEE), so at TP=2 ring, tree
  // and fixed must be indistinguishable: the reason ordering bugs hide until TP>=3.
  uint32_t seed = 1;
  for (size_t count : {1u, 2u, 3u, 7u, 64u, 255u, 1000u, 4097u}) {
    std::vector<std::vector<bf16>> rs_inputs{random_bf16(2 * count, seed++),
                                             random_bf16(2 * count, seed++)};
    for (int owner = 0; owner < 2; ++owner) {
      std::vector<bf16> ring(count), tree(count), fixed(count);
      reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), count, owner, {}, ring.data());
      reduce_scatter_block(ReduceOrder::tree, pointers(rs_inputs), count, owner, {}, tree.data());
      reduce_scatter_block(ReduceOrder::fixed, pointers(rs_inputs), count, owner, {}, fixed.data());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(ring[i].bits, fixed[i].bits) << "count " << count << " owner " << owner;
        ASSERT_EQ(tree[i].bits, fixed[i].bits) << "count " << count << " owner " << owner;
      }
    }
    std::vector<std::vector<bf16>> ar_inputs{random_bf16(count, seed++),
                                             random_bf16(count, seed++)};
    std::vector<bf16> ring(count), tree(count), fixed(count);
    all_reduce_range(ReduceOrder::ring, pointers(ar_inputs), count, 0, count, {}, ring.data());
    all_reduce_range(ReduceOrder::tree, pointers(ar_inputs), count, 0, count, {}, tree.data());
    all_reduce_range(ReduceOrder::fixed, pointers(ar_inputs), count, 0, count, {}, fixed.data());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(ring[i].bits, fixed[i].bits) << "count " << count << " element " << i;
      ASSERT_EQ(tree[i].bits, fixed[i].bits) << "count " << count << " element " << i;
    }
  }
}

TEST(ReduceOrderTest, TwoNegativeZerosSumToNegativeZeroInEveryOrder) {
  // -0 + -0 = -0 in IEEE; fixed starts from rank 0's value (not +0.f), so it agrees too.
  const bf16 negative_zero{0x8000};
  std::vector<std::vector<bf16>> inputs{{negative_zero}, {negative_zero}};
  for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
    bf16 out{};
    all_reduce_range(order, pointers(inputs), 1, 0, 1, {}, &out);
    EXPECT_EQ(out.bits, 0x8000) << to_string(order);
  }
}

TEST(ReduceOrderTest, RingAllReduceDependsOnMessageSizeTreeDoesNot) {
  // Element 2 carries x0 = 1, x1..x3 = 2^-8 in messages of 4 and of 12 elements (n = 4).
  //  4 elements: chunk size 1, element 2 in chunk 2: chain 3,0,1,2 -> 1 (see the owner-2 case
  //              above), 0x3F80.
  // 12 elements: chunk size 3, element 2 in chunk 0: chain 1,2,3,0 -> 1 + 2^-6, 0x3F82.
  // tree: chain 3,2,1,0 at both sizes -> 1 + 2^-6.
  constexpr size_t kElement = 2;
  std::map<ReduceOrder, std::vector<uint16_t>> bits_by_size;
  for (size_t count : {4u, 12u}) {
    std::vector<std::vector<bf16>> inputs;
    for (int r = 0; r < 4; ++r) {
      inputs.push_back(random_bf16(count, 7 + r));
      inputs[r][kElement] = r == 0 ? kOne : kTiny;
    }
    for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree}) {
      std::vector<bf16> out(count);
      all_reduce_range(order, pointers(inputs), count, 0, count, {}, out.data());
      bits_by_size[order].push_back(out[kElement].bits);
    }
  }
  EXPECT_EQ(bits_by_size[ReduceOrder::ring], (std::vector<uint16_t>{kBitsOne, kBitsOnePlus2m6}));
  EXPECT_EQ(bits_by_size[ReduceOrder::tree],
            (std::vector<uint16_t>{kBitsOnePlus2m6, kBitsOnePlus2m6}));
}

TEST(ReduceOrderTest, RingOrderPermutationChangesTheResultWhereTheChainChanges) {
  // x0 = 1, x1..x3 = 2^-8; owners' chains under identity vs ring 0-2-1-3:
  //  owner 0: 1,2,3,0 vs 2,1,3,0 (small ones first either way) -> 1+2^-6 both.
  //  owner 1: 2,3,0,1 vs 3,0,2,1: the second adds 1 at hop 2 -> 1+2^-8 = tie -> 1, then stays 1.
  //  owner 2: 3,0,1,2 vs 1,3,0,2: 2^-7 + 1 = 1+2^-7; + 2^-8 -> tie -> 1+2^-6.
  //  owner 3: 0,1,2,3 vs 0,2,1,3 -> 1 both.
  std::vector<std::vector<bf16>> inputs{{kOne}, {kTiny}, {kTiny}, {kTiny}};
  for (auto& v : inputs) v.resize(4, v[0]);
  const std::vector<int> ring{0, 2, 1, 3};
  std::vector<uint16_t> identity_bits, permuted_bits;
  for (int owner = 0; owner < 4; ++owner) {
    bf16 a, b, fixed_a, fixed_b;
    reduce_scatter_block(ReduceOrder::ring, pointers(inputs), 1, owner, {}, &a);
    reduce_scatter_block(ReduceOrder::ring, pointers(inputs), 1, owner, {.ring = ring}, &b);
    identity_bits.push_back(a.bits);
    permuted_bits.push_back(b.bits);
    // fixed and tree do not look at the ring.
    reduce_scatter_block(ReduceOrder::fixed, pointers(inputs), 1, owner, {}, &fixed_a);
    reduce_scatter_block(ReduceOrder::fixed, pointers(inputs), 1, owner, {.ring = ring}, &fixed_b);
    EXPECT_EQ(fixed_a.bits, fixed_b.bits);
  }
  EXPECT_EQ(identity_bits,
            (std::vector<uint16_t>{kBitsOnePlus2m6, kBitsOnePlus2m6, kBitsOne, kBitsOne}));
  EXPECT_EQ(permuted_bits,
            (std::vector<uint16_t>{kBitsOnePlus2m6, kBitsOne, kBitsOnePlus2m6, kBitsOne}));
}

TEST(ReduceOrderTest, ArrivalChainsInTheGivenOrder) {
  std::vector<std::vector<bf16>> inputs{{kOne}, {kTiny}, {kTiny}, {kTiny}};
  const std::vector<int> one_first{0, 1, 2, 3}, one_last{1, 2, 3, 0};
  bf16 a, b;
  all_reduce_range(ReduceOrder::arrival, pointers(inputs), 1, 0, 1, {.arrival = one_first}, &a);
  all_reduce_range(ReduceOrder::arrival, pointers(inputs), 1, 0, 1, {.arrival = one_last}, &b);
  EXPECT_EQ(a.bits, kBitsOne);
  EXPECT_EQ(b.bits, kBitsOnePlus2m6);
}

TEST(ReduceOrderTest, SubRangesAndInPlaceOutputsMatchTheWholeMessage) {
  // The emulated group splits an all_reduce into per-rank slices and allows in-place outputs;
  // neither may change a bit. 3001 elements over 3 ranks: chunks of 1001, tiles of 512.
  constexpr size_t kCount = 3001;
  const std::vector<int> ring{2, 0, 1};
  std::vector<std::vector<bf16>> inputs{random_bf16(kCount, 1), random_bf16(kCount, 2),
                                        random_bf16(kCount, 3)};
  for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
    std::vector<bf16> whole(kCount);
    all_reduce_range(order, pointers(inputs), kCount, 0, kCount, {.ring = ring}, whole.data());
    std::vector<bf16> pieces(kCount);
    const size_t cuts[] = {0, 1, 999, 1001, 1002, 2500, kCount};
    for (size_t c = 0; c + 1 < std::size(cuts); ++c) {
      all_reduce_range(order, pointers(inputs), kCount, cuts[c], cuts[c + 1], {.ring = ring},
                       pieces.data() + cuts[c]);
    }
    auto in_place = inputs;  // rank 1's buffer receives the sum
    all_reduce_range(order, pointers(in_place), kCount, 0, kCount, {.ring = ring},
                     in_place[1].data());
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(pieces[i].bits, whole[i].bits) << to_string(order) << " element " << i;
      ASSERT_EQ(in_place[1][i].bits, whole[i].bits) << to_string(order) << " element " << i;
    }
  }
  // reduce_scatter in NCCL's in-place layout: out = in[owner] + owner * count.
  constexpr size_t kBlock = 700;
  std::vector<std::vector<bf16>> rs_inputs{random_bf16(3 * kBlock, 4), random_bf16(3 * kBlock, 5),
                                           random_bf16(3 * kBlock, 6)};
  for (int owner = 0; owner < 3; ++owner) {
    std::vector<bf16> expected(kBlock);
    reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), kBlock, owner, {},
                         expected.data());
    auto in_place = rs_inputs;
    reduce_scatter_block(ReduceOrder::ring, pointers(in_place), kBlock, owner, {},
                         in_place[owner].data() + owner * kBlock);
    for (size_t i = 0; i < kBlock; ++i) {
      ASSERT_EQ(in_place[owner][owner * kBlock + i].bits, expected[i].bits);
    }
  }
}

TEST(ReduceOrderTest, RejectsBadSequencesAndRanges) {
  std::vector<std::vector<bf16>> inputs{{kOne, kOne}, {kOne, kOne}, {kOne, kOne}};
  bf16 out[2];
  const std::vector<int> not_a_permutation{0, 0, 1}, too_short{0, 1};
  EXPECT_THROW(reduce_scatter_block(ReduceOrder::ring, pointers(inputs), 1, 0,
                                    {.ring = not_a_permutation}, out),
               std::invalid_argument);
  EXPECT_THROW(
      all_reduce_range(ReduceOrder::ring, pointers(inputs), 2, 0, 2, {.ring = too_short}, out),
      std::invalid_argument);
  // arrival needs an arrival order.
  EXPECT_THROW(all_reduce_range(ReduceOrder::arrival, pointers(inputs), 2, 0, 2, {}, out),
               std::invalid_argument);
  EXPECT_THROW(reduce_scatter_block(ReduceOrder::tree, pointers(inputs), 1, 3, {}, out),
               std::invalid_argument);
  EXPECT_THROW(all_reduce_range(ReduceOrder::tree, pointers(inputs), 2, 1, 3, {}, out),
               std::invalid_argument);
  EXPECT_THROW(all_reduce_chain(ReduceOrder::ring, 3, 2, 2), std::invalid_argument);
}

}  // namespace
}  // namespace bih::test_reduce_order
