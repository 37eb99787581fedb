// emulated_gpu.hpp: a tensor-parallel group whose ranks are threads sharing one GPU.
//
// The GPU twin of models/comm/emulated.hpp: same order models, same bits. EmulatedGpuGroup owns
// one Communicator per rank; its pointers are DEVICE pointers on the group's GPU, and every rank
// has its own CUDA stream (non-blocking), as a real rank has its own GPU. Rank r's thread calls
// rank(r)'s collectives; they return once the work is enqueued on rank r's stream, ordered after
// everything enqueued there before (so a rank's kernels and collectives simply follow each other
// on its stream), and later work on that stream sees the result.
//
// A collective is one host barrier and one kernel, eagerly and while the streams are captured
// into a graph alike: each rank records "my input is ready" on its stream and posts its input and
// output at barrier 1 (where the arrival order is recorded); the last rank to arrive makes the
// group's hub stream wait for every rank's event, launches ONE kernel there that computes every
// rank's output (emulated_gpu_kernels.hpp, HubArgs) and records the hub's "done"; every rank's
// stream then waits for "done". The kernel reads the inputs in place: a rank's later work, which
// is what could overwrite its input, runs after "done", so no staging copy and no second barrier
// are needed, and the caller may overwrite its input as soon as the call returns. Against a sum
// kernel per rank (each reading staged copies) this is 3n + 2 stream operations per collective
// instead of 5n + 1, one kernel on the GPU instead of 2n, and while capturing one graph
// node with 2n edges instead of n(n - 1) waits and a copy per rank.
// Every rank of a call must be capturing or none (checked by the last arrival).
//
// The host picks each element's chain with the pure functions of reduce_order.hpp; the device
// only adds (emulated_gpu_kernels.hpp). Results are bitwise the CPU EmulatedGroup's for every
// non-NaN result; a NaN result is NaN on both, but its payload may differ (the host's x86 and the
// GPU propagate NaN payloads differently).
//
// abort(why) wakes every rank waiting at a barrier with CommAborted(why); later calls throw too.
// An optional watchdog aborts a collective that waits too long, naming the missing ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/comm/rendezvous.hpp"

// cudaStream_t and cudaEvent_t are pointers to these; declared here to keep CUDA headers out.
struct CUstream_st;
struct CUevent_st;

namespace bih::cuda {

class EmulatedGpuGroup;

// Rank r's communicator: use from rank r's thread only. Pointers are device pointers on the
// group's GPU (std::invalid_argument otherwise, and the group aborts so peers do not hang).
class EmulatedGpuRank final : public Communicator {
 public:
  ~EmulatedGpuRank() override;  // waits for the stream, then frees its stream and event
  EmulatedGpuRank(const EmulatedGpuRank&) = delete;
  EmulatedGpuRank& operator=(const EmulatedGpuRank&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce(bf16* data, size_t count) override;
  void reduce_scatter(const bf16* in, bf16* out, size_t count) override;
  void all_gather(const bf16* in, bf16* out, size_t count) override;
  // kernels tp_invariant: fp32 in, the chunk tree over the ranks, bf16 out (communicator.hpp).
  void all_reduce_tree_f32(const float* in, bf16* out, size_t count) override;
  void reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) override;
  void abort(const std::string& why) override;
  std::string describe() const override;

  // This rank's stream (a cudaStream_t): enqueue the rank's own kernels here.
  CUstream_st* stream() const { return stream_; }
  // Blocks until everything enqueued on this rank's stream is done.
  void synchronize() const;
  // The order in which the ranks reached barrier 1 of this rank's latest collective: the chain
  // `arrival` summed along. Empty before the first collective; {0} for a group of one.
  const std::vector<int>& last_arrival_order() const { return last_arrival_order_; }

 private:
  friend class EmulatedGpuGroup;
  EmulatedGpuRank(EmulatedGpuGroup* group, int rank);  // creates the stream and event
  void release() noexcept;                             // waits for the stream, frees what exists

  EmulatedGpuGroup* group_;
  int rank_;
  CUstream_st* stream_ = nullptr;
  CUevent_st* input_ready_ = nullptr;  // recorded before barrier 1
  // Posted at barrier 1 for the last arrival's hub launch: this call's output, and whether the
  // rank's stream was being captured.
  void* output_ = nullptr;
  bool capturing_ = false;
  // BIH_EMULATED_HOST_PROFILE=1: this rank's host time in its collectives, in seconds.
  struct HostTimes {
    uint64_t calls = 0;
    double before = 0;   // checks, the record
    double barrier = 0;  // publish_and_wait (the last arrival's hub launch included)
    double after = 0;    // the wait for the hub
  };
  HostTimes host_times_;
  std::vector<int> last_arrival_order_;
  std::vector<const void*> device_pointers_seen_;  // start addresses check_pointer passed
};

class EmulatedGpuGroup {
 public:
  // size: ranks (1..kMaxRanks). ring_order: ring position -> rank, empty for 0..size-1.
  // device: the CUDA device all ranks share. watchdog: longest a rank may wait at a barrier
  // before the group aborts; zero waits forever. Throws std::invalid_argument for a bad size or
  // ring order, std::runtime_error when CUDA fails (no such device).
  EmulatedGpuGroup(int size, CollectiveOrders orders, std::vector<int> ring_order = {},
                   int device = 0,
                   std::chrono::milliseconds watchdog = std::chrono::milliseconds::zero());
  ~EmulatedGpuGroup();  // waits for every rank's stream, then frees streams, events and buffers
  EmulatedGpuGroup(const EmulatedGpuGroup&) = delete;
  EmulatedGpuGroup& operator=(const EmulatedGpuGroup&) = delete;

