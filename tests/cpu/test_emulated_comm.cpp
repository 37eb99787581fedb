// Tests of the emulated communicator (models/comm/emulated.hpp) with real threads as ranks:
// results must equal the pure order models bitwise, survive hundreds of back-to-back calls, vary
// with arrival order only for `arrival`, and never hang when a rank fails.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "models/bf16.hpp"
#include "models/comm/emulated.hpp"
#include "models/comm/reduce_order.hpp"
#include "test_util.hpp"

namespace bih::test_emulated_comm {
namespace {

using testing::pointers;
using testing::random_bf16;

using namespace std::chrono_literals;

constexpr uint16_t kBitsOne = 0x3F80;         // 1.0
constexpr uint16_t kBitsOnePlus2m6 = 0x3F82;  // 1 + 2^-6

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].bits != b[i].bits) return false;
  }
  return true;
}

// Runs body(comm, rank) on one thread per rank; each rank's failure text.
std::vector<std::string> run_ranks(EmulatedGroup& group,
                                   const std::function<void(Communicator&, int)>& body) {
  return testing::run_rank_threads(group.size(), [&](int r) { body(group.rank(r), r); });
}

// The ring orders each test covers for n ranks: identity, and for n >= 3 one that swaps 1 and 2.
std::vector<std::vector<int>> ring_orders_for(int n) {
  std::vector<std::vector<int>> orders{{}};
  if (n >= 3) {
    std::vector<int> swapped(n);
    for (int r = 0; r < n; ++r) swapped[r] = r;
    std::swap(swapped[1], swapped[2]);
    orders.push_back(swapped);
  }
  return orders;
}

TEST(EmulatedCommTest, MatchesThePureOrderModelsForEveryDeterministicOrder) {
  for (int n : {1, 2, 3, 4, 8}) {
    for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
      for (const std::vector<int>& ring : ring_orders_for(n)) {
        EmulatedGroup group(n, {order, order, ReduceOrder::ring}, ring);
        const std::vector<int>& resolved_ring = group.ring_order();
        const std::vector<size_t> ar_counts{1, static_cast<size_t>(n) + 1, 7, 1000, 4099};
        const std::vector<size_t> rs_counts{1, 5, 256};
        const std::vector<size_t> ag_counts{3, 100};
        // inputs[kind][size index][rank]
        auto make = [&](const std::vector<size_t>& counts, size_t per_rank_factor, uint32_t salt) {
          std::vector<std::vector<std::vector<bf16>>> all;
          for (size_t s = 0; s < counts.size(); ++s) {
            all.emplace_back();
            for (int r = 0; r < n; ++r) {
              all.back().push_back(
                  random_bf16(counts[s] * per_rank_factor, salt + 1000 * n + 100 * s + r));
            }
          }
          return all;
        };
        const auto ar_in = make(ar_counts, 1, 1);
        const auto rs_in = make(rs_counts, n, 2);
        const auto ag_in = make(ag_counts, 1, 3);
        // outputs[size index][rank]
        std::vector<std::vector<std::vector<bf16>>> ar_out(ar_counts.size()),
            rs_out(rs_counts.size()), ag_out(ag_counts.size());
        for (auto* outs : {&ar_out, &rs_out, &ag_out}) {
          for (auto& per_size : *outs) per_size.resize(n);
        }
        const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
          for (size_t s = 0; s < ar_counts.size(); ++s) {
            ar_out[s][r] = ar_in[s][r];
            comm.all_reduce(ar_out[s][r].data(), ar_counts[s]);
          }
          for (size_t s = 0; s < rs_counts.size(); ++s) {
            rs_out[s][r].resize(rs_counts[s]);
            comm.reduce_scatter(rs_in[s][r].data(), rs_out[s][r].data(), rs_counts[s]);
          }
          for (size_t s = 0; s < ag_counts.size(); ++s) {
            ag_out[s][r].resize(ag_counts[s] * n);
            comm.all_gather(ag_in[s][r].data(), ag_out[s][r].data(), ag_counts[s]);
          }
        });
        const std::string where = group.describe() + " n=" + std::to_string(n);
        for (int r = 0; r < n; ++r) ASSERT_EQ(failures[r], "") << where;
        const RankSequences sequences{.ring = resolved_ring};
        for (size_t s = 0; s < ar_counts.size(); ++s) {
          std::vector<bf16> expected(ar_counts[s]);
          all_reduce_range(order, pointers(ar_in[s]), ar_counts[s], 0, ar_counts[s], sequences,
                           expected.data());
          for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(same_bits(ar_out[s][r], expected))
                << where << " all_reduce count " << ar_counts[s] << " rank " << r;
          }
        }
        for (size_t s = 0; s < rs_counts.size(); ++s) {
          for (int r = 0; r < n; ++r) {
            std::vector<bf16> expected(rs_counts[s]);
            reduce_scatter_block(order, pointers(rs_in[s]), rs_counts[s], r, sequences,
                                 expected.data());
            ASSERT_TRUE(same_bits(rs_out[s][r], expected))
                << where << " reduce_scatter count " << rs_counts[s] << " rank " << r;
          }
        }
        for (size_t s = 0; s < ag_counts.size(); ++s) {
          std::vector<bf16> expected;
          for (int q = 0; q < n; ++q) {
            expected.insert(expected.end(), ag_in[s][q].begin(), ag_in[s][q].end());
          }
          for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(same_bits(ag_out[s][r], expected))
                << where << " all_gather count " << ag_counts[s] << " rank " << r;
          }
        }
      }
    }
  }
}

