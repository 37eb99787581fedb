// nccl_comm.cpp: one rank of a real NCCL communicator (nccl_comm.hpp).
//
// Every NCCL call on the communicator happens under mutex_, so that abort() from another thread
// never races one; the locks are short because nonblocking NCCL calls return at once and are
// then polled (ncclInProgress -> ncclSuccess) with the lock released between polls.
#include "models/cuda/nccl_comm.hpp"

#include <cuda_runtime_api.h>
#if defined(BIH_HAVE_NCCL)
#include <nccl.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "models/cuda/check.hpp"
#include "models/cuda/emulated_gpu_kernels.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {
namespace {

const char* op_name(int op) {
  static const char* const kNames[] = {"all_reduce", "reduce_scatter", "all_gather",
                                       "all_reduce_tree_f32", "reduce_scatter_tree_f32"};
  return kNames[op];
}

std::string milliseconds_text(std::chrono::milliseconds t) {
  return std::to_string(t.count()) + " ms";
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool nccl_available() {
#if defined(BIH_HAVE_NCCL)
  return true;
#else
  return false;
#endif
}

std::string nccl_unique_id_to_hex(const NcclUniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * id.size());
  for (unsigned char byte : id) {
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

NcclUniqueId parse_nccl_unique_id_hex(std::string_view hex) {
  if (hex.size() != 2 * kNcclUniqueIdBytes) {
    throw std::invalid_argument("NCCL unique id: expected " +
                                std::to_string(2 * kNcclUniqueIdBytes) + " hex digits, got " +
                                std::to_string(hex.size()) + " characters");
  }
  NcclUniqueId id{};
  for (size_t i = 0; i < hex.size(); ++i) {
    const int value = hex_digit_value(hex[i]);
    if (value < 0) {
      throw std::invalid_argument("NCCL unique id: character " + std::to_string(i) + " ('" +
                                  std::string(1, hex[i]) + "') is not a hex digit");
    }
    id[i / 2] = static_cast<unsigned char>(i % 2 == 0 ? value << 4 : id[i / 2] | value);
  }
  return id;
}

std::string nccl_unique_id_hex() { return nccl_unique_id_to_hex(new_nccl_unique_id()); }

std::string NcclCommunicator::describe() const {
  return "nccl(ar=" + to_string(options_.orders.all_reduce) +
         ",rs=" + to_string(options_.orders.reduce_scatter) +
         ",ag=" + to_string(options_.orders.all_gather) + nccl_env_ + ")";
}

std::string NcclCommunicator::where() const {
  return "NCCL rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (GPU " +
         std::to_string(device_) + ")";
}

std::string NcclCommunicator::describe_latest() const {
  if (calls_ == 0) return "no collective yet";
  const int op = static_cast<int>(latest_op_);
  std::string text = std::string(op_name(op)) + " of " + std::to_string(latest_count_) +
                     " elements (collective #" + std::to_string(calls_);
  if (latest_op_ == Op::all_reduce) text += ", order " + to_string(options_.orders.all_reduce);
  if (latest_op_ == Op::reduce_scatter) {
    text += ", order " + to_string(options_.orders.reduce_scatter);
  }
  return text + ")";
}

bool NcclCommunicator::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

void NcclCommunicator::synchronize() { wait(options_.watchdog); }

#if defined(BIH_HAVE_NCCL)

static_assert(NCCL_UNIQUE_ID_BYTES == kNcclUniqueIdBytes, "ncclUniqueId changed size");
static_assert(sizeof(bf16) == sizeof(uint16_t), "bf16 must be its 16 bits, as the kernel reads it");

namespace {

// Sleeps between polls: short at first (an enqueue or a small collective takes microseconds),
// then longer, so that a long wait does not keep a core busy.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(500));
  }

 private:
  std::chrono::microseconds delay_{10};
};

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds timeout)
      : forever_(timeout.count() == 0), end_(std::chrono::steady_clock::now() + timeout) {}
  bool passed() const { return !forever_ && std::chrono::steady_clock::now() >= end_; }

 private:
  bool forever_;
  std::chrono::steady_clock::time_point end_;
};

