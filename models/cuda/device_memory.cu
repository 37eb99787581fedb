// device_memory.cu: device memory for plain C++ callers (device_alloc, the copies, synchronize)
// and the DeviceRopeTable that owns the RoPE table's device copy (kernels.hpp): the host-side
// runtime calls of the non-GEMM kernels, kept apart from the kernels themselves.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "models/cuda/check.hpp"
#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"

namespace bih::cuda {
namespace {

using device::require;

}  // namespace

// ---- device memory ----------------------------------------------------------------------------
void* device_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  cudaCheck(cudaMalloc(&ptr, bytes));
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr != nullptr) cudaFree(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}

void copy_device(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void synchronize(Stream stream) { cudaCheck(cudaStreamSynchronize(stream)); }

// ---- RoPE table -------------------------------------------------------------------------------
DeviceRopeTable::DeviceRopeTable(const float* host_cos, const float* host_sin, int head_dim,
                                 int max_pos)
    : head_dim_(head_dim), max_pos_(max_pos) {
  require(head_dim > 0 && head_dim % 2 == 0 && max_pos >= 0,
          "DeviceRopeTable: need an even head_dim > 0 and max_pos >= 0; got head_dim " +
              std::to_string(head_dim) + ", max_pos " + std::to_string(max_pos));
  const size_t bytes = sizeof(float) * static_cast<size_t>(max_pos) * (head_dim / 2);
  cos_ = static_cast<float*>(device_alloc(bytes));
  sin_ = static_cast<float*>(device_alloc(bytes));
  if (bytes > 0) {
    cudaCheck(cudaMemcpy(cos_, host_cos, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(sin_, host_sin, bytes, cudaMemcpyHostToDevice));
  }
}

DeviceRopeTable::~DeviceRopeTable() {
  device_free(cos_);
  device_free(sin_);
}

DeviceRopeTable::DeviceRopeTable(DeviceRopeTable&& other) noexcept
    : cos_(std::exchange(other.cos_, nullptr)),
      sin_(std::exchange(other.sin_, nullptr)),
      head_dim_(std::exchange(other.head_dim_, 0)),
      max_pos_(std::exchange(other.max_pos_, 0)) {}

DeviceRopeTable& DeviceRopeTable::operator=(DeviceRopeTable&& other) noexcept {
  if (this != &other) {
    device_free(cos_);
    device_free(sin_);
    cos_ = std::exchange(other.cos_, nullptr);
    sin_ = std::exchange(other.sin_, nullptr);
    head_dim_ = std::exchange(other.head_dim_, 0);
    max_pos_ = std::exchange(other.max_pos_, 0);
  }
  return *this;
}

}  // namespace bih::cuda