// Hundreds of back-to-back collectives with fresh data and changing sizes: a rank that runs ahead
// must never see a peer's input overwritten, nor overwrite a result a slow peer still copies.
void expect_stable_over_many_calls(int n, int iterations) {
  EmulatedGroup group(n, {ReduceOrder::ring, ReduceOrder::ring, ReduceOrder::ring},
                      ring_orders_for(n).back(), 10s);
  const RankSequences sequences{.ring = group.ring_order()};
  std::atomic<int> mismatches{0};
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    for (int it = 0; it < iterations; ++it) {
      const size_t count = 1 + (static_cast<size_t>(it) * 37) % 700;
      // Every rank rebuilds every rank's inputs (deterministic), to know the expected sums.
      std::vector<std::vector<bf16>> ar_inputs, rs_inputs;
      for (int q = 0; q < n; ++q) {
        ar_inputs.push_back(random_bf16(count, it * 131 + q));
        rs_inputs.push_back(random_bf16(count * n, it * 131 + 64 + q));
      }
      std::vector<bf16> ar_expected(count), rs_expected(count);
      all_reduce_range(ReduceOrder::ring, pointers(ar_inputs), count, 0, count, sequences,
                       ar_expected.data());
      reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), count, r, sequences,
                           rs_expected.data());

      // Two in-place all_reduces back to back (the second on the first's result), then
      // reduce_scatter (in place on odd iterations), then all_gather of its result.
      std::vector<bf16> data = ar_inputs[r];
      comm.all_reduce(data.data(), count);
      if (!same_bits(data, ar_expected)) ++mismatches;
      std::vector<bf16> twice = data;
      comm.all_reduce(twice.data(), count);
      std::vector<std::vector<bf16>> all_equal(n, ar_expected);
      std::vector<bf16> twice_expected(count);
      all_reduce_range(ReduceOrder::ring, pointers(all_equal), count, 0, count, sequences,
                       twice_expected.data());
      if (!same_bits(twice, twice_expected)) ++mismatches;

      std::vector<bf16> rs_buffer = rs_inputs[r];
      std::vector<bf16> rs_out(count);
      bf16* out = it % 2 ? rs_buffer.data() + static_cast<size_t>(r) * count : rs_out.data();
      comm.reduce_scatter(rs_buffer.data(), out, count);
      std::vector<bf16> got(out, out + count);
      if (!same_bits(got, rs_expected)) ++mismatches;

      std::vector<bf16> gathered(count * n);
      comm.all_gather(got.data(), gathered.data(), count);
      for (int q = 0; q < n; ++q) {
        std::vector<bf16> block_q(count);
        reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), count, q, sequences,
                             block_q.data());
        if (!std::equal(block_q.begin(), block_q.end(), gathered.begin() + q * count)) {
          ++mismatches;
        }
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(EmulatedCommTest, HundredsOfBackToBackCallsAreStableAtFourRanks) {
  expect_stable_over_many_calls(4, 300);
}

