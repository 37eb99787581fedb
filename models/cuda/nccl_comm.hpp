// nccl_comm.hpp: one rank of a real NCCL communicator (`ranks: nccl`).
//
// NcclCommunicator is rank r of an NCCL group of `size` ranks, one GPU each, created with
// ncclCommInitRankConfig from a unique id that every rank receives (from a parent process, or from
// the thread that made it). It works the same whether the ranks are processes or threads of one
// process. Pointers are DEVICE pointers on the rank's GPU; the dtype is bf16, the reduction a sum.
//
// Summation order, per collective (CollectiveOrders, DESIGN.md "Collectives and their summation
// order"):
//   ring, tree  ncclAllReduce / ncclReduceScatter in bf16. Which algorithm NCCL runs comes from
//               the NCCL_* environment (NCCL_ALGO, NCCL_PROTO, channel counts) that the caller sets
//               before construction; describe() records it. `ring`/`tree` name what the scenario
//               claims, they do not steer NCCL.
//   fixed       built from NCCL primitives so that it is, bit for bit, the emulated `fixed` model
//               (fp32 sum in rank order 0..n-1 starting from rank 0's value, rounded to bf16
//               once): all_reduce = ncclAllGather of every rank's whole buffer into a staging
//               buffer [size][count], then one fixed-order sum kernel; reduce_scatter = an
//               all-to-all of blocks (ncclSend/ncclRecv in one group) into staging, then the same
//               kernel over the rank's own block.
//   arrival     not available (std::invalid_argument at construction): NCCL exposes no order of
//               arrival.
// all_gather is ncclAllGather under every order: a bitwise copy.
//
// Stream and ordering contract: every collective is enqueued on this rank's own non-blocking
// stream, stream(), and returns without waiting for the GPU; it runs after everything enqueued on
// that stream before, and later work on that stream sees its result. Enqueue the rank's kernels on
// stream() too. Buffers follow stream order: an input may be overwritten by work enqueued after the
// collective. To wait, call synchronize() (or wait(timeout)) rather than cudaStreamSynchronize: it
// is the watchdog. Use a communicator from one thread (its rank's); only abort() may come from
// any thread. Each rank must call the same collectives in the same order with the same counts.
//
// Watchdog: a collective whose work does not finish within the timeout (a peer never joined, a
// peer died) aborts the communicator with ncclCommAbort, and the waiting call throws CommAborted
// naming the op, its count, the rank and the timeout. Two places wait: synchronize()/wait() (the
// GPU side), and, with nonblocking communicators (the default), every NCCL call's host side
// (initialization, the connection setup of a first collective), so nothing blocks forever.
// Options::wait_after_each_collective makes every collective wait before it returns (except while
// the stream is being captured). abort(why), from any thread, aborts the communicator; later calls
// throw CommAborted. Any NCCL failure also aborts it (CommAborted). NCCL does not tell peers of an
// abort: each peer's own watchdog (or the driver) ends them.
//
// CUDA graphs: collectives of every order may be captured into a graph on stream(): no host
// synchronization, no allocation and no pageable copy happen inside one once warmed up. The
// `fixed` order needs a staging buffer of size*count elements; call reserve(max_count) before
// capturing (a collective that would need to grow it during capture throws std::logic_error and
// enqueues nothing). Staging buffers are never freed before the communicator is destroyed, so
// captured graphs stay valid. Run each collective once before capturing it (NCCL connects peers
// at first use). Destroy graphs that hold captured collectives before the communicator: NCCL's
// teardown waits for them. If several ranks capture concurrently in one process, use
// cudaStreamCaptureModeThreadLocal.
//
// Plain C++ header: no CUDA or NCCL header; where this build has no NCCL, construction throws
// std::runtime_error and nccl_available() is false.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/comm/reduce_order.hpp"

// cudaStream_t, cudaEvent_t and ncclComm_t are pointers to these; declared to keep headers out.
struct CUstream_st;
struct CUevent_st;
struct ncclComm;

namespace bih::cuda {

// Whether this build links NCCL.
bool nccl_available();

// An ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES, checked where nccl.h is seen).
inline constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueId = std::array<unsigned char, kNcclUniqueIdBytes>;

// ncclGetUniqueId. The process that calls it hosts the bootstrap root: it must live until every
// rank has been constructed. Throws std::runtime_error when NCCL fails or is absent.
NcclUniqueId new_nccl_unique_id();
// The id as 2*kNcclUniqueIdBytes lower-case hex digits, to pass to other processes (argv, env).
std::string nccl_unique_id_to_hex(const NcclUniqueId& id);
// new_nccl_unique_id(), hex encoded.
std::string nccl_unique_id_hex();
// Parses nccl_unique_id_to_hex's text (either case). Throws std::invalid_argument for anything
// else, saying what was expected.
NcclUniqueId parse_nccl_unique_id_hex(std::string_view hex);

class NcclCommunicator final : public Communicator {
 public:
  struct Options {
    CollectiveOrders orders;
    // Longest a collective's work, or one NCCL host call, may take before the communicator
    // aborts. Zero waits forever.
    std::chrono::milliseconds watchdog{std::chrono::minutes(5)};
    // Longest the initialization may take (all ranks must join). Zero waits forever.
    std::chrono::milliseconds init_timeout{std::chrono::minutes(5)};
    // NCCL's nonblocking mode (ncclConfig_t::blocking = 0): every NCCL host call returns at once
    // and is polled, so initialization and connection setup can be aborted too. With false, a
    // host call that waits for a missing peer blocks (only GPU-side hangs are caught).
    bool nonblocking = true;
    // "Blocking check" mode: each collective waits for its work (with the watchdog) before it
    // returns, except while the stream is being captured.
    bool wait_after_each_collective = false;
  };

