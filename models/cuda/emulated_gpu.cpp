// emulated_gpu.cpp: threads as ranks on one GPU (emulated_gpu.hpp).
#include "models/cuda/emulated_gpu.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "models/cuda/check.hpp"
#include "models/cuda/emulated_gpu_kernels.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {

static_assert(sizeof(bf16) == sizeof(uint16_t), "bf16 must be its 16 bits, as the kernel reads it");
static_assert(detail::kMaxChainLength == kMaxRanks, "the kernel's chain must fit any group");
static_assert(detail::kMaxTreeRanks == kTpInvariantChunks, "the tree kernel must fit any TP size");

namespace {

std::vector<int> resolve_ring_order(int size, std::vector<int> ring_order) {
  if (size < 1 || size > kMaxRanks) {
    throw std::invalid_argument("emulated GPU group: size " + std::to_string(size) +
                                " is outside 1.." + std::to_string(kMaxRanks));
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

// Throws std::invalid_argument unless `p` is device (or managed) memory of `device`. A host
// pointer would otherwise fault inside the kernel and poison the whole CUDA context.
void check_device_pointer(const void* p, size_t count, int device, int rank, const char* what) {
  if (count == 0) return;
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, p);
  if (error != cudaSuccess) cudaGetLastError();  // an invalid pointer is our error, not sticky
  const bool on_device = error == cudaSuccess && (attributes.type == cudaMemoryTypeDevice ||
                                                  attributes.type == cudaMemoryTypeManaged);
  if (!on_device || attributes.device != device) {
    throw std::invalid_argument(std::string("emulated GPU comm: rank ") + std::to_string(rank) +
                                " passed " + what + " that is not device memory of GPU " +
                                std::to_string(device));
  }
}

bool host_profile_requested() {
  const char* flag = std::getenv("BIH_EMULATED_HOST_PROFILE");
  return flag != nullptr && *flag != '\0' && std::strcmp(flag, "0") != 0;
}

double seconds_since(std::chrono::steady_clock::time_point& since) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - since).count();
  since = now;
  return seconds;
}

const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* bits_of(bf16* p) { return reinterpret_cast<uint16_t*>(p); }

// Launch arguments reading every rank's input, summing along `chain`.
detail::ChainSumArgs chain_sum_args(ReduceOrder order, const std::vector<const bf16*>& inputs,
                                    const std::vector<int>& chain) {
  detail::ChainSumArgs args;
  for (size_t r = 0; r < inputs.size(); ++r) args.inputs[r] = bits_of(inputs[r]);
  std::copy(chain.begin(), chain.end(), args.chain);
  args.chain_length = static_cast<int>(chain.size());
  args.fp32_once = order == ReduceOrder::fixed;
  return args;
}

}  // namespace

// ---- EmulatedGpuRank ----------------------------------------------------------------------------

EmulatedGpuRank::EmulatedGpuRank(EmulatedGpuGroup* group, int rank) : group_(group), rank_(rank) {
  try {
    cudaCheck(cudaSetDevice(group->device_));
    // Non-blocking: the legacy default stream must not silently order the ranks' streams.
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&read_done_, cudaEventDisableTiming));
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

EmulatedGpuRank::~EmulatedGpuRank() { release(); }

void EmulatedGpuRank::release() noexcept {
  // No throwing here: this runs in a destructor, maybe while an exception unwinds.
  cudaSetDevice(group_->device_);
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    scratch_.free_on(stream_);
    for (StreamBuffer& slot : staging_) slot.free_on(stream_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  if (input_ready_ != nullptr) cudaEventDestroy(input_ready_);
  if (read_done_ != nullptr) cudaEventDestroy(read_done_);
  stream_ = nullptr;
  input_ready_ = read_done_ = nullptr;
  cudaGetLastError();
}

int EmulatedGpuRank::size() const { return group_->size_; }

void EmulatedGpuRank::all_reduce(bf16* data, size_t count) {
  group_->all_reduce(rank_, data, count);
}

void EmulatedGpuRank::reduce_scatter(const bf16* in, bf16* out, size_t count) {
  group_->reduce_scatter(rank_, in, out, count);
}

void EmulatedGpuRank::all_gather(const bf16* in, bf16* out, size_t count) {
  group_->all_gather(rank_, in, out, count);
}

void EmulatedGpuRank::all_reduce_tree_f32(const float* in, bf16* out, size_t count) {
  group_->tree_f32_collective(rank_, CollectiveOp::all_reduce_f32, "all_reduce_tree_f32", in, out,
                              0, count);
}

void EmulatedGpuRank::reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) {
  group_->tree_f32_collective(rank_, CollectiveOp::reduce_scatter_f32, "reduce_scatter_tree_f32",
                              in, out, static_cast<size_t>(rank_) * count, count);
}

