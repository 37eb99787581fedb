// Tests of the real NCCL communicator (models/cuda/nccl_comm.hpp). Ranks are threads of this
// process, one GPU each, all given one unique id.
//
// `fixed` all_reduce and reduce_scatter are built to be the emulated `fixed` model, so they must
// equal it bit for bit (reduce_order.hpp computes it on the host); all_gather is a copy; at TP=2
// ring and tree are one add, so NCCL's own collectives must equal every model. The watchdog must
// turn a peer that never joins into CommAborted within about its timeout, naming the op, and the
// teardown after it must not hang. Collectives captured into a CUDA graph must replay with the
// model's bits. A guard ends the process if a test hangs, so a failure cannot stall a run.
// GPU tests skip without NCCL in the build or with fewer than 2 GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../cpu/test_util.hpp"
#include "cuda_graph_util.hpp"
#include "gpu_test_util.hpp"
#include "models/bf16.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/cuda/emulated_gpu.hpp"
#include "models/cuda/nccl_comm.hpp"

namespace bih {
namespace {

using cuda::DeviceBf16Buffer;
using cuda::NcclCommunicator;
using cuda::NcclUniqueId;
using testing::pointers;
using testing::random_bf16;

using namespace std::chrono_literals;

// Skips unless this build has NCCL and the machine has at least two GPUs.
#define BIH_SKIP_WITHOUT_NCCL_GPUS()                                                  \
  do {                                                                                \
    BIH_SKIP_WITHOUT_GPU();                                                           \
    if (!::bih::cuda::nccl_available()) BIH_SKIP_OR_FAIL("this build has no NCCL");   \
    if (::bih::cuda::device_count() < 2)                                              \
      GTEST_SKIP() << "needs at least 2 GPUs; found " << ::bih::cuda::device_count(); \
  } while (0)

// Ends the process if the test is still running after `limit`: a hung NCCL call must fail the
// run, not stall it. Destroying the guard disarms it.
class HangGuard {
 public:
  explicit HangGuard(std::chrono::seconds limit)
      : what_(::testing::UnitTest::GetInstance()->current_test_info()->name()),
        thread_([this, limit] {
          std::unique_lock lock(mutex_);
          if (!wake_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "FATAL: test %s still running after %lld s (a hung NCCL call?)\n",
                         what_.c_str(), static_cast<long long>(limit.count()));
            std::fflush(stderr);
            std::_Exit(3);
          }
        }) {}
  ~HangGuard() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// A one-shot flag one rank thread raises and another waits for.
class Signal {
 public:
  void raise() {
    {
      std::lock_guard lock(mutex_);
      raised_ = true;
    }
    wake_.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [this] { return raised_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool raised_ = false;
};

// Raises a signal (if any) when its scope ends, however it ends, so that a failing rank cannot
// leave a peer waiting for it.
class RaiseOnExit {
 public:
  explicit RaiseOnExit(Signal* signal) : signal_(signal) {}
  ~RaiseOnExit() {
    if (signal_ != nullptr) signal_->raise();
  }
  RaiseOnExit(const RaiseOnExit&) = delete;
  RaiseOnExit& operator=(const RaiseOnExit&) = delete;

 private:
  Signal* signal_;
};

// NVLink multicast reduces in the switch, outside every order model (DESIGN.md): always off. Set
// before the first NCCL initialization of the process (NCCL reads its environment once).
NcclUniqueId fresh_unique_id() {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return cuda::new_nccl_unique_id();
}

// Runs body(r) on one thread per rank; each rank's failure text (testing::run_rank_threads).
template <class Body>
std::vector<std::string> run_ranks(int n, Body&& body) {
  return testing::run_rank_threads(n, body);
}

// Index of the first element whose bits differ, or -1 when equal (sizes must match).
long first_difference(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].bits != b[i].bits) return static_cast<long>(i);
  }
  return -1;
}

NcclCommunicator::Options options_for(CollectiveOrders orders, bool nonblocking = true) {
  NcclCommunicator::Options options;
  options.orders = orders;
  options.watchdog = 60s;  // a failure ends in CommAborted long before the hang guard
  options.init_timeout = 60s;
  options.nonblocking = nonblocking;
  return options;
}

// One count's inputs for all three collectives, and each rank's results.
struct Case {
  size_t count = 0;
  std::vector<std::vector<bf16>> ar_in, rs_in, ag_in;  // [rank][count], [rank][n*count], [count]
  // [rank]: all_reduce, reduce_scatter out of place and in place, all_gather
  std::vector<std::vector<bf16>> ar_out, rs_out, rs_in_place_out, ag_out;
};

std::vector<Case> make_cases(int n, const std::vector<size_t>& counts, uint32_t seed) {
  std::vector<Case> cases;
  for (size_t s = 0; s < counts.size(); ++s) {
    Case c;
    c.count = counts[s];
    for (int r = 0; r < n; ++r) {
      const uint32_t base = seed + 100000 * n + 1000 * static_cast<uint32_t>(s) + 10 * r;
      c.ar_in.push_back(random_bf16(c.count, base + 1));
      c.rs_in.push_back(random_bf16(c.count * n, base + 2));
      c.ag_in.push_back(random_bf16(c.count, base + 3));
    }
    for (auto* out : {&c.ar_out, &c.rs_out, &c.rs_in_place_out, &c.ag_out}) out->resize(n);
    cases.push_back(std::move(c));
  }
  return cases;
}

// Every case's collectives on n NCCL ranks (GPUs 0..n-1), back to back on each rank's stream,
// one synchronize() per case. Returns the communicators' describe().
std::string run_on_nccl(int n, const NcclCommunicator::Options& options, std::vector<Case>& cases) {
  const NcclUniqueId id = fresh_unique_id();
  std::string description;
  const auto failures = run_ranks(n, [&](int r) {
    NcclCommunicator comm(r, n, id, r, options);
    if (r == 0) description = comm.describe();
    for (Case& c : cases) {
      const size_t count = c.count;
      DeviceBf16Buffer ar(count, r), rs_in(count * n, r), rs_out(count, r),
          rs_in_place(count * n, r), ag_in(count, r), ag_out(count * n, r);
      ar.upload(c.ar_in[r], comm.stream());
      rs_in.upload(c.rs_in[r], comm.stream());
      rs_in_place.upload(c.rs_in[r], comm.stream());
      ag_in.upload(c.ag_in[r], comm.stream());
      comm.all_reduce(ar.data(), count);
      comm.reduce_scatter(rs_in.data(), rs_out.data(), count);
      bf16* own_block = rs_in_place.data() + static_cast<size_t>(r) * count;
      comm.reduce_scatter(rs_in_place.data(), own_block, count);
      comm.all_gather(ag_in.data(), ag_out.data(), count);
      comm.synchronize();
      c.ar_out[r] = ar.download(comm.stream());
      c.rs_out[r] = rs_out.download(comm.stream());
      c.rs_in_place_out[r] = rs_in_place.download(comm.stream(), r * count, count);
      c.ag_out[r] = ag_out.download(comm.stream());
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  return description;
}

// Checks every rank's results against the order models: all_reduce and reduce_scatter under
// `order`, all_gather as the concatenation of the inputs.
void expect_model_bits(ReduceOrder order, int n, const std::vector<Case>& cases,
                       const std::string& where) {
  for (const Case& c : cases) {
    const std::string at = where + " count " + std::to_string(c.count);
    std::vector<bf16> ar_model(c.count);
    all_reduce_range(order, pointers(c.ar_in), c.count, 0, c.count, {}, ar_model.data());
    std::vector<bf16> ag_model;
    for (int q = 0; q < n; ++q)
      ag_model.insert(ag_model.end(), c.ag_in[q].begin(), c.ag_in[q].end());
    for (int r = 0; r < n; ++r) {
      std::vector<bf16> rs_model(c.count);
      reduce_scatter_block(order, pointers(c.rs_in), c.count, r, {}, rs_model.data());
      EXPECT_EQ(first_difference(c.ar_out[r], ar_model), -1) << at << " all_reduce rank " << r;
      EXPECT_EQ(first_difference(c.rs_out[r], rs_model), -1) << at << " reduce_scatter rank " << r;
      EXPECT_EQ(first_difference(c.rs_in_place_out[r], rs_model), -1)
          << at << " in-place reduce_scatter rank " << r;
      EXPECT_EQ(first_difference(c.ag_out[r], ag_model), -1) << at << " all_gather rank " << r;
    }
  }
}

// The sizes: 1 and odd sizes (not divisible by the rank count), one over 2^20.
const std::vector<size_t> kCounts{1, 7, 1000, 4097, (size_t{1} << 20) + 3};

TEST(NcclCommTest, FixedOrderIsTheEmulatedFixedModelBitwise) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(600s);
  const int n = std::min(cuda::device_count(), 8);
  const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring};
  std::vector<Case> cases = make_cases(n, kCounts, 0);
  const std::string description = run_on_nccl(n, options_for(orders), cases);
  EXPECT_EQ(description.rfind("nccl(ar=fixed,rs=fixed,ag=ring", 0), 0u) << description;
  expect_model_bits(ReduceOrder::fixed, n, cases, "fixed n=" + std::to_string(n));
}

TEST(NcclCommTest, BlockingCommunicatorGivesTheSameFixedBits) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(300s);
  const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring};
  std::vector<Case> cases = make_cases(2, {7, 4097}, 1);
  run_on_nccl(2, options_for(orders, /*nonblocking=*/false), cases);
  expect_model_bits(ReduceOrder::fixed, 2, cases, "blocking fixed n=2");
}

