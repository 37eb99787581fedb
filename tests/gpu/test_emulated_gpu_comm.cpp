// Tests of the emulated communicator on one GPU (models/cuda/emulated_gpu.hpp): every rank a host
// thread with its own stream, device buffers. Results copied back must equal, bit for bit, the CPU
// EmulatedGroup and the pure order models on the same inputs; `arrival` must sum along the order
// it recorded and vary from call to call; abort must wake waiting ranks; hundreds of back-to-back
// asynchronous calls must stay right. Every test skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../cpu/test_util.hpp"
#include "gpu_test_util.hpp"
#include "models/bf16.hpp"
#include "models/comm/emulated.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/cuda/emulated_gpu.hpp"

namespace bih {
namespace {

using cuda::DeviceBf16Buffer;
using cuda::EmulatedGpuGroup;
using cuda::EmulatedGpuRank;
using testing::pointers;
using testing::random_bf16;

using namespace std::chrono_literals;

constexpr uint16_t kBitsOne = 0x3F80;         // 1.0
constexpr uint16_t kBitsOnePlus2m6 = 0x3F82;  // 1 + 2^-6

// Index of the first element whose bits differ, or -1 when equal (sizes must match).
long first_difference(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].bits != b[i].bits) return static_cast<long>(i);
  }
  return -1;
}

bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && first_difference(a, b) == -1;
}

// Runs body(rank r's communicator, r) on one thread per rank (works for the CPU and GPU groups);
// each rank's failure text (testing::run_rank_threads).
template <class Group, class Body>
std::vector<std::string> run_ranks(Group& group, Body&& body) {
  return testing::run_rank_threads(group.size(), [&](int r) { body(group.rank(r), r); });
}

// Identity, and for n >= 3 a ring that is not the identity (1 and 2 swapped, as NCCL's topology
// search may give).
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

// One count's inputs for all three collectives, and each rank's results.
struct Case {
  size_t count = 0;
  std::vector<std::vector<bf16>> ar_in, rs_in, ag_in;  // [rank][count], [rank][n*count], [count]
  // [rank]: all_reduce result, reduce_scatter out of place and in place, all_gather out of place
  // and in place
  std::vector<std::vector<bf16>> ar_out, rs_out, rs_in_place_out, ag_out, ag_in_place_out;
};