void EmulatedGpuRank::abort(const std::string& why) {
  group_->abort("rank " + std::to_string(rank_) + " aborted the group: " + why);
}

std::string EmulatedGpuRank::describe() const { return group_->describe(); }

void EmulatedGpuRank::synchronize() const {
  cudaCheck(cudaSetDevice(group_->device_));
  cudaCheck(cudaStreamSynchronize(stream_));
}

void EmulatedGpuRank::StreamBuffer::reserve(size_t bytes, CUstream_st* stream) {
  if (bytes <= capacity) return;
  const size_t grown = std::max(bytes, 2 * capacity);
  if (data != nullptr) cudaCheck(cudaFreeAsync(data, stream));
  data = nullptr;
  capacity = 0;
  cudaCheck(cudaMallocAsync(&data, grown, stream));
  capacity = grown;
}

void EmulatedGpuRank::StreamBuffer::free_on(CUstream_st* stream) noexcept {
  if (data != nullptr) cudaFreeAsync(data, stream);
  data = nullptr;
  capacity = 0;
}

// ---- EmulatedGpuGroup ---------------------------------------------------------------------------

EmulatedGpuGroup::EmulatedGpuGroup(int size, CollectiveOrders orders, std::vector<int> ring_order,
                                   int device, std::chrono::milliseconds watchdog)
    : size_(size),
      orders_(orders),
      ring_order_(resolve_ring_order(size, std::move(ring_order))),
      device_(device),
      host_profile_(host_profile_requested()),
      rendezvous_(size, watchdog, "emulated GPU comm") {
  cudaCheck(cudaSetDevice(device));
  cudaCheck(cudaStreamCreateWithFlags(&hub_.stream, cudaStreamNonBlocking));
  cudaCheck(cudaEventCreateWithFlags(&hub_.inputs_ready, cudaEventDisableTiming));
  join_inputs_ = [this] { join_on_hub(); };
  ranks_.reserve(size);
  for (int r = 0; r < size; ++r) {
    ranks_.push_back(std::unique_ptr<EmulatedGpuRank>(new EmulatedGpuRank(this, r)));
  }
}

void EmulatedGpuGroup::print_host_profile() const {
  EmulatedGpuRank::HostTimes all;
  std::string barrier_by_rank;
  for (const auto& r : ranks_) {
    const EmulatedGpuRank::HostTimes& t = r->host_times_;
    all.calls += t.calls;
    all.before += t.before;
    all.barrier += t.barrier;
    all.after += t.after;
    barrier_by_rank += fmt::format(" {:.1f}", t.calls ? 1e6 * t.barrier / t.calls : 0.0);
  }
  if (all.calls == 0) return;
  const double us = 1e6 / static_cast<double>(all.calls);
  std::fprintf(stderr, "%s",
               fmt::format("emulated GPU group of {} ranks: {} collectives a rank; host time a "
                           "collective a rank: {:.1f} us before the barrier (checks, staging "
                           "copy, record), {:.1f} us at it, {:.1f} us after (waits, launches); at "
                           "the barrier by rank (us):{}\n",
                           size_, all.calls / size_, all.before * us, all.barrier * us,
                           all.after * us, barrier_by_rank)
                   .c_str());
}

EmulatedGpuGroup::~EmulatedGpuGroup() {
  if (host_profile_) print_host_profile();
  // A rank's staging slots may still be read by a peer's stream after its own stream is done
  // (there is no second barrier eagerly): every stream drains before any rank frees anything.
  cudaSetDevice(device_);
  for (const auto& r : ranks_) {
    if (r->stream_ != nullptr) cudaStreamSynchronize(r->stream_);
  }
  cudaGetLastError();
}

EmulatedGpuGroup::Hub::~Hub() {
  if (stream != nullptr) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (inputs_ready != nullptr) cudaEventDestroy(inputs_ready);
  cudaGetLastError();
}

EmulatedGpuRank& EmulatedGpuGroup::rank(int r) {
  if (r < 0 || r >= size_) {
    throw std::out_of_range("emulated GPU group: rank " + std::to_string(r) + " is outside 0.." +
                            std::to_string(size_ - 1));
  }
  return *ranks_[r];
}

