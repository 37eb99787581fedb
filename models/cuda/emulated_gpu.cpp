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

}  // namespace

// ---- EmulatedGpuRank ----------------------------------------------------------------------------

EmulatedGpuRank::EmulatedGpuRank(EmulatedGpuGroup* group, int rank) : group_(group), rank_(rank) {
  try {
    cudaCheck(cudaSetDevice(group->device_));
    // Non-blocking: the legacy default stream must not silently order the ranks' streams.
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&input_ready_, cudaEventDisableTiming));
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
    cudaStreamDestroy(stream_);
  }
  if (input_ready_ != nullptr) cudaEventDestroy(input_ready_);
  stream_ = nullptr;
  input_ready_ = nullptr;
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
  cudaCheck(cudaEventCreateWithFlags(&hub_.done, cudaEventDisableTiming));
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
  std::fprintf(
      stderr, "%s",
      fmt::format("emulated GPU group of {} ranks: {} collectives a rank; host time a "
                  "collective a rank: {:.1f} us before the barrier (checks, record), "
                  "{:.1f} us at it (the hub launch included), {:.1f} us after (the wait); at "
                  "the barrier by rank (us):{}\n",
                  size_, all.calls / size_, all.before * us, all.barrier * us, all.after * us,
                  barrier_by_rank)
          .c_str());
}

EmulatedGpuGroup::~EmulatedGpuGroup() {
  if (host_profile_) print_host_profile();
  // An aborted call may leave a hub kernel no rank waited for: it drains before any rank goes.
  cudaSetDevice(device_);
  if (hub_.stream != nullptr) cudaStreamSynchronize(hub_.stream);
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
  if (done != nullptr) cudaEventDestroy(done);
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

void EmulatedGpuGroup::meet(int rank, const Meeting& m) {
  EmulatedGpuRank& me = *ranks_[rank];
  std::chrono::steady_clock::time_point since;
  if (host_profile_) since = std::chrono::steady_clock::now();
  Rendezvous::Posted posted{m.op, nullptr, m.count};
  posted.barriers = 1;  // the hub kernel's "done" orders every later write after its reads
  rendezvous_.run_or_abort(rank, m.name, [&] {
    cudaCheck(cudaSetDevice(device_));
    m.check();
    me.capturing_ = capturing(rank);
    me.output_ = m.out;
    if (m.f32) {
      posted.in_f32 = static_cast<const float*>(m.in);
    } else {
      posted.in = static_cast<const bf16*>(m.in);
    }
    cudaCheck(cudaEventRecord(me.input_ready_, me.stream_));
  });
  if (m.arrival) Rendezvous::sleep_before_arrival();
  EmulatedGpuRank::HostTimes& times = me.host_times_;
  if (host_profile_) times.before += seconds_since(since);
  rendezvous_.publish_and_wait(rank, posted, [&] { launch_on_hub(m); });
  if (host_profile_) times.barrier += seconds_since(since);
  rendezvous_.run_or_abort(rank, m.name, [&] {
    me.last_arrival_order_ = rendezvous_.arrival_order();
    cudaCheck(cudaStreamWaitEvent(me.stream_, hub_.done, 0));
  });
  if (host_profile_) {
    times.after += seconds_since(since);
    ++times.calls;
  }
}

void EmulatedGpuGroup::launch_on_hub(const Meeting& m) {
  for (int r = 1; r < size_; ++r) {
    if (ranks_[r]->capturing_ != ranks_[0]->capturing_) {
      throw std::invalid_argument(fmt::format(
          "emulated GPU comm: {}: rank {} is {}capturing a CUDA graph and rank {} is {}; every "
          "rank of a collective must be capturing or none",
          m.name, r, ranks_[r]->capturing_ ? "" : "not ", 0,
          ranks_[0]->capturing_ ? "capturing" : "not"));
    }
  }
  for (const auto& r : ranks_) cudaCheck(cudaStreamWaitEvent(hub_.stream, r->input_ready_, 0));
  if (size_ <= detail::kHubSmallRanks) {
    fill_and_launch<detail::kHubSmallRanks>(m);
  } else {
    fill_and_launch<detail::kMaxChainLength>(m);
  }
  cudaCheck(cudaEventRecord(hub_.done, hub_.stream));
}

template <int kRanks>
void EmulatedGpuGroup::fill_and_launch(const Meeting& m) {
  detail::HubArgs<kRanks> args;
  args.ranks = size_;
  args.count = m.count;
  args.segment = std::max<size_t>(m.count, 1);
  for (int r = 0; r < size_; ++r) {
    args.inputs[r] = m.f32 ? static_cast<const void*>(rendezvous_.inputs_f32()[r])
                           : static_cast<const void*>(rendezvous_.inputs()[r]);
    args.outputs[r] = static_cast<uint16_t*>(ranks_[r]->output_);
  }
  const RankSequences sequences{.ring = ring_order_, .arrival = rendezvous_.arrival_order()};
  auto set_chain = [&](int row, const std::vector<int>& chain) {
    if (args.chain_length != 0 && args.chain_length != static_cast<int>(chain.size())) {
      throw std::logic_error("emulated GPU comm: chains of one collective differ in length");
    }
    args.chain_length = static_cast<int>(chain.size());
    std::copy(chain.begin(), chain.end(), args.chains[row]);
  };
  switch (m.op) {
    case CollectiveOp::all_reduce: {
      args.op = detail::HubOp::all_reduce;
      args.fp32_once = orders_.all_reduce == ReduceOrder::fixed;
      // The chain is constant over a ring chunk (ring) or over the whole message (other orders):
      // a row per such segment, with the chain the pure model gives its first element.
      if (orders_.all_reduce == ReduceOrder::ring) args.segment = ring_chunk_size(m.count, size_);
      for (size_t begin = 0, row = 0; begin < m.count; begin += args.segment, ++row) {
        set_chain(static_cast<int>(row),
                  all_reduce_chain(orders_.all_reduce, size_, m.count, begin, sequences));
      }
      break;
    }
    case CollectiveOp::reduce_scatter:
      args.op = detail::HubOp::reduce_scatter;
      args.fp32_once = orders_.reduce_scatter == ReduceOrder::fixed;
      for (int owner = 0; owner < size_; ++owner) {
        set_chain(owner, reduce_scatter_chain(orders_.reduce_scatter, size_, owner, sequences));
      }
      break;
    case CollectiveOp::all_gather:
      args.op = detail::HubOp::all_gather;
      break;
    case CollectiveOp::all_reduce_f32:
      args.op = detail::HubOp::all_reduce_tree_f32;
      break;
    case CollectiveOp::reduce_scatter_f32:
      args.op = detail::HubOp::reduce_scatter_tree_f32;
      break;
  }
  detail::launch_hub(args, hub_.stream);
}

void EmulatedGpuGroup::all_reduce(int rank, bf16* data, size_t count) {
  if (size_ == 1) return single_rank_copy(data, data, count);
  meet(rank, Meeting{CollectiveOp::all_reduce, "all_reduce", data, data, count, false,
                     orders_.all_reduce == ReduceOrder::arrival,
                     [&] { check_pointer(rank, data, count, "all_reduce data"); }});
}

void EmulatedGpuGroup::reduce_scatter(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) return single_rank_copy(in, out, count);
  meet(rank, Meeting{CollectiveOp::reduce_scatter, "reduce_scatter", in, out, count, false,
                     orders_.reduce_scatter == ReduceOrder::arrival, [&] {
                       check_pointer(rank, in, count * size_, "a reduce_scatter input");
                       check_pointer(rank, out, count, "a reduce_scatter output");
                     }});
}