  EmulatedGpuRank& rank(int r);
  int size() const { return size_; }
  int device() const { return device_; }
  const CollectiveOrders& orders() const { return orders_; }
  const std::vector<int>& ring_order() const { return ring_order_; }  // always size() entries

  // Aborts the group: waiting ranks wake with CommAborted(why); later collectives throw it too.
  // The first reason wins. Safe from any thread. Work already enqueued on streams still runs.
  void abort(const std::string& why);
  bool aborted() const;

  // "emulated(ar=tree,rs=ring,ag=ring)", plus ",ring=0-2-1-3" when the ring is not 0..size-1:
  // the CPU EmulatedGroup's words, since the order models (and the bits) are the same.
  std::string describe() const;

 private:
  friend class EmulatedGpuRank;

  void all_reduce(int rank, bf16* data, size_t count);
  void reduce_scatter(int rank, const bf16* in, bf16* out, size_t count);
  void all_gather(int rank, const bf16* in, bf16* out, size_t count);
  // Both tree collectives: rank sums block `offset..offset+count` of every rank's fp32 input.
  void tree_f32_collective(int rank, CollectiveOp op, const char* name, const float* in, bf16* out,
                           size_t offset, size_t count);
  // A group of one: checks for abort, then copies in -> out on the rank's stream if they differ.
  void single_rank_copy(const bf16* in, bf16* out, size_t count);

  // One collective call as every op meets it.
  struct Meeting {
    CollectiveOp op;
    const char* name;
    const void* in;               // device: what the peers read (the whole input)
    void* out;                    // device: this rank's output
    size_t count;                 // the count all ranks must agree on
    bool f32;                     // posted as Posted::in_f32 (the tree collectives)
    bool arrival;                 // the op sums in arrival order: sleep a little before arriving
    std::function<void()> check;  // the op's pointer checks
  };
  // Checks, records the rank's input as ready, meets the peers at barrier 1 (the last arrival
  // runs launch_on_hub), then makes the rank's stream wait for the hub's kernel.
  void meet(int rank, const Meeting& m);
  // The last arrival's work: the hub stream waits for every rank's input, runs the collective for
  // every rank in one launch and records hub_.done.
  void launch_on_hub(const Meeting& m);
  template <int kRanks>
  void fill_and_launch(const Meeting& m);
  bool capturing(int rank) const;  // is this rank's stream being captured into a graph

  // BIH_EMULATED_HOST_PROFILE=1: one line on stderr when the group ends.
  void print_host_profile() const;

  // check_device_pointer, remembering the start addresses that passed (at most 64 per rank).
  void check_pointer(int rank, const void* p, size_t count, const char* what);
  const int size_;
  const CollectiveOrders orders_;
  const std::vector<int> ring_order_;
  const int device_;
  const bool host_profile_;  // BIH_EMULATED_HOST_PROFILE=1
  // The hub (declared before ranks_: freed after the ranks' streams are drained): the stream that
  // runs every collective's kernel, and the event every rank's stream waits for after it.
  struct Hub {
    CUstream_st* stream = nullptr;
    CUevent_st* done = nullptr;
    ~Hub();
  };
  Hub hub_;
  std::vector<std::unique_ptr<EmulatedGpuRank>> ranks_;
  // The barriers, abort and watchdog (rendezvous.hpp); its inputs() are device pointers here.
  Rendezvous rendezvous_;
};

// A bf16 buffer in device memory, for callers without CUDA headers (tests, the harness).
// Copies are ordered on the stream they are given (a rank's stream, or nullptr for the calling
// thread's default stream); download waits for that stream and returns the values.
class DeviceBf16Buffer {
 public:
  explicit DeviceBf16Buffer(size_t count, int device = 0);  // uninitialized [count]
  ~DeviceBf16Buffer();
  DeviceBf16Buffer(DeviceBf16Buffer&& other) noexcept;
  DeviceBf16Buffer& operator=(DeviceBf16Buffer&&) = delete;
  DeviceBf16Buffer(const DeviceBf16Buffer&) = delete;
  DeviceBf16Buffer& operator=(const DeviceBf16Buffer&) = delete;

  bf16* data() { return data_; }
  const bf16* data() const { return data_; }
  size_t size() const { return count_; }

  // host -> elements [offset, offset + host.size()); std::out_of_range past the end.
  void upload(std::span<const bf16> host, CUstream_st* stream, size_t offset = 0);
  // elements [offset, offset + count) -> host, after everything earlier on `stream`.
  std::vector<bf16> download(CUstream_st* stream, size_t offset, size_t count) const;
  std::vector<bf16> download(CUstream_st* stream) const { return download(stream, 0, count_); }

 private:
  bf16* data_ = nullptr;  // [count_] device
  size_t count_ = 0;
  int device_ = 0;
};

}  // namespace bih::cuda