std::string EmulatedGpuGroup::describe() const { return describe_emulated(orders_, ring_order_); }

void EmulatedGpuGroup::abort(const std::string& why) { rendezvous_.abort(why); }

bool EmulatedGpuGroup::aborted() const { return rendezvous_.aborted(); }

void EmulatedGpuGroup::check_pointer(int rank, const void* p, size_t count, const char* what) {
  // A start address once seen to be device memory of this GPU stays so (one unified address
  // space): an eager step checks the same few buffers hundreds of times.
  std::vector<const void*>& seen = ranks_[rank]->device_pointers_seen_;
  if (std::find(seen.begin(), seen.end(), p) != seen.end()) return;
  check_device_pointer(p, count, device_, rank, what);
  if (count == 0) return;
  if (seen.size() >= 64) seen.clear();
  seen.push_back(p);
}

void EmulatedGpuGroup::join_on_hub() {
  for (const auto& r : ranks_) cudaCheck(cudaStreamWaitEvent(hub_.stream, r->input_ready_, 0));
  cudaCheck(cudaEventRecord(hub_.inputs_ready, hub_.stream));
}

void EmulatedGpuGroup::wait_for_peers(int rank, CUevent_st* EmulatedGpuRank::*which, bool on_hub) {
  cudaStream_t stream = ranks_[rank]->stream_;
  if (on_hub) {
    cudaCheck(cudaStreamWaitEvent(stream, hub_.inputs_ready, 0));
    return;
  }
  for (int q = 0; q < size_; ++q) {
    if (q != rank) cudaCheck(cudaStreamWaitEvent(stream, ranks_[q].get()->*which, 0));
  }
}

void EmulatedGpuGroup::single_rank_copy(const bf16* in, bf16* out, size_t count) {
  rendezvous_.throw_if_aborted();
  EmulatedGpuRank& me = *ranks_[0];
  me.last_arrival_order_ = {0};
  if (count == 0 || in == out) return;
  cudaCheck(cudaSetDevice(device_));
  check_pointer(0, in, count, "an input");
  check_pointer(0, out, count, "an output");
  cudaCheck(cudaMemcpyAsync(out, in, count * sizeof(bf16), cudaMemcpyDeviceToDevice, me.stream_));
}