// kernels tp_invariant's fp32 collectives on NCCL ranks: bitwise the host's tree over the ranks
// (the emulated groups are held to the same model in tests/gpu/test_cuda_tp_invariant.cpp).
TEST(NcclCommTest, TreeF32CollectivesAreTheHostChunkTree) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(300s);
  const int gpus = cuda::device_count();
  const int n = gpus >= 8 ? 8 : gpus >= 4 ? 4 : 2;
  const size_t count = 4097;
  std::vector<std::vector<float>> in(n);
  for (int r = 0; r < n; ++r) {
    const std::vector<bf16> a = random_bf16(count * n, 500 + r),
                            b = random_bf16(count * n, 600 + r);
    in[r].resize(count * n);
    // Products of two bf16 values: 16 significant bits, so a bf16 hop anywhere would show.
    for (size_t i = 0; i < in[r].size(); ++i) in[r][i] = to_float(a[i]) * to_float(b[i]);
  }
  std::vector<std::vector<bf16>> reduced(n), scattered(n);
  const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring};
  const NcclUniqueId id = fresh_unique_id();
  const auto failures = run_ranks(n, [&](int r) {
    NcclCommunicator comm(r, n, id, r, options_for(orders));
    test::DeviceBuffer<float> input(in[r]);
    DeviceBf16Buffer ar(count * n, r), rs(count, r);
    comm.all_reduce_tree_f32(input.get(), ar.data(), count * n);
    comm.reduce_scatter_tree_f32(input.get(), rs.data(), count);
    comm.synchronize();
    reduced[r] = ar.download(comm.stream());
    scattered[r] = rs.download(comm.stream());
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(failures[r], "") << "rank " << r;
  std::vector<const float*> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(in[r].data());
  std::vector<bf16> want(count * n);
  tree_f32_sum(inputs, 0, count * n, want.data());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(first_difference(reduced[r], want), -1) << "all_reduce_tree_f32 rank " << r;
    const std::vector<bf16> block(want.begin() + r * count, want.begin() + (r + 1) * count);
    EXPECT_EQ(first_difference(scattered[r], block), -1) << "reduce_scatter_tree_f32 rank " << r;
  }
}

