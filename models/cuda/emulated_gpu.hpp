// emulated_gpu.hpp: a tensor-parallel group whose ranks are threads sharing one GPU.
//
// The GPU twin of models/comm/emulated.hpp: same order models, same bits. EmulatedGpuGroup owns
// one Communicator per rank; its pointers are DEVICE pointers on the group's GPU, and every rank
// has its own CUDA stream (non-blocking), as a real rank has its own GPU. Rank r's thread calls
// rank(r)'s collectives; they return once the work is enqueued on rank r's stream, ordered after
// everything enqueued there before (so a rank's kernels and collectives simply follow each other
// on its stream), and later work on that stream sees the result.
//
// A collective, eagerly, is one host barrier per rank: copy my input into my staging slot and
// record "my input is ready" on my stream; barrier 1 (where the arrival order is recorded, and the
// last rank to arrive joins every rank's event on the group's hub stream); make my stream wait for
// the hub's one event; launch the sum (or the copies) that reads every rank's staging slot and
// writes my output (all_reduce writes `data` directly: peers read only my copy of it).
// Each rank has two staging slots, used alternately: a slot is written again two collectives later,
// when my stream has already waited for every peer's "input ready" of the collective in between,
// which each peer recorded after its reads of this slot. So no second barrier is needed, and the
// caller may overwrite its input as soon as the call returns. Against two barriers per collective
// this halves the times the ranks' threads meet and cuts a collective's API calls per rank from
// about nine to six, most of an eager step's host time at TP=8.
//
// While the streams are being captured into a graph, a collective is two barriers and no copy:
// record "input ready"; barrier 1; wait for each peer's event directly (the waits become the
// graph's edges); launch the sum that reads every rank's input in place; record "I have read";
// barrier 2; wait for every peer's "I have read", so that nothing later overwrites an input a peer
// still reads. all_reduce sums into a per-rank scratch there and copies it into `data` after that
// second wait. Every rank of a call must be capturing or none (checked at barrier 1).
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
  ~EmulatedGpuRank() override;  // waits for the stream, then frees its stream, events, scratch
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
  EmulatedGpuRank(EmulatedGpuGroup* group, int rank);  // creates the stream and events
  void release() noexcept;                             // waits for the stream, frees what exists

  // Device memory this rank grows and frees in its stream's order, so the old block is released
  // only after the stream's earlier uses of it (and whatever the stream waited for before).
  struct StreamBuffer {
    void* data = nullptr;  // [capacity] bytes, device
    size_t capacity = 0;
    void reserve(size_t bytes, CUstream_st* stream);  // at least `bytes`, growing by doubling
    void free_on(CUstream_st* stream) noexcept;
  };

  EmulatedGpuGroup* group_;
  int rank_;
  CUstream_st* stream_ = nullptr;
  CUevent_st* input_ready_ = nullptr;  // recorded before barrier 1
  CUevent_st* read_done_ = nullptr;    // captured: recorded once this rank's reads are enqueued
  StreamBuffer scratch_;               // bf16: a captured all_reduce's sum before the copy
  // Eager collectives' copies of this rank's input, the slot alternating from call to call.
  StreamBuffer staging_[2];
  int staging_parity_ = 0;
  // BIH_EMULATED_HOST_PROFILE=1: this rank's host time in its collectives, in seconds.
  struct HostTimes {
    uint64_t calls = 0;
    double before = 0;   // checks, the staging copy, the record
    double barrier = 0;  // publish_and_wait (and finish_and_wait while capturing)
    double after = 0;    // the waits and launches
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

  // One collective call as every op meets it: what the peers read, and how to check the pointers.
  struct Meeting {
    CollectiveOp op;
    const char* name;
    const void* in;  // [in_bytes] device: what the peers read (the whole input)
    size_t in_bytes;
    size_t count;                 // the count all ranks must agree on
    bool f32;                     // posted as Posted::in_f32 (the tree collectives)
    bool arrival;                 // the op sums in arrival order: sleep a little before arriving
    std::function<void()> check;  // the op's pointer checks
  };
  // Checks, stages (eagerly) or not (capturing), meets the peers at barrier 1, waits for their
  // inputs on the rank's stream, then reads(staged) enqueues the rank's reads of
  // rendezvous_.inputs() (or inputs_f32()) and its writes. Capturing, barrier 2 and the waits for
  // the peers' reads follow, then after_reads().
  void meet(int rank, const Meeting& m, const std::function<void(bool staged)>& reads,
            const std::function<void()>& after_reads = {});
  bool capturing(int rank) const;  // is this rank's stream being captured into a graph
  // Copies `bytes` of `in` into the rank's next staging slot (grown, stream-ordered, if needed) on
  // its stream; returns the slot.
  const void* stage_input(int rank, const void* in, size_t bytes);

  // BIH_EMULATED_HOST_PROFILE=1: one line on stderr when the group ends.
  void print_host_profile() const;

  // check_device_pointer, remembering the start addresses that passed (at most 64 per rank).
  void check_pointer(int rank, const void* p, size_t count, const char* what);
  // The rank's stream waits for event `which` of every other rank (input_ready_ or read_done_):
  // on_hub, through the hub's event that the last arrival joined them on (inputs only).
  void wait_for_peers(int rank, CUevent_st* EmulatedGpuRank::*which, bool on_hub);
  // The last arrival's work at an eager barrier 1: the hub stream waits for every rank's
  // input_ready_ and records its own event for them.
  void join_on_hub();

  const int size_;
  const CollectiveOrders orders_;
  const std::vector<int> ring_order_;
  const int device_;
  const bool host_profile_;  // BIH_EMULATED_HOST_PROFILE=1
  // The hub (declared before ranks_: freed after the ranks' streams are drained): its stream and
  // the event every rank's stream waits for after an eager barrier 1.
  struct Hub {
    CUstream_st* stream = nullptr;
    CUevent_st* inputs_ready = nullptr;
    ~Hub();
  };
  Hub hub_;
  Rendezvous::LastArrivalWork join_inputs_;  // join_on_hub
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