  // rank in 0..size-1; device: this rank's CUDA device (one rank per device). Blocks until every
  // rank has joined (or init_timeout: CommAborted). Throws std::invalid_argument for a bad rank,
  // size or `arrival` order, std::runtime_error when CUDA or NCCL fails or this build has no NCCL.
  NcclCommunicator(int rank, int size, const NcclUniqueId& id, int device, Options options);
  // Waits (bounded by the watchdog) for the stream; then finalizes and destroys the NCCL
  // communicator, or aborts it if that does not complete in time; frees stream and buffers.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(bf16* data, size_t count) override;
  void reduce_scatter(const bf16* in, bf16* out, size_t count) override;
  void all_gather(const bf16* in, bf16* out, size_t count) override;
  // kernels tp_invariant (communicator.hpp): the fp32 partials travel as fp32 (all_reduce: an
  // ncclAllGather of every rank's buffer; reduce_scatter: an all-to-all of blocks, both into the
  // staging buffer), then one kernel sums them by the chunk tree in rank order and rounds once,
  // bit for bit the emulated communicators. Needs size 1, 2, 4 or 8 (std::invalid_argument).
  void all_reduce_tree_f32(const float* in, bf16* out, size_t count) override;
  void reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) override;
  // ncclCommAbort (once; the first reason wins); safe from any thread. Later calls throw
  // CommAborted(why). With a blocking communicator it waits for an NCCL call in progress.
  void abort(const std::string& why) override;
  // "nccl(ar=tree,rs=ring,ag=ring)" plus ",NCCL_ALGO=...,NCCL_PROTO=...,NCCL_MIN_NCHANNELS=...,
  // NCCL_MAX_NCHANNELS=..." for those set when the communicator was made.
  std::string describe() const override;

  int device() const { return device_; }
  const Options& options() const { return options_; }
  bool aborted() const;
  // This rank's stream (a cudaStream_t): enqueue the rank's own kernels here.
  CUstream_st* stream() const { return stream_; }

  // Blocks until everything enqueued on stream() so far is done: wait(options().watchdog).
  void synchronize();
  // The watchdog loop: waits for the stream's work, polling it and NCCL's asynchronous error.
  // Past `timeout` (zero: never) it aborts the communicator and throws CommAborted naming the
  // latest collective enqueued. Throws std::logic_error while stream() is being captured.
  void wait(std::chrono::milliseconds timeout);

  // Makes the `fixed` staging buffer hold collectives of up to max_count elements per rank
  // (all_reduce's count, reduce_scatter's per-rank count), fp32 ones (the tree collectives of
  // kernels tp_invariant) included. No-op unless an order is `fixed`.
  // Call it outside stream capture.
  void reserve(size_t max_count);

 private:
  enum class Op {
    all_reduce,
    reduce_scatter,
    all_gather,
    all_reduce_tree_f32,
    reduce_scatter_tree_f32
  };

  void release() noexcept;
  // Checks for abort, makes the device current and records `op` as the latest collective.
  void begin_collective(Op op, size_t count);
  // Options::wait_after_each_collective: waits, unless the stream is being captured.
  void end_collective();
  // Runs call(comm) under the lock and, in nonblocking mode, polls until NCCL has enqueued it
  // (ncclInProgress -> ncclSuccess), within the watchdog. Any failure aborts: CommAborted.
  template <class Call>
  void nccl_call(const char* what, Call&& call);
  // The sum of the emulated `fixed` model: out[i] = inputs[0][i] + ... + inputs[size-1][i].
  void launch_fixed_sum(const std::vector<const bf16*>& inputs, size_t count, bf16* out);
  // Staging for a `fixed` collective of `count` elements per rank; grows outside capture only.
  bf16* staging_for(size_t count);
  // The tree sum of inputs[q] (q in rank order) into out, for the tree collectives.
  void launch_tree_sum(const std::vector<const float*>& inputs, size_t count, bf16* out);
  void check_tree_size(const char* what) const;
  void grow_staging(size_t elements);
  void abort_locked(const std::string& why);
  [[noreturn]] void abort_and_throw(const std::string& why);
  bool capturing() const;
  std::string describe_latest() const;  // "all_reduce of 1024 elements (collective #3, ...)"
  std::string where() const;            // "NCCL rank 0 of 2 (GPU 0)"

  const int rank_;
  const int size_;
  const int device_;
  const Options options_;
  std::string nccl_env_;  // ",NCCL_ALGO=..." as read at construction

  mutable std::mutex mutex_;  // guards comm_, aborted_, abort_reason_ and every NCCL call
  ncclComm* comm_ = nullptr;  // null once aborted or destroyed
  bool aborted_ = false;
  std::string abort_reason_;

  CUstream_st* stream_ = nullptr;
  CUevent_st* done_ = nullptr;  // recorded by wait()
  bf16* staging_ = nullptr;     // [staging_capacity_] device: peers' buffers or blocks
  size_t staging_capacity_ = 0;
  std::vector<bf16*> retired_staging_;  // outgrown buffers, kept alive for captured graphs

  Op latest_op_ = Op::all_reduce;  // the latest collective enqueued, for watchdog messages
  size_t latest_count_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace bih::cuda
