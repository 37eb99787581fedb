// emulated.hpp: a tensor-parallel group whose ranks are threads of one process.
//
// EmulatedGroup owns one Communicator per rank; rank r's thread calls rank(r)'s collectives. A
// collective is two barriers: each rank publishes its buffers and waits (barrier 1), computes its
// own share of the result from every rank's input with the order model of reduce_order.hpp, and
// waits again (barrier 2) so that no input is overwritten while a peer still reads it. The sums
// are therefore bitwise those of the pure functions, except for `arrival`, whose chain is the order
// in which ranks reached barrier 1 (each rank first sleeps a random few microseconds, so the order
// varies from call to call and run to run, as a timing-dependent reduction does).
//
// A failure must not hang the peers: abort(why) wakes every waiting rank with CommAborted(why) and
// every later call throws too; an optional watchdog aborts a collective that waits too long,
// naming the collective and the ranks that never arrived.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/comm/reduce_order.hpp"

namespace bih {

class EmulatedGroup {
 public:
  // size: ranks (1..kMaxRanks). ring_order: ring position -> rank, empty for 0..size-1.
  // watchdog: longest a rank may wait at a barrier before the group aborts; zero waits forever.
  // Throws std::invalid_argument for a bad size or ring order.
  EmulatedGroup(int size, CollectiveOrders orders, std::vector<int> ring_order = {},
                std::chrono::milliseconds watchdog = std::chrono::milliseconds::zero());
  ~EmulatedGroup();
  EmulatedGroup(const EmulatedGroup&) = delete;
  EmulatedGroup& operator=(const EmulatedGroup&) = delete;

  // Rank r's communicator, to be used from rank r's thread only.
  Communicator& rank(int r);
  int size() const { return size_; }
  const CollectiveOrders& orders() const { return orders_; }
  const std::vector<int>& ring_order() const { return ring_order_; }  // always size() entries

  // Aborts the group: waiting ranks wake with CommAborted(why); later collectives throw it too.
  // The first reason wins. Safe from any thread.
  void abort(const std::string& why);
  bool aborted() const;

  // "emulated(ar=tree,rs=ring,ag=ring)", plus ",ring=0-2-1-3" when the ring is not 0..size-1.
  std::string describe() const;

 private:
  class Rank;
  enum class Op { all_reduce, reduce_scatter, all_gather };
  // What a rank brings to barrier 1: all ranks must agree on op and count.
  struct Posted {
    Op op = Op::all_reduce;
    const bf16* in = nullptr;
    size_t count = 0;
  };

  void all_reduce(int rank, bf16* data, size_t count);
  void reduce_scatter(int rank, const bf16* in, bf16* out, size_t count);
  void all_gather(int rank, const bf16* in, bf16* out, size_t count);

  // Barrier 1: publish `posted`, record the arrival, wait for all. Returns the call's index.
  uint64_t publish_and_wait(int rank, const Posted& posted);
  // Barrier 2: wait until every rank has finished reading the inputs of call `call`.
  void finish_and_wait(int rank, uint64_t call);
  // Shared by both barriers; the caller holds `lock`. `call` and `phase` name the wait in
  // watchdog messages.
  void arrive_and_wait_locked(std::unique_lock<std::mutex>& lock, int rank, uint64_t call,
                              const char* phase);
  // On the last arrival at barrier 1: checks that all ranks called the same collective and sizes
  // the all_reduce scratch. Returns an empty string, or why the call is invalid.
  std::string complete_publish_locked();
  void abort_locked(const std::string& why);
  [[noreturn]] void throw_aborted_locked() const;
  void sleep_before_arrival() const;
  // Runs a rank's work between the barriers; if it throws, aborts the group first so that the
  // peers waiting at barrier 2 wake instead of hanging, then rethrows.
  template <class Work>
  void run_or_abort(int rank, const char* what, Work&& work);
  std::string describe_call_locked(const Posted& posted, uint64_t call) const;

  const int size_;
  const CollectiveOrders orders_;
  const std::vector<int> ring_order_;
  const std::chrono::milliseconds watchdog_;
  std::vector<std::unique_ptr<Rank>> ranks_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Generation barrier: a wait ends when generation_ moves on (or the group aborts).
  uint64_t generation_ = 0;
  int arrived_count_ = 0;
  std::vector<char> arrived_;  // [size]: who is already waiting at the current barrier
  bool aborted_ = false;
  std::string abort_reason_;

  // Written under the mutex at barrier 1, read between the barriers without it (the barriers
  // order those accesses).
  uint64_t next_call_ = 0;
  uint64_t current_call_ = 0;
  std::vector<Posted> posted_;       // [size]
  std::vector<const bf16*> inputs_;  // [size]: posted_[r].in, as the order models take them
  std::vector<int> arrival_order_;   // [size]: arrival position -> rank, for this call
  // all_reduce results, [count]: rank r computes slice r, then every rank copies it all. One
  // buffer suffices: call k+1 writes it only after every rank reached call k+1's barrier 1, that
  // is after every rank finished copying call k's result.
  std::vector<bf16> scratch_;
};

}  // namespace bih
