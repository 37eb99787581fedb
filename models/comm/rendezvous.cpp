// rendezvous.cpp: the two-barrier meeting of an emulated group's ranks (rendezvous.hpp).
#include "models/comm/rendezvous.hpp"

#include <algorithm>
#include <random>
#include <thread>

namespace bih {
namespace {

// Ranks of every Rendezvous alive in this process: the threads that may wait at a barrier.
std::atomic<int> g_live_ranks{0};

}  // namespace

const char* to_string(CollectiveOp op) {
  static const char* const kNames[] = {"all_reduce", "reduce_scatter", "all_gather",
                                       "all_reduce_tree_f32", "reduce_scatter_tree_f32"};
  return kNames[static_cast<int>(op)];
}

Rendezvous::Rendezvous(int size, std::chrono::milliseconds watchdog, std::string name,
                       std::function<void(const Posted&)> on_complete)
    : size_(size),
      watchdog_(watchdog),
      name_(std::move(name)),
      on_complete_(std::move(on_complete)),
      arrived_(size, 0),
      posted_(size),
      arriving_order_(size, 0),
      inputs_(size, nullptr),
      inputs_f32_(size, nullptr),
      arrival_order_(size, 0) {
  g_live_ranks.fetch_add(size, std::memory_order_relaxed);
}

Rendezvous::~Rendezvous() { g_live_ranks.fetch_sub(size_, std::memory_order_relaxed); }

bool Rendezvous::should_spin() const {
  static const unsigned cores = std::thread::hardware_concurrency();
  return cores > static_cast<unsigned>(g_live_ranks.load(std::memory_order_relaxed));
}

void Rendezvous::abort(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    abort_locked(why);
  }
  wake_.notify_all();
}

bool Rendezvous::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

void Rendezvous::throw_if_aborted() const {
  std::lock_guard lock(mutex_);
  if (aborted_) throw CommAborted(abort_reason_);
}

void Rendezvous::abort_locked(const std::string& why) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = why;
}

void Rendezvous::sleep_before_arrival() {
  thread_local std::minstd_rand engine{std::random_device{}()};
  std::uniform_int_distribution<int> micros(0, 20);
  std::this_thread::sleep_for(std::chrono::microseconds(micros(engine)));
}

std::string Rendezvous::describe_call(const Posted& posted, uint64_t call) const {
  return std::string(to_string(posted.op)) + " (call " + std::to_string(call) + ", count " +
         std::to_string(posted.count) + (posted.barriers == 1 ? ", one barrier" : "") + ")";
}

bool Rendezvous::spin_until_released(uint64_t generation) const {
  // About the time a sleeping thread takes to wake: longer waits go to sleep.
  constexpr auto kSpin = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 64; ++i) {
      if (generation_.load(std::memory_order_acquire) != generation) return true;
    }
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

void Rendezvous::arrive_and_wait_locked(std::unique_lock<std::mutex>& lock, int rank, uint64_t call,
                                        const char* phase, const LastArrivalWork& last) {
  arrived_[rank] = 1;
  if (arrived_count_ + 1 == size_) {
    if (last) {
      try {
        last();
      } catch (const std::exception& e) {
        abort_locked(name_ + ": rank " + std::to_string(rank) + " failed completing " +
                     describe_call(posted_[rank], call) + ": " + e.what());
        lock.unlock();
        wake_.notify_all();
        throw;
      }
    }
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    generation_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
    lock.lock();
    return;
  }
  ++arrived_count_;
  const uint64_t generation = generation_.load(std::memory_order_relaxed);
  const auto released = [&] { return generation_.load() != generation || aborted_; };
  if (should_spin()) {
    lock.unlock();
    spin_until_released(generation);
    lock.lock();
  }
  if (watchdog_.count() == 0) {
    wake_.wait(lock, released);
  } else if (!wake_.wait_for(lock, watchdog_, released)) {
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (arrived_[r]) continue;
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(r);
    }
    abort_locked(name_ + " watchdog: rank " + std::to_string(rank) + " waited over " +
                 std::to_string(watchdog_.count()) + " ms " + phase + " " +
                 describe_call(posted_[rank], call) + "; ranks that never arrived: " + missing);
    lock.unlock();
    wake_.notify_all();
    lock.lock();
  }
  if (aborted_) throw CommAborted(abort_reason_);
}

std::string Rendezvous::complete_publish_locked() {
  const Posted& first = posted_[0];
  for (int r = 1; r < size_; ++r) {
    if (posted_[r].op != first.op || posted_[r].count != first.count ||
        posted_[r].barriers != first.barriers) {
      return name_ + ": ranks disagree on collective call " + std::to_string(next_call_) +
             ": rank 0 called " + describe_call(first, next_call_) + ", rank " + std::to_string(r) +
             " called " + describe_call(posted_[r], next_call_);
    }
  }
  current_call_ = next_call_++;
  for (int r = 0; r < size_; ++r) {
    inputs_[r] = posted_[r].in;
    inputs_f32_[r] = posted_[r].in_f32;
  }
  arrival_order_ = arriving_order_;
  if (on_complete_) on_complete_(first);
  return {};
}

uint64_t Rendezvous::publish_and_wait(int rank, const Posted& posted, const LastArrivalWork& last) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CommAborted(abort_reason_);
  const uint64_t call = next_call_;  // the call in progress until the last arrival completes it
  posted_[rank] = posted;
  arriving_order_[arrived_count_] = rank;
  if (arrived_count_ + 1 == size_) {
    // The last arrival validates before releasing anyone, so nobody computes on a bad call.
    std::string error = complete_publish_locked();
    if (!error.empty()) {
      abort_locked(error);
      lock.unlock();
      wake_.notify_all();
      throw CommAborted(error);
    }
  }
  arrive_and_wait_locked(lock, rank, call, "at the start of", last);
  return current_call_;
}

void Rendezvous::finish_and_wait(int rank, uint64_t call, const LastArrivalWork& last) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CommAborted(abort_reason_);
  arrive_and_wait_locked(lock, rank, call, "at the end of", last);
}

}  // namespace bih
