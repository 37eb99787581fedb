// emulated.cpp: threads as ranks (emulated.hpp).
#include "models/comm/emulated.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

namespace bih {

class EmulatedGroup::Rank final : public Communicator {
 public:
  Rank(EmulatedGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  void all_reduce(bf16* data, size_t count) override { group_->all_reduce(rank_, data, count); }
  void reduce_scatter(const bf16* in, bf16* out, size_t count) override {
    group_->reduce_scatter(rank_, in, out, count);
  }
  void all_gather(const bf16* in, bf16* out, size_t count) override {
    group_->all_gather(rank_, in, out, count);
  }
  void abort(const std::string& why) override {
    group_->abort("rank " + std::to_string(rank_) + " aborted the group: " + why);
  }
  std::string describe() const override { return group_->describe(); }

 private:
  EmulatedGroup* group_;
  int rank_;
};

namespace {

const char* op_name(int op) {
  static const char* const kNames[] = {"all_reduce", "reduce_scatter", "all_gather"};
  return kNames[op];
}

std::vector<int> resolve_ring_order(int size, std::vector<int> ring_order) {
  if (size < 1 || size > kMaxRanks) {
    throw std::invalid_argument("emulated group: size " + std::to_string(size) + " is outside 1.." +
                                std::to_string(kMaxRanks));
  }
  if (ring_order.empty()) {
    ring_order.resize(size);
    for (int r = 0; r < size; ++r) ring_order[r] = r;
    return ring_order;
  }
  // Validated by the order model itself: a ring chain for owner 0 rejects non-permutations.
  reduce_scatter_chain(ReduceOrder::ring, size, 0, RankSequences{.ring = ring_order});
  return ring_order;
}

}  // namespace

EmulatedGroup::EmulatedGroup(int size, CollectiveOrders orders, std::vector<int> ring_order,
                             std::chrono::milliseconds watchdog)
    : size_(size),
      orders_(orders),
      ring_order_(resolve_ring_order(size, std::move(ring_order))),
      watchdog_(watchdog),
      arrived_(size, 0),
      posted_(size),
      inputs_(size, nullptr),
      arrival_order_(size, 0) {
  ranks_.reserve(size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
}

EmulatedGroup::~EmulatedGroup() = default;

Communicator& EmulatedGroup::rank(int r) {
  if (r < 0 || r >= size_) {
    throw std::out_of_range("emulated group: rank " + std::to_string(r) + " is outside 0.." +
                            std::to_string(size_ - 1));
  }
  return *ranks_[r];
}

std::string EmulatedGroup::describe() const { return describe_emulated(orders_, ring_order_); }

void EmulatedGroup::abort(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    abort_locked(why);
  }
  wake_.notify_all();
}

bool EmulatedGroup::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

void EmulatedGroup::abort_locked(const std::string& why) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = why;
}

void EmulatedGroup::throw_aborted_locked() const { throw CommAborted(abort_reason_); }

void EmulatedGroup::sleep_before_arrival() const {
  // A few microseconds of random delay: threads sharing two cores otherwise tend to arrive in
  // the same order every time, and `arrival` is meant to model a timing-dependent order.
  thread_local std::minstd_rand engine{std::random_device{}()};
  std::uniform_int_distribution<int> micros(0, 20);
  std::this_thread::sleep_for(std::chrono::microseconds(micros(engine)));
}

std::string EmulatedGroup::describe_call_locked(const Posted& posted, uint64_t call) const {
  return std::string(op_name(static_cast<int>(posted.op))) + " (call " + std::to_string(call) +
         ", count " + std::to_string(posted.count) + ")";
}

void EmulatedGroup::arrive_and_wait_locked(std::unique_lock<std::mutex>& lock, int rank,
                                           uint64_t call, const char* phase) {
  arrived_[rank] = 1;
  if (++arrived_count_ == size_) {
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    lock.lock();
    return;
  }
  const uint64_t generation = generation_;
  const auto released = [&] { return generation_ != generation || aborted_; };
  if (watchdog_.count() == 0) {
    wake_.wait(lock, released);
  } else if (!wake_.wait_for(lock, watchdog_, released)) {
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (arrived_[r]) continue;
      if (!missing.empty()) missing += ", ";
      missing += std::to_string(r);
    }
    abort_locked("emulated comm watchdog: rank " + std::to_string(rank) + " waited over " +
                 std::to_string(watchdog_.count()) + " ms " + phase + " " +
                 describe_call_locked(posted_[rank], call) +
                 "; ranks that never arrived: " + missing);
    lock.unlock();
    wake_.notify_all();
    lock.lock();
  }
  if (aborted_) throw_aborted_locked();
}