// At TP=2 an element's sum is one add of two bf16 values, whatever the order: NCCL's ring and
// tree must give every model's bits (DESIGN.md: why TP=2 hides ordering bugs).
TEST(NcclCommTest, RingAndTreeAtTp2EqualEveryOrderModel) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(600s);
  for (ReduceOrder order : {ReduceOrder::ring, ReduceOrder::tree}) {
    const CollectiveOrders orders{order, ReduceOrder::ring, ReduceOrder::ring};
    std::vector<Case> cases = make_cases(2, kCounts, 2);
    const std::string description = run_on_nccl(2, options_for(orders), cases);
    EXPECT_EQ(description.rfind("nccl(ar=" + to_string(order) + ",rs=ring,ag=ring", 0), 0u)
        << description;
    for (ReduceOrder model : {ReduceOrder::ring, ReduceOrder::tree, ReduceOrder::fixed}) {
      expect_model_bits(model, 2, cases,
                        "nccl ar=" + to_string(order) + " vs model " + to_string(model));
    }
  }
}

// A peer that skips a collective (stuck or dead) after the group has worked: the waiting rank's
// synchronize() must abort the communicator and throw within about the watchdog, naming the op,
// and everything after must neither hang nor run.
TEST(NcclCommTest, WatchdogAbortsACollectiveAPeerSkips) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(180s);
  const NcclUniqueId id = fresh_unique_id();
  constexpr size_t kCount = 4096;
  Signal rank0_finished;
  std::string message;
  double seconds = -1;
  bool later_call_refused = false;
  const auto failures = run_ranks(2, [&](int r) {
    const RaiseOnExit raise_when_done(r == 0 ? &rank0_finished : nullptr);
    NcclCommunicator::Options options = options_for({});
    options.watchdog = 5000ms;  // also bounds the warm-up's first connection
    NcclCommunicator comm(r, 2, id, r, options);
    DeviceBf16Buffer data(kCount, r);
    data.upload(random_bf16(kCount, 7 + r), comm.stream());
    comm.all_reduce(data.data(), kCount);  // both ranks: the peers are connected and working
    comm.wait(60s);
    if (r == 1) {
      rank0_finished.wait();  // skips the second collective
      comm.abort("the test ends the group");
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce(data.data(), kCount);
      comm.synchronize();
    } catch (const CommAborted& e) {
      message = e.what();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    try {
      comm.all_reduce(data.data(), kCount);
    } catch (const CommAborted&) {
      later_call_refused = true;
    }
  });
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
  ASSERT_FALSE(message.empty()) << "the skipped collective did not throw CommAborted";
  EXPECT_NE(message.find("all_reduce of 4096 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 of 2"), std::string::npos) << message;
  EXPECT_NE(message.find("5000 ms"), std::string::npos) << message;
  EXPECT_GE(seconds, 4.99) << message;
  EXPECT_LT(seconds, 25.0) << message;
  EXPECT_TRUE(later_call_refused);
}