// A call inside a group may answer ncclInProgress in nonblocking mode; only errors stop it.
bool no_error(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// The communicator's state: ncclSuccess, ncclInProgress (a call still being enqueued) or an error.
ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

std::string nccl_error_text(ncclResult_t r) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  return text;
}

// ",NCCL_ALGO=Tree,NCCL_PROTO=Simple": the variables that pick NCCL's algorithm, where set.
std::string read_nccl_env() {
  std::string text;
  for (const char* name : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    if (const char* value = std::getenv(name)) text += std::string(",") + name + "=" + value;
  }
  return text;
}

// The all-to-all of a reduce_scatter built from point-to-point calls (the `fixed` order and the
// fp32 tree): block `peer` of `in` goes to each peer, and each peer's block `rank` lands in
// staging block `peer`; this rank's own block stays where it is. `count` elements of
// `element_bytes` per block. One NCCL group, closed even after an error.
ncclResult_t exchange_blocks(ncclComm_t comm, const void* in, void* staging, size_t count,
                             ncclDataType_t type, size_t element_bytes, int rank, int size,
                             cudaStream_t stream) {
  const ncclResult_t started = ncclGroupStart();
  if (started != ncclSuccess) return started;
  ncclResult_t first = ncclSuccess;
  for (int peer = 0; peer < size && no_error(first); ++peer) {
    if (peer == rank) continue;
    const size_t offset = static_cast<size_t>(peer) * count * element_bytes;
    first = ncclSend(static_cast<const char*>(in) + offset, count, type, peer, comm, stream);
    if (no_error(first)) {
      first = ncclRecv(static_cast<char*>(staging) + offset, count, type, peer, comm, stream);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  return no_error(first) ? ended : first;
}

const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

}  // namespace

NcclUniqueId new_nccl_unique_id() {
  ncclUniqueId raw;
  const ncclResult_t r = ncclGetUniqueId(&raw);
  if (r != ncclSuccess) {
    throw std::runtime_error("ncclGetUniqueId failed: " + nccl_error_text(r));
  }
  NcclUniqueId id;
  std::memcpy(id.data(), raw.internal, id.size());
  return id;
}

NcclCommunicator::NcclCommunicator(int rank, int size, const NcclUniqueId& id, int device,
                                   Options options)
    : rank_(rank), size_(size), device_(device), options_(options), nccl_env_(read_nccl_env()) {
  if (size < 1 || size > kMaxRanks) {
    throw std::invalid_argument("NcclCommunicator: size " + std::to_string(size) +
                                " is outside 1.." + std::to_string(kMaxRanks));
  }
  if (rank < 0 || rank >= size) {
    throw std::invalid_argument("NcclCommunicator: rank " + std::to_string(rank) +
                                " is outside 0.." + std::to_string(size - 1));
  }
  for (auto [order, what] : {std::pair{options.orders.all_reduce, "all_reduce"},
                             std::pair{options.orders.reduce_scatter, "reduce_scatter"}}) {
    if (order == ReduceOrder::arrival) {
      throw std::invalid_argument(
          std::string("NcclCommunicator: order 'arrival' for ") + what +
          " is not available with NCCL ranks (NCCL exposes no arrival order); use ring, tree "
          "or fixed, or emulated ranks");
    }
  }
  try {
    cudaCheck(cudaSetDevice(device_));
    // Non-blocking: the legacy default stream must not order this rank's work behind others.
    cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));

    ncclUniqueId nccl_id;
    std::memcpy(nccl_id.internal, id.data(), id.size());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = options_.nonblocking ? 0 : 1;
    std::lock_guard lock(mutex_);
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, size_, nccl_id, rank_, &config);
    comm_ = comm;
    const Deadline deadline(options_.init_timeout);
    Backoff backoff;
    while (r == ncclInProgress && comm_ != nullptr) {
      if (deadline.passed()) {
        abort_locked(where() + ": NCCL initialization did not complete within " +
                     milliseconds_text(options_.init_timeout) +
                     " (did every rank join with the same unique id?); the communicator was "
                     "aborted");
        throw CommAborted(abort_reason_);
      }
      backoff.pause();  // nobody else can hold this object yet: keeping the lock is harmless
      r = async_state(comm_);
    }
    if (r != ncclSuccess) {
      const std::string error = where() + ": ncclCommInitRankConfig failed: " + nccl_error_text(r);
      abort_locked(error);
      throw std::runtime_error(error);
    }
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { release(); }

