// cuda_handles.hpp: owning handles for a CUDA stream and a CUDA event (models/cuda and its tools).
//
// OwnedStream's destructor waits for the stream's work before destroying it: declared after the
// buffers its work touches, it keeps them alive until that work is done, on error paths too.
#pragma once

#include <cuda_runtime_api.h>

#include "models/cuda/check.hpp"

namespace bih::cuda {

class OwnedStream {
 public:
  OwnedStream() { cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { cudaCheck(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// flags: cudaEventDisableTiming for ordering only, cudaEventDefault to time with it.
class OwnedEvent {
 public:
  explicit OwnedEvent(unsigned flags = cudaEventDisableTiming) {
    cudaCheck(cudaEventCreateWithFlags(&event_, flags));
  }
  ~OwnedEvent() { cudaEventDestroy(event_); }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace bih::cuda
