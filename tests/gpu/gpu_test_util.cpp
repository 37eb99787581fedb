// gpu_test_util.cpp: the CUDA runtime calls behind gpu_test_util.hpp's DeviceBuffer.
#include "tests/gpu/gpu_test_util.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

#include "models/cuda/check.hpp"

namespace bih::test {

bool gpu_required() {
  const char* v = std::getenv("BIH_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::string gpu_unavailable_reason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no usable CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) +
           " (" + cudaGetErrorString(e) + ")";
  }
  return count == 0 ? "no CUDA device visible" : "";
}

int compute_capability_major() {
  int device = 0;
  int major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes > 0) cudaCheck(cudaMalloc(&p, bytes));
  return p;
}

void device_free(void* p) {
  if (p != nullptr) cudaFree(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_synchronize() { cudaCheck(cudaDeviceSynchronize()); }

std::vector<bf16> random_bf16(size_t n, uint64_t seed, float scale) {
  std::vector<bf16> v(n);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& e : v) {
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    e = to_bf16((2.0f * unit - 1.0f) * scale);
  }
  return v;
}

}  // namespace bih::test