void NcclCommunicator::release() noexcept {
  // No throwing here: this runs in a destructor, maybe while an exception unwinds.
  cudaSetDevice(device_);
  {
    std::lock_guard lock(mutex_);
    if (comm_ != nullptr) {
      // A clean teardown (finalize + destroy) needs the stream idle and, within one node, the
      // peers tearing down too; whatever does not finish within the watchdog is aborted instead.
      const Deadline deadline(options_.watchdog);
      Backoff backoff;
      bool clean = true;
      for (cudaError_t q = cudaStreamQuery(stream_); q != cudaSuccess;
           q = cudaStreamQuery(stream_)) {
        if (q != cudaErrorNotReady || deadline.passed()) {
          clean = false;
          break;
        }
        backoff.pause();
      }
      if (clean && async_state(comm_) != ncclSuccess) clean = false;
      if (clean) {
        ncclResult_t r = ncclCommFinalize(comm_);
        while (r == ncclInProgress && !deadline.passed()) {
          backoff.pause();
          r = async_state(comm_);
        }
        clean = r == ncclSuccess;
      }
      if (clean) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);  // aborted NCCL kernels have exited
  if (staging_ != nullptr) cudaFree(staging_);
  for (bf16* p : retired_staging_) cudaFree(p);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  staging_ = nullptr;
  staging_capacity_ = 0;
  retired_staging_.clear();
  done_ = nullptr;
  stream_ = nullptr;
  cudaGetLastError();
}

void NcclCommunicator::abort(const std::string& why) {
  std::lock_guard lock(mutex_);
  abort_locked(where() + " aborted: " + why);
}

void NcclCommunicator::abort_locked(const std::string& why) {
  if (aborted_) return;
  aborted_ = true;
  abort_reason_ = why;
  if (comm_ == nullptr) return;
  // abort() may come from any thread: leave that thread's current device as it was.
  int current = -1;
  const bool had_device = cudaGetDevice(&current) == cudaSuccess;
  ncclCommAbort(comm_);  // nothing more to do if it fails: the communicator is gone either way
  comm_ = nullptr;
  if (had_device) cudaSetDevice(current);
  cudaGetLastError();
}

void NcclCommunicator::abort_and_throw(const std::string& why) {
  std::lock_guard lock(mutex_);
  abort_locked(why);
  throw CommAborted(abort_reason_);
}

bool NcclCommunicator::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaCheck(cudaStreamIsCapturing(stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

void NcclCommunicator::begin_collective(Op op, size_t count) {
  {
    std::lock_guard lock(mutex_);
    if (aborted_) throw CommAborted(abort_reason_);
  }
  cudaCheck(cudaSetDevice(device_));
  latest_op_ = op;
  latest_count_ = count;
  ++calls_;
}

void NcclCommunicator::end_collective() {
  if (options_.wait_after_each_collective && !capturing()) wait(options_.watchdog);
}

template <class Call>
void NcclCommunicator::nccl_call(const char* what, Call&& call) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CommAborted(abort_reason_);
  ncclResult_t r = call(comm_);
  const Deadline deadline(options_.watchdog);
  Backoff backoff;
  while (r == ncclInProgress) {
    // Nonblocking mode: NCCL enqueues in the background (connecting peers on first use); no
    // other NCCL call and no kernel on the stream until it is done.
    if (deadline.passed()) {
      abort_locked(where() + ": NCCL watchdog: " + what + " for " + describe_latest() +
                   " was not enqueued within " + milliseconds_text(options_.watchdog) +
                   " (a peer never joined?); the communicator was aborted (ncclCommAbort)");
      throw CommAborted(abort_reason_);
    }
    lock.unlock();
    backoff.pause();
    lock.lock();
    if (aborted_) throw CommAborted(abort_reason_);
    r = async_state(comm_);
  }
  if (r != ncclSuccess) {
    abort_locked(where() + ": " + what + " for " + describe_latest() +
                 " failed: " + nccl_error_text(r) + "; the communicator was aborted");
    throw CommAborted(abort_reason_);
  }
}

void NcclCommunicator::grow_staging(size_t elements) {
  // Outgrown buffers stay allocated until destruction: a captured graph may still name them.
  const size_t capacity = std::max(elements, 2 * staging_capacity_);
  void* p = nullptr;
  cudaCheck(cudaMalloc(&p, capacity * sizeof(bf16)));
  if (staging_ != nullptr) retired_staging_.push_back(staging_);
  staging_ = static_cast<bf16*>(p);
  staging_capacity_ = capacity;
}

bf16* NcclCommunicator::staging_for(size_t count) {
  const size_t needed = count * static_cast<size_t>(size_);
  if (needed <= staging_capacity_) return staging_;
  if (capturing()) {
    throw std::logic_error(where() + ": the fixed-order " + describe_latest() +
                           " needs a staging buffer of " + std::to_string(needed) +
                           " elements, but " + std::to_string(staging_capacity_) +
                           " are reserved and the stream is being captured (no allocation is "
                           "allowed there): call reserve(" +
                           std::to_string(count) + ") before capturing. Nothing was enqueued.");
  }
  grow_staging(needed);
  return staging_;
}

void NcclCommunicator::reserve(size_t max_count) {
  if (options_.orders.all_reduce != ReduceOrder::fixed &&
      options_.orders.reduce_scatter != ReduceOrder::fixed) {
    return;
  }
  // fp32 elements take two bf16 ones: room for the tree collectives too.
  const size_t needed = 2 * max_count * static_cast<size_t>(size_);
  if (needed <= staging_capacity_) return;
  cudaCheck(cudaSetDevice(device_));
  if (capturing()) {
    throw std::logic_error(where() + ": reserve(" + std::to_string(max_count) +
                           ") during stream capture: reserve before capturing");
  }
  grow_staging(needed);
}

void NcclCommunicator::launch_fixed_sum(const std::vector<const bf16*>& inputs, size_t count,
                                        bf16* out) {
  // The emulated `fixed` model exactly: chain 0..n-1 from rank 0's value, fp32, one rounding.
  detail::ChainSumArgs args;
  for (int q = 0; q < size_; ++q) {
    args.inputs[q] = bits_of(inputs[q]);
    args.chain[q] = q;
  }
  args.chain_length = size_;
  args.fp32_once = true;
  args.input_offset = 0;
  args.count = count;
  args.out = reinterpret_cast<uint16_t*>(out);
  try {
    detail::launch_chain_sum(args, stream_);
  } catch (const std::exception& e) {
    abort_and_throw(where() + ": the fixed-order sum of " + describe_latest() +
                    " failed to launch: " + e.what());
  }
}

void NcclCommunicator::all_reduce(bf16* data, size_t count) {
  begin_collective(Op::all_reduce, count);
  if (count == 0) return;
  if (options_.orders.all_reduce == ReduceOrder::fixed) {
    // Every rank gathers every rank's whole buffer: staging [size][count]; then sums it.
    bf16* staging = staging_for(count);
    nccl_call("ncclAllGather", [&](ncclComm_t comm) {
      return ncclAllGather(data, staging, count, ncclBfloat16, comm, stream_);
    });
    std::vector<const bf16*> inputs(size_);
    for (int q = 0; q < size_; ++q) inputs[q] = staging + static_cast<size_t>(q) * count;
    // The all-gather has finished on this stream, so peers are done reading `data`.
    launch_fixed_sum(inputs, count, data);
  } else {
    nccl_call("ncclAllReduce", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm, stream_);
    });
  }
  end_collective();
}

