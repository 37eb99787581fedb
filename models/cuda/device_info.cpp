#include "models/cuda/device_info.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#if defined(BIH_HAVE_NCCL)
#include <nccl.h>
#endif

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/cuda/check.hpp"

namespace bih::cuda {
namespace {

// 13000 -> "13.0"; 580159 style driver numbers are not what CUDA reports (it gives 13000 too).
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace

nlohmann::json gpu_environment() {
  nlohmann::json gpu = nlohmann::json::object();
  const int count = device_count();
  gpu["count"] = count;
  if (count > 0) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) gpu["name"] = std::string(prop.name);
  }
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
    gpu["driver"] = "CUDA " + cuda_version_string(driver);
  }
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    gpu["cuda_runtime"] = cuda_version_string(runtime);
  }
  const size_t cublaslt = cublasLtGetVersion();
  gpu["cublas_version"] = std::to_string(cublaslt / 10000) + "." +
                          std::to_string((cublaslt / 100) % 100) + "." +
                          std::to_string(cublaslt % 100);
#if defined(BIH_HAVE_NCCL)
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    gpu["nccl_version"] = std::to_string(nccl / 10000) + "." + std::to_string((nccl / 100) % 100) +
                          "." + std::to_string(nccl % 100);
  }
#endif
  // A failed query leaves a sticky error for the next CUDA call in this thread: clear it.
  cudaGetLastError();
  return gpu;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

int multiprocessor_count() {
  int device = 0;
  cudaCheck(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::vector<int> known;  // per device; 0: not asked yet
  const std::lock_guard<std::mutex> lock(mutex);
  if (known.size() <= static_cast<size_t>(device)) known.resize(device + 1, 0);
  if (known[device] == 0) {
    cudaCheck(cudaDeviceGetAttribute(&known[device], cudaDevAttrMultiProcessorCount, device));
  }
  return known[device];
}

void allow_dynamic_shared_memory(const void* kernel, size_t bytes) {
  constexpr size_t kDefaultDynamicSmem = 48 * 1024;
  if (bytes <= kDefaultDynamicSmem) return;
  int device = 0;
  cudaCheck(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device): bytes
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& done = allowed[{kernel, device}];
  if (done >= bytes) return;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t set = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
  cudaCheck(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaCheck(set);
  done = bytes;
}

}  // namespace bih::cuda