bool EmulatedGpuGroup::capturing(int rank) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaCheck(cudaStreamIsCapturing(ranks_[rank]->stream_, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

const void* EmulatedGpuGroup::stage_input(int rank, const void* in, size_t bytes) {
  EmulatedGpuRank& me = *ranks_[rank];
  EmulatedGpuRank::StreamBuffer& slot = me.staging_[me.staging_parity_];
  me.staging_parity_ ^= 1;
  // The slot's last readers finished before this stream's wait of the call in between
  // (emulated_gpu.hpp), so its stream-ordered growth and the copy may overwrite it.
  slot.reserve(bytes, me.stream_);
  if (bytes != 0) {
    cudaCheck(cudaMemcpyAsync(slot.data, in, bytes, cudaMemcpyDeviceToDevice, me.stream_));
  }
  return slot.data;
}

void EmulatedGpuGroup::meet(int rank, const Meeting& m, const std::function<void(bool)>& reads,
                            const std::function<void()>& after_reads) {
  EmulatedGpuRank& me = *ranks_[rank];
  std::chrono::steady_clock::time_point since;
  if (host_profile_) since = std::chrono::steady_clock::now();
  Rendezvous::Posted posted{m.op, nullptr, m.count};
  rendezvous_.run_or_abort(rank, m.name, [&] {
    cudaCheck(cudaSetDevice(device_));
    m.check();
    posted.barriers = capturing(rank) ? 2 : 1;
    const void* in = posted.barriers == 1 ? stage_input(rank, m.in, m.in_bytes) : m.in;
    if (m.f32) {
      posted.in_f32 = static_cast<const float*>(in);
    } else {
      posted.in = static_cast<const bf16*>(in);
    }
    cudaCheck(cudaEventRecord(me.input_ready_, me.stream_));
  });
  if (m.arrival) Rendezvous::sleep_before_arrival();
  EmulatedGpuRank::HostTimes& times = me.host_times_;
  if (host_profile_) times.before += seconds_since(since);
  const bool staged = posted.barriers == 1;
  const uint64_t call = rendezvous_.publish_and_wait(
      rank, posted, staged ? join_inputs_ : Rendezvous::LastArrivalWork{});
  if (host_profile_) times.barrier += seconds_since(since);
  rendezvous_.run_or_abort(rank, m.name, [&] {
    me.last_arrival_order_ = rendezvous_.arrival_order();
    wait_for_peers(rank, &EmulatedGpuRank::input_ready_, staged);
    reads(staged);
    if (!staged) cudaCheck(cudaEventRecord(me.read_done_, me.stream_));
  });
  if (host_profile_) {
    times.after += seconds_since(since);
    ++times.calls;
  }
  if (staged) return;
  rendezvous_.finish_and_wait(rank, call);
  if (host_profile_) times.barrier += seconds_since(since);
  // Peers' later work on their streams may overwrite their inputs only after this rank read them,
  // and vice versa.
  rendezvous_.run_or_abort(rank, m.name, [&] {
    wait_for_peers(rank, &EmulatedGpuRank::read_done_, false);
    if (after_reads) after_reads();
  });
}

void EmulatedGpuGroup::all_reduce(int rank, bf16* data, size_t count) {
  if (size_ == 1) return single_rank_copy(data, data, count);
  EmulatedGpuRank& me = *ranks_[rank];
  const Meeting meeting{CollectiveOp::all_reduce,
                        "all_reduce",
                        data,
                        count * sizeof(bf16),
                        count,
                        false,
                        orders_.all_reduce == ReduceOrder::arrival,
                        [&] {
                          check_pointer(rank, data, count, "all_reduce data");
                          // Eagerly too, though only a captured call sums into scratch: the eager
                          // warm-up then sizes it, and a capture allocates nothing (an allocation
                          // node the graph never frees would refuse its second launch).
                          me.scratch_.reserve(count * sizeof(bf16), me.stream_);
                        }};
  meet(
      rank, meeting,
      [&](bool staged) {
        if (count == 0) return;
        // Staged, nobody reads `data` but this rank. Otherwise `data` is every peer's input too:
        // the sum goes to scratch and over `data` after the second barrier.
        bf16* const out = staged ? data : static_cast<bf16*>(me.scratch_.data);
        const RankSequences sequences{.ring = ring_order_, .arrival = rendezvous_.arrival_order()};
        // The chain is constant over a ring chunk (ring) or over the whole message (other orders):
        // one launch per such segment, with the chain the pure model gives its first element.
        const size_t segment =
            orders_.all_reduce == ReduceOrder::ring ? ring_chunk_size(count, size_) : count;
        for (size_t begin = 0; begin < count; begin += segment) {
          const std::vector<int> chain =
              all_reduce_chain(orders_.all_reduce, size_, count, begin, sequences);
          detail::ChainSumArgs args =
              chain_sum_args(orders_.all_reduce, rendezvous_.inputs(), chain);
          args.input_offset = begin;
          args.count = std::min(segment, count - begin);
          args.out = bits_of(out + begin);
          detail::launch_chain_sum(args, me.stream_);
        }
      },
      [&] {
        if (count == 0) return;
        cudaCheck(cudaMemcpyAsync(data, me.scratch_.data, count * sizeof(bf16),
                                  cudaMemcpyDeviceToDevice, me.stream_));
      });
}

void EmulatedGpuGroup::reduce_scatter(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) return single_rank_copy(in, out, count);
  EmulatedGpuRank& me = *ranks_[rank];
  const Meeting meeting{CollectiveOp::reduce_scatter,
                        "reduce_scatter",
                        in,
                        count * size_ * sizeof(bf16),
                        count,
                        false,
                        orders_.reduce_scatter == ReduceOrder::arrival,
                        [&] {
                          check_pointer(rank, in, count * size_, "a reduce_scatter input");
                          check_pointer(rank, out, count, "a reduce_scatter output");
                        }};
  meet(rank, meeting, [&](bool) {
    const std::vector<int> chain = reduce_scatter_chain(
        orders_.reduce_scatter, size_, rank,
        RankSequences{.ring = ring_order_, .arrival = rendezvous_.arrival_order()});
    detail::ChainSumArgs args = chain_sum_args(orders_.reduce_scatter, rendezvous_.inputs(), chain);
    // Only this rank reads block `rank` of the inputs, and each element is read before it is
    // written, so out may be in + rank*count (in place).
    args.input_offset = static_cast<size_t>(rank) * count;
    args.count = count;
    args.out = bits_of(out);
    detail::launch_chain_sum(args, me.stream_);
  });
}

void EmulatedGpuGroup::all_gather(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) return single_rank_copy(in, out, count);
  EmulatedGpuRank& me = *ranks_[rank];
  const Meeting meeting{
      CollectiveOp::all_gather, "all_gather", in, count * sizeof(bf16), count, false, false, [&] {
        check_pointer(rank, in, count, "an all_gather input");
        check_pointer(rank, out, count * size_, "an all_gather output");
      }};
  meet(rank, meeting, [&](bool) {
    // In place (in == out + rank*count, unstaged) the own block is already there: the kernel
    // skips it.
    detail::GatherArgs args;
    for (int q = 0; q < size_; ++q) args.inputs[q] = bits_of(rendezvous_.inputs()[q]);
    args.ranks = size_;
    args.count = count;
    args.out = bits_of(out);
    detail::launch_gather(args, me.stream_);
  });
}