void NcclCommunicator::reduce_scatter(const bf16* in, bf16* out, size_t count) {
  begin_collective(Op::reduce_scatter, count);
  if (count == 0) return;
  if (options_.orders.reduce_scatter == ReduceOrder::fixed) {
    // All-to-all of blocks: peer q's block `rank` lands in staging block q; block `rank` of this
    // rank's own input is summed in place where it is.
    bf16* staging = staging_for(count);
    nccl_call("ncclSend/ncclRecv", [&](ncclComm_t comm) {
      return exchange_blocks(comm, in, staging, count, ncclBfloat16, sizeof(bf16), rank_, size_,
                             stream_);
    });
    std::vector<const bf16*> inputs(size_);
    for (int q = 0; q < size_; ++q) {
      const size_t block = static_cast<size_t>(q) * count;
      inputs[q] = q == rank_ ? in + block : staging + block;
    }
    // out may be in + rank*count (in place): each element is read before it is written.
    launch_fixed_sum(inputs, count, out);
  } else {
    nccl_call("ncclReduceScatter", [&](ncclComm_t comm) {
      return ncclReduceScatter(in, out, count, ncclBfloat16, ncclSum, comm, stream_);
    });
  }
  end_collective();
}

void NcclCommunicator::check_tree_size(const char* what) const {
  if (!tp_invariant_tp_ok(size_)) {
    throw std::invalid_argument(where() + ": " + what + " needs 1, 2, 4 or 8 ranks (the chunk " +
                                "tree of kernels tp_invariant), not " + std::to_string(size_));
  }
}

