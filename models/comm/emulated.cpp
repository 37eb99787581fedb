// emulated.cpp: threads as ranks (emulated.hpp).
#include "models/comm/emulated.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

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
  void all_reduce_tree_f32(const float* in, bf16* out, size_t count) override {
    group_->all_reduce_tree_f32(rank_, in, out, count);
  }
  void reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) override {
    group_->reduce_scatter_tree_f32(rank_, in, out, count);
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
      rendezvous_(size, watchdog, "emulated comm", [this](const Rendezvous::Posted& call) {
        // Every rank is at barrier 1: nobody still copies an earlier result out of the scratch.
        if (call.op == CollectiveOp::all_reduce && scratch_.size() < call.count) {
          scratch_.resize(call.count);
        }
      }) {
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

void EmulatedGroup::abort(const std::string& why) { rendezvous_.abort(why); }

bool EmulatedGroup::aborted() const { return rendezvous_.aborted(); }

void EmulatedGroup::all_reduce(int rank, bf16* data, size_t count) {
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    return;
  }
  if (orders_.all_reduce == ReduceOrder::arrival) Rendezvous::sleep_before_arrival();
  const uint64_t call = rendezvous_.publish_and_wait(rank, {CollectiveOp::all_reduce, data, count});
  // Split the work: rank r sums slice r of the message into the shared scratch; every rank then
  // copies the whole result. Each element's order is the model's, whoever computes it.
  const size_t begin = count * rank / size_;
  const size_t end = count * (rank + 1) / size_;
  bf16* scratch = scratch_.data();
  rendezvous_.run_or_abort(rank, "all_reduce", [&] {
    all_reduce_range(orders_.all_reduce, rendezvous_.inputs(), count, begin, end,
                     RankSequences{.ring = ring_order_, .arrival = rendezvous_.arrival_order()},
                     scratch + begin);
  });
  rendezvous_.finish_and_wait(rank, call);  // all slices written; no rank reads `data` any more
  if (count > 0) std::memcpy(data, scratch, count * sizeof(bf16));
}

void EmulatedGroup::reduce_scatter(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(bf16));
    return;
  }
  if (orders_.reduce_scatter == ReduceOrder::arrival) Rendezvous::sleep_before_arrival();
  const uint64_t call =
      rendezvous_.publish_and_wait(rank, {CollectiveOp::reduce_scatter, in, count});
  // Only this rank reads block `rank` of the inputs, so out may be in + rank*count (in place).
  rendezvous_.run_or_abort(rank, "reduce_scatter", [&] {
    reduce_scatter_block(orders_.reduce_scatter, rendezvous_.inputs(), count, rank,
                         RankSequences{.ring = ring_order_, .arrival = rendezvous_.arrival_order()},
                         out);
  });
  rendezvous_.finish_and_wait(rank, call);  // peers may now overwrite their inputs
}

void EmulatedGroup::all_gather(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    if (count > 0 && in != out) std::memmove(out, in, count * sizeof(bf16));
    return;
  }
  const uint64_t call = rendezvous_.publish_and_wait(rank, {CollectiveOp::all_gather, in, count});
  if (count > 0) {
    for (int r = 0; r < size_; ++r) {
      bf16* block = out + static_cast<size_t>(r) * count;
      // In place (in == out + rank*count) the own block is already there.
      if (rendezvous_.inputs()[r] != block)
        std::memmove(block, rendezvous_.inputs()[r], count * sizeof(bf16));
    }
  }
  rendezvous_.finish_and_wait(rank, call);
}

// Every rank sums its block itself (fp32 inputs, bf16 output: out never aliases an input), so no
// shared scratch is needed; barrier 2 keeps the inputs alive until all ranks have read them.
// `offset`: where this rank's block starts in every input (0 for all_reduce).
void EmulatedGroup::tree_f32_collective(int rank, CollectiveOp op, const char* name,
                                        const float* in, bf16* out, size_t offset, size_t count) {
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    const float* only[1] = {in};
    tree_f32_sum(only, offset, count, out);
    return;
  }
  const uint64_t call = rendezvous_.publish_and_wait(rank, {op, nullptr, count, in});
  rendezvous_.run_or_abort(rank, name,
                           [&] { tree_f32_sum(rendezvous_.inputs_f32(), offset, count, out); });
  rendezvous_.finish_and_wait(rank, call);
}

void EmulatedGroup::all_reduce_tree_f32(int rank, const float* in, bf16* out, size_t count) {
  tree_f32_collective(rank, CollectiveOp::all_reduce_f32, "all_reduce_tree_f32", in, out, 0, count);
}

void EmulatedGroup::reduce_scatter_tree_f32(int rank, const float* in, bf16* out, size_t count) {
  tree_f32_collective(rank, CollectiveOp::reduce_scatter_f32, "reduce_scatter_tree_f32", in, out,
                      static_cast<size_t>(rank) * count, count);
}

}  // namespace bih
