// Tests of the emulated groups' meeting point (models/comm/rendezvous.hpp) on its own: calls of
// one barrier, where a fast rank posts its next call while a slow one still reads the last, and
// ranks that disagree on how many barriers a call takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "models/comm/rendezvous.hpp"
#include "test_util.hpp"

namespace bih::test_rendezvous {
namespace {

using namespace std::chrono_literals;

// A fake input address naming (call, rank): the rendezvous only hands pointers around.
const bf16* tag(uint64_t call, int rank) {
  return reinterpret_cast<const bf16*>(static_cast<uintptr_t>((call + 1) << 8 | rank));
}

TEST(Rendezvous, OneBarrierCallsKeepEveryRanksInputsUntilTheReaderArrivesAgain) {
  constexpr int n = 4;
  constexpr uint64_t kCalls = 400;
  Rendezvous rendezvous(n, 20s, "test group");
  std::atomic<int> wrong{0};
  const auto failures = testing::run_rank_threads(n, [&](int r) {
    std::minstd_rand random(r);
    for (uint64_t c = 0; c < kCalls; ++c) {
      Rendezvous::Posted posted{CollectiveOp::all_gather, tag(c, r), 16};
      posted.barriers = 1;
      const uint64_t call = rendezvous.publish_and_wait(r, posted);
      // Ranks leave at different times: a fast one posts call c + 1 while this one still reads.
      if (random() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(random() % 50));
      if (call != c) ++wrong;
      for (int q = 0; q < n; ++q) {
        if (rendezvous.inputs()[q] != tag(c, q)) ++wrong;
      }
      std::vector<int> order = rendezvous.arrival_order();
      std::sort(order.begin(), order.end());
      for (int q = 0; q < n; ++q) {
        if (order[q] != q) ++wrong;
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Rendezvous, RanksThatDisagreeOnTheBarriersAbortNamingTheCall) {
  constexpr int n = 3;
  Rendezvous rendezvous(n, 20s, "test group");
  const auto failures = testing::run_rank_threads(n, [&](int r) {
    Rendezvous::Posted posted{CollectiveOp::reduce_scatter, tag(0, r), 8};
    posted.barriers = r == 1 ? 1 : 2;
    rendezvous.publish_and_wait(r, posted);
    if (posted.barriers == 2) rendezvous.finish_and_wait(r, 0);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(failures[r].find("ranks disagree on collective call 0"), std::string::npos)
        << "rank " << r << ": " << failures[r];
  }
  EXPECT_NE(failures[0].find("one barrier"), std::string::npos) << failures[0];
  EXPECT_TRUE(rendezvous.aborted());
}

}  // namespace
}  // namespace bih::test_rendezvous