std::vector<Case> make_cases(int n, const std::vector<size_t>& counts) {
  std::vector<Case> cases;
  for (size_t s = 0; s < counts.size(); ++s) {
    Case c;
    c.count = counts[s];
    for (int r = 0; r < n; ++r) {
      const uint32_t seed = 100000 * n + 1000 * static_cast<uint32_t>(s) + 10 * r;
      c.ar_in.push_back(random_bf16(c.count, seed + 1));
      c.rs_in.push_back(random_bf16(c.count * n, seed + 2));
      c.ag_in.push_back(random_bf16(c.count, seed + 3));
    }
    for (auto* out : {&c.ar_out, &c.rs_out, &c.rs_in_place_out, &c.ag_out, &c.ag_in_place_out}) {
      out->resize(n);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// Runs every case's collectives on the GPU group: uploads on the rank's stream, collectives back
// to back with no host synchronization in between, downloads at the end.
void run_on_gpu(EmulatedGpuGroup& group, std::vector<Case>& cases) {
  const int n = group.size();
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    for (Case& c : cases) {
      DeviceBf16Buffer ar(c.count), rs_in(c.count * n), rs_out(c.count), rs_in_place(c.count * n),
          ag_in(c.count), ag_out(c.count * n), ag_in_place(c.count * n);
      ar.upload(c.ar_in[r], comm.stream());
      ag_in_place.upload(c.ag_in[r], comm.stream(), static_cast<size_t>(r) * c.count);
      rs_in.upload(c.rs_in[r], comm.stream());
      rs_in_place.upload(c.rs_in[r], comm.stream());
      ag_in.upload(c.ag_in[r], comm.stream());
      comm.all_reduce(ar.data(), c.count);
      comm.reduce_scatter(rs_in.data(), rs_out.data(), c.count);
      bf16* own_block = rs_in_place.data() + static_cast<size_t>(r) * c.count;
      comm.reduce_scatter(rs_in_place.data(), own_block, c.count);
      comm.all_gather(ag_in.data(), ag_out.data(), c.count);
      comm.all_gather(ag_in_place.data() + static_cast<size_t>(r) * c.count, ag_in_place.data(),
                      c.count);
      c.ar_out[r] = ar.download(comm.stream());
      c.rs_out[r] = rs_out.download(comm.stream());
      c.rs_in_place_out[r] = rs_in_place.download(comm.stream(), r * c.count, c.count);
      c.ag_out[r] = ag_out.download(comm.stream());
      c.ag_in_place_out[r] = ag_in_place.download(comm.stream());
    }
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(failures[r], "") << "GPU rank " << r;
}

// The same collectives on the CPU EmulatedGroup; results into [rank] vectors.
struct CpuResults {
  std::vector<std::vector<std::vector<bf16>>> ar, rs, ag;  // [case][rank]
};

CpuResults run_on_cpu(int n, CollectiveOrders orders, const std::vector<int>& ring,
                      const std::vector<Case>& cases) {
  EmulatedGroup group(n, orders, ring);
  CpuResults out;
  for (auto* v : {&out.ar, &out.rs, &out.ag}) {
    v->assign(cases.size(), std::vector<std::vector<bf16>>(n));
  }
  const auto failures = run_ranks(group, [&](Communicator& comm, int r) {
    for (size_t s = 0; s < cases.size(); ++s) {
      const Case& c = cases[s];
      out.ar[s][r] = c.ar_in[r];
      comm.all_reduce(out.ar[s][r].data(), c.count);
      out.rs[s][r].resize(c.count);
      comm.reduce_scatter(c.rs_in[r].data(), out.rs[s][r].data(), c.count);
      out.ag[s][r].resize(c.count * n);
      comm.all_gather(c.ag_in[r].data(), out.ag[s][r].data(), c.count);
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "CPU rank " << r;
  return out;
}

TEST(EmulatedGpuCommTest, BitwiseEqualToTheCpuEmulationForEveryDeterministicOrder) {
  BIH_SKIP_WITHOUT_GPU();
  int compared_groups = 0;
  // 16: past kHubSmallRanks, the hub's wide parameter block (5 KB).
  for (int n : {1, 2, 3, 4, 8, 16}) {
    // 64 * n: the gather's 16-byte path (the odd counts take its element path).
    const std::vector<size_t> counts{1, 7, static_cast<size_t>(n) * 33, 64 * static_cast<size_t>(n),
                                     4096 * static_cast<size_t>(n) + 5};
    for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
      for (const std::vector<int>& ring : ring_orders_for(n)) {
        const CollectiveOrders orders{order, order, ReduceOrder::ring};
        EmulatedGpuGroup group(n, orders, ring);
        const std::string where = group.describe() + " n=" + std::to_string(n);
        std::vector<Case> cases = make_cases(n, counts);
        run_on_gpu(group, cases);
        if (HasFatalFailure()) return;
        const CpuResults cpu = run_on_cpu(n, orders, ring, cases);
        const RankSequences sequences{.ring = group.ring_order()};
        for (size_t s = 0; s < cases.size(); ++s) {
          const Case& c = cases[s];
          const std::string at = where + " count " + std::to_string(c.count);
          std::vector<bf16> ar_model(c.count);
          all_reduce_range(order, pointers(c.ar_in), c.count, 0, c.count, sequences,
                           ar_model.data());
          std::vector<bf16> ag_model;
          for (int q = 0; q < n; ++q) {
            ag_model.insert(ag_model.end(), c.ag_in[q].begin(), c.ag_in[q].end());
          }
          for (int r = 0; r < n; ++r) {
            std::vector<bf16> rs_model(c.count);
            reduce_scatter_block(order, pointers(c.rs_in), c.count, r, sequences, rs_model.data());
            // A group of one copies (the pure model would quiet a NaN; there is none here).
            EXPECT_EQ(first_difference(c.ar_out[r], cpu.ar[s][r]), -1)
                << at << " all_reduce rank " << r << " vs CPU group";
            EXPECT_EQ(first_difference(c.ar_out[r], ar_model), -1)
                << at << " all_reduce rank " << r << " vs model";
            EXPECT_EQ(first_difference(c.rs_out[r], cpu.rs[s][r]), -1)
                << at << " reduce_scatter rank " << r << " vs CPU group";
            EXPECT_EQ(first_difference(c.rs_out[r], rs_model), -1)
                << at << " reduce_scatter rank " << r << " vs model";
            EXPECT_EQ(first_difference(c.rs_in_place_out[r], rs_model), -1)
                << at << " in-place reduce_scatter rank " << r << " vs model";
            EXPECT_EQ(first_difference(c.ag_out[r], cpu.ag[s][r]), -1)
                << at << " all_gather rank " << r << " vs CPU group";
            EXPECT_EQ(first_difference(c.ag_out[r], ag_model), -1)
                << at << " all_gather rank " << r << " vs concatenation";
            EXPECT_EQ(first_difference(c.ag_in_place_out[r], ag_model), -1)
                << at << " in-place all_gather rank " << r << " vs concatenation";
          }
        }
        ++compared_groups;
      }
    }
  }
  EXPECT_EQ(compared_groups, 3 * (1 + 1 + 2 + 2 + 2 + 2));
}

TEST(EmulatedGpuCommTest, TheInputsMakeTheOrderShow) {
  // Guards the test above against data too tame to notice a wrong order: at 4 ranks the models
  // must disagree with each other on these inputs (so equality above means the right order).
  BIH_SKIP_WITHOUT_GPU();
  const int n = 4;
  const std::vector<Case> cases = make_cases(n, {4096 * 4 + 5});
  const Case& c = cases[0];
  std::vector<std::vector<bf16>> sums;
  for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
    sums.emplace_back(c.count);
    all_reduce_range(order, pointers(c.ar_in), c.count, 0, c.count, {}, sums.back().data());
  }
  EXPECT_FALSE(same_bits(sums[0], sums[1]));
  EXPECT_FALSE(same_bits(sums[0], sums[2]));
  EXPECT_FALSE(same_bits(sums[1], sums[2]));
}

// Hundreds of back-to-back collectives with fresh data and changing sizes, with no host
// synchronization between the collectives of an iteration: a rank running ahead on its stream
// must never read a peer's input before it is uploaded or after it is overwritten.
void expect_stable_over_many_calls(int n, int iterations) {
  EmulatedGpuGroup group(n, {ReduceOrder::ring, ReduceOrder::ring, ReduceOrder::ring},
                         ring_orders_for(n).back(), 0, 20s);
  const RankSequences sequences{.ring = group.ring_order()};
  constexpr size_t kMaxCount = 700;
  std::atomic<int> mismatches{0};
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer data(kMaxCount), rs_buffer(kMaxCount * n), rs_out(kMaxCount),
        gathered(kMaxCount * n);
    for (int it = 0; it < iterations; ++it) {
      const size_t count = 1 + (static_cast<size_t>(it) * 37) % kMaxCount;
      // Every rank rebuilds every rank's inputs (deterministic), to know the expected sums.
      std::vector<std::vector<bf16>> ar_inputs, rs_inputs;
      for (int q = 0; q < n; ++q) {
        ar_inputs.push_back(random_bf16(count, it * 131 + q));
        rs_inputs.push_back(random_bf16(count * n, it * 131 + 64 + q));
      }
      std::vector<bf16> ar_expected(count), rs_expected(count);
      all_reduce_range(ReduceOrder::ring, pointers(ar_inputs), count, 0, count, sequences,
                       ar_expected.data());
      std::vector<std::vector<bf16>> all_equal(n, ar_expected);
      std::vector<bf16> twice_expected(count);
      all_reduce_range(ReduceOrder::ring, pointers(all_equal), count, 0, count, sequences,
                       twice_expected.data());
      std::vector<bf16> gathered_expected;
      for (int q = 0; q < n; ++q) {
        std::vector<bf16> block_q(count);
        reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), count, q, sequences,
                             block_q.data());
        if (q == r) rs_expected = block_q;
        gathered_expected.insert(gathered_expected.end(), block_q.begin(), block_q.end());
      }

      // all_reduce twice in place (the second sums n equal copies of the first's result), then
      // reduce_scatter (in place on odd iterations), then all_gather of its result.
      data.upload(ar_inputs[r], comm.stream());
      rs_buffer.upload(rs_inputs[r], comm.stream());
      comm.all_reduce(data.data(), count);
      comm.all_reduce(data.data(), count);
      bf16* out = it % 2 ? rs_buffer.data() + static_cast<size_t>(r) * count : rs_out.data();
      comm.reduce_scatter(rs_buffer.data(), out, count);
      comm.all_gather(out, gathered.data(), count);
      if (!same_bits(data.download(comm.stream(), 0, count), twice_expected)) ++mismatches;
      if (!same_bits(gathered.download(comm.stream(), 0, count * n), gathered_expected)) {
        ++mismatches;
      }
      const std::vector<bf16> own = it % 2 ? rs_buffer.download(comm.stream(), r * count, count)
                                           : rs_out.download(comm.stream(), 0, count);
      if (!same_bits(own, rs_expected)) ++mismatches;
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(EmulatedGpuCommTest, HundredsOfBackToBackCallsAreStableAtFourRanks) {
  BIH_SKIP_WITHOUT_GPU();
  expect_stable_over_many_calls(4, 300);
}

TEST(EmulatedGpuCommTest, HundredsOfBackToBackCallsAreStableAtEightRanks) {
  BIH_SKIP_WITHOUT_GPU();
  expect_stable_over_many_calls(8, 120);
}

// A collective returns once the hub's kernel is enqueued, with no second barrier and no staging
// copy: each rank overwrites its input right after every call, on its stream, while the kernel
// that reads it may not have run yet. Every result must still be that of the inputs as they were.
TEST(EmulatedGpuCommTest, AnInputOverwrittenRightAfterTheCallNeverReachesAPeer) {
  BIH_SKIP_WITHOUT_GPU();
  constexpr int n = 4;
  constexpr int kIterations = 24;
  constexpr size_t kCount = size_t{1} << 18;  // per rank: large enough that the sums take a while
  EmulatedGpuGroup group(n, {ReduceOrder::tree, ReduceOrder::ring, ReduceOrder::ring}, {}, 0, 20s);
  const RankSequences sequences{.ring = group.ring_order()};
  const std::vector<bf16> garbage(kCount * n, bf16{0x7F80});  // +inf
  std::atomic<int> mismatches{0};
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer rs_in(kCount * n), rs_out(kCount), ag_in(kCount), ag_out(kCount * n);
    for (int it = 0; it < kIterations; ++it) {
      std::vector<std::vector<bf16>> rs_inputs, ag_inputs;
      for (int q = 0; q < n; ++q) {
        rs_inputs.push_back(random_bf16(kCount * n, 7000 + it * 17 + q));
        ag_inputs.push_back(random_bf16(kCount, 9000 + it * 17 + q));
      }
      std::vector<bf16> rs_expected(kCount);
      reduce_scatter_block(ReduceOrder::ring, pointers(rs_inputs), kCount, r, sequences,
                           rs_expected.data());
      std::vector<bf16> ag_expected;
      for (const auto& block : ag_inputs) {
        ag_expected.insert(ag_expected.end(), block.begin(), block.end());
      }
      rs_in.upload(rs_inputs[r], comm.stream());
      ag_in.upload(ag_inputs[r], comm.stream());
      comm.reduce_scatter(rs_in.data(), rs_out.data(), kCount);
      rs_in.upload(garbage, comm.stream());
      comm.all_gather(ag_in.data(), ag_out.data(), kCount);
      ag_in.upload(std::span(garbage).first(kCount), comm.stream());
      if (!same_bits(rs_out.download(comm.stream()), rs_expected)) ++mismatches;
      if (!same_bits(ag_out.download(comm.stream()), ag_expected)) ++mismatches;
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(EmulatedGpuCommTest, ArrivalSumsAlongTheRecordedOrderAndVariesFromCallToCall) {
  BIH_SKIP_WITHOUT_GPU();
  // Rank 0 holds 1.0 and the others 2^-8: the sum is 1.0 when rank 0 enters the chain first or
  // second, 1 + 2^-6 otherwise (see test_reduce_order.cpp). Each rank sleeps a random 0-20 us
  // before arriving, so 400 trials all on one side would be a broken model, not bad luck.
  constexpr int kRanks = 4;
  constexpr int kTrials = 400;
  constexpr size_t kRsCount = 33;
  EmulatedGpuGroup group(kRanks, {ReduceOrder::arrival, ReduceOrder::arrival, ReduceOrder::ring});
  // [rank][trial]
  std::vector<std::vector<uint16_t>> bits(kRanks, std::vector<uint16_t>(kTrials));
  std::vector<std::vector<std::vector<int>>> orders(kRanks, std::vector<std::vector<int>>(kTrials));
  std::atomic<int> rs_mismatches{0};
  std::set<std::vector<int>> rs_orders_seen;
  std::mutex rs_orders_mutex;
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer value(1), rs_in(kRsCount * kRanks), rs_out(kRsCount);
    std::vector<std::vector<bf16>> rs_inputs;
    for (int q = 0; q < kRanks; ++q) rs_inputs.push_back(random_bf16(kRsCount * kRanks, 77 + q));
    rs_in.upload(rs_inputs[r], comm.stream());
    for (int t = 0; t < kTrials; ++t) {
      const std::vector<bf16> mine{r == 0 ? to_bf16(1.0f) : to_bf16(0x1p-8f)};
      value.upload(mine, comm.stream());
      comm.all_reduce(value.data(), 1);
      bits[r][t] = value.download(comm.stream())[0].bits;
      orders[r][t] = comm.last_arrival_order();
      if (t % 8 != 0) continue;
      // reduce_scatter on random data: the block equals the model for the recorded order.
      comm.reduce_scatter(rs_in.data(), rs_out.data(), kRsCount);
      const std::vector<int> arrival = comm.last_arrival_order();
      std::vector<bf16> expected(kRsCount);
      reduce_scatter_block(ReduceOrder::arrival, pointers(rs_inputs), kRsCount, r,
                           RankSequences{.arrival = arrival}, expected.data());
      if (!same_bits(rs_out.download(comm.stream()), expected)) ++rs_mismatches;
      std::lock_guard lock(rs_orders_mutex);
      rs_orders_seen.insert(arrival);
    }
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_EQ(failures[r], "") << "rank " << r;
  EXPECT_EQ(rs_mismatches.load(), 0);
  EXPECT_GT(rs_orders_seen.size(), 1u) << "reduce_scatter arrival orders never varied";

  std::set<uint16_t> seen;
  for (int t = 0; t < kTrials; ++t) {
    for (int r = 1; r < kRanks; ++r) {
      ASSERT_EQ(orders[r][t], orders[0][t]) << "ranks recorded different orders, trial " << t;
      ASSERT_EQ(bits[r][t], bits[0][t]) << "ranks disagree on the sum, trial " << t;
    }
    // The recorded order is a chain (a permutation; the model throws otherwise) and the sum is
    // the model's along it.
    std::vector<std::vector<bf16>> inputs(kRanks, {to_bf16(0x1p-8f)});
    inputs[0] = {to_bf16(1.0f)};
    bf16 expected{};
    all_reduce_range(ReduceOrder::arrival, pointers(inputs), 1, 0, 1,
                     RankSequences{.arrival = orders[0][t]}, &expected);
    EXPECT_EQ(bits[0][t], expected.bits) << "trial " << t;
    seen.insert(bits[0][t]);
  }
  EXPECT_EQ(seen, (std::set<uint16_t>{kBitsOne, kBitsOnePlus2m6}));
}

TEST(EmulatedGpuCommTest, TreeNeverVariesOnTheSameCraftedInput) {
  BIH_SKIP_WITHOUT_GPU();
  constexpr int kRanks = 4;
  EmulatedGpuGroup group(kRanks, {ReduceOrder::tree, ReduceOrder::ring, ReduceOrder::ring});
  std::vector<std::set<uint16_t>> seen(kRanks);
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer value(1);
    for (int t = 0; t < 100; ++t) {
      const std::vector<bf16> mine{r == 0 ? to_bf16(1.0f) : to_bf16(0x1p-8f)};
      value.upload(mine, comm.stream());
      comm.all_reduce(value.data(), 1);
      seen[r].insert(value.download(comm.stream())[0].bits);
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(failures[r], "");
    EXPECT_EQ(seen[r], (std::set<uint16_t>{kBitsOnePlus2m6})) << "rank " << r;  // 3,2,1 then 0
  }
}

TEST(EmulatedGpuCommTest, AbortFromOneRankWakesTheOthers) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(4, {});
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer value(1);
    if (r == 0) {
      std::this_thread::sleep_for(50ms);  // let the peers block in the collective
      comm.abort("rank 0 crashed");
      comm.all_reduce(value.data(), 1);  // later calls throw too
    } else {
      comm.all_reduce(value.data(), 1);
    }
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(failures[r].rfind("aborted: ", 0), 0u) << "rank " << r << ": " << failures[r];
    EXPECT_NE(failures[r].find("rank 0 crashed"), std::string::npos) << failures[r];
  }
  EXPECT_TRUE(group.aborted());
}

TEST(EmulatedGpuCommTest, WatchdogNamesTheCollectiveAndTheMissingRank) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(3, {}, {}, 0, 100ms);
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer in(3 * 8), out(8);
    if (r == 2) {
      while (!group.aborted()) std::this_thread::sleep_for(1ms);
    }
    comm.reduce_scatter(in.data(), out.data(), 8);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(failures[r].find("watchdog"), std::string::npos) << failures[r];
    EXPECT_NE(failures[r].find("reduce_scatter"), std::string::npos) << failures[r];
    EXPECT_NE(failures[r].find("ranks that never arrived: 2"), std::string::npos) << failures[r];
  }
  EXPECT_EQ(failures[2].rfind("aborted: ", 0), 0u) << failures[2];
}

TEST(EmulatedGpuCommTest, AHostPointerIsRejectedAndAbortsThePeers) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(3, {});
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer device_data(16);
    std::vector<bf16> host_data(16);
    comm.all_reduce(r == 1 ? host_data.data() : device_data.data(), 16);
  });
  EXPECT_EQ(failures[1].rfind("error: ", 0), 0u) << failures[1];
  EXPECT_NE(failures[1].find("not device memory"), std::string::npos) << failures[1];
  for (int r : {0, 2}) {
    EXPECT_EQ(failures[r].rfind("aborted: ", 0), 0u) << failures[r];
    EXPECT_NE(failures[r].find("rank 1 failed inside all_reduce"), std::string::npos)
        << failures[r];
  }
}