void EmulatedGpuGroup::all_gather(int rank, const bf16* in, bf16* out, size_t count) {
  if (size_ == 1) return single_rank_copy(in, out, count);
  meet(rank, Meeting{CollectiveOp::all_gather, "all_gather", in, out, count, false, false, [&] {
                       check_pointer(rank, in, count, "an all_gather input");
                       check_pointer(rank, out, count * size_, "an all_gather output");
                     }});
}

// The tree's sum reads every rank's fp32 input and writes each rank's bf16 output, which never
// overlaps an input.
void EmulatedGpuGroup::tree_f32_collective(int rank, CollectiveOp op, const char* name,
                                           const float* in, bf16* out, size_t offset,
                                           size_t count) {
  EmulatedGpuRank& me = *ranks_[rank];
  const size_t in_count = op == CollectiveOp::all_reduce_f32 ? count : count * size_;
  auto check_pointers = [&] {
    if (!tp_invariant_tp_ok(size_)) {
      throw std::invalid_argument(std::string("emulated GPU comm: ") + name + " needs 1, 2, 4 or " +
                                  "8 ranks (the chunk tree), not " + std::to_string(size_));
    }
    cudaCheck(cudaSetDevice(device_));
    check_pointer(rank, in, in_count, "a tree collective's fp32 input");
    check_pointer(rank, out, count, "a tree collective's output");
  };
  if (size_ == 1) {
    rendezvous_.throw_if_aborted();
    me.last_arrival_order_ = {0};
    check_pointers();
    detail::TreeF32SumArgs args;
    args.inputs[0] = in;
    args.ranks = 1;
    args.input_offset = offset;
    args.count = count;
    args.out = bits_of(out);
    detail::launch_tree_f32_sum(args, me.stream_);
    return;
  }
  meet(rank, Meeting{op, name, in, out, count, true, false, check_pointers});
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