void NcclCommunicator::launch_tree_sum(const std::vector<const float*>& inputs, size_t count,
                                       bf16* out) {
  detail::TreeF32SumArgs args;
  std::copy(inputs.begin(), inputs.end(), args.inputs);
  args.ranks = size_;
  args.count = count;
  args.out = reinterpret_cast<uint16_t*>(out);
  try {
    detail::launch_tree_f32_sum(args, stream_);
  } catch (const std::exception& e) {
    abort_and_throw(where() + ": the tree sum of " + describe_latest() +
                    " failed to launch: " + e.what());
  }
}

void NcclCommunicator::all_reduce_tree_f32(const float* in, bf16* out, size_t count) {
  check_tree_size("all_reduce_tree_f32");
  begin_collective(Op::all_reduce_tree_f32, count);
  if (count == 0) return;
  // Every rank gathers every rank's fp32 buffer: staging [size][count] floats; then sums it.
  auto* staging = reinterpret_cast<float*>(staging_for(2 * count));
  nccl_call("ncclAllGather", [&](ncclComm_t comm) {
    return ncclAllGather(in, staging, count, ncclFloat32, comm, stream_);
  });
  std::vector<const float*> inputs(size_);
  for (int q = 0; q < size_; ++q) inputs[q] = staging + static_cast<size_t>(q) * count;
  launch_tree_sum(inputs, count, out);
  end_collective();
}

void NcclCommunicator::reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) {
  check_tree_size("reduce_scatter_tree_f32");
  begin_collective(Op::reduce_scatter_tree_f32, count);
  if (count == 0) return;
  // All-to-all of fp32 blocks: peer q's block `rank` lands in staging block q; this rank's own
  // block is read where it is.
  auto* staging = reinterpret_cast<float*>(staging_for(2 * count));
  nccl_call("ncclSend/ncclRecv", [&](ncclComm_t comm) {
    return exchange_blocks(comm, in, staging, count, ncclFloat32, sizeof(float), rank_, size_,
                           stream_);
  });
  std::vector<const float*> inputs(size_);
  for (int q = 0; q < size_; ++q) {
    const size_t block = static_cast<size_t>(q) * count;
    inputs[q] = q == rank_ ? in + static_cast<size_t>(rank_) * count : staging + block;
  }
  launch_tree_sum(inputs, count, out);
  end_collective();
}

void NcclCommunicator::all_gather(const bf16* in, bf16* out, size_t count) {
  begin_collective(Op::all_gather, count);
  if (count == 0) return;
  nccl_call("ncclAllGather", [&](ncclComm_t comm) {
    return ncclAllGather(in, out, count, ncclBfloat16, comm, stream_);
  });
  end_collective();
}