TEST(EmulatedGpuCommTest, RanksDisagreeingOnTheCallAbortTheGroup) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(3, {});
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer data(8);
    comm.all_reduce(data.data(), r == 1 ? 8 : 4);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(failures[r].find("disagree"), std::string::npos) << "rank " << r << failures[r];
  }
}

// One kernel on the hub stream serves every rank, so a call must be captured on every rank or on
// none: a captured event reaching an eager stream would fail with CUDA's capture error, which
// says nothing of the collective. The last arrival names the mismatch instead.
TEST(EmulatedGpuCommTest, ACallCapturedOnSomeRanksOnlyAbortsTheGroupWithTheReason) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(3, {});
  const auto failures = run_ranks(group, [&](EmulatedGpuRank& comm, int r) {
    DeviceBf16Buffer data(8);
    struct Capture {
      cudaStream_t stream = nullptr;
      ~Capture() {
        if (stream == nullptr) return;
        cudaGraph_t graph = nullptr;
        cudaStreamEndCapture(stream, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        cudaGetLastError();
      }
    } capture;
    if (r == 1) {
      ASSERT_EQ(cudaStreamBeginCapture(comm.stream(), cudaStreamCaptureModeRelaxed), cudaSuccess);
      capture.stream = comm.stream();
    }
    comm.all_reduce(data.data(), 8);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(failures[r].find("rank 1 is capturing a CUDA graph and rank 0 is not"),
              std::string::npos)
        << "rank " << r << ": " << failures[r];
  }
  EXPECT_TRUE(group.aborted());
}

TEST(EmulatedGpuCommTest, SingleRankCollectivesAreCopies) {
  BIH_SKIP_WITHOUT_GPU();
  EmulatedGpuGroup group(1, {ReduceOrder::arrival, ReduceOrder::ring, ReduceOrder::ring});
  EmulatedGpuRank& comm = group.rank(0);
  EXPECT_EQ(comm.size(), 1);
  const std::vector<bf16> original = random_bf16(33, 9);
  DeviceBf16Buffer data(33), out(33);
  data.upload(original, comm.stream());
  comm.all_reduce(data.data(), 33);
  EXPECT_TRUE(same_bits(data.download(comm.stream()), original));
  EXPECT_EQ(comm.last_arrival_order(), std::vector<int>{0});
  comm.reduce_scatter(data.data(), out.data(), 33);
  EXPECT_TRUE(same_bits(out.download(comm.stream()), original));
  out.upload(std::vector<bf16>(33), comm.stream());
  comm.all_gather(data.data(), out.data(), 33);
  EXPECT_TRUE(same_bits(out.download(comm.stream()), original));
}

TEST(EmulatedGpuCommTest, DescribesItselfInTheCpuGroupsWords) {
  BIH_SKIP_WITHOUT_GPU();
  for (const std::vector<int>& ring : {std::vector<int>{}, std::vector<int>{0, 2, 1, 3}}) {
    const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::arrival, ReduceOrder::ring};
    EmulatedGpuGroup gpu(4, orders, ring);
    EXPECT_EQ(gpu.describe(), EmulatedGroup(4, orders, ring).describe());
    EXPECT_EQ(gpu.rank(2).describe(), gpu.describe());
    EXPECT_EQ(gpu.rank(2).rank(), 2);
  }
  EXPECT_EQ(EmulatedGpuGroup(4, {}, {0, 2, 1, 3}).describe(),
            "emulated(ar=tree,rs=ring,ag=ring,ring=0-2-1-3)");
}

TEST(EmulatedGpuCommTest, RejectsBadConstructionAndRanks) {
  BIH_SKIP_WITHOUT_GPU();
  EXPECT_THROW(EmulatedGpuGroup(0, {}), std::invalid_argument);
  EXPECT_THROW(EmulatedGpuGroup(3, {}, {0, 1}), std::invalid_argument);
  EXPECT_THROW(EmulatedGpuGroup(3, {}, {0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(EmulatedGpuGroup(2, {}, {}, 1000), std::runtime_error);  // no device 1000
  EmulatedGpuGroup group(2, {});
  EXPECT_THROW(group.rank(2), std::out_of_range);
}

}  // namespace
}  // namespace bih
