// nccl_comm.cpp: one rank of a real NCCL communicator (nccl_comm.hpp).
//
// Every NCCL call on the communicator happens under mutex_, so that abort() from another thread
// never races one; the locks are short because nonblocking NCCL calls return at once and are
// then polled (ncclInProgress -> ncclSuccess) with the lock released between polls.
//
// The collectives themselves (and nccl_call, which every NCCL call of theirs goes through) are in
// nccl_collectives.cpp; the polling helpers both files use are in nccl_internal.hpp.
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
#include <string>

#include "models/cuda/check.hpp"
#include "models/cuda/nccl_internal.hpp"

namespace bih::cuda {
namespace {

const char* op_name(int op) {
  static const char* const kNames[] = {"all_reduce", "reduce_scatter", "all_gather",
                                       "all_reduce_tree_f32", "reduce_scatter_tree_f32"};
  return kNames[op];
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

using nccl_detail::async_state;
using nccl_detail::Backoff;
using nccl_detail::Deadline;
using nccl_detail::milliseconds_text;
using nccl_detail::nccl_error_text;
using nccl_detail::no_error;

namespace {

// ",NCCL_ALGO=Tree,NCCL_PROTO=Simple": the variables that pick NCCL's algorithm, where set.
std::string read_nccl_env() {
  std::string text;
  for (const char* name : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"}) {
    if (const char* value = std::getenv(name)) text += std::string(",") + name + "=" + value;
  }
  return text;
}

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
// (The members that nccl_collectives.cpp defines where NCCL is present are here too.)

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