void NcclCommunicator::wait(std::chrono::milliseconds timeout) {
  {
    std::lock_guard lock(mutex_);
    if (aborted_) throw CommAborted(abort_reason_);
  }
  cudaCheck(cudaSetDevice(device_));
  if (capturing()) {
    throw std::logic_error(where() +
                           ": wait()/synchronize() while stream() is being captured; wait after "
                           "launching the graph instead");
  }
  cudaCheck(cudaEventRecord(done_, stream_));
  const Deadline deadline(timeout);
  Backoff backoff;
  for (;;) {
    const cudaError_t query = cudaEventQuery(done_);
    {
      std::lock_guard lock(mutex_);
      if (aborted_) throw CommAborted(abort_reason_);
      const ncclResult_t state = async_state(comm_);
      if (!no_error(state)) {
        abort_locked(where() + ": NCCL reported an error while waiting for " + describe_latest() +
                     ": " + nccl_error_text(state) + "; the communicator was aborted");
        throw CommAborted(abort_reason_);
      }
    }
    if (query == cudaSuccess) return;
    if (query != cudaErrorNotReady) {
      cudaGetLastError();
      abort_and_throw(where() + ": the stream failed while waiting for " + describe_latest() +
                      ": " + cudaGetErrorName(query) + " (" + cudaGetErrorString(query) +
                      "); the communicator was aborted");
    }
    if (deadline.passed()) {
      abort_and_throw(where() + ": NCCL watchdog: the work of " + describe_latest() +
                      " did not finish within " + milliseconds_text(timeout) +
                      " (a peer never joined or died?); the communicator was aborted "
                      "(ncclCommAbort)");
    }
    backoff.pause();
  }
}

#else  // no NCCL in this build: construction throws; the other members are never reached.

namespace {
[[noreturn]] void throw_no_nccl() {
  throw std::runtime_error(
      "this build has no NCCL: ranks 'nccl' need bih configured where NCCL is installed "
      "(nccl.h and libnccl), or use ranks 'emulated'");
}
}  // namespace

NcclUniqueId new_nccl_unique_id() { throw_no_nccl(); }

NcclCommunicator::NcclCommunicator(int rank, int size, const NcclUniqueId&, int device,
                                   Options options)
    : rank_(rank), size_(size), device_(device), options_(options) {
  throw_no_nccl();
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::release() noexcept {}
void NcclCommunicator::abort(const std::string&) { throw_no_nccl(); }
void NcclCommunicator::abort_locked(const std::string&) { throw_no_nccl(); }
void NcclCommunicator::abort_and_throw(const std::string&) { throw_no_nccl(); }
bool NcclCommunicator::capturing() const { throw_no_nccl(); }
void NcclCommunicator::begin_collective(Op, size_t) { throw_no_nccl(); }
void NcclCommunicator::end_collective() { throw_no_nccl(); }
void NcclCommunicator::grow_staging(size_t) { throw_no_nccl(); }
bf16* NcclCommunicator::staging_for(size_t) { throw_no_nccl(); }
void NcclCommunicator::reserve(size_t) { throw_no_nccl(); }
void NcclCommunicator::launch_fixed_sum(const std::vector<const bf16*>&, size_t, bf16*) {
  throw_no_nccl();
}
void NcclCommunicator::all_reduce(bf16*, size_t) { throw_no_nccl(); }
void NcclCommunicator::reduce_scatter(const bf16*, bf16*, size_t) { throw_no_nccl(); }
void NcclCommunicator::all_gather(const bf16*, bf16*, size_t) { throw_no_nccl(); }
void NcclCommunicator::all_reduce_tree_f32(const float*, bf16*, size_t) { throw_no_nccl(); }
void NcclCommunicator::reduce_scatter_tree_f32(const float*, bf16*, size_t) { throw_no_nccl(); }
void NcclCommunicator::launch_tree_sum(const std::vector<const float*>&, size_t, bf16*) {
  throw_no_nccl();
}
void NcclCommunicator::check_tree_size(const char*) const { throw_no_nccl(); }
void NcclCommunicator::wait(std::chrono::milliseconds) { throw_no_nccl(); }

#endif

}  // namespace bih::cuda