std::string EmulatedGroup::complete_publish_locked() {
  const Posted& first = posted_[0];
  for (int r = 1; r < size_; ++r) {
    if (posted_[r].op != first.op || posted_[r].count != first.count) {
      return "emulated comm: ranks disagree on collective call " + std::to_string(next_call_) +
             ": rank 0 called " + describe_call_locked(first, next_call_) + ", rank " +
             std::to_string(r) + " called " + describe_call_locked(posted_[r], next_call_);
    }
  }
  current_call_ = next_call_++;
  if (first.op == Op::all_reduce) {
    // Every rank is here, so nobody still copies an earlier result out of the scratch.
    if (scratch_.size() < first.count) scratch_.resize(first.count);
  }
  return {};
}

template <class Work>
void EmulatedGroup::run_or_abort(int rank, const char* what, Work&& work) {
  try {
    work();
  } catch (const std::exception& e) {
    abort("rank " + std::to_string(rank) + " failed inside " + what + ": " + e.what());
    throw;
  }
}

uint64_t EmulatedGroup::publish_and_wait(int rank, const Posted& posted) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw_aborted_locked();
  const uint64_t call = next_call_;  // the call in progress until the last arrival completes it
  posted_[rank] = posted;
  inputs_[rank] = posted.in;
  arrival_order_[arrived_count_] = rank;
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
  arrive_and_wait_locked(lock, rank, call, "at the start of");
  return current_call_;
}

void EmulatedGroup::finish_and_wait(int rank, uint64_t call) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw_aborted_locked();
  arrive_and_wait_locked(lock, rank, call, "at the end of");
}

void EmulatedGroup::all_reduce(int rank, bf16* data, size_t count) {
  if (size_ == 1) {
    if (aborted()) throw CommAborted(abort_reason_);
    return;
  }
  if (orders_.all_reduce == ReduceOrder::arrival) sleep_before_arrival();
  const uint64_t call = publish_and_wait(rank, Posted{Op::all_reduce, data, count});
  // Split the work: rank r sums slice r of the message into the shared scratch; every rank then
  // copies the whole result. Each element's order is the model's, whoever computes it.
  const size_t begin = count * rank / size_;
  const size_t end = count * (rank + 1) / size_;
  bf16* scratch = scratch_.data();
  run_or_abort(rank, "all_reduce", [&] {
    all_reduce_range(orders_.all_reduce, inputs_, count, begin, end,
                     RankSequences{.ring = ring_order_, .arrival = arrival_order_},
                     scratch + begin);
  });
  finish_and_wait(rank, call);  // all slices written; no rank reads `data` any more
  if (count > 0) std::memcpy(data, scratch, count * sizeof(bf16));
}

void EmulatedGroup::reduce_scatter(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) {
    if (aborted()) throw CommAborted(abort_reason_);
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(bf16));
    return;
  }
  if (orders_.reduce_scatter == ReduceOrder::arrival) sleep_before_arrival();
  const uint64_t call = publish_and_wait(rank, Posted{Op::reduce_scatter, in, count});
  // Only this rank reads block `rank` of the inputs, so out may be in + rank*count (in place).
  run_or_abort(rank, "reduce_scatter", [&] {
    reduce_scatter_block(orders_.reduce_scatter, inputs_, count, rank,
                         RankSequences{.ring = ring_order_, .arrival = arrival_order_}, out);
  });
  finish_and_wait(rank, call);  // peers may now overwrite their inputs
}

void EmulatedGroup::all_gather(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) {
    if (aborted()) throw CommAborted(abort_reason_);
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(bf16));
    return;
  }
  const uint64_t call = publish_and_wait(rank, Posted{Op::all_gather, in, count});
  if (count > 0) {
    for (int r = 0; r < size_; ++r) {
      bf16* block = out + static_cast<size_t>(r) * count;
      // In place (in == out + rank*count) the own block is already there.
      if (inputs_[r] != block) std::memmove(block, inputs_[r], count * sizeof(bf16));
    }
  }
  finish_and_wait(rank, call);
}

}  // namespace bih