// The peer never joins the very first collective, whose NCCL call must first connect the peers:
// with a nonblocking communicator that host-side wait is bounded by the watchdog too.
TEST(NcclCommTest, WatchdogAbortsAFirstCollectiveAPeerNeverJoins) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(180s);
  const NcclUniqueId id = fresh_unique_id();
  constexpr size_t kCount = 1000;
  Signal rank0_finished;
  std::string message;
  double seconds = -1;
  const auto failures = run_ranks(2, [&](int r) {
    const RaiseOnExit raise_when_done(r == 0 ? &rank0_finished : nullptr);
    NcclCommunicator::Options options = options_for({});
    options.watchdog = 2000ms;
    NcclCommunicator comm(r, 2, id, r, options);
    DeviceBf16Buffer data(kCount, r);
    data.upload(random_bf16(kCount, 9 + r), comm.stream());
    if (r == 1) {
      rank0_finished.wait();
      comm.abort("the test ends the group");
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.reduce_scatter(data.data(), data.data(), kCount / 2);
      comm.synchronize();
    } catch (const CommAborted& e) {
      message = e.what();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  });
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
  ASSERT_FALSE(message.empty()) << "the unjoined collective did not throw CommAborted";
  EXPECT_NE(message.find("reduce_scatter of 500 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("2000 ms"), std::string::npos) << message;
  EXPECT_GE(seconds, 1.99) << message;
  EXPECT_LT(seconds, 20.0) << message;
}

// abort() from another thread wakes a rank waiting on a collective that cannot finish.
TEST(NcclCommTest, AbortFromAnotherThreadWakesAWaitingRank) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(180s);
  const NcclUniqueId id = fresh_unique_id();
  constexpr size_t kCount = 2048;
  std::atomic<NcclCommunicator*> rank0_comm{nullptr};
  Signal rank0_ready, abort_sent;
  std::string message;
  double seconds = -1;
  const auto failures = run_ranks(2, [&](int r) {
    const RaiseOnExit raise_when_done(r == 0 ? &rank0_ready : &abort_sent);
    NcclCommunicator comm(r, 2, id, r, options_for({}));
    DeviceBf16Buffer data(kCount, r);
    data.upload(random_bf16(kCount, 11 + r), comm.stream());
    comm.all_reduce(data.data(), kCount);
    comm.wait(60s);
    if (r == 1) {
      rank0_ready.wait();
      std::this_thread::sleep_for(300ms);  // rank 0 is most likely inside wait() by now
      if (NcclCommunicator* peer = rank0_comm.load()) peer->abort("stopped by the test");
      abort_sent.raise();
      comm.abort("the test ends the group");
      return;
    }
    rank0_comm = &comm;
    rank0_ready.raise();
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce(data.data(), kCount);  // rank 1 never joins
      comm.wait(60s);
    } catch (const CommAborted& e) {
      message = e.what();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const std::exception& e) {
      message = std::string("not CommAborted: ") + e.what();
    }
    abort_sent.wait();  // rank 1 no longer touches this communicator
    rank0_comm = nullptr;
  });
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
  EXPECT_NE(message.find("stopped by the test"), std::string::npos) << message;
  EXPECT_LT(seconds, 30.0) << message;
}