TEST(EmulatedCommTest, HundredsOfBackToBackCallsAreStableAtEightRanks) {
  expect_stable_over_many_calls(8, 120);
}

TEST(EmulatedCommTest, AllGatherConcatenatesInRankOrderAlsoInPlace) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 5;
  EmulatedGroup group(kRanks, {ReduceOrder::tree, ReduceOrder::ring, ReduceOrder::arrival});
  std::vector<std::vector<bf16>> out(kRanks, std::vector<bf16>(kRanks * kCount));
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    std::vector<bf16> in(kCount);
    for (size_t i = 0; i < kCount; ++i) in[i].bits = static_cast<uint16_t>(100 * r + i);
    comm.all_gather(in.data(), out[r].data(), kCount);
    // In place: the own block already sits in the output.
    std::vector<bf16> in_place(kRanks * kCount);
    std::copy(in.begin(), in.end(), in_place.begin() + r * kCount);
    comm.all_gather(in_place.data() + r * kCount, in_place.data(), kCount);
    if (!same_bits(in_place, out[r])) throw std::runtime_error("in-place all_gather differs");
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(failures[r], "");
    for (int q = 0; q < kRanks; ++q) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(out[r][q * kCount + i].bits, 100 * q + i) << "rank " << r;
      }
    }
  }
}

// Runs `trials` all_reduces of one element where rank 0 holds 1.0 and the others 2^-8: the sum
// is 1.0 when rank 0 enters the chain first or second and 1 + 2^-6 otherwise (see
// test_reduce_order.cpp). Returns the bits per trial; checks that all ranks agree within a call.
std::vector<uint16_t> one_element_sums(ReduceOrder all_reduce_order, int trials) {
  constexpr int kRanks = 4;
  EmulatedGroup group(kRanks, {all_reduce_order, ReduceOrder::ring, ReduceOrder::ring});
  std::vector<std::vector<uint16_t>> bits(kRanks, std::vector<uint16_t>(trials));
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    for (int t = 0; t < trials; ++t) {
      bf16 value = r == 0 ? to_bf16(1.0f) : to_bf16(0x1p-8f);
      comm.all_reduce(&value, 1);
      bits[r][t] = value.bits;
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "");
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(bits[r], bits[0]) << "rank " << r;
  return bits[0];
}

TEST(EmulatedCommTest, ArrivalOrderChangesBitsFromCallToCallTreeNever) {
  // Each rank sleeps a random 0-20 us before arriving, so rank 0 lands in the first half of the
  // chain about half the time; 400 trials all on one side would be a broken model, not bad luck.
  const std::vector<uint16_t> arrival = one_element_sums(ReduceOrder::arrival, 400);
  const std::set<uint16_t> arrival_seen(arrival.begin(), arrival.end());
  EXPECT_EQ(arrival_seen, (std::set<uint16_t>{kBitsOne, kBitsOnePlus2m6}));

  const std::vector<uint16_t> tree = one_element_sums(ReduceOrder::tree, 400);
  EXPECT_EQ(std::set<uint16_t>(tree.begin(), tree.end()), (std::set<uint16_t>{kBitsOnePlus2m6}));
}

TEST(EmulatedCommTest, AbortFromOneRankWakesTheOthers) {
  EmulatedGroup group(4, {});
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    bf16 value{};
    if (r == 0) {
      std::this_thread::sleep_for(50ms);  // let the peers block in the collective
      comm.abort("rank 0 crashed");
      comm.all_reduce(&value, 1);  // later calls throw too
    } else {
      comm.all_reduce(&value, 1);
    }
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(failures[r].rfind("aborted: ", 0), 0u) << "rank " << r << ": " << failures[r];
    EXPECT_NE(failures[r].find("rank 0 crashed"), std::string::npos) << failures[r];
  }
  EXPECT_TRUE(group.aborted());
}

