// copy_bandwidth.cpp: the device's measured copy bandwidth (copy_bandwidth.hpp).
#include "bench/cuda/copy_bandwidth.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "models/cuda/check.hpp"
#include "models/cuda/cuda_handles.hpp"

namespace bih::bench {

double copy_bandwidth() {
  static const double bandwidth = [] {
    const size_t bytes = size_t{1} << 31;
    void* a = nullptr;
    void* b = nullptr;
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    const cuda::OwnedEvent start{cudaEventDefault};
    const cuda::OwnedEvent stop{cudaEventDefault};
    cudaCheck(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
    float best_ms = 1e30f;
    for (int i = 0; i < 5; ++i) {
      cudaCheck(cudaEventRecord(start.get()));
      cudaCheck(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
      cudaCheck(cudaEventRecord(stop.get()));
      cudaCheck(cudaEventSynchronize(stop.get()));
      float ms = 0;
      cudaCheck(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      best_ms = std::min(best_ms, ms);
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3);
  }();
  return bandwidth;
}

}  // namespace bih::bench
