// rendezvous.hpp: how an emulated group's ranks meet for one collective (CPU and GPU groups).
//
// A collective is one or two barriers. At barrier 1 each rank posts its op, input and count; the
// last to arrive checks that every rank called the same collective and completes the call, and the
// order of arrival is recorded (the `arrival` order model sums along it). After barrier 1 each rank
// reads its peers' inputs. Barrier 2 holds every rank until all have read, so that no input is
// overwritten while a peer still reads it. A group whose ranks' later writes are ordered after
// every read by other means (the GPU group: one kernel on its hub stream reads every input, and
// each rank's stream waits for that kernel) skips barrier 2: a call posts how many barriers it
// takes, and every rank must post the same.
//
// The last rank to arrive at either barrier may run work for the whole group before anyone is
// released (the GPU group launches the collective for every rank there, on its hub stream). Where
// the machine has a core for every rank of every group alive in the process, a waiting rank spins
// briefly before it sleeps: an eager emulated step meets at a barrier some hundred times, and a
// sleeping thread's wake-up costs tens of microseconds each time.
//
// A failure must not hang the peers: abort(why) wakes every waiting rank with CommAborted(why) and
// every later call throws too. An optional watchdog aborts a barrier that waits too long, naming
// the collective and the ranks that never arrived.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/comm/communicator.hpp"

namespace bih {

enum class CollectiveOp {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_reduce_f32,
  reduce_scatter_f32
};
const char* to_string(CollectiveOp op);

class Rendezvous {
 public:
  // What a rank brings to barrier 1: all ranks must agree on op and count.
  struct Posted {
    CollectiveOp op = CollectiveOp::all_reduce;
    const bf16* in = nullptr;
    size_t count = 0;
    const float* in_f32 = nullptr;  // the fp32 collectives' input (in stays null)
    int barriers = 2;               // 1: no finish_and_wait follows (see the top of this file)
  };

  // name: how messages call the group ("emulated comm"). watchdog: longest a rank may wait at a
  // barrier before the group aborts; zero waits forever. on_complete runs once per valid call,
  // under the lock, when the last rank arrives at barrier 1 (no rank is between the barriers of
  // an earlier call then: the place to resize a buffer the ranks share).
  Rendezvous(int size, std::chrono::milliseconds watchdog, std::string name,
             std::function<void(const Posted&)> on_complete = {});
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Work the last arrival at a barrier runs under the lock before it releases the others. If it
  // throws, the group aborts with the reason (the peers wake with CommAborted) and it rethrows.
  using LastArrivalWork = std::function<void()>;

  // Barrier 1: post, record the arrival, wait for all. Returns the call's index. `last` runs
  // after the call was validated (on_complete first).
  uint64_t publish_and_wait(int rank, const Posted& posted, const LastArrivalWork& last = {});
  // Barrier 2: wait until every rank is done with the inputs of call `call`.
  void finish_and_wait(int rank, uint64_t call, const LastArrivalWork& last = {});

  // The first reason wins; safe from any thread.
  void abort(const std::string& why);
  bool aborted() const;
  void throw_if_aborted() const;  // CommAborted(the reason)

  // Runs a rank's work between the barriers; if it throws, aborts the group first (so that peers
  // waiting at barrier 2 wake instead of hanging), then rethrows.
  template <class Work>
  void run_or_abort(int rank, const char* what, Work&& work) {
    try {
      work();
    } catch (const std::exception& e) {
      abort("rank " + std::to_string(rank) + " failed inside " + what + ": " + e.what());
      throw;
    }
  }

  // A few random microseconds before arriving: threads otherwise tend to arrive in one fixed
  // order, and `arrival` models a timing-dependent order.
  static void sleep_before_arrival();

  // The latest completed call's posted inputs and arrival position -> rank: written when the last
  // rank arrives at barrier 1, so a rank may read them from its release until it arrives at its
  // next barrier (a fast peer posting the next call does not touch them).
  const std::vector<const bf16*>& inputs() const { return inputs_; }
  const std::vector<const float*>& inputs_f32() const { return inputs_f32_; }
  const std::vector<int>& arrival_order() const { return arrival_order_; }

 private:
  void arrive_and_wait_locked(std::unique_lock<std::mutex>& lock, int rank, uint64_t call,
                              const char* phase, const LastArrivalWork& last);
  // Without the lock: waits up to kSpin for generation_ to move on; true if it did.
  bool spin_until_released(uint64_t generation) const;
  std::string complete_publish_locked();
  void abort_locked(const std::string& why);
  std::string describe_call(const Posted& posted, uint64_t call) const;

  const int size_;
  const std::chrono::milliseconds watchdog_;
  const std::string name_;
  const std::function<void(const Posted&)> on_complete_;
  // Spin before sleeping only while the process's groups together have a core for every rank
  // (several engines at once, plan.solo_lanes, each bring their own group).
  bool should_spin() const;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // A barrier wait ends when this moves on (or the group aborts). Written under the lock; read
  // without it only by a spinning rank, which takes the lock before it trusts anything else.
  std::atomic<uint64_t> generation_{0};
  int arrived_count_ = 0;
  std::vector<char> arrived_;  // [size]: who is already waiting at the current barrier
  bool aborted_ = false;
  std::string abort_reason_;

  uint64_t next_call_ = 0;
  uint64_t current_call_ = 0;
  std::vector<Posted> posted_;            // [size]
  std::vector<int> arriving_order_;       // [size]: the current call's arrivals so far
  std::vector<const bf16*> inputs_;       // [size]: posted_[r].in of the latest completed call
  std::vector<const float*> inputs_f32_;  // [size]: posted_[r].in_f32 of that call
  std::vector<int> arrival_order_;        // [size]: arriving_order_ of that call
};

}  // namespace bih