// The tree's sum reads every rank's fp32 input and writes only this rank's bf16 output, so no
// scratch is needed.
void EmulatedGpuGroup::tree_f32_collective(int rank, CollectiveOp op, const char* name,
                                           const float* in, bf16* out, size_t offset,
                                           size_t count) {
  EmulatedGpuRank& me = *ranks_[rank];
  const size_t in_count = op == CollectiveOp::all_reduce_f32 ? count : count * size_;
  auto launch = [&](const std::vector<const float*>& inputs) {
    detail::TreeF32SumArgs args;
    if (!tp_invariant_tp_ok(size_)) {
      throw std::invalid_argument(std::string("emulated GPU comm: ") + name + " needs 1, 2, 4 or " +
                                  "8 ranks (the chunk tree), not " + std::to_string(size_));
    }
    std::copy(inputs.begin(), inputs.end(), args.inputs);
    args.ranks = size_;
    args.input_offset = offset;
    args.count = count;
    args.out = bits_of(out);
    detail::launch_tree_f32_sum(args, me.stream_);
  };
  auto check_pointers = [&] {
    cudaCheck(cudaSetDevice(device_));
    check_pointer(rank, in, in_count, "a tree collective's fp32 input");
    check_pointer(rank, out, count, "a tree collective's output");
  };
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    me.last_arrival_order_ = {0};
    check_pointers();
    launch({in});
    return;
  }
  const Meeting meeting{op, name, in, in_count * sizeof(float), count, true, false, check_pointers};
  meet(rank, meeting, [&](bool) { launch(rendezvous_.inputs_f32()); });
}
}  // namespace bih::cuda

namespace bih::cuda {

// ---- DeviceBf16Buffer ---------------------------------------------------------------------------

DeviceBf16Buffer::DeviceBf16Buffer(size_t count, int device) : count_(count), device_(device) {
  cudaCheck(cudaSetDevice(device));
  void* p = nullptr;
  cudaCheck(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(bf16)));
  data_ = static_cast<bf16*>(p);
}

DeviceBf16Buffer::~DeviceBf16Buffer() {
  if (data_ == nullptr) return;
  cudaSetDevice(device_);
  cudaFree(data_);
  cudaGetLastError();
}

DeviceBf16Buffer::DeviceBf16Buffer(DeviceBf16Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      device_(other.device_) {}

void DeviceBf16Buffer::upload(std::span<const bf16> host, CUstream_st* stream, size_t offset) {
  if (offset > count_ || host.size() > count_ - offset) {
    throw std::out_of_range("DeviceBf16Buffer: upload of " + std::to_string(host.size()) +
                            " elements at " + std::to_string(offset) + " exceeds " +
                            std::to_string(count_));
  }
  if (host.empty()) return;
  cudaCheck(cudaSetDevice(device_));
  cudaCheck(cudaMemcpyAsync(data_ + offset, host.data(), host.size_bytes(), cudaMemcpyHostToDevice,
                            stream));
}

std::vector<bf16> DeviceBf16Buffer::download(CUstream_st* stream, size_t offset,
                                             size_t count) const {
  if (offset > count_ || count > count_ - offset) {
    throw std::out_of_range("DeviceBf16Buffer: download of " + std::to_string(count) +
                            " elements at " + std::to_string(offset) + " exceeds " +
                            std::to_string(count_));
  }
  std::vector<bf16> host(count);
  if (count == 0) return host;
  cudaCheck(cudaSetDevice(device_));
  cudaCheck(cudaMemcpyAsync(host.data(), data_ + offset, count * sizeof(bf16),
                            cudaMemcpyDeviceToHost, stream));
  cudaCheck(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace bih::cuda
