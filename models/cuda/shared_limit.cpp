// shared_limit.cpp: see shared_limit.hpp.
#include "models/cuda/shared_limit.hpp"

#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <utility>

#include "models/cuda/check.hpp"

namespace bih::cuda {

void allow_max_dynamic_shared(const void* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;
  int device = 0;
  cudaCheck(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (!raised.insert({kernel, device}).second) return;
  try {
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(kMaxDynamicSharedBytes)));
  } catch (...) {
    raised.erase({kernel, device});
    throw;
  }
}

}  // namespace bih::cuda