// Collectives of every order inside a CUDA graph: one capture, replayed on new inputs, must give
// the model's bits each time. The `fixed` staging is reserved before capture.
void expect_captured_collectives_replay(bool nonblocking) {
  const NcclUniqueId id = fresh_unique_id();
  constexpr int n = 2;
  constexpr size_t kCount = 3001;  // all_reduce count and reduce_scatter per-rank count
  const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::ring, ReduceOrder::ring};
  // Input sets: [set][rank]; set 0 runs eagerly (warm-up), sets 1 and 2 through the graph.
  constexpr int kSets = 3;
  std::vector<std::vector<std::vector<bf16>>> ar_in(kSets), rs_in(kSets);
  std::vector<std::vector<std::vector<bf16>>> ar_out(kSets), rs_out(kSets), ag_out(kSets);
  for (int s = 0; s < kSets; ++s) {
    for (int r = 0; r < n; ++r) {
      ar_in[s].push_back(random_bf16(kCount, 500 + 10 * s + r));
      rs_in[s].push_back(random_bf16(n * kCount, 700 + 10 * s + r));
    }
    for (auto* out : {&ar_out[s], &rs_out[s], &ag_out[s]}) out->resize(n);
  }
  const auto failures = run_ranks(n, [&](int r) {
    NcclCommunicator::Options options = options_for(orders, nonblocking);
    options.watchdog = 30s;
    NcclCommunicator comm(r, n, id, r, options);
    comm.reserve(kCount);
    DeviceBf16Buffer ar(kCount, r), rs(n * kCount, r), rs_block(kCount, r), gathered(n * kCount, r);
    const auto collectives = [&] {
      comm.all_reduce(ar.data(), kCount);
      comm.reduce_scatter(rs.data(), rs_block.data(), kCount);
      comm.all_gather(rs_block.data(), gathered.data(), kCount);
    };
    const auto run_set = [&](int s, const std::function<void()>& run) {
      ar.upload(ar_in[s][r], comm.stream());
      rs.upload(rs_in[s][r], comm.stream());
      run();
      comm.synchronize();
      ar_out[s][r] = ar.download(comm.stream());
      rs_out[s][r] = rs_block.download(comm.stream());
      ag_out[s][r] = gathered.download(comm.stream());
    };
    run_set(0, collectives);  // eager: connects the peers before capture
    test::begin_capture(comm.stream());
    try {
      collectives();
    } catch (...) {
      test::abandon_capture(comm.stream());
      throw;
    }
    test::CapturedGraph graph(comm.stream());  // destroyed before the communicator
    for (int s = 1; s < kSets; ++s) run_set(s, [&] { graph.launch(comm.stream()); });
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(failures[r], "") << "rank " << r;
  for (int s = 0; s < kSets; ++s) {
    const std::string at = std::string(s == 0 ? "eager" : "graph replay ") +
                           (s == 0 ? "" : std::to_string(s)) +
                           (nonblocking ? " (nonblocking)" : " (blocking)");
    std::vector<bf16> ar_model(kCount);
    all_reduce_range(ReduceOrder::fixed, pointers(ar_in[s]), kCount, 0, kCount, {},
                     ar_model.data());
    std::vector<bf16> ag_model;
    for (int q = 0; q < n; ++q) {
      std::vector<bf16> block(kCount);
      reduce_scatter_block(ReduceOrder::ring, pointers(rs_in[s]), kCount, q, {}, block.data());
      ag_model.insert(ag_model.end(), block.begin(), block.end());
    }
    for (int r = 0; r < n; ++r) {
      const std::vector<bf16> rs_model(ag_model.begin() + r * kCount,
                                       ag_model.begin() + (r + 1) * kCount);
      EXPECT_EQ(first_difference(ar_out[s][r], ar_model), -1) << at << " all_reduce rank " << r;
      EXPECT_EQ(first_difference(rs_out[s][r], rs_model), -1) << at << " reduce_scatter rank " << r;
      EXPECT_EQ(first_difference(ag_out[s][r], ag_model), -1) << at << " all_gather rank " << r;
    }
  }
}

TEST(NcclCommTest, CapturedCollectivesReplayWithTheModelBits) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(300s);
  expect_captured_collectives_replay(/*nonblocking=*/true);
}