TEST(EmulatedCommTest, WatchdogNamesTheCollectiveAndTheMissingRank) {
  EmulatedGroup group(4, {}, {}, 100ms);
  std::atomic<bool> others_done{false};
  std::string late_failure;
  const auto start = std::chrono::steady_clock::now();
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    std::vector<bf16> in(4 * 8), out(8);
    if (r == 3) {
      // Never calls until the others gave up; then its call must fail at once, not hang.
      while (!group.aborted()) std::this_thread::sleep_for(1ms);
      comm.reduce_scatter(in.data(), out.data(), 8);
      return;
    }
    comm.reduce_scatter(in.data(), out.data(), 8);
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(failures[r].find("watchdog"), std::string::npos) << failures[r];
    EXPECT_NE(failures[r].find("reduce_scatter"), std::string::npos) << failures[r];
    EXPECT_NE(failures[r].find("ranks that never arrived: 3"), std::string::npos) << failures[r];
  }
  EXPECT_EQ(failures[3].rfind("aborted: ", 0), 0u) << failures[3];
  EXPECT_LT(waited, 5s);
}

TEST(EmulatedCommTest, RanksDisagreeingOnTheCallAbortTheGroup) {
  EmulatedGroup group(3, {});
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    std::vector<bf16> data(8);
    comm.all_reduce(data.data(), r == 1 ? 8 : 4);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(failures[r].find("disagree"), std::string::npos) << "rank " << r << failures[r];
  }
}

TEST(EmulatedCommTest, SingleRankCollectivesAreCopies) {
  EmulatedGroup group(1, {ReduceOrder::arrival, ReduceOrder::ring, ReduceOrder::ring});
  Communicator& comm = group.rank(0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<bf16> data = random_bf16(33, 9), original = data, out(33);
  comm.all_reduce(data.data(), data.size());
  EXPECT_TRUE(same_bits(data, original));
  comm.reduce_scatter(data.data(), out.data(), out.size());
  EXPECT_TRUE(same_bits(out, original));
  std::fill(out.begin(), out.end(), bf16{});
  comm.all_gather(data.data(), out.data(), out.size());
  EXPECT_TRUE(same_bits(out, original));
}

TEST(EmulatedCommTest, DescribeNamesOrdersAndANonIdentityRing) {
  EXPECT_EQ(EmulatedGroup(4, {ReduceOrder::tree, ReduceOrder::ring, ReduceOrder::ring}).describe(),
            "emulated(ar=tree,rs=ring,ag=ring)");
  EXPECT_EQ(
      EmulatedGroup(4, {ReduceOrder::fixed, ReduceOrder::arrival, ReduceOrder::ring}, {0, 1, 2, 3})
          .describe(),
      "emulated(ar=fixed,rs=arrival,ag=ring)");
  EmulatedGroup permuted(4, {}, {0, 2, 1, 3});
  EXPECT_EQ(permuted.describe(), "emulated(ar=tree,rs=ring,ag=ring,ring=0-2-1-3)");
  EXPECT_EQ(permuted.rank(2).describe(), permuted.describe());
  EXPECT_EQ(permuted.rank(2).rank(), 2);
}

TEST(EmulatedCommTest, RejectsBadConstructionAndRanks) {
  EXPECT_THROW(EmulatedGroup(0, {}), std::invalid_argument);
  EXPECT_THROW(EmulatedGroup(3, {}, {0, 1}), std::invalid_argument);
  EXPECT_THROW(EmulatedGroup(3, {}, {0, 1, 1}), std::invalid_argument);
  EmulatedGroup group(2, {});
  EXPECT_THROW(group.rank(2), std::out_of_range);
}

}  // namespace
}  // namespace bih::test_emulated_comm
