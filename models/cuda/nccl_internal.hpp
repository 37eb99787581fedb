// nccl_internal.hpp: what the NcclCommunicator files share (internal to nccl_comm.cpp and
// nccl_collectives.cpp; not part of the API, which is nccl_comm.hpp).
//
// The helpers of every polled NCCL wait (initialization, teardown, the watchdog, a collective's
// enqueue): the backoff between polls, the deadline, the communicator's asynchronous state and
// NCCL's error text. They live in nccl_detail (a named namespace, so that they are one entity
// across both files), and exist only where this build has NCCL.
#pragma once

#if defined(BIH_HAVE_NCCL)
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace bih::cuda::nccl_detail {

inline std::string milliseconds_text(std::chrono::milliseconds t) {
  return std::to_string(t.count()) + " ms";
}

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
inline bool no_error(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// The communicator's state: ncclSuccess, ncclInProgress (a call still being enqueued) or an error.
inline ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  return r != ncclSuccess ? r : state;
}

inline std::string nccl_error_text(ncclResult_t r) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  return text;
}

}  // namespace bih::cuda::nccl_detail

#endif  // BIH_HAVE_NCCL