TEST(NcclCommTest, CapturedCollectivesReplayWithTheModelBitsOnABlockingCommunicator) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(300s);
  expect_captured_collectives_replay(/*nonblocking=*/false);
}

// A `fixed` collective larger than the reserved staging cannot allocate inside a capture: it
// throws before enqueueing anything, and after the capture the same call works (and grows).
TEST(NcclCommTest, StagingGrowthDuringCaptureIsRefused) {
  BIH_SKIP_WITHOUT_NCCL_GPUS();
  HangGuard guard(300s);
  const NcclUniqueId id = fresh_unique_id();
  constexpr int n = 2;
  constexpr size_t kReserved = 64, kLarge = 1001;
  const CollectiveOrders orders{ReduceOrder::fixed, ReduceOrder::fixed, ReduceOrder::ring};
  std::vector<std::vector<bf16>> inputs, outputs(n);
  for (int r = 0; r < n; ++r) inputs.push_back(random_bf16(kLarge, 900 + r));
  std::vector<std::string> messages(n);
  const auto failures = run_ranks(n, [&](int r) {
    NcclCommunicator comm(r, n, id, r, options_for(orders));
    comm.reserve(kReserved);
    DeviceBf16Buffer data(kLarge, r);
    data.upload(inputs[r], comm.stream());
    comm.all_reduce(data.data(), kReserved);  // fits: warm-up
    comm.synchronize();
    test::begin_capture(comm.stream());
    try {
      comm.all_reduce(data.data(), kLarge);
    } catch (const std::logic_error& e) {
      messages[r] = e.what();
    }
    test::abandon_capture(comm.stream());
    data.upload(inputs[r], comm.stream());
    comm.all_reduce(data.data(), kLarge);
    comm.synchronize();
    outputs[r] = data.download(comm.stream());
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(failures[r], "") << "rank " << r;
    EXPECT_NE(messages[r].find("reserve(1001)"), std::string::npos) << messages[r];
  }
  std::vector<bf16> model(kLarge);
  all_reduce_range(ReduceOrder::fixed, pointers(inputs), kLarge, 0, kLarge, {}, model.data());
  for (int r = 0; r < n; ++r) EXPECT_EQ(first_difference(outputs[r], model), -1) << "rank " << r;
}

// ---- no GPU needed -------------------------------------------------------------------------

TEST(NcclCommTest, UniqueIdHexRoundTripsAndRejectsBadText) {
  NcclUniqueId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(i * 37 + 5);
  const std::string hex = cuda::nccl_unique_id_to_hex(id);
  ASSERT_EQ(hex.size(), 2 * cuda::kNcclUniqueIdBytes);
  EXPECT_EQ(hex.substr(0, 6), "052a4f");
  EXPECT_EQ(cuda::parse_nccl_unique_id_hex(hex), id);
  std::string upper = hex;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  EXPECT_EQ(cuda::parse_nccl_unique_id_hex(upper), id);
  EXPECT_THROW(cuda::parse_nccl_unique_id_hex(hex.substr(1)), std::invalid_argument);
  std::string bad = hex;
  bad[17] = 'g';
  try {
    cuda::parse_nccl_unique_id_hex(bad);
    ADD_FAILURE() << "a non-hex digit was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("character 17"), std::string::npos) << e.what();
  }
}

TEST(NcclCommTest, ArrivalOrderAndBadRanksAreRefusedAtConstruction) {
  if (!cuda::nccl_available()) BIH_SKIP_OR_FAIL("this build has no NCCL");
  const NcclUniqueId id{};  // never used: the arguments are checked first
  const auto refusal = [&](int rank, int size, CollectiveOrders orders) -> std::string {
    try {
      NcclCommunicator comm(rank, size, id, 0, options_for(orders));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const std::string arrival =
      refusal(0, 2, {ReduceOrder::tree, ReduceOrder::arrival, ReduceOrder::ring});
  EXPECT_NE(arrival.find("'arrival' for reduce_scatter"), std::string::npos) << arrival;
  EXPECT_NE(refusal(2, 2, {}).find("rank 2 is outside 0..1"), std::string::npos);
  EXPECT_NE(refusal(0, 0, {}).find("size 0"), std::string::npos);
}

}  // namespace
}  // namespace bih
